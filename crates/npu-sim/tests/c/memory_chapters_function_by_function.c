/*
 * The API reference's device memory, host memory, copy and set, virtual memory, unified
 * addressing and exception handling chapters (11-01 to 11-05 and 13) walked function by
 * function for the edges the other programs leave out: memory that was freed, that belongs to
 * another device or to another allocator (device memory given to the host functions and the
 * other way round, a reservation given to aclrtFree, an address inside an allocation), calls
 * from a thread with no context, a policy outside the enumeration and the 1 GiB pages that add
 * no padding, what a free with device synchronisation waits for, what aclrtGetMemInfo's free
 * figure loses to a huge page, registrations of host memory in each of their states, the
 * pointer decides and the kind is reserved only for the synchronous copy, pageable memory
 * staged by ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE without waiting for a held stream, descriptor and
 * offset copies on the wrong device, aclrtMemsetD32Async filling host memory at once while its
 * stream is held, physical memory of two devices in one reservation, a physical size no
 * mapping can take, the properties only one side takes, an exception of another device's
 * task, a device task abort dropping queued tasks, and an abort callback's name. The
 * reference's chapters 22 and 23 (error reporting and logs) declare their functions in headers
 * other than ACL's, so there is nothing of theirs to call here. Where the reference names no
 * code only a failure is required. Prints a line for each mismatch, then how many checks ran.
 * Compiled by tests/c_programs.rs (also against CANN's own headers), which compares the output.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "memory_helpers.h"
#include "model_helpers.h"
#include "npusim/control.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* The second device, the devices' streams and a stream that was destroyed. */
static aclrtContext g_primary;
static aclrtContext g_far;
static aclrtStream g_far_stream;
static aclrtStream g_gone;

/* The block aclrtMemGetAddressRange reports for `ptr`: its base and its size (0 if none). */
static size_t block_of(void *ptr, void **base)
{
    size_t size = 0;
    *base = NULL;
    if (aclrtMemGetAddressRange(ptr, base, &size) != ACL_SUCCESS) {
        (void)aclGetRecentErrMsg();
        return 0;
    }
    return size;
}

static size_t free_hbm(void)
{
    size_t free_bytes = 0, total = 0;
    (void)aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total);
    return free_bytes;
}

/* A call made on a thread bound to no context, and what it returned. */
struct contextless {
    aclError malloc_result;
    aclError mem_info_result;
    aclError free_result;
    void *ptr;
    void *out;
};

static void *without_context(void *arg)
{
    struct contextless *call = arg;
    size_t free_bytes = 0, total = 0;
    call->out = SENTINEL;
    call->malloc_result = aclrtMalloc(&call->out, 64, ACL_MEM_MALLOC_NORMAL_ONLY);
    call->mem_info_result = aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total);
    /* aclrtFree names its memory by address: no context needed. */
    call->free_result = aclrtFree(call->ptr);
    (void)aclGetRecentErrMsg();
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return NULL;
}

/* ---- 11-01 aclrtMalloc ---- */

