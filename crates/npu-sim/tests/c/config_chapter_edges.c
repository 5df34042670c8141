/*
 * The API reference's initialisation, runtime configuration, CMO, IPC memory, custom
 * allocator, device variable, compute group, dump, snapshot and "other APIs" chapters walked
 * through the flows and edge cases they document: aclInit's file (nesting limits, the default
 * device, the stack and printf sizes as they take effect, a dump it configures), init
 * callbacks called at aclInit or at once after it, finalize callbacks, one aclFinalize for many
 * aclInit calls and aclFinalizeReference's count; runtime parameters and their defaults;
 * resource limits per device, stream and thread; prefetches and descriptors, the barrier forms
 * an Atlas A2 lacks; IPC keys across two processes (the whitelist, a key exported without it,
 * closed or freed memory, the import flags); allocator registrations (the last one wins,
 * unregistering is idempotent); device variable copies (offset + count within the variable,
 * dstMax, kinds, pageable memory); groups an Atlas A2 lacks; dump sessions and the dump kinds
 * that exclude each other; each snapshot stage's callback and the state machine; data type
 * sizes, half conversions of special values, version numbers' order, the platform's
 * description, profiling marks, cached task information in a capture and the stream and host
 * function calls an Atlas A2 lacks.
 * Where the reference names no code only a failure is required. Prints a line for each
 * mismatch, then how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own
 * headers) with the kernel library of global_kernels.c linked, which compares the output.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_process.h"
#include "acl/acl_platform.h"
#include "expect.h"
#include "npusim/control.h"

enum { BYTES = 4096, KEY_LEN = 65 };

/* The device variable of global_kernels.c (16 bytes), which this program links. */
extern float bias[4];

static void *const SENTINEL = (void *)(uintptr_t)0x5e5e;

/* Writes `text` to a new file named after `what` and the pid; the path goes to `path`. */
static void write_file(char *path, size_t cap, const char *what, const char *text)
{
    snprintf(path, cap, "/tmp/npusim-config-edges-%d-%s.json", (int)getpid(), what);
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        printf("cannot write %s\n", path);
        return;
    }
    fputs(text, file);
    fclose(file);
}

/* A JSON object nesting `objects` levels of `{` and, under "a", `arrays` levels of `[`. */
static void nested_json(char *out, size_t cap, int objects, int arrays)
{
    size_t at = (size_t)snprintf(out, cap, "{\"a\": ");
    for (int i = 0; i < arrays; ++i) {
        at += (size_t)snprintf(out + at, cap - at, "[");
    }
    at += (size_t)snprintf(out + at, cap - at, "0");
    for (int i = 0; i < arrays; ++i) {
        at += (size_t)snprintf(out + at, cap - at, "]");
    }
    for (int i = 1; i < objects; ++i) {
        at += (size_t)snprintf(out + at, cap - at, ", \"o\": {\"x\": 0");
    }
    for (int i = 0; i < objects; ++i) {
        at += (size_t)snprintf(out + at, cap - at, "}");
    }
}

/* ---- 02 initialisation and deinitialisation ---- */

static int g_init_calls, g_init_text_ok, g_late_calls, g_late_text_ok, g_finalize_calls;
static void *g_init_data, *g_finalize_data;
static const char *g_config_text;

/* Whether an init callback was given the text of aclInit's file. */
static int is_config_text(const char *configStr, size_t len)
{
    return g_config_text != NULL && len == strlen(g_config_text) &&
           memcmp(configStr, g_config_text, len) == 0;
}

static aclError on_init(const char *configStr, size_t len, void *userData)
{
    ++g_init_calls;
    g_init_data = userData;
    g_init_text_ok = is_config_text(configStr, len);
    return ACL_SUCCESS;
}

static aclError on_init_late(const char *configStr, size_t len, void *userData)
{
    (void)userData;
    ++g_late_calls;
    g_late_text_ok = is_config_text(configStr, len);
    return ACL_SUCCESS;
}

static aclError on_finalize(void *userData)
{
    ++g_finalize_calls;
    g_finalize_data = userData;
    return ACL_SUCCESS;
}

static void initialisation(void)
{
    static char text[2048], json[512];
    char path[128], deep_objects[128], deep_arrays[128], not_json[128];
    int marker = 0, finalize_marker = 0;

    FAILS(aclInitCallbackRegister(ACL_REG_TYPE_OTHER, NULL, NULL));
    FAILS(aclInitCallbackUnRegister(ACL_REG_TYPE_OTHER, NULL));
    FAILS(aclFinalizeCallbackRegister(ACL_REG_TYPE_OTHER, NULL, NULL));
    FAILS(aclFinalizeCallbackUnRegister(ACL_REG_TYPE_OTHER, NULL));
    FAILS(aclInitCallbackRegister((aclRegisterCallbackType)0x1234, on_init, NULL));

    /* "{" and "[" nest at most 10 levels deep. */
    nested_json(json, sizeof json, 11, 1);
    write_file(deep_objects, sizeof deep_objects, "objects", json);
    nested_json(json, sizeof json, 1, 11);
    write_file(deep_arrays, sizeof deep_arrays, "arrays", json);
    write_file(not_json, sizeof not_json, "garbage", "{\"dump\": ");
    FAILS(aclInit(deep_objects));
    FAILS(aclInit(deep_arrays));
    FAILS(aclInit(not_json));
    FAILS(aclInit("/nonexistent/npusim-config-edges.json"));
    /* The operator cache's queue length: a positive count written as a string. */
    static const char *const bad_queues[] = {"\"many\"", "\"0\"", "\"-5\"", "10000"};
    for (size_t i = 0; i < sizeof bad_queues / sizeof bad_queues[0]; ++i) {
        snprintf(json, sizeof json, "{\"max_opqueue_num\": %s}", bad_queues[i]);
        write_file(path, sizeof path, "queue", json);
        EXPECT(aclInit(path), ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG);
        remove(path);
    }
    /* A failed aclInit initialised nothing: the dump functions need aclInit. */
    EXPECT(aclmdlInitDump(), ACL_ERROR_UNINITIALIZE);

    /* Every documented key at once, and both nestings at their limit (the root object and 9
     * under "nested"). The stack size is
     * raised to 32K, the printf FIFO rounded up to a multiple of 8; a model dump configured
     * here makes aclmdlInitDump fail. */
    nested_json(json, sizeof json, 9, 10);
    snprintf(text, sizeof text,
             "{\"defaultDevice\": {\"default_device\": \"1\"},\n"
             " \"StackSize\": {\"aicore_stack_size\": 20000},\n"
             " \"simd_printf_fifo_size_per_core\": 1025,\n"
             " \"err_msg_mode\": \"0\",\n"
             " \"max_opqueue_num\": \"10000\",\n"
             " \"dump\": {\"dump_list\": [{\"model_name\": \"m\"}], \"dump_path\": \"output\"},\n"
             " \"nested\": %s}\n",
             json);
    write_file(path, sizeof path, "init", text);
    g_config_text = text;

    /* Registered before aclInit: called by it, with the file's text. */
    EXPECT(aclInitCallbackRegister(ACL_REG_TYPE_OTHER, on_init, &marker), ACL_SUCCESS);
    EXPECT(aclFinalizeCallbackRegister(ACL_REG_TYPE_OTHER, on_finalize, &finalize_marker),
           ACL_SUCCESS);
    HOLDS(g_init_calls == 0);
    EXPECT(aclInit(path), ACL_SUCCESS);
    HOLDS(g_init_calls == 1 && g_init_text_ok && g_init_data == &marker);

    /* The default device serves a thread that set none; aclrtSetDevice comes first. */
    int32_t device = -1;
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    HOLDS(device == 1);
    size_t stack = 0, fifo = 0;
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &stack), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, &fifo),
           ACL_SUCCESS);
    HOLDS(stack == 32768 && fifo == 1032);
    EXPECT(aclmdlInitDump(), ACL_ERROR_DUMP_ALREADY_RUN);

    /* Registered after aclInit: called at once. */
    EXPECT(aclInitCallbackRegister(ACL_REG_TYPE_OTHER, on_init_late, NULL), ACL_SUCCESS);
    HOLDS(g_late_calls == 1 && g_late_text_ok);
    EXPECT(aclInitCallbackUnRegister(ACL_REG_TYPE_OTHER, on_init_late), ACL_SUCCESS);
    EXPECT(aclInitCallbackUnRegister(ACL_REG_TYPE_OTHER, on_init), ACL_SUCCESS);

    /* A repeated aclInit returns ACL_ERROR_REPEAT_INITIALIZE; one aclFinalize clears every
     * reference. */
    EXPECT(aclInit(path), ACL_ERROR_REPEAT_INITIALIZE);
    HOLDS(g_finalize_calls == 0);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    HOLDS(g_finalize_calls == 1 && g_finalize_data == &finalize_marker);
    EXPECT(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    uint64_t left = 77;
    EXPECT(aclFinalizeReference(&left), ACL_ERROR_REPEAT_FINALIZE);
    HOLDS(left == 77);
    EXPECT(aclmdlInitDump(), ACL_ERROR_UNINITIALIZE);
    HOLDS(g_finalize_calls == 1);
    (void)aclrtResetDevice(1);
    (void)aclGetRecentErrMsg();

    /* aclFinalizeReference counts down and finalises at 0; the count is optional. */
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    EXPECT(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    HOLDS(g_init_calls == 1 && g_late_calls == 1);
    EXPECT(aclFinalizeReference(&left), ACL_SUCCESS);
    HOLDS(left == 2);
    EXPECT(aclFinalizeReference(NULL), ACL_SUCCESS);
    HOLDS(g_finalize_calls == 1);
    EXPECT(aclmdlInitDump(), ACL_SUCCESS);
    EXPECT(aclmdlFinalizeDump(), ACL_SUCCESS);
    EXPECT(aclFinalizeReference(&left), ACL_SUCCESS);
    HOLDS(left == 0 && g_finalize_calls == 2);
    left = 77;
    EXPECT(aclFinalizeReference(&left), ACL_ERROR_REPEAT_FINALIZE);
    HOLDS(left == 77);

    /* Unregistered: no longer called. */
    EXPECT(aclFinalizeCallbackUnRegister(ACL_REG_TYPE_OTHER, on_finalize), ACL_SUCCESS);
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    HOLDS(g_finalize_calls == 2 && g_init_calls == 1);

    remove(path);
    remove(deep_objects);
    remove(deep_arrays);
    remove(not_json);
}

/* ---- 03 runtime parameters and resource limits ---- */

/* ACL_OPT_STRONG_CONSISTENCY, which CANN's header deprecates. */
#define OPT_STRONG_CONSISTENCY ((aclSysParamOpt)2)

static void *read_in_thread(void *arg)
{
    uint32_t *out = arg;
    int64_t deterministic = -1;
    if (aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &deterministic) == ACL_SUCCESS) {
        out[0] = (uint32_t)deterministic;
    }
    if (aclrtSetDevice(0) == ACL_SUCCESS) {
        (void)aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &out[1]);
        (void)aclrtResetDevice(0);
    }
    return NULL;
}

