/*
 * Timed waits and host memory across threads, as a serving application's watchdog uses them: a
 * producer thread's stream is held by a host function (a gate) with a memset and an event
 * record behind it; a consumer thread's stream waits on that event. The main thread's
 * aclrtSynchronizeStreamWithTimeout and aclrtSynchronizeEventWithTimeout of both time out with
 * their codes (the consumer's through its wait on the producer), leave a message that names the
 * call for aclGetRecentErrMsg on this thread only, and succeed once the gate opens, while a
 * watcher thread waiting on the same event with no timeout returns too. Pinned memory from
 * aclrtMallocHost and malloc'd memory registered with aclrtHostRegister take asynchronous
 * copies that return while the stream is held and read the buffer when they run; device
 * memory's free count does not move for either. Prints a summary and the count of checks.
 * Compiled by tests/c_programs.rs (also against CANN's own headers), which compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"

enum { BYTES = 4096 };

static aclrtContext g_ctx;
static atomic_int g_gate_open;

static void gate(void *arg)
{
    (void)arg;
    struct timespec ms = {0, 1000000L};
    while (!atomic_load(&g_gate_open)) {
        nanosleep(&ms, NULL);
    }
}

/* ---- the producer: a held stream with a memset and a record behind the gate ---- */

struct producer {
    aclrtStream stream;
    aclrtEvent start, done;
    void *dev;
    aclError err;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    if ((p->err = aclrtSetCurrentContext(g_ctx)) != ACL_SUCCESS ||
        (p->err = aclrtCreateStream(&p->stream)) != ACL_SUCCESS ||
        (p->err = aclrtCreateEvent(&p->start)) != ACL_SUCCESS ||
        (p->err = aclrtCreateEvent(&p->done)) != ACL_SUCCESS ||
        (p->err = aclrtMalloc(&p->dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST)) != ACL_SUCCESS ||
        (p->err = aclrtRecordEvent(p->start, p->stream)) != ACL_SUCCESS ||
        (p->err = aclrtLaunchHostFunc(p->stream, gate, NULL)) != ACL_SUCCESS ||
        (p->err = aclrtMemsetAsync(p->dev, BYTES, 0x5A, BYTES, p->stream)) != ACL_SUCCESS) {
        return NULL;
    }
    p->err = aclrtRecordEvent(p->done, p->stream);
    return NULL;
}

/* ---- the consumer: a stream waiting on the producer's event, copying its result out ---- */

struct consumer {
    struct producer *from;
    aclrtStream stream;
    unsigned char *pinned;
    aclError err;
};

static void *consume(void *arg)
{
    struct consumer *c = arg;
    if ((c->err = aclrtSetCurrentContext(g_ctx)) != ACL_SUCCESS ||
        (c->err = aclrtCreateStream(&c->stream)) != ACL_SUCCESS ||
        (c->err = aclrtMallocHost((void **)&c->pinned, BYTES)) != ACL_SUCCESS ||
        (c->err = aclrtStreamWaitEvent(c->stream, c->from->done)) != ACL_SUCCESS) {
        return NULL;
    }
    memset(c->pinned, 0, BYTES);
    c->err = aclrtMemcpyAsync(c->pinned, BYTES, c->from->dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST,
                              c->stream);
    return NULL;
}

/* ---- the watcher: waits on the producer's event with no timeout ---- */

struct watcher {
    aclrtEvent event;
    aclError sync, bad_timeout;
    const char *own_message; /* what this thread's aclGetRecentErrMsg gave */
};

static void *watch(void *arg)
{
    struct watcher *w = arg;
    /* A timeout of 0 is no timeout the reference allows: refused, its message this thread's. */
    w->bad_timeout = aclrtSynchronizeEventWithTimeout(w->event, 0);
    w->own_message = aclGetRecentErrMsg();
    w->own_message = w->own_message != NULL && strstr(w->own_message, "aclrtSynchronizeEventWithTimeout") != NULL
                         ? "named the call"
                         : "missing";
    /* A second error, whose message this thread leaves unread. */
    (void)aclrtSynchronizeEventWithTimeout(w->event, -2);
    w->sync = aclrtSynchronizeEventWithTimeout(w->event, -1);
    return NULL;
}

static int run_thread(void *(*body)(void *), void *arg)
{
    pthread_t thread;
    if (pthread_create(&thread, NULL, body, arg) != 0) {
        return 1;
    }
    return pthread_join(thread, NULL);
}

static int message_names(const char *call)
{
    const char *message = aclGetRecentErrMsg();
    return message != NULL && strstr(message, call) != NULL;
}

