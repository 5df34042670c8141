/*
 * The API reference's initialisation (02), runtime configuration (03), device (04), context
 * (05), stream (06) and event (07) chapters, function by function: every function the chapters
 * document is called here, with the edges config_chapter_edges.c and
 * device_context_stream_event_edges.c do not walk. For each function: its NULL arguments
 * (100000, the ACL layer's parameter code, before a handle or device is looked up or another
 * argument checked), a destroyed handle (107017), another context's stream (107003) and
 * another device's, out-of-range device IDs (107001) and values (107000), the flags and their
 * combinations, the states the reference describes (init and finalize callbacks registered
 * before aclInit, the finalize callback at the last aclFinalizeReference, a second aclInit
 * cycle; process, context, device, stream and thread scopes of parameters and limits; a
 * setting that takes effect at the next aclrtSetDevice; the default streams a state callback
 * is told of; a stream waiting after another stream's wait and reset of the event, held until
 * the next record; an Ex event's records replacing their capture) and what an Atlas A2 does
 * not support (the SIMT limits: 207000). Where the reference's error
 * table names the code for a situation the code is checked, else only a failure. Prints a line
 * for each mismatch, then how many checks ran. Compiled by tests/c_programs.rs (also against
 * CANN's own headers), which compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"
#include "model_helpers.h"

/* aclrtQueryEvent is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* CHECK for the sections, which return nothing: a failed step counts as a wrong check and
 * ends its section. */
#define CHECK_VOID(call)                                                                      \
    do {                                                                                      \
        if ((call) != ACL_SUCCESS) {                                                          \
            holds(#call " succeeded", 0);                                                    \
            return;                                                                           \
        }                                                                                     \
    } while (0)

static aclrtContext g_primary;
/* Another context of device 0, with a stream of its own. */
static aclrtContext g_side;
static aclrtStream g_side_stream;
/* A context of device 1, with a stream of its own. */
static aclrtContext g_far;
static aclrtStream g_far_stream;
/* A stream and an event that were destroyed. */
static aclrtStream g_gone;
static aclrtEvent g_gone_event;

/* ---- 02 initialisation: callbacks and their user data ---- */

static int g_init_calls;
static void *g_init_data;
static int g_finalize_calls;
static void *g_finalize_data;
static int g_unregistered_calls;

static aclError on_init(const char *config, size_t len, void *data)
{
    (void)config;
    (void)len;
    ++g_init_calls;
    g_init_data = data;
    return ACL_SUCCESS;
}

static aclError on_finalize(void *data)
{
    ++g_finalize_calls;
    g_finalize_data = data;
    return ACL_SUCCESS;
}

static aclError never_finalize(void *data)
{
    (void)data;
    ++g_unregistered_calls;
    return ACL_SUCCESS;
}

static aclError never_init(const char *config, size_t len, void *data)
{
    (void)config;
    (void)len;
    (void)data;
    ++g_unregistered_calls;
    return ACL_SUCCESS;
}

static int g_marker;

/* Before aclInit: a registered init callback runs once, at aclInit, with its user data; one
 * unregistered before aclInit never runs; each type keeps its own registrations. */
static void init_callbacks_before_init(void)
{
    EXPECT(aclInitCallbackRegister(ACL_REG_TYPE_ACL_MODEL, on_init, &g_marker), ACL_SUCCESS);
    EXPECT(aclInitCallbackRegister(ACL_REG_TYPE_ACL_OP_EXECUTOR, never_init, NULL), ACL_SUCCESS);
    EXPECT(aclInitCallbackUnRegister(ACL_REG_TYPE_ACL_OP_EXECUTOR, never_init), ACL_SUCCESS);
    EXPECT(aclFinalizeCallbackRegister(ACL_REG_TYPE_ACL_MODEL, on_finalize, &g_marker),
           ACL_SUCCESS);
    EXPECT(aclFinalizeCallbackRegister(ACL_REG_TYPE_ACL_DVPP, never_finalize, NULL), ACL_SUCCESS);
    EXPECT(aclFinalizeCallbackUnRegister(ACL_REG_TYPE_ACL_DVPP, never_finalize), ACL_SUCCESS);
    HOLDS(g_init_calls == 0);
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    HOLDS(g_init_calls == 1 && g_init_data == &g_marker);
    HOLDS(g_finalize_calls == 0 && g_unregistered_calls == 0);
    /* A repeated aclInit does not run the init callbacks again. */
    EXPECT(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    HOLDS(g_init_calls == 1);
}

/* ---- 02 the last aclFinalizeReference, and a second cycle ---- */

static void finalize_and_again(void)
{
    uint64_t left = 77;
    /* aclInit ran twice (once refused as a repeat): the first aclFinalizeReference leaves one
     * reference and runs no finalize callback. */
    EXPECT(aclFinalizeReference(&left), ACL_SUCCESS);
    HOLDS(left == 1);
    HOLDS(g_finalize_calls == 0);
    EXPECT(aclFinalizeReference(&left), ACL_SUCCESS);
    HOLDS(left == 0);
    HOLDS(g_finalize_calls == 1 && g_finalize_data == &g_marker);
    HOLDS(g_unregistered_calls == 0);
    /* aclInit --> work --> aclFinalize --> aclInit --> work --> aclFinalize. */
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    HOLDS(g_init_calls == 2);
    aclrtStream stream = NULL;
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclInitCallbackUnRegister(ACL_REG_TYPE_ACL_MODEL, on_init), ACL_SUCCESS);
    EXPECT(aclFinalizeCallbackUnRegister(ACL_REG_TYPE_ACL_MODEL, on_finalize), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    HOLDS(g_finalize_calls == 1);
    left = 77;
    EXPECT(aclFinalizeReference(&left), ACL_ERROR_REPEAT_FINALIZE);
}

/* ---- 03 runtime parameters of the process ---- */

static void process_parameters(void)
{
    int64_t value = 77;
    /* Every option reads 0 until set. */
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    value = 77;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    value = 77;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_ENABLE_KERNEL_EARLY_START, &value), ACL_SUCCESS);
    HOLDS(value == 0);

    /* The process's value and a context's are separate: neither sets the other. */
    EXPECT(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1), ACL_SUCCESS);
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value),
           ACL_ERROR_RT_SYSPARAMOPT_NOT_SET);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 1), ACL_SUCCESS);
    value = 77;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    /* The last setting wins. */
    EXPECT(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 0), ACL_SUCCESS);
    value = 77;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    /* The NULL output first, whatever the option. */
    EXPECT(aclrtGetSysParamOpt((aclSysParamOpt)99, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCtxGetSysParamOpt((aclSysParamOpt)99, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtSetSysParamOpt((aclSysParamOpt)99, 0));
    FAILS(aclrtCtxSetSysParamOpt((aclSysParamOpt)99, 0));

    /* A context's value stays in that context: the side context has none. */
    CHECK_VOID(aclrtSetCurrentContext(g_side));
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value),
           ACL_ERROR_RT_SYSPARAMOPT_NOT_SET);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 0), ACL_SUCCESS);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    value = 77;
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 1);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 0), ACL_SUCCESS);
}

