/*
 * The stream-ordered allocation flow: create a memory pool on device 0, allocate from it on a
 * stream, fill and read the memory back in stream order, return it with FreeAsync (no
 * synchronisation first), reuse it, synchronise (which gives idle memory back), and query the
 * memory's range and the device's memory use. tests/c_programs.rs compares the output byte
 * for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "acl/acl_rt_memory_soma.h"
#include "check.h"

enum { WORDS = 1024 };

static uint64_t attr(aclrtMemPool pool, aclrtMemPoolAttr which)
{
    uint64_t value = 0;
    if (aclrtMemPoolGetAttr(pool, which, &value) != ACL_SUCCESS) {
        return UINT64_MAX;
    }
    return value;
}

int main(void)
{
    aclrtContext context = NULL;
    aclrtStream stream = NULL;
    aclrtMemPool pool = NULL;
    void *ptrs[4] = {NULL, NULL, NULL, NULL};
    void *again = NULL, *base = NULL;
    size_t size = 0, count = 0;
    uint32_t *host = NULL;
    aclrtMemUsageInfo usage;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateContext(&context, 0));
    CHECK(aclrtCreateStream(&stream));

    aclrtMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    props.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    props.location.id = 0;
    props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    props.maxSize = (size_t)1 << 30;
    CHECK(aclrtMemPoolCreate(&pool, &props));

    for (int i = 0; i < 4; ++i) {
        CHECK(aclrtMemPoolMallocAsync(&ptrs[i], WORDS * sizeof(uint32_t), pool, stream));
    }
    CHECK(aclrtMallocHost((void **)&host, WORDS * sizeof(uint32_t)));
    for (int i = 0; i < 4; ++i) {
        CHECK(aclrtMemsetD32Async(ptrs[i], WORDS * sizeof(uint32_t), 0x1000u + (uint32_t)i, WORDS,
                                  stream));
    }
    CHECK(aclrtMemcpyAsync(host, WORDS * sizeof(uint32_t), ptrs[3], WORDS * sizeof(uint32_t),
                           ACL_MEMCPY_DEVICE_TO_HOST, stream));
    CHECK(aclrtMemGetAddressRange((char *)ptrs[2] + 10, &base, &size));
    printf("range of the third block: starts there %d, %zu bytes\n", base == ptrs[2], size);
    printf("reserved %llu, used %llu\n",
           (unsigned long long)attr(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
           (unsigned long long)attr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT));

    for (int i = 0; i < 4; ++i) {
        CHECK(aclrtMemPoolFreeAsync(ptrs[i], stream));
    }
    CHECK(aclrtMemPoolMallocAsync(&again, 16, pool, stream));
    printf("reused a returned block: %d\n", again == ptrs[0] || again == ptrs[1] ||
                                                again == ptrs[2] || again == ptrs[3]);
    CHECK(aclrtMemPoolFreeAsync(again, stream));
    CHECK(aclrtSynchronizeStream(stream));

    size_t wrong = 0;
    for (int i = 0; i < WORDS; ++i) {
        wrong += host[i] != 0x1003u;
    }
    printf("words read back: %d, wrong: %zu\n", WORDS, wrong);
    printf("after the synchronisation: reserved %llu, used high %llu\n",
           (unsigned long long)attr(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT),
           (unsigned long long)attr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH));
    CHECK(aclrtGetMemUsageInfo(0, &usage, 1, &count));
    printf("components: %zu, first: %s\n", count, usage.name);

    CHECK(aclrtMemPoolDestroy(pool));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtDestroyContext(context));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("pool flow ok\n");
    return 0;
}
