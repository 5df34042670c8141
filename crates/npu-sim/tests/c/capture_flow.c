/*
 * Stream capture as CANN's graph samples use it: capture a small pipeline once (a memset, a
 * copy in, vector_add_f32, a copy out), replay it several times on new input, check each
 * result; meanwhile the capture status, the thread's capture mode, a name, an id, and the
 * instance's streams and tasks.
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

enum { N = 4096, BLOCKS = 4, ROUNDS = 3 };

int main(void)
{
    void *in = NULL, *out = NULL;
    float *host_in = NULL, *host_out = NULL;
    aclrtStream stream = NULL;
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;
    aclmdlRI model = NULL, seen = NULL;
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    const size_t bytes = N * sizeof(float);

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&in, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost((void **)&host_in, bytes));
    CHECK(aclrtMallocHost((void **)&host_out, bytes));

    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    CHECK(aclmdlRICaptureGetInfo(stream, &status, &seen));
    printf("capturing: status %d\n", (int)status);
    CHECK(aclrtMemsetAsync(out, bytes, 0, bytes, stream));
    CHECK(aclrtMemcpyAsync(in, bytes, host_in, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    npusimVectorAddArgs args = { (const float *)in, (const float *)in, (float *)out, N };
    CHECK(aclrtLaunchKernelWithHostArgs(add, BLOCKS, stream, NULL, &args, sizeof args, NULL, 0));
    CHECK(aclrtMemcpyAsync(host_out, bytes, out, bytes, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    /* GLOBAL mode: a synchronous copy is refused until the thread switches to RELAXED. */
    printf("synchronous copy while capturing: %d\n",
           (int)aclrtMemcpy(host_out, bytes, out, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode));
    printf("previous mode %d\n", (int)mode);
    CHECK(aclrtMemcpy(host_out, bytes, out, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode));
    CHECK(aclmdlRICaptureEnd(stream, &model));
    CHECK(aclmdlRICaptureGetInfo(stream, &status, &seen));
    printf("after the capture: status %d, instance NULL %d\n", (int)status, seen == NULL);

    CHECK(aclmdlRISetName(model, "add_pipeline"));
    char name[32];
    uint32_t id = 0;
    CHECK(aclmdlRIGetName(model, sizeof name, name));
    CHECK(aclmdlRIGetId(model, &id));
    printf("instance %s, id %d\n", name, id > 0);
    uint32_t streams = 0, tasks = 0, room = 1;
    aclrtStream model_stream = NULL;
    CHECK(aclmdlRIGetStreams(model, NULL, &streams));
    CHECK(aclmdlRIGetStreams(model, &model_stream, &room));
    CHECK(aclmdlRIGetTasksByStream(model_stream, NULL, &tasks));
    printf("%u stream, %u tasks\n", streams, tasks);

    for (int round = 1; round <= ROUNDS; ++round) {
        for (int i = 0; i < N; ++i) {
            host_in[i] = (float)(i * round);
            host_out[i] = -1.0f;
        }
        CHECK(aclmdlRIExecuteAsync(model, stream));
        CHECK(aclrtSynchronizeStream(stream));
        int wrong = 0;
        for (int i = 0; i < N; ++i) {
            wrong += host_out[i] != 2.0f * host_in[i];
        }
        printf("replay %d: %d wrong\n", round, wrong);
    }

    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtFreeHost(host_in));
    CHECK(aclrtFreeHost(host_out));
    CHECK(aclrtFree(in));
    CHECK(aclrtFree(out));
    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("capture flow ok\n");
    return 0;
}