/* Runs read_in_thread on a new thread: the process's deterministic setting and the cube limit
 * that thread uses. */
static void read_from_another_thread(uint32_t out[2])
{
    pthread_t thread;
    out[0] = out[1] = 77;
    if (pthread_create(&thread, NULL, read_in_thread, out) == 0) {
        pthread_join(thread, NULL);
    }
}

/* Before anything sets them, every parameter reads 0. */
static void parameter_defaults(void)
{
    int64_t value = -1;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    value = -1;
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    value = -1;
    EXPECT(aclrtGetSysParamOpt(OPT_STRONG_CONSISTENCY, &value), ACL_SUCCESS);
    HOLDS(value == 0);
}

static void parameters(void)
{
    int64_t value = -1;
    /* ACL_OPT_DETERMINISTIC takes [0, 4). */
    for (int64_t mode = 0; mode < 4; ++mode) {
        EXPECT(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, mode), ACL_SUCCESS);
        EXPECT(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
        HOLDS(value == mode);
    }
    FAILS(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 4));
    FAILS(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, -1));
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    /* The process's setting: another thread reads it too. */
    uint32_t seen[2];
    read_from_another_thread(seen);
    HOLDS(seen[0] == 3);
    /* The switches take 0 or 1. */
    EXPECT(aclrtSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 1), ACL_SUCCESS);
    FAILS(aclrtSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 2));
    EXPECT(aclrtGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &value), ACL_SUCCESS);
    HOLDS(value == 1);
    EXPECT(aclrtSetSysParamOpt(OPT_STRONG_CONSISTENCY, 1), ACL_SUCCESS);
    FAILS(aclrtSetSysParamOpt(OPT_STRONG_CONSISTENCY, 2));
    /* No such option; no place for the value. */
    value = 77;
    FAILS(aclrtSetSysParamOpt((aclSysParamOpt)99, 0));
    FAILS(aclrtGetSysParamOpt((aclSysParamOpt)99, &value));
    HOLDS(value == 77);
    FAILS(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, NULL));
    EXPECT(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 0), ACL_SUCCESS);
    EXPECT(aclrtSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 0), ACL_SUCCESS);
    EXPECT(aclrtSetSysParamOpt(OPT_STRONG_CONSISTENCY, 0), ACL_SUCCESS);
}

static void resource_limits(aclrtStream stream, uint32_t devices)
{
    uint32_t cube = 0, vector = 0, value = 77;
    int64_t cores = 0, vector_cores = 0;
    /* Unset: the hardware's counts. */
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &cube), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, &vector), ACL_SUCCESS);
    EXPECT(aclGetDeviceCapability(0, ACL_DEVICE_INFO_AI_CORE_NUM, &cores), ACL_SUCCESS);
    EXPECT(aclGetDeviceCapability(0, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &vector_cores), ACL_SUCCESS);
    HOLDS(cube == (uint32_t)cores && vector == (uint32_t)vector_cores);
    /* A type outside aclrtDevResLimitType. */
    const aclrtDevResLimitType bad = (aclrtDevResLimitType)2;
    FAILS(aclrtGetDeviceResLimit(0, bad, &value));
    FAILS(aclrtSetDeviceResLimit(0, bad, 1));
    FAILS(aclrtGetStreamResLimit(stream, bad, &value));
    FAILS(aclrtSetStreamResLimit(stream, bad, 1));
    FAILS(aclrtGetResInCurrentThread(bad, &value));
    HOLDS(value == 77);
    /* A device's limit is its own. */
    if (devices > 1) {
        EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 2), ACL_SUCCESS);
        EXPECT(aclrtGetDeviceResLimit(1, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
        HOLDS(value == cube);
        EXPECT(aclrtResetDeviceResLimit(0), ACL_SUCCESS);
    }
    aclrtStream other = NULL;
    EXPECT(aclrtCreateStream(&other), ACL_SUCCESS);
    /* A stream's limits are used once some are set on it. */
    FAILS(aclrtUseStreamResInCurrentThread(other));
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 1), ACL_SUCCESS);
    EXPECT(aclrtSetStreamResLimit(other, ACL_RT_DEV_RES_CUBE_CORE, 2), ACL_SUCCESS);
    /* The last stream used wins. */
    EXPECT(aclrtUseStreamResInCurrentThread(stream), ACL_SUCCESS);
    EXPECT(aclrtUseStreamResInCurrentThread(other), ACL_SUCCESS);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 2);
    /* Only in this thread. */
    uint32_t seen[2];
    read_from_another_thread(seen);
    HOLDS(seen[1] == cube);
    /* A stream's limit comes before the process's, set before or after it. */
    EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 3), ACL_SUCCESS);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 2);
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 1);
    /* A type the stream did not set comes from the process, or the hardware. */
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == vector);
    EXPECT(aclrtUnuseStreamResInCurrentThread(other), ACL_SUCCESS);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    EXPECT(aclrtResetStreamResLimit(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceResLimit(0), ACL_SUCCESS);
    /* A destroyed stream has no limits. */
    EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
    value = 77;
    FAILS(aclrtGetStreamResLimit(other, ACL_RT_DEV_RES_CUBE_CORE, &value));
    FAILS(aclrtSetStreamResLimit(other, ACL_RT_DEV_RES_CUBE_CORE, 1));
    HOLDS(value == 77);
}

