/*
 * The API reference's kernel loading and execution chapter and its exception handling chapter
 * walked through the flows and edge cases they document: loading from a file (with and without
 * lazy loading) and from memory, the older aclrtCreateBinary path, functions by name, what a
 * function tells about itself, the argument handle flow (append, placeholder, update and a
 * second finalize, at most 128 parameters, caller memory), each launch form and its
 * configuration (the two timeouts exclude each other), the unsupported SIMT launches and AI CPU
 * registration; a binary's exception callback (the last one set wins) and what a failed
 * kernel's exception info tells; the process-wide exception callbacks (set, register,
 * unregister, a callback both set and registered is called twice), the thread's last error,
 * device task abort and its callbacks, the device's error detail; the device and stream
 * resource limits (stream over process over hardware); the exporting half of the IPC memory
 * flow and the options an Atlas A2 lacks; the PCI bus id, UUID, topology, peer access status
 * and utilisation queries.
 * Where the reference names no code only a failure is required. Prints a line for each mismatch,
 * then how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own headers),
 * which compares the output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "expect.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

enum { N = 1024, BLOCKS = 4 };

/* ---- kernels of our own, reached through a registry image ---- */

static int32_t trap_kernel(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    (void)blockIdx;
    (void)blockNum;
    (void)args;
    return 1;
}

/* Adds one to each of n floats: args = { float *x; uint64_t n; }. */
static int32_t add_one_kernel(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    const struct {
        float *x;
        uint64_t n;
    } *a = args;
    if (blockIdx != 0) {
        return 0;
    }
    (void)blockNum;
    for (uint64_t i = 0; i < a->n; ++i) {
        a->x[i] += 1.0f;
    }
    return 0;
}

static aclrtBinHandle load_registry(const char *const *names, size_t count)
{
    size_t size = 0;
    if (npusimRegistryImage(names, count, NULL, 0, &size) != ACL_SUCCESS) {
        return NULL;
    }
    uint8_t *image = malloc(size);
    aclrtBinHandle bin = NULL;
    if (image != NULL && npusimRegistryImage(names, count, image, size, &size) == ACL_SUCCESS &&
        aclrtBinaryLoadFromData(image, size, NULL, &bin) != ACL_SUCCESS) {
        bin = NULL;
    }
    free(image);
    return bin;
}

/* ---- exception callbacks ---- */

static int g_binary_a, g_binary_b;
static aclrtFuncHandle g_trap;
static int g_func_matches, g_args_given;

static void binary_callback_a(aclrtExceptionInfo *info, void *userData)
{
    (void)info;
    (void)userData;
    ++g_binary_a;
}

static void binary_callback_b(aclrtExceptionInfo *info, void *userData)
{
    ++g_binary_b;
    holds("the binary callback's userData", userData == &g_binary_b);
    aclrtFuncHandle func = NULL;
    void *devArgs = NULL;
    uint32_t len = 0;
    if (aclrtGetFuncHandleFromExceptionInfo(info, &func) == ACL_SUCCESS && func == g_trap) {
        ++g_func_matches;
    }
    if (aclrtGetArgsFromExceptionInfo(info, &devArgs, &len) == ACL_SUCCESS && devArgs != NULL) {
        ++g_args_given;
    }
}

static int g_set_calls, g_set_other_calls, g_registered_calls, g_both_calls;
static uint32_t g_device_id = 77, g_stream_id = 77, g_error_code = 77, g_thread_id;

static void set_callback(aclrtExceptionInfo *info)
{
    (void)info;
    ++g_set_calls;
}

static void set_other_callback(aclrtExceptionInfo *info)
{
    (void)info;
    ++g_set_other_calls;
}

static void registered_callback(aclrtExceptionInfo *info)
{
    ++g_registered_calls;
    g_device_id = aclrtGetDeviceIdFromExceptionInfo(info);
    g_stream_id = aclrtGetStreamIdFromExceptionInfo(info);
    g_error_code = aclrtGetErrorCodeFromExceptionInfo(info);
    g_thread_id = aclrtGetThreadIdFromExceptionInfo(info);
}

static void both_callback(aclrtExceptionInfo *info)
{
    (void)info;
    ++g_both_calls;
}

static int g_abort_pre, g_abort_post;

