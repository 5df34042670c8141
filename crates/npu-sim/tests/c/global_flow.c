/*
 * Device globals from C: load a kernel library declaring one (global_kernels.c, its path in
 * NPUSIM_GLOBALS_SO), find it with aclrtBinaryGetGlobal, set it with aclrtMemcpy, launch the
 * kernel that reads it, read it back, and see it go with the binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "check.h"

typedef struct AddBiasArgs {
    float *x;
    uint64_t n;
} AddBiasArgs;

int main(void)
{
    enum { N = 16 };
    const char *path = getenv("NPUSIM_GLOBALS_SO");
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;
    void *bias = NULL, *dx = NULL;
    size_t size = 0;
    float host_bias[4] = { 1.0f, 2.0f, 3.0f, 4.0f }, readback[4] = { 0 };
    static float x[N];

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtBinaryLoadFromFile(path, NULL, &bin));
    CHECK(aclrtBinaryGetGlobal(bin, "bias", &bias, &size));
    size_t size_only = 0;
    CHECK(aclrtBinaryGetGlobal(bin, "bias", NULL, &size_only));
    printf("global bias: %zu bytes (size alone: %zu)\n", size, size_only);
    printf("unknown global: %d\n", aclrtBinaryGetGlobal(bin, "scale", &bias, &size));
    (void)aclGetRecentErrMsg();

    CHECK(aclrtMemcpy(bias, size, host_bias, sizeof host_bias, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMalloc(&dx, sizeof x, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dx, sizeof x, 0, sizeof x));
    CHECK(aclrtBinaryGetFunction(bin, "add_bias", &add));
    AddBiasArgs args = { (float *)dx, N };
    CHECK(aclrtLaunchKernelWithHostArgs(add, 4, NULL, NULL, &args, sizeof args, NULL, 0));
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemcpy(x, sizeof x, dx, sizeof x, ACL_MEMCPY_DEVICE_TO_HOST));
    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += x[i] != host_bias[i % 4];
    }
    printf("add_bias over %d elements: %d wrong\n", N, wrong);
    CHECK(aclrtMemsetAsync(bias, size, 0, size, NULL));
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemcpy(readback, sizeof readback, bias, size, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("after a memset of the global: %g %g\n", readback[0], readback[3]);

    CHECK(aclrtBinaryUnLoad(bin));
    printf("global after unload: %d\n",
           aclrtMemcpy(bias, size, host_bias, sizeof host_bias, ACL_MEMCPY_HOST_TO_DEVICE));
    (void)aclGetRecentErrMsg();
    CHECK(aclrtFree(dx));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("global flow ok\n");
    return 0;
}
