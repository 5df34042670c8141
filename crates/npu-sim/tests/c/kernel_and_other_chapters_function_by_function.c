/*
 * The API reference's kernel loading and execution (14), device variable (11-11), snapshot
 * (21) and other APIs (24) chapters and the operation APIs of the data types chapter (25-03:
 * data buffers, allocator descriptions, stream configuration handles), function by function,
 * for the edges kernel_chapter_edges.c, config_chapter_edges.c, exception_and_memory_ext_edges.c
 * and the flow programs leave out. For each function: its NULL arguments in parameter order
 * (100000, before a handle is looked up or a value checked), an unloaded binary's handles and
 * its functions (107017), destroyed streams (107017) and another context's streams (107003)
 * for every launch and asynchronous device variable copy, values out of range (107000), the
 * reserved arguments and switches, and what a successful call does that a program sees (a
 * held launch using its arguments as they were at submission, what a binary's exception
 * callback reads of the failed launch, a global's address and size by name and by symbol, a
 * copy through one read back through the other, asynchronous device variable copies in stream
 * order, a data buffer that never owned its memory, a snapshot callback called at its stage
 * only while registered), and the arguments checked before what an Atlas A2 lacks (the SIMT
 * launches, host function threads, configured streams: 207000). Where the reference names no
 * code only a failure is required. Prints a line for each mismatch, then how many checks ran.
 * Compiled by tests/c_programs.rs (also against CANN's own headers) with the device-global
 * library of global_kernels.c linked in; the output is compared.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl/acl_rt_allocator.h"
#include "expect.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

/* aclGetDataBufferSize is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

enum { N = 256, BLOCKS = 2 };

/* global_kernels.c's device global and kernel, linked into this program. */
extern float bias[4];
extern int32_t add_bias(uint32_t blockIdx, uint32_t blockNum, void *args);

static void *const SENTINEL = (void *)(uintptr_t)0x5e5e;

/* A stream created and destroyed: a stale handle. */
static aclrtStream destroyed_stream(void)
{
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    return stream;
}

/* A stream of a second context on device 0; `home` is current again after. */
static aclrtStream stream_of_another_context(aclrtContext home, aclrtContext *other)
{
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateContext(other, 0), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(home), ACL_SUCCESS);
    return stream;
}

/* The streams every launch and asynchronous copy is refused: destroyed and foreign. */
typedef struct Streams {
    aclrtStream own;
    aclrtStream gone;
    aclrtStream foreign;
} Streams;

/* ---- 14: binaries and what their handles answer once unloaded ---- */

static void on_exception(aclrtExceptionInfo *info, void *userData)
{
    (void)info;
    (void)userData;
}

