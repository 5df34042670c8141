/*
 * Random number tasks and task updates as a CANN program uses them: a dropout bitmask and
 * uniform values generated on a stream, then a model runtime instance built with a uniform
 * task whose seed it reads from device memory, executed, updated by aclrtTaskUpdateAsync
 * (another seed and result, from an aclrtRandomNumTaskInfo in device memory) and executed
 * again.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

enum { N = 1024, MASK_BITS = 8192, STREAM_HEAD = 0x0 };

static aclrtRandomParaInfo value_of(const void *bytes, uint8_t size)
{
    aclrtRandomParaInfo info;
    memset(&info, 0, sizeof(info));
    memcpy(info.valueOrAddr, bytes, size);
    info.size = size;
    return info;
}

static aclrtRandomParaInfo address_of(void *addr)
{
    aclrtRandomParaInfo info;
    uint64_t bits = (uint64_t)(uintptr_t)addr;
    memset(&info, 0, sizeof(info));
    info.isAddr = 1;
    memcpy(info.valueOrAddr, &bits, sizeof(bits));
    info.size = 8;
    return info;
}

/* A task of `count` fp32 values of the uniform distribution over [lo, hi) into `result`. */
static aclrtRandomNumTaskInfo uniform(float lo, float hi, void *result, uint64_t seed, uint64_t count)
{
    aclrtRandomNumTaskInfo info;
    memset(&info, 0, sizeof(info));
    info.dataType = ACL_FLOAT;
    info.randomNumFuncParaInfo.funcType = ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS;
    info.randomNumFuncParaInfo.paramInfo.uniformDisInfo.min = value_of(&lo, sizeof(lo));
    info.randomNumFuncParaInfo.paramInfo.uniformDisInfo.max = value_of(&hi, sizeof(hi));
    info.randomResultAddr = result;
    info.randomSeed = value_of(&seed, sizeof(seed));
    info.randomNum = value_of(&count, sizeof(count));
    return info;
}

static int in_range(const float *values, int n, float lo, float hi)
{
    for (int i = 0; i < n; i++) {
        if (!(values[i] >= lo && values[i] < hi)) {
            return 0;
        }
    }
    return 1;
}

int main(void)
{
    aclrtStream stream = NULL, bound = NULL;
    aclmdlRI model = NULL;
    void *mask = NULL, *values = NULL, *other = NULL, *seed = NULL, *src = NULL;
    static uint8_t host_mask[MASK_BITS / 8];
    static float first[N], again[N], updated[N], direct[N];
    uint32_t task_id = 0;
    int kept = 0;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMalloc(&mask, sizeof(host_mask), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&values, sizeof(first), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&other, sizeof(first), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&seed, sizeof(uint64_t), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&src, sizeof(aclrtRandomNumTaskInfo), ACL_MEM_MALLOC_HUGE_FIRST));

    /* A dropout bitmask: each bit 1 (kept) with probability 1 - ratio. */
    {
        float ratio = 0.25f;
        uint64_t key = 5, bits = MASK_BITS;
        aclrtRandomNumTaskInfo info;
        memset(&info, 0, sizeof(info));
        info.dataType = ACL_FLOAT;
        info.randomNumFuncParaInfo.funcType = ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK;
        info.randomNumFuncParaInfo.paramInfo.dropoutBitmaskInfo.dropoutRation = value_of(&ratio, sizeof(ratio));
        info.randomResultAddr = mask;
        info.randomSeed = value_of(&key, sizeof(key));
        info.randomNum = value_of(&bits, sizeof(bits));
        CHECK(aclrtRandomNumAsync(&info, stream, NULL));
        CHECK(aclrtSynchronizeStream(stream));
        CHECK(aclrtMemcpy(host_mask, sizeof(host_mask), mask, sizeof(host_mask), ACL_MEMCPY_DEVICE_TO_HOST));
        for (int i = 0; i < MASK_BITS; i++) {
            kept += (host_mask[i / 8] >> (i % 8)) & 1;
        }
        printf("dropout: between 70%% and 80%% kept: %d\n", kept > MASK_BITS * 70 / 100 && kept < MASK_BITS * 80 / 100);
    }

    /* An instance whose uniform task reads its seed from device memory at each execution. */
    {
        uint64_t seed_value = 1;
        aclrtRandomNumTaskInfo info = uniform(-1.0f, 1.0f, values, 0, N);
        info.randomSeed = address_of(seed);
        CHECK(aclrtMemcpy(seed, sizeof(seed_value), &seed_value, sizeof(seed_value), ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK(aclrtCreateStreamWithConfig(&bound, 0, ACL_STREAM_PERSISTENT));
        CHECK(aclmdlRIBuildBegin(&model, 0));
        CHECK(aclmdlRIBindStream(model, bound, STREAM_HEAD));
        CHECK(aclrtRandomNumAsync(&info, bound, NULL));
        CHECK(aclrtGetThreadLastTaskId(&task_id));
        CHECK(aclmdlRIBuildEnd(model, NULL));
        printf("task id %u\n", task_id);
    }
    CHECK(aclmdlRIExecuteAsync(model, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(first, sizeof(first), values, sizeof(first), ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclmdlRIExecuteAsync(model, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(again, sizeof(again), values, sizeof(again), ACL_MEMCPY_DEVICE_TO_HOST));
    printf("execution 1: in [-1, 1): %d\n", in_range(first, N, -1.0f, 1.0f));
    printf("execution 2, same seed: same values: %d\n", memcmp(first, again, sizeof(first)) == 0);

    /* The update: seed 7 and another result buffer, read from device memory when it runs. */
    {
        aclrtRandomNumTaskInfo fields = uniform(-1.0f, 1.0f, other, 7, N);
        aclrtTaskUpdateInfo update;
        CHECK(aclrtMemcpy(src, sizeof(fields), &fields, sizeof(fields), ACL_MEMCPY_HOST_TO_DEVICE));
        memset(&update, 0, sizeof(update));
        update.id = ACL_RT_UPDATE_RANDOM_TASK;
        update.val.randomTaskAttr.srcAddr = src;
        update.val.randomTaskAttr.size = sizeof(fields);
        CHECK(aclrtTaskUpdateAsync(bound, task_id, &update, stream));
    }
    CHECK(aclmdlRIExecuteAsync(model, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(updated, sizeof(updated), other, sizeof(updated), ACL_MEMCPY_DEVICE_TO_HOST));
    {
        aclrtRandomNumTaskInfo info = uniform(-1.0f, 1.0f, values, 7, N);
        CHECK(aclrtRandomNumAsync(&info, stream, NULL));
        CHECK(aclrtSynchronizeStream(stream));
        CHECK(aclrtMemcpy(direct, sizeof(direct), values, sizeof(direct), ACL_MEMCPY_DEVICE_TO_HOST));
    }
    printf("execution 3, updated: the values of seed 7: %d\n", memcmp(updated, direct, sizeof(direct)) == 0);
    printf("execution 3, updated: other values than seed 1's: %d\n", memcmp(updated, first, sizeof(first)) != 0);

    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyStream(bound));
    CHECK(aclrtFree(mask));
    CHECK(aclrtFree(values));
    CHECK(aclrtFree(other));
    CHECK(aclrtFree(seed));
    CHECK(aclrtFree(src));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("random flow ok\n");
    return 0;
}
