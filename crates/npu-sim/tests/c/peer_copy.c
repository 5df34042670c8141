/*
 * The two-device peer-copy flow: check peer access, enable it both ways, allocate P2P memory on
 * both devices, copy across devices in both directions, disable peer access (after which a
 * cross-device copy is refused). tests/c_programs.rs compares the output byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

enum { BYTES = 256 * 1024 };

static size_t count_not(const uint8_t *data, size_t len, uint8_t value)
{
    size_t n = 0;
    for (size_t i = 0; i < len; ++i) {
        n += data[i] != value;
    }
    return n;
}

int main(void)
{
    int32_t can01 = 0, can10 = 0;
    void *dev0 = NULL, *dev1 = NULL, *host = NULL;

    CHECK(aclrtDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(aclrtDeviceCanAccessPeer(&can10, 1, 0));
    printf("can access peer: 0->1 %d, 1->0 %d\n", can01, can10);

    CHECK(aclrtSetDevice(0));
    CHECK(aclrtDeviceEnablePeerAccess(1, 0));
    CHECK(aclrtMalloc(&dev0, BYTES, ACL_MEM_MALLOC_HUGE_FIRST_P2P));
    CHECK(aclrtMallocHost(&host, BYTES));
    CHECK(aclrtMemset(dev0, BYTES, 103, BYTES));

    CHECK(aclrtSetDevice(1));
    CHECK(aclrtDeviceEnablePeerAccess(0, 0));
    CHECK(aclrtMalloc(&dev1, BYTES, ACL_MEM_MALLOC_HUGE_FIRST_P2P));
    CHECK(aclrtMemset(dev1, BYTES, 0, BYTES));

    /* Device 0 -> device 1, issued on device 0. */
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtMemcpy(dev1, BYTES, dev0, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE));
    CHECK(aclrtSetDevice(1));
    memset(host, 0, BYTES);
    CHECK(aclrtMemcpy(host, BYTES, dev1, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("device 1 after copy from device 0: %zu bytes differ from 103\n", count_not(host, BYTES, 103));

    /* Device 1 -> device 0, issued on device 1 through a stream. */
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMemsetAsync(dev1, BYTES, 42, BYTES, stream));
    CHECK(aclrtMemcpyAsync(dev0, BYTES, dev1, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtSetDevice(0));
    memset(host, 0, BYTES);
    CHECK(aclrtMemcpy(host, BYTES, dev0, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("device 0 after copy from device 1: %zu bytes differ from 42\n", count_not(host, BYTES, 42));

    CHECK(aclrtDeviceDisablePeerAccess(1));
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtDeviceDisablePeerAccess(0));
    CHECK(aclrtSetDevice(0));
    aclError refused = aclrtMemcpy(dev1, BYTES, dev0, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE);
    printf("copy after disabling peer access: %d\n", refused);

    CHECK(aclrtFree(dev0));
    CHECK(aclrtFree(dev1));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtResetDevice(0));
    CHECK(aclrtResetDevice(1));
    CHECK(aclrtResetDevice(1));
    printf("peer copy ok\n");
    return 0;
}