static int32_t abort_callback(int32_t deviceId, aclrtDeviceTaskAbortStage stage, uint32_t timeout,
                              void *args)
{
    (void)timeout;
    holds("the abort callback's args and device", args == &g_abort_pre && deviceId == 0);
    if (stage == ACL_RT_DEVICE_TASK_ABORT_PRE) {
        ++g_abort_pre;
    } else if (stage == ACL_RT_DEVICE_TASK_ABORT_POST) {
        ++g_abort_post;
    }
    return 0;
}

/* Launches the trap kernel on stream and synchronises: the failure comes back. */
static void trap_once(aclrtStream stream)
{
    uint64_t value = 42;
    EXPECT(aclrtLaunchKernelWithHostArgs(g_trap, 1, stream, NULL, &value, sizeof value, NULL, 0),
           ACL_SUCCESS);
    FAILS(aclrtSynchronizeStream(stream));
}

/* ---- 14 kernel loading and execution ---- */

static void loading(const char *library)
{
    aclrtBinHandle bin = NULL, lazy = NULL, eager = NULL;
    FAILS(aclrtBinaryLoadFromFile(NULL, NULL, &bin));
    FAILS(aclrtBinaryLoadFromFile(library, NULL, NULL));
    FAILS(aclrtBinaryLoadFromFile("/nonexistent/npusim-kernels.so", NULL, &bin));
    EXPECT(aclrtBinaryLoadFromFile(library, NULL, &bin), ACL_SUCCESS);

    /* Lazy loading: the binary is not on the device yet, so its device address is NULL. */
    aclrtBinaryLoadOption option;
    memset(&option, 0, sizeof option);
    option.type = ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD;
    option.value.isLazyLoad = 1;
    aclrtBinaryLoadOptions options = { &option, 1 };
    EXPECT(aclrtBinaryLoadFromFile(library, &options, &lazy), ACL_SUCCESS);
    void *address = &option;
    size_t size = 0;
    EXPECT(aclrtBinaryGetDevAddress(lazy, &address, &size), ACL_SUCCESS);
    HOLDS(address == NULL);
    option.value.isLazyLoad = 0;
    EXPECT(aclrtBinaryLoadFromFile(library, &options, &eager), ACL_SUCCESS);
    address = NULL;
    size = 0;
    EXPECT(aclrtBinaryGetDevAddress(eager, &address, &size), ACL_SUCCESS);
    HOLDS(address != NULL && size > 0);
    FAILS(aclrtBinaryGetDevAddress(eager, NULL, &size));
    FAILS(aclrtBinaryGetDevAddress(eager, &address, NULL));

    /* Functions by name; the reserved lookup by entry. */
    aclrtFuncHandle add = NULL, again = NULL, unknown = NULL, byEntry = NULL;
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &add), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &again), ACL_SUCCESS);
    HOLDS(add != NULL && again == add);
    FAILS(aclrtBinaryGetFunction(bin, "no_such_kernel", &unknown));
    FAILS(aclrtBinaryGetFunction(bin, NULL, &unknown));
    FAILS(aclrtBinaryGetFunction(bin, "vector_add_f32", NULL));
    FAILS(aclrtBinaryGetFunction(NULL, "vector_add_f32", &unknown));
    FAILS(aclrtBinaryGetFunctionByEntry(bin, 0, &byEntry));

    /* What the function tells. */
    aclrtBinHandle owner = NULL;
    EXPECT(aclrtFunctionGetBinary(add, &owner), ACL_SUCCESS);
    HOLDS(owner == bin);
    char name[32];
    EXPECT(aclrtGetFunctionName(add, sizeof name, name), ACL_SUCCESS);
    HOLDS(strcmp(name, "vector_add_f32") == 0);
    FAILS(aclrtGetFunctionName(add, 4, name));
    FAILS(aclrtGetFunctionName(add, sizeof name, NULL));
    void *aic = NULL, *aiv = NULL;
    EXPECT(aclrtGetFunctionAddr(add, &aic, &aiv), ACL_SUCCESS);
    HOLDS(aic != NULL);
    size_t aicSize = 0, aivSize = 0;
    EXPECT(aclrtGetFunctionSize(add, &aicSize, &aivSize), ACL_SUCCESS);
    HOLDS(aicSize > 0 || aivSize > 0);
    int64_t kind = -1, ratio = -1, sched = -1;
    EXPECT(aclrtGetFunctionAttribute(add, ACL_FUNC_ATTR_KERNEL_TYPE, &kind), ACL_SUCCESS);
    HOLDS(kind == ACL_KERNEL_TYPE_AICORE || kind == ACL_KERNEL_TYPE_CUBE ||
          kind == ACL_KERNEL_TYPE_VECTOR || kind == ACL_KERNEL_TYPE_MIX);
    EXPECT(aclrtGetFunctionAttribute(add, ACL_FUNC_ATTR_KERNEL_RATIO, &ratio), ACL_SUCCESS);
    EXPECT(aclrtGetFunctionAttribute(add, ACL_FUNC_ATTR_KERNEL_SCHED_MODE, &sched), ACL_SUCCESS);
    HOLDS(sched == 0 || sched == 1);
    FAILS(aclrtGetFunctionAttribute(add, (aclrtFuncAttribute)99, &kind));
    FAILS(aclrtGetFunctionAttribute(add, ACL_FUNC_ATTR_KERNEL_TYPE, NULL));
    size_t count = 0, offset = 0, psize = 0;
    EXPECT(aclrtFunctionGetParamCount(add, &count), ACL_SUCCESS);
    HOLDS(count == 4);
    EXPECT(aclrtFunctionGetParamInfo(add, 3, &offset, &psize), ACL_SUCCESS);
    HOLDS(offset == 24 && psize == 8);
    FAILS(aclrtFunctionGetParamInfo(add, 4, &offset, &psize));
    /* Not a SIMT kernel: success and 0. */
    size_t ubuf = 99;
    EXPECT(aclrtFunctionGetAvailDynUbufPerBlock(add, 0, &ubuf), ACL_SUCCESS);
    HOLDS(ubuf == 0);
    FAILS(aclrtFunctionGetAvailDynUbufPerBlock(NULL, 0, &ubuf));
    FAILS(aclrtFunctionGetAvailDynUbufPerBlock(add, 0, NULL));
    /* An Atlas A2 supports the Cube/Vector synchronisation address. */
    void *sync = NULL;
    EXPECT(aclrtGetHardwareSyncAddr(&sync), ACL_SUCCESS);
    FAILS(aclrtGetHardwareSyncAddr(NULL));
    /* Only AI CPU kernels can be registered: others → ACL_ERROR_RT_PARAM_INVALID. */
    aclrtFuncHandle cpu = NULL;
    EXPECT(aclrtRegisterCpuFunc(bin, "RunCpuKernel", "Add", &cpu), ACL_ERROR_RT_PARAM_INVALID);
    FAILS(aclrtRegisterCpuFunc(bin, NULL, "Add", &cpu));
    FAILS(aclrtRegisterCpuFunc(bin, "RunCpuKernel", NULL, &cpu));

    /* Globals: dptr and size cannot both be NULL. */
    FAILS(aclrtBinaryGetGlobal(bin, "bias", NULL, NULL));

    /* Unloading retires the binary and its functions. */
    EXPECT(aclrtBinaryUnLoad(lazy), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(eager), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    FAILS(aclrtBinaryGetFunction(bin, "vector_add_f32", &unknown));
    FAILS(aclrtGetFunctionName(add, sizeof name, name));
    FAILS(aclrtBinaryUnLoad(bin));
}

