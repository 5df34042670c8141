/*
 * The API reference's virtual memory, stream-ordered pool, stream memory operation, notify and
 * pointer attribute chapters walked through the flows and edge cases they document: the
 * reserve / allocate / map / unmap / free / release sequence, what a mapping's size, offset and
 * flags must be, freeing physical memory that is still mapped, access descriptors (only
 * READWRITE, reserved bytes 0), one export per handle, the Atlas A2's unsupported options; a
 * pool's properties, attribute types, read-only counters and the release at synchronisation;
 * value writes and each wait comparison (GEQ compares as a signed difference); notify flags,
 * the shortest export key, record/wait pairing across streams; where a pointer lives.
 * Where the reference names no code only a failure is required. Prints a line for each mismatch,
 * then how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own headers),
 * which compares the output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "expect.h"
#include "memory_helpers.h"
#include "acl/acl_rt_memory_soma.h"

static aclrtMemAccessDesc access_of_device(int32_t device, aclrtMemAccessFlags flags)
{
    aclrtMemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.flags = flags;
    desc.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = (uint32_t)device;
    return desc;
}

/* ---- 11-04 virtual memory management ---- */

static int virtual_memory(aclrtStream stream)
{
    aclrtPhysicalMemProp prop = physical_prop(ACL_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    size_t minimum = 0, recommended = 0;
    EXPECT(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &minimum),
           ACL_SUCCESS);
    EXPECT(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                                            &recommended),
           ACL_SUCCESS);
    /* ACL_MEM_HUGE: "2M granularity"; the recommendation is a multiple of the minimum. */
    HOLDS(minimum == (2u << 20));
    HOLDS(recommended >= minimum && recommended % minimum == 0);
    size_t giant = 0;
    aclrtPhysicalMemProp prop1g = physical_prop(ACL_MEM_HUGE1G, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    EXPECT(aclrtMemGetAllocationGranularity(&prop1g, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &giant),
           ACL_SUCCESS);
    HOLDS(giant == (1u << 30));
    /* ACL_HBM_MEM_HUGE1G is supported on an Atlas A2, ACL_MEM_P2P_HUGE1G is not. */
    prop1g = physical_prop(ACL_HBM_MEM_HUGE1G, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    EXPECT(aclrtMemGetAllocationGranularity(&prop1g, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &giant),
           ACL_SUCCESS);
    prop1g = physical_prop(ACL_MEM_P2P_HUGE1G, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    FAILS(aclrtMemGetAllocationGranularity(&prop1g, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &giant));
    aclrtDrvMemHandle refused = NULL;
    FAILS(aclrtMallocPhysical(&refused, minimum, &prop1g, 0));
    /* flags "can only be 0". */
    FAILS(aclrtMallocPhysical(&refused, minimum, &prop, 1));
    HOLDS(refused == NULL);

    /* aclrtReserveMemAddress: size not 0, alignment only 0. */
    void *range = NULL;
    FAILS(aclrtReserveMemAddress(&range, 0, 0, NULL, 0));
    FAILS(aclrtReserveMemAddress(&range, 2 * minimum, minimum, NULL, 0));
    /* An expected address outside [16T, 24T) is refused. */
    FAILS(aclrtReserveMemAddress(&range, minimum, 0, (void *)(uintptr_t)(8ULL << 40), 0));
    /* One inside it, aligned to the size's power of two, is where the range goes. */
    void *expected = (void *)(uintptr_t)((16ULL << 40) + (64ULL << 20));
    EXPECT(aclrtReserveMemAddress(&range, minimum, 0, expected, 0), ACL_SUCCESS);
    HOLDS(range == expected);
    /* The same addresses again: taken. */
    void *again = NULL;
    FAILS(aclrtReserveMemAddress(&again, minimum, 0, expected, 0));
    /* Above 1 GiB the expected address must be 1 GiB aligned. */
    FAILS(aclrtReserveMemAddress(&again, (1ULL << 30) + minimum, 0,
                                 (void *)(uintptr_t)((17ULL << 40) + (512ULL << 20)), 0));
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);

    /* The seven-step flow: two physical allocations mapped side by side in one range. */
    EXPECT(aclrtReserveMemAddress(&range, 2 * minimum, 0, NULL, 0), ACL_SUCCESS);
    aclrtDrvMemHandle first = NULL, second = NULL;
    EXPECT(aclrtMallocPhysical(&first, minimum, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMallocPhysical(&second, minimum, &prop, 0), ACL_SUCCESS);
    char *base = range;
    /* The size must be aclrtMallocPhysical's, the offset 0, the flags 0. */
    FAILS(aclrtMapMem(base, 2 * minimum, 0, first, 0));
    FAILS(aclrtMapMem(base, minimum, 4096, first, 0));
    FAILS(aclrtMapMem(base, minimum, 0, first, 1));
    EXPECT(aclrtMapMem(base, minimum, 0, first, 0), ACL_SUCCESS);
    /* "Not necessarily the start": the second allocation mapped after the first. */
    EXPECT(aclrtMapMem(base + minimum, minimum, 0, second, 0), ACL_SUCCESS);
    /* Memory already mapped cannot be mapped over. */
    FAILS(aclrtMapMem(base, minimum, 0, second, 0));

    /* Device memory across both mappings: copy in, copy out. */
    size_t bytes = 2 * minimum;
    unsigned char *host = malloc(bytes);
    unsigned char *back = malloc(bytes);
    if (host == NULL || back == NULL) {
        printf("out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < bytes; ++i) {
        host[i] = (unsigned char)(i * 13 + 5);
    }
    EXPECT(aclrtMemcpy(base, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(base + minimum - 8, 16, 0x5A, 16, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    memset(host + minimum - 8, 0x5A, 16);
    EXPECT(aclrtMemcpy(back, bytes, base, bytes, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(memcmp(host, back, bytes) == 0);

    /* The block an address belongs to is its mapping. */
    void *block = NULL;
    size_t block_size = 0;
    EXPECT(aclrtMemGetAddressRange(base + minimum + 100, &block, &block_size), ACL_SUCCESS);
    HOLDS(block == base + minimum && block_size == minimum);

    /* Access: aclrtMapMem gives the memory's own device read and write. */
    aclrtMemLocation own = {0, ACL_MEM_LOCATION_TYPE_DEVICE};
    uint64_t flag = 0;
    EXPECT(aclrtMemGetAccess(base, &own, &flag), ACL_SUCCESS);
    HOLDS(flag == ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    /* The host's location id is ignored. */
    aclrtMemLocation host_location = {7, ACL_MEM_LOCATION_TYPE_HOST};
    EXPECT(aclrtMemGetAccess(base, &host_location, &flag), ACL_SUCCESS);
    /* aclrtMemSetAccess takes the mapping's own virPtr and size. */
    aclrtMemAccessDesc desc = access_of_device(1, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    EXPECT(aclrtMemSetAccess(base, minimum, &desc, 1), ACL_SUCCESS);
    aclrtMemLocation peer = {1, ACL_MEM_LOCATION_TYPE_DEVICE};
    EXPECT(aclrtMemGetAccess(base, &peer, &flag), ACL_SUCCESS);
    HOLDS(flag == ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    FAILS(aclrtMemSetAccess(base, 2 * minimum, &desc, 1));
    /* Only READWRITE is supported, and the reserved bytes are 0. */
    desc = access_of_device(1, ACL_RT_MEM_ACCESS_FLAGS_READ);
    FAILS(aclrtMemSetAccess(base, minimum, &desc, 1));
    desc = access_of_device(1, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    desc.rsv[3] = 1;
    FAILS(aclrtMemSetAccess(base, minimum, &desc, 1));

    /* The properties a handle was allocated with. */
    aclrtPhysicalMemProp got;
    memset(&got, 0xFF, sizeof got);
    EXPECT(aclrtMemGetAllocationPropertiesFromHandle(second, &got), ACL_SUCCESS);
    HOLDS(got.memAttr == ACL_MEM_HUGE && got.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
          got.location.id == 0 && got.allocationType == ACL_MEM_ALLOCATION_TYPE_PINNED);
    /* The driver CANN 8.5 ships with predates aclrtMemRetainAllocationHandle (26.0.RC1). */
    aclrtDrvMemHandle retained = NULL;
    EXPECT(aclrtMemRetainAllocationHandle(base, &retained), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    /* One export per handle; an import is for another process. */
    uint64_t shareable = 0, twice = 0;
    EXPECT(aclrtMemExportToShareableHandle(first, ACL_MEM_HANDLE_TYPE_NONE,
                                           ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &shareable),
           ACL_SUCCESS);
    FAILS(aclrtMemExportToShareableHandle(first, ACL_MEM_HANDLE_TYPE_NONE,
                                          ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &twice));
    int32_t pid = 0;
    EXPECT(aclrtDeviceGetBareTgid(&pid), ACL_SUCCESS);
    EXPECT(aclrtMemSetPidToShareableHandle(shareable, &pid, 1), ACL_SUCCESS);
    aclrtDrvMemHandle imported = NULL;
    FAILS(aclrtMemImportFromShareableHandle(shareable, 0, &imported));

    /* Freeing mapped physical memory frees it at the unmap: the data stays reachable. */
    EXPECT(aclrtFreePhysical(second), ACL_SUCCESS);
    memset(back, 0, bytes);
    EXPECT(aclrtMemcpy(back, minimum, base + minimum, minimum, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(memcmp(host + minimum, back, minimum) == 0);
    /* A range with mappings left cannot be released. */
    FAILS(aclrtReleaseMemAddress(range));
    EXPECT(aclrtUnmapMem(base + minimum), ACL_SUCCESS);
    EXPECT(aclrtUnmapMem(base), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(first), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);

    /* aclrtMemMapNoAccess maps without access until aclrtMemSetAccess grants it. */
    EXPECT(aclrtReserveMemAddress(&range, minimum, 0, NULL, 0), ACL_SUCCESS);
    EXPECT(aclrtMallocPhysical(&first, minimum, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMemMapNoAccess(range, minimum, 0, first, 0), ACL_SUCCESS);
    EXPECT(aclrtMemGetAccess(range, &own, &flag), ACL_SUCCESS);
    HOLDS(flag == ACL_RT_MEM_ACCESS_FLAGS_NONE);
    desc = access_of_device(0, ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    EXPECT(aclrtMemSetAccess(range, minimum, &desc, 1), ACL_SUCCESS);
    EXPECT(aclrtMemGetAccess(range, &own, &flag), ACL_SUCCESS);
    HOLDS(flag == ACL_RT_MEM_ACCESS_FLAGS_READWRITE);
    EXPECT(aclrtUnmapMem(range), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(first), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);

    /* Not supported on an Atlas A2. */
    EXPECT(aclrtReserveMemAddressNoUCMemory(&range, 1ULL << 30, 0,
                                            (void *)(uintptr_t)(64ULL << 40), 0),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    free(host);
    free(back);
    return 0;
}

/* ---- 11-10 stream-ordered memory allocation ---- */

static aclrtMemPoolProps pool_props(void)
{
    aclrtMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    props.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    props.maxSize = 64u << 20;
    return props;
}

static void pool_attributes(aclrtMemPool pool)
{
    uint64_t value = 123;
    /* Not set: the default RELEASE_THRESHOLD is 0. */
    EXPECT(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    /* The last setting counts. */
    value = 1u << 20;
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value), ACL_SUCCESS);
    value = 0;
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value), ACL_SUCCESS);
    value = 99;
    EXPECT(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value), ACL_SUCCESS);
    HOLDS(value == 0);
    /* Reuse switches are uint32_t 0 or 1. */
    uint32_t on = 1, off = 0, two = 2;
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC, &off), ACL_SUCCESS);
    uint32_t read = 7;
    EXPECT(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC, &read), ACL_SUCCESS);
    HOLDS(read == 0);
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC, &on), ACL_SUCCESS);
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES, &two));
    /* The CURRENT counters are read-only; a HIGH mark can only be set to 0. */
    value = 0;
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT, &value));
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, &value));
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH, &value), ACL_SUCCESS);
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH, &value), ACL_SUCCESS);
    value = 1;
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH, &value));
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH, &value));
}