int main(void)
{
    alarm(60);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateContext(&g_ctx, 0));
    size_t free_before = 0, total = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_before, &total));

    struct producer producer = {0};
    struct consumer consumer = {&producer, NULL, NULL, 0};
    if (run_thread(produce, &producer) != 0 || run_thread(consume, &consumer) != 0) {
        return 1;
    }
    EXPECT(producer.err, ACL_SUCCESS);
    EXPECT(consumer.err, ACL_SUCCESS);

    /* The held streams time out, each with its code and a message naming the call. */
    EXPECT(aclrtSynchronizeStreamWithTimeout(producer.stream, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    HOLDS(message_names("aclrtSynchronizeStreamWithTimeout"));
    HOLDS(aclGetRecentErrMsg() == NULL);
    EXPECT(aclrtSynchronizeStreamWithTimeout(consumer.stream, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    HOLDS(message_names("aclrtSynchronizeStreamWithTimeout"));
    EXPECT(aclrtSynchronizeEventWithTimeout(producer.done, 20), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
    HOLDS(message_names("aclrtSynchronizeEventWithTimeout"));
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
    EXPECT(aclrtQueryEventStatus(producer.done, &status), ACL_SUCCESS);
    HOLDS(status == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    /* Elapsed time up to a record not reached yet cannot be measured. */
    float ms = -1.0f;
    EXPECT(aclrtEventElapsedTime(&ms, producer.start, producer.done), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);
    HOLDS(message_names("aclrtEventElapsedTime"));

    /* Pinned and registered host memory: copies queued behind the gate return at once and read
     * the buffer when they run, so what is written after queueing them is what arrives. */
    aclrtStream held = NULL;
    unsigned char *pinned = NULL;
    unsigned char *registered = aligned_alloc(4096, BYTES);
    void *mapped = NULL;
    void *dev_a = NULL, *dev_b = NULL;
    CHECK(aclrtCreateStream(&held));
    size_t free_without_host = 0, free_with_host = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_without_host, &total));
    CHECK(aclrtMallocHost((void **)&pinned, BYTES));
    HOLDS(registered != NULL);
    EXPECT(aclrtHostRegister(registered, BYTES, ACL_HOST_REGISTER_MAPPED, &mapped), ACL_SUCCESS);
    HOLDS(mapped != NULL);
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_with_host, &total));
    HOLDS(free_with_host == free_without_host);
    CHECK(aclrtMalloc(&dev_a, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev_b, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtLaunchHostFunc(held, gate, NULL));
    memset(pinned, 1, BYTES);
    memset(registered, 2, BYTES);
    EXPECT(aclrtMemcpyAsync(dev_a, BYTES, pinned, BYTES, ACL_MEMCPY_HOST_TO_DEVICE, held), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(dev_b, BYTES, registered, BYTES, ACL_MEMCPY_HOST_TO_DEVICE, held),
           ACL_SUCCESS);
    memset(pinned, 0x11, BYTES);
    memset(registered, 0x22, BYTES);

    /* A watcher waits on the producer's event for as long as it takes; its errors are its own. */
    struct watcher watcher = {producer.done, -1, -1, NULL};
    pthread_t watcher_thread;
    if (pthread_create(&watcher_thread, NULL, watch, &watcher) != 0) {
        return 1;
    }
    atomic_store(&g_gate_open, 1);
    pthread_join(watcher_thread, NULL);
    EXPECT(watcher.bad_timeout, ACL_ERROR_RT_PARAM_INVALID);
    printf("watcher: %s, its unread message %s here\n", watcher.own_message,
           aclGetRecentErrMsg() == NULL ? "not seen" : "seen");
    EXPECT(watcher.sync, ACL_SUCCESS);

    /* Once the gate is open the same timed waits succeed. */
    EXPECT(aclrtSynchronizeEventWithTimeout(producer.done, 1000), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(producer.stream, 1000), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(consumer.stream, 1000), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(held, 1000), ACL_SUCCESS);
    EXPECT(aclrtEventElapsedTime(&ms, producer.start, producer.done), ACL_SUCCESS);
    HOLDS(ms >= 0.0f);
    int consumed = 0, from_pinned = 0, from_registered = 0;
    unsigned char *check = NULL;
    CHECK(aclrtMallocHost((void **)&check, BYTES));
    for (int i = 0; i < BYTES; i++) {
        consumed += consumer.pinned[i] == 0x5A;
    }
    CHECK(aclrtMemcpy(check, BYTES, dev_a, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    for (int i = 0; i < BYTES; i++) {
        from_pinned += check[i] == 0x11;
    }
    CHECK(aclrtMemcpy(check, BYTES, dev_b, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    for (int i = 0; i < BYTES; i++) {
        from_registered += check[i] == 0x22;
    }
    printf("consumer read the producer's memset: %d/%d bytes; copies read at run time: pinned "
           "%d/%d, registered %d/%d\n",
           consumed, BYTES, from_pinned, BYTES, from_registered, BYTES);

    EXPECT(aclrtHostUnregister(registered), ACL_SUCCESS);
    FAILS(aclrtHostUnregister(registered));
    free(registered);
    CHECK(aclrtFreeHost(check));
    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtFreeHost(consumer.pinned));
    CHECK(aclrtFree(dev_a));
    CHECK(aclrtFree(dev_b));
    CHECK(aclrtFree(producer.dev));
    CHECK(aclrtDestroyEvent(producer.start));
    CHECK(aclrtDestroyEvent(producer.done));
    CHECK(aclrtDestroyStream(held));
    CHECK(aclrtDestroyStream(producer.stream));
    CHECK(aclrtDestroyStream(consumer.stream));
    size_t free_after = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_after, &total));
    HOLDS(free_after == free_before);
    CHECK(aclrtDestroyContext(g_ctx));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("timeout checks");
    return 0;
}