static void from_memory(const char *library)
{
    /* aclrtBinaryLoadFromData: the data must not be NULL, the length greater than 0. */
    FILE *file = fopen(library, "rb");
    holds("the kernel library opens", file != NULL);
    if (file == NULL) {
        return;
    }
    fseek(file, 0, SEEK_END);
    long len = ftell(file);
    fseek(file, 0, SEEK_SET);
    void *data = malloc((size_t)len);
    size_t got = data != NULL ? fread(data, 1, (size_t)len, file) : 0;
    fclose(file);
    holds("the kernel library reads", got == (size_t)len);
    aclrtBinHandle bin = NULL;
    FAILS(aclrtBinaryLoadFromData(NULL, (size_t)len, NULL, &bin));
    FAILS(aclrtBinaryLoadFromData(data, 0, NULL, &bin));
    FAILS(aclrtBinaryLoadFromData(data, (size_t)len, NULL, NULL));
    EXPECT(aclrtBinaryLoadFromData(data, (size_t)len, NULL, &bin), ACL_SUCCESS);
    aclrtFuncHandle scale = NULL;
    EXPECT(aclrtBinaryGetFunction(bin, "scale_f32", &scale), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);

    /* The older path: aclrtCreateBinary describes the bytes, aclrtBinaryLoad loads them. */
    HOLDS(aclrtCreateBinary(NULL, (size_t)len) == NULL);
    HOLDS(aclrtCreateBinary(data, 0) == NULL);
    aclrtBinary binary = aclrtCreateBinary(data, (size_t)len);
    HOLDS(binary != NULL);
    FAILS(aclrtBinaryLoad(NULL, &bin));
    FAILS(aclrtBinaryLoad(binary, NULL));
    EXPECT(aclrtBinaryLoad(binary, &bin), ACL_SUCCESS);
    EXPECT(aclrtDestroyBinary(binary), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "scale_f32", &scale), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    FAILS(aclrtDestroyBinary(NULL));
    free(data);
}

