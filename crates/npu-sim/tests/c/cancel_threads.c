/*
 * Cancelling requests in a serving process, several threads at once. Each request stream
 * waits for something upstream (another stream's event behind a host function that holds it,
 * or a notify no one has recorded yet), then has a memset, a completion record and a BLOCK
 * callback for the process's one report thread. Watcher threads wait on the completion records
 * with no timeout.
 *
 * One request is cancelled with aclrtStreamAbort: its watcher's aclrtSynchronizeEventWithTimeout
 * returns ACL_ERROR_RT_STREAM_ABORT, as the reference says of a synchronous wait an abort ends;
 * its callback never runs; the stream takes new work at once; the upstream stream is untouched.
 * Then every request of the device is cancelled with aclrtDeviceTaskAbort, whose PRE and POST
 * callbacks run on the aborting thread: a synchronous copy the PRE callback makes while the
 * abort runs is refused with ACL_ERROR_RT_DEVICE_TASK_ABORT, as submissions are; the watchers
 * return ACL_ERROR_RT_STREAM_ABORT, no dropped callback runs, and every stream serves the next
 * request. Prints a summary and the count of checks. Compiled by tests/c_programs.rs (also
 * against CANN's own headers), which compares the output.
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
#include "host_gate.h"

enum { BYTES = 256, REQUESTS = 2 };

static aclrtContext g_ctx;
static pthread_t g_report_thread;
static atomic_int g_stop_reporting;
static atomic_int g_dropped_ran;
static atomic_int g_served;
static atomic_int g_pre_calls, g_post_calls;
static aclError g_copy_in_abort = -1;
static void *g_probe_dev;

static void dropped(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_dropped_ran, 1);
}

static void served(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_served, 1);
}

static void *report_loop(void *arg)
{
    (void)arg;
    (void)aclrtSetCurrentContext(g_ctx);
    while (!atomic_load(&g_stop_reporting)) {
        (void)aclrtProcessReport(10);
        (void)aclGetRecentErrMsg();
    }
    return NULL;
}

static int32_t on_abort(int32_t device, aclrtDeviceTaskAbortStage stage, uint32_t timeout, void *args)
{
    (void)timeout;
    (void)args;
    if (device != 0) {
        return 0;
    }
    if (stage == ACL_RT_DEVICE_TASK_ABORT_PRE) {
        atomic_fetch_add(&g_pre_calls, 1);
        unsigned char host[16];
        g_copy_in_abort = aclrtMemcpy(host, sizeof host, g_probe_dev, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST);
        (void)aclGetRecentErrMsg();
    } else {
        atomic_fetch_add(&g_post_calls, 1);
    }
    return 0;
}

/* ---- a watcher: waits on a completion record with no timeout ---- */

struct watch {
    pthread_t thread;
    aclrtEvent event;
    aclError code;
};

static void *watch_event(void *arg)
{
    struct watch *w = arg;
    (void)aclrtSetCurrentContext(g_ctx);
    w->code = aclrtSynchronizeEventWithTimeout(w->event, -1);
    (void)aclGetRecentErrMsg();
    return NULL;
}

static int start_watch(struct watch *w, aclrtEvent event)
{
    w->event = event;
    w->code = -1;
    return pthread_create(&w->thread, NULL, watch_event, w);
}

/* ---- a request stream ---- */

struct request {
    aclrtStream stream;
    aclrtEvent done;
    void *dev;
    unsigned char host[BYTES];
};

