/*
 * An inference server's use of the runtime, several threads at once: one explicit context
 * shared by a request thread per stream (aclrtSetCurrentContext), one report thread serving
 * every stream's callbacks (aclrtSubscribeReport, aclrtProcessReport with a timeout in a loop,
 * aclrtUnSubscribeReport at the end), pinned buffers moved by aclrtMemcpy2dAsync in every
 * direction with pitches that differ on each side, events timing each request and ordering the
 * streams (a model's weights, uploaded once on a loader stream, which every request stream
 * waits for with aclrtStreamWaitEvent), and the device's free memory before and after.
 *
 * A host function holds the loader stream until every request stream has queued its wait on
 * the weights, so the wait is what orders the streams: a request that did not wait would read
 * the weights before they arrive. Every request's result is checked in its BLOCK callback, on
 * the report thread, before the request thread's aclrtSynchronizeStream returns. Prints a
 * summary and the count of checks. Compiled by tests/c_programs.rs (also against CANN's own
 * headers), which compares the output.
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

enum {
    THREADS = 3,
    ROUNDS = 4,
    ROWS = 8,
    WIDTH = 48,       /* bytes a row holds */
    HOST_PITCH = 64,  /* the pinned buffers' row pitch */
    DEV_PITCH = 128,  /* the first device buffer's */
    DEV2_PITCH = 96,  /* the second device buffer's */
    WEIGHTS = 4096,
};

static aclrtContext g_ctx;
static pthread_t g_report_thread;
static atomic_int g_stop_reporting;
static atomic_int g_gate_open;
static pthread_barrier_t g_waits_queued;
static aclrtEvent g_weights_ready;
static void *g_weights_dev;

/* What the report thread saw. */
static atomic_int g_processed;
static atomic_int g_timeouts;
static atomic_int g_unexpected; /* aclrtProcessReport codes other than 0, 507012, 107012 */
static aclError g_after_unsubscribe = -1;

/* ---- a gate: a host function holding its stream until the program opens it ---- */

static void gate(void *arg)
{
    (void)arg;
    struct timespec ms = {0, 1000000L};
    while (!atomic_load(&g_gate_open)) {
        nanosleep(&ms, NULL);
    }
}

/* ---- the report thread ---- */

static void *report_loop(void *arg)
{
    (void)arg;
    aclError set = aclrtSetCurrentContext(g_ctx);
    if (set != ACL_SUCCESS) {
        atomic_fetch_add(&g_unexpected, 1);
    }
    while (!atomic_load(&g_stop_reporting)) {
        aclError err = aclrtProcessReport(10);
        if (err == ACL_SUCCESS) {
            atomic_fetch_add(&g_processed, 1);
        } else if (err == ACL_ERROR_RT_REPORT_TIMEOUT) {
            atomic_fetch_add(&g_timeouts, 1);
        } else if (err != ACL_ERROR_RT_THREAD_SUBSCRIBE) {
            /* 107012: no stream subscribed yet. */
            atomic_fetch_add(&g_unexpected, 1);
        }
        (void)aclGetRecentErrMsg();
    }
    /* Every stream unsubscribed: the thread serves none. */
    g_after_unsubscribe = aclrtProcessReport(10);
    (void)aclGetRecentErrMsg();
    return NULL;
}

/* ---- a request thread ---- */

struct request {
    int id;
    /* Set by the callbacks, on the report thread. */
    int weights_ok;
    int rounds_ok;
    int wrong_thread;
    /* The request's buffers, read by its callback. */
    unsigned char *in, *out, *weights_seen;
    int round;
    /* Codes and results the main thread checks. */
    aclError subscribe, wait, unsubscribe, failed;
    const char *failed_call;
    int elapsed_ok;
};

static void note_thread(struct request *req)
{
    if (!pthread_equal(pthread_self(), g_report_thread)) {
        req->wrong_thread++;
    }
}

static void check_weights(void *arg)
{
    struct request *req = arg;
    note_thread(req);
    int ok = 1;
    for (int i = 0; i < WEIGHTS; i++) {
        ok &= req->weights_seen[i] == (unsigned char)(i * 3 + 1);
    }
    req->weights_ok = ok;
}

static unsigned char pattern(int id, int round, int row, int col)
{
    return (unsigned char)(id * 61 + round * 17 + row * 5 + col + 1);
}