/* ---- 03 resource limits of the device, the stream and the thread ---- */

static uint32_t cube_in_thread(void)
{
    uint32_t value = 0;
    (void)aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value);
    return value;
}

static void *use_on_a_thread(void *arg)
{
    aclrtStream stream = arg;
    /* Another thread of the same context does not use what the main thread chose. */
    (void)aclrtSetCurrentContext(g_primary);
    uint32_t hardware = 0;
    (void)aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &hardware);
    holds("another thread reads the device's limit", cube_in_thread() == hardware);
    expect("aclrtUseStreamResInCurrentThread(stream) on another thread",
           aclrtUseStreamResInCurrentThread(stream), ACL_SUCCESS);
    holds("another thread then reads the stream's", cube_in_thread() == 1);
    expect("aclrtUnuseStreamResInCurrentThread(stream) on another thread",
           aclrtUnuseStreamResInCurrentThread(stream), ACL_SUCCESS);
    return NULL;
}

static void resource_limits(void)
{
    uint32_t cube = 0, vector = 0, value = 77;
    CHECK_VOID(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &cube));
    CHECK_VOID(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, &vector));
    HOLDS(cube > 2 && vector > 2);

    /* Device IDs: [0, count - 1]; the NULL output before the device. */
    EXPECT(aclrtGetDeviceResLimit(2, ACL_RT_DEV_RES_CUBE_CORE, &value),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetDeviceResLimit(-1, ACL_RT_DEV_RES_CUBE_CORE, &value),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetDeviceResLimit(2, ACL_RT_DEV_RES_CUBE_CORE, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetDeviceResLimit(2, ACL_RT_DEV_RES_CUBE_CORE, 1), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtResetDeviceResLimit(2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtResetDeviceResLimit(-1), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(value == 77);
    /* More cores than the hardware has, or none. */
    FAILS(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, cube + 1));
    FAILS(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, 0));
    EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, cube), ACL_SUCCESS);

    /* Each device keeps its own; each type its own. */
    EXPECT(aclrtSetDeviceResLimit(1, ACL_RT_DEV_RES_VECTOR_CORE, 3), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == vector);
    EXPECT(aclrtGetDeviceResLimit(1, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == cube);
    EXPECT(aclrtResetDeviceResLimit(1), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(1, ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == vector);

    /* Stream limits: stream > process > hardware. NULL is the default stream. */
    aclrtStream stream = NULL;
    CHECK_VOID(aclrtCreateStream(&stream));
    EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 4), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(NULL, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 4);
    EXPECT(aclrtSetStreamResLimit(NULL, ACL_RT_DEV_RES_CUBE_CORE, 2), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(NULL, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 2);
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 4);
    EXPECT(aclrtResetStreamResLimit(NULL), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(NULL, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 4);

    /* The thread reads the device's limit until it uses a stream's; the last use wins. */
    HOLDS(cube_in_thread() == 4);
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 1), ACL_SUCCESS);
    HOLDS(cube_in_thread() == 4);
    on_thread(use_on_a_thread, stream);
    HOLDS(cube_in_thread() == 4);
    EXPECT(aclrtUseStreamResInCurrentThread(stream), ACL_SUCCESS);
    HOLDS(cube_in_thread() == 1);
    /* A vector limit the stream does not set comes from the device. */
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == vector);
    /* The stream's reset gives the thread the device's limit again. */
    EXPECT(aclrtResetStreamResLimit(stream), ACL_SUCCESS);
    HOLDS(cube_in_thread() == 4);
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 3), ACL_SUCCESS);
    HOLDS(cube_in_thread() == 3);
    EXPECT(aclrtUnuseStreamResInCurrentThread(stream), ACL_SUCCESS);
    HOLDS(cube_in_thread() == 4);

    /* Handles: NULL outputs first, then destroyed (107017) and foreign (107003) streams. */
    EXPECT(aclrtGetStreamResLimit(g_gone, ACL_RT_DEV_RES_CUBE_CORE, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetStreamResLimit(g_gone, ACL_RT_DEV_RES_CUBE_CORE, &value),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetStreamResLimit(g_gone, ACL_RT_DEV_RES_CUBE_CORE, 1),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtResetStreamResLimit(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    FAILS(aclrtUseStreamResInCurrentThread(g_gone));
    FAILS(aclrtUnuseStreamResInCurrentThread(g_gone));
    EXPECT(aclrtSetStreamResLimit(g_side_stream, ACL_RT_DEV_RES_CUBE_CORE, 1),
           ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtResetStreamResLimit(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, NULL), ACL_ERROR_INVALID_PARAM);

    EXPECT(aclrtResetStreamResLimit(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceResLimit(0), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == cube);
    CHECK_VOID(aclrtDestroyStream(stream));
}

/* ---- 04 process-wide device limits ---- */

static void device_limits(void)
{
    size_t value = 77, before = 0;
    /* The SIMT limits are not supported on an Atlas A2, for the query and the setting. */
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE, &value),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMT_DVG_WARP_STACK_SIZE, &value),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMT_PRINTF_FIFO_SIZE, &value),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE, 1024),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMT_PRINTF_FIFO_SIZE, 1024 * 1024),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(value == 77);
    /* value "cannot be nullptr": refused before the limit is read. */
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetLimit((aclrtDeviceLimit)9, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtDeviceGetLimit((aclrtDeviceLimit)9, &value));
    FAILS(aclrtDeviceSetLimit((aclrtDeviceLimit)9, 1024));

    /* A setting reads back at once, while the devices already set keep the old one until
     * their next aclrtSetDevice; every device reads the same value. */
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &before), ACL_SUCCESS);
    HOLDS(before > 0);
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, 64 * 1024), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &value), ACL_SUCCESS);
    HOLDS(value == 64 * 1024);
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    value = 0;
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &value), ACL_SUCCESS);
    HOLDS(value == 64 * 1024);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    /* The last setting wins, aclInit's included. */
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, before), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &value), ACL_SUCCESS);
    HOLDS(value == before);
    /* A printf FIFO per core. */
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, &before),
           ACL_SUCCESS);
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, 4096),
           ACL_SUCCESS);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, &value),
           ACL_SUCCESS);
    HOLDS(value == 4096);
    EXPECT(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, before),
           ACL_SUCCESS);
}

/* ---- 04 device queries the other programs leave out ---- */

