/*
 * The API reference's device, context, stream and event management chapters, function by
 * function, as an Atlas A2 answers them: every parameter check and which of two bad arguments
 * is refused first, the documented codes, defaults and limits. Devices: aclrtSetDevice's
 * reference count against aclrtResetDevice and aclrtResetDeviceForce (the reference's right and
 * wrong mixes, two threads forcing one device), the current context and device after each, the
 * device queries, peer access in one direction, the device state callbacks, the synchronous
 * waits with and without a timeout. Contexts: creation makes the context current, a switch
 * switches the device, the primary context is shared by threads and not destroyable, context
 * parameters have no default, what each context's default stream is and how many streams a
 * first context takes. Streams: priorities and flags, destruction rules, the failure mode set
 * once, queries, aborts and stops, stream counts. Events: the flags each creation accepts, the
 * states the queries report before, during and after a record, the timed waits, timestamps and
 * elapsed times, event counts. A stream is held by a value wait on a device word the program
 * writes when it wants the stream to go on, so nothing depends on timing. Where the reference
 * names a code (its error table pins a situation to one) the code is checked, else only a
 * failure. Prints a line for each mismatch, then how many checks ran. Compiled by
 * tests/c_programs.rs (also against CANN's own headers), which compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"
#include "model_helpers.h"
#include "npusim/control.h"

/* A handle no call ever returned: stale handles are refused without being read. */
#define FORGED ((void *)(uintptr_t)0x5E17)

static uint32_t g_devices;

/* ---- a latch: a value wait that holds a stream until the program writes the word ---- */

static void *g_latch;

/* Queues on `stream` a wait for the word at `latch` (device memory of the stream's device)
 * to become 1. */
static aclError latch_close_at(void *latch, aclrtStream stream)
{
    aclError err = aclrtMemset(latch, 8, 0, 8);
    return err != ACL_SUCCESS ? err : aclrtValueWait(latch, 1, ACL_STREAM_WAIT_VALUE_EQ, stream);
}

/* Lets every stream held by the word at `latch` go on. */
static aclError latch_open_at(void *latch)
{
    const uint64_t one = 1;
    return aclrtMemcpy(latch, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE);
}

static aclError latch_close(aclrtStream stream) { return latch_close_at(g_latch, stream); }

static aclError latch_open(void) { return latch_open_at(g_latch); }

static int primary_active(int32_t device)
{
    int32_t active = -1;
    (void)aclrtGetPrimaryCtxState(device, NULL, &active);
    return active;
}

/* ---- 04 before any device is set ---- */