static void binaries(void)
{
    const char *library = npusimKernelLibraryPath();
    aclrtBinHandle bin = SENTINEL;

    /* Loading: the path (or data) before the output, the options' array before its entries. */
    EXPECT(aclrtBinaryLoadFromFile(NULL, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryLoadFromData(NULL, 0, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryLoadFromData(library, 0, NULL, &bin), ACL_ERROR_INVALID_PARAM);
    aclrtBinaryLoadOptions options = {NULL, 1};
    EXPECT(aclrtBinaryLoadFromFile(library, &options, &bin), ACL_ERROR_INVALID_PARAM);
    aclrtBinaryLoadOption unknown;
    memset(&unknown, 0, sizeof unknown);
    unknown.type = (aclrtBinaryLoadOptionType)99;
    options.options = &unknown;
    EXPECT(aclrtBinaryLoadFromFile(library, &options, &bin), ACL_ERROR_INVALID_PARAM);
    HOLDS(bin == SENTINEL);
    /* No options in the list is no option: an eager load. */
    options.numOpt = 0;
    EXPECT(aclrtBinaryLoadFromFile(library, &options, &bin), ACL_SUCCESS);

    aclrtFuncHandle add = NULL;
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &add), ACL_SUCCESS);
    aclrtFuncHandle func = SENTINEL;
    EXPECT(aclrtBinaryGetFunction(NULL, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetFunction(bin, NULL, &func), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetFunctionByEntry(bin, 0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetFunctionByEntry(NULL, 0, &func), ACL_ERROR_INVALID_PARAM);

    void *address = SENTINEL;
    size_t size = 7;
    EXPECT(aclrtBinaryGetDevAddress(NULL, &address, &size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetDevAddress(bin, &address, &size), ACL_SUCCESS);
    HOLDS(address != NULL && address != SENTINEL && size > 0);

    /* The shipped library has no globals; the name before the outputs. */
    EXPECT(aclrtBinaryGetGlobal(NULL, "bias", &address, &size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetGlobal(bin, NULL, &address, &size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetGlobal(bin, "bias", &address, &size), ACL_ERROR_RT_SYMBOL_NOT_FOUND);

    aclrtBinHandle owner = SENTINEL;
    EXPECT(aclrtFunctionGetBinary(NULL, &owner), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetBinary(add, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(owner == SENTINEL);

    EXPECT(aclrtBinaryLoad(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryUnLoad(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRegisterCpuFunc(NULL, "RunCpuKernel", "Add", &func), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRegisterCpuFunc(bin, "RunCpuKernel", "Add", NULL), ACL_ERROR_INVALID_PARAM);

    /* Unloaded: every handle of the binary, and of its functions, is stale. */
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &func), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtBinaryGetFunction(bin, NULL, &func), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetDevAddress(bin, &address, &size), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtBinaryGetDevAddress(bin, NULL, &size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinaryGetGlobal(bin, "bias", &address, &size), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtBinarySetExceptionCallback(bin, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtBinarySetExceptionCallback(bin, on_exception, NULL), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRegisterCpuFunc(bin, "RunCpuKernel", "Add", &func), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtFunctionGetBinary(add, &owner), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(func == SENTINEL && owner == SENTINEL);
}

/* ---- 14: what a function tells, with NULL and stale handles ---- */

static void function_queries(aclrtFuncHandle add, aclrtFuncHandle stale)
{
    void *aic = SENTINEL;
    void *aiv = SENTINEL;
    EXPECT(aclrtGetFunctionAddr(NULL, &aic, &aiv), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionAddr(add, NULL, &aiv), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionAddr(add, &aic, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionAddr(stale, &aic, &aiv), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(aic == SENTINEL && aiv == SENTINEL);

    size_t aic_size = 7;
    size_t aiv_size = 7;
    EXPECT(aclrtGetFunctionSize(NULL, &aic_size, &aiv_size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionSize(add, NULL, &aiv_size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionSize(add, &aic_size, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionSize(stale, &aic_size, &aiv_size), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(aic_size == 7 && aiv_size == 7);

    /* The name fits in exactly its length and the terminator. */
    char name[32];
    memset(name, 'x', sizeof name);
    const uint32_t fits = (uint32_t)sizeof "vector_add_f32";
    EXPECT(aclrtGetFunctionName(NULL, sizeof name, name), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionName(add, 0, name), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtGetFunctionName(add, fits - 1, name), ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(name[0] == 'x');
    EXPECT(aclrtGetFunctionName(add, fits, name), ACL_SUCCESS);
    HOLDS(strcmp(name, "vector_add_f32") == 0);
    EXPECT(aclrtGetFunctionName(stale, sizeof name, name), ACL_ERROR_RT_INVALID_HANDLE);

    int64_t value = 7;
    EXPECT(aclrtGetFunctionAttribute(NULL, ACL_FUNC_ATTR_KERNEL_TYPE, &value),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionAttribute(stale, ACL_FUNC_ATTR_KERNEL_TYPE, &value),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtGetFunctionAttribute(stale, ACL_FUNC_ATTR_KERNEL_TYPE, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFunctionAttribute(add, (aclrtFuncAttribute)0, &value),
           ACL_ERROR_RT_PARAM_INVALID);
    /* The attribute is a value: checked before the function is looked up. */
    EXPECT(aclrtGetFunctionAttribute(stale, (aclrtFuncAttribute)0, &value),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(value == 7);

    size_t count = 7;
    size_t offset = 7;
    size_t psize = 7;
    EXPECT(aclrtFunctionGetParamCount(NULL, &count), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetParamCount(add, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetParamCount(stale, &count), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtFunctionGetParamInfo(NULL, 0, &offset, &psize), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetParamInfo(add, 0, NULL, &psize), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetParamInfo(add, 0, &offset, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFunctionGetParamInfo(add, 4, &offset, &psize), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtFunctionGetParamInfo(stale, 0, &offset, &psize), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(count == 7 && offset == 7 && psize == 7);
    EXPECT(aclrtFunctionGetParamInfo(add, 0, &offset, &psize), ACL_SUCCESS);
    HOLDS(offset == 0 && psize == sizeof(void *));

    /* flags is reserved: 0 only, checked before the function is looked up. */
    size_t ubuf = 7;
    EXPECT(aclrtFunctionGetAvailDynUbufPerBlock(add, 1, &ubuf), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtFunctionGetAvailDynUbufPerBlock(stale, 1, &ubuf), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtFunctionGetAvailDynUbufPerBlock(stale, 0, &ubuf), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(ubuf == 7);

    size_t mem = 7;
    EXPECT(aclrtKernelArgsGetMemSize(NULL, 32, &mem), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsGetMemSize(stale, 32, &mem), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtKernelArgsGetHandleMemSize(NULL, &mem), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsGetHandleMemSize(stale, &mem), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(mem == 7);

    aclrtArgsHandle args = SENTINEL;
    EXPECT(aclrtKernelArgsInit(stale, &args), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(args == SENTINEL);

    aclrtFuncHandle func = SENTINEL;
    EXPECT(aclrtGetFuncBySymbol(NULL, &func), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFuncBySymbol((const void *)add_bias, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFuncBySymbol((const void *)bias, &func), ACL_ERROR_RT_SYMBOL_NOT_FOUND);
    HOLDS(func == SENTINEL);

    /* The exception info getters: the info before the outputs. */
    void *dev_args = SENTINEL;
    uint32_t len = 7;
    EXPECT(aclrtGetArgsFromExceptionInfo(NULL, &dev_args, &len), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetFuncHandleFromExceptionInfo(NULL, &func), ACL_ERROR_INVALID_PARAM);
    HOLDS(dev_args == SENTINEL && len == 7 && func == SENTINEL);
}

/* ---- 14: argument handles ---- */

static void argument_handles(aclrtFuncHandle add)
{
    size_t handle_size = 0;
    size_t actual = 0;
    EXPECT(aclrtKernelArgsGetHandleMemSize(add, &handle_size), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsGetMemSize(add, sizeof(npusimVectorAddArgs), &actual), ACL_SUCCESS);
    void *handle_mem = calloc(1, handle_size);
    void *args_mem = calloc(1, actual);
    EXPECT(aclrtKernelArgsInitByUserMem(NULL, handle_mem, args_mem, actual),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsInitByUserMem(add, NULL, args_mem, actual), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsInitByUserMem(add, handle_mem, NULL, actual), ACL_ERROR_INVALID_PARAM);
    /* Memory of 0 bytes holds an empty list: a parameter does not fit. */
    aclrtParamHandle param = SENTINEL;
    uint64_t word = 1;
    EXPECT(aclrtKernelArgsInitByUserMem(add, handle_mem, args_mem, 0), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(handle_mem, &word, sizeof word, &param),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(param == SENTINEL);
    free(args_mem);
    free(handle_mem);

    aclrtArgsHandle args = NULL;
    EXPECT(aclrtKernelArgsInit(add, &args), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &word, 0, &param), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsAppend(args, &word, sizeof word, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(param == SENTINEL);
    EXPECT(aclrtKernelArgsAppendPlaceHolder(NULL, &param), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsAppendPlaceHolder(args, NULL), ACL_ERROR_INVALID_PARAM);

    aclrtParamHandle holder = NULL;
    aclrtParamHandle value = NULL;
    EXPECT(aclrtKernelArgsAppendPlaceHolder(args, &holder), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &word, sizeof word, &value), ACL_SUCCESS);
    void *buffer = SENTINEL;
    EXPECT(aclrtKernelArgsGetPlaceHolderBuffer(NULL, holder, 8, &buffer), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsGetPlaceHolderBuffer(args, NULL, 8, &buffer), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsGetPlaceHolderBuffer(args, holder, 0, &buffer), ACL_ERROR_INVALID_PARAM);
    HOLDS(buffer == SENTINEL);

    /* An update names an appended value of its own size. */
    EXPECT(aclrtKernelArgsParaUpdate(NULL, value, &word, sizeof word), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsParaUpdate(args, NULL, &word, sizeof word), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsParaUpdate(args, value, NULL, sizeof word), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtKernelArgsParaUpdate(args, value, &word, sizeof word / 2),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtKernelArgsParaUpdate(args, value, &word, sizeof word), ACL_SUCCESS);
    /* A placeholder is no value to update. */
    EXPECT(aclrtKernelArgsParaUpdate(args, holder, &word, sizeof word), ACL_ERROR_RT_PARAM_INVALID);
}

/* ---- 14: every launch form against NULL arguments, stale functions and foreign streams ---- */

static void launches(aclrtFuncHandle add, aclrtFuncHandle stale, const Streams *s)
{
    float *a = NULL;
    float *c = NULL;
    void *dev_args = NULL;
    EXPECT(aclrtMalloc((void **)&a, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc((void **)&c, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dev_args, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    float ones[N];
    for (int i = 0; i < N; ++i) {
        ones[i] = 1.0f;
    }
    EXPECT(aclrtMemcpy(a, sizeof ones, ones, sizeof ones, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtMemset(c, sizeof ones, 0, sizeof ones), ACL_SUCCESS);
    npusimVectorAddArgs host = {a, a, c, N};
    const size_t size = sizeof host;
    EXPECT(aclrtMemcpy(dev_args, 64, &host, size, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);

    /* aclrtLaunchKernel and aclrtLaunchKernelV2: device arguments. */
    EXPECT(aclrtLaunchKernel(NULL, BLOCKS, dev_args, size, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, NULL, size, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernel(add, 0, dev_args, size, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernel(stale, BLOCKS, dev_args, size, s->own), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, dev_args, size, s->gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, dev_args, size, s->foreign), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtLaunchKernelV2(NULL, BLOCKS, dev_args, size, NULL, s->own),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, NULL, size, NULL, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelV2(add, 0, dev_args, size, NULL, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelV2(stale, BLOCKS, dev_args, size, NULL, s->own),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size, NULL, s->gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size, NULL, s->foreign),
           ACL_ERROR_RT_STREAM_CONTEXT);
    aclrtLaunchKernelCfg no_attrs = {NULL, 1};
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size, &no_attrs, s->own),
           ACL_ERROR_INVALID_PARAM);
    /* The switches of a launch configuration take 0 or 1, ENABLE_PROFILING as the rest. */
    aclrtLaunchKernelAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING;
    attr.value.enableProfiling = 2;
    aclrtLaunchKernelCfg profiling = {&attr, 1};
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size, &profiling, s->own),
           ACL_ERROR_RT_PARAM_INVALID);
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP;
    attr.value.isDataDump = 2;
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size, &profiling, s->own),
           ACL_ERROR_RT_PARAM_INVALID);
    /* Device arguments lie in memory of the stream's device: not another device's, not the
     * host's. */
    void *other_args = NULL;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&other_args, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(other_args, 64, &host, size, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, other_args, size, s->own), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtLaunchKernel(add, BLOCKS, &host, size, s->own), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtFree(other_args), ACL_SUCCESS);
    /* Device 1 is in use no more (the snapshot callbacks below count the devices in use). */
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    /* Fewer bytes than the kernel declares it reads. */
    EXPECT(aclrtLaunchKernel(add, BLOCKS, dev_args, size - 1, s->own), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtLaunchKernelV2(add, BLOCKS, dev_args, size - 1, NULL, s->own),
           ACL_ERROR_RT_PARAM_INVALID);

    /* aclrtLaunchKernelWithHostArgs: host arguments, placeholders named by count. */
    EXPECT(aclrtLaunchKernelWithHostArgs(NULL, BLOCKS, s->own, NULL, &host, size, NULL, 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->own, NULL, NULL, size, NULL, 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->own, NULL, &host, size, NULL, 1),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, 0, s->own, NULL, &host, size, NULL, 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->own, &no_attrs, &host, size, NULL, 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->own, NULL, &host, size - 1, NULL, 0),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtLaunchKernelWithHostArgs(stale, BLOCKS, s->own, NULL, &host, size, NULL, 0),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->gone, NULL, &host, size, NULL, 0),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, s->foreign, NULL, &host, size, NULL, 0),
           ACL_ERROR_RT_STREAM_CONTEXT);

    /* aclrtLaunchKernelWithArgsArray: one pointer per declared parameter. */
    void *params[4] = {&host.a, &host.b, &host.c, &host.n};
    EXPECT(aclrtLaunchKernelWithArgsArray(NULL, BLOCKS, s->own, NULL, params),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, s->own, NULL, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithArgsArray(add, 0, s->own, NULL, params), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, s->own, &no_attrs, params),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithArgsArray(stale, BLOCKS, s->own, NULL, params),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, s->gone, NULL, params),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, s->foreign, NULL, params),
           ACL_ERROR_RT_STREAM_CONTEXT);

    /* aclrtLaunchKernelWithConfig: a finalized argument handle; reserve NULL. */
    aclrtArgsHandle args = NULL;
    aclrtParamHandle param = NULL;
    EXPECT(aclrtKernelArgsInit(add, &args), ACL_SUCCESS);
    for (int i = 0; i < 4; ++i) {
        EXPECT(aclrtKernelArgsAppend(args, params[i], sizeof(uint64_t), &param), ACL_SUCCESS);
    }
    EXPECT(aclrtKernelArgsFinalize(args), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(NULL, BLOCKS, s->own, NULL, args, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, s->own, NULL, NULL, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithConfig(add, 0, s->own, NULL, args, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, s->own, &no_attrs, args, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchKernelWithConfig(stale, BLOCKS, s->own, NULL, args, NULL),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, s->gone, NULL, args, NULL),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, s->foreign, NULL, args, NULL),
           ACL_ERROR_RT_STREAM_CONTEXT);

    /* The SIMT launches are not an Atlas A2's; a NULL function is still a NULL argument. */
    dim3 grid = {1, 1, 1};
    dim3 block = {1, 1, 1};
    EXPECT(aclrtLaunchSIMTKernelWithArgsArray(NULL, grid, block, 0, s->own, NULL, params),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchSIMTKernelWithHostArgs(NULL, grid, block, 0, s->own, NULL, &host, size,
                                             NULL, 0),
           ACL_ERROR_INVALID_PARAM);

    /* None of the refused launches ran: c is still zero; then one that does. */
    EXPECT(aclrtSynchronizeStream(s->own), ACL_SUCCESS);
    float back[N];
    EXPECT(aclrtMemcpy(back, sizeof back, c, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(back[0] == 0.0f && back[N - 1] == 0.0f);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, s->own, NULL, args, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s->own), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(back, sizeof back, c, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(back[0] == 2.0f && back[N - 1] == 2.0f);

    EXPECT(aclrtFree(dev_args), ACL_SUCCESS);
    EXPECT(aclrtFree(c), ACL_SUCCESS);
    EXPECT(aclrtFree(a), ACL_SUCCESS);
}

/* Whether the N floats at device address `dev` are all `value`. */
static int device_floats_are(const float *dev, float value)
{
    float back[N];
    aclError copied = aclrtMemcpy(back, sizeof back, dev, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST);
    if (copied != ACL_SUCCESS) {
        (void)aclGetRecentErrMsg();
        return 0;
    }
    for (int i = 0; i < N; ++i) {
        if (back[i] != value) {
            return 0;
        }
    }
    return 1;
}

/* A launch takes its arguments as they are when it is submitted: placeholder data written,
 * a value updated and finalized, host arguments and argument arrays changed after the call
 * do not reach a launch still held. The arguments of a function of an unloaded binary are
 * retired with it. */
static void arguments_at_submission(aclrtBinHandle bin, aclrtFuncHandle add, aclrtStream stream)
{
    float *b = NULL;
    float *c = NULL;
    EXPECT(aclrtMalloc((void **)&b, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc((void **)&c, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    float ones[N];
    for (int i = 0; i < N; ++i) {
        ones[i] = 1.0f;
    }
    EXPECT(aclrtMemcpy(b, sizeof ones, ones, sizeof ones, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtMemset(c, sizeof ones, 0, sizeof ones), ACL_SUCCESS);

    /* a[] as a placeholder: its data is copied at the launch. */
    aclrtArgsHandle args = NULL;
    aclrtParamHandle a_param = NULL;
    aclrtParamHandle param = NULL;
    aclrtParamHandle n_param = NULL;
    uint64_t n = N;
    uint64_t half = N / 2;
    EXPECT(aclrtKernelArgsInit(add, &args), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppendPlaceHolder(args, &a_param), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &b, sizeof b, &param), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &c, sizeof c, &param), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &n, sizeof n, &n_param), ACL_SUCCESS);
    float *data = NULL;
    EXPECT(aclrtKernelArgsGetPlaceHolderBuffer(args, a_param, sizeof ones, (void **)&data),
           ACL_SUCCESS);
    if (data == NULL) {
        return;
    }
    for (int i = 0; i < N; ++i) {
        data[i] = 5.0f;
    }
    EXPECT(aclrtKernelArgsFinalize(args), ACL_SUCCESS);
    EXPECT(npusimHold(0), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, args, NULL), ACL_SUCCESS);
    for (int i = 0; i < N; ++i) {
        data[i] = 7.0f;
    }
    EXPECT(aclrtKernelArgsParaUpdate(args, n_param, &half, sizeof half), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsFinalize(args), ACL_SUCCESS);
    EXPECT(npusimRelease(0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(device_floats_are(c, 6.0f));

    /* Host arguments and an argument array, changed once submitted. */
    npusimVectorAddArgs host = {b, b, c, N};
    void *params[4] = {&host.a, &host.b, &host.c, &host.n};
    EXPECT(npusimHold(0), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, BLOCKS, stream, NULL, &host, sizeof host, NULL, 0),
           ACL_SUCCESS);
    host.b = c;
    EXPECT(aclrtLaunchKernelWithArgsArray(add, BLOCKS, stream, NULL, params), ACL_SUCCESS);
    host.n = 0;
    EXPECT(npusimRelease(0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    /* c = 1 + 1, then c = 1 + c. */
    HOLDS(device_floats_are(c, 3.0f));

    /* An append after the finalize is a change: finalized again before the next launch. */
    EXPECT(aclrtKernelArgsAppend(args, &n, sizeof n, &param), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithConfig(add, BLOCKS, stream, NULL, args, NULL),
           ACL_ERROR_RT_PARAM_INVALID);

    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(args, &n, sizeof n, &param), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtKernelArgsParaUpdate(args, n_param, &n, sizeof n), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtKernelArgsFinalize(args), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtFree(c), ACL_SUCCESS);
    EXPECT(aclrtFree(b), ACL_SUCCESS);
}

/* ---- 14: what a binary's exception callback can read ---- */

static int32_t trap_kernel(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    (void)blockIdx;
    (void)blockNum;
    (void)args;
    return 1;
}

typedef struct TrapArgs {
    uint64_t first;
    uint64_t second;
} TrapArgs;

/* What the callback saw: the getters' codes with NULL outputs, and what they gave. */
typedef struct Seen {
    int calls;
    aclError null_args;
    aclError null_len;
    aclError null_func;
    uint32_t len;
    int args_match;
    aclrtFuncHandle func;
    const aclrtExceptionInfo *info;
} Seen;

static const TrapArgs TRAP_ARGS = {0x1122334455667788u, 42};

static void record_exception(aclrtExceptionInfo *info, void *userData)
{
    Seen *seen = (Seen *)userData;
    void *args = NULL;
    ++seen->calls;
    seen->info = info;
    seen->null_args = aclrtGetArgsFromExceptionInfo(info, NULL, &seen->len);
    seen->null_len = aclrtGetArgsFromExceptionInfo(info, &args, NULL);
    seen->null_func = aclrtGetFuncHandleFromExceptionInfo(info, NULL);
    if (aclrtGetArgsFromExceptionInfo(info, &args, &seen->len) == ACL_SUCCESS && args != NULL &&
        seen->len == sizeof TRAP_ARGS) {
        seen->args_match = memcmp(args, &TRAP_ARGS, sizeof TRAP_ARGS) == 0;
    }
    (void)aclrtGetFuncHandleFromExceptionInfo(info, &seen->func);
    (void)aclGetRecentErrMsg();
}

/* devArgsLen is the arguments' length in bytes (the header's "args len"; the reference calls
 * it their count), devArgsPtr the arguments as launched; both getters check their outputs
 * first; an info no longer being delivered is refused. */
static void exception_info(void)
{
    static Seen seen;
    aclrtStream stream = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle trap = NULL;
    const char *names[] = {"kofc_trap"};
    size_t size = 0;
    EXPECT(npusimRegisterKernel("kofc_trap", trap_kernel), ACL_SUCCESS);
    EXPECT(npusimRegistryImage(names, 1, NULL, 0, &size), ACL_SUCCESS);
    uint8_t *image = malloc(size);
    EXPECT(npusimRegistryImage(names, 1, image, size, &size), ACL_SUCCESS);
    EXPECT(aclrtBinaryLoadFromData(image, size, NULL, &bin), ACL_SUCCESS);
    free(image);
    EXPECT(aclrtBinaryGetFunction(bin, "kofc_trap", &trap), ACL_SUCCESS);
    EXPECT(aclrtBinarySetExceptionCallback(bin, record_exception, &seen), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    TrapArgs args = TRAP_ARGS;
    EXPECT(aclrtLaunchKernelWithHostArgs(trap, 1, stream, NULL, &args, sizeof args, NULL, 0),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(seen.calls == 1);
    HOLDS(seen.null_args == ACL_ERROR_INVALID_PARAM && seen.null_len == ACL_ERROR_INVALID_PARAM);
    HOLDS(seen.null_func == ACL_ERROR_INVALID_PARAM);
    HOLDS(seen.len == sizeof TRAP_ARGS && seen.args_match);
    HOLDS(seen.func == trap);
    void *after = SENTINEL;
    uint32_t len = 7;
    EXPECT(aclrtGetArgsFromExceptionInfo(seen.info, &after, &len),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(after == SENTINEL && len == 7);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
}

static void kernels(const Streams *s)
{
    binaries();
    aclrtBinHandle bin = NULL;
    aclrtBinHandle gone = NULL;
    aclrtFuncHandle add = NULL;
    aclrtFuncHandle stale = NULL;
    EXPECT(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &add), ACL_SUCCESS);
    EXPECT(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &gone), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(gone, "vector_add_f32", &stale), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(gone), ACL_SUCCESS);
    function_queries(add, stale);
    argument_handles(add);
    launches(add, stale, s);
    arguments_at_submission(bin, add, s->own);
    exception_info();
}

/* ---- 11-11 and 14: a device global by symbol and by name ---- */

/* Asynchronous copies with pinned memory run in stream order: while the device is held
 * neither the variable (the library's own memory, which the program reads directly) nor the
 * destination changes. */
static void held_copies(aclrtStream stream)
{
    float *pinned = NULL;
    EXPECT(aclrtMallocHost((void **)&pinned, 2 * sizeof(float)), ACL_SUCCESS);
    if (pinned == NULL) {
        return;
    }
    pinned[0] = 9.0f;
    pinned[1] = 0.0f;
    const float before = bias[3];
    EXPECT(npusimHold(0), ACL_SUCCESS);
    EXPECT(aclrtMemcpyToSymbolAsync(bias, &pinned[0], sizeof(float), 3 * sizeof(float),
                                    ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyFromSymbolAsync(&pinned[1], sizeof(float), bias, sizeof(float),
                                      3 * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    HOLDS(bias[3] == before && pinned[1] == 0.0f);
    EXPECT(npusimRelease(0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(bias[3] == 9.0f && pinned[1] == 9.0f);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
}

static void device_variables(const Streams *s, const char *library)
{
    aclrtBinHandle bin = NULL;
    EXPECT(aclrtBinaryLoadFromFile(library, NULL, &bin), ACL_SUCCESS);

    /* The symbol before the output. */
    EXPECT(aclrtGetSymbolAddress(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetSymbolSize(NULL, NULL), ACL_ERROR_INVALID_PARAM);

    /* By symbol and by name: one global. */
    void *by_symbol = NULL;
    void *by_name = NULL;
    size_t symbol_size = 0;
    size_t name_size = 0;
    EXPECT(aclrtGetSymbolAddress(bias, &by_symbol), ACL_SUCCESS);
    EXPECT(aclrtGetSymbolSize(bias, &symbol_size), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetGlobal(bin, "bias", &by_name, NULL), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetGlobal(bin, "bias", NULL, &name_size), ACL_SUCCESS);
    HOLDS(by_symbol != NULL && by_symbol == by_name);
    HOLDS(symbol_size == sizeof bias && name_size == sizeof bias);
    /* The symbol is the variable's address: one inside it names none. */
    EXPECT(aclrtGetSymbolSize(&bias[1], &symbol_size), ACL_ERROR_RT_INVALID_SYMBOL);
    EXPECT(aclrtBinaryGetGlobal(bin, "bias", NULL, NULL), ACL_ERROR_INVALID_PARAM);
    void *unknown = SENTINEL;
    EXPECT(aclrtBinaryGetGlobal(bin, "add_bias", &unknown, NULL), ACL_ERROR_RT_SYMBOL_NOT_FOUND);
    HOLDS(unknown == SENTINEL);

    /* A kernel by symbol is the binary's function of that name. */
    aclrtFuncHandle by_kernel_symbol = NULL;
    aclrtFuncHandle by_kernel_name = NULL;
    aclrtBinHandle owner = NULL;
    EXPECT(aclrtGetFuncBySymbol((const void *)add_bias, &by_kernel_symbol), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "add_bias", &by_kernel_name), ACL_SUCCESS);
    EXPECT(aclrtFunctionGetBinary(by_kernel_symbol, &owner), ACL_SUCCESS);
    HOLDS(by_kernel_symbol == by_kernel_name && owner == bin);

    /* Written by symbol, read through the address by name. */
    const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float back[4] = {0};
    EXPECT(aclrtMemcpyToSymbol(bias, values, sizeof values, 0, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpy(back, sizeof back, by_name, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(memcmp(back, values, sizeof back) == 0);

    /* The copies: NULL arguments first, then the kind (100000, outside aclrtMemcpyKind too),
     * then the range (100000 too: the symbol functions name no other code for bad input). */
    EXPECT(aclrtMemcpyToSymbol(NULL, NULL, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyFromSymbol(NULL, 4, NULL, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 4, 0, (aclrtMemcpyKind)99), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyFromSymbol(back, sizeof back, bias, 4, 0, (aclrtMemcpyKind)99),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 4, sizeof bias, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyFromSymbol(back, sizeof back, bias, 4, SIZE_MAX, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_INVALID_PARAM);

    /* A copy of 0 bytes still names a variable, within its bounds. */
    EXPECT(aclrtMemcpyToSymbol(bias, NULL, 0, 0, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 0, sizeof bias + 1, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyFromSymbol(back, sizeof back, (const void *)values, 0, 0,
                                 ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_RT_INVALID_SYMBOL);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 0, sizeof bias, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);

    /* The asynchronous copies: a destroyed stream, another context's. */
    EXPECT(aclrtMemcpyToSymbolAsync(NULL, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE, s->own),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyFromSymbolAsync(NULL, 4, bias, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST, s->own),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyToSymbolAsync(bias, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE, s->gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtMemcpyFromSymbolAsync(back, 4, bias, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST, s->gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtMemcpyToSymbolAsync(bias, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE, s->foreign),
           ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtMemcpyFromSymbolAsync(back, 4, bias, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST, s->foreign),
           ACL_ERROR_RT_STREAM_CONTEXT);

    held_copies(s->own);

    /* Pinned memory is checked as aclrtMemcpyAsync checks it: a range past its page. */
    char *pinned = NULL;
    EXPECT(aclrtMallocHost((void **)&pinned, 8), ACL_SUCCESS);
    void *base = NULL;
    size_t reserved = 0;
    EXPECT(aclrtMemGetAddressRange(pinned, &base, &reserved), ACL_SUCCESS);
    char *tail = (char *)base + reserved - 8;
    EXPECT(aclrtMemcpyToSymbolAsync(bias, tail, 16, 0, ACL_MEMCPY_HOST_TO_DEVICE, s->own),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyFromSymbolAsync(tail, 16, bias, 16, 0, ACL_MEMCPY_DEVICE_TO_HOST, s->own),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);

    /* Unloaded: the global is no device variable any more, the kernel no function. */
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
    void *address = SENTINEL;
    aclrtFuncHandle func = SENTINEL;
    EXPECT(aclrtGetSymbolAddress(bias, &address), ACL_ERROR_RT_INVALID_SYMBOL);
    EXPECT(aclrtMemcpyToSymbol(bias, values, 4, 0, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_INVALID_SYMBOL);
    EXPECT(aclrtGetFuncBySymbol((const void *)add_bias, &func), ACL_ERROR_RT_SYMBOL_NOT_FOUND);
    HOLDS(address == SENTINEL && func == SENTINEL);
}

/* ---- 21: snapshot callbacks ---- */

static int g_backups;

static uint32_t count_backup(int32_t deviceId, void *args)
{
    (void)deviceId;
    ++*(int *)args;
    return 0;
}

static uint32_t other_backup(int32_t deviceId, void *args)
{
    (void)deviceId;
    (void)args;
    return 0;
}

static void snapshots(void)
{
    const int pid = (int)getpid();
    EXPECT(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, count_backup),
           ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED);
    EXPECT(aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_BACKUP_PRE, count_backup, &g_backups),
           ACL_SUCCESS);
    /* Only the function registered for the stage is unregistered by it. */
    EXPECT(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, other_backup),
           ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED);
    EXPECT(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_POST, count_backup),
           ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED);
    EXPECT(aclrtSnapShotProcessLock(-1, NULL), ACL_ERROR_INVALID_PARAM);
    int reserve = 0;
    EXPECT(aclrtSnapShotProcessLock(pid, &reserve), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_SUCCESS);
    HOLDS(g_backups == 0);
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    HOLDS(g_backups == 1);
    /* Backed up again after a restore (LOCKED again), without the callback. */
    EXPECT(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, count_backup), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_SUCCESS);
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    HOLDS(g_backups == 1);
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_SUCCESS);
}

/* ---- 24: other APIs ---- */

static void other_apis(const Streams *s)
{
    HOLDS(aclDataTypeSize(ACL_DT_UNDEFINED) == 0);
    HOLDS(aclDataTypeSize((aclDataType)12345) == 0);

    int32_t supported = 7;
    EXPECT(aclGetCannAttribute((aclCannAttr)12345, &supported), ACL_ERROR_INVALID_PARAM);
    HOLDS(supported == 7);
    int64_t value = 7;
    /* The item is a value, checked before the device is looked up (as aclrtGetDeviceInfo's
     * attribute); NULL first. */
    uint32_t devices = 0;
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclGetDeviceCapability(0, (aclDeviceInfo)12345, &value), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclGetDeviceCapability(devices, (aclDeviceInfo)12345, &value), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclGetDeviceCapability(devices, ACL_DEVICE_INFO_AI_CORE_NUM, &value),
           ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclGetDeviceCapability(devices, (aclDeviceInfo)12345, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(value == 7);

    char mark[8] = "mark";
    EXPECT(aclrtProfTrace(NULL, 4, s->own), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtProfTrace(mark, 4, s->gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtProfTrace(mark, 4, s->foreign), ACL_ERROR_RT_STREAM_CONTEXT);

    /* Configured streams: NULL arguments, an attribute outside aclrtStreamConfigAttr and a
     * value of 0 bytes before what an Atlas A2 lacks. */
    uint32_t priority = 1;
    EXPECT(aclrtSetStreamConfigOpt(NULL, ACL_RT_STREAM_PRIORITY, &priority, sizeof priority),
           ACL_ERROR_INVALID_PARAM);
    aclrtStreamConfigHandle config;
    memset(&config, 0, sizeof config);
    EXPECT(aclrtSetStreamConfigOpt(&config, (aclrtStreamConfigAttr)4, &priority, sizeof priority),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetStreamConfigOpt(&config, ACL_RT_STREAM_PRIORITY, &priority, 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetStreamConfigOpt(&config, ACL_RT_STREAM_PRIORITY, &priority, sizeof priority),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCreateStreamV2(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    aclrtStream created = SENTINEL;
    EXPECT(aclrtCreateStreamV2(&created, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(created == SENTINEL);

    /* Host function threads: a NULL stream and a timeout of 0 are refused as arguments (the
     * reference allows neither) before the feature an Atlas A2 lacks. */
    const uint64_t thread = 1;
    EXPECT(aclrtSubscribeHostFunc(thread, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtUnSubscribeHostFunc(thread, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtProcessHostFunc(0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSubscribeHostFunc(thread, s->own), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtProcessHostFunc(-1), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtUnSubscribeHostFunc(thread, s->own), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
}

/* ---- 25-03: data buffers and allocator descriptions ---- */

static void operations(void)
{
    /* A data buffer describes memory it does not own: destroying it leaves the memory live. */
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    aclDataBuffer *buffer = aclCreateDataBuffer(dev, 64);
    HOLDS(buffer != NULL);
    HOLDS(aclGetDataBufferAddr(buffer) == dev && aclGetDataBufferSizeV2(buffer) == 64);
    EXPECT(aclDestroyDataBuffer(buffer), ACL_SUCCESS);
    /* A destroyed buffer's getters answer nothing and leave the thread's last error. */
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    HOLDS(aclGetDataBufferAddr(buffer) == NULL);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(aclGetDataBufferSizeV2(buffer) == 0);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclUpdateDataBuffer(buffer, dev, 64), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtMemset(dev, 64, 0x5a, 64), ACL_SUCCESS);
    unsigned char byte = 0;
    EXPECT(aclrtMemcpy(&byte, 1, (char *)dev + 63, 1, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(byte == 0x5a);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    HOLDS(aclGetDataBufferSize(NULL) == 0);

    /* Allocator descriptions: the description before the function set into it. */
    EXPECT(aclrtAllocatorDestroyDesc(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetObjToDesc(NULL, SENTINEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetAllocFuncToDesc(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetFreeFuncToDesc(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetAllocAdviseFuncToDesc(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    /* A destroyed description: its value's NULL check first, then the handle. */
    aclrtAllocatorDesc desc = aclrtAllocatorCreateDesc();
    HOLDS(desc != NULL);
    EXPECT(aclrtAllocatorDestroyDesc(desc), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetObjToDesc(desc, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocatorSetObjToDesc(desc, SENTINEL), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtAllocatorDestroyDesc(desc), ACL_ERROR_RT_INVALID_HANDLE);
}

int main(void)
{
    const char *library = getenv("NPUSIM_GLOBALS_SO");
    if (library == NULL) {
        printf("NPUSIM_GLOBALS_SO is not set\n");
        return 1;
    }
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("setup failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    aclrtContext home = NULL;
    aclrtContext other = NULL;
    Streams s = {NULL, NULL, NULL};
    EXPECT(aclrtGetCurrentContext(&home), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&s.own), ACL_SUCCESS);
    s.gone = destroyed_stream();
    s.foreign = stream_of_another_context(home, &other);

    kernels(&s);
    device_variables(&s, library);
    snapshots();
    other_apis(&s);
    operations();

    EXPECT(aclrtDestroyStream(s.own), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(other), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(s.foreign), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(home), ACL_SUCCESS);
    EXPECT(aclrtDestroyContext(other), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    checks_done("documented edges");
    return 0;
}
