/*
 * Data buffers the way CANN's samples wrap model inputs and outputs (device memory described by
 * an aclDataBuffer, read back through its address and size), a PERSISTENT stream cleaned for
 * re-issuing, and the features an Atlas A2 lacks answering as on the hardware.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

int main(void)
{
    enum { BYTES = 256 };
    static uint8_t host[BYTES];
    void *dev = NULL;
    aclrtStream persistent = NULL;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    aclDataBuffer *input = aclCreateDataBuffer(dev, BYTES);
    if (input == NULL) {
        printf("aclCreateDataBuffer failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    memset(host, 0x5A, sizeof host);
    CHECK(aclrtMemcpy(aclGetDataBufferAddr(input), aclGetDataBufferSizeV2(input), host, BYTES,
                      ACL_MEMCPY_HOST_TO_DEVICE));
    memset(host, 0, sizeof host);
    CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("through the buffer: %zu bytes of %02x\n", aclGetDataBufferSizeV2(input), host[BYTES - 1]);
    CHECK(aclUpdateDataBuffer(input, NULL, 0));
    printf("emptied: %s, %zu\n", aclGetDataBufferAddr(input) == NULL ? "NULL" : "set",
           aclGetDataBufferSizeV2(input));
    CHECK(aclDestroyDataBuffer(input));
    printf("destroy again: %d\n", aclDestroyDataBuffer(input));
    (void)aclGetRecentErrMsg();

    CHECK(aclrtCreateStreamWithConfig(&persistent, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtMemsetAsync(dev, BYTES, 1, BYTES, persistent));
    CHECK(aclrtPersistentTaskClean(persistent));
    uint32_t task = 0;
    CHECK(aclrtMemsetAsync(dev, BYTES, 2, BYTES, persistent));
    CHECK(aclrtGetThreadLastTaskId(&task));
    printf("task id after clean: %u\n", task);
    CHECK(aclrtDestroyStream(persistent));

    aclrtCntNotify counted = NULL;
    printf("counted notify: %d\n", aclrtCntNotifyCreate(&counted, 0));
    uint32_t groups = 0;
    printf("group count: %d, group info: %s\n", aclrtGetGroupCount(&groups),
           aclrtCreateGroupInfo() == NULL ? "NULL" : "set");
    aclrtMbuf mbuf = NULL;
    printf("shared buffer: %d, %s\n", aclrtAllocBuf(&mbuf, 64), mbuf == NULL ? "NULL" : "set");
    printf("memory link of no handle: %d\n", aclrtMemMapSetLink(NULL, ACL_RT_MEM_ACCESS_LINK_HCCS));
    printf("L2 cache flush: %d\n", aclrtDeviceL2CacheFlush(NULL));
    (void)aclGetRecentErrMsg();

    CHECK(aclrtFree(dev));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("data buffer flow ok\n");
    return 0;
}
