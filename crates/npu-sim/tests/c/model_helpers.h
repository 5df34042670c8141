/* Shared by the C programs that count checks (expect.h) and build model runtime instances:
 * reading and writing device bytes, PERSISTENT streams, the stream flags of aclmdlRIBindStream,
 * and running a body on a thread of its own. Programs including it need -pthread. */
#ifndef NPUSIM_TEST_MODEL_HELPERS_H
#define NPUSIM_TEST_MODEL_HELPERS_H

#include <pthread.h>
#include <stdint.h>

#include "acl/acl.h"
#include "expect.h"

/* ACL_MODEL_STREAM_FLAG_HEAD and _DEFAULT, which CANN's headers do not define. */
enum { HEAD = 0x0, ACTIVATED = 0x7FFFFFFF };

/* A handle no call made: an output a refused call must leave as it was. */
#define SENTINEL ((void *)(uintptr_t)0x5E17)

/* The byte at `dev`, or 0xEE when it cannot be read. */
static inline uint8_t byte_at(const void *dev)
{
    uint8_t value = 0xEE;
    (void)aclrtMemcpy(&value, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST);
    return value;
}

static inline aclError put(void *dev, const void *host, size_t len)
{
    return aclrtMemcpy(dev, len, host, len, ACL_MEMCPY_HOST_TO_DEVICE);
}

/* A stream aclmdlRIBindStream takes. */
static inline aclrtStream persistent_stream(void)
{
    aclrtStream stream = NULL;
    (void)aclrtCreateStreamWithConfig(&stream, 0, ACL_STREAM_PERSISTENT);
    return stream;
}

/* Runs `body` on a new thread (bound to no context until it binds one) and waits for it. */
static inline void on_thread(void *(*body)(void *), void *arg)
{
    pthread_t thread;
    if (pthread_create(&thread, NULL, body, arg) != 0) {
        holds("a thread was started", 0);
        return;
    }
    pthread_join(thread, NULL);
}

#endif /* NPUSIM_TEST_MODEL_HELPERS_H */