static void check_round(void *arg)
{
    struct request *req = arg;
    note_thread(req);
    int ok = 1;
    for (int row = 0; row < ROWS; row++) {
        for (int col = 0; col < HOST_PITCH; col++) {
            unsigned char got = req->out[row * HOST_PITCH + col];
            /* Past the width of a row the output keeps its 0xEE: a 2D copy writes WIDTH bytes. */
            ok &= got == (col < WIDTH ? pattern(req->id, req->round, row, col) : 0xEE);
        }
    }
    req->rounds_ok += ok;
}

#define STEP(call)                                                                             \
    do {                                                                                       \
        aclError err_ = (call);                                                                \
        if (err_ != ACL_SUCCESS) {                                                             \
            req->failed = err_;                                                                \
            req->failed_call = #call;                                                          \
            return NULL;                                                                       \
        }                                                                                      \
    } while (0)

static void *serve(void *arg)
{
    struct request *req = arg;
    aclrtStream stream = NULL;
    aclrtEvent start = NULL, end = NULL;
    void *dev = NULL, *dev2 = NULL;
    STEP(aclrtSetCurrentContext(g_ctx));
    STEP(aclrtCreateStream(&stream));
    STEP(aclrtCreateEvent(&start));
    STEP(aclrtCreateEvent(&end));
    STEP(aclrtMallocHost((void **)&req->in, ROWS * HOST_PITCH));
    STEP(aclrtMallocHost((void **)&req->out, ROWS * HOST_PITCH));
    STEP(aclrtMallocHost((void **)&req->weights_seen, WEIGHTS));
    STEP(aclrtMalloc(&dev, ROWS * DEV_PITCH, ACL_MEM_MALLOC_HUGE_FIRST));
    STEP(aclrtMalloc(&dev2, ROWS * DEV2_PITCH, ACL_MEM_MALLOC_HUGE_FIRST));
    req->subscribe = aclrtSubscribeReport((uint64_t)g_report_thread, stream);

    /* The weights, once the loader's upload is done. */
    req->wait = aclrtStreamWaitEvent(stream, g_weights_ready);
    memset(req->weights_seen, 0, WEIGHTS);
    STEP(aclrtMemcpyAsync(req->weights_seen, WEIGHTS, g_weights_dev, WEIGHTS,
                          ACL_MEMCPY_DEVICE_TO_HOST, stream));
    STEP(aclrtLaunchCallback(check_weights, req, ACL_CALLBACK_BLOCK, stream));
    pthread_barrier_wait(&g_waits_queued);
    STEP(aclrtSynchronizeStream(stream));

    for (req->round = 0; req->round < ROUNDS; req->round++) {
        for (int row = 0; row < ROWS; row++) {
            for (int col = 0; col < HOST_PITCH; col++) {
                req->in[row * HOST_PITCH + col] = pattern(req->id, req->round, row, col);
            }
        }
        memset(req->out, 0xEE, ROWS * HOST_PITCH);
        STEP(aclrtRecordEvent(start, stream));
        STEP(aclrtMemcpy2dAsync(dev, DEV_PITCH, req->in, HOST_PITCH, WIDTH, ROWS,
                                ACL_MEMCPY_HOST_TO_DEVICE, stream));
        STEP(aclrtMemcpy2dAsync(dev2, DEV2_PITCH, dev, DEV_PITCH, WIDTH, ROWS,
                                ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
        STEP(aclrtMemcpy2dAsync(req->out, HOST_PITCH, dev2, DEV2_PITCH, WIDTH, ROWS,
                                ACL_MEMCPY_DEVICE_TO_HOST, stream));
        STEP(aclrtRecordEvent(end, stream));
        STEP(aclrtLaunchCallback(check_round, req, ACL_CALLBACK_BLOCK, stream));
        STEP(aclrtSynchronizeStream(stream));
        float ms = -1.0f;
        STEP(aclrtEventElapsedTime(&ms, start, end));
        req->elapsed_ok += ms >= 0.0f;
    }

    req->unsubscribe = aclrtUnSubscribeReport((uint64_t)g_report_thread, stream);
    STEP(aclrtDestroyEvent(start));
    STEP(aclrtDestroyEvent(end));
    STEP(aclrtDestroyStream(stream));
    STEP(aclrtFree(dev));
    STEP(aclrtFree(dev2));
    STEP(aclrtFreeHost(req->in));
    STEP(aclrtFreeHost(req->out));
    STEP(aclrtFreeHost(req->weights_seen));
    return NULL;
}

/* A stream of device 1 cannot take the report thread while it serves device 0's streams. */
static aclError g_other_device_subscribe = -1;

static void *subscribe_on_device_1(void *arg)
{
    (void)arg;
    aclrtStream stream = NULL;
    if (aclrtSetDevice(1) != ACL_SUCCESS || aclrtCreateStream(&stream) != ACL_SUCCESS) {
        return NULL;
    }
    g_other_device_subscribe = aclrtSubscribeReport((uint64_t)g_report_thread, stream);
    (void)aclGetRecentErrMsg();
    (void)aclrtDestroyStream(stream);
    (void)aclrtResetDevice(1);
    return NULL;
}

int main(void)
{
    /* A wait that never ends fails the program instead of holding the test. */
    alarm(60);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    size_t free_before = 0, total = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_before, &total));
    HOLDS(free_before <= total && total > 0);
    aclrtContext primary = NULL;
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&g_ctx, 0));

    /* The loader: weights uploaded from pinned memory on a stream held by the gate. */
    aclrtStream loader = NULL;
    unsigned char *weights_host = NULL;
    CHECK(aclrtCreateStream(&loader));
    CHECK(aclrtCreateEvent(&g_weights_ready));
    CHECK(aclrtMallocHost((void **)&weights_host, WEIGHTS));
    CHECK(aclrtMalloc(&g_weights_dev, WEIGHTS, ACL_MEM_MALLOC_HUGE_FIRST));
    for (int i = 0; i < WEIGHTS; i++) {
        weights_host[i] = (unsigned char)(i * 3 + 1);
    }
    CHECK(aclrtLaunchHostFunc(loader, gate, NULL));
    CHECK(aclrtMemcpyAsync(g_weights_dev, WEIGHTS, weights_host, WEIGHTS, ACL_MEMCPY_HOST_TO_DEVICE,
                           loader));
    CHECK(aclrtRecordEvent(g_weights_ready, loader));

    if (pthread_create(&g_report_thread, NULL, report_loop, NULL) != 0) {
        return 1;
    }
    pthread_barrier_init(&g_waits_queued, NULL, THREADS + 1);
    struct request requests[THREADS];
    pthread_t threads[THREADS];
    memset(requests, 0, sizeof requests);
    for (int i = 0; i < THREADS; i++) {
        requests[i].id = i;
        if (pthread_create(&threads[i], NULL, serve, &requests[i]) != 0) {
            return 1;
        }
    }
    /* Every request stream waits on the weights, subscribed to the report thread. */
    pthread_barrier_wait(&g_waits_queued);
    pthread_t other;
    if (pthread_create(&other, NULL, subscribe_on_device_1, NULL) != 0) {
        return 1;
    }
    pthread_join(other, NULL);
    EXPECT(g_other_device_subscribe, ACL_ERROR_RT_THREAD_SUBSCRIBE);
    /* The upload may go. */
    atomic_store(&g_gate_open, 1);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    atomic_store(&g_stop_reporting, 1);
    pthread_join(g_report_thread, NULL);

    int weights_ok = 0, rounds_ok = 0, elapsed_ok = 0, wrong_thread = 0;
    for (int i = 0; i < THREADS; i++) {
        struct request *req = &requests[i];
        if (req->failed_call != NULL) {
            printf("request %d: %s failed with %d\n", i, req->failed_call, req->failed);
        }
        EXPECT(req->subscribe, ACL_SUCCESS);
        EXPECT(req->wait, ACL_SUCCESS);
        EXPECT(req->unsubscribe, ACL_SUCCESS);
        weights_ok += req->weights_ok;
        rounds_ok += req->rounds_ok;
        elapsed_ok += req->elapsed_ok;
        wrong_thread += req->wrong_thread;
    }
    printf("requests: weights seen after the upload %d/%d, rounds right %d/%d, timed %d/%d\n",
           weights_ok, THREADS, rounds_ok, THREADS * ROUNDS, elapsed_ok, THREADS * ROUNDS);
    printf("callbacks on the report thread: %d, elsewhere: %d, unexpected report codes: %d\n",
           atomic_load(&g_processed), wrong_thread, atomic_load(&g_unexpected));
    EXPECT(g_after_unsubscribe, ACL_ERROR_RT_THREAD_SUBSCRIBE);

    CHECK(aclrtSynchronizeStream(loader));
    CHECK(aclrtDestroyStream(loader));
    CHECK(aclrtDestroyEvent(g_weights_ready));
    CHECK(aclrtFree(g_weights_dev));
    CHECK(aclrtFreeHost(weights_host));
    CHECK(aclrtDestroyContext(g_ctx));
    /* Destroying the current context leaves the thread with none: back to the device's. */
    CHECK(aclrtSetCurrentContext(primary));
    size_t free_after = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_after, &total));
    HOLDS(free_after == free_before);
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("serving checks");
    return 0;
}
