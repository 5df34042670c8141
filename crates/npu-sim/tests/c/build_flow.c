/*
 * A model runtime instance built explicitly, as CANN's model-stream samples lay one out: a HEAD
 * stream that clears the output, copies the input in and activates a second stream, which
 * runs vector_add_f32 and copies the result out. The instance is executed synchronously
 * several times on new input, and each result is checked.
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

/* aclmdlRIBindStream's flags; CANN documents their values but its headers do not define them. */
enum { STREAM_HEAD = 0x0, STREAM_ACTIVATED = 0x7FFFFFFF };
enum { N = 4096, BLOCKS = 4, ROUNDS = 3 };

int main(void)
{
    void *in = NULL, *out = NULL;
    float *host_in = NULL, *host_out = NULL;
    aclrtStream head = NULL, activated = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;
    aclmdlRI model = NULL;
    const size_t bytes = N * sizeof(float);

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStreamWithConfig(&head, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtCreateStreamWithConfig(&activated, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&in, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost((void **)&host_in, bytes));
    CHECK(aclrtMallocHost((void **)&host_out, bytes));

    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, STREAM_HEAD));
    CHECK(aclmdlRIBindStream(model, activated, STREAM_ACTIVATED));
    CHECK(aclrtMemsetAsync(out, bytes, 0, bytes, head));
    CHECK(aclrtMemcpyAsync(in, bytes, host_in, bytes, ACL_MEMCPY_HOST_TO_DEVICE, head));
    CHECK(aclrtActiveStream(activated, head));
    CHECK(aclmdlRIEndTask(model, head));
    npusimVectorAddArgs args = { (const float *)in, (const float *)in, (float *)out, N };
    CHECK(aclrtLaunchKernelWithHostArgs(add, BLOCKS, activated, NULL, &args, sizeof args, NULL, 0));
    CHECK(aclrtMemcpyAsync(host_out, bytes, out, bytes, ACL_MEMCPY_DEVICE_TO_HOST, activated));
    CHECK(aclmdlRIEndTask(model, activated));
    CHECK(aclmdlRIBuildEnd(model, NULL));

    uint32_t head_tasks = 0, activated_tasks = 0;
    CHECK(aclmdlRIGetTasksByStream(head, NULL, &head_tasks));
    CHECK(aclmdlRIGetTasksByStream(activated, NULL, &activated_tasks));
    printf("head stream %u tasks, activated stream %u tasks\n", head_tasks, activated_tasks);

    for (int round = 1; round <= ROUNDS; ++round) {
        for (int i = 0; i < N; ++i) {
            host_in[i] = (float)(i + round);
            host_out[i] = -1.0f;
        }
        CHECK(aclmdlRIExecute(model, -1));
        int wrong = 0;
        for (int i = 0; i < N; ++i) {
            wrong += host_out[i] != 2.0f * host_in[i];
        }
        printf("execution %d: %d wrong\n", round, wrong);
    }

    CHECK(aclmdlRIUnbindStream(model, head));
    CHECK(aclmdlRIUnbindStream(model, activated));
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtFreeHost(host_in));
    CHECK(aclrtFreeHost(host_out));
    CHECK(aclrtFree(in));
    CHECK(aclrtFree(out));
    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(activated));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("build flow ok\n");
    return 0;
}
