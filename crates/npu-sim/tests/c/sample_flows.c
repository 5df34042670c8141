/*
 * The flows CANN's runtime samples are made of, in their order and with their habits:
 * aclInit with the acl.json a sample ships (here an empty one), device queries, a callback
 * thread looping on aclrtProcessReport with a timeout, a context shared by worker threads,
 * events with timestamps, and a teardown that resets the device before destroying what it
 * created and finalizes with a context still alive. alarm() ends the program should a call
 * hang. Compiled by tests/c_programs.rs, which compares the output byte for byte.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

enum { BYTES = 4096, WORKERS = 2 };

/* Writes `text` to a new temporary file; returns its path (to be freed and unlinked). */
static char *config_file(const char *text)
{
    char *path = malloc(64);
    if (path == NULL) {
        return NULL;
    }
    strcpy(path, "/tmp/npu-sim-acl-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        free(path);
        return NULL;
    }
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len) {
        close(fd);
        unlink(path);
        free(path);
        return NULL;
    }
    close(fd);
    return path;
}

/* ---- the callback thread of the callback samples ---- */

static volatile int g_exit = 0;
static aclrtContext g_ctx = NULL;
static int g_callbacks = 0;
static int g_host_funcs = 0;
static aclError g_thread_ctx = -1;

static void *process_reports(void *arg)
{
    (void)arg;
    g_thread_ctx = aclrtSetCurrentContext(g_ctx);
    while (!g_exit) {
        /* Samples ignore what this returns: 107012 until subscribed, 507012 when idle. */
        (void)aclrtProcessReport(100);
    }
    return NULL;
}

static void count_callback(void *data) { ++*(int *)data; }
static void count_host_func(void *data) { ++*(int *)data; }

/* ---- worker threads sharing the context ---- */

struct worker {
    int value;
    aclError first_error;
    int mismatches;
};

#define WORKER_CHECK(call)                                                                    \
    do {                                                                                      \
        aclError err_ = (call);                                                               \
        if (err_ != ACL_SUCCESS && w->first_error == ACL_SUCCESS) {                           \
            w->first_error = err_;                                                            \
        }                                                                                     \
    } while (0)

static void *worker(void *arg)
{
    struct worker *w = arg;
    aclrtStream stream = NULL;
    void *dev = NULL;
    unsigned char host[BYTES];
    WORKER_CHECK(aclrtSetCurrentContext(g_ctx));
    WORKER_CHECK(aclrtCreateStream(&stream));
    WORKER_CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_NORMAL_ONLY));
    WORKER_CHECK(aclrtMemsetAsync(dev, BYTES, w->value, BYTES, stream));
    WORKER_CHECK(aclrtSynchronizeStreamWithTimeout(stream, 10000));
    memset(host, 0, sizeof host);
    WORKER_CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    for (size_t i = 0; i < BYTES; ++i) {
        w->mismatches += host[i] != (unsigned char)w->value;
    }
    WORKER_CHECK(aclrtFree(dev));
    WORKER_CHECK(aclrtDestroyStream(stream));
    return NULL;
}

