/* A gate for host functions (aclrtLaunchHostFunc, aclrtLaunchCallback): `gate` holds its
 * stream until the test opens it, as a device held by a slow task would, so that work queued
 * behind it can be aborted, reset or timed out against while it waits. */
#ifndef NPUSIM_TEST_HOST_GATE_H
#define NPUSIM_TEST_HOST_GATE_H

#include <stdatomic.h>
#include <time.h>

static atomic_int g_gate_open;

/* A millisecond's pause, between looks at a flag another thread sets. */
static void pause_ms(void)
{
    struct timespec ms = {0, 1000000L};
    nanosleep(&ms, NULL);
}

/* The host function that waits until the gate is open. */
static void gate(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_gate_open)) {
        pause_ms();
    }
}

#endif