static int count_wrong(const float *x, float want)
{
    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += x[i] != want;
    }
    return wrong;
}

static void launches(const char *library, aclrtStream stream)
{
    static float host[N];
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL, scale = NULL;
    EXPECT(aclrtBinaryLoadFromFile(library, NULL, &bin), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &add), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "scale_f32", &scale), ACL_SUCCESS);
    void *da = NULL, *db = NULL, *dc = NULL, *dargs = NULL;
    EXPECT(aclrtMalloc(&da, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&db, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dc, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dargs, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < N; ++i) {
        host[i] = 1.0f;
    }
    EXPECT(aclrtMemcpy(da, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    for (int i = 0; i < N; ++i) {
        host[i] = 2.0f;
    }
    EXPECT(aclrtMemcpy(db, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);

    /* aclrtLaunchKernel / V2: the arguments are in device memory. */
    npusimVectorAddArgs args = { (const float *)da, (const float *)db, (float *)dc, N };
    EXPECT(aclrtMemcpy(dargs, 64, &args, sizeof args, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, dargs, sizeof args, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 3.0f) == 0);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, NULL, stream), ACL_SUCCESS);
    FAILS(aclrtLaunchKernel(NULL, BLOCKS, dargs, sizeof args, stream));

    /* Configurations: timeout and timeoutUs exclude each other; either alone is accepted. */
    aclrtLaunchKernelAttr attrs[2];
    memset(attrs, 0, sizeof attrs);
    attrs[0].id = ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT;
    attrs[0].value.timeout = 5;
    attrs[1].id = ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US;
    attrs[1].value.timeoutUs.timeoutLow = 5000000;
    aclrtLaunchKernelCfg both = { attrs, 2 };
    aclrtLaunchKernelCfg seconds = { attrs, 1 };
    aclrtLaunchKernelCfg micros = { attrs + 1, 1 };
    FAILS(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &both, stream));
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &seconds, stream), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &micros, stream), ACL_SUCCESS);
    aclrtLaunchKernelAttr mode;
    memset(&mode, 0, sizeof mode);
    mode.id = ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE;
    mode.value.schemMode = 1;
    aclrtLaunchKernelCfg batch = { &mode, 1 };
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &batch, stream), ACL_SUCCESS);
    /* A pure SIMD kernel takes a dynamic UB size of 0 only. */
    mode.id = ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE;
    mode.value.dynUBufSize = 0;
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &batch, stream), ACL_SUCCESS);
    mode.value.dynUBufSize = 1024;
    FAILS(aclrtLaunchKernelV2(add, BLOCKS, dargs, sizeof args, &batch, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);

    /* aclrtLaunchKernelWithHostArgs with placeholders: a and b travel inside the arguments. */
    struct {
        npusimVectorAddArgs args;
        float a[N];
        float b[N];
    } *packed = malloc(sizeof *packed);
    holds("the packed arguments are allocated", packed != NULL);
    if (packed == NULL) {
        return;
    }
    packed->args.a = NULL;
    packed->args.b = NULL;
    packed->args.c = (float *)dc;
    packed->args.n = N;
    for (int i = 0; i < N; ++i) {
        packed->a[i] = 10.0f;
        packed->b[i] = 0.5f;
    }
    aclrtPlaceHolderInfo holders[2] = {
        { 0, (uint32_t)((char *)packed->a - (char *)packed) },
        { 8, (uint32_t)((char *)packed->b - (char *)packed) },
    };
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, stream, NULL, packed, sizeof *packed, holders, 2),
           ACL_SUCCESS);
    /* The host arguments were taken at the call: changing them now changes nothing. */
    for (int i = 0; i < N; ++i) {
        packed->a[i] = -1.0f;
    }
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 10.5f) == 0);
    free(packed);

    /* aclrtLaunchKernelWithArgsArray: one pointer per parameter, in order. */
    const float *pa = (const float *)da, *pb = (const float *)db;
    float *pc = (float *)dc;
    uint64_t n = N;
    void *params[] = { &pa, &pb, &pc, &n };
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, stream, NULL, params), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 3.0f) == 0);

    /* The argument handle flow, system memory: append in order, finalize, launch; an update
     * needs another finalize. */
    aclrtArgsHandle handle = NULL;
    aclrtParamHandle pA = NULL, pB = NULL, pC = NULL, pN = NULL;
    EXPECT(aclrtKernelArgsInit(add, &handle), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(handle, &pa, sizeof pa, &pA), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(handle, &pb, sizeof pb, &pB), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(handle, &pc, sizeof pc, &pC), ACL_SUCCESS);
    uint64_t half = N / 2;
    EXPECT(aclrtKernelArgsAppend(handle, &half, sizeof half, &pN), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsFinalize(handle), ACL_SUCCESS);
    EXPECT(aclrtMemset(dc, sizeof host, 0, sizeof host), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, handle, NULL), ACL_SUCCESS);
    FAILS(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, handle, &half));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(host[0] == 3.0f && host[N / 2 - 1] == 3.0f && host[N / 2] == 0.0f);
    EXPECT(aclrtKernelArgsParaUpdate(handle, pN, &n, sizeof n), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsFinalize(handle), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, handle, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 3.0f) == 0);
    FAILS(aclrtKernelArgsAppend(handle, NULL, 8, &pN));
    FAILS(aclrtKernelArgsAppend(NULL, &n, sizeof n, &pN));
    FAILS(aclrtKernelArgsFinalize(NULL));
    FAILS(aclrtKernelArgsInit(NULL, &handle));
    FAILS(aclrtKernelArgsInit(add, NULL));

    /* A placeholder: its buffer is the runtime's, filled by the caller after every append. */
    aclrtArgsHandle holder = NULL;
    aclrtParamHandle pHolder = NULL;
    void *buffer = NULL;
    EXPECT(aclrtKernelArgsInit(add, &holder), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppendPlaceHolder(holder, &pHolder), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(holder, &pb, sizeof pb, &pB), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(holder, &pc, sizeof pc, &pC), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(holder, &n, sizeof n, &pN), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsGetPlaceHolderBuffer(holder, pHolder, sizeof host, &buffer), ACL_SUCCESS);
    HOLDS(buffer != NULL);
    FAILS(aclrtKernelArgsGetPlaceHolderBuffer(holder, pHolder, sizeof host, NULL));
    if (buffer != NULL) {
        for (int i = 0; i < N; ++i) {
            ((float *)buffer)[i] = 7.0f;
        }
    }
    EXPECT(aclrtKernelArgsFinalize(holder), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, holder, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 9.0f) == 0);

    /* At most 128 parameters. */
    aclrtArgsHandle many = NULL;
    aclrtParamHandle p = NULL;
    uint8_t byte = 1;
    EXPECT(aclrtKernelArgsInit(add, &many), ACL_SUCCESS);
    int appended = 0;
    while (appended < 128 && aclrtKernelArgsAppend(many, &byte, 1, &p) == ACL_SUCCESS) {
        ++appended;
    }
    HOLDS(appended == 128);
    FAILS(aclrtKernelArgsAppend(many, &byte, 1, &p));

    /* Caller memory: the sizes come first, then the handle lives in the caller's buffer. */
    size_t handleSize = 0, actual = 0;
    EXPECT(aclrtKernelArgsGetHandleMemSize(add, &handleSize), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsGetMemSize(add, sizeof args, &actual), ACL_SUCCESS);
    HOLDS(handleSize > 0 && actual >= sizeof args);
    FAILS(aclrtKernelArgsGetHandleMemSize(add, NULL));
    FAILS(aclrtKernelArgsGetMemSize(add, sizeof args, NULL));
    void *handleMem = calloc(1, handleSize > 0 ? handleSize : 1);
    void *argsMem = calloc(1, actual > 0 ? actual : 1);
    aclrtArgsHandle user = (aclrtArgsHandle)handleMem;
    EXPECT(aclrtKernelArgsInitByUserMem(add, user, argsMem, actual), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(user, &pa, sizeof pa, &pA), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(user, &pa, sizeof pa, &pB), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(user, &pc, sizeof pc, &pC), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(user, &n, sizeof n, &pN), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsFinalize(user), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, user, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, dc, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(count_wrong(host, 2.0f) == 0);

    /* The SIMT launches are not supported on an Atlas A2. */
    dim3 grid = { 1, 1, 1 }, block = { 32, 1, 1 };
    FAILS(aclrtLaunchSIMTKernelWithArgsArray(add, grid, block, 0, stream, NULL, params));
    FAILS(aclrtLaunchSIMTKernelWithHostArgs(add, grid, block, 0, stream, NULL, &args, sizeof args,
                                             NULL, 0));

    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    FAILS(aclrtLaunchKernelWithArgsArray(add, BLOCKS, stream, NULL, params));
    free(handleMem);
    free(argsMem);
    EXPECT(aclrtFree(da), ACL_SUCCESS);
    EXPECT(aclrtFree(db), ACL_SUCCESS);
    EXPECT(aclrtFree(dc), ACL_SUCCESS);
    EXPECT(aclrtFree(dargs), ACL_SUCCESS);
}

