/*
 * The stream group from C, in the order CANN's samples use it: a kernel whose output is read
 * with a synchronous aclrtMemcpy at once, streams made from a configuration handle, notifies
 * and value waits ordering two streams, a timed event wait, stop then abort, a forced
 * destruction that still runs what was submitted, and an exception callback seeing a trap.
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"

static int32_t trap(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    (void)blockIdx;
    (void)blockNum;
    (void)args;
    return 1;
}

static uint32_t trapped_stream = 0xFFFFFFFFu;
static uint32_t trapped_code = 0;

static void on_exception(aclrtExceptionInfo *info)
{
    trapped_stream = aclrtGetStreamIdFromExceptionInfo(info);
    trapped_code = aclrtGetErrorCodeFromExceptionInfo(info);
}

static int all_bytes(const void *dev, size_t len, uint8_t value)
{
    uint8_t host[256];
    if (len > sizeof host || aclrtMemcpy(host, len, dev, len, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) {
        return 0;
    }
    for (size_t i = 0; i < len; ++i) {
        if (host[i] != value) {
            return 0;
        }
    }
    return 1;
}

int main(void)
{
    enum { N = 1024 };
    static float a[N], b[N], c[N];
    void *da = NULL, *db = NULL, *dc = NULL, *buf = NULL, *word = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;

    CHECK(aclrtSetDevice(0));
    for (int i = 0; i < N; ++i) {
        a[i] = (float)i;
        b[i] = 1.0f;
    }
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&da, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&db, sizeof b, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dc, sizeof c, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&buf, 256, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&word, 8, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(da, sizeof a, a, sizeof a, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpy(db, sizeof b, b, sizeof b, ACL_MEMCPY_HOST_TO_DEVICE));

    /* 1. Launch, then read the output synchronously without synchronising the stream. */
    /* Stream configuration handles are not supported on an Atlas A2: no handle is made. */
    printf("stream configuration handle: %s\n",
           aclrtCreateStreamConfigHandle() == NULL ? "not supported" : "made");
    aclrtStream s1 = NULL, s2 = NULL;
    CHECK(aclrtCreateStreamWithConfig(&s1, 2, ACL_STREAM_FAST_LAUNCH));
    CHECK(aclrtCreateStreamWithConfig(&s2, 2, ACL_STREAM_FAST_LAUNCH));
    npusimVectorAddArgs args = { (const float *)da, (const float *)db, (float *)dc, N };
    CHECK(aclrtLaunchKernelWithHostArgs(add, 4, s1, NULL, &args, sizeof args, NULL, 0));
    CHECK(aclrtMemcpy(c, sizeof c, dc, sizeof c, ACL_MEMCPY_DEVICE_TO_HOST));
    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        wrong += c[i] != a[i] + 1.0f;
    }
    printf("kernel output read at once: %d wrong\n", wrong);

    /* 2. A notify orders s2 after s1. */
    aclrtNotify notify = NULL;
    CHECK(aclrtCreateNotify(&notify, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtWaitAndResetNotify(notify, s2, 0));
    CHECK(aclrtMemsetAsync(buf, 256, 2, 256, s2));
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    CHECK(aclrtStreamQuery(s2, &status));
    printf("s2 waiting for the notify: %s\n", status == ACL_STREAM_STATUS_NOT_READY ? "yes" : "no");
    CHECK(aclrtMemsetAsync(buf, 256, 1, 256, s1));
    CHECK(aclrtRecordNotify(notify, s1));
    CHECK(aclrtSynchronizeStream(s2));
    printf("after the notify: %s\n", all_bytes(buf, 256, 2) ? "2" : "wrong");
    CHECK(aclrtDestroyNotify(notify));

    /* 3. A value wait releases s2 when s1 writes the word. */
    CHECK(aclrtValueWait(word, 3, ACL_STREAM_WAIT_VALUE_GEQ, s2));
    CHECK(aclrtMemsetAsync(buf, 256, 4, 256, s2));
    CHECK(aclrtValueWrite(word, 3, 0, s1));
    CHECK(aclrtSynchronizeStream(s2));
    printf("after the value write: %s\n", all_bytes(buf, 256, 4) ? "4" : "wrong");

    /* 4. A timed wait for an event that never completes fails the waiting stream. */
    aclrtEvent event = NULL;
    CHECK(aclrtCreateEvent(&event));
    aclrtNotify never = NULL;
    CHECK(aclrtCreateNotify(&never, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtWaitAndResetNotify(never, s1, 0));
    CHECK(aclrtRecordEvent(event, s1));
    CHECK(aclrtStreamWaitEventWithTimeout(s2, event, 1));
    printf("timed wait: %d\n", aclrtSynchronizeStream(s2));

    /* 5. Stop then abort s1 (still held by the notify), then use it again. */
    CHECK(aclrtMemsetAsync(buf, 256, 5, 256, s1));
    CHECK(aclrtStreamStop(s1));
    printf("sync after stop: %d\n", aclrtSynchronizeStream(s1));
    CHECK(aclrtStreamAbort(s1));
    printf("event of the aborted work: %d\n", aclrtSynchronizeEvent(event));
    CHECK(aclrtMemsetAsync(buf, 256, 6, 256, s1));
    CHECK(aclrtSynchronizeStream(s1));
    printf("after abort: %s\n", all_bytes(buf, 256, 6) ? "6" : "wrong");

    /* 6. A forced destruction runs the work already submitted. */
    CHECK(aclrtMemsetAsync(buf, 256, 7, 256, s2));
    CHECK(aclrtDestroyStreamForce(s2));
    printf("after destroy force: %s\n", all_bytes(buf, 256, 7) ? "7" : "wrong");

    /* 7. An exception callback sees a trapping kernel. */
    const char *names[] = { "c_trap" };
    uint8_t image[64];
    size_t size = 0;
    aclrtBinHandle trap_bin = NULL;
    aclrtFuncHandle trap_fn = NULL;
    CHECK(npusimRegisterKernel("c_trap", trap));
    CHECK(npusimRegistryImage(names, 1, image, sizeof image, &size));
    CHECK(aclrtBinaryLoadFromData(image, size, NULL, &trap_bin));
    CHECK(aclrtBinaryGetFunction(trap_bin, "c_trap", &trap_fn));
    CHECK(aclrtExceptionInfoCallbackRegister(on_exception));
    CHECK(aclrtLaunchKernelWithHostArgs(trap_fn, 1, s1, NULL, NULL, 0, NULL, 0));
    aclError trapped = aclrtSynchronizeStream(s1);
    int32_t s1_id = -1;
    CHECK(aclrtStreamGetId(s1, &s1_id));
    printf("trap: sync %d, callback saw stream %s with %u\n", trapped,
           trapped_stream == (uint32_t)s1_id ? "s1" : "another", trapped_code);
    CHECK(aclrtExceptionInfoCallbackUnregister(on_exception));
    aclrtErrorInfo verbose;
    CHECK(aclrtGetErrorVerbose(0, &verbose));
    printf("error verbose type: %d\n", (int)verbose.errorType);

    CHECK(aclrtDestroyStream(s1));
    CHECK(aclrtDestroyNotify(never));
    CHECK(aclrtDestroyEvent(event));
    CHECK(aclrtBinaryUnLoad(trap_bin));
    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtFree(da));
    CHECK(aclrtFree(db));
    CHECK(aclrtFree(dc));
    CHECK(aclrtFree(buf));
    CHECK(aclrtFree(word));
    CHECK(aclrtResetDevice(0));
    printf("stream flow ok\n");
    return 0;
}