static void malloc_section(void)
{
    void *dev = SENTINEL;
    /* NULL devPtr, size 0; an output a refused call leaves as it was. */
    EXPECT(aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMalloc(&dev, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMalloc(&dev, SIZE_MAX, ACL_MEM_MALLOC_HUGE_FIRST));
    FAILS(aclrtMalloc(&dev, SIZE_MAX - 16, ACL_MEM_MALLOC_NORMAL_ONLY));
    HOLDS(dev == SENTINEL);
    /* 1 GiB pages are rounded to 32 bytes without the 32 more. */
    EXPECT(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_HUGE1G_ONLY), ACL_SUCCESS);
    void *base = NULL;
    HOLDS(block_of(dev, &base) == 128 && base == dev);
    HOLDS(page_size_of(dev) == GIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* A single enumerator only: HUGE_ONLY or-ed with a band-width bit is a rule outside the
     * policy, and the size chooses the pages. */
    const aclrtMemMallocPolicy ored =
        (aclrtMemMallocPolicy)(ACL_MEM_MALLOC_HUGE_ONLY | ACL_MEM_TYPE_HIGH_BAND_WIDTH);
    EXPECT(aclrtMalloc(&dev, 64, ored), ACL_SUCCESS);
    HOLDS(page_size_of(dev) < 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dev, 2 * MIB, ored), ACL_SUCCESS);
    HOLDS(page_size_of(dev) == 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* HUGE_FIRST keeps up to 1 MiB on normal pages and takes huge ones above. */
    EXPECT(aclrtMalloc(&dev, MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    HOLDS(page_size_of(dev) < 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dev, MIB + 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    HOLDS(page_size_of(dev) == 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* The memory is usable at once, and what it holds is the caller's to set. */
    EXPECT(aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    HOLDS(((uintptr_t)dev & 63) == 0);
    EXPECT(aclrtMemset(dev, 256, 0x5C, 256), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x5C);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);

    /* Without a current context there is no device to allocate on. */
    struct contextless call;
    memset(&call, 0, sizeof call);
    EXPECT(aclrtMalloc(&call.ptr, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    on_thread(without_context, &call);
    EXPECT(call.malloc_result, ACL_ERROR_RT_CONTEXT_NULL);
    HOLDS(call.out == SENTINEL);
    EXPECT(call.mem_info_result, ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(call.free_result, ACL_SUCCESS);
    FAILS(aclrtFree(call.ptr));
}

/* ---- 11-01 aclrtMallocCached ---- */

static void malloc_cached_section(void)
{
    void *dev = SENTINEL;
    EXPECT(aclrtMallocCached(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocCached(&dev, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    HOLDS(dev == SENTINEL);
    /* aclrtMalloc's memory: 32 bytes of padding, freed by aclrtFree. */
    EXPECT(aclrtMallocCached(&dev, 100, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    void *base = NULL;
    HOLDS(block_of(dev, &base) == 160 && ((uintptr_t)dev & 63) == 0);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Its four rules only: a P2P rule is outside them, and the size chooses the pages. */
    EXPECT(aclrtMallocCached(&dev, 64, ACL_MEM_MALLOC_HUGE_ONLY_P2P), ACL_SUCCESS);
    HOLDS(page_size_of(dev) < 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    EXPECT(aclrtMallocCached(&dev, 2 * MIB, ACL_MEM_MALLOC_NORMAL_ONLY_P2P), ACL_SUCCESS);
    HOLDS(page_size_of(dev) == 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    EXPECT(aclrtMallocCached(&dev, 64, ACL_MEM_MALLOC_HUGE_ONLY), ACL_SUCCESS);
    HOLDS(page_size_of(dev) == 2 * MIB);
    /* Flushing and invalidating cached memory: accepted, the data unchanged. */
    EXPECT(aclrtMemset(dev, 64, 0x21, 64), ACL_SUCCESS);
    EXPECT(aclrtMemFlush(dev, 64), ACL_SUCCESS);
    EXPECT(aclrtMemInvalidate(dev, 64), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 63) == 0x21);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-01 aclrtMallocWithCfg and aclrtMallocForTaskScheduler ---- */

static aclrtMallocConfig device_config(aclrtMallocAttribute *attribute, uint32_t device)
{
    memset(attribute, 0, sizeof *attribute);
    attribute->attr = ACL_RT_MEM_ATTR_DEVICE_ID;
    attribute->value.deviceId = device;
    aclrtMallocConfig cfg = {attribute, 1};
    return cfg;
}

static void malloc_with_cfg_section(void)
{
    aclrtMallocAttribute attribute;
    aclrtMallocConfig own = device_config(&attribute, 0);
    void *dev = SENTINEL;
    /* The configuration names the current device, or the call fails. */
    EXPECT(aclrtMallocWithCfg(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY, &own), ACL_SUCCESS);
    HOLDS(dev != SENTINEL && ((uintptr_t)dev & 63) == 0);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    aclrtMallocAttribute other_attribute;
    aclrtMallocConfig other = device_config(&other_attribute, 1);
    dev = SENTINEL;
    FAILS(aclrtMallocWithCfg(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY, &other));
    FAILS(aclrtMallocForTaskScheduler(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY, &other));
    HOLDS(dev == SENTINEL);
    /* The three groups or-ed: band width, read-only, the rule (which decides the pages). */
    const aclrtMemMallocPolicy three = (aclrtMemMallocPolicy)(
        ACL_MEM_TYPE_HIGH_BAND_WIDTH | ACL_MEM_ACCESS_USER_SPACE_READONLY |
        ACL_MEM_MALLOC_NORMAL_ONLY);
    EXPECT(aclrtMallocWithCfg(&dev, 2 * MIB, three, NULL), ACL_SUCCESS);
    HOLDS(page_size_of(dev) < 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* A rule outside the enumeration: the size decides. */
    EXPECT(aclrtMallocWithCfg(&dev, 2 * MIB, (aclrtMemMallocPolicy)0x77, NULL), ACL_SUCCESS);
    HOLDS(page_size_of(dev) == 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Task scheduler memory is device memory the copies reach, freed by aclrtFree. */
    EXPECT(aclrtMallocForTaskScheduler(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST, &own), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, 64, 0x44, 64), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 63) == 0x44);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-01 aclrtFree ---- */

static void free_section(void)
{
    void *dev = NULL, *pinned = NULL, *range = NULL, *far = NULL;
    EXPECT(aclrtFree(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    /* Only the address aclrtMalloc gave: not one inside the allocation. */
    FAILS(aclrtFree((char *)dev + 64));
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Freed memory: a second free fails, and so does every use of the address. */
    FAILS(aclrtFree(dev));
    FAILS(aclrtMemset(dev, 64, 0, 64));
    char host[64];
    FAILS(aclrtMemcpy(host, sizeof host, dev, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
    /* Memory of other allocators: pinned host memory, a reservation, a physical handle. */
    EXPECT(aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
    FAILS(aclrtFree(pinned));
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtReserveMemAddress(&range, 2 * MIB, 0, NULL, 0), ACL_SUCCESS);
    FAILS(aclrtFree(range));
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    /* Another device's memory is freed by address, whichever device is current. */
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 4096, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    EXPECT(aclrtFree(far), ACL_SUCCESS);
}

/* ---- 11-01 aclrtFreeWithDevSync ---- */

static void free_with_dev_sync_section(aclrtStream stream)
{
    EXPECT(aclrtFreeWithDevSync(NULL), ACL_ERROR_INVALID_PARAM);
    /* The tasks queued before the free have finished when it returns. */
    void *dev = NULL, *held = NULL;
    EXPECT(aclrtMalloc(&dev, 8 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&held, 8 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < 8; ++i) {
        EXPECT(aclrtMemsetAsync(dev, 8 * MIB, i, 8 * MIB, stream), ACL_SUCCESS);
    }
    EXPECT(aclrtMemcpyAsync(held, 8 * MIB, dev, 8 * MIB, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtFreeWithDevSync(dev), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_NOT_READY;
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    HOLDS(byte_at((char *)held + 8 * MIB - 1) == 7);
    /* Freed, pinned or interior: refused like aclrtFree. */
    FAILS(aclrtFreeWithDevSync(dev));
    FAILS(aclrtFreeWithDevSync((char *)held + 64));
    void *pinned = NULL;
    EXPECT(aclrtMallocHost(&pinned, 64), ACL_SUCCESS);
    FAILS(aclrtFreeWithDevSync(pinned));
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFreeWithDevSync(held), ACL_SUCCESS);

    /* Another device's memory a task of this device's stream reads: the free waits for that
     * task too, not only for the memory's own device. */
    void *far = NULL, *near = NULL;
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 8 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(far, 8 * MIB, 0x2B, 8 * MIB), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&near, 8 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < 8; ++i) {
        EXPECT(aclrtMemsetAsync(near, 8 * MIB, i, 8 * MIB, stream), ACL_SUCCESS);
    }
    EXPECT(aclrtMemcpyAsync(near, 8 * MIB, far, 8 * MIB, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtFreeWithDevSync(far), ACL_SUCCESS);
    status = ACL_STREAM_STATUS_NOT_READY;
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)near + 8 * MIB - 1) == 0x2B);
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    EXPECT(aclrtFree(near), ACL_SUCCESS);
}

/* ---- 11-01 aclrtGetMemInfo ---- */

static void mem_info_section(void)
{
    size_t free_bytes = 7, total = 7;
    EXPECT(aclrtGetMemInfo(ACL_HBM_MEM, NULL, &total), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(free_bytes == 7 && total == 7);
    EXPECT(aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total), ACL_SUCCESS);
    HOLDS(total > 0 && free_bytes <= total);
    /* The attributes that choose the memory kind themselves answer as HBM does. */
    size_t free_auto = 0, total_auto = 0;
    EXPECT(aclrtGetMemInfo(ACL_MEM_HUGE, &free_auto, &total_auto), ACL_SUCCESS);
    HOLDS(total_auto == total);
    /* A huge page is taken whole: 100 bytes cost 2 MiB of the free figure. */
    size_t before = free_hbm();
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_HUGE_ONLY), ACL_SUCCESS);
    HOLDS(before - free_hbm() == 2 * MIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    HOLDS(free_hbm() == before);
    EXPECT(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_HUGE1G_ONLY), ACL_SUCCESS);
    HOLDS(before - free_hbm() == GIB);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Normal pages: the 32-byte rounding and padding only. */
    EXPECT(aclrtMalloc(&dev, 100, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    HOLDS(before - free_hbm() == 160);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Each device's own figure: the other device's allocation leaves this one's alone. */
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dev, 4 * MIB, ACL_MEM_MALLOC_HUGE_ONLY), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    HOLDS(free_hbm() == before);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-01 aclrtGetMemUsageInfo and aclrtCheckMemType ---- */

static void usage_and_type_section(void)
{
    aclrtMemUsageInfo usage[2];
    size_t count = 5;
    EXPECT(aclrtGetMemUsageInfo(-1, usage, 2, &count), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(count == 5);
    /* The other device's usage is its own query. */
    EXPECT(aclrtGetMemUsageInfo(1, usage, 2, &count), ACL_SUCCESS);
    HOLDS(count >= 1 && count <= 2);

    void *dev = NULL, *pinned = NULL;
    EXPECT(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
    uint32_t result = 7;
    /* An address inside an allocation is of its kind. */
    void *inside[1] = {(char *)dev + 100};
    EXPECT(aclrtCheckMemType(inside, 1, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_SUCCESS);
    HOLDS(result == 1);
    /* Pinned host memory is no device memory. */
    void *host_list[1] = {pinned};
    EXPECT(aclrtCheckMemType(host_list, 1, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_SUCCESS);
    HOLDS(result == 0);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Freed memory is of no kind. */
    void *freed[1] = {dev};
    result = 7;
    EXPECT(aclrtCheckMemType(freed, 1, ACL_RT_MEM_TYPE_DEV, &result, 0), ACL_SUCCESS);
    HOLDS(result == 0);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
}

/* ---- 11-02 aclrtMallocHost, aclrtFreeHost, aclrtFreeHostWithDevSync ---- */

static void host_memory_section(aclrtStream stream)
{
    void *pinned = SENTINEL;
    EXPECT(aclrtMallocHost(NULL, 64), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocHost(&pinned, 0), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMallocHost(&pinned, SIZE_MAX));
    HOLDS(pinned == SENTINEL);
    EXPECT(aclrtMallocHost(&pinned, 100), ACL_SUCCESS);
    HOLDS(((uintptr_t)pinned & 63) == 0);
    /* Host memory the program writes directly, and the block it belongs to. */
    memset(pinned, 0x3E, 100);
    void *base = NULL;
    HOLDS(block_of((char *)pinned + 50, &base) >= 100 && base == pinned);
    FAILS(aclrtFreeHost((char *)pinned + 64));
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    FAILS(aclrtFreeHost(pinned));
    EXPECT(aclrtFreeHost(NULL), ACL_ERROR_INVALID_PARAM);
    /* A configuration naming the current device, or another one. */
    aclrtMallocAttribute attribute;
    aclrtMallocConfig own = device_config(&attribute, 0);
    EXPECT(aclrtMallocHostWithCfg(&pinned, 64, &own), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    aclrtMallocAttribute other_attribute;
    aclrtMallocConfig other = device_config(&other_attribute, 1);
    pinned = SENTINEL;
    FAILS(aclrtMallocHostWithCfg(&pinned, 64, &other));
    HOLDS(pinned == SENTINEL);

    /* Device memory and memory of malloc are no aclrtMallocHost memory. */
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    FAILS(aclrtFreeHost(dev));
    FAILS(aclrtFreeHostWithDevSync(dev));
    char *plain = malloc(64);
    FAILS(aclrtFreeHost(plain));
    FAILS(aclrtFreeHostWithDevSync(plain));
    free(plain);

    /* The synchronising free waits for the copies into the memory. */
    EXPECT(aclrtMallocHost(&pinned, 8 * MIB), ACL_SUCCESS);
    void *big = NULL;
    EXPECT(aclrtMalloc(&big, 8 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(big, 8 * MIB, 0x19, 8 * MIB, stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(pinned, 8 * MIB, big, 8 * MIB, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtFreeHostWithDevSync(pinned), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_NOT_READY;
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    EXPECT(aclrtFree(big), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-02 aclrtHostRegister, aclrtHostRegisterV2, aclrtHostGetDevicePointer,
 *      aclrtHostUnregister ---- */

static void host_register_section(void)
{
    char *page = NULL;
    if (posix_memalign((void **)&page, 4096, 4 * 4096) != 0) {
        holds("page-aligned host memory", 0);
        return;
    }
    void *mapped = SENTINEL;
    EXPECT(aclrtHostRegister(NULL, 4096, ACL_HOST_REGISTER_MAPPED, &mapped),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostRegister(page, 4096, ACL_HOST_REGISTER_MAPPED, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostRegister(page, 0, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_ERROR_INVALID_PARAM);
    /* IOMEMORY and READONLY are reserved options. */
    FAILS(aclrtHostRegister(page, 4096, ACL_HOST_REGISTER_IOMEMORY, &mapped));
    FAILS(aclrtHostRegister(page, 4096, ACL_HOST_REGISTER_READONLY, &mapped));
    HOLDS(mapped == SENTINEL);
    /* Device memory is no host memory. */
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 2 * MIB, ACL_MEM_MALLOC_HUGE_ONLY), ACL_SUCCESS);
    FAILS(aclrtHostRegister(dev, 4096, ACL_HOST_REGISTER_MAPPED, &mapped));
    FAILS(aclrtHostRegisterV2(dev, 4096, ACL_HOST_REG_MAPPED));
    HOLDS(mapped == SENTINEL);

    /* Registered: the device address; a second registration of the memory fails. */
    EXPECT(aclrtHostRegister(page, 2 * 4096, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_SUCCESS);
    HOLDS(mapped != SENTINEL && mapped != NULL);
    void *again = NULL;
    FAILS(aclrtHostRegister(page, 2 * 4096, ACL_HOST_REGISTER_MAPPED, &again));
    FAILS(aclrtHostRegister(page + 4096, 4096, ACL_HOST_REGISTER_MAPPED, &again));
    FAILS(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_MAPPED));
    aclrtPtrAttributes attributes;
    memset(&attributes, 0, sizeof attributes);
    EXPECT(aclrtPointerGetAttributes(page, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_HOST);
    /* The device pointer of any address of the registration is the same offset in it. */
    void *device = NULL;
    EXPECT(aclrtHostGetDevicePointer(page + 100, &device, 0), ACL_SUCCESS);
    HOLDS(device == (char *)mapped + 100);
    /* Unregistered by the registered address only. */
    FAILS(aclrtHostUnregister(page + 4096));
    EXPECT(aclrtHostUnregister(page), ACL_SUCCESS);
    device = SENTINEL;
    FAILS(aclrtHostGetDevicePointer(page, &device, 0));
    HOLDS(device == SENTINEL);
    EXPECT(aclrtHostUnregister(page), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);

    /* V2: a flag with a valid bit; the reserved bits fail; PINNED alone gives no device
     * pointer, MAPPED | PINNED does. */
    FAILS(aclrtHostRegisterV2(page, 4096, 0));
    FAILS(aclrtHostRegisterV2(page, 4096, 0x1));
    FAILS(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_IOMEMORY));
    FAILS(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_READONLY | ACL_HOST_REG_MAPPED));
    EXPECT(aclrtHostRegisterV2(NULL, 4096, ACL_HOST_REG_MAPPED), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostRegisterV2(page, 0, ACL_HOST_REG_MAPPED), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_PINNED), ACL_SUCCESS);
    device = SENTINEL;
    FAILS(aclrtHostGetDevicePointer(page, &device, 0));
    HOLDS(device == SENTINEL);
    EXPECT(aclrtHostUnregister(page), ACL_SUCCESS);
    EXPECT(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_MAPPED | ACL_HOST_REG_PINNED),
           ACL_SUCCESS);
    EXPECT(aclrtHostGetDevicePointer(page, &device, 0), ACL_SUCCESS);
    HOLDS(device != SENTINEL && device != NULL);
    EXPECT(aclrtHostGetDevicePointer(page, NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostGetDevicePointer(NULL, &device, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostUnregister(page), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(NULL), ACL_ERROR_INVALID_PARAM);
    /* Registration of pinned memory that is mapped, not pinned again. */
    void *pinned = NULL;
    EXPECT(aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(pinned), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(aclrtHostRegister(pinned, 4096, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(pinned), ACL_SUCCESS);
    EXPECT(aclrtHostRegisterV2(pinned, 4096, ACL_HOST_REG_MAPPED), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(pinned), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    free(page);
}

/* ---- 11-03 aclrtMemcpy and aclrtMemcpyAsync ---- */

static void memcpy_section(aclrtStream stream)
{
    void *dev = NULL, *far = NULL;
    EXPECT(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    unsigned char host[256];
    memset(host, 0x6D, sizeof host);
    /* count above destMax; NULL pointers. */
    FAILS(aclrtMemcpy(dev, 128, host, 256, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpy(NULL, 256, host, 256, ACL_MEMCPY_HOST_TO_DEVICE));
    FAILS(aclrtMemcpy(dev, 256, NULL, 256, ACL_MEMCPY_HOST_TO_DEVICE));
    /* In parameter order: a NULL pointer or a kind outside the enumeration (100000) before a
     * count above destMax (107000), and that before the stream is looked up (107017). */
    EXPECT(aclrtMemcpy(NULL, 8, host, 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy(dev, 8, host, 16, (aclrtMemcpyKind)99), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpyAsync(dev, 8, host, 16, ACL_MEMCPY_HOST_TO_DEVICE, g_gone),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsync(dev, 16, host, 16, ACL_MEMCPY_HOST_TO_DEVICE, g_gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    /* The synchronous kind is reserved: the pointers decide, whatever kind is named. */
    EXPECT(aclrtMemcpy(dev, 256, host, 256, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x6D);
    unsigned char back[256];
    memset(back, 0, sizeof back);
    EXPECT(aclrtMemcpy(back, 256, dev, 256, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    HOLDS(back[0] == 0x6D && back[255] == 0x6D);
    /* Host to host synchronously; 0 bytes copy nothing. */
    unsigned char other[256];
    memset(other, 0, sizeof other);
    EXPECT(aclrtMemcpy(other, 256, host, 256, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
    HOLDS(other[255] == 0x6D);
    EXPECT(aclrtMemcpy(dev, 256, other, 0, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    /* A range running past its allocation. */
    FAILS(aclrtMemcpy((char *)dev + 4000, 256, host, 256, ACL_MEMCPY_HOST_TO_DEVICE));
    /* The asynchronous copy takes its kind at its word: device pointers named host to
     * device fail. */
    FAILS(aclrtMemcpyAsync(back, 256, dev, 256, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    EXPECT(aclrtMemcpyAsync(back, 256, dev, 256, ACL_MEMCPY_HOST_TO_HOST, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    FAILS(aclrtMemcpyAsync(back, 256, dev, 256, ACL_MEMCPY_DEVICE_TO_HOST, g_gone));
    FAILS(aclrtMemcpyAsync(back, 128, dev, 256, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    /* Pageable host memory: the copy has finished when the call returns. */
    EXPECT(aclrtMemset(dev, 256, 0x2F, 256), ACL_SUCCESS);
    memset(back, 0, sizeof back);
    EXPECT(aclrtMemcpyAsync(back, 256, dev, 256, ACL_MEMCPY_DEVICE_TO_HOST, stream), ACL_SUCCESS);
    HOLDS(back[255] == 0x2F);
    /* Staged in the runtime's buffer: the source may change once the call returns, even while
     * the stream is held. */
    uint64_t *gate = NULL;
    EXPECT(aclrtMalloc((void **)&gate, 8, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemset(gate, 8, 0, 8), ACL_SUCCESS);
    EXPECT(aclrtValueWait(gate, 1, ACL_STREAM_WAIT_VALUE_EQ, stream), ACL_SUCCESS);
    memset(other, 0x71, sizeof other);
    EXPECT(aclrtMemcpyAsync(dev, 256, other, 256, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, stream),
           ACL_SUCCESS);
    memset(other, 0x72, sizeof other);
    uint64_t one = 1;
    EXPECT(aclrtMemcpy(gate, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x71);
    /* Captured, the staged bytes are the task's: each execution copies what was staged. */
    aclmdlRI captured = NULL;
    memset(other, 0x74, sizeof other);
    EXPECT(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(dev, 256, other, 256, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclmdlRICaptureEnd(stream, &captured), ACL_SUCCESS);
    memset(other, 0x75, sizeof other);
    EXPECT(aclmdlRIExecuteAsync(captured, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x74);
    EXPECT(aclmdlRIDestroy(captured), ACL_SUCCESS);
    /* Under that kind device memory to pinned memory is still device to host, its source read
     * in stream order: after the memset queued before it. */
    void *pinned = NULL;
    EXPECT(aclrtMallocHost(&pinned, 256), ACL_SUCCESS);
    memset(pinned, 0, 256);
    EXPECT(aclrtMemset(gate, 8, 0, 8), ACL_SUCCESS);
    EXPECT(aclrtValueWait(gate, 1, ACL_STREAM_WAIT_VALUE_EQ, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, 256, 0x73, 256, stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(pinned, 256, dev, 256, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpy(gate, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(((unsigned char *)pinned)[255] == 0x73);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(gate), ACL_SUCCESS);

    /* Another device's memory: host copies need no peer access. */
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 4096, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(far, 256, host, 256, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    /* Between two devices: only once peer access is enabled (an Atlas A2 rule). */
    EXPECT(aclrtMemcpy(dev, 256, far, 256, ACL_MEMCPY_DEVICE_TO_DEVICE),
           ACL_ERROR_RT_NO_PERMISSION);
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, 256, 0, 256), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(dev, 256, far, 256, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x6D);
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    /* A copy on another device's stream. */
    EXPECT(aclrtMemcpyAsync(dev, 256, far, 256, ACL_MEMCPY_DEVICE_TO_DEVICE, g_far_stream),
           ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtFree(far), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-03 aclrtMemcpy2d and aclrtMemcpy2dAsync ---- */

static void memcpy_2d_section(aclrtStream stream)
{
    enum { PITCH = 64, WIDTH = 16, ROWS = 4 };
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, PITCH * ROWS, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, PITCH * ROWS, 0, PITCH * ROWS), ACL_SUCCESS);
    unsigned char host[PITCH * ROWS];
    for (size_t i = 0; i < sizeof host; ++i) {
        host[i] = (unsigned char)i;
    }
    /* Rows of WIDTH bytes from a host pitch of 32 to a device pitch of 64: the bytes between
     * rows stay as they were. */
    EXPECT(aclrtMemcpy2d(dev, PITCH, host, 32, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + PITCH * 3 + WIDTH - 1) == 32 * 3 + WIDTH - 1);
    HOLDS(byte_at((char *)dev + PITCH * 3 + WIDTH) == 0);
    /* NULL ends, the pitches, a region past the allocation. */
    EXPECT(aclrtMemcpy2d(NULL, PITCH, host, 32, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2d(dev, PITCH, host, WIDTH - 1, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    /* Only host to device and device to host synchronously. */
    FAILS(aclrtMemcpy2d(host, PITCH, dev, PITCH, WIDTH, 1, ACL_MEMCPY_HOST_TO_HOST));
    /* The asynchronous form: device to device on an Atlas A2; the others 100000. */
    void *dev2 = NULL;
    EXPECT(aclrtMalloc(&dev2, PITCH * ROWS, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_DEVICE,
                              stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev2 + 32 * 3 + 5) == 32 * 3 + 5);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, ROWS,
                              ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_DEVICE,
                              g_gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_DEVICE,
                              g_far_stream),
           ACL_ERROR_RT_STREAM_CONTEXT);
    /* In parameter order: the pitches and the kind (100000) before the height (107000), the
     * height before the stream. */
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, WIDTH - 1, WIDTH, 5242881,
                              ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, 5242881, ACL_MEMCPY_HOST_TO_HOST,
                              stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, 5242881, ACL_MEMCPY_DEVICE_TO_DEVICE,
                              g_gone),
           ACL_ERROR_RT_PARAM_INVALID);
    /* Height above 5 MiB rows, whatever else. */
    FAILS(aclrtMemcpy2dAsync(dev2, 32, dev, PITCH, WIDTH, 5242881, ACL_MEMCPY_DEVICE_TO_DEVICE,
                             stream));
    EXPECT(aclrtFree(dev2), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-03 aclrtSetMemcpyDesc, aclrtMemcpyAsyncWithDesc, aclrtMemcpyAsyncWithOffset ---- */

static void descriptor_copy_section(aclrtStream stream)
{
    size_t desc_size = 0;
    EXPECT(aclrtGetMemcpyDescSize(ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, &desc_size), ACL_SUCCESS);
    void *desc = NULL, *src = NULL, *dst = NULL, *far = NULL, *pinned = NULL;
    EXPECT(aclrtMalloc(&desc, desc_size, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&src, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dst, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, 256), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    /* The descriptor is device memory; the copy is within one device. */
    FAILS(aclrtSetMemcpyDesc(pinned, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 64, NULL));
    FAILS(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, pinned, dst, 64, NULL));
    FAILS(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, far, dst, 64, NULL));
    FAILS(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 512, NULL));
    /* A descriptor on another device's stream, or on a destroyed one. */
    EXPECT(aclrtSetMemcpyDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, src, dst, 64, NULL),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, g_far_stream),
           ACL_ERROR_RT_STREAM_CONTEXT);
    FAILS(aclrtMemcpyAsyncWithDesc(desc, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, g_gone));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    /* Offsets: the base pointers in device memory, on the stream's device only. */
    void **slots = NULL;
    EXPECT(aclrtMalloc((void **)&slots, 2 * sizeof(void *), ACL_MEM_MALLOC_NORMAL_ONLY),
           ACL_SUCCESS);
    void *bases[2] = {dst, src};
    EXPECT(aclrtMemcpy(slots, sizeof bases, bases, sizeof bases, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 16, 0, (const void **)&slots[1], 16, 0,
                                      ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, g_far_stream),
           ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 16, 0, (const void **)&slots[1], 16, 0,
                                      ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, g_gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtMemset(src, 256, 0x3D, 256), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsyncWithOffset(&slots[0], 16, 240, (const void **)&slots[1], 16, 0,
                                      ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)dst + 255) == 0x3D);
    EXPECT(aclrtFree(slots), ACL_SUCCESS);
    EXPECT(aclrtFree(far), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(dst), ACL_SUCCESS);
    EXPECT(aclrtFree(src), ACL_SUCCESS);
    EXPECT(aclrtFree(desc), ACL_SUCCESS);
}

/* ---- 11-03 aclrtMemset, aclrtMemsetAsync ---- */

static void memset_section(aclrtStream stream)
{
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, 256, 0x11, 256), ACL_SUCCESS);
    /* count above maxCount; NULL. */
    FAILS(aclrtMemset(dev, 16, 0x22, 32));
    FAILS(aclrtMemset(NULL, 16, 0x22, 16));
    HOLDS(byte_at(dev) == 0x11);
    /* The value's low byte. */
    EXPECT(aclrtMemset(dev, 256, 0x1A7, 8), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 7) == 0xA7 && byte_at((char *)dev + 8) == 0x11);
    /* 0 bytes: nothing set. */
    EXPECT(aclrtMemset(dev, 256, 0x33, 0), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 0xA7);
    /* Past the allocation. */
    FAILS(aclrtMemset((char *)dev + 200, 256, 0x44, 100));
    /* Host memory: the address says where. */
    void *pinned = NULL;
    EXPECT(aclrtMallocHost(&pinned, 64), ACL_SUCCESS);
    EXPECT(aclrtMemset(pinned, 64, 0x55, 64), ACL_SUCCESS);
    HOLDS(((unsigned char *)pinned)[63] == 0x55);
    /* Pinned memory set on a stream is a task of it: not set while the stream is held. */
    uint64_t *gate = NULL;
    EXPECT(aclrtMalloc((void **)&gate, 8, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemset(gate, 8, 0, 8), ACL_SUCCESS);
    EXPECT(aclrtValueWait(gate, 1, ACL_STREAM_WAIT_VALUE_EQ, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(pinned, 64, 0x56, 64, stream), ACL_SUCCESS);
    HOLDS(((unsigned char *)pinned)[63] == 0x55);
    uint64_t one = 1;
    EXPECT(aclrtMemcpy(gate, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(((unsigned char *)pinned)[63] == 0x56);
    EXPECT(aclrtFree(gate), ACL_SUCCESS);
    /* Another device's memory, set synchronously by address: the current device writes it,
     * which needs its peer access to that device, as a copy between the two would. */
    void *far = NULL;
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    EXPECT(aclrtMemset(far, 64, 0x57, 64), ACL_ERROR_RT_NO_PERMISSION);
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    EXPECT(aclrtMemset(far, 64, 0x57, 64), ACL_SUCCESS);
    HOLDS(byte_at((char *)far + 63) == 0x57);
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    EXPECT(aclrtFree(far), ACL_SUCCESS);
    /* The asynchronous form on its stream, refused on a destroyed or another device's one. */
    EXPECT(aclrtMemsetAsync(dev, 256, 0x66, 256, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at((char *)dev + 255) == 0x66);
    FAILS(aclrtMemsetAsync(dev, 256, 0x77, 256, g_gone));
    EXPECT(aclrtMemsetAsync(dev, 256, 0x77, 256, g_far_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    FAILS(aclrtMemsetAsync(dev, 16, 0x77, 256, stream));
    HOLDS(byte_at(dev) == 0x66);
    /* count above maxCount (107000) before the stream is looked up (107017). */
    EXPECT(aclrtMemsetAsync(dev, 16, 0x77, 256, g_gone), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemsetAsync(dev, 256, 0x77, 256, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(byte_at(dev) == 0x66);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-03 aclrtMemsetD32, aclrtMemsetD32Async ---- */

static uint32_t word_at(const void *dev)
{
    uint32_t value = 0;
    (void)aclrtMemcpy(&value, sizeof value, dev, sizeof value, ACL_MEMCPY_DEVICE_TO_HOST);
    return value;
}

static void memset_d32_section(aclrtStream stream)
{
    void *dev = NULL, *pinned = NULL;
    uint64_t *gate = NULL;
    EXPECT(aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, 256), ACL_SUCCESS);
    EXPECT(aclrtMalloc((void **)&gate, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemsetD32(dev, 256, 0xDEADBEEF, 64), ACL_SUCCESS);
    HOLDS(word_at((char *)dev + 252) == 0xDEADBEEF);
    /* memSize below 4 * N; NULL; memory no runtime function gave. */
    FAILS(aclrtMemsetD32(dev, 255, 1, 64));
    FAILS(aclrtMemsetD32(NULL, 256, 1, 64));
    uint32_t plain[4] = {0};
    FAILS(aclrtMemsetD32(plain, sizeof plain, 1, 4));
    HOLDS(plain[0] == 0 && word_at(dev) == 0xDEADBEEF);
    FAILS(aclrtMemsetD32((char *)dev + 128, 256, 1, 64));
    /* Host memory: at once, even while the stream is held by a value wait. */
    EXPECT(aclrtMemsetD32(gate, 8, 0, 2), ACL_SUCCESS);
    EXPECT(aclrtValueWait(gate, 1, ACL_STREAM_WAIT_VALUE_EQ, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetD32Async(pinned, 256, 0x01020304, 64, stream), ACL_SUCCESS);
    HOLDS(((uint32_t *)pinned)[63] == 0x01020304);
    /* Device memory: a task of the held stream, not done yet. */
    EXPECT(aclrtMemsetD32Async(dev, 256, 0x0A0B0C0D, 64, stream), ACL_SUCCESS);
    HOLDS(word_at(dev) == 0xDEADBEEF);
    /* The synchronous calls do not wait for the held stream: a memset, an allocation, and a
     * free of memory a queued task still uses. */
    void *spare = NULL, *used = NULL;
    EXPECT(aclrtMalloc(&spare, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemsetD32(spare, 64, 0x600DF00D, 16), ACL_SUCCESS);
    HOLDS(word_at((char *)spare + 60) == 0x600DF00D);
    EXPECT(aclrtMalloc(&used, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(used, 64, spare, 64, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtFree(used), ACL_SUCCESS);
    EXPECT(aclrtFree(spare), ACL_SUCCESS);
    uint64_t one = 1;
    EXPECT(aclrtMemcpy(gate, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    /* The queued copy finds its memory freed when it runs: a DMA fault of the stream. */
    EXPECT(aclrtSynchronizeStream(stream), ACL_ERROR_RT_SYS_DMA);
    (void)aclGetRecentErrMsg();
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    HOLDS(word_at((char *)dev + 252) == 0x0A0B0C0D);
    /* NULL stream: the default stream. */
    EXPECT(aclrtMemsetD32Async(dev, 256, 5, 64, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    HOLDS(word_at(dev) == 5);
    EXPECT(aclrtMemsetD32Async(dev, 256, 6, 64, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    FAILS(aclrtMemsetD32Async(dev, 4, 6, 64, stream));
    /* NULL (100000) before memSize (107000), memSize before the stream. */
    EXPECT(aclrtMemsetD32(NULL, 4, 6, 64), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemsetD32Async(dev, 4, 6, 64, g_gone), ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(word_at(dev) == 5);
    EXPECT(aclrtFree(gate), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-04 virtual memory ---- */

static void virtual_memory_section(void)
{
    const size_t huge = 2 * MIB;
    aclrtPhysicalMemProp prop = physical_prop(ACL_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    aclrtDrvMemHandle handle = SENTINEL;
    EXPECT(aclrtMallocPhysical(NULL, huge, &prop, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocPhysical(&handle, huge, NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMallocPhysical(&handle, 0, &prop, 0), ACL_ERROR_INVALID_PARAM);
    /* The host-only attributes on a device, the device-only ones on the host. */
    aclrtPhysicalMemProp wrong = physical_prop(ACL_DDR_MEM_NORMAL, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    FAILS(aclrtMallocPhysical(&handle, huge, &wrong, 0));
    wrong = physical_prop(ACL_MEM_HUGE1G, ACL_MEM_LOCATION_TYPE_HOST, 0);
    FAILS(aclrtMallocPhysical(&handle, GIB, &wrong, 0));
    /* A device that does not exist. */
    wrong = physical_prop(ACL_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 99);
    FAILS(aclrtMallocPhysical(&handle, huge, &wrong, 0));
    HOLDS(handle == SENTINEL);

    /* A freed handle: a second free, a mapping and a property query fail. */
    EXPECT(aclrtMallocPhysical(&handle, huge, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(handle), ACL_SUCCESS);
    FAILS(aclrtFreePhysical(handle));
    EXPECT(aclrtFreePhysical(NULL), ACL_ERROR_INVALID_PARAM);
    void *range = NULL;
    EXPECT(aclrtReserveMemAddress(&range, 2 * huge, 0, NULL, 0), ACL_SUCCESS);
    FAILS(aclrtMapMem(range, huge, 0, handle, 0));
    aclrtPhysicalMemProp got;
    FAILS(aclrtMemGetAllocationPropertiesFromHandle(handle, &got));

    /* One reservation, physical memory of two devices: refused. */
    aclrtDrvMemHandle mine = NULL, theirs = NULL;
    aclrtPhysicalMemProp far_prop = physical_prop(ACL_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 1);
    EXPECT(aclrtMallocPhysical(&mine, huge, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMallocPhysical(&theirs, huge, &far_prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMapMem(range, huge, 0, mine, 0), ACL_SUCCESS);
    FAILS(aclrtMapMem((char *)range + huge, huge, 0, theirs, 0));
    /* Unmapped twice, or at an address that was never mapped. */
    FAILS(aclrtUnmapMem((char *)range + huge));
    EXPECT(aclrtUnmapMem(range), ACL_SUCCESS);
    FAILS(aclrtUnmapMem(range));
    /* Mapped at an address no reservation holds. */
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 4 * MIB, ACL_MEM_MALLOC_HUGE_ONLY), ACL_SUCCESS);
    FAILS(aclrtMapMem(dev, huge, 0, mine, 0));
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    /* Released twice, or by an address inside it. */
    FAILS(aclrtReleaseMemAddress((char *)range + huge));
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    FAILS(aclrtReleaseMemAddress(range));
    EXPECT(aclrtReleaseMemAddress(NULL), ACL_ERROR_INVALID_PARAM);
    /* The other device's memory, mapped alone, is that device's. */
    EXPECT(aclrtReserveMemAddress(&range, huge, 0, NULL, 0), ACL_SUCCESS);
    EXPECT(aclrtMapMem(range, huge, 0, theirs, 0), ACL_SUCCESS);
    aclrtPtrAttributes attributes;
    memset(&attributes, 0, sizeof attributes);
    EXPECT(aclrtPointerGetAttributes(range, &attributes), ACL_SUCCESS);
    HOLDS(attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
          attributes.location.id == 1);
    EXPECT(aclrtUnmapMem(range), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(theirs), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(mine), ACL_SUCCESS);

    /* Physical memory counts against the device's free figure until it is freed and no
     * longer mapped. */
    size_t before = free_hbm();
    EXPECT(aclrtMallocPhysical(&mine, huge, &prop, 0), ACL_SUCCESS);
    HOLDS(before - free_hbm() == huge);
    EXPECT(aclrtReserveMemAddress(&range, huge, 0, NULL, 0), ACL_SUCCESS);
    EXPECT(aclrtMapMem(range, huge, 0, mine, 0), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(mine), ACL_SUCCESS);
    HOLDS(before - free_hbm() == huge);
    EXPECT(aclrtUnmapMem(range), ACL_SUCCESS);
    HOLDS(free_hbm() == before);
    /* Access: NULL arguments, a location neither host nor device, a count of 0. */
    aclrtMemLocation own = {0, ACL_MEM_LOCATION_TYPE_DEVICE};
    aclrtMemLocation nowhere = {0, (aclrtMemLocationType)7};
    uint64_t flag = 9;
    EXPECT(aclrtMallocPhysical(&mine, huge, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMapMem(range, huge, 0, mine, 0), ACL_SUCCESS);
    EXPECT(aclrtMemGetAccess(range, NULL, &flag), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemGetAccess(range, &own, NULL), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemGetAccess(range, &nowhere, &flag));
    HOLDS(flag == 9);
    aclrtMemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
    desc.location = own;
    EXPECT(aclrtMemSetAccess(range, huge, NULL, 1), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemSetAccess(range, huge, &desc, 0));
    EXPECT(aclrtMemSetAccess(range, huge, &desc, 1), ACL_SUCCESS);
    EXPECT(aclrtMemGetAllocationPropertiesFromHandle(NULL, &got), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemGetAllocationPropertiesFromHandle(mine, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtUnmapMem(range), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(mine), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    /* A physical size that is no whole number of granules: allocated, then the mapping's
     * size must be both the allocation's and a multiple of the granularity. */
    EXPECT(aclrtMallocPhysical(&mine, MIB, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtReserveMemAddress(&range, huge, 0, NULL, 0), ACL_SUCCESS);
    FAILS(aclrtMapMem(range, MIB, 0, mine, 0));
    FAILS(aclrtMapMem(range, huge, 0, mine, 0));
    EXPECT(aclrtMemMapNoAccess(range, MIB, 0, mine, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(mine), ACL_SUCCESS);

    /* The reserve's flags are only recommended to be 0, where the alignment must be. */
    EXPECT(aclrtReserveMemAddress(&range, huge, 0, NULL, 1), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(range), ACL_SUCCESS);
    range = SENTINEL;
    FAILS(aclrtReserveMemAddress(&range, huge, huge, NULL, 0));
    HOLDS(range == SENTINEL);
    /* The reserve's NULL out pointer; the address range of NULL, into NULL. */
    EXPECT(aclrtReserveMemAddress(NULL, huge, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
    void *base = NULL;
    size_t size = 0;
    EXPECT(aclrtMemGetAddressRange(NULL, &base, &size), ACL_ERROR_INVALID_PARAM);
    /* Memory of no allocation has no range. */
    int on_stack = 0;
    FAILS(aclrtMemGetAddressRange(&on_stack, &base, &size));
    /* Granularity queries: NULL arguments, an option outside the enumeration. */
    size_t granularity = 0;
    EXPECT(aclrtMemGetAllocationGranularity(NULL, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                                            &granularity),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, NULL),
           ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemGetAllocationGranularity(&prop, (aclrtMemGranularityOptions)7, &granularity));
    /* Not supported on an Atlas A2. */
    EXPECT(aclrtMemMapSelectedLink(SENTINEL, huge, SENTINEL, ACL_RT_MEM_LINK_IDX_1),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
}

/* ---- 11-05 aclrtMemAllocManaged, aclrtPointerGetAttributes ---- */

static void unified_addressing_section(void)
{
    void *managed = SENTINEL;
    FAILS(aclrtMemAllocManaged(&managed, MIB, 2));
    HOLDS(managed == SENTINEL);
    /* In the UVM window, its size rounded up to 2 MiB. */
    EXPECT(aclrtMemAllocManaged(&managed, MIB, ACL_RT_MEM_ATTACH_GLOBAL), ACL_SUCCESS);
    uintptr_t at = (uintptr_t)managed;
    HOLDS(at >= 0x90000000000ULL && at < 0x90000000000ULL + (3ULL << 40));
    void *base = NULL;
    HOLDS(block_of(managed, &base) == 2 * MIB && base == managed);
    /* Host and device both reach it. */
    EXPECT(aclrtMemset(managed, 2 * MIB, 0x4B, 2 * MIB), ACL_SUCCESS);
    HOLDS(((unsigned char *)managed)[2 * MIB - 1] == 0x4B);
    EXPECT(aclrtFree(managed), ACL_SUCCESS);
    FAILS(aclrtFree(managed));

    aclrtPtrAttributes attributes;
    EXPECT(aclrtPointerGetAttributes(NULL, &attributes), ACL_ERROR_INVALID_PARAM);
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtPointerGetAttributes(dev, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 13 aclrtSetDeviceTaskAbortCallback ---- */

static int32_t abort_callback(int32_t deviceId, aclrtDeviceTaskAbortStage stage, uint32_t timeout,
                              void *args)
{
    (void)deviceId;
    (void)stage;
    (void)timeout;
    ++*(int *)args;
    return 0;
}

/* What the registered exception callback was told. */
static uint32_t g_seen_device = 0xFFFFFFFFu;
static uint32_t g_seen_stream = 0xFFFFFFFFu;
static uint32_t g_seen_code = 0xFFFFFFFFu;
static int g_seen_calls;

static void exception_callback(aclrtExceptionInfo *info)
{
    ++g_seen_calls;
    g_seen_device = aclrtGetDeviceIdFromExceptionInfo(info);
    g_seen_stream = aclrtGetStreamIdFromExceptionInfo(info);
    g_seen_code = aclrtGetErrorCodeFromExceptionInfo(info);
}

static void exception_section(void)
{
    /* A task failing on the other device: its device and stream, whichever thread waits. */
    void *far = NULL;
    int32_t far_id = -1;
    EXPECT(aclrtExceptionInfoCallbackRegister(exception_callback), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_far), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(g_far_stream, &far_id), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&far, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(npusimFailTask(g_far_stream, 1, ACL_ERROR_RT_AICORE_EXCEPTION), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(far, 64, 0, 64, g_far_stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(g_far_stream), ACL_ERROR_RT_AICORE_EXCEPTION);
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_seen_calls == 1 && g_seen_device == 1 && g_seen_stream == (uint32_t)far_id &&
          g_seen_code == ACL_ERROR_RT_AICORE_EXCEPTION);
    /* An Atlas A2 reports no AI Core error type in the detail: an AI Core exception is one of
     * the others. */
    aclrtErrorInfo verbose;
    memset(&verbose, 0, sizeof verbose);
    EXPECT(aclrtGetErrorVerbose(1, &verbose), ACL_SUCCESS);
    HOLDS(verbose.errorType == ACL_RT_ERROR_OTHERS);
    EXPECT(aclrtFree(far), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(g_primary), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackUnregister(exception_callback), ACL_SUCCESS);
    /* Unregistered twice: nothing to do, success. */
    EXPECT(aclrtExceptionInfoCallbackUnregister(exception_callback), ACL_SUCCESS);

    int calls = 0;
    /* The name is not empty; an unknown name unregistered is nothing to do. */
    FAILS(aclrtSetDeviceTaskAbortCallback("", abort_callback, &calls));
    EXPECT(aclrtSetDeviceTaskAbortCallback("mcfbf", abort_callback, &calls), ACL_SUCCESS);
    FAILS(aclrtSetDeviceTaskAbortCallback("mcfbf", abort_callback, &calls));
    /* Before and after the abort. */
    EXPECT(aclrtDeviceTaskAbort(0, 1000), ACL_SUCCESS);
    HOLDS(calls == 2);
    EXPECT(aclrtSetDeviceTaskAbortCallback("mcfbf", NULL, NULL), ACL_SUCCESS);
    /* Unregistered: the name is free again, the callback no longer called. */
    EXPECT(aclrtDeviceTaskAbort(0, 1000), ACL_SUCCESS);
    HOLDS(calls == 2);
    EXPECT(aclrtSetDeviceTaskAbortCallback("mcfbf", abort_callback, &calls), ACL_SUCCESS);
    EXPECT(aclrtSetDeviceTaskAbortCallback("mcfbf", NULL, NULL), ACL_SUCCESS);
    /* The abort stops the task running (a value wait) and drops the tasks queued behind it;
     * the stream takes new tasks afterwards. */
    aclrtStream stream = NULL;
    uint64_t *gate = NULL;
    void *dev = NULL;
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtMalloc((void **)&gate, 8, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMemset(gate, 8, 0, 8), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, 64, 1, 64), ACL_SUCCESS);
    EXPECT(aclrtValueWait(gate, 1, ACL_STREAM_WAIT_VALUE_EQ, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, 64, 7, 64, stream), ACL_SUCCESS);
    EXPECT(aclrtDeviceTaskAbort(0, 1000), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_NOT_READY;
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);
    uint64_t one = 1;
    EXPECT(aclrtMemcpy(gate, 8, &one, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 1);
    EXPECT(aclrtMemsetAsync(dev, 64, 9, 64, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 9);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
    EXPECT(aclrtFree(gate), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    /* aclrtDeviceTaskAbort: an unknown device; the longest timeout is 36 minutes. */
    EXPECT(aclrtDeviceTaskAbort(99, 1000), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtDeviceTaskAbort(0, 36u * 60u * 1000u), ACL_SUCCESS);
    /* The thread's last error: aclrtGetLastError clears it, aclrtPeekAtLastError does not. */
    FAILS(aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_NORMAL_ONLY));
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
    (void)aclGetRecentErrMsg();
    HOLDS(aclGetRecentErrMsg() == NULL);
}

int main(void)
{
    aclrtStream stream = NULL;
    /* A call that hangs ends the program rather than the test run. */
    alarm(300);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtGetCurrentContext(&g_far));
    CHECK(aclrtCreateStream(&g_far_stream));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetCurrentContext(&g_primary));
    CHECK(aclrtCreateStream(&g_gone));
    CHECK(aclrtDestroyStream(g_gone));
    CHECK(aclrtCreateStream(&stream));
    malloc_section();
    malloc_cached_section();
    malloc_with_cfg_section();
    free_section();
    free_with_dev_sync_section(stream);
    mem_info_section();
    usage_and_type_section();
    host_memory_section(stream);
    host_register_section();
    memcpy_section(stream);
    memcpy_2d_section(stream);
    descriptor_copy_section(stream);
    memset_section(stream);
    memset_d32_section(stream);
    virtual_memory_section();
    unified_addressing_section();
    exception_section();
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtSetCurrentContext(g_far));
    CHECK(aclrtDestroyStream(g_far_stream));
    CHECK(aclrtSetCurrentContext(g_primary));
    CHECK(aclrtResetDevice(1));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