/* ---- 14 + 13: exception callbacks ---- */

/* aclrtSetExceptionInfoCallback is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void exceptions(aclrtStream stream)
{
    const char *names[] = { "kce_trap" };
    aclrtBinHandle bin = load_registry(names, 1);
    holds("the registry image loads", bin != NULL);
    if (bin == NULL) {
        return;
    }
    EXPECT(aclrtBinaryGetFunction(bin, "kce_trap", &g_trap), ACL_SUCCESS);

    /* A binary's callback: the last one set wins. */
    FAILS(aclrtBinarySetExceptionCallback(NULL, binary_callback_a, NULL));
    EXPECT(aclrtBinarySetExceptionCallback(bin, binary_callback_a, NULL), ACL_SUCCESS);
    EXPECT(aclrtBinarySetExceptionCallback(bin, binary_callback_b, &g_binary_b), ACL_SUCCESS);

    /* The process-wide ones: set (the last one wins), registered (once per function). */
    EXPECT(aclrtSetExceptionInfoCallback(set_other_callback), ACL_SUCCESS);
    EXPECT(aclrtSetExceptionInfoCallback(set_callback), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackRegister(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtExceptionInfoCallbackUnregister(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtExceptionInfoCallbackUnregister(both_callback), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackRegister(registered_callback), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackRegister(registered_callback), ACL_SUCCESS);
    trap_once(stream);
    HOLDS(g_binary_a == 0 && g_binary_b == 1);
    HOLDS(g_func_matches == 1);
    HOLDS(g_set_calls == 1 && g_set_other_calls == 0);
    HOLDS(g_registered_calls == 1);
    int32_t device = -1;
    uint32_t streamId = 0;
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(stream, (int32_t *)&streamId), ACL_SUCCESS);
    HOLDS(g_device_id == (uint32_t)device);
    HOLDS(g_stream_id == streamId);
    HOLDS(g_error_code == ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_thread_id != 0xFFFFFFFFu);

    /* The same function set and registered is two registrations: called twice. Unregister
     * does not remove what was set. */
    EXPECT(aclrtSetExceptionInfoCallback(both_callback), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackRegister(both_callback), ACL_SUCCESS);
    trap_once(stream);
    HOLDS(g_both_calls == 2);
    HOLDS(g_set_calls == 1);
    HOLDS(g_registered_calls == 2);
    EXPECT(aclrtExceptionInfoCallbackUnregister(both_callback), ACL_SUCCESS);
    trap_once(stream);
    HOLDS(g_both_calls == 3);
    /* Setting NULL clears the set one; unregistering stops the registered one. */
    EXPECT(aclrtSetExceptionInfoCallback(NULL), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackUnregister(registered_callback), ACL_SUCCESS);
    trap_once(stream);
    HOLDS(g_both_calls == 3 && g_registered_calls == 3);
    HOLDS(g_binary_b == 4 && g_args_given == 4);

    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
}

