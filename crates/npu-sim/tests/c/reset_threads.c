/*
 * aclrtResetDevice while other threads still hold streams, as a server that shuts down one
 * worker at a time does it. Two worker threads share device 0's default context through their
 * own aclrtSetDevice (the reference counts every set); a third works in an explicit context of
 * the device. The main thread's reset only drops its reference: the workers' streams go on.
 * The last worker's reset releases the default context while its stream still holds queued
 * work behind a host function (a gate) that the main thread opens only once the device state
 * callback has announced the reset (RESET_PRE): the reset waits for that work, as the reference
 * says, so the work has run when it returns, and the released streams are gone. The explicit
 * context's stream is untouched throughout, and a new aclrtSetDevice gives the device a new
 * default context. Prints a summary and the count of checks. Compiled by tests/c_programs.rs
 * (also against CANN's own headers), which compares the output.
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

enum { BYTES = 1024 };

static atomic_int g_reset_announced;
static atomic_int g_ran_before_release;

static void mark(void *arg)
{
    atomic_store((atomic_int *)arg, 1);
}

static void on_device_state(int32_t device, aclrtDeviceState state, void *args)
{
    (void)args;
    if (device == 0 && state == ACL_RT_DEVICE_STATE_RESET_PRE) {
        atomic_store(&g_reset_announced, 1);
    }
}

/* A worker step the main thread waits for, and what it saw. */
struct worker {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int step;  /* what the main thread asks for */
    int done;  /* what the worker finished */
    int explicit_context;
    int releases; /* its reset is the last of the default context */
    aclrtContext ctx;
    aclrtStream stream;
    void *dev;
    unsigned char host[BYTES];
    aclError codes[8];
    int filled;
};

static void finish(struct worker *w, int step)
{
    pthread_mutex_lock(&w->lock);
    w->done = step;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

static void await_step(struct worker *w, int step)
{
    pthread_mutex_lock(&w->lock);
    while (w->step < step) {
        pthread_cond_wait(&w->changed, &w->lock);
    }
    pthread_mutex_unlock(&w->lock);
}

static void order(struct worker *w, int step)
{
    pthread_mutex_lock(&w->lock);
    w->step = step;
    pthread_cond_broadcast(&w->changed);
    while (w->done < step) {
        pthread_cond_wait(&w->changed, &w->lock);
    }
    pthread_mutex_unlock(&w->lock);
}

static int all(const unsigned char *bytes, unsigned char value)
{
    for (int i = 0; i < BYTES; i++) {
        if (bytes[i] != value) {
            return 0;
        }
    }
    return 1;
}

/* Fills the worker's device buffer with `value` on its stream and reads it back. */
static aclError fill_and_read(struct worker *w, unsigned char value)
{
    aclError err = aclrtMemsetAsync(w->dev, BYTES, value, BYTES, w->stream);
    if (err == ACL_SUCCESS) {
        err = aclrtSynchronizeStream(w->stream);
    }
    if (err == ACL_SUCCESS) {
        err = aclrtMemcpy(w->host, BYTES, w->dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST);
    }
    w->filled += err == ACL_SUCCESS && all(w->host, value);
    return err;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    /* Step 1: set up. */
    await_step(w, 1);
    w->codes[0] = w->explicit_context ? aclrtCreateContext(&w->ctx, 0) : aclrtSetDevice(0);
    w->codes[1] = aclrtCreateStream(&w->stream);
    w->codes[2] = aclrtMalloc(&w->dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST);
    finish(w, 1);
    /* Step 2: work, after the main thread's reset. */
    await_step(w, 2);
    w->codes[3] = fill_and_read(w, 0x21);
    finish(w, 2);
    /* Step 3: queue work behind the gate and reset the device (the last default-context worker
     * only), then look at the released stream. */
    await_step(w, 3);
    if (!w->explicit_context) {
        w->codes[4] = aclrtFree(w->dev);
        if (w->releases) {
            w->codes[5] = aclrtLaunchHostFunc(w->stream, gate, NULL);
            (void)aclrtLaunchHostFunc(w->stream, mark, &g_ran_before_release);
        }
        w->codes[6] = aclrtResetDevice(0);
        w->codes[7] = aclrtSynchronizeStream(w->stream);
        (void)aclGetRecentErrMsg();
    } else {
        w->codes[4] = fill_and_read(w, 0x43);
    }
    finish(w, 3);
    /* Step 4: the explicit context's worker goes on, then tears down. */
    await_step(w, 4);
    if (w->explicit_context) {
        w->codes[5] = fill_and_read(w, 0x65);
        w->codes[6] = aclrtFree(w->dev);
        w->codes[7] = aclrtDestroyStream(w->stream);
        (void)aclrtDestroyContext(w->ctx);
    }
    finish(w, 4);
    return NULL;
}

static void init_worker(struct worker *w, int explicit_context, int releases)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->changed, NULL);
    w->explicit_context = explicit_context;
    w->releases = releases;
    for (int i = 0; i < 8; i++) {
        w->codes[i] = -1;
    }
}