static void device_identity(void)
{
    aclrtRunMode mode = (aclrtRunMode)77;
    EXPECT(aclrtGetRunMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_HOST);
    EXPECT(aclrtGetRunMode(NULL), ACL_ERROR_INVALID_PARAM);

    /* aclrtGetSocName: one name for the environment (device 0's), the same from any device. */
    const char *soc = aclrtGetSocName();
    HOLDS(soc != NULL && strncmp(soc, "Ascend910B", 10) == 0);
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    const char *far_soc = aclrtGetSocName();
    HOLDS(far_soc != NULL && soc != NULL && strcmp(far_soc, soc) == 0);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));

    /* The six ID mappings: the identity for every device, refusals of IDs out of range, and
     * the NULL output before the ID is looked up. */
    typedef aclError (*Map)(const int32_t, int32_t *const);
    static const Map MAPS[] = {
        aclrtGetLogicDevIdByUserDevId, aclrtGetUserDevIdByLogicDevId,
        aclrtGetLogicDevIdByPhyDevId,  aclrtGetPhyDevIdByLogicDevId,
        aclrtGetUserDevIdByPhyDevId,   aclrtGetPhyDevIdByUserDevId,
    };
    for (size_t i = 0; i < sizeof MAPS / sizeof MAPS[0]; ++i) {
        int32_t out = 77;
        expect("a device ID mapping of device 1", MAPS[i](1, &out), ACL_SUCCESS);
        holds("device 1 maps to 1", out == 1);
        out = 77;
        expect("a device ID mapping of device 2", MAPS[i](2, &out),
               ACL_ERROR_RT_INVALID_DEVICEID);
        expect("a device ID mapping of device -1", MAPS[i](-1, &out),
               ACL_ERROR_RT_INVALID_DEVICEID);
        holds("a refused mapping writes nothing", out == 77);
        expect("a device ID mapping of device 2 into NULL", MAPS[i](2, NULL),
               ACL_ERROR_INVALID_PARAM);
    }

    /* The PCI bus ID and its device: a round trip for each device, two devices two IDs. */
    char bus[2][16];
    memset(bus, 0, sizeof bus);
    EXPECT(aclrtDeviceGetPCIBusId(0, bus[0], 13), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetPCIBusId(1, bus[1], (int32_t)sizeof bus[1]), ACL_SUCCESS);
    HOLDS(strlen(bus[0]) == 12 && bus[0][4] == ':' && bus[0][7] == ':' && bus[0][10] == '.');
    HOLDS(strcmp(bus[0], bus[1]) != 0);
    int32_t device = 77;
    EXPECT(aclrtDeviceGetByPCIBusId(bus[1], &device), ACL_SUCCESS);
    HOLDS(device == 1);
    EXPECT(aclrtDeviceGetByPCIBusId(bus[0], &device), ACL_SUCCESS);
    HOLDS(device == 0);
    device = 77;
    FAILS(aclrtDeviceGetByPCIBusId("ffff:ff:1f.7", &device));
    FAILS(aclrtDeviceGetByPCIBusId("not a bus id", &device));
    HOLDS(device == 77);
    EXPECT(aclrtDeviceGetByPCIBusId(NULL, &device), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetByPCIBusId(bus[0], NULL), ACL_ERROR_INVALID_PARAM);
    char short_bus[12];
    memset(short_bus, 'x', sizeof short_bus);
    FAILS(aclrtDeviceGetPCIBusId(0, short_bus, (int32_t)sizeof short_bus));
    HOLDS(short_bus[0] == 'x');
    EXPECT(aclrtDeviceGetPCIBusId(2, NULL, 13), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetPCIBusId(2, bus[0], 13), ACL_ERROR_RT_INVALID_DEVICEID);

    /* UUIDs: one per device, the same at each call. */
    aclrtUuid a, b, again;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&again, 0, sizeof again);
    EXPECT(aclrtDeviceGetUuid(0, &a), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetUuid(1, &b), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetUuid(0, &again), ACL_SUCCESS);
    HOLDS(memcmp(&a, &b, sizeof a) != 0 && memcmp(&a, &again, sizeof a) == 0);
    EXPECT(aclrtDeviceGetUuid(2, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetUuid(2, &a), ACL_ERROR_RT_INVALID_DEVICEID);

    /* The process ID as the device knows it. */
    int32_t pid = 0;
    EXPECT(aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    HOLDS(pid == (int32_t)getpid());
    EXPECT(aclrtDeviceGetBareTgid(NULL), ACL_ERROR_INVALID_PARAM);
}

static void atomic_capabilities(void)
{
    const aclrtAtomicOperation ops[3] = {ACL_RT_ATOMIC_OPERATION_INTEGER_ADD,
                                         ACL_RT_ATOMIC_OPERATION_CAS,
                                         ACL_RT_ATOMIC_OPERATION_FLOAT_ADD};
    uint32_t host[3] = {0x77, 0x77, 0x77}, p2p[3] = {0x77, 0x77, 0x77};
    EXPECT(aclrtDeviceGetHostAtomicCapabilities(host, ops, 3, 0), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(p2p, ops, 3, 0, 1), ACL_SUCCESS);
    /* Each answer is a mask of aclrtAtomicOperationCapability bits (up to VECTOR32X4). */
    for (int i = 0; i < 3; ++i) {
        holds("a host capability is a capability mask", (host[i] & ~0x1FFu) == 0);
        holds("a P2P capability is a capability mask", (p2p[i] & ~0x1FFu) == 0);
    }
    /* Either direction between two devices of the server. */
    uint32_t back[3] = {0};
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(back, ops, 3, 1, 0), ACL_SUCCESS);
    HOLDS(memcmp(back, p2p, sizeof back) == 0);
    /* Out-of-range devices, after the arrays; a refusal writes nothing. */
    uint32_t untouched[1] = {0x77};
    EXPECT(aclrtDeviceGetHostAtomicCapabilities(untouched, ops, 1, 2),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(untouched, ops, 1, 0, 2),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(untouched, ops, 1, -1, 0),
           ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(untouched[0] == 0x77);
    EXPECT(aclrtDeviceGetHostAtomicCapabilities(NULL, ops, 1, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetHostAtomicCapabilities(untouched, NULL, 1, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(untouched, ops, 0, 0, 2), ACL_ERROR_INVALID_PARAM);
}

/* ---- 04 the device state callbacks, peer access, synchronisation ---- */

static struct {
    int32_t device[8];
    aclrtDeviceState state[8];
    int count;
} g_device_states;

static void on_device_state(int32_t device, aclrtDeviceState state, void *args)
{
    (void)args;
    if (g_device_states.count < 8) {
        g_device_states.device[g_device_states.count] = device;
        g_device_states.state[g_device_states.count] = state;
    }
    ++g_device_states.count;
}

static void device_states_and_peers(void)
{
    /* One aclrtResetDeviceForce after two aclrtSetDevice calls of device 1 (held by its
     * explicit context too): RESET_PRE then RESET_POST once, with the device's ID. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtRegDeviceStateCallback("core chapters", on_device_state, NULL), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    HOLDS(g_device_states.count == 2);
    HOLDS(g_device_states.device[0] == 1 && g_device_states.device[1] == 1);
    HOLDS(g_device_states.state[0] == ACL_RT_DEVICE_STATE_RESET_PRE &&
          g_device_states.state[1] == ACL_RT_DEVICE_STATE_RESET_POST);
    /* Then a set and a reset: PRE then POST each. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(g_device_states.count == 6);
    HOLDS(g_device_states.device[2] == 1 && g_device_states.device[5] == 1);
    HOLDS(g_device_states.state[2] == ACL_RT_DEVICE_STATE_SET_PRE &&
          g_device_states.state[3] == ACL_RT_DEVICE_STATE_SET_POST &&
          g_device_states.state[4] == ACL_RT_DEVICE_STATE_RESET_PRE &&
          g_device_states.state[5] == ACL_RT_DEVICE_STATE_RESET_POST);
    EXPECT(aclrtRegDeviceStateCallback("core chapters", NULL, NULL), ACL_SUCCESS);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));

    /* Peer access is the current device's. Disabling what was never enabled changes
     * nothing and is no error. */
    int32_t status = 77;
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    /* From the far context (device 1) the direction 1 -> 0 is still off. */
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtDevicePeerAccessStatus(1, 0, &status), ACL_SUCCESS);
    HOLDS(status == 0);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 1);
    EXPECT(aclrtDeviceDisablePeerAccess(0), ACL_SUCCESS);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 1);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 0);

    /* aclrtSynchronizeDevice(WithTimeout) waits for the current context's device. */
    EXPECT(aclrtSynchronizeDevice(), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(-1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(60000), ACL_SUCCESS);
    FAILS(aclrtSynchronizeDeviceWithTimeout(-2));

    /* One task scheduler on an Atlas A2: the choice of either is accepted. */
    EXPECT(aclrtSetTsDevice(ACL_TS_ID_AIVECTOR), ACL_SUCCESS);
    EXPECT(aclrtSetTsDevice(ACL_TS_ID_AICORE), ACL_SUCCESS);
    FAILS(aclrtSetTsDevice(ACL_TS_ID_RESERVED));

    /* The count bounds every device ID: count - 1 is answered, count is not. */
    uint32_t count = 0;
    EXPECT(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    HOLDS(count == 2);
    aclrtDeviceStatus last = ACL_RT_DEVICE_STATUS_END;
    EXPECT(aclrtQueryDeviceStatus((int32_t)count - 1, &last), ACL_SUCCESS);
    EXPECT(aclrtQueryDeviceStatus((int32_t)count, &last), ACL_ERROR_RT_INVALID_DEVICEID);
    /* Whether two devices can share data does not depend on the order they are named in,
     * nor on the current device. */
    int32_t can = 77;
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtDeviceCanAccessPeer(&can, 1, 0), ACL_SUCCESS);
    HOLDS(can == 1);
    can = 77;
    EXPECT(aclrtDeviceCanAccessPeer(&can, 0, 1), ACL_SUCCESS);
    HOLDS(can == 1);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    /* The priority range: the least priority is the greatest number; a stream created with
     * either end reports it. */
    int32_t least = -1, greatest = -1;
    EXPECT(aclrtDeviceGetStreamPriorityRange(&least, &greatest), ACL_SUCCESS);
    HOLDS(least > greatest && greatest == 0);
    aclrtStream lowest = NULL;
    uint32_t priority = 77;
    CHECK_VOID(aclrtCreateStreamWithConfig(&lowest, (uint32_t)least, 0));
    EXPECT(aclrtStreamGetPriority(lowest, &priority), ACL_SUCCESS);
    HOLDS(priority == (uint32_t)least);
    CHECK_VOID(aclrtDestroyStream(lowest));

    /* Queries answered for each device, the NULL output before the device. */
    aclrtDeviceStatus device_status = ACL_RT_DEVICE_STATUS_END;
    EXPECT(aclrtQueryDeviceStatus(1, &device_status), ACL_SUCCESS);
    HOLDS(device_status == ACL_RT_DEVICE_STATUS_NORMAL);
    EXPECT(aclrtQueryDeviceStatus(2, NULL), ACL_ERROR_INVALID_PARAM);
    aclrtUtilizationInfo usage;
    memset(&usage, 0, sizeof usage);
    EXPECT(aclrtGetDeviceUtilizationRate(1, &usage), ACL_SUCCESS);
    HOLDS(usage.memoryUtilization == -1);
    EXPECT(aclrtGetDeviceUtilizationRate(2, NULL), ACL_ERROR_INVALID_PARAM);
    int32_t capability = 77;
    EXPECT(aclrtGetDeviceCapability(1, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV,
                                    &capability),
           ACL_SUCCESS);
    HOLDS(capability == ACL_DEV_FEATURE_SUPPORT || capability == ACL_DEV_FEATURE_NOT_SUPPORT);
    uint64_t topology = 0;
    EXPECT(aclrtGetDevicesTopo(1, 0, &topology), ACL_SUCCESS);
    HOLDS(topology != 0 && (topology & ~(uint64_t)0x7F) == 0);
    uint64_t back = 0;
    EXPECT(aclrtGetDevicesTopo(0, 1, &back), ACL_SUCCESS);
    HOLDS(back == topology);
    int64_t cores = 0;
    EXPECT(aclrtGetDeviceInfo(1, ACL_DEV_ATTR_AICORE_CORE_NUM, &cores), ACL_SUCCESS);
    HOLDS(cores > 0);
    EXPECT(aclrtGetDeviceInfo(2, ACL_DEV_ATTR_AICORE_CORE_NUM, &cores),
           ACL_ERROR_RT_INVALID_DEVICEID);
}