/* ---- 13: the thread's last error, task abort, error detail ---- */

static void last_error_and_abort(void)
{
    int32_t devices = 0;
    EXPECT(aclrtGetDeviceCount((uint32_t *)&devices), ACL_SUCCESS);
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(devices + 5), ACL_ERROR_RT_INVALID_DEVICEID);
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);

    /* Abort callbacks: a unique name (no second registration), called before and after. */
    FAILS(aclrtSetDeviceTaskAbortCallback(NULL, abort_callback, &g_abort_pre));
    EXPECT(aclrtSetDeviceTaskAbortCallback("kce", abort_callback, &g_abort_pre), ACL_SUCCESS);
    FAILS(aclrtSetDeviceTaskAbortCallback("kce", abort_callback, &g_abort_pre));
    EXPECT(aclrtDeviceTaskAbort(0, 0), ACL_SUCCESS);
    HOLDS(g_abort_pre == 1 && g_abort_post == 1);
    /* The timeout is at most 36 minutes. */
    FAILS(aclrtDeviceTaskAbort(0, 36u * 60u * 1000u + 1u));
    EXPECT(aclrtDeviceTaskAbort(0, 36u * 60u * 1000u), ACL_SUCCESS);
    EXPECT(aclrtSetDeviceTaskAbortCallback("kce", NULL, NULL), ACL_SUCCESS);
    EXPECT(aclrtDeviceTaskAbort(0, 1000), ACL_SUCCESS);
    HOLDS(g_abort_pre == 2 && g_abort_post == 2);

    /* The device's error detail: an Atlas A2 reports NO_ERROR, MEMORY or OTHERS only. */
    aclrtErrorInfo info;
    memset(&info, 0xff, sizeof info);
    EXPECT(aclrtGetErrorVerbose(0, &info), ACL_SUCCESS);
    HOLDS(info.errorType == ACL_RT_NO_ERROR || info.errorType == ACL_RT_ERROR_MEMORY ||
          info.errorType == ACL_RT_ERROR_OTHERS);
    FAILS(aclrtGetErrorVerbose(0, NULL));
    aclrtMemUceInfo uce[4];
    size_t found = 99;
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 0);
}


