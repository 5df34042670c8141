/*
 * The newer copy and cache functions from C, as a CANN sample uses them: a batch copy without
 * failIndex, a prefetch, a copy through a memcpy descriptor in device memory, a copy through
 * base pointers held in device memory, and the advice a managed range reports back.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

enum { N = 1024 };

int main(void)
{
    static uint8_t host[N], back[N];
    void *src = NULL, *dst = NULL, *desc = NULL, *bases = NULL;
    aclrtStream stream = NULL;

    for (int i = 0; i < N; ++i) {
        host[i] = (uint8_t)(i * 7);
    }
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMallocForTaskScheduler(&src, N, ACL_MEM_MALLOC_HUGE_FIRST, NULL));
    CHECK(aclrtMalloc(&dst, N, ACL_MEM_MALLOC_HUGE_FIRST));

    /* Host to device as a batch of two halves, one attribute for both. */
    void *dsts[] = { src, (uint8_t *)src + N / 2 };
    void *srcs[] = { host, host + N / 2 };
    size_t sizes[] = { N / 2, N / 2 }, maxs[] = { N / 2, N / 2 }, starts[] = { 0 };
    aclrtMemcpyBatchAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.srcLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    attr.dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    attr.dstLoc.id = 0;
    CHECK(aclrtMemcpyBatchV2(dsts, maxs, srcs, sizes, 2, &attr, starts, 1));
    CHECK(aclrtCmoAsync(src, N, ACL_RT_CMO_TYPE_PREFETCH, stream));

    /* Device to device through a descriptor: the first half of src to dst. */
    size_t descSize = 0;
    CHECK(aclrtGetMemcpyDescSize(ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, &descSize));
    CHECK(aclrtMalloc(&desc, descSize, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, N / 2, NULL));
    CHECK(aclrtMemcpyAsyncWithDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream));

    /* The second half through base pointers held in device memory, plus offsets. */
    void *pointers[2] = { dst, src };
    CHECK(aclrtMalloc(&bases, sizeof pointers, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(bases, sizeof pointers, pointers, sizeof pointers, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpyAsyncWithOffset((void **)bases, N / 2, N / 2, (const void **)((void **)bases + 1),
                                     N / 2, N / 2, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(back, N, dst, N, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("descriptor and offset copies: %s\n", memcmp(back, host, N) == 0 ? "match" : "differ");

    /* Advice a managed range reports back. */
    void *managed = NULL;
    int32_t readMostly = -1, preferred = -1;
    aclrtMemManagedLocation device0 = { ACL_MEM_LOCATIONTYPE_DEVICE, 0 };
    CHECK(aclrtMemAllocManaged(&managed, 2 << 20, ACL_RT_MEM_ATTACH_GLOBAL));
    CHECK(aclrtMemManagedAdvise(managed, 2 << 20, ACL_MEM_ADVISE_SET_READ_MOSTLY, device0));
    CHECK(aclrtMemManagedAdvise(managed, 2 << 20, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION, device0));
    CHECK(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 2 << 20, &readMostly,
                                 sizeof readMostly));
    CHECK(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 2 << 20, &preferred,
                                 sizeof preferred));
    printf("managed: read mostly %d, preferred location %d\n", readMostly, preferred);

    CHECK(aclrtFree(managed));
    CHECK(aclrtFree(bases));
    CHECK(aclrtFree(desc));
    CHECK(aclrtFree(dst));
    CHECK(aclrtFree(src));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    printf("copy flow ok\n");
    return 0;
}
