/* A stream state callback calling the runtime back when a context's default stream is created:
 * it asks for the current device and context, allocates memory and sets (then resets) the
 * device whose context is being created. aclrtSetDevice on a thread still bound to the
 * device's earlier primary context, and aclrtCreateContext, must each come back with every
 * call answered. alarm() ends the program should one of them hang. */
#define _POSIX_C_SOURCE 200809L

#include <unistd.h>

#include "check.h"

static int g_armed;

static void on_state(aclrtStream stream, aclrtStreamState state, void *args) {
    (void)stream;
    (void)args;
    if (!g_armed || state != ACL_RT_STREAM_STATE_CREATE_POST) {
        return;
    }
    int32_t device = -1;
    aclrtContext context = NULL;
    void *memory = NULL;
    aclError get = aclrtGetDevice(&device);
    aclError current = aclrtGetCurrentContext(&context);
    aclError allocated = aclrtMalloc(&memory, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    if (allocated == ACL_SUCCESS) {
        allocated = aclrtFree(memory);
    }
    /* The device is set while its context is created: a reference more, given back. */
    aclError set = aclrtSetDevice(device < 0 ? 0 : device);
    if (set == ACL_SUCCESS) {
        set = aclrtResetDevice(device < 0 ? 0 : device);
    }
    printf("created: device %d (%d), context %s (%d), malloc %d, set %d\n", device, get,
           context != NULL ? "set" : "NULL", current, allocated, set);
}

int main(void) {
    alarm(20);
    CHECK(aclInit(NULL));
    CHECK(aclrtRegStreamStateCallback("calls back", on_state, NULL));
    /* The thread stays bound to device 0's primary context after the reset. */
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtResetDevice(0));
    g_armed = 1;
    CHECK(aclrtSetDevice(0));
    aclrtContext context;
    CHECK(aclrtCreateContext(&context, 1));
    g_armed = 0;
    CHECK(aclrtDestroyContext(context));
    CHECK(aclrtResetDevice(0));
    CHECK(aclrtRegStreamStateCallback("calls back", NULL, NULL));
    CHECK(aclFinalize());
    printf("state callback calls ok\n");
    return 0;
}
