/*
 * The device memory, host memory and copy chapters' functions that no other *_chapter_edges.c
 * program calls, walked through what the API reference documents for them: aclrtMallocAlign32
 * rounding to 32 bytes without aclrtMalloc's 32 more, a rule outside the policy choosing the
 * pages by size, the configured allocations, memory type checks, the memory usage report,
 * cache flushes that need a size, pinned memory with a configuration and its synchronising
 * free, the host-memory mapping capabilities, descriptor and offset copies (inner device to
 * device only), the deprecated conditional copy and the batched copies without a fail index.
 * Where the reference names no code only a failure is required. Prints a line for each
 * mismatch, then how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own
 * headers), which compares the output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "expect.h"
#include "memory_helpers.h"

/* aclrtMemcpyAsyncWithCondition is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define MIB ((size_t)1 << 20)

/* The bytes the runtime reserved for the allocation holding `ptr` (0 if none). */
static size_t reserved(void *ptr)
{
    void *base = NULL;
    size_t size = 0;
    if (aclrtMemGetAddressRange(ptr, &base, &size) != ACL_SUCCESS || base != ptr) {
        (void)aclGetRecentErrMsg();
        return 0;
    }
    return size;
}

static int allocations(void)
{
    void *aligned = NULL, *plain = NULL, *configured = NULL, *scheduler = NULL;
    /* Align32 rounds up to 32 bytes, where aclrtMalloc adds 32 more on an Atlas A2. */
    EXPECT(aclrtMallocAlign32(&aligned, 100, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&plain, 100, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    HOLDS(reserved(aligned) == 128);
    HOLDS(reserved(plain) == 160);
    HOLDS(((uintptr_t)aligned & 63) == 0 && ((uintptr_t)plain & 63) == 0);
    EXPECT(aclrtFree(aligned), ACL_SUCCESS);
    EXPECT(aclrtFree(plain), ACL_SUCCESS);
    aligned = NULL;
    EXPECT(aclrtMallocAlign32(&aligned, 0, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocAlign32(NULL, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_ERROR_INVALID_PARAM);
    HOLDS(aligned == NULL);

    /* A rule outside the policy: huge pages from 2 MiB on, normal pages below. Align32 takes
     * a single enumerator, so a rule or-ed with a band-width bit is such a rule. */
    const aclrtMemMallocPolicy outside = (aclrtMemMallocPolicy)0x77;
    const aclrtMemMallocPolicy ored =
        (aclrtMemMallocPolicy)(ACL_MEM_MALLOC_HUGE_ONLY | ACL_MEM_TYPE_HIGH_BAND_WIDTH);
    void *small = NULL, *large = NULL;
    EXPECT(aclrtMallocAlign32(&small, 64, outside), ACL_SUCCESS);
    EXPECT(aclrtMallocAlign32(&large, 2 * MIB, outside), ACL_SUCCESS);
    HOLDS(page_size_of(small) < 2 * MIB && page_size_of(large) == 2 * MIB);
    EXPECT(aclrtFree(small), ACL_SUCCESS);
    EXPECT(aclrtFree(large), ACL_SUCCESS);
    EXPECT(aclrtMallocAlign32(&small, 64, ored), ACL_SUCCESS);
    HOLDS(page_size_of(small) < 2 * MIB);
    EXPECT(aclrtFree(small), ACL_SUCCESS);

    /* The configured forms accept or-ed groups, the rule deciding; NULL cfg is none. */
    EXPECT(aclrtMallocWithCfg(&configured, 64, ored, NULL), ACL_SUCCESS);
    HOLDS(page_size_of(configured) == 2 * MIB);
    EXPECT(aclrtFree(configured), ACL_SUCCESS);
    aclrtMallocConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.attrs = NULL;
    cfg.numAttrs = 1;
    EXPECT(aclrtMallocWithCfg(&configured, 64, ACL_MEM_MALLOC_NORMAL_ONLY, &cfg),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocWithCfg(NULL, 64, ACL_MEM_MALLOC_NORMAL_ONLY, &cfg),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocWithCfg(&configured, 0, ACL_MEM_MALLOC_NORMAL_ONLY, NULL),
           ACL_ERROR_INVALID_PARAM);
    cfg.numAttrs = 0;
    EXPECT(aclrtMallocWithCfg(&configured, 100, ACL_MEM_MALLOC_NORMAL_ONLY, &cfg), ACL_SUCCESS);
    HOLDS(reserved(configured) == 160);
    EXPECT(aclrtFree(configured), ACL_SUCCESS);
    EXPECT(aclrtMallocForTaskScheduler(&scheduler, 0, ACL_MEM_MALLOC_NORMAL_ONLY, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocForTaskScheduler(NULL, 64, ACL_MEM_MALLOC_NORMAL_ONLY, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocForTaskScheduler(&scheduler, 64, ACL_MEM_MALLOC_NORMAL_ONLY, NULL),
           ACL_SUCCESS);
    HOLDS(scheduler != NULL && ((uintptr_t)scheduler & 63) == 0);
    EXPECT(aclrtFree(scheduler), ACL_SUCCESS);

    /* Cache maintenance needs a size and a pointer; it is not needed on this version. */
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_NORMAL_ONLY));
    EXPECT(aclrtMemFlush(dev, 4096), ACL_SUCCESS);
    EXPECT(aclrtMemInvalidate(dev, 4096), ACL_SUCCESS);
    EXPECT(aclrtMemFlush(dev, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemInvalidate(dev, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemFlush(NULL, 4096), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemInvalidate(NULL, 4096), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtFree(dev));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

static int memory_types_and_usage(void)
{
    void *dev = NULL, *virt = NULL;
    CHECK(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtReserveMemAddress(&virt, 2 * MIB, 0, NULL, 0));
    char host[16];
    uint32_t result = 7;
    void *devs[1] = {dev};
    void *both[2] = {dev, virt};
    void *with_host[2] = {dev, host};
    EXPECT(aclrtCheckMemType(devs, 1, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_SUCCESS);
    HOLDS(result == 1);
    EXPECT(aclrtCheckMemType(both, 2, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_SUCCESS);
    HOLDS(result == 0);
    /* Several kinds in one list: memType or-s them. */
    EXPECT(aclrtCheckMemType(both, 2, ACL_RT_MEM_TYPE_DEV | ACL_RT_MEM_TYPE_RSVD, &result, 0),
           ACL_SUCCESS);
    HOLDS(result == 1);
    EXPECT(aclrtCheckMemType(with_host, 2, ACL_RT_MEM_TYPE_DEV | ACL_RT_MEM_TYPE_DVPP, &result,
                             0),
           ACL_SUCCESS);
    HOLDS(result == 0);
    result = 7;
    EXPECT(aclrtCheckMemType(devs, 1, ACL_RT_MEM_TYPE_DEV, &result, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCheckMemType(devs, 0, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCheckMemType(NULL, 1, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCheckMemType(devs, 1, ACL_RT_MEM_TYPE_DEV, NULL, 0), ACL_ERROR_INVALID_PARAM);
    HOLDS(result == 7);

    /* The components' use, largest first, as many as asked for and there are. */
    aclrtMemUsageInfo usage[4];
    memset(usage, 0, sizeof usage);
    size_t count = 99;
    EXPECT(aclrtGetMemUsageInfo(0, usage, 4, &count), ACL_SUCCESS);
    HOLDS(count >= 1 && count <= 4);
    int sorted = 1;
    for (size_t i = 1; i < count && i < 4; ++i) {
        sorted &= usage[i - 1].curMemSize >= usage[i].curMemSize;
    }
    HOLDS(sorted);
    HOLDS(usage[0].curMemSize >= 4096 && usage[0].memPeakSize >= usage[0].curMemSize);
    size_t one = 99;
    EXPECT(aclrtGetMemUsageInfo(0, usage, 1, &one), ACL_SUCCESS);
    HOLDS(one == 1);
    EXPECT(aclrtGetMemUsageInfo(0, NULL, 4, &count), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetMemUsageInfo(0, usage, 4, NULL), ACL_ERROR_INVALID_PARAM);
    count = 77;
    usage[0].curMemSize = 77;
    EXPECT(aclrtGetMemUsageInfo(99, usage, 4, &count), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetMemUsageInfo(0, usage, 0, &count), ACL_ERROR_INVALID_PARAM);
    HOLDS(count == 77 && usage[0].curMemSize == 77);
    CHECK(aclrtReleaseMemAddress(virt));
    CHECK(aclrtFree(dev));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

static int host_memory(aclrtStream stream)
{
    void *pinned = NULL;
    EXPECT(aclrtMallocHostWithCfg(&pinned, 0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocHostWithCfg(NULL, 64, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocHostWithCfg(&pinned, 100, NULL), ACL_SUCCESS);
    HOLDS(pinned != NULL && ((uintptr_t)pinned & 63) == 0);
    /* Pinned memory: a copy from it is asynchronous, and the synchronising free waits for it. */
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_NORMAL_ONLY));
    memset(pinned, 0x3c, 100);
    EXPECT(aclrtMemcpyAsync(dev, 100, pinned, 100, ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtFreeHostWithDevSync(pinned), ACL_SUCCESS);
    unsigned char back = 0;
    CHECK(aclrtMemcpy(&back, 1, (char *)dev + 99, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(back == 0x3c);
    FAILS(aclrtFreeHostWithDevSync(pinned));
    EXPECT(aclrtFreeHostWithDevSync(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtFree(dev));

    /* VA consistency (an Atlas A2 has it): registered, the memory keeps its address for the
     * device. vaFlag is 0 or 1. */
    aclrtMallocAttribute va;
    memset(&va, 0, sizeof va);
    va.attr = ACL_RT_MEM_ATTR_VA_FLAG;
    va.value.vaFlag = 1;
    aclrtMallocConfig cfg = {&va, 1};
    void *consistent = NULL, *mapped = NULL;
    EXPECT(aclrtMallocHostWithCfg(&consistent, 8192, &cfg), ACL_SUCCESS);
    EXPECT(aclrtHostRegister(consistent, 8192, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_SUCCESS);
    HOLDS(mapped == consistent);
    EXPECT(aclrtHostUnregister(consistent), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(consistent), ACL_SUCCESS);
    va.value.vaFlag = 2;
    consistent = NULL;
    FAILS(aclrtMallocHostWithCfg(&consistent, 8192, &cfg));
    HOLDS(consistent == NULL);

    /* Which hardware accelerators reach registered host memory. */
    aclrtHostMemMapCapability capability = (aclrtHostMemMapCapability)7;
    EXPECT(aclrtHostMemMapCapabilities(0, ACL_RT_HAC_TYPE_AIC, &capability), ACL_SUCCESS);
    HOLDS(capability == ACL_RT_HOST_MEM_MAP_SUPPORTED ||
          capability == ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED);
    capability = (aclrtHostMemMapCapability)7;
    EXPECT(aclrtHostMemMapCapabilities(0, ACL_RT_HAC_TYPE_AIC, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtHostMemMapCapabilities(0, (aclrtHacType)42, &capability));
    EXPECT(aclrtHostMemMapCapabilities(99, ACL_RT_HAC_TYPE_AIC, &capability),
           ACL_ERROR_RT_INVALID_DEVICEID);
    /* The engine type is a value: checked before the device is looked up. */
    FAILS(aclrtHostMemMapCapabilities(99, (aclrtHacType)42, &capability));
    HOLDS(capability == (aclrtHostMemMapCapability)7);
    /* The simulator's answer for an Atlas A2 (the reference lists none per product). */
    const aclrtHacType reach[] = {ACL_RT_HAC_TYPE_STARS, ACL_RT_HAC_TYPE_AICPU,
                                  ACL_RT_HAC_TYPE_AIC,   ACL_RT_HAC_TYPE_AIV,
                                  ACL_RT_HAC_TYPE_PCIEDMA, ACL_RT_HAC_TYPE_SDMA};
    const aclrtHacType cannot[] = {ACL_RT_HAC_TYPE_RDMA, ACL_RT_HAC_TYPE_DVPP,
                                   ACL_RT_HAC_TYPE_UDMA, ACL_RT_HAC_TYPE_CCU};
    for (size_t i = 0; i < sizeof reach / sizeof reach[0]; ++i) {
        EXPECT(aclrtHostMemMapCapabilities(0, reach[i], &capability), ACL_SUCCESS);
        HOLDS(capability == ACL_RT_HOST_MEM_MAP_SUPPORTED);
    }
    for (size_t i = 0; i < sizeof cannot / sizeof cannot[0]; ++i) {
        EXPECT(aclrtHostMemMapCapabilities(0, cannot[i], &capability), ACL_SUCCESS);
        HOLDS(capability == ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED);
    }
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

static int indirect_copies(aclrtStream stream)
{
    size_t desc_size = 0;
    EXPECT(aclrtGetMemcpyDescSize(ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, &desc_size), ACL_SUCCESS);
    HOLDS(desc_size > 0);
    size_t other = 5;
    EXPECT(aclrtGetMemcpyDescSize(ACL_MEMCPY_HOST_TO_DEVICE, &other),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetMemcpyDescSize(ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetMemcpyDescSize((aclrtMemcpyKind)99, &other), ACL_ERROR_INVALID_PARAM);
    HOLDS(other == 5);

    uint8_t *src = NULL, *dst = NULL;
    void *desc = NULL;
    CHECK(aclrtMalloc((void **)&src, 256, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMalloc((void **)&dst, 256, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMalloc(&desc, desc_size, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMemset(src, 256, 0x11, 256));
    CHECK(aclrtMemset(dst, 256, 0, 256));
    int config = 0;
    EXPECT(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 64, &config),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetMemcpyDesc(NULL, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 64, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_DEVICE_TO_DEVICE, src, dst, 64, NULL),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 64, NULL),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithDesc(desc, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpyAsyncWithDesc(NULL, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyAsyncWithDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    uint8_t host[2] = {0, 0};
    CHECK(aclrtMemcpy(&host[0], 1, dst + 63, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclrtMemcpy(&host[1], 1, dst + 64, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(host[0] == 0x11 && host[1] == 0);

    /* Offsets from base addresses the device reads from two slots of its memory. */
    void **slots = NULL;
    CHECK(aclrtMalloc((void **)&slots, 2 * sizeof(void *), ACL_MEM_MALLOC_NORMAL_ONLY));
    void *bases[2] = {dst, src};
    CHECK(aclrtMemcpy(slots, sizeof bases, bases, sizeof bases, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemset(src + 128, 16, 0x22, 16));
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 16, 200, (const void **)&slots[1], 16, 128,
                                      ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 8, 200, (const void **)&slots[1], 16, 128,
                                      ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 16, 200, (const void **)&slots[1], 16, 128,
                                      ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    /* destMax and count precede the kind, as aclrtMemcpyAsync checks them before its kind. */
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 8, 200, (const void **)&slots[1], 16, 128,
                                      ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsync(dst, 8, src, 16, ACL_MEMCPY_HOST_TO_HOST, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 8, 200, (const void **)&slots[1], 16, 128,
                                      (aclrtMemcpyKind)99, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    CHECK(aclrtMemcpy(&host[0], 1, dst + 200, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclrtMemcpy(&host[1], 1, dst + 216, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(host[0] == 0x22 && host[1] == 0);

    /* The deprecated conditional copy is aclrtMemcpyAsync. */
    EXPECT(aclrtMemcpyAsyncWithCondition(dst, 256, src, 256, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithCondition(dst, 8, src, 16, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsyncWithCondition(NULL, 8, src, 8, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    CHECK(aclrtMemcpy(&host[0], 1, dst + 200, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(host[0] == 0x11);
    CHECK(aclrtFree(slots));
    CHECK(aclrtFree(desc));
    CHECK(aclrtFree(dst));
    CHECK(aclrtFree(src));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

static aclrtMemcpyBatchAttr batch_attr(int to_device)
{
    aclrtMemcpyBatchAttr attr;
    memset(&attr, 0, sizeof attr);
    aclrtMemLocation device = {0, ACL_MEM_LOCATION_TYPE_DEVICE};
    aclrtMemLocation host = {0, ACL_MEM_LOCATION_TYPE_HOST};
    attr.dstLoc = to_device ? device : host;
    attr.srcLoc = to_device ? host : device;
    return attr;
}

static int batch_copies(aclrtStream stream)
{
    uint8_t *dev = NULL;
    CHECK(aclrtMalloc((void **)&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    uint8_t in[2][8], out[2][8];
    memset(in[0], 1, 8);
    memset(in[1], 2, 8);
    memset(out, 0, sizeof out);
    void *dsts[2] = {dev, dev + 8};
    void *srcs[2] = {in[0], in[1]};
    size_t maxes[2] = {8, 8};
    size_t sizes[2] = {8, 8};
    aclrtMemcpyBatchAttr attrs[2] = {batch_attr(1), batch_attr(0)};
    size_t indexes[2] = {0, 1};
    EXPECT(aclrtMemcpyBatchV2(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1), ACL_SUCCESS);
    void *back_dsts[2] = {out[0], out[1]};
    void *back_srcs[2] = {dev, dev + 8};
    aclrtMemcpyBatchAttr back[1] = {batch_attr(0)};
    EXPECT(aclrtMemcpyBatchAsyncV2(back_dsts, maxes, back_srcs, sizes, 2, back, indexes, 1,
                                   stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(out[0][7] == 1 && out[1][0] == 2);
    /* One direction per batch; the index rules as for aclrtMemcpyBatch. */
    FAILS(aclrtMemcpyBatchV2(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2));
    size_t from_one[1] = {1};
    FAILS(aclrtMemcpyBatchV2(dsts, maxes, srcs, sizes, 2, attrs, from_one, 1));
    FAILS(aclrtMemcpyBatchAsyncV2(dsts, maxes, srcs, sizes, 1, attrs, indexes, 2, stream));
    EXPECT(aclrtMemcpyBatchAsyncV2(dsts, maxes, srcs, sizes, 0, attrs, indexes, 1, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyBatchV2(NULL, maxes, srcs, sizes, 2, attrs, indexes, 1),
           ACL_ERROR_INVALID_PARAM);
    sizes[1] = 9;
    FAILS(aclrtMemcpyBatchV2(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1));
    sizes[1] = 8;
    /* The asynchronous form with a fail index: the copy whose attribute or direction is
     * wrong, SIZE_MAX for an error no copy is to blame for. */
    size_t fail = 77;
    EXPECT(aclrtMemcpyBatchAsync(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1, &fail, stream),
           ACL_SUCCESS);
    FAILS(aclrtMemcpyBatchAsync(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2, &fail, stream));
    HOLDS(fail == 1);
    fail = 77;
    FAILS(aclrtMemcpyBatchAsync(dsts, maxes, srcs, sizes, 2, attrs, from_one, 1, &fail, stream));
    HOLDS(fail == SIZE_MAX);
    EXPECT(aclrtMemcpyBatchAsync(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1, NULL, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    /* The failing batch copies nothing. */
    memset(in[0], 5, 8);
    FAILS(aclrtMemcpyBatchV2(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2));
    CHECK(aclrtMemcpy(out[0], 8, dev, 8, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(out[0][0] == 1);
    CHECK(aclrtFree(dev));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));
    if (allocations() != 0 || memory_types_and_usage() != 0 || host_memory(stream) != 0 ||
        indirect_copies(stream) != 0 || batch_copies(stream) != 0) {
        return 1;
    }
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
