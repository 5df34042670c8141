/* Call orders C programs get wrong with callbacks: a one-thread program synchronizing its
 * stream before processing the blocking callback it launched, and a host function
 * synchronizing its own stream. Each call comes back with a code instead of waiting for ever;
 * alarm() ends the program should one of them hang. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"

static aclrtStream g_stream;
static aclError g_inside = -1;

static void noop(void *data) { (void)data; }

static void sync_own_stream(void *data) {
    (void)data;
    /* The runtime's thread is bound to the device first, as any thread must be. */
    if (aclrtSetDevice(0) == ACL_SUCCESS) {
        g_inside = aclrtSynchronizeStream(g_stream);
    }
}

int main(void) {
    alarm(20);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&g_stream));

    uint64_t self = (uint64_t)pthread_self();
    CHECK(aclrtSubscribeReport(self, g_stream));
    CHECK(aclrtLaunchCallback(noop, NULL, ACL_CALLBACK_BLOCK, g_stream));
    printf("sync before processing the callback: %d\n", aclrtSynchronizeStream(g_stream));
    CHECK(aclrtProcessReport(1000));
    CHECK(aclrtSynchronizeStream(g_stream));
    CHECK(aclrtUnSubscribeReport(self, g_stream));

    CHECK(aclrtLaunchHostFunc(g_stream, sync_own_stream, NULL));
    CHECK(aclrtSynchronizeStream(g_stream));
    printf("a host function synchronizing its own stream: %d\n", g_inside);

    CHECK(aclrtDestroyStream(g_stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("callback misuse ok\n");
    return 0;
}