static uint64_t pool_counter(aclrtMemPool pool, aclrtMemPoolAttr attr)
{
    uint64_t value = UINT64_MAX;
    EXPECT(aclrtMemPoolGetAttr(pool, attr, &value), ACL_SUCCESS);
    return value;
}

static int pools(aclrtStream stream)
{
    aclrtMemPool pool = NULL;
    aclrtMemPoolProps props = pool_props();
    /* Only pinned device memory; the reserved bytes must be all 0. */
    props.reserved[31] = 1;
    FAILS(aclrtMemPoolCreate(&pool, &props));
    props = pool_props();
    props.location.type = ACL_MEM_LOCATION_TYPE_HOST;
    FAILS(aclrtMemPoolCreate(&pool, &props));
    HOLDS(pool == NULL);
    props = pool_props();
    EXPECT(aclrtMemPoolCreate(&pool, &props), ACL_SUCCESS);
    pool_attributes(pool);

    /* "size must be greater than 0". */
    void *ptr = NULL;
    FAILS(aclrtMemPoolMallocAsync(&ptr, 0, pool, stream));
    void *a = NULL, *b = NULL;
    EXPECT(aclrtMemPoolMallocAsync(&a, 4096, pool, stream), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&b, 1u << 20, pool, stream), ACL_SUCCESS);
    HOLDS(a != NULL && b != NULL && a != b);
    uint64_t used = pool_counter(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT);
    uint64_t reserved = pool_counter(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT);
    HOLDS(used >= 4096 + (1u << 20) && reserved >= used);
    /* The memory is device memory the stream's tasks can use. */
    EXPECT(aclrtMemsetAsync(b, 1u << 20, 0x3C, 1u << 20, stream), ACL_SUCCESS);
    unsigned char probe[16] = {0};
    EXPECT(aclrtMemcpyAsync(probe, sizeof probe, (char *)b + 1000, sizeof probe,
                            ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(a, stream), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(b, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(probe[0] == 0x3C && probe[15] == 0x3C);
    /* Everything returned; with the threshold at 0 the synchronisation released it all. */
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT) == 0);
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    /* The marks remember the peak until set to 0. */
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH) >= used);
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH) >= reserved);

    /* A threshold keeps idle memory past the synchronisation; aclrtMemPoolTrimTo takes
     * precedence over it. */
    uint64_t threshold = 64u << 20;
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &threshold),
           ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&a, 1u << 20, pool, stream), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(a, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) >= (1u << 20));
    /* Returned memory is reused. */
    void *reused = NULL;
    EXPECT(aclrtMemPoolMallocAsync(&reused, 1u << 20, pool, stream), ACL_SUCCESS);
    HOLDS(reused == a);
    EXPECT(aclrtMemPoolFreeAsync(reused, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemPoolTrimTo(pool, 0), ACL_SUCCESS);
    HOLDS(pool_counter(pool, ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    /* Pool memory is freed only by aclrtMemPoolFreeAsync, once. */
    EXPECT(aclrtMemPoolMallocAsync(&a, 256, pool, stream), ACL_SUCCESS);
    FAILS(aclrtFree(a));
    EXPECT(aclrtMemPoolFreeAsync(a, stream), ACL_SUCCESS);
    FAILS(aclrtMemPoolFreeAsync(a, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemPoolDestroy(pool), ACL_SUCCESS);
    return 0;
}

/* ---- 11-09 stream memory operations ---- */

static void value_wait_case(aclrtStream waiter, aclrtStream writer, uint64_t *word,
                            uint64_t before, uint64_t after, uint64_t value, uint32_t flag,
                            const char *what)
{
    /* The word holds `before`, which does not satisfy the wait; `after` does. */
    EXPECT(aclrtValueWrite(word, before, 0, writer), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(writer), ACL_SUCCESS);
    uint64_t *mark = word + 1;
    EXPECT(aclrtValueWait(word, value, flag, waiter), ACL_SUCCESS);
    EXPECT(aclrtValueWrite(mark, 1, 0, waiter), ACL_SUCCESS);
    /* The wait holds the waiter: its mark is not written yet. */
    EXPECT(aclrtValueWrite(mark, 0, 0, writer), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(writer), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_COMPLETE;
    EXPECT(aclrtStreamQuery(waiter, &status), ACL_SUCCESS);
    ++g_checked;
    if (status != ACL_STREAM_STATUS_NOT_READY) {
        ++g_wrong;
        printf("%s: the wait was satisfied by %llu\n", what, (unsigned long long)before);
    }
    EXPECT(aclrtValueWrite(word, after, 0, writer), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(waiter), ACL_SUCCESS);
    uint64_t seen = 0;
    EXPECT(aclrtMemcpy(&seen, sizeof seen, mark, sizeof seen, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    ++g_checked;
    if (seen != 1) {
        ++g_wrong;
        printf("%s: the waiter did not go on after %llu\n", what, (unsigned long long)after);
    }
}

static int stream_memory(aclrtStream waiter, aclrtStream writer)
{
    uint64_t *words = NULL;
    EXPECT(aclrtMalloc((void **)&words, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    /* flag of a write "fixed at 0"; devAddr 8-byte aligned; NULL stream = the default one. */
    FAILS(aclrtValueWrite(words, 1, 1, writer));
    FAILS(aclrtValueWrite((char *)words + 4, 1, 0, writer));
    EXPECT(aclrtValueWrite(words, 42, 0, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    uint64_t seen = 0;
    EXPECT(aclrtMemcpy(&seen, sizeof seen, words, sizeof seen, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(seen == 42);
    /* A wait on the default stream, already satisfied. */
    EXPECT(aclrtValueWait(words, 42, ACL_STREAM_WAIT_VALUE_EQ, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    /* Only the four comparisons. */
    FAILS(aclrtValueWait(words, 0, 4, waiter));

    /* GEQ: (int64_t)(*devAddr - value) >= 0, a signed difference, so 1 is "past" 2^64 - 1. */
    value_wait_case(waiter, writer, words, 4, 5, 5, ACL_STREAM_WAIT_VALUE_GEQ, "GEQ 5");
    value_wait_case(waiter, writer, words, UINT64_MAX - 1, 1, UINT64_MAX,
                    ACL_STREAM_WAIT_VALUE_GEQ, "GEQ across the wrap");
    value_wait_case(waiter, writer, words, 6, 7, 7, ACL_STREAM_WAIT_VALUE_EQ, "EQ 7");
    value_wait_case(waiter, writer, words, 0x0F, 0x10, 0xF0, ACL_STREAM_WAIT_VALUE_AND, "AND");
    /* NOR: ~(*devAddr | value) != 0. */
    value_wait_case(waiter, writer, words, UINT64_MAX, 0, 0xFF, ACL_STREAM_WAIT_VALUE_NOR, "NOR");
    EXPECT(aclrtFree(words), ACL_SUCCESS);
    return 0;
}

/* ---- 08 notify management ---- */

static int notifies(aclrtStream first, aclrtStream second)
{
    aclrtNotify notify = NULL, device_only = NULL, refused = NULL;
    EXPECT(aclrtCreateNotify(&notify, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtCreateNotify(&device_only, ACL_NOTIFY_DEVICE_USE_ONLY), ACL_SUCCESS);
    FAILS(aclrtCreateNotify(&refused, 2));
    HOLDS(refused == NULL);
    uint32_t id = UINT32_MAX, other = UINT32_MAX;
    EXPECT(aclrtGetNotifyId(notify, &id), ACL_SUCCESS);
    EXPECT(aclrtGetNotifyId(device_only, &other), ACL_SUCCESS);
    HOLDS(id != other);

    /* Stream 2 waits for stream 1: record on the first, wait and reset on the second. */
    uint64_t *word = NULL;
    EXPECT(aclrtMalloc((void **)&word, 8, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtValueWrite(word, 0, 0, first), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);
    /* The first stream is held by a value wait, so its record comes later. */
    EXPECT(aclrtValueWait(word, 1, ACL_STREAM_WAIT_VALUE_EQ, first), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(notify, first), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(notify, second, 0), ACL_SUCCESS);
    EXPECT(aclrtValueWrite(word, 2, 0, second), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_COMPLETE;
    EXPECT(aclrtStreamQuery(second, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    /* Release the first stream from the host's copy: the record lets the second go on. */
    uint64_t one = 1;
    EXPECT(aclrtMemcpy(word, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);
    uint64_t seen = 0;
    EXPECT(aclrtMemcpy(&seen, 8, word, 8, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(seen == 2);
    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);

    /* A record nobody waited for is cleared by a batch reset. */
    EXPECT(aclrtRecordNotify(notify, first), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);
    aclrtNotify batch[1] = {notify};
    EXPECT(aclrtNotifyBatchReset(batch, 1), ACL_SUCCESS);

    /* The shortest key buffer is 65 bytes; the export flags are DEFAULT and 0x2. */
    char key[65];
    FAILS(aclrtNotifyGetExportKey(notify, key, 64, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));
    EXPECT(aclrtNotifyGetExportKey(notify, key, sizeof key,
                                   ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION),
           ACL_SUCCESS);
    HOLDS(memchr(key, '\0', sizeof key) != NULL);
    aclrtServerPid server;
    memset(&server, 0, sizeof server);
    /* Only Atlas A3 supernodes set a whitelist across servers. */
    EXPECT(aclrtNotifySetImportPidInterServer(notify, &server, 1),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    EXPECT(aclrtDestroyNotify(device_only), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(notify), ACL_SUCCESS);
    EXPECT(aclrtFree(word), ACL_SUCCESS);
    return 0;
}

/* ---- 11-05 where a pointer lives ---- */

static int pointer_attributes(void)
{
    void *device = NULL, *pinned = NULL;
    EXPECT(aclrtMalloc(&device, 4096, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
    int on_stack = 0;
    aclrtPtrAttributes attributes;
    memset(&attributes, 0xFF, sizeof attributes);
    EXPECT(aclrtPointerGetAttributes(device, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
          attributes.location.id == 0 && attributes.pageSize != 0);
    EXPECT(aclrtPointerGetAttributes(pinned, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_HOST);
    EXPECT(aclrtPointerGetAttributes(&on_stack, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_UNREGISTERED);
    void *managed = NULL;
    EXPECT(aclrtMemAllocManaged(&managed, 4096, ACL_RT_MEM_ATTACH_GLOBAL), ACL_SUCCESS);
    EXPECT(aclrtPointerGetAttributes(managed, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_MANAGED);
    EXPECT(aclrtFree(managed), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(device), ACL_SUCCESS);
    return 0;
}

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    aclrtStream first = NULL, second = NULL;
    CHECK(aclrtCreateStream(&first));
    CHECK(aclrtCreateStream(&second));
    if (virtual_memory(first) != 0 || pools(first) != 0 || stream_memory(first, second) != 0 ||
        notifies(first, second) != 0 || pointer_attributes() != 0) {
        return 1;
    }
    CHECK(aclrtDestroyStream(second));
    CHECK(aclrtDestroyStream(first));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