/* ---- 03 resource limits: stream > process > hardware ---- */

static void resource_limits(aclrtStream stream)
{
    uint32_t devices = 0, hardware = 0, vector = 0, value = 0;
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &hardware), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, &vector), ACL_SUCCESS);
    HOLDS(hardware > 4 && vector > 0);
    /* The last setting wins. */
    EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 4), ACL_SUCCESS);
    EXPECT(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 3), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    /* A stream without its own limit has the process's; the thread too. */
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    /* The stream's own limit, used in this thread, comes first. */
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 1), ACL_SUCCESS);
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 2), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 2);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    EXPECT(aclrtUseStreamResInCurrentThread(stream), ACL_SUCCESS);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 2);
    EXPECT(aclrtUnuseStreamResInCurrentThread(stream), ACL_SUCCESS);
    EXPECT(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    /* NULL is the default stream. */
    EXPECT(aclrtSetStreamResLimit(NULL, ACL_RT_DEV_RES_VECTOR_CORE, 5), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(NULL, ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 5);
    EXPECT(aclrtResetStreamResLimit(NULL), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(NULL, ACL_RT_DEV_RES_VECTOR_CORE, &value), ACL_SUCCESS);
    HOLDS(value == vector);
    /* Resets restore the process's, then the hardware's limits. */
    EXPECT(aclrtResetStreamResLimit(stream), ACL_SUCCESS);
    EXPECT(aclrtGetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == 3);
    EXPECT(aclrtResetDeviceResLimit(0), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &value), ACL_SUCCESS);
    HOLDS(value == hardware);
    /* A device outside [0, count - 1]. */
    FAILS(aclrtSetDeviceResLimit((int32_t)devices, ACL_RT_DEV_RES_CUBE_CORE, 1));
    FAILS(aclrtGetDeviceResLimit((int32_t)devices, ACL_RT_DEV_RES_CUBE_CORE, &value));
    FAILS(aclrtResetDeviceResLimit(-1));
    FAILS(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, NULL));
    FAILS(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, NULL));
}

/* ---- 11-07 IPC memory: the in-process half of the flow, and what an Atlas A2 lacks ---- */

