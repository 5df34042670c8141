/*
 * The "typical flow" of an AscendCL program: set a device, create a stream, allocate pinned
 * host and device memory, copy to the device, queue asynchronous work on the stream,
 * synchronise, copy back, free and reset. Compiled against npu-sim's header and linked to its
 * libascendcl.so by tests/c_programs.rs, which compares the output byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

enum { BYTES = 1 << 20, MEMSET_BYTES = 4096, MEMSET_VALUE = 0xAB };

/* FNV-1a over the bytes; the Rust side computes the same over the expected data. */
static uint64_t fnv1a(const uint8_t *data, size_t len)
{
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; ++i) {
        hash = (hash ^ data[i]) * 0x100000001b3ULL;
    }
    return hash;
}

int main(void)
{
    aclrtStream stream = NULL;
    void *host = NULL;
    void *dev = NULL;
    void *dev2 = NULL;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));                                             /* 1 */
    CHECK(aclrtCreateStream(&stream));                                    /* 2 */
    CHECK(aclrtMallocHost(&host, BYTES));                                 /* 3 */
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));           /* 4 */
    CHECK(aclrtMalloc(&dev2, BYTES, ACL_MEM_MALLOC_NORMAL_ONLY));

    uint8_t *bytes = (uint8_t *)host;
    for (size_t i = 0; i < BYTES; ++i) {
        bytes[i] = (uint8_t)(i * 7 + 3);
    }
    CHECK(aclrtMemcpy(dev, BYTES, host, BYTES, ACL_MEMCPY_HOST_TO_DEVICE)); /* 5 */

    /* 6: asynchronous work: a device-to-device copy, a memset over its head, and an event. */
    aclrtEvent done = NULL;
    CHECK(aclrtCreateEvent(&done));
    CHECK(aclrtMemcpyAsync(dev2, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
    CHECK(aclrtMemsetAsync(dev2, BYTES, MEMSET_VALUE, MEMSET_BYTES, stream));
    CHECK(aclrtRecordEvent(done, stream));

    CHECK(aclrtSynchronizeStream(stream));                                /* 7 */
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    CHECK(aclrtQueryEventStatus(done, &status));

    memset(host, 0, BYTES);
    CHECK(aclrtMemcpy(host, BYTES, dev2, BYTES, ACL_MEMCPY_DEVICE_TO_HOST)); /* 8 */

    size_t mismatches = 0;
    for (size_t i = 0; i < BYTES; ++i) {
        uint8_t expected = i < MEMSET_BYTES ? MEMSET_VALUE : (uint8_t)(i * 7 + 3);
        mismatches += bytes[i] != expected;
    }
    printf("event status after sync: %d\n", (int)status);
    printf("bytes: %d, mismatches: %zu\n", BYTES, mismatches);
    printf("fnv1a: %016llx\n", (unsigned long long)fnv1a(bytes, BYTES));

    CHECK(aclrtDestroyEvent(done));
    CHECK(aclrtFree(dev));                                                /* 9 */
    CHECK(aclrtFree(dev2));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDeviceForce(0));                                      /* 10 */
    CHECK(aclFinalize());
    printf("typical flow ok\n");
    return 0;
}
