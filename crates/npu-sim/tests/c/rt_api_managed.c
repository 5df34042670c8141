/*
 * The rest of acl/acl_rt_api.h's C++ conveniences, as a program uses them (compiled as C++
 * only): typed managed memory written by the host and prefetched to the device, one range at
 * a time and in batches (with one location for all, and with a location per range), typed
 * registration with flags (the aclrtHostRegisterV2 overload) and its device pointer, and the
 * asynchronous copies to and from a device variable named by the variable (the program links
 * the kernel library of global_kernels.c and loads it as a binary, as rt_api_flow.c does).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "acl/acl_rt_api.h"
#include "check.h"

extern float bias[4];

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream, 0, 0));

    /* Managed memory comes in whole 2 MiB pages, and prefetches move whole pages. */
    const size_t page = (size_t)2 << 20;
    uint32_t *first = NULL, *second = NULL;
    CHECK(aclrtMemAllocManaged(&first, page));
    CHECK(aclrtMemAllocManaged(&second, 100));
    for (uint32_t i = 0; i < 4; ++i) {
        first[i] = 10 + i;
        second[i] = 20 + i;
    }
    aclrtMemManagedLocation device = {};
    device.type = ACL_MEM_LOCATIONTYPE_DEVICE;
    device.id = 0;
    aclrtMemManagedLocation host = {};
    host.type = ACL_MEM_LOCATIONTYPE_HOST;
    CHECK(aclrtMemManagedPrefetchAsync(first, page, device, 0, stream));
    const uint32_t *ranges[2] = { first, second };
    size_t sizes[2] = { page, page };
    CHECK(aclrtMemManagedPrefetchBatchAsync(ranges, sizes, 2, device, 0, stream));
    aclrtMemManagedLocation locations[2] = { device, host };
    size_t starts[2] = { 0, 1 };
    CHECK(aclrtMemManagedPrefetchBatchAsync(ranges, sizes, 2, locations, starts, 2, 0, stream));
    CHECK(aclrtMemsetAsync(second, 4, 0x7F, 4, stream));
    CHECK(aclrtSynchronizeStream(stream, 1000));
    printf("managed: %u %u %#x\n", first[0], first[3], second[0]);
    printf("prefetch with flags 1: %d\n", aclrtMemManagedPrefetchAsync(first, page, device, 1, stream));
    (void)aclGetRecentErrMsg();

    char *registered = static_cast<char *>(aligned_alloc(4096, 8192));
    char *mapped = NULL;
    memset(registered, 0, 8192);
    CHECK(aclrtHostRegister(registered, 8192, ACL_HOST_REG_MAPPED));
    CHECK(aclrtHostGetDevicePointer(registered, &mapped, 0));
    CHECK(aclrtMemsetAsync(mapped, 8, 5, 8, stream));
    CHECK(aclrtSynchronizeStream(stream, 1000));
    printf("registered with flags: mapped %d, the device wrote %d\n", mapped != NULL, registered[7]);
    CHECK(aclrtHostUnregister(registered));
    free(registered);

    aclrtBinHandle bin = NULL;
    CHECK(aclrtBinaryLoadFromFile(getenv("NPUSIM_GLOBALS_SO"), NULL, &bin));
    float *pinned = NULL;
    CHECK(aclrtMallocHost(&pinned, 4 * sizeof(float)));
    for (int i = 0; i < 4; ++i) {
        pinned[i] = 1.0f + (float)i;
    }
    float back[2] = { 0, 0 };
    CHECK(aclrtMemcpyToSymbolAsync(bias, pinned, 4 * sizeof(float), 0, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    CHECK(aclrtMemcpyFromSymbolAsync(back, sizeof back, bias, sizeof back, 2 * sizeof(float), ACL_MEMCPY_DEFAULT,
                                     stream));
    CHECK(aclrtSynchronizeStream(stream, 1000));
    printf("symbol, asynchronously: %g %g\n", back[0], back[1]);
    printf("from the symbol with kind HOST_TO_DEVICE: %d\n",
           aclrtMemcpyFromSymbolAsync(back, sizeof back, bias, sizeof back, 0, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    (void)aclGetRecentErrMsg();
    CHECK(aclrtBinaryUnLoad(bin));

    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtFree(first));
    CHECK(aclrtFree(second));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("rt api managed flow ok\n");
    return 0;
}
