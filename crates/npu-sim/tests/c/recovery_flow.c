/*
 * Recovering from a device fault in C, in the order CANN documents it: an abort callback is
 * registered; a memory error (UCE, injected with the simulator's control) fails a task; the
 * program reads the error detail, aborts every task of the device, repairs the memory and goes
 * on with the same streams.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"

static int pre_calls = 0;
static int post_calls = 0;

static int32_t on_abort(int32_t deviceId, aclrtDeviceTaskAbortStage stage, uint32_t timeout, void *args)
{
    (void)timeout;
    int *expected_device = (int *)args;
    if (deviceId != *expected_device) {
        return 1;
    }
    if (stage == ACL_RT_DEVICE_TASK_ABORT_PRE) {
        ++pre_calls;
    } else {
        ++post_calls;
    }
    return 0;
}

int main(void)
{
    enum { BYTES = 4096 };
    int32_t device = 0;
    aclrtStream stream = NULL;
    aclrtNotify notify = NULL;
    void *dev = NULL;
    static uint8_t host[BYTES];

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(device));
    CHECK(aclrtSetDeviceTaskAbortCallback("recovery_flow", on_abort, &device));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtCreateNotify(&notify, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dev, BYTES, 0x11, BYTES));

    /* The device's ECC finds an uncorrectable error in the second kilobyte. */
    CHECK(npusimInjectMemUce((uint8_t *)dev + 1024, 1024));
    CHECK(aclrtMemsetAsync(dev, BYTES, 0x22, BYTES, stream));
    printf("task on the bad memory: %d\n", aclrtSynchronizeStream(stream));
    (void)aclGetRecentErrMsg();

    aclrtErrorInfo info;
    memset(&info, 0, sizeof info);
    CHECK(aclrtGetErrorVerbose(device, &info));
    printf("error type %d, try repair %d, detail %d, ranges %zu, offset %td, len %zu\n", (int)info.errorType,
           info.tryRepair, info.hasDetail, info.detail.uceInfo.arraySize,
           (uint8_t *)info.detail.uceInfo.memUceInfoArray[0].addr - (uint8_t *)dev,
           info.detail.uceInfo.memUceInfoArray[0].len);

    /* Work queued behind a wait nobody satisfies: the abort drops it. */
    CHECK(aclrtWaitAndResetNotify(notify, stream, 0));
    CHECK(aclrtMemsetAsync(dev, 1024, 0x33, 1024, stream));
    CHECK(aclrtDeviceTaskAbort(device, 1000));
    printf("abort callbacks: pre %d, post %d\n", pre_calls, post_calls);

    CHECK(aclrtRepairError(device, &info));
    aclrtMemUceInfo left[MAX_MEM_UCE_INFO_ARRAY_SIZE];
    size_t count = 1;
    CHECK(aclrtGetMemUceInfo(device, left, MAX_MEM_UCE_INFO_ARRAY_SIZE, &count));
    printf("ranges left after repair: %zu\n", count);

    CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("bytes: first %02x, repaired %02x, last %02x\n", host[0], host[1024], host[BYTES - 1]);
    CHECK(aclrtMemsetAsync(dev, BYTES, 0x44, BYTES, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("after recovery: %02x\n", host[1024]);

    CHECK(aclrtSetDeviceTaskAbortCallback("recovery_flow", NULL, NULL));
    CHECK(aclrtFree(dev));
    CHECK(aclrtDestroyNotify(notify));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(device));
    CHECK(aclFinalize());
    printf("recovery flow ok\n");
    return 0;
}
