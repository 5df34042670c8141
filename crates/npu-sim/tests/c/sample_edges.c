/*
 * The flows of CANN's runtime samples (device, context, stream, event, memory, host memory and
 * callback management) walked through the edge cases the API reference documents for them:
 * NULL and out-of-range arguments, zero sizes, copy kinds a function does not take, 2D copies
 * whose pitches overflow or whose last row ends the allocation, destroyed handles, another
 * context's stream, timeouts of -1, 0 and expiring ones, the Set/Reset pairing rules, the
 * event flag rules, the callback subscription rules. A stream is held up by a gate (a host
 * function that waits until the program opens it) wherever a check needs pending work, so
 * nothing depends on timing. Prints a line for each mismatch, then how many checks ran.
 * Compiled by tests/c_programs.rs (also against CANN's own headers), which compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* ---- a gate: a host function that holds its stream until the program opens it ---- */

static atomic_int g_gate_open;

static void gate(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_gate_open)) {
        sleep_ms(1);
    }
}

/* Queues a closed gate on `stream`. */
static aclError close_gate(aclrtStream stream)
{
    atomic_store(&g_gate_open, 0);
    return aclrtLaunchHostFunc(stream, gate, NULL);
}

static void open_gate(void) { atomic_store(&g_gate_open, 1); }

static void sleep_fn(void *ms) { sleep_ms((long)(intptr_t)ms); }

/* ---- devices and contexts (04, 05) ---- */

