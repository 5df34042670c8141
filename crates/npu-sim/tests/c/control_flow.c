/*
 * Control flow in model runtime instances, as a CANN program writes it: a built instance whose
 * label switch and stream switch read their choice from device memory, and a captured one
 * with IF, WHILE and SWITCH tasks whose branches are captured into the instances the tasks
 * create. Every value is chosen by the host between executions of the same instance.
 */
#include <stdint.h>
#include <stdio.h>

#include "acl/acl.h"
#include "check.h"

/* ACL_MODEL_STREAM_FLAG_HEAD and _DEFAULT, which CANN's headers do not define. */
enum { HEAD = 0x0, ACTIVATED = 0x7FFFFFFF };

static uint8_t byte_at(const void *dev)
{
    uint8_t value = 0;
    if (aclrtMemcpy(&value, 1, dev, 1, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) {
        return 0xFF;
    }
    return value;
}

static int set_u32(void *dev, uint32_t value)
{
    return aclrtMemcpy(dev, 4, &value, 4, ACL_MEMCPY_HOST_TO_DEVICE);
}

static int set_u64(void *dev, uint64_t value)
{
    return aclrtMemcpy(dev, 8, &value, 8, ACL_MEMCPY_HOST_TO_DEVICE);
}

/* Runs the instance once on `stream` and waits. */
static int run(aclmdlRI model, aclrtStream stream)
{
    aclError err = aclmdlRIExecuteAsync(model, stream);
    return err != ACL_SUCCESS ? err : aclrtSynchronizeStream(stream);
}

/* Captures, into `branch`, a memset of `out` to `value` (and a value write of `clear` to
 * `word`, when `word` is not NULL). */
static int capture_branch(aclmdlRI branch, void *out, int value, void *word)
{
    aclrtStream stream = NULL;
    aclmdlRI ended = NULL;
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclmdlRICaptureToModelRIBegin(stream, branch, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclrtMemsetAsync(out, 1, value, 1, stream));
    if (word != NULL) {
        CHECK(aclrtValueWrite(word, 0, 0, stream));
    }
    CHECK(aclmdlRICaptureEnd(stream, &ended));
    CHECK(aclrtDestroyStream(stream));
    return ended == branch ? 0 : 1;
}

static int labels_and_stream_switches(void)
{
    aclrtStream head = NULL, other = NULL, exec = NULL;
    void *index = NULL, *left = NULL, *right = NULL, *out = NULL;
    aclmdlRI model = NULL;
    aclrtLabel labels[2] = { NULL, NULL };
    aclrtLabelList list = NULL;

    CHECK(aclrtCreateStreamWithConfig(&head, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtCreateStreamWithConfig(&other, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtCreateStream(&exec));
    CHECK(aclrtMalloc(&index, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&left, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&right, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(right, 64, 0, 64));

    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, HEAD));
    CHECK(aclmdlRIBindStream(model, other, ACTIVATED));
    CHECK(aclrtCreateLabel(&labels[0]));
    CHECK(aclrtCreateLabel(&labels[1]));
    CHECK(aclrtCreateLabelList(labels, 2, &list));
    /* head: the switch by stream first (to `other` when *left == *right), then by label. */
    CHECK(aclrtSwitchStream(left, ACL_RT_EQUAL, right, ACL_RT_SWITCH_INT32, other, NULL, head));
    CHECK(aclrtSwitchLabelByIndex(index, 2, list, head));
    CHECK(aclrtSetLabel(labels[0], head));
    CHECK(aclrtMemsetAsync(out, 1, 7, 1, head));
    CHECK(aclmdlRIEndTask(model, head));
    CHECK(aclrtSetLabel(labels[1], other));
    CHECK(aclrtMemsetAsync(out, 1, 9, 1, other));
    CHECK(aclmdlRIEndTask(model, other));
    CHECK(aclmdlRIBuildEnd(model, NULL));

    CHECK(set_u32(left, 1));
    for (uint32_t choice = 0; choice < 3; ++choice) {
        CHECK(set_u32(index, choice));
        CHECK(aclrtMemset(out, 1, 0, 1));
        CHECK(run(model, exec));
        printf("label %u: %u\n", choice, byte_at(out));
    }
    CHECK(set_u32(left, 0));
    CHECK(set_u32(index, 0));
    CHECK(run(model, exec));
    printf("stream switch taken: %u\n", byte_at(out));

    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyLabelList(list));
    CHECK(aclrtDestroyLabel(labels[0]));
    CHECK(aclrtDestroyLabel(labels[1]));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(other));
    CHECK(aclrtDestroyStream(exec));
    CHECK(aclrtFree(index));
    CHECK(aclrtFree(left));
    CHECK(aclrtFree(right));
    CHECK(aclrtFree(out));
    return 0;
}