static void before_any_device(void)
{
    int32_t device = -1;
    aclrtContext ctx = NULL;
    aclrtStream stream = NULL;
    aclrtEvent event = NULL;
    uint32_t count = 0;
    /* Nothing needs a device to count them. */
    EXPECT(aclrtGetDeviceCount(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    HOLDS(count == 2);
    g_devices = count;
    /* Without a device (or context) set there is no current device, context or stream. */
    EXPECT(aclrtGetDevice(&device), ACL_ERROR_RT_CONTEXT_NULL);
    HOLDS(device == -1);
    EXPECT(aclrtGetDevice(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtCtxGetCurrentDefaultStream(&stream), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtCreateStream(&stream), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtCreateEvent(&event), ACL_ERROR_RT_CONTEXT_NULL);
    /* A NULL output is the ACL layer's refusal, before the context is looked for. */
    EXPECT(aclrtCreateStream(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateEvent(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetEventAvailNum(NULL), ACL_ERROR_INVALID_PARAM);
    /* So are flags, options and values, which no lookup decides. */
    EXPECT(aclrtCreateEventWithFlag(&event, 0x80), ACL_ERROR_RT_PARAM_INVALID);
    FAILS(aclrtCtxSetSysParamOpt((aclSysParamOpt)99, 1));
    FAILS(aclrtCtxGetSysParamOpt((aclSysParamOpt)99, NULL));
    EXPECT(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateStreamWithConfig(&stream, 0, 0), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtSynchronizeDevice(), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(-1), ACL_ERROR_RT_CONTEXT_NULL);
    /* The timeout is an argument: refused before the context is looked for. */
    EXPECT(aclrtSynchronizeDeviceWithTimeout(0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtGetStreamAvailableNum(&count), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtGetEventAvailNum(&count), ACL_ERROR_RT_CONTEXT_NULL);
    HOLDS(device == -1 && ctx == NULL && stream == NULL && event == NULL);
    /* No primary context yet; its flags are reserved (NULL). */
    HOLDS(primary_active(0) == 0);
    int32_t active = -1;
    uint32_t flags = 0;
    EXPECT(aclrtGetPrimaryCtxState(0, &flags, &active), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetPrimaryCtxState(0, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetPrimaryCtxState(2, NULL, &active), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetPrimaryCtxState(-1, NULL, &active), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(active == -1);
    /* Device IDs run from 0 to the count - 1. */
    EXPECT(aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtSetDevice((int32_t)g_devices), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtResetDevice((int32_t)g_devices), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtResetDeviceForce(-1), ACL_ERROR_RT_INVALID_DEVICEID);
    /* A device never set has nothing to release. */
    EXPECT(aclrtResetDevice(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    EXPECT(aclrtResetDeviceForce(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    HOLDS(primary_active(0) == 0);
}

/* ---- 04 aclrtSetDevice's reference count ---- */

static struct {
    int calls;
    int32_t device[16];
    aclrtDeviceState state[16];
} g_states;

static void on_device_state(int32_t devId, aclrtDeviceState state, void *args)
{
    if (args == &g_states && g_states.calls < 16) {
        g_states.device[g_states.calls] = devId;
        g_states.state[g_states.calls] = state;
    }
    g_states.calls++;
}

static void device_state_callbacks(void)
{
    EXPECT(aclrtRegDeviceStateCallback(NULL, on_device_state, &g_states),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRegDeviceStateCallback("", on_device_state, &g_states), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRegDeviceStateCallback("edges", on_device_state, &g_states), ACL_SUCCESS);
    /* One registration per name. */
    FAILS(aclrtRegDeviceStateCallback("edges", on_device_state, &g_states));
    g_states.calls = 0;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(g_states.calls == 4);
    HOLDS(g_states.state[0] == ACL_RT_DEVICE_STATE_SET_PRE &&
          g_states.state[1] == ACL_RT_DEVICE_STATE_SET_POST &&
          g_states.state[2] == ACL_RT_DEVICE_STATE_RESET_PRE &&
          g_states.state[3] == ACL_RT_DEVICE_STATE_RESET_POST);
    HOLDS(g_states.device[0] == 1 && g_states.device[3] == 1);
    /* A NULL callback removes the registration; nothing is called afterwards. */
    EXPECT(aclrtRegDeviceStateCallback("edges", NULL, NULL), ACL_SUCCESS);
    FAILS(aclrtRegDeviceStateCallback("edges", NULL, NULL));
    g_states.calls = 0;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(g_states.calls == 0);
}

/* The reference's Set/Reset mixes on device 1, right and wrong. */
static void reference_counting(void)
{
    aclrtContext first = NULL, ctx = NULL;
    /* Each set counts; the context lives until the last reset. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&first), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(primary_active(1) == 1);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_SUCCESS);
    HOLDS(ctx == first);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(primary_active(1) == 0);
    /* The thread's context went with it. */
    int32_t device = -1;
    EXPECT(aclrtGetDevice(&device), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtResetDevice(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    /* The last reset releases the streams created in the primary context. */
    aclrtStream created = NULL;
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&created), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtStreamQuery(created, &status), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(status == ACL_STREAM_STATUS_RESERVED);
    /* One force releases any number of sets. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    HOLDS(primary_active(1) == 0);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    /* Paired: Set, Reset, Set, Force. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    /* Set, Set, Reset, Force: the force after the reset. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    /* Wrong: Set, Set, Reset, Reset, Force. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    /* Wrong: Set, Set, Reset, Force, Force. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    /* Wrong: the force before the reset. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    HOLDS(primary_active(1) == 0);
}

static void *set_device_one(void *arg)
{
    aclrtContext *ctx = arg;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(ctx), ACL_SUCCESS);
    return NULL;
}

static void *force_device_one(void *arg)
{
    aclError *result = arg;
    *result = aclrtResetDeviceForce(1);
    (void)aclGetRecentErrMsg();
    return NULL;
}

/* Threads share a device's primary context; two forces of it: the second fails. */
static void threads_share_the_primary_context(void)
{
    aclrtContext mine = NULL, theirs = NULL;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&mine), ACL_SUCCESS);
    on_thread(set_device_one, &theirs);
    HOLDS(mine != NULL && mine == theirs);
    aclError first = -1, second = -1;
    on_thread(force_device_one, &first);
    on_thread(force_device_one, &second);
    HOLDS(first == ACL_SUCCESS);
    HOLDS(second == ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    /* The right way: every thread sets, one force at the end. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    on_thread(set_device_one, &theirs);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    HOLDS(primary_active(1) == 0);
}

/* ---- 04 device queries ---- */

static void device_queries(void)
{
    int32_t device = -1;
    aclrtRunMode mode = (aclrtRunMode)-1;
    EXPECT(aclrtGetRunMode(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetRunMode(&mode), ACL_SUCCESS);
    /* An Atlas A2 server runs the program on the host (EP form). */
    HOLDS(mode == ACL_HOST);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 0);
    /* aclrtSetDevice switches the thread to another device, and back. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 1);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 0);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    /* One task scheduler: both choices are accepted. */
    EXPECT(aclrtSetTsDevice(ACL_TS_ID_AICORE), ACL_SUCCESS);
    EXPECT(aclrtSetTsDevice(ACL_TS_ID_AIVECTOR), ACL_SUCCESS);
    FAILS(aclrtSetTsDevice(ACL_TS_ID_RESERVED));

    aclrtUtilizationInfo use;
    memset(&use, 0x7F, sizeof use);
    use.utilizationExtend = NULL;
    EXPECT(aclrtGetDeviceUtilizationRate(0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceUtilizationRate(2, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceUtilizationRate(2, &use), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetDeviceUtilizationRate(0, &use), ACL_SUCCESS);
    /* Memory utilisation cannot be queried: -1. */
    HOLDS(use.memoryUtilization == -1);
    HOLDS(use.cubeUtilization >= 0 && use.cubeUtilization <= 100);
    HOLDS(use.vectorUtilization >= 0 && use.vectorUtilization <= 100);

    aclrtDeviceStatus status = ACL_RT_DEVICE_STATUS_END;
    EXPECT(aclrtQueryDeviceStatus(0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryDeviceStatus(-1, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryDeviceStatus(-1, &status), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(status == ACL_RT_DEVICE_STATUS_END);
    EXPECT(aclrtQueryDeviceStatus(1, &status), ACL_SUCCESS);
    HOLDS(status == ACL_RT_DEVICE_STATUS_NORMAL);

    const char *soc = aclrtGetSocName();
    HOLDS(soc != NULL && strncmp(soc, "Ascend910B", 10) == 0);

    int64_t value = -1;
    EXPECT(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_AICORE_CORE_NUM, NULL), ACL_ERROR_INVALID_PARAM);
    /* A NULL output is refused before the device is looked up. */
    EXPECT(aclrtGetDeviceInfo(2, ACL_DEV_ATTR_AICORE_CORE_NUM, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceInfo(2, ACL_DEV_ATTR_AICORE_CORE_NUM, &value),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetDeviceInfo(0, (aclrtDevAttr)9999, &value), ACL_ERROR_RT_PARAM_INVALID);
    /* The attribute is a value: refused before the device is looked up. */
    EXPECT(aclrtGetDeviceInfo(2, (aclrtDevAttr)9999, &value), ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(value == -1);
    EXPECT(aclrtGetDeviceInfo(1, ACL_DEV_ATTR_AICORE_CORE_NUM, &value), ACL_SUCCESS);
    HOLDS(value == 20);
    EXPECT(aclrtGetDeviceInfo(1, ACL_DEV_ATTR_VECTOR_CORE_NUM, &value), ACL_SUCCESS);
    HOLDS(value == 40);
    EXPECT(aclrtGetDeviceInfo(1, ACL_DEV_ATTR_L2_CACHE_SIZE, &value), ACL_SUCCESS);
    HOLDS(value == 192 << 20);
    EXPECT(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE, &value), ACL_SUCCESS);
    HOLDS(value > 0);

    int32_t least = -1, greatest = -1;
    EXPECT(aclrtDeviceGetStreamPriorityRange(NULL, &greatest), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetStreamPriorityRange(&least, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(least == -1 && greatest == -1);
    EXPECT(aclrtDeviceGetStreamPriorityRange(&least, &greatest), ACL_SUCCESS);
    /* A smaller number is a higher priority. */
    HOLDS(least == 7 && greatest == 0);

    int32_t feature = -1;
    EXPECT(aclrtGetDeviceCapability(0, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceCapability(2, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV, &feature),
           ACL_ERROR_RT_INVALID_DEVICEID);
    FAILS(aclrtGetDeviceCapability(0, (aclrtDevFeatureType)12345, &feature));
    /* The feature is a value: refused before the device is looked up. */
    EXPECT(aclrtGetDeviceCapability(2, (aclrtDevFeatureType)12345, &feature),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtGetDeviceCapability(0, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV, &feature),
           ACL_SUCCESS);
    HOLDS(feature == ACL_DEV_FEATURE_SUPPORT || feature == ACL_DEV_FEATURE_NOT_SUPPORT);

    uint64_t topology = 0;
    EXPECT(aclrtGetDevicesTopo(0, 1, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDevicesTopo(0, 2, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDevicesTopo(0, 2, &topology), ACL_ERROR_RT_INVALID_DEVICEID);
    /* There is no link from a device to itself, whichever device it is. */
    EXPECT(aclrtGetDevicesTopo(1, 1, &topology), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtGetDevicesTopo(5, 5, &topology), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtGetDevicesTopo(0, 1, &topology), ACL_SUCCESS);
    HOLDS(topology == ACL_RT_DEVS_TOPOLOGY_HCCS);

    /* Without ASCEND_RT_VISIBLE_DEVICES, outside a container, the three IDs coincide. */
    for (int32_t id = 0; id < 2; ++id) {
        int32_t out = -1;
        EXPECT(aclrtGetLogicDevIdByUserDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
        EXPECT(aclrtGetUserDevIdByLogicDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
        EXPECT(aclrtGetLogicDevIdByPhyDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
        EXPECT(aclrtGetPhyDevIdByLogicDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
        EXPECT(aclrtGetUserDevIdByPhyDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
        EXPECT(aclrtGetPhyDevIdByUserDevId(id, &out), ACL_SUCCESS);
        HOLDS(out == id);
    }
    EXPECT(aclrtGetLogicDevIdByUserDevId(0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetPhyDevIdByUserDevId(0, NULL), ACL_ERROR_INVALID_PARAM);
    int32_t none = -1;
    FAILS(aclrtGetLogicDevIdByUserDevId(2, &none));
    FAILS(aclrtGetPhyDevIdByUserDevId(-1, &none));
    HOLDS(none == -1);

    aclrtUuid a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    EXPECT(aclrtDeviceGetUuid(0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetUuid(2, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetUuid(2, &a), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceGetUuid(0, &a), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetUuid(1, &b), ACL_SUCCESS);
    HOLDS(memcmp(&a, &b, sizeof a) != 0);

    /* domain:bus:device.function is 12 characters and a NUL. */
    char bus[32];
    memset(bus, 'x', sizeof bus);
    EXPECT(aclrtDeviceGetPCIBusId(1, NULL, 13), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtDeviceGetPCIBusId(1, bus, 12));
    HOLDS(bus[0] == 'x');
    EXPECT(aclrtDeviceGetPCIBusId(1, bus, 13), ACL_SUCCESS);
    HOLDS(strlen(bus) == 12 && bus[4] == ':' && bus[7] == ':' && bus[10] == '.');
    EXPECT(aclrtDeviceGetPCIBusId(2, bus, 13), ACL_ERROR_RT_INVALID_DEVICEID);
    int32_t found = -1;
    EXPECT(aclrtDeviceGetByPCIBusId(bus, &found), ACL_SUCCESS);
    HOLDS(found == 1);
    EXPECT(aclrtDeviceGetByPCIBusId(NULL, &found), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetByPCIBusId(bus, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtDeviceGetByPCIBusId("not a bus id", &found));

    int32_t pid = -1;
    EXPECT(aclrtDeviceGetBareTgid(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    HOLDS(pid == (int32_t)getpid());
}

/* ---- 04 peer access, saturation mode, overflow status (device 0 set) ---- */

static int peers_and_overflow(void)
{
    int32_t can = -1, status = -1;
    EXPECT(aclrtDeviceCanAccessPeer(NULL, 0, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceCanAccessPeer(NULL, 5, 5), ACL_ERROR_INVALID_PARAM);
    /* deviceId and peerDeviceId must differ. */
    FAILS(aclrtDeviceCanAccessPeer(&can, 1, 1));
    FAILS(aclrtDeviceCanAccessPeer(&can, 5, 5));
    EXPECT(aclrtDeviceCanAccessPeer(&can, 0, 2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceCanAccessPeer(&can, -1, 0), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(can == -1);
    EXPECT(aclrtDeviceCanAccessPeer(&can, 0, 1), ACL_SUCCESS);
    HOLDS(can == 1);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 0);
    /* flags is reserved (0); the peer cannot be the current device; IDs in range. */
    FAILS(aclrtDeviceEnablePeerAccess(1, 1));
    FAILS(aclrtDeviceEnablePeerAccess(0, 0));
    EXPECT(aclrtDeviceEnablePeerAccess(2, 0), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 1);
    /* Enabling is one-directional. */
    EXPECT(aclrtDevicePeerAccessStatus(1, 0, &status), ACL_SUCCESS);
    HOLDS(status == 0);
    /* Out of range: 0 or ACL_ERROR_RT_PARAM_INVALID, the reference allows either. */
    status = -1;
    aclError out_of_range = aclrtDevicePeerAccessStatus(0, 5, &status);
    (void)aclGetRecentErrMsg();
    HOLDS((out_of_range == ACL_SUCCESS && status == 0) ||
          out_of_range == ACL_ERROR_RT_PARAM_INVALID);
    FAILS(aclrtDeviceDisablePeerAccess(0));
    EXPECT(aclrtDeviceDisablePeerAccess(2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
    HOLDS(status == 0);

    /* Inf/NaN is the default mode; a setting applies to streams created afterwards. */
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    EXPECT(aclrtGetDeviceSatMode(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetDeviceSatMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_RT_OVERFLOW_MODE_INFNAN);
    FAILS(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF));
    EXPECT(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceSatMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_RT_OVERFLOW_MODE_SATURATION);
    EXPECT(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_INFNAN), ACL_SUCCESS);

    /* The status is 64 bytes of device memory, written by a task of the stream. */
    uint8_t *status_dev = NULL;
    uint8_t host[64];
    memset(host, 0xAB, sizeof host);
    CHECK(aclrtMalloc((void **)&status_dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMemset(status_dev, 64, 0xFF, 64));
    EXPECT(aclrtGetOverflowStatus(NULL, 64, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtGetOverflowStatus(status_dev, 32, NULL));
    EXPECT(aclrtGetOverflowStatus(status_dev, 64, NULL), ACL_SUCCESS);
    EXPECT(aclrtResetOverflowStatus(NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, 64, status_dev, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    int clear = 1;
    for (int i = 0; i < 64; ++i) {
        clear &= host[i] == 0;
    }
    HOLDS(clear);
    EXPECT(aclrtResetOverflowStatus(FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtFree(status_dev));
    return 0;
}

/* ---- 05 contexts ---- */

static uint32_t streams_available(void)
{
    uint32_t count = 0;
    (void)aclrtGetStreamAvailableNum(&count);
    return count;
}

static void *no_context_on_a_new_thread(void *arg)
{
    aclrtContext ctx = NULL;
    (void)arg;
    /* Another thread's aclrtSetDevice binds only that thread. */
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_ERROR_RT_CONTEXT_NULL);
    HOLDS(ctx == NULL);
    return NULL;
}

static void *use_another_threads_context(void *arg)
{
    aclrtContext ctx = arg, current = NULL;
    aclrtStream stream = NULL;
    int32_t device = -1;
    EXPECT(aclrtSetCurrentContext(ctx), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&current), ACL_SUCCESS);
    HOLDS(current == ctx);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 1);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    return NULL;
}

static int contexts(aclrtContext primary)
{
    aclrtContext c1 = NULL, c2 = NULL, ctx = NULL;
    int32_t device = -1;
    EXPECT(aclrtCreateContext(NULL, 0), ACL_ERROR_INVALID_PARAM);
    /* The NULL output is refused before the device is looked up. */
    EXPECT(aclrtCreateContext(NULL, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateContext(&ctx, 2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtCreateContext(&ctx, -1), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(ctx == NULL);

    /* The first context of device 1, which no aclrtSetDevice holds, takes the device's
     * default stream and its own. */
    EXPECT(aclrtCreateContext(&c1, 1), ACL_SUCCESS);
    HOLDS(streams_available() == 1984 - 2);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_SUCCESS);
    HOLDS(ctx == c1);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 1);
    /* An explicit context is not the device's primary context. */
    HOLDS(primary_active(1) == 0);
    EXPECT(aclrtCreateContext(&c2, 1), ACL_SUCCESS);
    HOLDS(streams_available() == 1984 - 3);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_SUCCESS);
    HOLDS(ctx == c2);

    /* Each context has its own default stream, which only its context destroys. */
    aclrtStream d1 = NULL, d2 = NULL;
    EXPECT(aclrtCtxGetCurrentDefaultStream(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCtxGetCurrentDefaultStream(&d2), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(c1), ACL_SUCCESS);
    EXPECT(aclrtCtxGetCurrentDefaultStream(&d1), ACL_SUCCESS);
    HOLDS(d1 != NULL && d2 != NULL && d1 != d2);
    FAILS(aclrtDestroyStream(d1));
    FAILS(aclrtDestroyStreamForce(d1));
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtSynchronizeStream(d1), ACL_SUCCESS);
    EXPECT(aclrtStreamQuery(d1, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);

    /* Switching to a context of another device switches the device. */
    EXPECT(aclrtSetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtSetCurrentContext(FORGED));
    EXPECT(aclrtGetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetCurrentContext(primary), ACL_SUCCESS);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 0);
    EXPECT(aclrtSetCurrentContext(c1), ACL_SUCCESS);
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 1);

    /* A context is usable from any thread that makes it current; a new thread has none. */
    on_thread(use_another_threads_context, c1);
    on_thread(no_context_on_a_new_thread, NULL);

    /* Context parameters have no default, and belong to their context. */
    int64_t value = -1;
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value),
           ACL_ERROR_RT_SYSPARAMOPT_NOT_SET);
    HOLDS(value == -1);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1), ACL_SUCCESS);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 0), ACL_SUCCESS);
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 1), ACL_SUCCESS);
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 1);
    /* DETERMINISTIC takes 0 to 3, the switches 0 or 1. */
    EXPECT(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 3), ACL_SUCCESS);
    FAILS(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 4));
    FAILS(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, -1));
    FAILS(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 2));
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    FAILS(aclrtCtxSetSysParamOpt((aclSysParamOpt)99, 1));
    FAILS(aclrtCtxGetSysParamOpt((aclSysParamOpt)99, &value));
    EXPECT(aclrtSetCurrentContext(c2), ACL_SUCCESS);
    value = -1;
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value),
           ACL_ERROR_RT_SYSPARAMOPT_NOT_SET);
    HOLDS(value == -1);

    /* The overflow flags' address: device memory of the context, the same every time. */
    void *flags = NULL, *again = NULL;
    EXPECT(aclrtCtxGetFloatOverflowAddr(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCtxGetFloatOverflowAddr(&flags), ACL_SUCCESS);
    EXPECT(aclrtCtxGetFloatOverflowAddr(&again), ACL_SUCCESS);
    HOLDS(flags != NULL && flags == again);

    /* Only explicit contexts are destroyed; a destroyed one cannot be made current. */
    EXPECT(aclrtDestroyContext(NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtDestroyContext(primary));
    EXPECT(aclrtDestroyContext(c1), ACL_SUCCESS);
    FAILS(aclrtDestroyContext(c1));
    FAILS(aclrtSetCurrentContext(c1));
    /* Destroying the thread's current context leaves it with none. */
    EXPECT(aclrtDestroyContext(c2), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_ERROR_RT_CONTEXT_NULL);

    /* With no context of device 1 left, its primary context takes the bound default stream
     * (one stream); an explicit context beside it takes only its own. */
    aclrtContext p1 = NULL, c3 = NULL;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    HOLDS(streams_available() == 1984 - 1);
    EXPECT(aclrtGetCurrentContext(&p1), ACL_SUCCESS);
    HOLDS(primary_active(1) == 1);
    EXPECT(aclrtCreateContext(&c3, 1), ACL_SUCCESS);
    HOLDS(streams_available() == 1984 - 2);
    /* aclrtSetDevice makes the primary context current again. */
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&ctx), ACL_SUCCESS);
    HOLDS(ctx == p1);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtDestroyContext(c3), ACL_SUCCESS);
    /* A primary context whose device was reset cannot be made current. */
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    FAILS(aclrtSetCurrentContext(p1));
    EXPECT(aclrtSetCurrentContext(primary), ACL_SUCCESS);
    return 0;
}

/* ---- 06 streams (device 0's primary context current) ---- */

static aclrtStream stream_with(uint32_t priority, uint32_t flag)
{
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateStreamWithConfig(&stream, priority, flag), ACL_SUCCESS);
    return stream;
}

static int stream_creation(void)
{
    aclrtStream s = NULL;
    uint32_t priority = 99, flags = 99, before = streams_available();
    EXPECT(aclrtCreateStream(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateStreamWithConfig(NULL, 0, ACL_STREAM_FAST_LAUNCH), ACL_ERROR_INVALID_PARAM);
    HOLDS(streams_available() == before);
    EXPECT(aclrtGetStreamAvailableNum(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtCreateStream(&s));
    HOLDS(streams_available() == before - 1);
    /* aclrtCreateStream's streams and the default stream have the highest priority. */
    EXPECT(aclrtStreamGetPriority(s, &priority), ACL_SUCCESS);
    HOLDS(priority == 0);
    priority = 99;
    EXPECT(aclrtStreamGetPriority(NULL, &priority), ACL_SUCCESS);
    HOLDS(priority == 0);
    EXPECT(aclrtStreamGetFlags(s, &flags), ACL_SUCCESS);
    HOLDS(flags == 0);
    EXPECT(aclrtStreamGetFlags(NULL, &flags), ACL_SUCCESS);
    EXPECT(aclrtStreamGetPriority(s, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamGetFlags(s, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamGetPriority(FORGED, &priority), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamGetFlags(FORGED, &flags), ACL_ERROR_RT_INVALID_HANDLE);
    /* NULL outputs are refused before the stream is looked up. */
    EXPECT(aclrtStreamGetPriority(FORGED, NULL), ACL_ERROR_INVALID_PARAM);

    /* Flags or'ed together are reported together; other values make a plain stream. */
    aclrtStream fast = stream_with(3, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC);
    EXPECT(aclrtStreamGetFlags(fast, &flags), ACL_SUCCESS);
    HOLDS(flags == (ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC));
    EXPECT(aclrtStreamGetPriority(fast, &priority), ACL_SUCCESS);
    HOLDS(priority == 3);
    aclrtStream huge = stream_with(7, ACL_STREAM_HUGE);
    EXPECT(aclrtStreamGetFlags(huge, &flags), ACL_SUCCESS);
    HOLDS(flags == ACL_STREAM_HUGE);
    EXPECT(aclrtStreamGetPriority(huge, &priority), ACL_SUCCESS);
    HOLDS(priority == 7);
    aclrtStream plain = stream_with(0, 0x1000);
    EXPECT(aclrtStreamGetFlags(plain, &flags), ACL_SUCCESS);
    HOLDS(flags == 0);

    /* IDs: distinct, the default stream's by NULL. */
    int32_t id_s = -1, id_fast = -1, id_default = -1;
    EXPECT(aclrtStreamGetId(s, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamGetId(FORGED, &id_s), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamGetId(s, &id_s), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(fast, &id_fast), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(NULL, &id_default), ACL_SUCCESS);
    HOLDS(id_s >= 0 && id_s != id_fast && id_default != id_s && id_default != id_fast);

    /* Destruction: created streams of the current context only. */
    aclrtStream def = NULL;
    CHECK(aclrtCtxGetCurrentDefaultStream(&def));
    EXPECT(aclrtDestroyStream(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyStreamForce(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyStream(FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    FAILS(aclrtDestroyStream(def));
    aclrtContext primary = NULL, other = NULL;
    aclrtStream foreign = NULL;
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&other, 0));
    CHECK(aclrtCreateStream(&foreign));
    CHECK(aclrtSetCurrentContext(primary));
    EXPECT(aclrtDestroyStream(foreign), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtDestroyStreamForce(foreign), ACL_ERROR_RT_STREAM_CONTEXT);
    CHECK(aclrtSetCurrentContext(other));
    EXPECT(aclrtDestroyStream(foreign), ACL_SUCCESS);
    CHECK(aclrtDestroyContext(other));
    CHECK(aclrtSetCurrentContext(primary));

    EXPECT(aclrtDestroyStream(s), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(s), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyStreamForce(fast), ACL_SUCCESS);
    EXPECT(aclrtDestroyStreamForce(fast), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyStream(huge), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(plain), ACL_SUCCESS);
    HOLDS(streams_available() == before);
    return 0;
}

static int stream_switches(void)
{
    aclrtStream s = NULL, t = NULL;
    uint32_t flag = 99;
    CHECK(aclrtCreateStream(&s));
    /* The overflow switch: off until turned on, 0 or 1 only. */
    EXPECT(aclrtGetStreamOverflowSwitch(s, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetStreamOverflowSwitch(s, &flag), ACL_SUCCESS);
    HOLDS(flag == 0);
    FAILS(aclrtSetStreamOverflowSwitch(s, 2));
    EXPECT(aclrtSetStreamOverflowSwitch(s, 1), ACL_SUCCESS);
    EXPECT(aclrtGetStreamOverflowSwitch(s, &flag), ACL_SUCCESS);
    HOLDS(flag == 1);
    EXPECT(aclrtSetStreamOverflowSwitch(NULL, 0), ACL_SUCCESS);
    EXPECT(aclrtSetStreamOverflowSwitch(FORGED, 1), ACL_ERROR_RT_INVALID_HANDLE);
    /* The switch is a value: refused before the stream is looked up. */
    FAILS(aclrtSetStreamOverflowSwitch(FORGED, 2));
    EXPECT(aclrtGetStreamOverflowSwitch(FORGED, NULL), ACL_ERROR_INVALID_PARAM);

    /* The failure mode is chosen once per stream; an Atlas A2 takes the default stream. */
    FAILS(aclrtSetStreamFailureMode(s, 2));
    EXPECT(aclrtSetStreamFailureMode(s, ACL_CONTINUE_ON_FAILURE), ACL_SUCCESS);
    FAILS(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE));
    EXPECT(aclrtSetStreamFailureMode(FORGED, ACL_CONTINUE_ON_FAILURE), ACL_ERROR_RT_INVALID_HANDLE);
    FAILS(aclrtSetStreamFailureMode(FORGED, 2));
    EXPECT(aclrtSetStreamFailureMode(NULL, ACL_CONTINUE_ON_FAILURE), ACL_SUCCESS);
    /* NULL and the default stream's handle name one stream, which was given its mode. */
    aclrtStream def = NULL;
    int32_t by_null = -1, by_handle = -2;
    CHECK(aclrtCtxGetCurrentDefaultStream(&def));
    FAILS(aclrtSetStreamFailureMode(def, ACL_CONTINUE_ON_FAILURE));
    EXPECT(aclrtStreamGetId(NULL, &by_null), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(def, &by_handle), ACL_SUCCESS);
    HOLDS(by_null == by_handle);
    CHECK(aclrtDestroyStream(s));

    /* STOP on one stream stops its context's other streams too: once a task failed there,
     * no new task is taken. */
    aclrtContext primary = NULL, ctx = NULL;
    void *dev = NULL;
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&ctx, 0));
    CHECK(aclrtCreateStream(&s));
    CHECK(aclrtCreateStream(&t));
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    EXPECT(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE), ACL_SUCCESS);
    /* What a synchronisation returns when its wait runs out is no task's failure: refused,
     * injecting nothing (the memset below is still the first task to fail). */
    EXPECT(npusimFailTask(s, 1, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT), ACL_ERROR_INVALID_PARAM);
    EXPECT(npusimFailTask(s, 1, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT), ACL_ERROR_INVALID_PARAM);
    CHECK(npusimFailTask(s, 1, ACL_ERROR_RT_AICORE_EXCEPTION));
    EXPECT(aclrtMemsetAsync(dev, 64, 1, 64, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
    FAILS(aclrtMemsetAsync(dev, 64, 2, 64, s));
    FAILS(aclrtMemsetAsync(dev, 64, 2, 64, t));
    FAILS(aclrtSynchronizeStream(t));
    CHECK(aclrtFree(dev));
    CHECK(aclrtDestroyStream(s));
    CHECK(aclrtDestroyStream(t));
    CHECK(aclrtDestroyContext(ctx));
    CHECK(aclrtSetCurrentContext(primary));
    return 0;
}

/* What a thread opening a latch is given: the context it binds, the latch's word. */
struct opener {
    aclrtContext ctx;
    void *latch;
};

/* Opens a latch from another thread. */
static void *open_the_latch(void *arg)
{
    const struct opener *opener = arg;
    EXPECT(aclrtSetCurrentContext(opener->ctx), ACL_SUCCESS);
    EXPECT(latch_open_at(opener->latch), ACL_SUCCESS);
    return NULL;
}

static void set_flag(void *arg) { *(volatile int *)arg = 1; }

/* aclrtDestroyStream waits for the stream's tasks, aclrtDestroyStreamForce does not. */
static int stream_destruction_waits(void)
{
    aclrtStream s = NULL;
    aclrtContext ctx = NULL;
    uint8_t *dev = NULL, byte = 0;
    pthread_t opener;
    CHECK(aclrtGetCurrentContext(&ctx));
    CHECK(aclrtMalloc((void **)&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMemset(dev, 64, 0, 64));
    CHECK(aclrtCreateStream(&s));
    CHECK(latch_close(s));
    EXPECT(aclrtMemsetAsync(dev, 64, 9, 64, s), ACL_SUCCESS);
    /* Whenever the latch opens, the destruction returns only after the memset. */
    struct opener opens = {ctx, g_latch};
    if (pthread_create(&opener, NULL, open_the_latch, &opens) != 0) {
        return 1;
    }
    EXPECT(aclrtDestroyStream(s), ACL_SUCCESS);
    pthread_join(opener, NULL);
    CHECK(aclrtMemcpy(&byte, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(byte == 9);
    /* A forced destruction returns with the latch still closed; the memset never runs. */
    CHECK(aclrtCreateStream(&s));
    CHECK(latch_close(s));
    EXPECT(aclrtMemsetAsync(dev, 64, 7, 64, s), ACL_SUCCESS);
    EXPECT(aclrtDestroyStreamForce(s), ACL_SUCCESS);
    CHECK(latch_open());
    CHECK(aclrtMemcpy(&byte, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(byte == 9);
    CHECK(aclrtFree(dev));

    /* The last aclrtResetDevice waits for the default stream's tasks before releasing it. */
    void *latch1 = NULL;
    volatile int ran = 0;
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtMalloc(&latch1, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(latch_close_at(latch1, NULL));
    CHECK(aclrtLaunchHostFunc(NULL, set_flag, (void *)&ran));
    struct opener opens1 = {ctx, latch1};
    if (pthread_create(&opener, NULL, open_the_latch, &opens1) != 0) {
        return 1;
    }
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    HOLDS(ran == 1);
    pthread_join(opener, NULL);
    CHECK(aclrtSetCurrentContext(ctx));
    CHECK(aclrtFree(latch1));
    return 0;
}

static int stream_waits(void)
{
    aclrtStream s = NULL, t = NULL;
    aclrtEvent e = NULL;
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    void *dev = NULL;
    CHECK(aclrtCreateStream(&s));
    CHECK(aclrtCreateStream(&t));
    CHECK(aclrtCreateEvent(&e));
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    EXPECT(aclrtStreamQuery(s, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamQuery(FORGED, &status), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamQuery(s, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    EXPECT(aclrtSynchronizeStream(FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    /* Timeouts: -1 or a positive number of ms. */
    EXPECT(aclrtSynchronizeStreamWithTimeout(s, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeStreamWithTimeout(s, -2), ACL_ERROR_RT_PARAM_INVALID);
    /* The timeout is a value: refused before the stream is looked up. */
    EXPECT(aclrtSynchronizeStreamWithTimeout(FORGED, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeStreamWithTimeout(FORGED, -1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(-2), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeStreamWithTimeout(s, -1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(-1), ACL_SUCCESS);

    /* Held work: the query says not ready, the timed waits expire with their codes. */
    CHECK(latch_close(s));
    EXPECT(aclrtMemsetAsync(dev, 64, 1, 64, s), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(e, s), ACL_SUCCESS);
    EXPECT(aclrtStreamQuery(s, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtSynchronizeStreamWithTimeout(s, 10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtSynchronizeEventWithTimeout(e, 10), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
    /* Another stream's work goes on meanwhile. */
    EXPECT(aclrtMemsetAsync(dev, 64, 2, 64, t), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(t, 60000), ACL_SUCCESS);
    /* An abort drops the held work: waits on its records fail with the abort's code. */
    EXPECT(aclrtStreamAbort(s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(e), ACL_ERROR_RT_STREAM_ABORT);
    EXPECT(aclrtStreamQuery(s, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    uint8_t byte = 0;
    CHECK(aclrtMemcpy(&byte, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(byte == 2);
    /* And the stream is usable again. */
    EXPECT(aclrtMemsetAsync(dev, 64, 3, 64, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    CHECK(aclrtMemcpy(&byte, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(byte == 3);
    EXPECT(aclrtStreamAbort(NULL), ACL_SUCCESS);
    EXPECT(aclrtStreamAbort(FORGED), ACL_ERROR_RT_INVALID_HANDLE);

    /* A stop keeps the queued work until an abort; not the default stream. */
    EXPECT(aclrtStreamStop(NULL), ACL_ERROR_INVALID_PARAM);
    aclrtStream def = NULL;
    CHECK(aclrtCtxGetCurrentDefaultStream(&def));
    FAILS(aclrtStreamStop(def));
    CHECK(latch_close(s));
    EXPECT(aclrtStreamStop(s), ACL_SUCCESS);
    EXPECT(aclrtStreamAbort(s), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, 64, 4, 64, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);

    /* PERSISTENT, DEVICE_USE_ONLY and CPU_SCHEDULE streams' synchronisations return at
     * once, held or not. */
    aclrtStream persistent = stream_with(0, ACL_STREAM_PERSISTENT);
    aclrtStream device_only = stream_with(0, ACL_STREAM_DEVICE_USE_ONLY);
    aclrtStream cpu = stream_with(0, ACL_STREAM_CPU_SCHEDULE);
    EXPECT(aclrtMemsetAsync(dev, 64, 5, 64, persistent), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(persistent), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(persistent, 10), ACL_SUCCESS);
    CHECK(latch_close(device_only));
    EXPECT(aclrtSynchronizeStream(device_only), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(device_only, 10), ACL_SUCCESS);
    CHECK(latch_close(cpu));
    EXPECT(aclrtSynchronizeStream(cpu), ACL_SUCCESS);
    CHECK(latch_open());
    /* Only a PERSISTENT stream's tasks are cleaned. */
    EXPECT(aclrtPersistentTaskClean(NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtPersistentTaskClean(s));
    EXPECT(aclrtPersistentTaskClean(persistent), ACL_SUCCESS);
    CHECK(aclrtDestroyStream(persistent));
    CHECK(aclrtDestroyStream(device_only));
    CHECK(aclrtDestroyStream(cpu));
    CHECK(aclrtFree(dev));
    CHECK(aclrtDestroyEvent(e));
    CHECK(aclrtDestroyStream(s));
    CHECK(aclrtDestroyStream(t));
    return 0;
}

/* ---- 07 events (device 0's primary context current) ---- */

static uint32_t events_available(void)
{
    uint32_t count = 0;
    (void)aclrtGetEventAvailNum(&count);
    return count;
}

static aclrtEvent event_with(uint32_t flag, int ex)
{
    aclrtEvent event = NULL;
    EXPECT(ex ? aclrtCreateEventExWithFlag(&event, flag) : aclrtCreateEventWithFlag(&event, flag),
           ACL_SUCCESS);
    return event;
}

static int event_creation(void)
{
    aclrtEvent event = NULL;
    EXPECT(aclrtCreateEvent(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateEventWithFlag(NULL, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);
    /* The NULL output is refused before the flag is read. */
    EXPECT(aclrtCreateEventWithFlag(NULL, 0x80), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateEventExWithFlag(NULL, 0x80), ACL_ERROR_INVALID_PARAM);
    /* aclrtCreateEventWithFlag's flags: TIME_LINE, SYNC, CAPTURE_STREAM_PROGRESS, EXTERNAL
     * (alone) and DEVICE_USE_ONLY. */
    EXPECT(aclrtCreateEventWithFlag(&event, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventWithFlag(&event, 0x80), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventWithFlag(&event, ACL_EVENT_IPC), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventWithFlag(&event, ACL_EVENT_EXTERNAL | ACL_EVENT_TIME_LINE),
           ACL_ERROR_RT_PARAM_INVALID);
    /* aclrtCreateEventExWithFlag's: TIME_LINE, SYNC, CAPTURE_STREAM_PROGRESS and IPC (alone). */
    EXPECT(aclrtCreateEventExWithFlag(&event, ACL_EVENT_EXTERNAL), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventExWithFlag(&event, ACL_EVENT_DEVICE_USE_ONLY),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventExWithFlag(&event, ACL_EVENT_IPC | ACL_EVENT_TIME_LINE),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(event == NULL);

    /* Events of SYNC or EXTERNAL are counted against the device's 65536; Ex events are not
     * limited by the hardware, nor are events that cannot be waited for. */
    uint32_t before = events_available();
    EXPECT(aclrtGetEventAvailNum(NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(before > 0 && before <= 65536);
    aclrtEvent all = event_with(ACL_EVENT_TIME_LINE | ACL_EVENT_SYNC |
                                    ACL_EVENT_CAPTURE_STREAM_PROGRESS, 0);
    HOLDS(events_available() == before - 1);
    aclrtEvent external = event_with(ACL_EVENT_EXTERNAL, 0);
    HOLDS(events_available() == before - 2);
    aclrtEvent device_only = event_with(ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_SYNC, 0);
    aclrtEvent timeline = event_with(ACL_EVENT_TIME_LINE, 0);
    aclrtEvent ex_sync = event_with(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE, 1);
    aclrtEvent ipc = event_with(ACL_EVENT_IPC, 1);
    HOLDS(events_available() == before - 3);

    /* IDs: distinct; an IPC event has none. */
    uint32_t id_all = 0, id_timeline = 0, id_ipc = 77;
    EXPECT(aclrtGetEventId(NULL, &id_all), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetEventId(all, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetEventId(FORGED, &id_all), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetEventId(all, &id_all), ACL_SUCCESS);
    EXPECT(aclrtGetEventId(timeline, &id_timeline), ACL_SUCCESS);
    HOLDS(id_all != id_timeline);
    FAILS(aclrtGetEventId(ipc, &id_ipc));
    HOLDS(id_ipc == 77);

    /* Only an IPC event has an IPC handle. */
    aclrtIpcEventHandle handle;
    EXPECT(aclrtIpcGetEventHandle(ipc, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtIpcGetEventHandle(ex_sync, &handle));

    EXPECT(aclrtDestroyEvent(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyEvent(FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyEvent(all), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(all), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyEvent(external), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(device_only), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(timeline), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(ex_sync), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(ipc), ACL_SUCCESS);
    HOLDS(events_available() == before);

    /* A destroyed event whose record is pending keeps its resource until it completes. */
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s));
    CHECK(latch_close(s));
    aclrtEvent pending = NULL;
    CHECK(aclrtCreateEvent(&pending));
    CHECK(aclrtRecordEvent(pending, s));
    EXPECT(aclrtDestroyEvent(pending), ACL_SUCCESS);
    HOLDS(events_available() == before - 1);
    CHECK(latch_open());
    CHECK(aclrtSynchronizeStream(s));
    HOLDS(events_available() == before);
    /* Or until its stream drops the record. */
    CHECK(latch_close(s));
    CHECK(aclrtCreateEvent(&pending));
    CHECK(aclrtRecordEvent(pending, s));
    EXPECT(aclrtDestroyEvent(pending), ACL_SUCCESS);
    HOLDS(events_available() == before - 1);
    EXPECT(aclrtStreamAbort(s), ACL_SUCCESS);
    HOLDS(events_available() == before);
    CHECK(aclrtDestroyStream(s));

    /* 65536 events per device. */
    static aclrtEvent many[65537];
    uint32_t n = 0;
    aclError last = ACL_SUCCESS;
    while (n < 65537 &&
           (last = aclrtCreateEventWithFlag(&many[n], ACL_EVENT_SYNC)) == ACL_SUCCESS) {
        n++;
    }
    HOLDS(n == before);
    HOLDS(last == ACL_ERROR_RT_NO_EVENT_RESOURCE);
    (void)aclGetRecentErrMsg();
    HOLDS(events_available() == 0);
    /* Ex events, and events that cannot be waited for, are not limited by the hardware. */
    aclrtEvent ex_unlimited = NULL, timeline_unlimited = NULL, refused = NULL;
    EXPECT(aclrtCreateEventExWithFlag(&ex_unlimited, ACL_EVENT_SYNC), ACL_SUCCESS);
    EXPECT(aclrtCreateEventWithFlag(&timeline_unlimited, ACL_EVENT_TIME_LINE), ACL_SUCCESS);
    EXPECT(aclrtCreateEventWithFlag(&refused, ACL_EVENT_EXTERNAL), ACL_ERROR_RT_NO_EVENT_RESOURCE);
    HOLDS(refused == NULL);
    for (uint32_t i = 0; i < n; ++i) {
        CHECK(aclrtDestroyEvent(many[i]));
    }
    CHECK(aclrtDestroyEvent(ex_unlimited));
    CHECK(aclrtDestroyEvent(timeline_unlimited));
    HOLDS(events_available() == before);
    return 0;
}

static int event_states(void)
{
    aclrtStream s = NULL, t = NULL;
    aclrtEventRecordedStatus recorded = (aclrtEventRecordedStatus)7;
    aclrtEventWaitStatus waited = ACL_EVENT_WAIT_STATUS_RESERVED;
    aclrtEventStatus legacy = ACL_EVENT_STATUS_RESERVED;
    CHECK(aclrtCreateStream(&s));
    CHECK(aclrtCreateStream(&t));
    aclrtEvent e = NULL;
    CHECK(aclrtCreateEvent(&e));
    aclrtEvent ex = event_with(ACL_EVENT_SYNC, 1);
    aclrtEvent timeline = event_with(ACL_EVENT_TIME_LINE, 0);
    aclrtEvent sync = event_with(ACL_EVENT_SYNC, 0);
    aclrtEvent device_only = event_with(ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_SYNC, 0);

    /* Before any record: a legacy event is not ready, an Ex event complete; a wait on the Ex
     * event does not wait, one on the legacy event holds its stream until its first record
     * (a reset restores that initial state, after which a wait cannot go on). */
    EXPECT(aclrtQueryEventStatus(NULL, &recorded), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryEventStatus(e, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryEventStatus(FORGED, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryEventStatus(FORGED, &recorded), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtQueryEventStatus(e, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    EXPECT(aclrtQueryEventStatus(ex, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtSynchronizeEvent(e), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSynchronizeEvent(FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSynchronizeEventWithTimeout(e, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeEventWithTimeout(e, -2), ACL_ERROR_RT_PARAM_INVALID);
    /* A NULL event is refused before its timeout is read. */
    EXPECT(aclrtSynchronizeEventWithTimeout(NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSynchronizeEventWithTimeout(e, -1), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(t, ex), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(t, sync), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(t, 10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtRecordEvent(sync, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);

    /* Records and waits: the NULL event first, then the handles. */
    EXPECT(aclrtRecordEvent(NULL, s), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordEvent(NULL, FORGED), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordEvent(FORGED, s), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordEvent(e, FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEvent(t, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEvent(FORGED, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEvent(FORGED, sync), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEvent(t, FORGED), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtResetEvent(NULL, s), ACL_ERROR_INVALID_PARAM);
    /* Without ACL_EVENT_SYNC an event is neither waited for nor reset; a device-only event
     * is not used from the host; an Ex event is not reset. */
    FAILS(aclrtStreamWaitEvent(t, timeline));
    FAILS(aclrtResetEvent(timeline, s));
    FAILS(aclrtRecordEvent(device_only, s));
    FAILS(aclrtStreamWaitEvent(t, device_only));
    FAILS(aclrtResetEvent(ex, s));
    /* A stream of another context. */
    aclrtContext primary = NULL, other = NULL;
    aclrtStream foreign = NULL;
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&other, 0));
    CHECK(aclrtCreateStream(&foreign));
    CHECK(aclrtSetCurrentContext(primary));
    EXPECT(aclrtRecordEvent(e, foreign), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtStreamWaitEvent(foreign, sync), ACL_ERROR_RT_STREAM_CONTEXT);
    CHECK(aclrtSetCurrentContext(other));
    CHECK(aclrtDestroyStream(foreign));
    CHECK(aclrtDestroyContext(other));
    CHECK(aclrtSetCurrentContext(primary));

    /* While the recorded work is held: not ready, the waits on it not done either. */
    CHECK(latch_close(s));
    EXPECT(aclrtRecordEvent(e, s), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(ex, s), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(e, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    EXPECT(aclrtQueryEventStatus(ex, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EXPECT(aclrtQueryEvent(e, &legacy), ACL_SUCCESS);
    HOLDS(legacy == ACL_EVENT_STATUS_NOT_READY);
    EXPECT(aclrtQueryEvent(e, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtQueryEvent(ex, &legacy));
#pragma GCC diagnostic pop
    EXPECT(aclrtStreamWaitEvent(t, e), ACL_SUCCESS);
    EXPECT(aclrtQueryEventWaitStatus(e, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryEventWaitStatus(e, &waited), ACL_SUCCESS);
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_NOT_READY);
    FAILS(aclrtQueryEventWaitStatus(ex, &waited));
    uint64_t stamp = 0;
    float ms = -1.0f;
    FAILS(aclrtEventGetTimestamp(e, &stamp));
    EXPECT(aclrtSynchronizeEventWithTimeout(ex, 10), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
    /* An event is destroyed without waiting for its record. */
    aclrtEvent doomed = NULL;
    CHECK(aclrtCreateEvent(&doomed));
    EXPECT(aclrtRecordEvent(doomed, s), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(doomed), ACL_SUCCESS);
    CHECK(latch_open());
    EXPECT(aclrtSynchronizeEvent(e), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(e, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtQueryEventWaitStatus(e, &waited), ACL_SUCCESS);
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_COMPLETE);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EXPECT(aclrtQueryEvent(e, &legacy), ACL_SUCCESS);
    HOLDS(legacy == ACL_EVENT_STATUS_COMPLETE);
#pragma GCC diagnostic pop
    EXPECT(aclrtSynchronizeEventWithTimeout(ex, 60000), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(ex, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);

    /* A reset returns a SYNC event to its first state. */
    EXPECT(aclrtRecordEvent(sync, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(sync, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtResetEvent(sync, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(sync, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);

    /* Timestamps and elapsed time: both events recorded and complete, with timestamps. */
    aclrtEvent start = NULL, end = NULL, never = NULL;
    CHECK(aclrtCreateEvent(&start));
    CHECK(aclrtCreateEvent(&end));
    CHECK(aclrtCreateEvent(&never));
    EXPECT(aclrtRecordEvent(start, s), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(end, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    EXPECT(aclrtEventElapsedTime(NULL, start, end), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventElapsedTime(&ms, NULL, end), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventElapsedTime(&ms, start, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventElapsedTime(NULL, FORGED, FORGED), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventElapsedTime(&ms, FORGED, end), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(ms == -1.0f);
    FAILS(aclrtEventElapsedTime(&ms, start, never));
    FAILS(aclrtEventElapsedTime(&ms, never, end));
    HOLDS(ms == -1.0f);
    EXPECT(aclrtEventElapsedTime(&ms, start, end), ACL_SUCCESS);
    HOLDS(ms >= 0.0f);
    uint64_t first = 0, second = 0;
    EXPECT(aclrtEventGetTimestamp(NULL, &first), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventGetTimestamp(start, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtEventGetTimestamp(FORGED, &first), ACL_ERROR_RT_INVALID_HANDLE);
    FAILS(aclrtEventGetTimestamp(never, &first));
    EXPECT(aclrtEventGetTimestamp(start, &first), ACL_SUCCESS);
    EXPECT(aclrtEventGetTimestamp(end, &second), ACL_SUCCESS);
    HOLDS(second >= first);
    /* An end before its start is a reversal. A memset of 1 ms under a timing model lies
     * between the two records, so their timestamps differ whatever the host does. */
    npusimTimingModel model = {0, 0, 0, 0, 1000000};
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(npusimSetTiming(0, &model));
    EXPECT(aclrtRecordEvent(start, s), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, 64, 1, 64, s), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(end, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    CHECK(npusimSetTiming(0, NULL));
    EXPECT(aclrtEventElapsedTime(&ms, start, end), ACL_SUCCESS);
    HOLDS(ms >= 1.0f);
    ms = -1.0f;
    EXPECT(aclrtEventElapsedTime(&ms, end, start), ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL);
    HOLDS(ms == -1.0f);
    CHECK(aclrtFree(dev));
    /* TIME_LINE alone times, and is synchronised and queried, without SYNC; so does an Ex
     * event with it, recorded on another stream. */
    aclrtEvent ex_timeline = event_with(ACL_EVENT_TIME_LINE, 1);
    CHECK(latch_close(s));
    EXPECT(aclrtRecordEvent(timeline, s), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(timeline, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    CHECK(latch_open());
    EXPECT(aclrtSynchronizeEvent(timeline), ACL_SUCCESS);
    EXPECT(aclrtQueryEventStatus(timeline, &recorded), ACL_SUCCESS);
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtRecordEvent(ex_timeline, t), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    EXPECT(aclrtEventElapsedTime(&ms, timeline, ex_timeline), ACL_SUCCESS);
    CHECK(aclrtDestroyEvent(ex_timeline));
    /* An Ex event with SYNC is waited for like a legacy one. */
    EXPECT(aclrtRecordEvent(ex, s), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(t, ex), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    /* A SYNC event without TIME_LINE keeps no timestamp. */
    EXPECT(aclrtRecordEvent(sync, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    FAILS(aclrtEventElapsedTime(&ms, start, sync));
    FAILS(aclrtEventGetTimestamp(sync, &first));

    CHECK(aclrtDestroyEvent(start));
    CHECK(aclrtDestroyEvent(end));
    CHECK(aclrtDestroyEvent(never));
    CHECK(aclrtDestroyEvent(e));
    CHECK(aclrtDestroyEvent(ex));
    CHECK(aclrtDestroyEvent(timeline));
    CHECK(aclrtDestroyEvent(sync));
    CHECK(aclrtDestroyEvent(device_only));
    CHECK(aclrtDestroyStream(s));
    CHECK(aclrtDestroyStream(t));
    return 0;
}

/* Waits with a timeout (in seconds) and with flags, and the process's wait timeout. */
static int event_waits(void)
{
    aclrtStream s = NULL, t = NULL;
    aclrtEvent e = NULL;
    CHECK(aclrtCreateStream(&s));
    CHECK(aclrtCreateStream(&t));
    CHECK(aclrtCreateEvent(&e));
    EXPECT(aclrtStreamWaitEventWithTimeout(t, e, -1), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtStreamWaitEventWithTimeout(t, NULL, -1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithTimeout(FORGED, e, 0), ACL_ERROR_RT_INVALID_HANDLE);
    /* The NULL event first, then the timeout, then the handles. */
    EXPECT(aclrtStreamWaitEventWithTimeout(FORGED, NULL, -1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithTimeout(FORGED, e, -1), ACL_ERROR_RT_PARAM_INVALID);
    /* 0 is no timeout. */
    EXPECT(aclrtRecordEvent(e, s), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEventWithTimeout(t, e, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);

    /* A wait still pending at its timeout fails its stream's task; the stream goes on. */
    CHECK(latch_close(s));
    EXPECT(aclrtRecordEvent(e, s), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEventWithTimeout(t, e, 1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_ERROR_RT_WAIT_TIMEOUT);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    /* So does a plain wait, once the process's wait timeout is set; 0 takes it away. */
    EXPECT(aclrtSetOpWaitTimeout(1), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(t, e), ACL_SUCCESS);
    EXPECT(aclrtSetOpWaitTimeout(0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_ERROR_RT_WAIT_TIMEOUT);
    EXPECT(aclrtStreamWaitEvent(t, e), ACL_SUCCESS);
    CHECK(latch_open());
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);

    /* Flagged forms: DEFAULT is the plain call, EXTERNAL belongs to captures, and the flag an
     * event's first call gave stays, even when that call failed. */
    EXPECT(aclrtRecordEventWithFlag(NULL, s, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordEventWithFlag(e, s, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordEventWithFlag(FORGED, FORGED, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithFlag(FORGED, FORGED, 0, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithFlag(t, e, 0, 2), ACL_ERROR_INVALID_PARAM);
    aclrtEvent flagged = NULL;
    CHECK(aclrtCreateEventExWithFlag(&flagged, ACL_EVENT_SYNC));
    FAILS(aclrtRecordEventWithFlag(flagged, s, ACL_EVENT_RECORD_EXTERNAL));
    EXPECT(aclrtRecordEventWithFlag(flagged, s, ACL_EVENT_RECORD_DEFAULT),
           ACL_ERROR_RT_PARAM_INVALID);
    FAILS(aclrtStreamWaitEventWithFlag(t, flagged, 5, ACL_EVENT_WAIT_EXTERNAL));
    FAILS(aclrtStreamWaitEventWithFlag(t, flagged, 0, ACL_EVENT_WAIT_EXTERNAL));
    EXPECT(aclrtStreamWaitEventWithFlag(t, flagged, 0, ACL_EVENT_WAIT_DEFAULT),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtRecordEventWithFlag(e, s, ACL_EVENT_RECORD_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEventWithFlag(t, e, 0, ACL_EVENT_WAIT_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(t), ACL_SUCCESS);
    CHECK(aclrtDestroyEvent(flagged));
    CHECK(aclrtDestroyEvent(e));
    CHECK(aclrtDestroyStream(s));
    CHECK(aclrtDestroyStream(t));
    return 0;
}

int main(void)
{
    aclrtContext primary = NULL;
    /* A call that hangs ends the program rather than the test run. */
    alarm(300);
    CHECK(aclInit(NULL));
    before_any_device();
    device_state_callbacks();
    reference_counting();
    threads_share_the_primary_context();
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetCurrentContext(&primary));
    HOLDS(primary_active(0) == 1);
    CHECK(aclrtMalloc(&g_latch, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    device_queries();
    if (peers_and_overflow() != 0 || contexts(primary) != 0 || stream_creation() != 0 ||
        stream_switches() != 0 || stream_destruction_waits() != 0 || stream_waits() != 0 ||
        event_creation() != 0 || event_states() != 0 || event_waits() != 0) {
        return 1;
    }
    CHECK(aclrtFree(g_latch));
    CHECK(aclrtResetDevice(0));
    HOLDS(primary_active(0) == 0);
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
