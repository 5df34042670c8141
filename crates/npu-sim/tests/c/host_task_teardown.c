/* Calls that wait for a whole context or device, made from a host task of one of its streams:
 * a host function, a blocking callback being processed, or the report thread a blocking
 * callback waits for. Each would wait for the caller itself, so it must come back with 207000
 * at once and leave everything as it was, even when another stream of the context (created
 * first, so waited for first) waits for an event recorded behind the host task. alarm() ends
 * the program should one of them hang. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "acl/acl_rt_memory_soma.h"
#include "check.h"

static aclrtContext g_ctx;
static void *g_mem;
static void *g_host;
static aclrtMemPool g_pool;
static aclError (*g_action)(void);
static volatile aclError g_inside;

static aclError sync_device(void) { return aclrtSynchronizeDevice(); }
static aclError sync_device_timed(void) { return aclrtSynchronizeDeviceWithTimeout(-1); }
static aclError free_with_sync(void) { return aclrtFreeWithDevSync(g_mem); }
static aclError free_host_with_sync(void) { return aclrtFreeHostWithDevSync(g_host); }
static aclError destroy_pool(void) { return aclrtMemPoolDestroy(g_pool); }
static aclError abort_device(void) { return aclrtDeviceTaskAbort(0, 0); }
static aclError destroy_context(void) { return aclrtDestroyContext(g_ctx); }
static aclError reset_force(void) { return aclrtResetDeviceForce(0); }

static void act(void *data) {
    (void)data;
    /* The runtime's thread is bound to the context first, as any thread must be. */
    aclError err = aclrtSetCurrentContext(g_ctx);
    g_inside = err == ACL_SUCCESS ? g_action() : err;
}

/* Runs `action` in a host function (`how` 0), a blocking callback (1), or on the report
 * thread before it processes a blocking callback (2), on stream `a` of a fresh context; stream
 * `b`, created before `a`, waits for an event recorded on `a` behind the host task. Prints
 * what the action got; the memory and the pool must still be there afterwards. */
static int run(const char *name, aclError (*action)(void), int primary, int how) {
    if (primary) {
        CHECK(aclrtSetDevice(0));
        CHECK(aclrtGetCurrentContext(&g_ctx));
    } else {
        CHECK(aclrtCreateContext(&g_ctx, 0));
    }
    CHECK(aclrtMalloc(&g_mem, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&g_host, 4096));
    aclrtMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    props.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    props.location.id = 0;
    props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    props.maxSize = (size_t)1 << 26;
    CHECK(aclrtMemPoolCreate(&g_pool, &props));
    aclrtStream a, b;
    aclrtEvent behind;
    CHECK(aclrtCreateStream(&b));
    CHECK(aclrtCreateStream(&a));
    CHECK(aclrtCreateEvent(&behind));
    g_action = action;
    g_inside = -1;
    uint64_t self = (uint64_t)pthread_self();
    if (how == 0) {
        CHECK(aclrtLaunchHostFunc(a, act, NULL));
    } else {
        CHECK(aclrtSubscribeReport(self, a));
        CHECK(aclrtLaunchCallback(act, NULL, ACL_CALLBACK_BLOCK, a));
    }
    CHECK(aclrtRecordEvent(behind, a));
    CHECK(aclrtStreamWaitEvent(b, behind));
    if (how == 1) {
        CHECK(aclrtProcessReport(10000));
    } else if (how == 2) {
        act(NULL);
        CHECK(aclrtProcessReport(10000));
    }
    CHECK(aclrtSetCurrentContext(g_ctx));
    CHECK(aclrtSynchronizeEvent(behind));
    CHECK(aclrtSynchronizeStream(b));
    static const char *const hows[] = {"a host function", "a blocking callback",
                                       "the report thread"};
    printf("%s from %s: %d\n", name, hows[how], g_inside);
    if (how != 0) {
        CHECK(aclrtUnSubscribeReport(self, a));
    }
    /* Still allocated: the refused call freed nothing. */
    CHECK(aclrtFree(g_mem));
    CHECK(aclrtFreeHost(g_host));
    CHECK(aclrtMemPoolDestroy(g_pool));
    CHECK(aclrtDestroyEvent(behind));
    CHECK(aclrtDestroyStream(a));
    CHECK(aclrtDestroyStream(b));
    if (primary) {
        CHECK(aclrtResetDevice(0));
    } else {
        CHECK(aclrtDestroyContext(g_ctx));
    }
    return 0;
}

int main(void) {
    alarm(20);
    CHECK(aclInit(NULL));
    for (int how = 0; how < 3; how++) {
        if (run("aclrtSynchronizeDevice", sync_device, 0, how) ||
            run("aclrtSynchronizeDeviceWithTimeout", sync_device_timed, 0, how) ||
            run("aclrtFreeWithDevSync", free_with_sync, 0, how) ||
            run("aclrtFreeHostWithDevSync", free_host_with_sync, 0, how) ||
            run("aclrtMemPoolDestroy", destroy_pool, 0, how) ||
            run("aclrtDestroyContext", destroy_context, 0, how) ||
            run("aclrtResetDeviceForce", reset_force, 1, how)) {
            return 1;
        }
    }
    /* An abort drops a blocking callback nobody is processing instead of waiting for it: only
     * a host task running (a host function, a callback being processed) waits for itself. */
    for (int how = 0; how < 2; how++) {
        if (run("aclrtDeviceTaskAbort", abort_device, 0, how)) {
            return 1;
        }
    }
    CHECK(aclFinalize());
    printf("host task teardown ok\n");
    return 0;
}