int main(void)
{
    alarm(60);
    CHECK(aclInit(NULL));
    CHECK(aclrtRegDeviceStateCallback("reset_threads", on_device_state, NULL));
    CHECK(aclrtSetDevice(0));

    struct worker shared, last, apart;
    init_worker(&shared, 0, 0);
    init_worker(&last, 0, 1);
    init_worker(&apart, 1, 0);
    pthread_t threads[3];
    struct worker *workers[3] = {&shared, &last, &apart};
    for (int i = 0; i < 3; i++) {
        if (pthread_create(&threads[i], NULL, work, workers[i]) != 0) {
            return 1;
        }
    }
    for (int i = 0; i < 3; i++) {
        order(workers[i], 1);
    }
    for (int i = 0; i < 3; i++) {
        for (int c = 0; c < 3; c++) {
            EXPECT(workers[i]->codes[c], ACL_SUCCESS);
        }
    }

    /* The main thread's reset drops its reference only: the workers' streams go on. */
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    HOLDS(atomic_load(&g_reset_announced) == 0);
    for (int i = 0; i < 3; i++) {
        order(workers[i], 2);
        EXPECT(workers[i]->codes[3], ACL_SUCCESS);
    }

    /* The first worker leaves; its reset releases nothing while the last one holds the device. */
    order(&shared, 3);
    EXPECT(shared.codes[4], ACL_SUCCESS);
    EXPECT(shared.codes[6], ACL_SUCCESS);
    EXPECT(shared.codes[7], ACL_SUCCESS);
    HOLDS(atomic_load(&g_reset_announced) == 0);

    /* The last worker's reset releases the default context while its stream is held: the main
     * thread opens the gate once the reset is announced, and the reset waits for the work. */
    pthread_mutex_lock(&last.lock);
    last.step = 3;
    pthread_cond_broadcast(&last.changed);
    pthread_mutex_unlock(&last.lock);
    while (!atomic_load(&g_reset_announced)) {
        pause_ms();
    }
    atomic_store(&g_gate_open, 1);
    order(&last, 3);
    EXPECT(last.codes[4], ACL_SUCCESS);
    EXPECT(last.codes[5], ACL_SUCCESS);
    EXPECT(last.codes[6], ACL_SUCCESS);
    printf("the reset waited for the held work: %d\n", atomic_load(&g_ran_before_release));
    /* The released stream is gone. */
    FAILS(last.codes[7]);

    /* The explicit context is untouched by the default context's release. */
    order(&apart, 3);
    EXPECT(apart.codes[4], ACL_SUCCESS);
    order(&shared, 4);
    order(&last, 4);
    order(&apart, 4);
    for (int c = 5; c < 8; c++) {
        EXPECT(apart.codes[c], ACL_SUCCESS);
    }
    printf("fills read back: shared %d, last %d, explicit context %d\n", shared.filled, last.filled,
           apart.filled);
    for (int i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
    }

    /* A new set gives the device a new default context. */
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    CHECK(aclrtResetDevice(0));
    EXPECT(aclrtResetDevice(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    (void)aclGetRecentErrMsg();
    CHECK(aclrtRegDeviceStateCallback("reset_threads", NULL, NULL));
    CHECK(aclFinalize());
    checks_done("reset checks");
    return 0;
}
