/*
 * npusimFailKernel and npusimClearFaults as a C test suite uses them: a fault on a kernel name
 * fires on whichever stream launches it, counting launches across streams and leaving other
 * kernels alone; kernels of a captured instance count at each execution, not at the capture,
 * and a PERSISTENT stream's kept launches not at all (for its own task faults either); a
 * cleared fault never fires; refused arguments get their codes.
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

enum { N = 256, TRAP = 507015 };

static aclError launch(aclrtFuncHandle func, void *args, size_t size, aclrtStream stream)
{
    return aclrtLaunchKernelWithHostArgs(func, 1, stream, NULL, args, size, NULL, 0);
}

int main(void)
{
    void *x = NULL;
    aclrtStream first = NULL, second = NULL, replaying = NULL, kept = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle scale = NULL, add = NULL;
    aclmdlRI model = NULL;
    uint64_t cleared = 99;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&first));
    CHECK(aclrtCreateStream(&second));
    CHECK(aclrtCreateStream(&replaying));
    CHECK(aclrtCreateStreamWithConfig(&kept, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "scale_f32", &scale));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&x, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    npusimScaleArgs scaled = { (float *)x, N, 2.0f, 0 };
    npusimVectorAddArgs added = { (const float *)x, (const float *)x, (float *)x, N };

    printf("refused: NULL name %d, empty name %d, nth 0 %d, success %d, a wait's code %d, "
           "device 99 %d, clearing device 99 %d\n",
           (int)npusimFailKernel(0, NULL, 1, TRAP), (int)npusimFailKernel(0, "", 1, TRAP),
           (int)npusimFailKernel(0, "scale_f32", 0, TRAP),
           (int)npusimFailKernel(0, "scale_f32", 1, ACL_SUCCESS),
           (int)npusimFailKernel(0, "scale_f32", 1, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT),
           (int)npusimFailKernel(99, "scale_f32", 1, TRAP), (int)npusimClearFaults(99, NULL));
    CHECK(npusimClearFaults(0, &cleared));
    printf("nothing armed by the refusals: %llu\n", (unsigned long long)cleared);

    /* The second scale_f32 launch from now, on whichever stream; vector_add_f32 does not count. */
    CHECK(npusimFailKernel(0, "scale_f32", 2, TRAP));
    CHECK(launch(scale, &scaled, sizeof scaled, first));
    CHECK(launch(add, &added, sizeof added, second));
    printf("first scale_f32 %d, vector_add_f32 %d\n", (int)aclrtSynchronizeStream(first),
           (int)aclrtSynchronizeStream(second));
    CHECK(launch(scale, &scaled, sizeof scaled, second));
    printf("second scale_f32, on the other stream: %d\n", (int)aclrtSynchronizeStream(second));

    /* Captured: the capture is no launch, each execution of the instance is one. */
    CHECK(npusimFailKernel(0, "scale_f32", 2, TRAP));
    CHECK(aclmdlRICaptureBegin(first, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(launch(scale, &scaled, sizeof scaled, first));
    CHECK(aclmdlRICaptureEnd(first, &model));
    CHECK(aclmdlRIExecuteAsync(model, replaying));
    aclError once = aclrtSynchronizeStream(replaying);
    CHECK(aclmdlRIExecuteAsync(model, replaying));
    printf("executions: %d, then %d\n", (int)once, (int)aclrtSynchronizeStream(replaying));

    /* A PERSISTENT stream keeps its launches for an instance and runs none: not one to fail. */
    CHECK(npusimFailKernel(0, "scale_f32", 1, TRAP));
    CHECK(launch(scale, &scaled, sizeof scaled, kept));
    CHECK(launch(scale, &scaled, sizeof scaled, second));
    printf("after a kept launch, the next one: %d\n", (int)aclrtSynchronizeStream(second));
    /* Nor a task to fail: a stream's fault on it stays armed past a kept launch. */
    CHECK(npusimFailTask(kept, 1, TRAP));
    CHECK(launch(scale, &scaled, sizeof scaled, kept));
    CHECK(npusimClearFaults(0, &cleared));
    printf("a PERSISTENT stream's fault, after a kept launch: %llu armed\n",
           (unsigned long long)cleared);

    /* Cleared: a stream's fault and a kernel's, neither fires. */
    CHECK(npusimFailTask(first, 1, TRAP));
    CHECK(npusimFailKernel(0, "scale_f32", 1, TRAP));
    CHECK(npusimFailKernel(0, "no_such_kernel", 1, TRAP));
    CHECK(npusimClearFaults(0, &cleared));
    CHECK(launch(scale, &scaled, sizeof scaled, first));
    printf("cleared %llu, then scale_f32 %d, cleared again (NULL count) %d\n",
           (unsigned long long)cleared, (int)aclrtSynchronizeStream(first),
           (int)npusimClearFaults(0, NULL));
    CHECK(npusimClearFaults(0, &cleared));
    printf("left armed: %llu\n", (unsigned long long)cleared);

    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtFree(x));
    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtDestroyStream(first));
    CHECK(aclrtDestroyStream(second));
    CHECK(aclrtDestroyStream(replaying));
    CHECK(aclrtDestroyStream(kept));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("kernel fault flow ok\n");
    return 0;
}