static void ipc_memory(void)
{
    void *dev = NULL;
    char key[65];
    EXPECT(aclrtMalloc(&dev, 1 << 16, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtIpcMemGetExportKey(dev, 1 << 16, key, sizeof key, ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    HOLDS(strlen(key) > 0 && strlen(key) < sizeof key);
    int32_t pid = 0;
    EXPECT(aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    EXPECT(aclrtIpcMemSetImportPid(key, &pid, 1), ACL_SUCCESS);
    FAILS(aclrtIpcMemSetImportPid(key, NULL, 1));
    FAILS(aclrtIpcMemSetImportPid(NULL, &pid, 1));
    /* Atlas A3 super-node only. */
    FAILS(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS));
    aclrtServerPid server;
    memset(&server, 0, sizeof server);
    FAILS(aclrtIpcMemImportPidInterServer(key, &server, 1));
    EXPECT(aclrtIpcMemClose(key), ACL_SUCCESS);
    FAILS(aclrtIpcMemClose(NULL));
    char unvalidated[65];
    EXPECT(aclrtIpcMemGetExportKey(dev, 4096, unvalidated, sizeof unvalidated,
                                   ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION),
           ACL_SUCCESS);
    HOLDS(strcmp(unvalidated, key) != 0);
    EXPECT(aclrtIpcMemClose(unvalidated), ACL_SUCCESS);
    FAILS(aclrtIpcMemGetExportKey(NULL, 4096, key, sizeof key, 0));
    FAILS(aclrtIpcMemGetExportKey(dev, 4096, NULL, sizeof key, 0));
    void *imported = NULL;
    FAILS(aclrtIpcMemImportByKey(NULL, unvalidated, 0));
    FAILS(aclrtIpcMemImportByKey(&imported, NULL, 0));
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 04 device queries ---- */

static void device_queries(void)
{
    uint32_t devices = 0;
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    /* The PCI bus id: 12 characters and the NUL, so the buffer holds at least 13 bytes. */
    char bus[13];
    FAILS(aclrtDeviceGetPCIBusId(0, bus, 12));
    EXPECT(aclrtDeviceGetPCIBusId(0, bus, 13), ACL_SUCCESS);
    HOLDS(strlen(bus) == 12 && bus[4] == ':' && bus[7] == ':' && bus[10] == '.');
    FAILS(aclrtDeviceGetPCIBusId((int32_t)devices, bus, 13));
    int32_t found = -1;
    EXPECT(aclrtDeviceGetByPCIBusId(bus, &found), ACL_SUCCESS);
    HOLDS(found == 0);
    FAILS(aclrtDeviceGetByPCIBusId(NULL, &found));
    FAILS(aclrtDeviceGetByPCIBusId(bus, NULL));
    aclrtUuid uuid;
    EXPECT(aclrtDeviceGetUuid(0, &uuid), ACL_SUCCESS);
    FAILS(aclrtDeviceGetUuid((int32_t)devices, &uuid));
    if (devices > 1) {
        uint64_t topo = 0;
        EXPECT(aclrtGetDevicesTopo(0, 1, &topo), ACL_SUCCESS);
        HOLDS(topo == ACL_RT_DEVS_TOPOLOGY_HCCS || topo == ACL_RT_DEVS_TOPOLOGY_PIX ||
              topo == ACL_RT_DEVS_TOPOLOGY_PHB || topo == ACL_RT_DEVS_TOPOLOGY_SYS ||
              topo == ACL_RT_DEVS_TOPOLOGY_SIO || topo == ACL_RT_DEVS_TOPOLOGY_HCCS_SW);
        FAILS(aclrtGetDevicesTopo(0, devices, &topo));
        int32_t status = -1;
        EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
        HOLDS(status == 0);
        EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
        EXPECT(aclrtDevicePeerAccessStatus(0, 1, &status), ACL_SUCCESS);
        HOLDS(status == 1);
        EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
        /* Outside the range: a status of 0 or ACL_ERROR_RT_PARAM_INVALID. */
        status = 0;
        aclError outside = aclrtDevicePeerAccessStatus(0, (int32_t)devices, &status);
        HOLDS((outside == ACL_SUCCESS && status == 0) || outside == ACL_ERROR_RT_PARAM_INVALID);
        (void)aclGetRecentErrMsg();
    }
    /* Memory utilisation cannot be queried yet: -1. The extension is reserved (NULL). */
    aclrtUtilizationInfo use;
    memset(&use, 0, sizeof use);
    EXPECT(aclrtGetDeviceUtilizationRate(0, &use), ACL_SUCCESS);
    HOLDS(use.memoryUtilization == -1);
    FAILS(aclrtGetDeviceUtilizationRate((int32_t)devices, &use));
}

int main(void)
{
    const char *library = npusimKernelLibraryPath();
    if (npusimRegisterKernel("kce_trap", trap_kernel) != ACL_SUCCESS ||
        npusimRegisterKernelWithArgsSize("kce_add_one", add_one_kernel, 16) != ACL_SUCCESS) {
        printf("cannot register the test kernels\n");
        return 1;
    }
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));

    loading(library);
    from_memory(library);
    launches(library, stream);
    exceptions(stream);
    last_error_and_abort();
    resource_limits(stream);
    ipc_memory();
    device_queries();

    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