int main(void)
{
    alarm(30);

    /* aclInit: white space alone is no JSON; a file of no bytes configures nothing. */
    char *blank = config_file("  \n");
    char *empty = config_file("");
    if (blank == NULL || empty == NULL) {
        printf("cannot write the configuration files\n");
        return 1;
    }
    printf("aclInit(white space only): %d\n", aclInit(blank));
    (void)aclGetRecentErrMsg();
    CHECK(aclInit(empty));
    unlink(blank);
    unlink(empty);
    free(blank);
    free(empty);

    /* Device queries of the samples' set-up. */
    aclrtRunMode mode = ACL_DEVICE;
    CHECK(aclrtGetRunMode(&mode));
    printf("run mode is ACL_HOST: %d\n", mode == ACL_HOST);
    uint32_t count = 0;
    CHECK(aclrtGetDeviceCount(&count));
    printf("devices: %u\n", count);
    const char *soc = aclrtGetSocName();
    printf("soc name set: %d\n", soc != NULL && soc[0] != '\0');

    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateContext(&g_ctx, 0));
    size_t free_before = 0, total = 0, free_after = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_before, &total));
    void *big = NULL;
    CHECK(aclrtMalloc(&big, 1 << 20, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free_after, &total));
    printf("memory: free <= total %d, an allocation takes at least its size %d\n",
           free_before <= total, free_before - free_after >= (size_t)(1 << 20));
    CHECK(aclrtFree(big));

    /* The callback sample: the thread loops before it is subscribed. */
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));
    pthread_t tid;
    if (pthread_create(&tid, NULL, process_reports, NULL) != 0) {
        printf("pthread_create failed\n");
        return 1;
    }
    CHECK(aclrtSubscribeReport((uint64_t)tid, stream));
    printf("second subscription of the stream: %d\n", aclrtSubscribeReport((uint64_t)tid, stream));
    CHECK(aclrtLaunchCallback(count_callback, &g_callbacks, ACL_CALLBACK_NO_BLOCK, stream));
    for (int i = 0; i < 3; ++i) {
        CHECK(aclrtLaunchCallback(count_callback, &g_callbacks, ACL_CALLBACK_BLOCK, stream));
    }
    CHECK(aclrtSynchronizeStream(stream));
    printf("callbacks run: %d\n", g_callbacks);
    CHECK(aclrtUnSubscribeReport((uint64_t)tid, stream));
    printf("callback after unsubscribing: %d\n",
           aclrtLaunchCallback(count_callback, &g_callbacks, ACL_CALLBACK_BLOCK, stream));
    g_exit = 1;
    pthread_join(tid, NULL);
    printf("callback thread set the context: %d\n", g_thread_ctx);

    /* Worker threads sharing the context. */
    struct worker workers[WORKERS];
    pthread_t threads[WORKERS];
    for (int i = 0; i < WORKERS; ++i) {
        workers[i] = (struct worker){.value = 0x30 + i, .first_error = ACL_SUCCESS};
        if (pthread_create(&threads[i], NULL, worker, &workers[i]) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < WORKERS; ++i) {
        pthread_join(threads[i], NULL);
        printf("worker %d: error %d, mismatches %d\n", i, workers[i].first_error,
               workers[i].mismatches);
    }

    /* Events with timestamps around host work. */
    aclrtEvent start = NULL, end = NULL;
    CHECK(aclrtCreateEventWithFlag(&start, ACL_EVENT_TIME_LINE | ACL_EVENT_SYNC));
    CHECK(aclrtCreateEvent(&end));
    float ms = -1.0f;
    printf("elapsed time before any record: %d\n", aclrtEventElapsedTime(&ms, start, end));
    CHECK(aclrtRecordEvent(start, stream));
    CHECK(aclrtLaunchHostFunc(stream, count_host_func, &g_host_funcs));
    CHECK(aclrtRecordEvent(end, stream));
    CHECK(aclrtSynchronizeEventWithTimeout(end, 10000));
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    CHECK(aclrtQueryEventStatus(end, &status));
    uint64_t t0 = 0, t1 = 0;
    CHECK(aclrtEventElapsedTime(&ms, start, end));
    CHECK(aclrtEventGetTimestamp(start, &t0));
    CHECK(aclrtEventGetTimestamp(end, &t1));
    printf("end complete %d, host functions run %d, elapsed >= 0 %d, timestamps ordered %d\n",
           status == ACL_EVENT_RECORDED_STATUS_COMPLETE, g_host_funcs, ms >= 0.0f, t0 <= t1);
    CHECK(aclrtDestroyEvent(start));
    CHECK(aclrtDestroyEvent(end));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0)); /* the set-up's reference: the primary context goes */

    /* A teardown in the order some samples use: the device reset before its streams. */
    aclrtStream primary_stream = NULL;
    aclrtEvent event = NULL;
    void *dev = NULL;
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&primary_stream));
    CHECK(aclrtCreateEvent(&event));
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemsetAsync(dev, BYTES, 1, BYTES, primary_stream));
    CHECK(aclrtRecordEvent(event, primary_stream));
    CHECK(aclrtResetDevice(0));
    printf("destroy a stream of the reset device: %d\n", aclrtDestroyStream(primary_stream));
    CHECK(aclrtSynchronizeEvent(event));
    CHECK(aclrtDestroyEvent(event));
    CHECK(aclrtFree(dev));
    printf("reset the device again: %d\n", aclrtResetDevice(0));

    /* aclFinalize with the explicit context still alive; the process exits cleanly. */
    CHECK(aclFinalize());
    printf("second aclFinalize: %d\n", aclFinalize());
    printf("sample flows ok\n");
    return 0;
}