static int conditional_tasks(void)
{
    aclrtStream stream = NULL;
    aclmdlRI model = NULL, seen = NULL, ended = NULL;
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRICondHandle if_handle = NULL, while_handle = NULL, switch_handle = NULL;
    aclmdlRI if_branches[2] = { NULL, NULL }, while_branch[1] = { NULL }, cases[3] = { NULL, NULL, NULL };
    uint64_t *if_word = NULL, *while_word = NULL, *switch_word = NULL;
    void *out = NULL;

    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclmdlRICaptureGetInfo(stream, &status, &seen));
    CHECK(aclmdlRICondHandleCreate(seen, 0, (aclmdlRICondHandleFlag)0, &if_handle));
    CHECK(aclmdlRICondHandleCreate(seen, 1, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, &while_handle));
    CHECK(aclmdlRICondHandleCreate(seen, 0, (aclmdlRICondHandleFlag)0, &switch_handle));
    CHECK(aclmdlRICondHandleGetCondPtr(if_handle, &if_word));
    CHECK(aclmdlRICondHandleGetCondPtr(while_handle, &while_word));
    CHECK(aclmdlRICondHandleGetCondPtr(switch_handle, &switch_word));
    aclmdlRICondTaskParams params = { if_handle, ACL_MODEL_RI_COND_TYPE_IF, 2, if_branches };
    CHECK(aclmdlRIAddCondTask(params, stream, 0));
    params = (aclmdlRICondTaskParams){ while_handle, ACL_MODEL_RI_COND_TYPE_WHILE, 1, while_branch };
    CHECK(aclmdlRIAddCondTask(params, stream, 0));
    params = (aclmdlRICondTaskParams){ switch_handle, ACL_MODEL_RI_COND_TYPE_SWITCH, 3, cases };
    CHECK(aclmdlRIAddCondTask(params, stream, 0));
    CHECK(aclmdlRICaptureEnd(stream, &model));

    /* Bytes 0 (IF), 1 (WHILE: its branch clears the word, so it runs once) and 2 (SWITCH). */
    char *bytes = (char *)out;
    CHECK(capture_branch(if_branches[0], bytes, 1, NULL));
    CHECK(capture_branch(if_branches[1], bytes, 2, NULL));
    CHECK(capture_branch(while_branch[0], bytes + 1, 3, while_word));
    for (int i = 0; i < 3; ++i) {
        CHECK(capture_branch(cases[i], bytes + 2, 10 * (i + 1), NULL));
    }
    const uint64_t choices[3] = { 1, 0, 5 };
    for (int run_no = 0; run_no < 3; ++run_no) {
        CHECK(aclrtMemset(out, 3, 0, 3));
        CHECK(set_u64(if_word, choices[run_no]));
        CHECK(set_u64(switch_word, (uint64_t)run_no * 2));
        CHECK(run(model, stream));
        printf("run %d: if %u, while %u, switch %u\n", run_no, byte_at(bytes), byte_at(bytes + 1),
               byte_at(bytes + 2));
    }
    (void)ended;
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtFree(out));
    return 0;
}

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    if (labels_and_stream_switches() != 0 || conditional_tasks() != 0) {
        return 1;
    }
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("control flow ok\n");
    return 0;
}
