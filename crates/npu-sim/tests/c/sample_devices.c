/*
 * A CANN sample's flow spread over every device, one thread per device: aclInit with an
 * acl.json keeping error messages for the process ("err_msg_mode": "1"), then on each device
 * thread aclrtSetDevice, an explicit context, a stream, pinned and device buffers, copies in
 * and out (aclrtMemcpyAsync with HOST_TO_DEVICE, DEVICE_TO_DEVICE and DEFAULT), a BLOCK
 * callback served by a report thread of that device's own (a thread serves the streams of one
 * device), an event recorded after the work; then the devices' work crossing over: device 0
 * copies device 1's buffer once peer access is on (refused before), waits for device 1's
 * event and synchronises device 1's stream (both accepted from another device's context);
 * then each thread's refused copy, whose message any thread reads under the process mode while
 * the last error stays the failing thread's; the teardown in the samples' order (stream,
 * context, device) and aclFinalize.
 *
 * Barriers order the threads; nothing depends on timing. Prints what each device computed and
 * how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own headers), which
 * compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"

enum { DEVICES = 2, BYTES = 8192, HALF = BYTES / 2 };

struct device_thread {
    int32_t device;
    pthread_t thread, report_thread;
    atomic_int stop_reporting;
    atomic_int callbacks, callbacks_elsewhere;
    aclrtContext context;
    aclrtStream stream;
    aclrtEvent done;
    void *host, *out, *dev, *dev2;
    int wrong_bytes;
    aclError refused, last_error, last_error_again;
};

static struct device_thread g_devices[DEVICES];
static pthread_barrier_t g_set_up, g_crossed, g_refused, g_messages_read;

/* The byte the sample writes at `i` on `device`: the first half is memset on the device. */
static unsigned char expected_byte(int32_t device, size_t i)
{
    return i < HALF ? (unsigned char)(0x40 + device) : (unsigned char)(i * 7 + (size_t)device);
}

static void *report(void *arg)
{
    struct device_thread *d = arg;
    while (!atomic_load(&d->stop_reporting)) {
        /* The samples' loop: 107012 until subscribed, 507012 when nothing came. */
        (void)aclrtProcessReport(100);
    }
    return NULL;
}

/* A BLOCK callback: it runs on its device's report thread, before the stream goes on. */
static void on_copied(void *arg)
{
    struct device_thread *d = arg;
    if (pthread_equal(pthread_self(), d->report_thread)) {
        atomic_fetch_add(&d->callbacks, 1);
    } else {
        atomic_fetch_add(&d->callbacks_elsewhere, 1);
    }
}