/* ---- 04 saturation mode and overflow status ---- */

static void overflow(aclrtStream stream)
{
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    /* The mode is the current device's: device 1 keeps its own. */
    EXPECT(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceSatMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_RT_OVERFLOW_MODE_SATURATION);
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtGetDeviceSatMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_RT_OVERFLOW_MODE_INFNAN);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_INFNAN), ACL_SUCCESS);

    /* In saturation mode the overflow flags live in device memory of the context. */
    void *flags = NULL;
    EXPECT(aclrtCtxGetFloatOverflowAddr(&flags), ACL_SUCCESS);
    HOLDS(flags != NULL);
    EXPECT(aclrtCtxGetFloatOverflowAddr(NULL), ACL_ERROR_INVALID_PARAM);

    /* The status task: 64 bytes of device memory, on a stream of the current context. */
    void *status = NULL;
    CHECK_VOID(aclrtMalloc(&status, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    uint8_t ones[64];
    memset(ones, 0xFF, sizeof ones);
    CHECK_VOID(put(status, ones, sizeof ones));
    EXPECT(aclrtResetOverflowStatus(stream), ACL_SUCCESS);
    EXPECT(aclrtGetOverflowStatus(status, 64, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(status) == 0);
    EXPECT(aclrtGetOverflowStatus(status, 64, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    EXPECT(aclrtGetOverflowStatus(status, 64, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetOverflowStatus(status, 64, g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtResetOverflowStatus(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtResetOverflowStatus(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    FAILS(aclrtGetOverflowStatus(status, 63, stream));
    EXPECT(aclrtGetOverflowStatus(NULL, 64, g_gone), ACL_ERROR_INVALID_PARAM);
    CHECK_VOID(aclrtFree(status));
}

/* ---- 05 contexts ---- */

static void *context_on_a_thread(void *arg)
{
    (void)arg;
    aclrtContext context = SENTINEL;
    /* A new thread has no context until it creates or sets one. */
    fails("aclrtGetCurrentContext on a new thread", aclrtGetCurrentContext(&context));
    holds("a refused query writes nothing", context == SENTINEL);
    aclrtContext own = NULL;
    expect("aclrtCreateContext(&own, 1) on a thread", aclrtCreateContext(&own, 1), ACL_SUCCESS);
    (void)aclrtGetCurrentContext(&context);
    holds("the thread's new context is current", context == own);
    int32_t device = -1;
    (void)aclrtGetDevice(&device);
    holds("its device is current", device == 1);
    expect("aclrtDestroyContext(own) on a thread", aclrtDestroyContext(own), ACL_SUCCESS);
    return NULL;
}

static void contexts(void)
{
    aclrtContext context = SENTINEL;
    EXPECT(aclrtCreateContext(NULL, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateContext(&context, 2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtCreateContext(&context, -1), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(context == SENTINEL);
    EXPECT(aclrtDestroyContext(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    on_thread(context_on_a_thread, NULL);
    /* This thread's context is untouched by the other's. */
    EXPECT(aclrtGetCurrentContext(&context), ACL_SUCCESS);
    HOLDS(context == g_primary);

    /* A context's default stream: its own, not the device's other contexts'. */
    aclrtStream side_default = NULL, primary_default = NULL;
    CHECK_VOID(aclrtSetCurrentContext(g_side));
    EXPECT(aclrtCtxGetCurrentDefaultStream(&side_default), ACL_SUCCESS);
    int32_t side_id = -1, primary_id = -1;
    EXPECT(aclrtStreamGetId(NULL, &side_id), ACL_SUCCESS);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtCtxGetCurrentDefaultStream(&primary_default), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(NULL, &primary_id), ACL_SUCCESS);
    HOLDS(side_default != NULL && primary_default != NULL && side_default != primary_default);
    HOLDS(side_id != primary_id);

    /* A context's destruction destroys its streams: their handles are stale. */
    aclrtContext doomed = NULL;
    aclrtStream orphan = NULL;
    CHECK_VOID(aclrtCreateContext(&doomed, 0));
    CHECK_VOID(aclrtCreateStream(&orphan));
    EXPECT(aclrtDestroyContext(doomed), ACL_SUCCESS);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtSynchronizeStream(orphan), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyStream(orphan), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetCurrentContext(doomed), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyContext(doomed), ACL_ERROR_RT_INVALID_HANDLE);
    /* The default context's state: active on a device set, with flags reserved (NULL). */
    int32_t active = 77;
    EXPECT(aclrtGetPrimaryCtxState(0, NULL, &active), ACL_SUCCESS);
    HOLDS(active == 1);
    EXPECT(aclrtGetPrimaryCtxState(1, NULL, &active), ACL_SUCCESS);
    HOLDS(active == 0);
}

/* ---- 06 streams ---- */

static struct {
    aclrtStream stream[8];
    aclrtStreamState state[8];
    int count;
} g_stream_states;

static void on_stream_state(aclrtStream stream, aclrtStreamState state, void *args)
{
    (void)args;
    if (g_stream_states.count < 8) {
        g_stream_states.stream[g_stream_states.count] = stream;
        g_stream_states.state[g_stream_states.count] = state;
    }
    ++g_stream_states.count;
}

static void stream_state_callbacks(void)
{
    /* Explicit streams: CREATE_POST after the creation, DESTROY_PRE before the destruction,
     * with the stream's handle. */
    EXPECT(aclrtRegStreamStateCallback("core chapters", on_stream_state, NULL), ACL_SUCCESS);
    aclrtStream stream = NULL;
    CHECK_VOID(aclrtCreateStreamWithConfig(&stream, 0, ACL_STREAM_FAST_LAUNCH));
    HOLDS(g_stream_states.count == 1 && g_stream_states.stream[0] == stream &&
          g_stream_states.state[0] == ACL_RT_STREAM_STATE_CREATE_POST);
    CHECK_VOID(aclrtDestroyStreamForce(stream));
    HOLDS(g_stream_states.count == 2 && g_stream_states.stream[1] == stream &&
          g_stream_states.state[1] == ACL_RT_STREAM_STATE_DESTROY_PRE);

    /* Default streams too: an explicit context's, at its creation and destruction. */
    aclrtContext context = NULL;
    CHECK_VOID(aclrtCreateContext(&context, 0));
    aclrtStream own_default = NULL;
    CHECK_VOID(aclrtCtxGetCurrentDefaultStream(&own_default));
    HOLDS(g_stream_states.count == 3 && g_stream_states.stream[2] == own_default &&
          g_stream_states.state[2] == ACL_RT_STREAM_STATE_CREATE_POST);
    CHECK_VOID(aclrtDestroyContext(context));
    HOLDS(g_stream_states.count == 4 && g_stream_states.stream[3] == own_default &&
          g_stream_states.state[3] == ACL_RT_STREAM_STATE_DESTROY_PRE);
    /* And the default stream of a device's default context, at aclrtSetDevice and at the
     * aclrtResetDevice that releases it. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    aclrtStream primary_default = NULL;
    CHECK_VOID(aclrtCtxGetCurrentDefaultStream(&primary_default));
    HOLDS(g_stream_states.count == 5 && g_stream_states.stream[4] == primary_default &&
          g_stream_states.state[4] == ACL_RT_STREAM_STATE_CREATE_POST);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(g_stream_states.count == 6 && g_stream_states.stream[5] == primary_default &&
          g_stream_states.state[5] == ACL_RT_STREAM_STATE_DESTROY_PRE);
    CHECK_VOID(aclrtSetCurrentContext(g_primary));

    /* Unregistered: nothing more is told. */
    EXPECT(aclrtRegStreamStateCallback("core chapters", NULL, NULL), ACL_SUCCESS);
    CHECK_VOID(aclrtCreateStream(&stream));
    CHECK_VOID(aclrtDestroyStream(stream));
    HOLDS(g_stream_states.count == 6);
}

static void stream_attributes(aclrtStream stream)
{
    aclrtStreamAttrValue value;
    memset(&value, 0, sizeof value);

    /* Overflow check: the attribute and aclrtSetStreamOverflowSwitch are one switch. */
    value.overflowSwitch = 1;
    EXPECT(aclrtSetStreamAttribute(stream, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, &value),
           ACL_SUCCESS);
    uint32_t flag = 77;
    EXPECT(aclrtGetStreamOverflowSwitch(stream, &flag), ACL_SUCCESS);
    HOLDS(flag == 1);
    EXPECT(aclrtSetStreamOverflowSwitch(stream, 0), ACL_SUCCESS);
    memset(&value, 0xFF, sizeof value);
    EXPECT(aclrtGetStreamAttribute(stream, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, &value),
           ACL_SUCCESS);
    HOLDS(value.overflowSwitch == 0);

    /* An Atlas A2 takes the default stream (NULL) for the attributes. */
    memset(&value, 0, sizeof value);
    value.userCustomTag = 42;
    EXPECT(aclrtSetStreamAttribute(NULL, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value), ACL_SUCCESS);
    memset(&value, 0, sizeof value);
    EXPECT(aclrtGetStreamAttribute(NULL, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value), ACL_SUCCESS);
    HOLDS(value.userCustomTag == 42);
    /* The default stream's tag is not another stream's. */
    memset(&value, 0, sizeof value);
    EXPECT(aclrtGetStreamAttribute(stream, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value), ACL_SUCCESS);
    HOLDS(value.userCustomTag == 0);

    /* Priority: the attribute and aclrtStreamGetPriority agree. */
    memset(&value, 0, sizeof value);
    value.streamPriority = 3;
    EXPECT(aclrtSetStreamAttribute(stream, ACL_STREAM_ATTR_PRIORITY, &value), ACL_SUCCESS);
    uint32_t priority = 77;
    EXPECT(aclrtStreamGetPriority(stream, &priority), ACL_SUCCESS);
    HOLDS(priority == 3);
    memset(&value, 0, sizeof value);
    EXPECT(aclrtGetStreamAttribute(stream, ACL_STREAM_ATTR_PRIORITY, &value), ACL_SUCCESS);
    HOLDS(value.streamPriority == 3);

    /* The failure mode: the attribute reads what aclrtSetStreamFailureMode chose. */
    memset(&value, 0xFF, sizeof value);
    EXPECT(aclrtGetStreamAttribute(stream, ACL_STREAM_ATTR_FAILURE_MODE, &value), ACL_SUCCESS);
    HOLDS(value.failureMode == ACL_CONTINUE_ON_FAILURE);

    /* Handles: destroyed (107017), another context's (107003) for the setter. */
    memset(&value, 0, sizeof value);
    EXPECT(aclrtSetStreamAttribute(g_gone, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetStreamAttribute(g_gone, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetStreamAttribute(g_side_stream, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value),
           ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtSetStreamAttribute(g_gone, ACL_STREAM_ATTR_USER_CUSTOM_TAG, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetStreamAttribute(g_gone, ACL_STREAM_ATTR_USER_CUSTOM_TAG, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetStreamOverflowSwitch(g_side_stream, 1), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtGetStreamOverflowSwitch(g_gone, &flag), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetStreamOverflowSwitch(g_gone, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetStreamFailureMode(g_gone, ACL_STOP_ON_FAILURE), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetStreamFailureMode(g_side_stream, ACL_STOP_ON_FAILURE),
           ACL_ERROR_RT_STREAM_CONTEXT);
}

static void stream_handles(void)
{
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    int32_t id = 77;
    uint32_t value = 77;

    /* A NULL output, with flags a creation could take. */
    EXPECT(aclrtCreateStreamWithConfig(NULL, 0, ACL_STREAM_FAST_LAUNCH), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetStreamAvailableNum(NULL), ACL_ERROR_INVALID_PARAM);

    /* A destroyed stream: 107017 from every function that takes one. */
    EXPECT(aclrtDestroyStream(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyStreamForce(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamQuery(g_gone, &status), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeStream(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeStreamWithTimeout(g_gone, -1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamAbort(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamStop(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtPersistentTaskClean(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamGetId(g_gone, &id), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamGetPriority(g_gone, &value), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamGetFlags(g_gone, &value), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(id == 77 && value == 77 && status == ACL_STREAM_STATUS_RESERVED);

    /* Another context's stream: not destroyed, synchronised, aborted or stopped from here. */
    EXPECT(aclrtDestroyStream(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtDestroyStreamForce(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtDestroyStream(g_far_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtStreamAbort(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtStreamStop(g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);

    /* Flags: each one alone reads back; PERSISTENT with FAST_LAUNCH too. */
    static const uint32_t FLAGS[] = {ACL_STREAM_FAST_LAUNCH, ACL_STREAM_FAST_SYNC,
                                     ACL_STREAM_PERSISTENT,  ACL_STREAM_HUGE,
                                     ACL_STREAM_CPU_SCHEDULE, ACL_STREAM_DEVICE_USE_ONLY,
                                     ACL_STREAM_PERSISTENT | ACL_STREAM_FAST_LAUNCH};
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; ++i) {
        aclrtStream stream = NULL;
        uint32_t flags = 77;
        expect("aclrtCreateStreamWithConfig(&stream, 0, flag)",
               aclrtCreateStreamWithConfig(&stream, 0, FLAGS[i]), ACL_SUCCESS);
        expect("aclrtStreamGetFlags(stream, &flags)", aclrtStreamGetFlags(stream, &flags),
               ACL_SUCCESS);
        holds("the stream's flags read back", flags == FLAGS[i]);
        /* These streams' synchronisations do nothing and succeed. */
        expect("aclrtSynchronizeStreamWithTimeout(stream, 1000)",
               aclrtSynchronizeStreamWithTimeout(stream, 1000), ACL_SUCCESS);
        expect("aclrtDestroyStream(stream)", aclrtDestroyStream(stream), ACL_SUCCESS);
    }

    /* The available count: one fewer per stream, one more per destruction. */
    uint32_t before = 0, during = 0, after = 0;
    aclrtStream stream = NULL;
    EXPECT(aclrtGetStreamAvailableNum(&before), ACL_SUCCESS);
    CHECK_VOID(aclrtCreateStream(&stream));
    EXPECT(aclrtGetStreamAvailableNum(&during), ACL_SUCCESS);
    CHECK_VOID(aclrtDestroyStream(stream));
    EXPECT(aclrtGetStreamAvailableNum(&after), ACL_SUCCESS);
    HOLDS(during + 1 == before && after == before);
    /* The device's count: device 1's side does not change device 0's. */
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    uint32_t far_before = 0;
    EXPECT(aclrtGetStreamAvailableNum(&far_before), ACL_SUCCESS);
    CHECK_VOID(aclrtCreateStream(&stream));
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtGetStreamAvailableNum(&after), ACL_SUCCESS);
    HOLDS(after == before);
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    CHECK_VOID(aclrtDestroyStream(stream));
    CHECK_VOID(aclrtSetCurrentContext(g_primary));

    /* The default stream: its priority is the highest (0), its ID that of NULL. */
    aclrtStream own_default = NULL;
    CHECK_VOID(aclrtCtxGetCurrentDefaultStream(&own_default));
    EXPECT(aclrtStreamGetPriority(NULL, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    int32_t by_null = -1, by_handle = -2;
    EXPECT(aclrtStreamGetId(NULL, &by_null), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(own_default, &by_handle), ACL_SUCCESS);
    HOLDS(by_null == by_handle);
    /* Stopping, cleaning and destroying it are refused. */
    FAILS(aclrtStreamStop(NULL));
    FAILS(aclrtDestroyStream(own_default));
    FAILS(aclrtPersistentTaskClean(NULL));
}

static void stream_models(void)
{
    /* aclrtActiveStream and aclrtSwitchStream take streams bound to an instance only; a
     * falseStream is reserved (NULL). */
    aclrtStream plain = NULL;
    CHECK_VOID(aclrtCreateStream(&plain));
    aclrtStream bound = persistent_stream(), other = persistent_stream();
    aclmdlRI model = NULL;
    CHECK_VOID(aclmdlRIBuildBegin(&model, 0));
    CHECK_VOID(aclmdlRIBindStream(model, bound, HEAD));
    CHECK_VOID(aclmdlRIBindStream(model, other, ACTIVATED));
    FAILS(aclrtActiveStream(other, plain));
    FAILS(aclrtActiveStream(plain, bound));
    FAILS(aclrtActiveStream(other, g_gone));
    void *words = NULL;
    CHECK_VOID(aclrtMalloc(&words, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, other, other, bound));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, other, NULL, plain));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, plain, NULL, bound));
    EXPECT(aclrtActiveStream(other, bound), ACL_SUCCESS);
    /* Aborting or stopping a stream bound to an instance is not supported. */
    EXPECT(aclrtStreamAbort(bound), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtStreamStop(bound), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK_VOID(aclmdlRIEndTask(model, bound));
    CHECK_VOID(aclmdlRIEndTask(model, other));
    CHECK_VOID(aclmdlRIBuildEnd(model, NULL));
    CHECK_VOID(aclmdlRIDestroy(model));
    CHECK_VOID(aclrtFree(words));
    CHECK_VOID(aclrtDestroyStream(bound));
    CHECK_VOID(aclrtDestroyStream(other));
    CHECK_VOID(aclrtDestroyStream(plain));
}

/* ---- 07 events ---- */

static void event_handles(aclrtStream stream)
{
    aclrtEvent out = SENTINEL;
    /* EXTERNAL and IPC do not combine with another flag. */
    FAILS(aclrtCreateEventWithFlag(&out, ACL_EVENT_EXTERNAL | ACL_EVENT_TIME_LINE));
    FAILS(aclrtCreateEventExWithFlag(&out, ACL_EVENT_IPC | ACL_EVENT_TIME_LINE));
    HOLDS(out == SENTINEL);
    /* A device-only event is supported on an Atlas A2. */
    aclrtEvent device_only = NULL;
    EXPECT(aclrtCreateEventWithFlag(&device_only, ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_SYNC),
           ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(device_only), ACL_SUCCESS);

    /* A destroyed event: 107017 from every function that takes one, NULL outputs first. */
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclrtEventWaitStatus waited = ACL_EVENT_WAIT_STATUS_RESERVED;
    aclrtEventStatus legacy = ACL_EVENT_STATUS_RESERVED;
    uint64_t stamp = 77;
    uint32_t id = 77;
    float ms = 7.0f;
    EXPECT(aclrtDestroyEvent(g_gone_event), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordEvent(g_gone_event, stream), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordEventWithFlag(g_gone_event, stream, ACL_EVENT_RECORD_DEFAULT),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtResetEvent(g_gone_event, stream), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtQueryEvent(g_gone_event, &legacy), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtQueryEventStatus(g_gone_event, &recorded), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtQueryEventWaitStatus(g_gone_event, &waited), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeEvent(g_gone_event), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeEventWithTimeout(g_gone_event, -1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEvent(stream, g_gone_event), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEventWithTimeout(stream, g_gone_event, 0), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEventWithFlag(stream, g_gone_event, 0, ACL_EVENT_WAIT_DEFAULT),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtEventGetTimestamp(g_gone_event, &stamp), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetEventId(g_gone_event, &id), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtEventElapsedTime(&ms, g_gone_event, g_gone_event), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(stamp == 77 && id == 77 && ms == 7.0f && legacy == ACL_EVENT_STATUS_RESERVED);
    EXPECT(aclrtQueryEvent(g_gone_event, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryEventWaitStatus(g_gone_event, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetEventAvailNum(NULL), ACL_ERROR_INVALID_PARAM);

    /* An event of device 1 on a stream of device 0, the current context's: 107003. */
    aclrtEvent far = NULL;
    CHECK_VOID(aclrtSetCurrentContext(g_far));
    CHECK_VOID(aclrtCreateEventWithFlag(&far, ACL_EVENT_SYNC));
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtRecordEvent(far, stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtStreamWaitEvent(stream, far), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtResetEvent(far, stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtDestroyEvent(far), ACL_SUCCESS);
    /* An event of another context of the same device serves this context's streams. */
    aclrtEvent event = NULL;
    CHECK_VOID(aclrtSetCurrentContext(g_side));
    CHECK_VOID(aclrtCreateEventWithFlag(&event, ACL_EVENT_SYNC));
    CHECK_VOID(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtRecordEvent(event, stream), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(stream, event), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(event), ACL_SUCCESS);
    /* Another context's stream of this device: 107003. */
    EXPECT(aclrtResetEvent(event, g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtStreamWaitEventWithTimeout(g_side_stream, event, 0), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtRecordEventWithFlag(event, g_side_stream, ACL_EVENT_RECORD_DEFAULT),
           ACL_ERROR_RT_STREAM_CONTEXT);

    /* NULL is the default stream for records, resets and waits. */
    EXPECT(aclrtRecordEvent(event, NULL), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(stream, event), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtQueryEventWaitStatus(event, &waited), ACL_SUCCESS);
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_COMPLETE);
    EXPECT(aclrtResetEvent(event, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    CHECK_VOID(aclrtDestroyEvent(event));

    /* The process's wait timeout: 0 takes it away, any value is accepted. */
    EXPECT(aclrtSetOpWaitTimeout(0), ACL_SUCCESS);
}

/* The reference's figure for aclrtResetEvent: a stream waiting for the event after another
 * stream's wait and reset cannot go on, since the reset cleared the event; the next record
 * lets it. */
static void waits_after_a_reset(aclrtEvent event, aclrtStream s1, aclrtStream s2,
                                aclrtStream s3)
{
    aclrtEventWaitStatus waited = ACL_EVENT_WAIT_STATUS_RESERVED;
    EXPECT(aclrtRecordEvent(event, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(s2, event), ACL_SUCCESS);
    EXPECT(aclrtResetEvent(event, s2), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(s3, event), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(s3, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtQueryEventWaitStatus(event, &waited), ACL_SUCCESS);
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_NOT_READY);
    EXPECT(aclrtRecordEvent(event, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s3), ACL_SUCCESS);
    EXPECT(aclrtQueryEventWaitStatus(event, &waited), ACL_SUCCESS);
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_COMPLETE);
}

static void resets(void)
{
    aclrtStream s1 = NULL, s2 = NULL, s3 = NULL;
    CHECK_VOID(aclrtCreateStream(&s1));
    CHECK_VOID(aclrtCreateStream(&s2));
    CHECK_VOID(aclrtCreateStream(&s3));
    aclrtEvent sync = NULL, legacy = NULL, fresh = NULL;
    CHECK_VOID(aclrtCreateEventWithFlag(&sync, ACL_EVENT_SYNC));
    CHECK_VOID(aclrtCreateEvent(&legacy));
    CHECK_VOID(aclrtCreateEventWithFlag(&fresh, ACL_EVENT_SYNC));
    waits_after_a_reset(sync, s1, s2, s3);
    waits_after_a_reset(legacy, s1, s2, s3);

    /* The timeout of a wait issued after a reset runs while no record comes. */
    EXPECT(aclrtResetEvent(sync, s2), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEventWithTimeout(s3, sync, 1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s3), ACL_ERROR_RT_WAIT_TIMEOUT);

    /* A record captured into an instance does not run, and does not end the wait; the
     * instance's execution records the event, and does. */
    aclrtStream capturing = NULL;
    aclmdlRI model = NULL;
    CHECK_VOID(aclrtCreateStream(&capturing));
    EXPECT(aclrtResetEvent(sync, s2), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(s3, sync), ACL_SUCCESS);
    CHECK_VOID(aclmdlRICaptureBegin(capturing, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    EXPECT(aclrtRecordEvent(sync, capturing), ACL_SUCCESS);
    CHECK_VOID(aclmdlRICaptureEnd(capturing, &model));
    EXPECT(aclrtSynchronizeStreamWithTimeout(s3, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclmdlRIExecuteAsync(model, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s3), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    CHECK_VOID(aclmdlRIDestroy(model));
    CHECK_VOID(aclrtDestroyStream(capturing));

    /* A reset of an event never recorded leaves it as it was: its waits wait for its first
     * record. */
    EXPECT(aclrtResetEvent(fresh, s2), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(s3, fresh), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(s3, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtRecordEvent(fresh, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s3), ACL_SUCCESS);

    /* A wait no record can end any more, its event destroyed, does not hold its stream. */
    EXPECT(aclrtResetEvent(legacy, s2), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(s3, legacy), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(legacy), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s3), ACL_SUCCESS);

    CHECK_VOID(aclrtDestroyEvent(sync));
    CHECK_VOID(aclrtDestroyEvent(fresh));
    CHECK_VOID(aclrtDestroyStream(s1));
    CHECK_VOID(aclrtDestroyStream(s2));
    CHECK_VOID(aclrtDestroyStream(s3));
}

/* An Ex event's record replaces what it captured, and a wait keeps the capture current when
 * it was issued: a later record, complete, does not end the wait; the event's status is its
 * latest record's. A notify holds the first record's stream. */
static void ex_records_replace_their_capture(void)
{
    aclrtStream held = NULL, waiter = NULL, idle = NULL;
    aclrtNotify gate = NULL;
    aclrtEvent ex = NULL;
    CHECK_VOID(aclrtCreateStream(&held));
    CHECK_VOID(aclrtCreateStream(&waiter));
    CHECK_VOID(aclrtCreateStream(&idle));
    CHECK_VOID(aclrtCreateNotify(&gate, ACL_NOTIFY_DEFAULT));
    CHECK_VOID(aclrtCreateEventExWithFlag(&ex, ACL_EVENT_SYNC));
    CHECK_VOID(aclrtWaitAndResetNotify(gate, held, 0));
    EXPECT(aclrtRecordEvent(ex, held), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(waiter, ex), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(ex, idle), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(idle), ACL_SUCCESS);
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    EXPECT(aclrtQueryEventStatus(ex, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtSynchronizeEvent(ex), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(waiter, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    /* A wait issued now takes the latest capture, complete: it does not wait. */
    EXPECT(aclrtStreamWaitEvent(idle, ex), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(idle), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(gate, idle), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(waiter), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(held), ACL_SUCCESS);
    CHECK_VOID(aclrtDestroyEvent(ex));
    CHECK_VOID(aclrtDestroyNotify(gate));
    CHECK_VOID(aclrtDestroyStream(held));
    CHECK_VOID(aclrtDestroyStream(waiter));
    CHECK_VOID(aclrtDestroyStream(idle));
}

static void ipc_events(aclrtStream stream)
{
    aclrtEvent ipc = NULL, opened = SENTINEL;
    aclrtIpcEventHandle handle;
    memset(&handle, 0, sizeof handle);
    CHECK_VOID(aclrtCreateEventExWithFlag(&ipc, ACL_EVENT_IPC));
    EXPECT(aclrtIpcGetEventHandle(ipc, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtIpcGetEventHandle(NULL, &handle), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtIpcGetEventHandle(g_gone_event, &handle), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtIpcGetEventHandle(ipc, &handle), ACL_SUCCESS);
    /* The handle opens in another process: not in its exporter's. A zeroed one names none. */
    FAILS(aclrtIpcOpenEventHandle(handle, &opened));
    aclrtIpcEventHandle zero;
    memset(&zero, 0, sizeof zero);
    FAILS(aclrtIpcOpenEventHandle(zero, &opened));
    HOLDS(opened == SENTINEL);
    EXPECT(aclrtIpcOpenEventHandle(handle, NULL), ACL_ERROR_INVALID_PARAM);
    /* An IPC event is recorded and waited for; the functions the reference excludes fail. */
    EXPECT(aclrtRecordEvent(ipc, stream), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(stream, ipc), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(ipc), ACL_SUCCESS);
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    EXPECT(aclrtQueryEventStatus(ipc, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    uint64_t stamp = 0;
    uint32_t id = 0;
    FAILS(aclrtEventGetTimestamp(ipc, &stamp));
    FAILS(aclrtGetEventId(ipc, &id));
    float ms = 0;
    FAILS(aclrtEventElapsedTime(&ms, ipc, ipc));
    FAILS(aclrtResetEvent(ipc, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(ipc), ACL_SUCCESS);
}

int main(void)
{
    /* A call that hangs ends the program rather than the test run. */
    alarm(300);
    init_callbacks_before_init();

    if (aclrtSetDevice(0) != ACL_SUCCESS || aclrtGetCurrentContext(&g_primary) != ACL_SUCCESS ||
        aclrtCreateContext(&g_side, 0) != ACL_SUCCESS ||
        aclrtCreateStream(&g_side_stream) != ACL_SUCCESS ||
        aclrtCreateContext(&g_far, 1) != ACL_SUCCESS ||
        aclrtCreateStream(&g_far_stream) != ACL_SUCCESS ||
        aclrtSetCurrentContext(g_primary) != ACL_SUCCESS ||
        aclrtCreateStream(&g_gone) != ACL_SUCCESS || aclrtDestroyStream(g_gone) != ACL_SUCCESS ||
        aclrtCreateEvent(&g_gone_event) != ACL_SUCCESS ||
        aclrtDestroyEvent(g_gone_event) != ACL_SUCCESS) {
        printf("setup failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));

    process_parameters();
    resource_limits();
    device_limits();
    device_identity();
    atomic_capabilities();
    device_states_and_peers();
    overflow(stream);
    contexts();
    stream_state_callbacks();
    stream_attributes(stream);
    stream_handles();
    stream_models();
    event_handles(stream);
    resets();
    ex_records_replace_their_capture();
    ipc_events(stream);

    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtSetCurrentContext(g_far));
    CHECK(aclrtDestroyStream(g_far_stream));
    CHECK(aclrtDestroyContext(g_far));
    CHECK(aclrtSetCurrentContext(g_side));
    CHECK(aclrtDestroyStream(g_side_stream));
    CHECK(aclrtDestroyContext(g_side));
    CHECK(aclrtSetCurrentContext(g_primary));
    CHECK(aclrtResetDevice(0));
    finalize_and_again();
    checks_done("documented edges");
    return 0;
}