static aclError open_request(struct request *r)
{
    aclError err = aclrtCreateStream(&r->stream);
    if (err == ACL_SUCCESS) {
        err = aclrtCreateEvent(&r->done);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtMalloc(&r->dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtSubscribeReport((uint64_t)g_report_thread, r->stream);
    }
    return err;
}

/* Queues the request's work behind what it waits for (already queued on its stream). */
static aclError queue_work(struct request *r, unsigned char value, aclrtCallback callback)
{
    aclError err = aclrtMemsetAsync(r->dev, BYTES, value, BYTES, r->stream);
    if (err == ACL_SUCCESS) {
        err = aclrtRecordEvent(r->done, r->stream);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtLaunchCallback(callback, NULL, ACL_CALLBACK_BLOCK, r->stream);
    }
    return err;
}

/* Serves a request on the stream and reads its memory: 1 when it holds `value` throughout. */
static int serve(struct request *r, unsigned char value)
{
    if (queue_work(r, value, served) != ACL_SUCCESS || aclrtSynchronizeStream(r->stream) != ACL_SUCCESS ||
        aclrtMemcpy(r->host, BYTES, r->dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) {
        printf("serving failed: %s\n", aclGetRecentErrMsg());
        return 0;
    }
    for (int i = 0; i < BYTES; i++) {
        if (r->host[i] != value) {
            return 0;
        }
    }
    return 1;
}

static aclError close_request(struct request *r)
{
    aclError err = aclrtUnSubscribeReport((uint64_t)g_report_thread, r->stream);
    if (err == ACL_SUCCESS) {
        err = aclrtDestroyEvent(r->done);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtDestroyStream(r->stream);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtFree(r->dev);
    }
    return err;
}

int main(void)
{
    alarm(60);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetCurrentContext(&g_ctx));
    CHECK(aclrtSetDeviceTaskAbortCallback("cancel_threads", on_abort, NULL));
    CHECK(aclrtMalloc(&g_probe_dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    if (pthread_create(&g_report_thread, NULL, report_loop, NULL) != 0) {
        return 1;
    }

    /* Upstream: a stream held by a host function, recording the event the request waits for. */
    aclrtStream upstream = NULL;
    aclrtEvent ready = NULL;
    void *upstream_dev = NULL;
    CHECK(aclrtCreateStream(&upstream));
    CHECK(aclrtCreateEvent(&ready));
    CHECK(aclrtMalloc(&upstream_dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtLaunchHostFunc(upstream, gate, NULL));
    CHECK(aclrtMemsetAsync(upstream_dev, BYTES, 0x11, BYTES, upstream));
    CHECK(aclrtRecordEvent(ready, upstream));

    /* One request cancelled with aclrtStreamAbort. */
    struct request requests[REQUESTS];
    memset(requests, 0, sizeof requests);
    for (int i = 0; i < REQUESTS; i++) {
        CHECK(open_request(&requests[i]));
    }
    struct request *cancelled = &requests[0];
    EXPECT(aclrtStreamWaitEvent(cancelled->stream, ready), ACL_SUCCESS);
    EXPECT(queue_work(cancelled, 0x22, dropped), ACL_SUCCESS);
    struct watch watch;
    if (start_watch(&watch, cancelled->done) != 0) {
        return 1;
    }
    EXPECT(aclrtStreamAbort(cancelled->stream), ACL_SUCCESS);
    pthread_join(watch.thread, NULL);
    EXPECT(watch.code, ACL_ERROR_RT_STREAM_ABORT);
    EXPECT(aclrtSynchronizeEventWithTimeout(cancelled->done, 100), ACL_ERROR_RT_STREAM_ABORT);
    (void)aclGetRecentErrMsg();
    int first_served = serve(cancelled, 0x33);
    atomic_store(&g_gate_open, 1);
    EXPECT(aclrtSynchronizeStream(upstream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(cancelled->host, BYTES, upstream_dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(cancelled->host[0] == 0x11 && cancelled->host[BYTES - 1] == 0x11);
    printf("stream abort: the request served next %d, the upstream stream ran on\n", first_served);

    /* Every request of the device cancelled with aclrtDeviceTaskAbort: each waits on a notify
     * no one records, with its work behind. */
    aclrtNotify never = NULL;
    CHECK(aclrtCreateNotify(&never, 0));
    struct watch watches[REQUESTS];
    for (int i = 0; i < REQUESTS; i++) {
        EXPECT(aclrtWaitAndResetNotify(never, requests[i].stream, 0), ACL_SUCCESS);
        EXPECT(queue_work(&requests[i], 0x44, dropped), ACL_SUCCESS);
        if (start_watch(&watches[i], requests[i].done) != 0) {
            return 1;
        }
    }
    EXPECT(aclrtDeviceTaskAbort(0, 0), ACL_SUCCESS);
    int watchers_aborted = 0;
    for (int i = 0; i < REQUESTS; i++) {
        pthread_join(watches[i].thread, NULL);
        watchers_aborted += watches[i].code == ACL_ERROR_RT_STREAM_ABORT;
    }
    EXPECT(g_copy_in_abort, ACL_ERROR_RT_DEVICE_TASK_ABORT);
    int next_served = 0;
    for (int i = 0; i < REQUESTS; i++) {
        next_served += serve(&requests[i], (unsigned char)(0x55 + i));
    }
    printf("device task abort: PRE %d, POST %d, watchers ended by the abort %d/%d, requests "
           "served next %d/%d\n",
           atomic_load(&g_pre_calls), atomic_load(&g_post_calls), watchers_aborted, REQUESTS,
           next_served, REQUESTS);

    for (int i = 0; i < REQUESTS; i++) {
        EXPECT(close_request(&requests[i]), ACL_SUCCESS);
    }
    atomic_store(&g_stop_reporting, 1);
    pthread_join(g_report_thread, NULL);
    printf("callbacks: dropped ones run %d, served ones run %d\n", atomic_load(&g_dropped_ran),
           atomic_load(&g_served));

    CHECK(aclrtDestroyNotify(never));
    CHECK(aclrtDestroyEvent(ready));
    CHECK(aclrtDestroyStream(upstream));
    CHECK(aclrtFree(upstream_dev));
    CHECK(aclrtFree(g_probe_dev));
    CHECK(aclrtSetDeviceTaskAbortCallback("cancel_threads", NULL, NULL));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("cancellation checks");
    return 0;
}