/* CHECK for a thread's function: stops the thread with the simulator's message. */
#define THREAD_CHECK(call)                                                                    \
    do {                                                                                      \
        aclError err_ = (call);                                                               \
        if (err_ != ACL_SUCCESS) {                                                            \
            printf("%s failed with %d: %s\n", #call, err_, aclGetRecentErrMsg());              \
            return NULL;                                                                      \
        }                                                                                     \
    } while (0)

static void *device_main(void *arg)
{
    struct device_thread *d = arg;
    THREAD_CHECK(aclrtSetDevice(d->device));
    THREAD_CHECK(aclrtCreateContext(&d->context, d->device));
    THREAD_CHECK(aclrtCreateStream(&d->stream));
    THREAD_CHECK(aclrtCreateEvent(&d->done));
    THREAD_CHECK(aclrtMallocHost(&d->host, BYTES));
    THREAD_CHECK(aclrtMallocHost(&d->out, BYTES));
    THREAD_CHECK(aclrtMalloc(&d->dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    THREAD_CHECK(aclrtMalloc(&d->dev2, BYTES, ACL_MEM_MALLOC_NORMAL_ONLY));
    for (size_t i = 0; i < BYTES; ++i) {
        ((unsigned char *)d->host)[i] = (unsigned char)(i * 7 + (size_t)d->device);
    }
    if (pthread_create(&d->report_thread, NULL, report, d) != 0) {
        printf("pthread_create failed\n");
        return NULL;
    }
    THREAD_CHECK(aclrtSubscribeReport((uint64_t)d->report_thread, d->stream));
    THREAD_CHECK(
        aclrtMemcpyAsync(d->dev, BYTES, d->host, BYTES, ACL_MEMCPY_HOST_TO_DEVICE, d->stream));
    THREAD_CHECK(aclrtMemsetAsync(d->dev, BYTES, 0x40 + d->device, HALF, d->stream));
    THREAD_CHECK(aclrtLaunchCallback(on_copied, d, ACL_CALLBACK_BLOCK, d->stream));
    THREAD_CHECK(aclrtMemcpyAsync(d->dev2, BYTES, d->dev, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE,
                                  d->stream));
    /* Pinned memory is read and written when the copies run: the input stays as it is. */
    THREAD_CHECK(
        aclrtMemcpyAsync(d->out, BYTES, d->dev2, BYTES, ACL_MEMCPY_DEFAULT, d->stream));
    THREAD_CHECK(aclrtRecordEvent(d->done, d->stream));
    THREAD_CHECK(aclrtSynchronizeStream(d->stream));
    for (size_t i = 0; i < BYTES; ++i) {
        d->wrong_bytes += ((unsigned char *)d->out)[i] != expected_byte(d->device, i);
    }

    pthread_barrier_wait(&g_set_up);
    pthread_barrier_wait(&g_crossed);

    /* A refused call: its message is the process's, its last error this thread's. */
    d->refused = aclrtMemcpy(d->out, HALF, d->dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST);
    pthread_barrier_wait(&g_refused);
    pthread_barrier_wait(&g_messages_read);
    d->last_error = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    d->last_error_again = aclrtGetLastError(ACL_RT_THREAD_LEVEL);

    /* The samples' teardown: unsubscribe, free, stream, context, device. */
    THREAD_CHECK(aclrtUnSubscribeReport((uint64_t)d->report_thread, d->stream));
    atomic_store(&d->stop_reporting, 1);
    pthread_join(d->report_thread, NULL);
    THREAD_CHECK(aclrtDestroyEvent(d->done));
    THREAD_CHECK(aclrtFree(d->dev));
    THREAD_CHECK(aclrtFree(d->dev2));
    THREAD_CHECK(aclrtFreeHost(d->host));
    THREAD_CHECK(aclrtFreeHost(d->out));
    THREAD_CHECK(aclrtDestroyStream(d->stream));
    THREAD_CHECK(aclrtDestroyContext(d->context));
    THREAD_CHECK(aclrtResetDevice(d->device));
    return NULL;
}

/* Writes `text` to a new temporary file; its path goes to `path`. */
static int config_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/npu-sim-sample-devices-%d.json", (int)getpid());
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        return -1;
    }
    fputs(text, file);
    return fclose(file);
}

/* The number of messages in `text` that begin with `prefix` (each message is a line). */
static int messages_starting(const char *text, const char *prefix)
{
    int found = 0;
    for (const char *line = text; line != NULL && *line != '\0';) {
        found += strncmp(line, prefix, strlen(prefix)) == 0;
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    return found;
}

int main(void)
{
    alarm(60);
    char path[128];
    if (config_file(path, sizeof path, "{\"err_msg_mode\": \"1\"}") != 0) {
        printf("cannot write the configuration file\n");
        return 1;
    }
    CHECK(aclInit(path));
    remove(path);
    uint32_t count = 0;
    CHECK(aclrtGetDeviceCount(&count));
    HOLDS(count == DEVICES);

    pthread_barrier_init(&g_set_up, NULL, DEVICES + 1);
    pthread_barrier_init(&g_crossed, NULL, DEVICES + 1);
    pthread_barrier_init(&g_refused, NULL, DEVICES + 1);
    pthread_barrier_init(&g_messages_read, NULL, DEVICES + 1);
    for (int32_t i = 0; i < DEVICES; ++i) {
        g_devices[i].device = i;
        if (pthread_create(&g_devices[i].thread, NULL, device_main, &g_devices[i]) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    }
    pthread_barrier_wait(&g_set_up);

    /* Device 0 takes device 1's results: a copy between them needs peer access first. */
    struct device_thread *zero = &g_devices[0], *one = &g_devices[1];
    CHECK(aclrtSetCurrentContext(zero->context));
    int32_t can = -1;
    EXPECT(aclrtDeviceCanAccessPeer(&can, 0, 1), ACL_SUCCESS);
    HOLDS(can == 1);
    EXPECT(aclrtMemcpyAsync(zero->dev, BYTES, one->dev2, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE,
                            zero->stream),
           ACL_ERROR_RT_NO_PERMISSION);
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtDeviceEnablePeerAccess(1, 0), ACL_SUCCESS);
    /* Another device's event and stream: waited for from this context. */
    EXPECT(aclrtSynchronizeEvent(one->done), ACL_SUCCESS);
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    EXPECT(aclrtQueryEventStatus(one->done, &status), ACL_SUCCESS);
    HOLDS(status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT(aclrtSynchronizeStream(one->stream), ACL_SUCCESS);
    /* ...but no work goes on another context's stream. */
    EXPECT(aclrtMemcpyAsync(zero->dev, BYTES, one->dev2, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE,
                            one->stream),
           ACL_ERROR_RT_STREAM_CONTEXT);
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtMemcpyAsync(zero->dev, BYTES, one->dev2, BYTES, ACL_MEMCPY_DEVICE_TO_DEVICE,
                            zero->stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(zero->out, BYTES, zero->dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST,
                            zero->stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(zero->stream), ACL_SUCCESS);
    int wrong_peer = 0;
    for (size_t i = 0; i < BYTES; ++i) {
        wrong_peer += ((unsigned char *)zero->out)[i] != expected_byte(1, i);
    }
    EXPECT(aclrtDeviceDisablePeerAccess(1), ACL_SUCCESS);
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    pthread_barrier_wait(&g_crossed);

    /* Each device thread's refused copy: both messages are read here, once. */
    pthread_barrier_wait(&g_refused);
    const char *messages = aclGetRecentErrMsg();
    int refused_copies = messages_starting(messages, "aclrtMemcpy failed with 107000");
    HOLDS(aclGetRecentErrMsg() == NULL);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
    pthread_barrier_wait(&g_messages_read);

    for (int i = 0; i < DEVICES; ++i) {
        pthread_join(g_devices[i].thread, NULL);
        struct device_thread *d = &g_devices[i];
        EXPECT(d->refused, ACL_ERROR_RT_PARAM_INVALID);
        EXPECT(d->last_error, ACL_ERROR_RT_PARAM_INVALID);
        EXPECT(d->last_error_again, ACL_SUCCESS);
        printf("device %d: %d wrong bytes, callbacks on its report thread %d, elsewhere %d\n",
               i, d->wrong_bytes, atomic_load(&d->callbacks),
               atomic_load(&d->callbacks_elsewhere));
    }
    printf("device 1's results on device 0: %d wrong bytes\n", wrong_peer);
    printf("refused copies read from the main thread: %d\n", refused_copies);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    checks_done("sample checks");
    return 0;
}
