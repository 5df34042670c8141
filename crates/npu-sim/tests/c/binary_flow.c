/*
 * The older kernel load path from C, as a CANN sample uses it: read the kernel binary into
 * memory, describe it with aclrtCreateBinary, load it with aclrtBinaryLoad, ask the function
 * about itself (its parameter list included), set the binary's exception callback, launch with
 * aclrtLaunchKernelV2 on arguments placed in aclrtMallocCached device memory, then with
 * aclrtLaunchKernelWithArgsArray.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

enum { N = 4096, BLOCKS = 4 };

static int exceptions;

static void on_exception(aclrtExceptionInfo *info, void *userData)
{
    (void)info;
    *(int *)userData += 1;
}

/* The whole file at `path` in a malloc'ed buffer, or NULL. */
static void *read_file(const char *path, size_t *len)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        return NULL;
    }
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    void *data = malloc((size_t)size);
    if (data != NULL && fread(data, 1, (size_t)size, file) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(file);
    *len = (size_t)size;
    return data;
}

int main(void)
{
    static float x[N];
    size_t len = 0;
    void *data = read_file(npusimKernelLibraryPath(), &len);
    if (data == NULL) {
        printf("cannot read the kernel library\n");
        return 1;
    }
    for (int i = 0; i < N; ++i) {
        x[i] = (float)i;
    }
    CHECK(aclrtSetDevice(0));
    aclrtBinary binary = aclrtCreateBinary(data, len);
    if (binary == NULL) {
        printf("aclrtCreateBinary failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    aclrtBinHandle bin = NULL;
    CHECK(aclrtBinaryLoad(binary, &bin));
    /* Loaded: the description and the caller's bytes can go. */
    CHECK(aclrtDestroyBinary(binary));
    free(data);

    aclrtFuncHandle scale = NULL;
    aclrtBinHandle owner = NULL;
    char name[32];
    void *aic = NULL, *aiv = NULL;
    CHECK(aclrtBinaryGetFunction(bin, "scale_f32", &scale));
    CHECK(aclrtFunctionGetBinary(scale, &owner));
    CHECK(aclrtGetFunctionName(scale, sizeof name, name));
    CHECK(aclrtGetFunctionAddr(scale, &aic, &aiv));
    printf("function %s of its binary %d, one entry for both engines %d\n", name, owner == bin,
           aic != NULL && aic == aiv);
    CHECK(aclrtBinarySetExceptionCallback(bin, on_exception, &exceptions));

    void *dx = NULL, *dargs = NULL;
    CHECK(aclrtMallocCached(&dx, sizeof x, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocCached(&dargs, sizeof(npusimScaleArgs), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(dx, sizeof x, x, sizeof x, ACL_MEMCPY_HOST_TO_DEVICE));
    npusimScaleArgs args = { (float *)dx, N, 2.5f, 0 };
    CHECK(aclrtMemcpy(dargs, sizeof args, &args, sizeof args, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemFlush(dargs, sizeof args));

    uint32_t isDevice = 0;
    void *addresses[] = { dx, dargs };
    CHECK(aclrtCheckMemType(addresses, 2, ACL_RT_MEM_TYPE_DEV, &isDevice, 0));
    printf("arguments in device memory: %u\n", isDevice);

    aclrtLaunchKernelAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE;
    attr.value.engineType = ACL_RT_ENGINE_TYPE_AIV;
    aclrtLaunchKernelCfg cfg = { &attr, 1 };
    CHECK(aclrtLaunchKernelV2(scale, BLOCKS, dargs, sizeof args, &cfg, NULL));
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemInvalidate(dx, sizeof x));
    CHECK(aclrtMemcpy(x, sizeof x, dx, sizeof x, ACL_MEMCPY_DEVICE_TO_HOST));

    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += x[i] != (float)i * 2.5f;
    }
    printf("scale_f32 over %d elements in %d blocks: %d wrong, %d exceptions\n", N, BLOCKS, wrong,
           exceptions);

    /* The kernel's parameter list, and a launch from an array of pointers to each parameter. */
    size_t count = 0, offsets[4], sizes[4];
    CHECK(aclrtFunctionGetParamCount(scale, &count));
    for (size_t i = 0; i < count && i < 4; ++i) {
        CHECK(aclrtFunctionGetParamInfo(scale, i, &offsets[i], &sizes[i]));
    }
    printf("%zu parameters at %zu %zu %zu %zu\n", count, offsets[0], offsets[1], offsets[2], offsets[3]);
    float *px = (float *)dx;
    uint64_t n = N;
    float alpha = 0.5f;
    uint32_t reserved = 0;
    void *params[] = { &px, &n, &alpha, &reserved };
    CHECK(aclrtLaunchKernelWithArgsArray(scale, BLOCKS, NULL, NULL, params));
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemcpy(x, sizeof x, dx, sizeof x, ACL_MEMCPY_DEVICE_TO_HOST));
    wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += x[i] != (float)i * 1.25f;
    }
    printf("scaled again from an array of parameters: %d wrong\n", wrong);
    aclrtFuncHandle byEntry = NULL;
    printf("by entry: %d\n", aclrtBinaryGetFunctionByEntry(bin, 0, &byEntry));

    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtFree(dx));
    CHECK(aclrtFree(dargs));
    CHECK(aclrtResetDevice(0));
    printf("binary flow ok\n");
    return 0;
}
