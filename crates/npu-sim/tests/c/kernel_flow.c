/*
 * Kernels from C: load the shipped kernel library with aclrtBinaryLoadFromFile, resolve
 * vector_add_f32, launch it with host-packed arguments and check the result. Also steers the
 * simulator through npusim/control.h (a kernel duration and the device counters).
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"

enum { N = 10000, BLOCKS = 8 };

int main(void)
{
    static float a[N], b[N], c[N];
    void *da = NULL, *db = NULL, *dc = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;
    npusimDeviceStats stats;

    for (int i = 0; i < N; ++i) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(N - i);
    }
    CHECK(aclrtSetDevice(0));
    CHECK(npusimSetKernelDuration(0, "vector_add_f32", 1000));
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&da, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&db, sizeof b, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dc, sizeof c, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(npusimGetDeviceStats(0, &stats));
    printf("live allocations: %llu\n", (unsigned long long)stats.liveAllocations);
    CHECK(aclrtMemcpy(da, sizeof a, a, sizeof a, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpy(db, sizeof b, b, sizeof b, ACL_MEMCPY_HOST_TO_DEVICE));

    npusimVectorAddArgs args = { (const float *)da, (const float *)db, (float *)dc, N };
    CHECK(aclrtLaunchKernelWithHostArgs(add, BLOCKS, NULL, NULL, &args, sizeof args, NULL, 0));
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemcpy(c, sizeof c, dc, sizeof c, ACL_MEMCPY_DEVICE_TO_HOST));

    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += c[i] != a[i] + b[i];
    }
    printf("vector_add_f32 over %d elements in %d blocks: %d wrong\n", N, BLOCKS, wrong);

    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtFree(da));
    CHECK(aclrtFree(db));
    CHECK(aclrtFree(dc));
    CHECK(aclrtResetDevice(0));
    printf("kernel flow ok\n");
    return 0;
}
