/*
 * The C++ conveniences of acl/acl_rt_api.h, compiled as C++ only: typed allocations and copies,
 * timed waits and configured creation under the plain names, batch copies with one attribute,
 * typed host registration, and device variables named by the variable (the program links the
 * kernel library of global_kernels.c and loads it as a binary, as symbol_flow.c does).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "acl/acl_rt_api.h"
#include "check.h"

extern float bias[4];

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));

    aclrtStream stream = NULL;
    aclrtEvent event = NULL;
    CHECK(aclrtCreateStream(&stream, 0, ACL_STREAM_FAST_LAUNCH));
    CHECK(aclrtCreateEvent(&event, ACL_EVENT_SYNC));

    float *device = NULL, *pinned = NULL;
    CHECK(aclrtMalloc(&device, 4 * sizeof(float)));
    CHECK(aclrtMallocHost(&pinned, 4 * sizeof(float)));
    for (int i = 0; i < 4; ++i) {
        pinned[i] = 1.5f * (float)i;
    }
    CHECK(aclrtMemcpyAsync(device, 4 * sizeof(float), pinned, 4 * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE,
                           stream));
    CHECK(aclrtRecordEvent(event, stream));
    CHECK(aclrtSynchronizeEvent(event, 1000));
    CHECK(aclrtStreamWaitEvent(stream, event, 1000));
    float back[4] = { 0 };
    CHECK(aclrtMemcpy(back, sizeof back, device, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("typed copy: %g %g %g %g\n", back[0], back[1], back[2], back[3]);

    /* Two rows of two floats out of a 4-float pitch: the first column pair of each row. */
    float *rows = NULL;
    CHECK(aclrtMalloc(&rows, 8 * sizeof(float), ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMemcpy2d(rows, 4 * sizeof(float), pinned, 2 * sizeof(float), 2 * sizeof(float), 2,
                        ACL_MEMCPY_HOST_TO_DEVICE));
    float grid[8] = { 0 };
    CHECK(aclrtMemcpy2dAsync(grid, 2 * sizeof(float), rows, 4 * sizeof(float), 2 * sizeof(float), 2,
                             ACL_MEMCPY_DEVICE_TO_HOST, stream));
    CHECK(aclrtSynchronizeStream(stream, 1000));
    printf("2d: %g %g %g %g\n", grid[0], grid[1], grid[2], grid[3]);

    float *dsts[2] = { device, device + 2 };
    float *srcs[2] = { pinned + 2, pinned };
    size_t sizes[2] = { 2 * sizeof(float), 2 * sizeof(float) };
    size_t maxes[2] = { 2 * sizeof(float), 2 * sizeof(float) };
    aclrtMemcpyBatchAttr attr = {};
    attr.srcLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    attr.dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    attr.dstLoc.id = 0;
    CHECK(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attr));
    CHECK(aclrtMemcpy(back, sizeof back, device, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("batch, one attribute: %g %g %g %g\n", back[0], back[1], back[2], back[3]);
    size_t failed = 99;
    CHECK(aclrtMemcpyBatchAsync(dsts, maxes, srcs, sizes, 2, attr, &failed, stream));
    CHECK(aclrtSynchronizeDevice(1000));
    printf("async batch, failIndex left at SIZE_MAX: %d\n", failed == SIZE_MAX);

    aclrtPtrAttributes attributes;
    CHECK(aclrtPointerGetAttributes(device, &attributes));
    printf("device pointer: location type %d\n", (int)attributes.location.type);

    uint64_t actual = 0;
    CHECK(aclrtSetOpExecuteTimeOut(1000000, &actual));
    printf("execute timeout 1 s takes effect as %llu us\n", (unsigned long long)actual);

    float *registered = static_cast<float *>(aligned_alloc(4096, 4096));
    float *mapped = NULL;
    CHECK(aclrtHostRegister(registered, 4096, ACL_HOST_REGISTER_MAPPED, &mapped));
    printf("registered host memory maps to a device pointer: %d\n", mapped != NULL);
    CHECK(aclrtHostUnregister(registered));
    free(registered);

    aclrtBinHandle bin = NULL;
    CHECK(aclrtBinaryLoadFromFile(getenv("NPUSIM_GLOBALS_SO"), NULL, &bin));
    size_t size = 0;
    void *address = NULL;
    CHECK(aclrtGetSymbolSize(bias, &size));
    CHECK(aclrtGetSymbolAddress(bias, &address));
    const float values[4] = { 2.0f, 4.0f, 6.0f, 8.0f };
    CHECK(aclrtMemcpyToSymbol(bias, values, sizeof values, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpyFromSymbol(back, sizeof back, bias, sizeof(float), 3 * sizeof(float),
                                ACL_MEMCPY_DEVICE_TO_HOST));
    printf("symbol of %zu bytes at the variable: %d, last element %g\n", size, address == (void *)bias, back[0]);
    CHECK(aclrtBinaryUnLoad(bin));

    CHECK(aclrtFree(rows));
    CHECK(aclrtFree(device));
    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtDestroyEvent(event));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("rt api flow ok\n");
    return 0;
}
