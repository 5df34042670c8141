/*
 * The memory group's documented flows in one program: virtual memory (granularity, reserve,
 * physical allocation, map, access, use, unmap, free, release), a batched host-to-device copy
 * with failIndex, a 32-bit fill read back, and managed memory touched by the host and copied
 * on the device. tests/c_programs.rs compares the output byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"
#include "memory_helpers.h"

enum { MIB = 1024 * 1024 };

int main(void)
{
    aclrtStream stream = NULL;
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));

    /* Virtual memory. */
    aclrtPhysicalMemProp prop = physical_prop(ACL_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    size_t granularity = 0;
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &granularity));
    void *va = NULL;
    aclrtDrvMemHandle handle = NULL;
    CHECK(aclrtReserveMemAddress(&va, 2 * granularity, 0, NULL, 0));
    CHECK(aclrtMallocPhysical(&handle, granularity, &prop, 0));
    CHECK(aclrtMapMem(va, granularity, 0, handle, 0));
    aclrtMemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
    access.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    CHECK(aclrtMemSetAccess(va, granularity, &access, 1));
    uint64_t flags = 0;
    CHECK(aclrtMemGetAccess(va, &access.location, &flags));
    CHECK(aclrtMemsetD32(va, granularity, 0xCAFEF00Du, granularity / 4));
    uint32_t word = 0;
    CHECK(aclrtMemcpy(&word, sizeof word, (char *)va + granularity - 4, sizeof word,
                      ACL_MEMCPY_DEVICE_TO_HOST));
    printf("granularity %zu, access %llu, last word %08x\n", granularity, (unsigned long long)flags,
           word);
    CHECK(aclrtUnmapMem(va));
    CHECK(aclrtFreePhysical(handle));
    CHECK(aclrtReleaseMemAddress(va));

    /* A batch of host-to-device copies. */
    void *dev[2] = {NULL, NULL};
    uint8_t host[2][256];
    CHECK(aclrtMalloc(&dev[0], 256, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev[1], 256, ACL_MEM_MALLOC_HUGE_FIRST));
    memset(host[0], 1, sizeof host[0]);
    memset(host[1], 2, sizeof host[1]);
    void *dsts[2] = {dev[0], dev[1]};
    void *srcs[2] = {host[0], host[1]};
    size_t maxs[2] = {256, 256}, sizes[2] = {256, 128};
    aclrtMemcpyBatchAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    attr.dstLoc.id = 0;
    attr.srcLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    size_t starts[1] = {0}, failIndex = 0;
    CHECK(aclrtMemcpyBatchAsync(dsts, maxs, srcs, sizes, 2, &attr, starts, 1, &failIndex, stream));
    CHECK(aclrtSynchronizeStream(stream));
    uint8_t back[256];
    CHECK(aclrtMemcpy(back, sizeof back, dev[1], sizeof back, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("batch: failIndex is SIZE_MAX %d, copied %u then %u\n", failIndex == SIZE_MAX, back[127],
           back[128]);
    attr.srcLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    aclError wrong = aclrtMemcpyBatch(dsts, maxs, srcs, sizes, 2, &attr, starts, 1, &failIndex);
    printf("device to device batch: %d, failIndex %zu\n", wrong, failIndex);

    /* Managed memory. */
    void *managed = NULL;
    CHECK(aclrtMemAllocManaged(&managed, MIB, ACL_RT_MEM_ATTACH_GLOBAL));
    memset(managed, 7, MIB);
    aclrtMemManagedLocation here = {ACL_MEM_LOCATIONTYPE_DEVICE, 0};
    CHECK(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION, here));
    CHECK(aclrtMemManagedPrefetchAsync(managed, 2 * MIB, here, 0, stream));
    CHECK(aclrtMemcpyAsync(dev[0], 256, managed, 256, ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(back, sizeof back, dev[0], sizeof back, ACL_MEMCPY_DEVICE_TO_HOST));
    aclrtPtrAttributes attributes;
    CHECK(aclrtPointerGetAttributes(managed, &attributes));
    printf("managed: type %d, copied %u\n", (int)attributes.location.type, back[255]);

    CHECK(aclrtFree(managed));
    CHECK(aclrtFree(dev[0]));
    CHECK(aclrtFree(dev[1]));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("memory flow ok\n");
    return 0;
}
