/* Runtime calls from a thread-exit destructor (a pthread key's), which runs after the thread's
 * own thread-local storage is gone: a program releasing per-thread resources there. The
 * thread has submitted work and failed a call before, so the runtime's thread-local state was
 * in use. Each call must return its code: aclGetRecentErrMsg aborted the process, and a
 * submission returned 507000 for a task it had queued. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <unistd.h>

#include "check.h"

static pthread_key_t g_key;
static aclrtStream g_stream;
static void *g_dev;

static void at_thread_exit(void *value) {
    (void)value;
    aclError memset = aclrtMemsetAsync(g_dev, 64, 7, 64, g_stream);
    aclError sync = aclrtSynchronizeStream(g_stream);
    aclError refused = aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    (void)aclGetRecentErrMsg();
    (void)aclGetRecentErrMsg();
    aclError peek = aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL);
    printf("at thread exit: memset %d, sync %d, refused %d, last error %d\n", memset, sync,
           refused, peek);
}

static void *thread_main(void *arg) {
    (void)arg;
    if (aclrtSetDevice(0) != ACL_SUCCESS ||
        aclrtMemsetAsync(g_dev, 64, 1, 64, g_stream) != ACL_SUCCESS ||
        aclrtSynchronizeStream(g_stream) != ACL_SUCCESS) {
        printf("thread setup failed\n");
        return NULL;
    }
    /* A message left pending for the thread. */
    (void)aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    pthread_setspecific(g_key, &g_key);
    return NULL;
}

int main(void) {
    alarm(20);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&g_stream));
    CHECK(aclrtMalloc(&g_dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    if (pthread_key_create(&g_key, at_thread_exit) != 0) {
        return 1;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, thread_main, NULL) != 0 ||
        pthread_join(thread, NULL) != 0) {
        return 1;
    }
    unsigned char bytes[64];
    CHECK(aclrtMemcpy(bytes, sizeof bytes, g_dev, 64, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("the memset at thread exit ran: %s\n", bytes[0] == 7 && bytes[63] == 7 ? "yes" : "no");
    CHECK(aclrtFree(g_dev));
    CHECK(aclrtDestroyStream(g_stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("thread exit calls ok\n");
    return 0;
}