/* ---- 11-06 cache operations ---- */

static void cache_operations(aclrtStream stream, uint32_t devices)
{
    size_t desc_size = 0;
    void *src = NULL, *desc = NULL, *pinned = NULL;
    FAILS(aclrtCmoGetDescSize(NULL));
    EXPECT(aclrtCmoGetDescSize(&desc_size), ACL_SUCCESS);
    HOLDS(desc_size > 0);
    EXPECT(aclrtMalloc(&src, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&desc, desc_size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, BYTES), ACL_SUCCESS);
    /* Only prefetches, only device memory of this device. */
    EXPECT(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream), ACL_SUCCESS);
    EXPECT(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, NULL), ACL_SUCCESS);
    FAILS(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_WRITEBACK, stream));
    FAILS(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_INVALID, stream));
    FAILS(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_FLUSH, stream));
    FAILS(aclrtCmoAsync(NULL, BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream));
    FAILS(aclrtCmoAsync(pinned, BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream));
    /* The descriptor flow: its size, device memory for it, the source recorded, then used. */
    FAILS(aclrtCmoSetDesc(NULL, src, BYTES));
    FAILS(aclrtCmoSetDesc(desc, NULL, BYTES));
    FAILS(aclrtCmoSetDesc(desc, pinned, BYTES));
    EXPECT(aclrtCmoSetDesc(desc, src, BYTES), ACL_SUCCESS);
    EXPECT(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_PREFETCH, stream, NULL), ACL_SUCCESS);
    int reserve = 0;
    FAILS(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_PREFETCH, stream, &reserve));
    FAILS(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_WRITEBACK, stream, NULL));
    FAILS(aclrtCmoAsyncWithDesc(NULL, ACL_RT_CMO_TYPE_PREFETCH, stream, NULL));
    if (devices > 1) {
        void *elsewhere = NULL;
        EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
        EXPECT(aclrtMalloc(&elsewhere, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
        EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
        FAILS(aclrtCmoAsync(elsewhere, BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream));
        FAILS(aclrtCmoSetDesc(desc, elsewhere, BYTES));
        EXPECT(aclrtFree(elsewhere), ACL_SUCCESS);
        EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
        EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    }
    /* The barrier forms: not on an Atlas A2. */
    FAILS(aclrtCmoAsyncWithBarrier(src, BYTES, ACL_RT_CMO_TYPE_INVALID, 1, stream));
    FAILS(aclrtCmoAsyncWithBarrier(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, 0, stream));
    aclrtBarrierTaskInfo info;
    memset(&info, 0, sizeof info);
    info.barrierNum = 1;
    info.cmoInfo[0].cmoType = ACL_RT_CMO_TYPE_INVALID;
    info.cmoInfo[0].barrierId = 1;
    FAILS(aclrtCmoWaitBarrier(&info, stream, 0));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(desc), ACL_SUCCESS);
    EXPECT(aclrtFree(src), ACL_SUCCESS);
}

/* ---- 11-07 IPC memory: the importer, a second process ---- */

enum { KEY_WHITELISTED = 2, KEY_OPEN, KEY_PEER, KEY_NO_PEER, KEY_CLOSED, KEY_FREED, IMPORT_ARGS };

/* Whether the first `n` bytes at `host` are all `value`. */
static int all_bytes(const unsigned char *host, size_t n, unsigned char value)
{
    for (size_t i = 0; i < n; ++i) {
        if (host[i] != value) {
            return 0;
        }
    }
    return 1;
}