static int devices_and_contexts(void)
{
    int32_t device = -7;
    uint32_t streams = 0;
    aclrtContext first = NULL, second = NULL, current = NULL;
    aclrtStream on_first = NULL;

    /* aclrtResetDevice counts references; aclrtResetDeviceForce releases them all; mixed, the
     * force must come last, and a reset of a released device fails. */
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtSetDevice(1));
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtSetDevice(1));
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    EXPECT(aclrtResetDeviceForce(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    CHECK(aclrtSetDevice(1));
    CHECK(aclrtSetDevice(1));
    EXPECT(aclrtResetDeviceForce(1), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    EXPECT(aclrtResetDevice(2), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetDevice(&device), ACL_ERROR_RT_CONTEXT_NULL);
    HOLDS(device == -7);

    /* The first aclrtCreateContext of a device binds its default stream as well as the
     * context's own; aclrtSetDevice then reuses the device's. */
    CHECK(aclrtCreateContext(&first, 0));
    CHECK(aclrtGetCurrentContext(&current));
    HOLDS(current == first);
    CHECK(aclrtGetStreamAvailableNum(&streams));
    HOLDS(streams == 1984 - 2);
    CHECK(aclrtCreateStream(&on_first));
    CHECK(aclrtCreateContext(&second, 1));
    CHECK(aclrtGetDevice(&device));
    HOLDS(device == 1);
    /* A stream is destroyed from its own context. */
    EXPECT(aclrtDestroyStream(on_first), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtDestroyStreamForce(on_first), ACL_ERROR_RT_STREAM_CONTEXT);
    CHECK(aclrtSetCurrentContext(first));
    CHECK(aclrtGetDevice(&device));
    HOLDS(device == 0);
    EXPECT(aclrtDestroyStream(on_first), ACL_SUCCESS);
    EXPECT(aclrtSetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyContext(second), ACL_SUCCESS);
    EXPECT(aclrtDestroyContext(second), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyContext(first), ACL_SUCCESS);
    EXPECT(aclrtGetCurrentContext(&current), ACL_ERROR_RT_CONTEXT_NULL);
    return 0;
}

/* ---- streams (06) ---- */

static int streams(void)
{
    aclrtStream stream = NULL, other = NULL, persistent = NULL, limit_test[1984];
    uint32_t flags = 99, priority = 99, left = 0;
    int32_t id = -1;
    int made = 0;
    aclError refused = ACL_SUCCESS;

    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetStreamAvailableNum(&left));
    HOLDS(left == 1984 - 1);
    /* A flag that is no stream flag makes an ordinary stream. */
    CHECK(aclrtCreateStreamWithConfig(&other, 0, 0x100));
    CHECK(aclrtStreamGetFlags(other, &flags));
    HOLDS(flags == 0);
    CHECK(aclrtDestroyStream(other));
    CHECK(aclrtCreateStreamWithConfig(&other, 0, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC));
    CHECK(aclrtStreamGetFlags(other, &flags));
    HOLDS(flags == (ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC));
    /* NULL is the default stream for the queries. */
    EXPECT(aclrtStreamGetId(NULL, &id), ACL_SUCCESS);
    HOLDS(id >= 0);
    EXPECT(aclrtStreamGetPriority(NULL, &priority), ACL_SUCCESS);
    HOLDS(priority == 0);
    EXPECT(aclrtStreamGetFlags(NULL, &flags), ACL_SUCCESS);

    /* At most 1984 streams, the default one and `other` included. */
    for (made = 0; made < 1984; ++made) {
        refused = aclrtCreateStream(&limit_test[made]);
        if (refused != ACL_SUCCESS) {
            break;
        }
    }
    HOLDS(made == 1984 - 2);
    expect("the stream past the limit", refused, ACL_ERROR_RT_NO_STREAM_RESOURCE);
    for (int i = 0; i < made; ++i) {
        CHECK(aclrtDestroyStream(limit_test[i]));
    }

    /* A persistent, device-use-only or CPU-schedule stream's synchronisation does nothing and
     * returns success at once: with work held up, and stopped. */
    CHECK(aclrtCreateStreamWithConfig(&persistent, 0, ACL_STREAM_PERSISTENT));
    EXPECT(aclrtSynchronizeStream(persistent), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(persistent, 10), ACL_SUCCESS);
    CHECK(aclrtDestroyStream(persistent));
    uint32_t unsynced[2] = {ACL_STREAM_DEVICE_USE_ONLY, ACL_STREAM_CPU_SCHEDULE};
    for (int i = 0; i < 2; ++i) {
        CHECK(aclrtCreateStreamWithConfig(&persistent, 0, unsynced[i]));
        CHECK(close_gate(persistent));
        EXPECT(aclrtSynchronizeStreamWithTimeout(persistent, 10), ACL_SUCCESS);
        EXPECT(aclrtStreamStop(persistent), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(persistent), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStreamWithTimeout(persistent, 10), ACL_SUCCESS);
        open_gate();
        EXPECT(aclrtStreamAbort(persistent), ACL_SUCCESS);
        CHECK(aclrtDestroyStream(persistent));
    }

    /* Timeouts: -1 waits for ever, a positive one in ms, 0 and other negatives are refused;
     * an expired stream or device synchronisation is ACL_ERROR_RT_STREAM_SYNC_TIMEOUT. */
    CHECK(aclrtCreateStream(&stream));
    EXPECT(aclrtSynchronizeStreamWithTimeout(stream, -1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(stream, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeStreamWithTimeout(stream, -2), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(-2), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(close_gate(stream));
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    CHECK(aclrtStreamQuery(stream, &status));
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtSynchronizeStreamWithTimeout(stream, 10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    open_gate();
    EXPECT(aclrtSynchronizeStreamWithTimeout(stream, -1), ACL_SUCCESS);
    CHECK(aclrtStreamQuery(stream, &status));
    HOLDS(status == ACL_STREAM_STATUS_COMPLETE);

    CHECK(aclrtDestroyStream(other));
    CHECK(aclrtDestroyStream(stream));

    /* The failure mode is set once per stream; the default stream takes it on an Atlas A2.
     * Stopping on a failure is then the mode of the whole context: a context of its own. */
    aclrtContext primary = NULL, stopping = NULL;
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&stopping, 0));
    CHECK(aclrtCreateStream(&other));
    EXPECT(aclrtSetStreamFailureMode(other, ACL_STOP_ON_FAILURE), ACL_SUCCESS);
    EXPECT(aclrtSetStreamFailureMode(other, ACL_CONTINUE_ON_FAILURE), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSetStreamFailureMode(NULL, ACL_STOP_ON_FAILURE), ACL_SUCCESS);
    EXPECT(aclrtSetStreamFailureMode(other, (uint64_t)2), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtDestroyStream(other));
    CHECK(aclrtDestroyContext(stopping));
    CHECK(aclrtSetCurrentContext(primary));
    return 0;
}

/* ---- stream abort and destruction (06) ---- */

static int flag_set;

static void set_flag(void *arg)
{
    (void)arg;
    flag_set = 1;
}

static int abort_and_destroy(void)
{
    aclrtStream held = NULL, waiting = NULL;
    aclrtEvent gate_done = NULL, after = NULL;

    CHECK(aclrtCreateStream(&held));
    CHECK(aclrtCreateStream(&waiting));
    CHECK(aclrtCreateEvent(&gate_done));
    CHECK(aclrtCreateEvent(&after));
    /* `waiting` waits for work held by the gate; aborting it drops its record, and a
     * synchronisation on that record reports the abort. */
    CHECK(close_gate(held));
    CHECK(aclrtRecordEvent(gate_done, held));
    CHECK(aclrtStreamWaitEvent(waiting, gate_done));
    CHECK(aclrtRecordEvent(after, waiting));
    EXPECT(aclrtStreamAbort(waiting), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(after), ACL_ERROR_RT_STREAM_ABORT);
    /* The stream takes work again. */
    flag_set = 0;
    CHECK(aclrtLaunchHostFunc(waiting, set_flag, NULL));
    EXPECT(aclrtSynchronizeStream(waiting), ACL_SUCCESS);
    HOLDS(flag_set == 1);
    open_gate();
    CHECK(aclrtSynchronizeStream(held));

    /* aclrtDestroyStream waits for the stream's tasks; aclrtDestroyStreamForce does not. */
    flag_set = 0;
    CHECK(aclrtLaunchHostFunc(held, sleep_fn, (void *)(intptr_t)50));
    CHECK(aclrtLaunchHostFunc(held, set_flag, NULL));
    EXPECT(aclrtDestroyStream(held), ACL_SUCCESS);
    HOLDS(flag_set == 1);
    flag_set = 0;
    CHECK(aclrtLaunchHostFunc(waiting, sleep_fn, (void *)(intptr_t)50));
    CHECK(aclrtLaunchHostFunc(waiting, set_flag, NULL));
    EXPECT(aclrtDestroyStreamForce(waiting), ACL_SUCCESS);
    sleep_ms(150);
    HOLDS(flag_set == 0);
    CHECK(aclrtDestroyEvent(gate_done));
    CHECK(aclrtDestroyEvent(after));
    return 0;
}

/* ---- events (07) ---- */

static int event_flags(void)
{
    aclrtEvent event = NULL, timeline = NULL, ex = NULL, ipc = NULL, device_only = NULL;
    aclrtEvent sync = NULL, other = NULL;
    aclrtStream stream = NULL, gone = NULL;
    aclrtEventStatus legacy_status;
    aclrtEventWaitStatus wait_status;

    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtCreateStream(&gone));
    CHECK(aclrtDestroyStream(gone));
    /* EXTERNAL and IPC stand alone; DEVICE_USE_ONLY is an Atlas A2's. */
    EXPECT(aclrtCreateEventWithFlag(&event, ACL_EVENT_EXTERNAL | ACL_EVENT_SYNC),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventExWithFlag(&event, ACL_EVENT_IPC | ACL_EVENT_SYNC),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateEventWithFlag(&device_only, ACL_EVENT_DEVICE_USE_ONLY), ACL_SUCCESS);
    /* Without ACL_EVENT_SYNC an event is neither reset nor waited for. */
    CHECK(aclrtCreateEventWithFlag(&timeline, ACL_EVENT_TIME_LINE));
    EXPECT(aclrtResetEvent(timeline, stream), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtStreamWaitEvent(stream, timeline), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK(aclrtCreateEventExWithFlag(&ex, ACL_EVENT_TIME_LINE));
    EXPECT(aclrtStreamWaitEvent(stream, ex), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EXPECT(aclrtQueryEvent(ex, &legacy_status), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
#pragma GCC diagnostic pop
    EXPECT(aclrtQueryEventWaitStatus(ex, &wait_status), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    /* An IPC event has no ID, timestamp or elapsed time. */
    CHECK(aclrtCreateEventExWithFlag(&ipc, ACL_EVENT_IPC));
    uint32_t id = 0;
    uint64_t stamp = 0;
    float ms = 0;
    EXPECT(aclrtGetEventId(ipc, &id), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtEventGetTimestamp(ipc, &stamp), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtEventElapsedTime(&ms, ipc, ipc), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    /* The record and wait flags: DEFAULT or EXTERNAL; EXTERNAL only in a capture. The first
     * call fixes an event's flag at its entry, even when it is refused. */
    CHECK(aclrtCreateEventExWithFlag(&sync, ACL_EVENT_SYNC));
    EXPECT(aclrtRecordEventWithFlag(sync, stream, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithFlag(stream, sync, 0, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordEventWithFlag(sync, gone, ACL_EVENT_RECORD_EXTERNAL),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordEventWithFlag(sync, stream, ACL_EVENT_RECORD_DEFAULT),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtRecordEventWithFlag(sync, stream, ACL_EVENT_RECORD_EXTERNAL),
           ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    EXPECT(aclrtStreamWaitEventWithFlag(stream, sync, 1, ACL_EVENT_WAIT_EXTERNAL),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtStreamWaitEventWithFlag(stream, sync, 0, ACL_EVENT_WAIT_DEFAULT),
           ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtCreateEventExWithFlag(&other, ACL_EVENT_SYNC));
    EXPECT(aclrtRecordEventWithFlag(other, stream, ACL_EVENT_RECORD_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEventWithFlag(stream, other, 1, ACL_EVENT_WAIT_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);

    /* Destroyed events are refused; a pending one may be destroyed at once. */
    CHECK(aclrtCreateEvent(&event));
    CHECK(close_gate(stream));
    CHECK(aclrtRecordEvent(event, stream));
    EXPECT(aclrtDestroyEvent(event), ACL_SUCCESS);
    open_gate();
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(event, stream), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyEvent(event), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyEvent(NULL), ACL_ERROR_INVALID_PARAM);

    CHECK(aclrtDestroyEvent(timeline));
    CHECK(aclrtDestroyEvent(ex));
    CHECK(aclrtDestroyEvent(ipc));
    CHECK(aclrtDestroyEvent(device_only));
    CHECK(aclrtDestroyEvent(sync));
    CHECK(aclrtDestroyEvent(other));
    CHECK(aclrtDestroyStream(stream));
    return 0;
}

static int event_timing_and_waits(void)
{
    aclrtStream first = NULL, second = NULL;
    aclrtEvent start = NULL, end = NULL, signal = NULL;
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclrtEventWaitStatus waited = ACL_EVENT_WAIT_STATUS_RESERVED;
    float ms = -1.0f;
    uint64_t t_start = 0, t_end = 0;

    CHECK(aclrtCreateStream(&first));
    CHECK(aclrtCreateStream(&second));
    CHECK(aclrtCreateEvent(&start));
    CHECK(aclrtCreateEvent(&end));
    CHECK(aclrtCreateEventWithFlag(&signal, ACL_EVENT_SYNC));
    /* Before any record there is no time to give. */
    EXPECT(aclrtEventElapsedTime(&ms, start, end), ACL_ERROR_RT_INTERNAL_ERROR);
    EXPECT(aclrtEventGetTimestamp(start, &t_start), ACL_ERROR_RT_INTERNAL_ERROR);
    HOLDS(ms == -1.0f && t_start == 0);

    /* A record pending behind the gate: not ready, its time invalid, an expiring event
     * synchronisation ACL_ERROR_RT_EVENT_SYNC_TIMEOUT; a second stream waits for it. */
    CHECK(aclrtRecordEvent(start, first));
    CHECK(close_gate(first));
    CHECK(aclrtRecordEvent(signal, first));
    CHECK(aclrtStreamWaitEvent(second, signal));
    CHECK(aclrtRecordEvent(end, second));
    CHECK(aclrtQueryEventStatus(end, &recorded));
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    CHECK(aclrtQueryEventWaitStatus(signal, &waited));
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_NOT_READY);
    EXPECT(aclrtEventElapsedTime(&ms, start, end), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);
    EXPECT(aclrtSynchronizeEventWithTimeout(end, 10), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
    EXPECT(aclrtSynchronizeEventWithTimeout(end, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSynchronizeEventWithTimeout(end, -2), ACL_ERROR_RT_PARAM_INVALID);
    sleep_ms(20);
    open_gate();
    EXPECT(aclrtSynchronizeEventWithTimeout(end, -1), ACL_SUCCESS);
    CHECK(aclrtQueryEventStatus(end, &recorded));
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    CHECK(aclrtQueryEventWaitStatus(signal, &waited));
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_COMPLETE);
    /* Elapsed time across the two streams, in ms, agrees with the timestamps (in us). */
    EXPECT(aclrtEventElapsedTime(&ms, start, end), ACL_SUCCESS);
    CHECK(aclrtEventGetTimestamp(start, &t_start));
    CHECK(aclrtEventGetTimestamp(end, &t_end));
    HOLDS(ms >= 20.0f && t_end > t_start);
    double from_stamps = (double)(t_end - t_start) / 1000.0;
    HOLDS(from_stamps > ms - 1.0 && from_stamps < ms + 1.0);
    float kept = ms;
    EXPECT(aclrtEventElapsedTime(&ms, end, start), ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL);
    HOLDS(ms == kept);

    /* A reset event, once its reset has run, is waited for again. */
    CHECK(aclrtResetEvent(signal, second));
    CHECK(aclrtSynchronizeStream(second));
    CHECK(aclrtQueryEventWaitStatus(signal, &waited));
    HOLDS(waited == ACL_EVENT_WAIT_STATUS_NOT_READY);

    /* A wait whose record stays pending past its timeout (seconds) fails the waiting
     * stream's synchronisation with ACL_ERROR_RT_WAIT_TIMEOUT; so does any wait once
     * aclrtSetOpWaitTimeout set one, until it is set back to 0. Negative → refused. */
    EXPECT(aclrtStreamWaitEventWithTimeout(second, signal, -1), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(close_gate(first));
    CHECK(aclrtRecordEvent(signal, first));
    EXPECT(aclrtStreamWaitEventWithTimeout(second, signal, 1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_ERROR_RT_WAIT_TIMEOUT);
    CHECK(aclrtSetOpWaitTimeout(1));
    CHECK(aclrtStreamWaitEvent(second, signal));
    EXPECT(aclrtSynchronizeStream(second), ACL_ERROR_RT_WAIT_TIMEOUT);
    CHECK(aclrtSetOpWaitTimeout(0));
    open_gate();
    CHECK(aclrtSynchronizeStream(first));
    CHECK(aclrtStreamWaitEvent(second, signal));
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);

    CHECK(aclrtDestroyEvent(start));
    CHECK(aclrtDestroyEvent(end));
    CHECK(aclrtDestroyEvent(signal));
    CHECK(aclrtDestroyStream(first));
    CHECK(aclrtDestroyStream(second));
    return 0;
}

/* ---- device memory and copies (11-01, 11-03) ---- */

enum { SIZE = 4096 };

static int copies(void)
{
    void *dev = NULL, *dev2 = NULL, *pinned = NULL, *odd = NULL;
    unsigned char pageable[SIZE];
    aclrtStream stream = NULL;

    CHECK(aclrtCreateStream(&stream));
    /* A policy outside aclrtMemMallocPolicy is served by size; aclrtMalloc is 64-aligned. */
    EXPECT(aclrtMalloc(&odd, 64, (aclrtMemMallocPolicy)99), ACL_SUCCESS);
    HOLDS(((uintptr_t)odd & 63) == 0);
    CHECK(aclrtFree(odd));
    EXPECT(aclrtMallocCached(&odd, 64, ACL_MEM_MALLOC_HUGE1G_ONLY), ACL_SUCCESS);
    CHECK(aclrtFree(odd));
    CHECK(aclrtMalloc(&dev, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev2, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&pinned, SIZE));

    /* The synchronous copy's kind is reserved: the pointers decide. */
    CHECK(aclrtMemset(dev, SIZE, 1, SIZE));
    EXPECT(aclrtMemcpy(pageable, SIZE, dev, SIZE, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    HOLDS(pageable[SIZE - 1] == 1);
    EXPECT(aclrtMemcpy(dev2, SIZE, dev, SIZE, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(dev, SIZE, pinned, SIZE + 1, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpy(dev, SIZE, NULL, SIZE, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy(dev, SIZE, pinned, SIZE, (aclrtMemcpyKind)99), ACL_ERROR_INVALID_PARAM);

    /* aclrtMemcpy and aclrtMemset run at once, without synchronizing any stream. */
    CHECK(close_gate(stream));
    CHECK(aclrtMemsetAsync(dev, SIZE, 2, SIZE, stream));
    EXPECT(aclrtMemcpy(pageable, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(pageable[0] == 1);
    /* An async copy into pinned memory is queued; into pageable memory it is done once the
     * call returns, after the stream's earlier work. */
    memset(pinned, 0, SIZE);
    CHECK(aclrtMemcpyAsync(pinned, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    HOLDS(((unsigned char *)pinned)[0] == 0);
    open_gate();
    EXPECT(aclrtMemcpyAsync(pageable, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    HOLDS(pageable[0] == 2 && pageable[SIZE - 1] == 2);
    CHECK(aclrtSynchronizeStream(stream));
    HOLDS(((unsigned char *)pinned)[0] == 2);
    /* With pinned memory the pointers correct the kind; pageable memory must match it. */
    EXPECT(aclrtMemcpyAsync(dev, SIZE, pinned, SIZE, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(dev, SIZE, pageable, SIZE, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsync(dev2, SIZE / 2, dev, SIZE, ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsync(dev2, SIZE, dev, 0, ACL_MEMCPY_DEVICE_TO_DEVICE, stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(dev2, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_DEVICE, NULL),
           ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtSynchronizeStream(NULL));

    /* Memset: count within maxCount; 0 bytes do nothing; a value above 255 sets its low byte. */
    EXPECT(aclrtMemset(dev, SIZE, 0, SIZE + 1), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemset(dev, SIZE, 0, 0), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, SIZE, 0x1ab, SIZE), ACL_SUCCESS);
    CHECK(aclrtMemcpy(pageable, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(pageable[7] == 0xab);
    EXPECT(aclrtMemsetAsync(pinned, SIZE, 3, SIZE, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(dev, SIZE, 0, 0, stream), ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream));
    HOLDS(((unsigned char *)pinned)[SIZE - 1] == 3);
    /* aclrtMemsetD32: memSize >= 4 * N, memory of aclrtMalloc or aclrtMallocHost only; the
     * async form fills host memory at once and takes the default stream for NULL. */
    EXPECT(aclrtMemsetD32(dev, SIZE, 7, SIZE / 4), ACL_SUCCESS);
    EXPECT(aclrtMemsetD32(dev, SIZE - 1, 7, SIZE / 4), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemsetD32(pageable, SIZE, 7, SIZE / 4), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(close_gate(stream));
    EXPECT(aclrtMemsetD32Async(pinned, SIZE, 0x01020304u, SIZE / 4, stream), ACL_SUCCESS);
    HOLDS(((uint32_t *)pinned)[SIZE / 4 - 1] == 0x01020304u);
    open_gate();
    EXPECT(aclrtMemsetD32Async(dev, SIZE, 9, SIZE / 4, NULL), ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL));
    CHECK(aclrtMemcpy(pageable, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST));
    uint32_t word = 0;
    memcpy(&word, pageable + SIZE - 4, 4);
    HOLDS(word == 9);
    CHECK(aclrtSynchronizeStream(stream));

    CHECK(aclrtFree(dev));
    CHECK(aclrtFree(dev2));
    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtDestroyStream(stream));
    return 0;
}

static int two_dimensional_copies(void)
{
    enum { PITCH = 100, WIDTH = 40, ROWS = 3, EXACT = PITCH * (ROWS - 1) + WIDTH };
    void *dev = NULL, *dev2 = NULL, *pinned = NULL, *wide = NULL, *wide_host = NULL;
    unsigned char pageable[EXACT];
    aclrtStream stream = NULL;

    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMalloc(&dev, EXACT, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev2, EXACT, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&pinned, EXACT));
    for (int i = 0; i < EXACT; ++i) {
        ((unsigned char *)pinned)[i] = (unsigned char)i;
    }
    /* The last row needs only its width: a matrix ending the allocation is copied. */
    EXPECT(aclrtMemcpy2d(dev, PITCH, pinned, PITCH, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpy2dAsync(dev2, PITCH, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_DEVICE,
                              stream),
           ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream));
    memset(pageable, 0, sizeof pageable);
    EXPECT(aclrtMemcpy2d(pageable, PITCH, dev2, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(pageable[2 * PITCH] == 2 * PITCH && pageable[2 * PITCH + WIDTH - 1] ==
                                                 (unsigned char)(2 * PITCH + WIDTH - 1));
    HOLDS(pageable[WIDTH] == 0);
    /* Widths: within both pitches and 5,000,000; heights within 5,242,880; rows past the
     * allocation or a pitch times the height overflowing are refused. */
    EXPECT(aclrtMemcpy2d(dev, PITCH, pinned, PITCH, PITCH + 1, 1, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev, PITCH, pinned, WIDTH - 1, WIDTH, 1,
                              ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2d(dev, PITCH, pinned, PITCH, WIDTH, 5242881, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpy2d(dev, PITCH, pinned, PITCH, WIDTH, ROWS + 3, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpy2dAsync(dev, (size_t)1 << 62, pinned, PITCH, WIDTH, 8,
                              ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpy2dAsync(dev, SIZE_MAX, pinned, PITCH, WIDTH, 2, ACL_MEMCPY_HOST_TO_DEVICE,
                              stream),
           ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtMalloc(&wide, 5000001, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&wide_host, 5000001));
    EXPECT(aclrtMemcpy2dAsync(wide, 5000001, wide_host, 5000001, 5000001, 1,
                              ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpy2dAsync(wide, 5000000, wide_host, 5000000, 5000000, 1,
                              ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_SUCCESS);
    /* Kinds: the synchronous form takes H2D and D2H, the asynchronous one D2D as well on an
     * Atlas A2; the others are ACL_ERROR_INVALID_PARAM. */
    EXPECT(aclrtMemcpy2d(dev2, PITCH, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEVICE_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2d(dev2, PITCH, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, PITCH, dev, PITCH, WIDTH, ROWS,
                              ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, PITCH, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_HOST,
                              stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev2, PITCH, dev, PITCH, WIDTH, ROWS, ACL_MEMCPY_DEFAULT, stream),
           ACL_ERROR_INVALID_PARAM);
    /* An asynchronous 2D copy from pageable memory is done when the call returns, after the
     * stream's earlier work. */
    memset(pageable, 0x5a, sizeof pageable);
    CHECK(aclrtLaunchHostFunc(stream, sleep_fn, (void *)(intptr_t)20));
    EXPECT(aclrtMemcpy2dAsync(dev, PITCH, pageable, PITCH, WIDTH, ROWS, ACL_MEMCPY_HOST_TO_DEVICE,
                              stream),
           ACL_SUCCESS);
    memset(pageable, 0, sizeof pageable);
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(pageable, EXACT, dev, EXACT, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(pageable[2 * PITCH + WIDTH - 1] == 0x5a);

    CHECK(aclrtFree(dev));
    CHECK(aclrtFree(dev2));
    CHECK(aclrtFree(wide));
    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtFreeHost(wide_host));
    CHECK(aclrtDestroyStream(stream));
    return 0;
}

static int batch_copies(void)
{
    enum { PART = 1024 };
    void *dev = NULL, *dev2 = NULL;
    unsigned char host[2 * PART];
    void *dsts[2], *srcs[2];
    size_t maxes[2] = {PART, PART}, sizes[2] = {PART, PART}, indexes[2] = {0, 1};
    size_t fail = 7;
    aclrtMemcpyBatchAttr attrs[2];

    CHECK(aclrtMalloc(&dev, 2 * PART, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev2, 2 * PART, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dev, 2 * PART, 4, 2 * PART));
    memset(attrs, 0, sizeof attrs);
    attrs[0].srcLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    attrs[0].dstLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    attrs[1] = attrs[0];
    dsts[0] = host;
    dsts[1] = host + PART;
    srcs[0] = dev;
    srcs[1] = (char *)dev + PART;
    memset(host, 0, sizeof host);
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1, &fail), ACL_SUCCESS);
    HOLDS(host[0] == 4 && host[2 * PART - 1] == 4);
    /* attrsIndexes start at 0, increase, stay below numBatches; numAttrs <= numBatches. A
     * refusal that names no copy leaves SIZE_MAX in failIndex. */
    indexes[0] = 1;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attrs, indexes, 1, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(fail == SIZE_MAX);
    indexes[0] = 0;
    indexes[1] = 0;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    indexes[1] = 2;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    indexes[1] = 1;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 1, attrs, indexes, 2, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 0, attrs, indexes, 1, &fail),
           ACL_ERROR_INVALID_PARAM);
    /* One direction per batch, host to device or device to host: a copy in the other
     * direction, or device to device, is named in failIndex. */
    attrs[1].srcLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    attrs[1].dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    dsts[1] = dev2;
    srcs[1] = host;
    fail = 7;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 2, attrs, indexes, 2, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(fail == 1);
    attrs[0].dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    dsts[0] = dev2;
    fail = 7;
    EXPECT(aclrtMemcpyBatch(dsts, maxes, srcs, sizes, 1, attrs, indexes, 1, &fail),
           ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(fail == 0);
    CHECK(aclrtFree(dev));
    CHECK(aclrtFree(dev2));
    return 0;
}

/* ---- host memory (11-02) ---- */

static int host_memory(void)
{
    static _Alignas(4096) unsigned char page[2 * 4096];
    void *pinned = NULL, *dev = NULL, *mapped = NULL, *again = (void *)&mapped;

    CHECK(aclrtMallocHost(&pinned, SIZE));
    HOLDS(((uintptr_t)pinned & 63) == 0);
    CHECK(aclrtMalloc(&dev, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
    /* Registration takes 4 KiB-aligned host memory; the device pointer query takes flag 0. */
    EXPECT(aclrtHostRegister(page + 64, 4096, ACL_HOST_REGISTER_MAPPED, &mapped),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtHostRegister(page, 4096, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_SUCCESS);
    EXPECT(aclrtHostGetDevicePointer(page, &again, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtHostGetDevicePointer(page, &again, 0), ACL_SUCCESS);
    HOLDS(again == mapped);
    EXPECT(aclrtHostUnregister(page), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(page), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);
    /* PINNED is for pageable memory; pinned memory is refused. */
    EXPECT(aclrtHostRegisterV2(pinned, SIZE, ACL_HOST_REG_PINNED),
           ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EXPECT(aclrtHostRegisterV2(page, 4096, ACL_HOST_REG_PINNED), ACL_SUCCESS);
    EXPECT(aclrtHostUnregister(page), ACL_SUCCESS);
    /* Each free takes its own family's memory, once. */
    EXPECT(aclrtFree(pinned), ACL_ERROR_RT_MEMORY_FREE);
    EXPECT(aclrtFreeHost(dev), ACL_ERROR_RT_MEMORY_FREE);
    EXPECT(aclrtFreeHost(page), ACL_ERROR_RT_MEMORY_FREE);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_ERROR_RT_MEMORY_FREE);
    EXPECT(aclrtFreeWithDevSync(dev), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_ERROR_RT_MEMORY_FREE);
    return 0;
}

/* ---- callbacks (12) ---- */

static atomic_int g_reporting, g_stop;
static aclrtContext g_context;
static int g_callbacks;

static void *report_thread(void *arg)
{
    (void)arg;
    if (aclrtSetCurrentContext(g_context) != ACL_SUCCESS) {
        return NULL;
    }
    while (!atomic_load(&g_stop)) {
        if (atomic_load(&g_reporting)) {
            (void)aclrtProcessReport(20);
        } else {
            sleep_ms(1);
        }
    }
    return NULL;
}

static void count_callback(void *arg)
{
    (void)arg;
    ++g_callbacks;
}

static int callbacks(void)
{
    aclrtStream stream = NULL, second = NULL, elsewhere = NULL;
    aclrtContext other_device = NULL;
    aclrtEvent after = NULL;
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    pthread_t reporter, idle;

    CHECK(aclrtGetCurrentContext(&g_context));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtCreateStream(&second));
    CHECK(aclrtCreateEvent(&after));
    if (pthread_create(&reporter, NULL, report_thread, NULL) != 0 ||
        pthread_create(&idle, NULL, report_thread, NULL) != 0) {
        printf("pthread_create failed\n");
        return 1;
    }
    EXPECT(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_BLOCK, stream),
           ACL_ERROR_RT_STREAM_NO_CB_REG);
    /* One thread per stream; one thread for several streams of one device only. */
    EXPECT(aclrtSubscribeReport((uint64_t)reporter, stream), ACL_SUCCESS);
    EXPECT(aclrtSubscribeReport((uint64_t)reporter, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtSubscribeReport((uint64_t)idle, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtSubscribeReport((uint64_t)reporter, second), ACL_SUCCESS);
    CHECK(aclrtCreateContext(&other_device, 1));
    CHECK(aclrtCreateStream(&elsewhere));
    EXPECT(aclrtSubscribeReport((uint64_t)reporter, elsewhere), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    CHECK(aclrtDestroyStream(elsewhere));
    CHECK(aclrtDestroyContext(other_device));
    CHECK(aclrtSetCurrentContext(g_context));

    EXPECT(aclrtLaunchCallback(NULL, NULL, ACL_CALLBACK_BLOCK, stream), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchCallback(count_callback, NULL, (aclrtCallbackBlockType)2, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtProcessReport(0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtProcessReport(-2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtProcessReport(10), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    /* Nobody processes yet: a NO_BLOCK callback lets the stream go on, a BLOCK one holds it. */
    g_callbacks = 0;
    CHECK(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_NO_BLOCK, stream));
    CHECK(aclrtRecordEvent(after, stream));
    EXPECT(aclrtSynchronizeEvent(after), ACL_SUCCESS);
    CHECK(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_BLOCK, stream));
    CHECK(aclrtRecordEvent(after, stream));
    sleep_ms(20);
    CHECK(aclrtQueryEventStatus(after, &recorded));
    HOLDS(recorded == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    CHECK(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_BLOCK, second));
    atomic_store(&g_reporting, 1);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);
    HOLDS(g_callbacks == 3);

    EXPECT(aclrtUnSubscribeReport((uint64_t)idle, stream), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    EXPECT(aclrtUnSubscribeReport((uint64_t)reporter, stream), ACL_SUCCESS);
    EXPECT(aclrtUnSubscribeReport((uint64_t)reporter, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtUnSubscribeReport((uint64_t)reporter, second), ACL_SUCCESS);
    EXPECT(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_BLOCK, stream),
           ACL_ERROR_RT_STREAM_NO_CB_REG);
    /* The default stream takes a report thread too. */
    EXPECT(aclrtSubscribeReport((uint64_t)idle, NULL), ACL_SUCCESS);
    CHECK(aclrtLaunchCallback(count_callback, NULL, ACL_CALLBACK_BLOCK, NULL));
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    HOLDS(g_callbacks == 4);
    EXPECT(aclrtUnSubscribeReport((uint64_t)idle, NULL), ACL_SUCCESS);

    atomic_store(&g_stop, 1);
    pthread_join(reporter, NULL);
    pthread_join(idle, NULL);
    CHECK(aclrtDestroyEvent(after));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtDestroyStream(second));
    return 0;
}

int main(void)
{
    /* A call that hangs ends the program rather than the test run. */
    alarm(120);
    CHECK(aclInit(NULL));
    if (devices_and_contexts() != 0 || streams() != 0 || abort_and_destroy() != 0 ||
        event_flags() != 0 || event_timing_and_waits() != 0 || copies() != 0 ||
        two_dimensional_copies() != 0 || batch_copies() != 0 || host_memory() != 0 ||
        callbacks() != 0) {
        return 1;
    }
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