/* Checks the memory a key shares, imported at `dev` on the current device: 0x5A throughout. */
static void check_imported(void *dev)
{
    unsigned char host[64];
    memset(host, 0, sizeof host);
    EXPECT(aclrtMemcpy(host, sizeof host, dev, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(all_bytes(host, sizeof host, 0x5A));
}

/* The importing process: stdin and stdout are pipes to the exporter. It reports its pid and
 * waits to be whitelisted, then its counts. */
static int importer(char **keys)
{
    char line[64];
    int32_t pid = 0;
    uint32_t devices = 0;
    void *dev = SENTINEL;
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    /* Not whitelisted yet; closed; freed; flags beyond the two documented. */
    FAILS(aclrtIpcMemImportByKey(&dev, keys[KEY_WHITELISTED], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtIpcMemImportByKey(&dev, keys[KEY_CLOSED], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtIpcMemImportByKey(&dev, keys[KEY_FREED], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtIpcMemImportByKey(&dev, keys[KEY_OPEN], 2));
    HOLDS(dev == SENTINEL);
    /* Exported without pid validation: anyone imports it. */
    EXPECT(aclrtIpcMemImportByKey(&dev, keys[KEY_OPEN], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    HOLDS(dev != SENTINEL && dev != NULL);
    check_imported(dev);
    fflush(stdout);
    snprintf(line, sizeof line, "pid %d", pid);
    if (write_line(1, line) != 0 || read_line(0, line, sizeof line) != 0 ||
        strcmp(line, "go") != 0) {
        return 2;
    }
    void *whitelisted = SENTINEL;
    EXPECT(aclrtIpcMemImportByKey(&whitelisted, keys[KEY_WHITELISTED],
                                  ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    check_imported(whitelisted);
    /* Imported on another device: by default the two devices exchange no data; with peer
     * access enabled by the import, the other device copies from it (asynchronously: across
     * devices IPC memory takes no synchronous copy). */
    if (devices > 1) {
        void *peer = SENTINEL, *no_peer = SENTINEL, *local = NULL;
        aclrtStream stream = NULL;
        unsigned char host[64];
        EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
        EXPECT(aclrtMalloc(&local, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
        EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
        EXPECT(aclrtIpcMemImportByKey(&no_peer, keys[KEY_NO_PEER],
                                      ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT),
               ACL_SUCCESS);
        FAILS(aclrtMemcpyAsync(local, sizeof host, no_peer, sizeof host,
                               ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
        EXPECT(aclrtIpcMemImportByKey(&peer, keys[KEY_PEER],
                                      ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS),
               ACL_SUCCESS);
        EXPECT(aclrtMemcpyAsync(local, sizeof host, peer, sizeof host,
                                ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
               ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
        memset(host, 0, sizeof host);
        EXPECT(aclrtMemcpy(host, sizeof host, local, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST),
               ACL_SUCCESS);
        HOLDS(all_bytes(host, sizeof host, 0x5A));
        EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
        EXPECT(aclrtFree(local), ACL_SUCCESS);
        EXPECT(aclrtIpcMemClose(keys[KEY_PEER]), ACL_SUCCESS);
        EXPECT(aclrtIpcMemClose(keys[KEY_NO_PEER]), ACL_SUCCESS);
        EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
        EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
        EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    }
    /* The importer closes its keys before the exporter closes them. */
    EXPECT(aclrtIpcMemClose(keys[KEY_WHITELISTED]), ACL_SUCCESS);
    EXPECT(aclrtIpcMemClose(keys[KEY_OPEN]), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    printf("counts %d %d\n", g_checked, g_wrong);
    fflush(stdout);
    return 0;
}

/* ---- 11-07 IPC memory: the exporter ---- */

static void export_key(void *dev, char *key, uint64_t flags)
{
    EXPECT(aclrtIpcMemGetExportKey(dev, BYTES, key, KEY_LEN, flags), ACL_SUCCESS);
}

/* Runs the importer and adds its counts; lines it prints besides are its mismatches. */
static void run_importer(char *self, char keys[IMPORT_ARGS][KEY_LEN], const char *whitelisted)
{
    char *argv[IMPORT_ARGS + 1] = {self, (char *)"import"};
    for (int i = KEY_WHITELISTED; i < IMPORT_ARGS; ++i) {
        argv[i] = keys[i];
    }
    argv[IMPORT_ARGS] = NULL;
    struct child child;
    if (spawn_self(argv, &child) != 0) {
        HOLDS(!"the importer starts");
        return;
    }
    char line[256];
    int done = 0;
    while (!done && read_line(child.from_child, line, sizeof line) == 0) {
        int checked = 0, wrong = 0;
        int32_t pid = 0;
        if (sscanf(line, "pid %d", &pid) == 1) {
            HOLDS(pid == child.pid);
            EXPECT(aclrtIpcMemSetImportPid(whitelisted, &pid, 1), ACL_SUCCESS);
            (void)write_line(child.to_child, "go");
        } else if (sscanf(line, "counts %d %d", &checked, &wrong) == 2) {
            g_checked += checked;
            g_wrong += wrong;
            done = 1;
        } else {
            printf("importer: %s\n", line);
        }
    }
    HOLDS(done);
    int status = -1;
    HOLDS(waitpid(child.pid, &status, 0) == child.pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    close(child.to_child);
    close(child.from_child);
}

static void ipc_memory(char *self)
{
    static char keys[IMPORT_ARGS][KEY_LEN];
    void *dev = NULL, *freed = NULL, *pinned = NULL;
    char probe[KEY_LEN];
    EXPECT(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&freed, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, BYTES), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, BYTES, 0x5A, BYTES), ACL_SUCCESS);
    /* flags: the two documented values only; len: 65; device memory only. */
    memset(probe, 'z', sizeof probe);
    FAILS(aclrtIpcMemGetExportKey(dev, BYTES, probe, KEY_LEN, 2));
    FAILS(aclrtIpcMemGetExportKey(dev, BYTES, probe, KEY_LEN - 1, 0));
    FAILS(aclrtIpcMemGetExportKey(pinned, BYTES, probe, KEY_LEN, 0));
    HOLDS(probe[0] == 'z' && probe[KEY_LEN - 1] == 'z');
    export_key(dev, keys[KEY_WHITELISTED], ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT);
    export_key(dev, keys[KEY_OPEN], ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION);
    export_key(dev, keys[KEY_PEER], ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION);
    export_key(dev, keys[KEY_NO_PEER], ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION);
    export_key(dev, keys[KEY_CLOSED], ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION);
    export_key(freed, keys[KEY_FREED], ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION);
    HOLDS(strlen(keys[KEY_WHITELISTED]) < KEY_LEN &&
          strcmp(keys[KEY_WHITELISTED], keys[KEY_OPEN]) != 0);
    EXPECT(aclrtIpcMemClose(keys[KEY_CLOSED]), ACL_SUCCESS);
    EXPECT(aclrtFree(freed), ACL_SUCCESS);
    /* A whitelist needs a key this process exports. */
    int32_t pid = (int32_t)getpid();
    FAILS(aclrtIpcMemSetImportPid(keys[KEY_CLOSED], &pid, 1));
    FAILS(aclrtIpcMemSetImportPid("no key of this process", &pid, 1));

    run_importer(self, keys, keys[KEY_WHITELISTED]);

    EXPECT(aclrtIpcMemClose(keys[KEY_WHITELISTED]), ACL_SUCCESS);
    EXPECT(aclrtIpcMemClose(keys[KEY_OPEN]), ACL_SUCCESS);
    EXPECT(aclrtIpcMemClose(keys[KEY_PEER]), ACL_SUCCESS);
    EXPECT(aclrtIpcMemClose(keys[KEY_NO_PEER]), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-08 custom allocators ---- */

static void *alloc_block(aclrtAllocator allocator, size_t size)
{
    (void)allocator;
    (void)size;
    return NULL;
}

static void *alloc_other_block(aclrtAllocator allocator, size_t size)
{
    (void)allocator;
    (void)size;
    return NULL;
}

static void free_block(aclrtAllocator allocator, aclrtAllocatorBlock block)
{
    (void)allocator;
    (void)block;
}

static void *alloc_advised(aclrtAllocator allocator, size_t size, aclrtAllocatorAddr addr)
{
    (void)allocator;
    (void)size;
    (void)addr;
    return NULL;
}

static void *block_address(aclrtAllocatorBlock block)
{
    return block;
}

/* A descriptor with every callback, the allocator object `object` and `alloc`. */
static aclrtAllocatorDesc full_desc(aclrtAllocator object, aclrtAllocatorAllocFunc alloc)
{
    aclrtAllocatorDesc desc = aclrtAllocatorCreateDesc();
    HOLDS(desc != NULL);
    EXPECT(aclrtAllocatorSetObjToDesc(desc, object), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetAllocFuncToDesc(desc, alloc), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetFreeFuncToDesc(desc, free_block), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetAllocAdviseFuncToDesc(desc, alloc_advised), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(desc, block_address), ACL_SUCCESS);
    return desc;
}

static void allocators(aclrtStream stream)
{
    int first_object = 0, second_object = 0;
    FAILS(aclrtAllocatorSetObjToDesc(NULL, &first_object));
    FAILS(aclrtAllocatorSetAllocFuncToDesc(NULL, alloc_block));
    FAILS(aclrtAllocatorSetFreeFuncToDesc(NULL, free_block));
    FAILS(aclrtAllocatorSetAllocAdviseFuncToDesc(NULL, alloc_advised));
    FAILS(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(NULL, block_address));
    FAILS(aclrtAllocatorDestroyDesc(NULL));
    aclrtAllocatorDesc first = full_desc(&first_object, alloc_block);
    aclrtAllocatorDesc second = full_desc(&second_object, alloc_other_block);
    /* Never the NULL stream. */
    FAILS(aclrtAllocatorRegister(NULL, first));
    EXPECT(aclrtAllocatorRegister(stream, first), ACL_SUCCESS);
    aclrtAllocatorDesc desc = NULL;
    aclrtAllocator object = NULL;
    aclrtAllocatorAllocFunc alloc = NULL;
    aclrtAllocatorFreeFunc release = NULL;
    aclrtAllocatorAllocAdviseFunc advise = NULL;
    aclrtAllocatorGetAddrFromBlockFunc address = NULL;
    EXPECT(aclrtAllocatorGetByStream(stream, &desc, &object, &alloc, &release, &advise, &address),
           ACL_SUCCESS);
    HOLDS(desc == first && object == &first_object && alloc == alloc_block);
    HOLDS(release == free_block && advise == alloc_advised && address == block_address);
    /* The last registration of a stream wins. */
    EXPECT(aclrtAllocatorRegister(stream, second), ACL_SUCCESS);
    /* A descriptor may go once it is registered. */
    EXPECT(aclrtAllocatorDestroyDesc(first), ACL_SUCCESS);
    EXPECT(aclrtAllocatorDestroyDesc(second), ACL_SUCCESS);
    EXPECT(aclrtAllocatorGetByStream(stream, &desc, &object, &alloc, &release, &advise, &address),
           ACL_SUCCESS);
    HOLDS(object == &second_object && alloc == alloc_other_block && release == free_block);
    /* Unregistering twice, or a stream that is gone, succeeds. */
    EXPECT(aclrtAllocatorUnregister(stream), ACL_SUCCESS);
    EXPECT(aclrtAllocatorUnregister(stream), ACL_SUCCESS);
    aclrtStream gone = NULL;
    EXPECT(aclrtCreateStream(&gone), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(gone), ACL_SUCCESS);
    EXPECT(aclrtAllocatorUnregister(gone), ACL_SUCCESS);
}

/* ---- 11-11 device variables ---- */

static int floats_are(const float *values, float a, float b, float c, float d)
{
    return values[0] == a && values[1] == b && values[2] == c && values[3] == d;
}

static void device_variables(aclrtStream stream)
{
    aclrtBinHandle bin = NULL;
    const char *library = getenv("NPUSIM_GLOBALS_SO");
    EXPECT(aclrtBinaryLoadFromFile(library, NULL, &bin), ACL_SUCCESS);
    void *address = SENTINEL;
    size_t size = 0;
    FAILS(aclrtGetSymbolAddress(bias, NULL));
    FAILS(aclrtGetSymbolAddress(NULL, &address));
    FAILS(aclrtGetSymbolSize(bias, NULL));
    FAILS(aclrtGetSymbolSize(NULL, &size));
    HOLDS(address == SENTINEL && size == 0);
    EXPECT(aclrtGetSymbolAddress(bias, &address), ACL_SUCCESS);
    EXPECT(aclrtGetSymbolSize(bias, &size), ACL_SUCCESS);
    HOLDS(address != SENTINEL && size == sizeof bias);

    const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float back[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
    /* offset + count may reach the variable's end, not pass it. */
    EXPECT(aclrtMemcpyToSymbol(bias, values, 16, 0, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 8, 8, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 0, 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    FAILS(aclrtMemcpyToSymbol(bias, values, 8, 9, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpyToSymbol(bias, values, 17, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    /* HOST_TO_DEVICE or DEFAULT only. */
    FAILS(aclrtMemcpyToSymbol(bias, values, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST));
    FAILS(aclrtMemcpyToSymbol(bias, values, 4, 0, ACL_MEMCPY_DEVICE_TO_DEVICE));
    FAILS(aclrtMemcpyToSymbol(bias, values, 4, 0, ACL_MEMCPY_HOST_TO_HOST));
    FAILS(aclrtMemcpyToSymbol(bias, NULL, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpyToSymbol(NULL, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpyToSymbol(values, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    /* dstMax >= count, DEVICE_TO_HOST or DEFAULT, within the variable; a failed copy writes
     * nothing. */
    FAILS(aclrtMemcpyFromSymbol(back, 4, bias, 8, 0, ACL_MEMCPY_DEVICE_TO_HOST));
    FAILS(aclrtMemcpyFromSymbol(back, 16, bias, 8, 12, ACL_MEMCPY_DEVICE_TO_HOST));
    FAILS(aclrtMemcpyFromSymbol(back, 16, bias, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpyFromSymbol(NULL, 16, bias, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST));
    FAILS(aclrtMemcpyFromSymbol(back, 16, NULL, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(floats_are(back, -1.0f, -1.0f, -1.0f, -1.0f));
    EXPECT(aclrtMemcpyFromSymbol(back, 16, bias, 16, 0, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
    HOLDS(floats_are(back, 1.0f, 2.0f, 1.0f, 2.0f));
    EXPECT(aclrtMemcpyFromSymbol(back, 4, bias, 4, 12, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(back[0] == 2.0f);

    /* Pageable host memory: the asynchronous copies return once they are done. */
    const float newer[4] = {5.0f, 6.0f, 7.0f, 8.0f};
    float pageable[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    EXPECT(aclrtMemcpyToSymbolAsync(bias, newer, 16, 0, ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyFromSymbolAsync(pageable, 16, bias, 16, 0, ACL_MEMCPY_DEVICE_TO_HOST,
                                      stream),
           ACL_SUCCESS);
    HOLDS(floats_are(pageable, 5.0f, 6.0f, 7.0f, 8.0f));
    FAILS(aclrtMemcpyToSymbolAsync(bias, newer, 4, 16, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    FAILS(aclrtMemcpyToSymbolAsync(bias, newer, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    FAILS(aclrtMemcpyFromSymbolAsync(pageable, 2, bias, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    FAILS(aclrtMemcpyFromSymbolAsync(pageable, 16, bias, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE,
                                     stream));
    /* Pinned memory: queued, done after a synchronisation. */
    float *pinned = NULL;
    EXPECT(aclrtMallocHost((void **)&pinned, 2 * sizeof values), ACL_SUCCESS);
    if (pinned != NULL) {
        memcpy(pinned, values, sizeof values);
        memset(&pinned[4], 0, sizeof values);
        EXPECT(aclrtMemcpyToSymbolAsync(bias, pinned, 16, 0, ACL_MEMCPY_DEFAULT, stream),
               ACL_SUCCESS);
        EXPECT(aclrtMemcpyFromSymbolAsync(&pinned[4], 16, bias, 8, 8, ACL_MEMCPY_DEFAULT, stream),
               ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
        HOLDS(pinned[4] == 3.0f && pinned[5] == 4.0f && pinned[6] == 0.0f);
        EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    }
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
}

/* ---- 16 compute groups: not on an Atlas A2 ---- */

static void groups(void)
{
    HOLDS(aclrtCreateGroupInfo() == NULL);
    (void)aclGetRecentErrMsg();
    uint32_t count = 77;
    FAILS(aclrtGetGroupCount(&count));
    HOLDS(count == 77);
    FAILS(aclrtSetGroup(0));
    static uint64_t storage[64];
    aclrtGroupInfo *info = (aclrtGroupInfo *)storage;
    FAILS(aclrtGetAllGroupInfo(info));
    int32_t value = 77;
    size_t written = 77;
    FAILS(aclrtGetGroupInfoDetail(info, 0, ACL_GROUP_AICORE_INT, &value, sizeof value, &written));
    HOLDS(value == 77 && written == 77);
    FAILS(aclrtDestroyGroupInfo(NULL));
}

/* ---- 18 dump configuration ---- */

static const char *const INVALID_DUMPS[] = {
    /* A model dump needs dump_path. */
    "{\"dump\": {\"dump_list\": [{\"model_name\": \"m\"}]}}",
    /* An exception dump excludes a model or single-operator dump. */
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"model_name\": \"m\"}], "
    "\"dump_scene\": \"aic_err_brief_dump\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{}], \"dump_op_switch\": \"on\", "
    "\"dump_scene\": \"aic_err_norm_dump\"}}",
    /* So does an overflow dump, which needs dump_path. */
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"model_name\": \"m\"}], "
    "\"dump_debug\": \"on\"}}",
    "{\"dump\": {\"dump_debug\": \"on\"}}",
    /* The watch mode: not with dump_debug or dump_op_switch, needs dump_path, takes no
     * model_name and dumps outputs only. */
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"watcher_nodes\": [\"C\"]}], "
    "\"dump_scene\": \"watcher\", \"dump_debug\": \"on\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"watcher_nodes\": [\"C\"]}], "
    "\"dump_scene\": \"watcher\", \"dump_op_switch\": \"on\"}}",
    "{\"dump\": {\"dump_list\": [{\"watcher_nodes\": [\"C\"]}], \"dump_scene\": \"watcher\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"model_name\": \"m\", "
    "\"watcher_nodes\": [\"C\"]}], \"dump_scene\": \"watcher\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"watcher_nodes\": [\"C\"]}], "
    "\"dump_scene\": \"watcher\", \"dump_mode\": \"input\"}}",
    /* Kernel debug data needs dump_path, and names known types. */
    "{\"dump\": {\"dump_kernel_data\": \"printf\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_kernel_data\": \"printf,stack\"}}",
};

static const char *const VALID_DUMPS[] = {
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"model_name\": \"ResNet-50\", "
    "\"layer\": [\"conv1\", \"pool1\"]}], \"dump_mode\": \"output\", \"dump_op_switch\": \"off\", "
    "\"dump_data\": \"tensor\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{}], \"dump_op_switch\": \"on\"}}",
    /* dump_path is optional for an exception dump. */
    "{\"dump\": {\"dump_scene\": \"aic_err_brief_dump\"}}",
    "{\"dump\": {\"dump_scene\": \"lite_exception\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_debug\": \"on\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_list\": [{\"layer\": [\"A\", \"B\"], "
    "\"watcher_nodes\": [\"C\", \"D\"]}], \"dump_mode\": \"output\", \"dump_level\": \"op\", "
    "\"dump_scene\": \"watcher\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_kernel_data\": \"printf,assert\"}}",
    "{\"dump\": {\"dump_path\": \"o\", \"dump_kernel_data\": \"all\"}}",
};

static void dumps(void)
{
    char path[128];
    write_file(path, sizeof path, "dump", VALID_DUMPS[0]);
    /* aclmdlSetDump and aclmdlFinalizeDump need aclmdlInitDump first. */
    EXPECT(aclmdlSetDump(path), ACL_ERROR_DUMP_NOT_RUN);
    FAILS(aclmdlFinalizeDump());
    EXPECT(aclmdlInitDump(), ACL_SUCCESS);
    FAILS(aclmdlSetDump(NULL));
    FAILS(aclmdlSetDump("/nonexistent/npusim-dump.json"));
    for (size_t i = 0; i < sizeof INVALID_DUMPS / sizeof INVALID_DUMPS[0]; ++i) {
        write_file(path, sizeof path, "dump", INVALID_DUMPS[i]);
        if (aclmdlSetDump(path) == ACL_SUCCESS) {
            ++g_wrong;
            printf("aclmdlSetDump accepted %s\n", INVALID_DUMPS[i]);
        }
        ++g_checked;
        (void)aclGetRecentErrMsg();
    }
    /* Each valid one replaces the one before. */
    for (size_t i = 0; i < sizeof VALID_DUMPS / sizeof VALID_DUMPS[0]; ++i) {
        write_file(path, sizeof path, "dump", VALID_DUMPS[i]);
        aclError got = aclmdlSetDump(path);
        if (got != ACL_SUCCESS) {
            ++g_wrong;
            printf("aclmdlSetDump refused %s with %d: %s\n", VALID_DUMPS[i], (int)got,
                   aclGetRecentErrMsg());
        }
        ++g_checked;
    }
    EXPECT(aclmdlFinalizeDump(), ACL_SUCCESS);
    EXPECT(aclmdlFinalizeDump(), ACL_ERROR_DUMP_NOT_RUN);
    /* Another session after the first. */
    EXPECT(aclmdlInitDump(), ACL_SUCCESS);
    EXPECT(aclmdlSetDump(path), ACL_SUCCESS);
    EXPECT(aclmdlFinalizeDump(), ACL_SUCCESS);
    remove(path);
}

/* ---- 21 snapshots ---- */

enum { STAGES = 6 };
static int g_stage_calls[STAGES], g_stage_device_ok = 1, g_fail_lock;

static uint32_t at_stage(int stage, int32_t deviceId)
{
    ++g_stage_calls[stage];
    g_stage_device_ok &= deviceId == 0;
    return 0;
}

static uint32_t at_lock_pre(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_LOCK_PRE, deviceId);
}
static uint32_t at_backup_pre(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_BACKUP_PRE, deviceId);
}
static uint32_t at_backup_post(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_BACKUP_POST, deviceId);
}
static uint32_t at_restore_pre(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_RESTORE_PRE, deviceId);
}
static uint32_t at_restore_post(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_RESTORE_POST, deviceId);
}
static uint32_t at_unlock_post(int32_t deviceId, void *args)
{
    (void)args;
    return at_stage(ACL_RT_SNAPSHOT_UNLOCK_POST, deviceId);
}

static uint32_t failing_lock_pre(int32_t deviceId, void *args)
{
    (void)deviceId;
    ++*(int *)args;
    return 1;
}

static const aclrtSnapShotCallBack STAGE_CALLBACKS[STAGES] = {
    at_lock_pre, at_backup_pre, at_backup_post, at_restore_pre, at_restore_post, at_unlock_post,
};

static int calls_are(int lock, int backup, int restore, int unlock)
{
    return g_stage_calls[ACL_RT_SNAPSHOT_LOCK_PRE] == lock &&
           g_stage_calls[ACL_RT_SNAPSHOT_BACKUP_PRE] == backup &&
           g_stage_calls[ACL_RT_SNAPSHOT_BACKUP_POST] == backup &&
           g_stage_calls[ACL_RT_SNAPSHOT_RESTORE_PRE] == restore &&
           g_stage_calls[ACL_RT_SNAPSHOT_RESTORE_POST] == restore &&
           g_stage_calls[ACL_RT_SNAPSHOT_UNLOCK_POST] == unlock;
}

/* Whether device memory `dev` holds `value` in its first 64 bytes. */
static int device_bytes_are(void *dev, unsigned char value)
{
    unsigned char host[64];
    memset(host, (unsigned char)~value, sizeof host);
    return aclrtMemcpy(host, sizeof host, dev, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST) ==
               ACL_SUCCESS &&
           all_bytes(host, sizeof host, value);
}

static void snapshots(void)
{
    int pid = (int)getpid();
    int reserve = 0;
    void *dev = NULL;
    aclrtSnapShotBackupArgs backup_args;
    aclrtSnapShotRestoreArgs restore_args;
    memset(&backup_args, 0, sizeof backup_args);
    memset(&restore_args, 0, sizeof restore_args);
    EXPECT(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, BYTES, 0x11, BYTES), ACL_SUCCESS);

    FAILS(aclrtSnapShotCallbackRegister((aclrtSnapShotStage)STAGES, at_lock_pre, NULL));
    FAILS(aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_LOCK_PRE, NULL, NULL));
    for (int stage = 0; stage < STAGES; ++stage) {
        EXPECT(aclrtSnapShotCallbackRegister((aclrtSnapShotStage)stage, STAGE_CALLBACKS[stage],
                                             NULL),
               ACL_SUCCESS);
    }
    /* No repeated registration. */
    EXPECT(aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_UNLOCK_POST, at_unlock_post, NULL),
           ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED);

    /* reserve and args: NULL only. */
    FAILS(aclrtSnapShotProcessLock(pid, &reserve));
    /* RUNNING: no restore, backup or unlock. */
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_ERROR_SNAPSHOT_RESTORE_FAILED);
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_ERROR_SNAPSHOT_BACKUP_FAILED);
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_ERROR_SNAPSHOT_UNLOCK_FAILED);
    HOLDS(calls_are(0, 0, 0, 0));

    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(1, 0, 0, 0));
    FAILS(aclrtSnapShotProcessBackup(pid, &backup_args));
    FAILS(aclrtSnapShotProcessUnlock(pid, &reserve));
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(1, 1, 0, 0));
    /* BACKED_UP: no second backup, no lock. */
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_ERROR_SNAPSHOT_BACKUP_FAILED);
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_ERROR_SNAPSHOT_LOCK_FAILED);
    FAILS(aclrtSnapShotProcessRestore(pid, &restore_args));
    EXPECT(aclrtMemset(dev, BYTES, 0x22, BYTES), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(1, 1, 1, 0));
    HOLDS(device_bytes_are(dev, 0x11));
    /* LOCKED again: no restore without a backup since. Backups may repeat, the last wins. */
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_ERROR_SNAPSHOT_RESTORE_FAILED);
    EXPECT(aclrtMemset(dev, BYTES, 0x33, BYTES), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, BYTES, 0x44, BYTES), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_SUCCESS);
    HOLDS(device_bytes_are(dev, 0x33));
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(1, 2, 2, 1));
    /* Unlocking from BACKED_UP. */
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(2, 3, 2, 2) && g_stage_device_ok);

    /* Unregistered callbacks are no longer called. */
    for (int stage = 0; stage < STAGES; ++stage) {
        EXPECT(aclrtSnapShotCallbackUnregister((aclrtSnapShotStage)stage, STAGE_CALLBACKS[stage]),
               ACL_SUCCESS);
    }
    FAILS(aclrtSnapShotCallbackUnregister((aclrtSnapShotStage)STAGES, at_lock_pre));
    FAILS(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_LOCK_PRE, NULL));
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_SUCCESS);
    HOLDS(calls_are(2, 3, 2, 2));

    /* A callback that fails fails its step. */
    EXPECT(aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_LOCK_PRE, failing_lock_pre, &g_fail_lock),
           ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_ERROR_SNAPSHOT_CALLBACK_FAILED);
    HOLDS(g_fail_lock == 1);
    EXPECT(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_LOCK_PRE, failing_lock_pre),
           ACL_SUCCESS);
    (void)aclrtSnapShotProcessUnlock(pid, NULL);
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 24 other APIs ---- */

static void numbers(void)
{
    HOLDS(aclDataTypeSize(ACL_FLOAT) == 4 && aclDataTypeSize(ACL_FLOAT16) == 2);
    HOLDS(aclDataTypeSize(ACL_INT8) == 1 && aclDataTypeSize(ACL_UINT8) == 1);
    HOLDS(aclDataTypeSize(ACL_INT16) == 2 && aclDataTypeSize(ACL_BF16) == 2);
    HOLDS(aclDataTypeSize(ACL_INT32) == 4 && aclDataTypeSize(ACL_UINT32) == 4);
    HOLDS(aclDataTypeSize(ACL_INT64) == 8 && aclDataTypeSize(ACL_DOUBLE) == 8);
    HOLDS(aclDataTypeSize(ACL_BOOL) == 1 && aclDataTypeSize(ACL_UINT64) == 8);
    /* Special values lose their meaning, the same way every time. */
    HOLDS(aclFloat16ToFloat(0x7C00) == 65536.0f);
    HOLDS(aclFloat16ToFloat(0xFC00) == -65536.0f);
    HOLDS(aclFloat16ToFloat(0x7E00) == 98304.0f);
    HOLDS(aclFloatToFloat16(NAN) == 0x7BFF);
    HOLDS(aclFloatToFloat16(INFINITY) == 0x7BFF);
    HOLDS(aclFloatToFloat16(-INFINITY) == 0xFBFF);
    HOLDS(aclFloatToFloat16(1.0f) == 0x3C00 && aclFloatToFloat16(-2.0f) == 0xC000);
    HOLDS(aclFloatToFloat16(65504.0f) == 0x7BFF && aclFloat16ToFloat(0x7BFF) == 65504.0f);
    HOLDS(aclFloat16ToFloat(aclFloatToFloat16(0.5f)) == 0.5f);
}

/* The packages configured at the start, oldest first, as the reference orders its example. */
static const char *const PACKAGES[][2] = {
    {"v-alpha1", "9.0.0-alpha.1"}, {"v-alpha2", "9.0.0-alpha.2"}, {"v-beta1", "9.0.0-beta.1"},
    {"v-beta2", "9.0.0-beta.2"},   {"v-rc1", "9.0.0-rc.1"},       {"v-rc2", "9.0.0-rc.2"},
    {"v-release", "9.0.0"},        {"v-patch", "9.0.1"},
};
enum { PACKAGE_COUNT = sizeof PACKAGES / sizeof PACKAGES[0] };

static void versions(void)
{
    int32_t previous = INT32_MIN;
    int ordered = 1, strings = 1;
    for (int i = 0; i < PACKAGE_COUNT; ++i) {
        int32_t number = 0;
        char text[ACL_PKG_VERSION_MAX_SIZE] = {0};
        EXPECT(aclsysGetVersionNum((char *)PACKAGES[i][0], &number), ACL_SUCCESS);
        EXPECT(aclsysGetVersionStr((char *)PACKAGES[i][0], text), ACL_SUCCESS);
        ordered &= number > previous;
        strings &= strcmp(text, PACKAGES[i][1]) == 0;
        previous = number;
    }
    HOLDS(ordered && strings);
    int32_t number = 77;
    char text[ACL_PKG_VERSION_MAX_SIZE];
    memset(text, 'z', sizeof text);
    FAILS(aclsysGetVersionNum((char *)"not-installed", &number));
    FAILS(aclsysGetVersionStr((char *)"not-installed", text));
    FAILS(aclsysGetVersionNum(NULL, &number));
    FAILS(aclsysGetVersionNum((char *)"v-rc1", NULL));
    FAILS(aclsysGetVersionStr((char *)"v-rc1", NULL));
    HOLDS(number == 77 && text[0] == 'z');
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    int32_t major = -1, minor = -1, patch = -1;
    FAILS(aclrtGetVersion(NULL, &minor, &patch));
    FAILS(aclrtGetVersion(&major, NULL, &patch));
    FAILS(aclrtGetVersion(&major, &minor, NULL));
    HOLDS(major == -1 && minor == -1 && patch == -1);
    EXPECT(aclrtGetVersion(&major, &minor, &patch), ACL_SUCCESS);
    HOLDS(major >= 1 && minor >= 0 && patch >= 0);
    aclCANNPackageVersion version;
    FAILS(aclsysGetCANNVersion(ACL_PKG_NAME_CANN, NULL));
    FAILS(aclsysGetCANNVersion((aclCANNPackageName)99, &version));
#pragma GCC diagnostic pop
}

static void capabilities(uint32_t devices)
{
    const aclCannAttr *list = NULL;
    size_t num = 0;
    FAILS(aclGetCannAttributeList(NULL, &num));
    FAILS(aclGetCannAttributeList(&list, NULL));
    EXPECT(aclGetCannAttributeList(&list, &num), ACL_SUCCESS);
    /* The list holds exactly the features aclGetCannAttribute calls supported. */
    const aclCannAttr all[] = {ACL_CANN_ATTR_INF_NAN, ACL_CANN_ATTR_BF16, ACL_CANN_ATTR_JIT_COMPILE};
    int consistent = list != NULL || num == 0;
    for (size_t a = 0; a < sizeof all / sizeof all[0] && consistent; ++a) {
        int32_t supported = -1;
        EXPECT(aclGetCannAttribute(all[a], &supported), ACL_SUCCESS);
        int listed = 0;
        for (size_t i = 0; i < num; ++i) {
            listed |= list[i] == all[a];
        }
        consistent &= (supported == 1) == listed && (supported == 0 || supported == 1);
    }
    HOLDS(consistent);
    FAILS(aclGetCannAttribute(ACL_CANN_ATTR_BF16, NULL));

    int64_t value = 77;
    FAILS(aclGetDeviceCapability(0, ACL_DEVICE_INFO_AI_CORE_NUM, NULL));
    FAILS(aclGetDeviceCapability(devices, ACL_DEVICE_INFO_AI_CORE_NUM, &value));
    HOLDS(value == 77);

    /* The platform's description: text, numbers in decimal. */
    char text[64];
    int64_t cores = 0, vectors = 0, l2 = 0;
    EXPECT(aclGetDeviceCapability(0, ACL_DEVICE_INFO_AI_CORE_NUM, &cores), ACL_SUCCESS);
    EXPECT(aclGetDeviceCapability(0, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &vectors), ACL_SUCCESS);
    EXPECT(aclGetDeviceCapability(0, ACL_DEVICE_INFO_L2_SIZE, &l2), ACL_SUCCESS);
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_AICORE_CNT, text, sizeof text), ACL_SUCCESS);
    HOLDS(strtoll(text, NULL, 10) == cores);
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_VECTOR_CORE_CNT, text, sizeof text), ACL_SUCCESS);
    HOLDS(strtoll(text, NULL, 10) == vectors);
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_L2_SIZE, text, sizeof text), ACL_SUCCESS);
    HOLDS(strtoll(text, NULL, 10) == l2);
    size_t free_bytes = 0, total = 0;
    EXPECT(aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total), ACL_SUCCESS);
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_MEMORY_SIZE, text, sizeof text), ACL_SUCCESS);
    HOLDS(strtoull(text, NULL, 10) == total);
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_SOC_VERSION, text, sizeof text), ACL_SUCCESS);
    HOLDS(aclrtGetSocName() != NULL && strcmp(text, aclrtGetSocName()) == 0);
    /* An Atlas A2's architecture is 2201. */
    EXPECT(aclplatformGetDeviceInfo(ACL_PLATFORM_NPU_ARCH, text, sizeof text), ACL_SUCCESS);
    HOLDS(strcmp(text, "2201") == 0);
    /* A result longer than maxLen is an error. */
    memset(text, 'z', sizeof text);
    FAILS(aclplatformGetDeviceInfo(ACL_PLATFORM_SOC_VERSION, text, 4));
    FAILS(aclplatformGetDeviceInfo((aclplatformDevInfo)99, text, sizeof text));
    FAILS(aclplatformGetDeviceInfo(ACL_PLATFORM_SOC_VERSION, NULL, sizeof text));
    HOLDS(text[0] == 'z');
    FAILS(aclplatformGetInstructionInfo(ACL_PLATFORM_CORE_TYPE_AI_CORE, NULL, text, sizeof text));
    FAILS(aclplatformGetInstructionInfo((aclplatformCoreType)7, "Intrinsic_vexp", text,
                                        sizeof text));
    FAILS(aclplatformGetInstructionInfo(ACL_PLATFORM_CORE_TYPE_VECTOR_CORE, "Intrinsic_vexp", NULL,
                                        sizeof text));
}

/* The capture flow of aclrtCacheLastTaskOpInfo and aclrtCacheLastTaskExtendInfo. */
static void cached_task_information(aclrtStream stream)
{
    static char info[65537];
    static char extend[5000];
    void *dev = NULL;
    aclrtStream captured = NULL;
    aclmdlRI model = NULL;
    EXPECT(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&captured), ACL_SUCCESS);
    /* Outside a capture or build there is no task to attach extended information to. */
    EXPECT(aclrtMemsetAsync(dev, BYTES, 0, BYTES, stream), ACL_SUCCESS);
    FAILS(aclrtCacheLastTaskExtendInfo("{}", 2));

    EXPECT(aclmdlRICaptureBegin(captured, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
    aclrtStreamAttrValue on, got;
    memset(&on, 0, sizeof on);
    memset(&got, 0, sizeof got);
    on.cacheOpInfoSwitch = 1;
    EXPECT(aclrtSetStreamAttribute(captured, ACL_STREAM_ATTR_CACHE_OP_INFO, &on), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, BYTES, 0x7, BYTES, captured), ACL_SUCCESS);
    EXPECT(aclrtGetStreamAttribute(captured, ACL_STREAM_ATTR_CACHE_OP_INFO, &got), ACL_SUCCESS);
    HOLDS(got.cacheOpInfoSwitch == 1);
    /* infoSize in (0, 64K]. */
    EXPECT(aclrtCacheLastTaskOpInfo(info, 65536), ACL_SUCCESS);
    FAILS(aclrtCacheLastTaskOpInfo(info, 65537));
    FAILS(aclrtCacheLastTaskOpInfo(info, 0));
    FAILS(aclrtCacheLastTaskOpInfo(NULL, 16));
    /* infoSize in (0, 4K]; beyond, the first 4K are kept. */
    EXPECT(aclrtCacheLastTaskExtendInfo("{\"op\": \"memset\"}", 16), ACL_SUCCESS);
    memset(extend, ' ', sizeof extend);
    extend[0] = '{';
    extend[sizeof extend - 1] = '}';
    EXPECT(aclrtCacheLastTaskExtendInfo(extend, sizeof extend), ACL_SUCCESS);
    FAILS(aclrtCacheLastTaskExtendInfo(extend, 0));
    FAILS(aclrtCacheLastTaskExtendInfo(NULL, 16));
    on.cacheOpInfoSwitch = 0;
    EXPECT(aclrtSetStreamAttribute(captured, ACL_STREAM_ATTR_CACHE_OP_INFO, &on), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureEnd(captured, &model), ACL_SUCCESS);
    EXPECT(aclmdlRIExecuteAsync(model, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(device_bytes_are(dev, 0x7));
    EXPECT(aclmdlRIDestroy(model), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(captured), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

static void other_apis(aclrtStream stream, uint32_t devices)
{
    numbers();
    versions();
    capabilities(devices);
    /* A profiling mark carries at most 18 bytes. */
    char mark[32];
    memset(mark, 'm', sizeof mark);
    EXPECT(aclrtProfTrace(mark, 18, stream), ACL_SUCCESS);
    EXPECT(aclrtProfTrace(mark, 5, stream), ACL_SUCCESS);
    FAILS(aclrtProfTrace(mark, 19, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    cached_task_information(stream);

    /* Configured streams and host function threads: not on an Atlas A2. */
    aclrtStreamConfigHandle config;
    memset(&config, 0, sizeof config);
    uint32_t priority = 1;
    aclrtStream created = SENTINEL;
    FAILS(aclrtSetStreamConfigOpt(&config, ACL_RT_STREAM_PRIORITY, &priority, sizeof priority));
    FAILS(aclrtCreateStreamV2(&created, &config));
    HOLDS(created == SENTINEL);
    uint64_t thread = (uint64_t)pthread_self();
    FAILS(aclrtSubscribeHostFunc(thread, NULL));
    FAILS(aclrtSubscribeHostFunc(thread, stream));
    FAILS(aclrtProcessHostFunc(-1));
    FAILS(aclrtUnSubscribeHostFunc(thread, NULL));
    FAILS(aclrtUnSubscribeHostFunc(thread, stream));
}

int main(int argc, char **argv)
{
    if (argc == IMPORT_ARGS && strcmp(argv[1], "import") == 0) {
        return importer(argv);
    }
    /* The packages of the version checks, before anything starts the simulator. */
    char config[1024];
    size_t at = (size_t)snprintf(config, sizeof config, "{\"packages\": {");
    for (int i = 0; i < PACKAGE_COUNT; ++i) {
        at += (size_t)snprintf(config + at, sizeof config - at, "%s\"%s\": \"%s\"",
                               i == 0 ? "" : ", ", PACKAGES[i][0], PACKAGES[i][1]);
    }
    snprintf(config + at, sizeof config - at, "}}");
    if (npusimConfigure(config) != ACL_SUCCESS) {
        printf("cannot configure the simulator: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    parameter_defaults();
    initialisation();

    uint32_t devices = 0;
    aclrtStream stream = NULL;
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);

    parameters();
    resource_limits(stream, devices);
    cache_operations(stream, devices);
    ipc_memory(argv[0]);
    allocators(stream);
    device_variables(stream);
    groups();
    dumps();
    snapshots();
    other_apis(stream, devices);

    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    checks_done("documented edges");
    return 0;
}
