/*
 * The API reference's notify (08), counted notify (09), label (10), execution control (12),
 * model runtime instance (15) and compute group (16) chapters, function by function: every
 * function the chapters document is called here, with the edges control_chapter_edges.c does
 * not walk. For each function: its NULL arguments (100000, the ACL layer's parameter code,
 * before any handle is looked up or another argument checked), a destroyed handle (107017),
 * a stream of another context (107003) or not bound to an instance (107005), the documented
 * limits and flags, and what a successful call does that a program can see: the order a
 * notify puts between two streams and the one record it counts, a label switch skipping the
 * rest of its own stream, callbacks holding (BLOCK) or not holding their stream and captured
 * ones running at each execution, the report thread's subscriptions, a thread's own last task,
 * an instance's state from capture or build to execution (or to its destruction half built),
 * its streams, tasks and names, and the functions an Atlas A2 does not support
 * (counted notifies, compute groups, the super-node whitelist, millisecond timeouts: 207000).
 * Where the reference's error table names the code for a situation the code is checked, else
 * only a failure. Prints a line for each mismatch, then how many checks ran. Compiled by
 * tests/c_programs.rs (also against CANN's own headers), which compares the output.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"
#include "model_helpers.h"

/* aclmdlRIDebugPrint is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static aclrtContext g_primary;
/* Another context of device 0, with a stream and a label of its own. */
static aclrtContext g_side;
static aclrtStream g_side_stream;
/* A context of device 1, with a stream of its own. */
static aclrtContext g_far;
static aclrtStream g_far_stream;
/* A stream that was destroyed. */
static aclrtStream g_gone;

/* ---- 08 notifies ---- */

static int notify_handles(aclrtStream s1)
{
    aclrtNotify a = NULL, b = NULL, dead = NULL, out = SENTINEL;
    char key[65];
    int32_t pid = 0;
    uint32_t id_a = 0, id_b = 0, id_dead = 0, id = 77;
    CHECK(aclrtDeviceGetBareTgid(&pid));

    /* aclrtCreateNotify: the pointer before the flag; a refused call writes nothing. */
    EXPECT(aclrtCreateNotify(NULL, ACL_NOTIFY_DEFAULT), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateNotify(NULL, 2), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtCreateNotify(&out, 2));
    FAILS(aclrtCreateNotify(&out, ACL_NOTIFY_DEVICE_USE_ONLY | 0x100));
    HOLDS(out == SENTINEL);
    EXPECT(aclrtCreateNotify(&a, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtCreateNotify(&b, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtCreateNotify(&dead, ACL_NOTIFY_DEVICE_USE_ONLY), ACL_SUCCESS);
    HOLDS(a != NULL && b != NULL && a != b);

    /* aclrtGetNotifyId: one id per notify, the same at each call. */
    EXPECT(aclrtGetNotifyId(a, &id_a), ACL_SUCCESS);
    EXPECT(aclrtGetNotifyId(b, &id_b), ACL_SUCCESS);
    EXPECT(aclrtGetNotifyId(dead, &id_dead), ACL_SUCCESS);
    HOLDS(id_a != id_b && id_b != id_dead && id_a != id_dead);
    EXPECT(aclrtGetNotifyId(a, &id), ACL_SUCCESS);
    HOLDS(id == id_a);

    /* A destroyed notify: 107017 from every function that takes one, its NULL arguments
     * refused first. */
    EXPECT(aclrtDestroyNotify(dead), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordNotify(dead, s1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtWaitAndResetNotify(dead, s1, 0), ACL_ERROR_RT_INVALID_HANDLE);
    id = 77;
    EXPECT(aclrtGetNotifyId(dead, &id), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(id == 77);
    EXPECT(aclrtGetNotifyId(dead, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifyGetExportKey(dead, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtNotifyGetExportKey(dead, NULL, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifySetImportPid(dead, &pid, 1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtNotifySetImportPid(dead, NULL, 1), ACL_ERROR_INVALID_PARAM);
    aclrtNotify with_dead[2] = {a, dead};
    EXPECT(aclrtNotifyBatchReset(with_dead, 2), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyNotify(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordNotify(NULL, s1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtWaitAndResetNotify(NULL, s1, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRecordNotify(NULL, g_gone), ACL_ERROR_INVALID_PARAM);

    /* The stream: a destroyed one → 107017, one of another context → 107003. */
    EXPECT(aclrtRecordNotify(a, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtWaitAndResetNotify(a, g_gone, 0), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtRecordNotify(a, g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtWaitAndResetNotify(a, g_side_stream, 0), ACL_ERROR_RT_STREAM_CONTEXT);

    /* A notify is one device's: not recorded or waited on another device's stream. */
    aclrtNotify far = NULL;
    uint32_t far_id = 0;
    CHECK(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtCreateNotify(&far, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtGetNotifyId(far, &far_id), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(far, g_far_stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(g_far_stream), ACL_SUCCESS);
    CHECK(aclrtSetCurrentContext(g_primary));
    FAILS(aclrtRecordNotify(far, s1));
    FAILS(aclrtWaitAndResetNotify(far, s1, 0));
    CHECK(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtWaitAndResetNotify(far, g_far_stream, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(g_far_stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(far), ACL_SUCCESS);
    CHECK(aclrtSetCurrentContext(g_primary));

    /* Export keys: at least 65 bytes; either flag; the whitelist of several pids. */
    memset(key, 0, sizeof key);
    FAILS(aclrtNotifyGetExportKey(a, key, 64, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));
    FAILS(aclrtNotifyGetExportKey(a, key, sizeof key, 0x1));
    HOLDS(key[0] == '\0');
    EXPECT(aclrtNotifyGetExportKey(a, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    HOLDS(key[0] != '\0' && memchr(key, '\0', sizeof key) != NULL);
    int32_t pids[2] = {pid, pid + 1};
    EXPECT(aclrtNotifySetImportPid(a, pids, 2), ACL_SUCCESS);
    EXPECT(aclrtNotifySetImportPid(NULL, NULL, 0), ACL_ERROR_INVALID_PARAM);
    char open_key[80];
    EXPECT(aclrtNotifyGetExportKey(b, open_key, sizeof open_key,
                                   ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION),
           ACL_SUCCESS);
    HOLDS(open_key[0] != '\0' && strcmp(open_key, key) != 0);
    /* aclrtNotifyImportByKey: its pointers before its flags and key. */
    EXPECT(aclrtNotifyImportByKey(NULL, key, 0x1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifyImportByKey(&out, NULL, ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS),
           ACL_ERROR_INVALID_PARAM);
    HOLDS(out == SENTINEL);

    /* The super-node whitelist is not an Atlas A2 function: its NULL arguments, then 207000. */
    aclrtServerPid server;
    memset(&server, 0, sizeof server);
    server.pid = pids;
    server.num = 1;
    EXPECT(aclrtNotifySetImportPidInterServer(NULL, &server, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifySetImportPidInterServer(a, NULL, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifySetImportPidInterServer(a, &server, 1), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    EXPECT(aclrtDestroyNotify(a), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(b), ACL_SUCCESS);
    /* A destroyed notify exports nothing. */
    EXPECT(aclrtNotifyGetExportKey(a, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
           ACL_ERROR_RT_INVALID_HANDLE);
    return 0;
}

static int notify_order(aclrtStream s1, aclrtStream s2)
{
    aclrtNotify a = NULL, b = NULL;
    void *dev = NULL;
    char *bytes = NULL;
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dev, 64, 0, 64));
    bytes = dev;
    CHECK(aclrtCreateNotify(&a, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtCreateNotify(&b, ACL_NOTIFY_DEFAULT));

    /* Stream 2 waits for stream 1: its later work runs only after the record. */
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(bytes, 1, 2, 1, s2));
    EXPECT(aclrtStreamQuery(s2, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    HOLDS(byte_at(bytes) == 0);
    CHECK(aclrtMemsetAsync(bytes + 1, 1, 1, 1, s1));
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    HOLDS(byte_at(bytes) == 2 && byte_at(bytes + 1) == 1);

    /* A notify counts to one: two records satisfy one wait. */
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtStreamQuery(s2, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);

    /* NULL is the current context's default stream, on either side. */
    EXPECT(aclrtRecordNotify(a, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(b, NULL, 0), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(bytes + 2, 1, 3, 1, NULL));
    HOLDS(byte_at(bytes + 2) == 0);
    EXPECT(aclrtRecordNotify(b, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    HOLDS(byte_at(bytes + 2) == 3);

    /* aclrtNotifyBatchReset clears every notify given, the same one twice included; one it
     * refuses clears none. */
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(b, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    aclrtNotify twice[3] = {a, b, a};
    EXPECT(aclrtNotifyBatchReset(twice, 3), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(b, s2, 0), ACL_SUCCESS);
    status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtStreamQuery(s2, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(b, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtRecordNotify(a, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    aclrtNotify with_null[2] = {a, NULL};
    EXPECT(aclrtNotifyBatchReset(with_null, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifyBatchReset(with_null, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtWaitAndResetNotify(a, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);

    /* A wait whose timeout (seconds) passes with no record fails its stream's
     * synchronisation; the stream then goes on. */
    EXPECT(aclrtWaitAndResetNotify(b, s2, 1), ACL_SUCCESS);
    FAILS(aclrtSynchronizeStream(s2));
    CHECK(aclrtMemsetAsync(bytes + 3, 1, 4, 1, s2));
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    HOLDS(byte_at(bytes + 3) == 4);

    CHECK(aclrtDestroyNotify(a));
    CHECK(aclrtDestroyNotify(b));
    CHECK(aclrtFree(dev));
    return 0;
}

/* ---- 09 counted notifies: not on an Atlas A2 ---- */

static int counted_notifies(aclrtStream s1)
{
    aclrtCntNotify fake = SENTINEL, out = SENTINEL;
    aclrtCntNotifyRecordInfo record;
    aclrtCntNotifyWaitInfo wait;
    uint32_t id = 7;
    memset(&record, 0, sizeof record);
    memset(&wait, 0, sizeof wait);
    record.mode = ACL_RT_CNT_NOTIFY_RECORD_SET_VALUE_MODE;
    record.value = 1;
    wait.mode = ACL_RT_CNT_NOTIFY_WAIT_EQUAL_MODE;
    wait.value = 1;
    /* Each pointer argument is checked first (100000), then the values (the reserved flag:
     * 107000), then the stream, then the function refused (207000). */
    EXPECT(aclrtCntNotifyCreate(NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyCreate(&out, 1), ACL_ERROR_RT_PARAM_INVALID);
    HOLDS(out == SENTINEL);
    EXPECT(aclrtCntNotifyCreate(&out, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(out == SENTINEL);
    EXPECT(aclrtCntNotifyRecord(NULL, s1, &record), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyRecord(fake, s1, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyRecord(fake, NULL, &record), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCntNotifyWaitWithTimeout(NULL, s1, &wait), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyWaitWithTimeout(fake, s1, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyWaitWithTimeout(fake, NULL, &wait), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCntNotifyReset(NULL, s1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyReset(fake, NULL), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCntNotifyGetId(NULL, &id), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyGetId(fake, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyGetId(fake, &id), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(id == 7);
    EXPECT(aclrtCntNotifyDestroy(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCntNotifyDestroy(fake), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    return 0;
}

/* ---- 10 labels ---- */

static int label_handles(void)
{
    aclrtLabel labels[2] = {NULL, NULL}, dead = NULL;
    aclrtLabelList list = SENTINEL, dead_list = NULL;
    void *index = NULL;
    aclrtStream plain = NULL, head = persistent_stream();
    aclmdlRI model = NULL;
    CHECK(aclrtMalloc(&index, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtCreateStream(&plain));
    EXPECT(aclrtCreateLabel(&labels[0]), ACL_SUCCESS);
    EXPECT(aclrtCreateLabel(&labels[1]), ACL_SUCCESS);
    EXPECT(aclrtCreateLabel(&dead), ACL_SUCCESS);
    HOLDS(labels[0] != labels[1] && labels[1] != dead);
    EXPECT(aclrtDestroyLabel(dead), ACL_SUCCESS);
    EXPECT(aclrtDestroyLabel(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtDestroyLabel(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateLabel(NULL), ACL_ERROR_INVALID_PARAM);

    /* aclrtCreateLabelList: (0, 65535] labels, each one aclrtCreateLabel made and still
     * there; a refused call writes nothing. */
    EXPECT(aclrtCreateLabelList(labels, 65536, &list), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateLabelList(NULL, 0, &list), ACL_ERROR_INVALID_PARAM);
    aclrtLabel with_dead[2] = {labels[0], dead};
    EXPECT(aclrtCreateLabelList(with_dead, 2, &list), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtCreateLabelList(with_dead, 2, NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(list == SENTINEL);
    EXPECT(aclrtCreateLabelList(labels, 2, &dead_list), ACL_SUCCESS);
    EXPECT(aclrtDestroyLabelList(dead_list), ACL_SUCCESS);
    EXPECT(aclrtDestroyLabelList(dead_list), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtCreateLabelList(labels, 2, &list), ACL_SUCCESS);

    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, HEAD));
    /* aclrtSetLabel: the label first (NULL 100000, destroyed 107017), then the stream
     * (destroyed 107017, another context's 107003, not bound to an instance 107005). */
    EXPECT(aclrtSetLabel(NULL, plain), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetLabel(dead, head), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetLabel(dead, plain), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetLabel(labels[0], g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSetLabel(labels[0], g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtSetLabel(labels[0], plain), ACL_ERROR_RT_STREAM_MODEL);
    /* aclrtSwitchLabelByIndex: its pointers and maxValue, then the list, then the stream. */
    EXPECT(aclrtSwitchLabelByIndex(NULL, 2, dead_list, plain), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSwitchLabelByIndex(index, 0, dead_list, plain), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSwitchLabelByIndex(index, 2, dead_list, head), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSwitchLabelByIndex(index, 2, list, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtSwitchLabelByIndex(index, 2, list, g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtSwitchLabelByIndex(index, 2, list, plain), ACL_ERROR_RT_STREAM_MODEL);
    /* The index: a 4-byte word of device memory. */
    FAILS(aclrtSwitchLabelByIndex((char *)index + 2, 2, list, head));
    uint32_t host_word = 0;
    FAILS(aclrtSwitchLabelByIndex(&host_word, 2, list, head));
    /* A label of another context: 507031, in the table of codes. */
    aclrtLabel foreign = NULL;
    aclrtLabelList foreign_list = NULL;
    CHECK(aclrtSetCurrentContext(g_side));
    CHECK(aclrtCreateLabel(&foreign));
    CHECK(aclrtSetCurrentContext(g_primary));
    aclrtLabel mixed[2] = {labels[0], foreign};
    CHECK(aclrtCreateLabelList(mixed, 2, &foreign_list));
    EXPECT(aclrtSwitchLabelByIndex(index, 2, foreign_list, head), ACL_ERROR_RT_LABEL_CONTEXT);
    EXPECT(aclrtSetLabel(foreign, head), ACL_ERROR_RT_LABEL_CONTEXT);
    CHECK(aclrtDestroyLabelList(foreign_list));
    CHECK(aclrtDestroyLabel(foreign));

    CHECK(aclmdlRIEndTask(model, head));
    CHECK(aclmdlRIBuildEnd(model, NULL));
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyLabelList(list));
    CHECK(aclrtDestroyLabel(labels[0]));
    CHECK(aclrtDestroyLabel(labels[1]));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(plain));
    CHECK(aclrtFree(index));
    return 0;
}

/* A switch jumping forward on its own stream: the tasks between it and the label chosen do
 * not run, the ones after the label do. */
static int label_switching(aclrtStream exec)
{
    aclrtLabel labels[2] = {NULL, NULL};
    aclrtLabelList list = NULL;
    aclrtStream head = persistent_stream();
    aclmdlRI model = NULL;
    void *index = NULL;
    char *out = NULL;
    CHECK(aclrtMalloc(&index, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc((void **)&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtCreateLabel(&labels[0]));
    CHECK(aclrtCreateLabel(&labels[1]));
    CHECK(aclrtCreateLabelList(labels, 2, &list));
    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, HEAD));
    EXPECT(aclrtSwitchLabelByIndex(index, 2, list, head), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out, 1, 1, 1, head));
    EXPECT(aclrtSetLabel(labels[0], head), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out + 1, 1, 2, 1, head));
    EXPECT(aclrtSetLabel(labels[1], head), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out + 2, 1, 3, 1, head));
    /* A label is set once. */
    FAILS(aclrtSetLabel(labels[0], head));
    CHECK(aclmdlRIEndTask(model, head));
    /* No label, no switch after the stream's end. */
    FAILS(aclrtSwitchLabelByIndex(index, 2, list, head));
    CHECK(aclmdlRIBuildEnd(model, NULL));

    const uint32_t indexes[3] = {0, 1, 9};
    const uint8_t wanted[3][3] = {{0, 2, 3}, {0, 0, 3}, {0, 0, 3}};
    for (int i = 0; i < 3; ++i) {
        CHECK(put(index, &indexes[i], 4));
        CHECK(aclrtMemset(out, 3, 0, 3));
        EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
        int right = 1;
        for (int b = 0; b < 3; ++b) {
            right &= byte_at(out + b) == wanted[i][b];
        }
        if (!right) {
            printf("index %u ran %u %u %u\n", indexes[i], byte_at(out), byte_at(out + 1),
                   byte_at(out + 2));
        }
        holds("the switch skips to its label on its own stream", right);
    }
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyLabelList(list));
    CHECK(aclrtDestroyLabel(labels[0]));
    CHECK(aclrtDestroyLabel(labels[1]));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtFree(index));
    CHECK(aclrtFree(out));
    return 0;
}

/* ---- 12 execution control ---- */

static int g_runs;
static void *g_data;

static void count_call(void *data)
{
    ++g_runs;
    g_data = data;
}

struct subscription {
    aclrtStream stream;
    aclError subscribe;
};

static void *subscribe_other_thread(void *arg)
{
    struct subscription *sub = arg;
    sub->subscribe = aclrtSetCurrentContext(g_primary);
    if (sub->subscribe == ACL_SUCCESS) {
        sub->subscribe = aclrtSubscribeReport((uint64_t)pthread_self(), sub->stream);
    }
    return NULL;
}

static int callbacks(aclrtStream stream, aclrtStream other)
{
    uint64_t self = (uint64_t)pthread_self();
    int data = 0;
    char *dev = NULL;
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    CHECK(aclrtMalloc((void **)&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dev, 64, 0, 64));

    /* Before any subscription: the stream has none (107011), nor the thread (107012). */
    EXPECT(aclrtUnSubscribeReport(self, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    EXPECT(aclrtSubscribeReport(self, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtUnSubscribeReport(self, g_gone), ACL_ERROR_RT_INVALID_HANDLE);

    /* One thread a stream; a thread may serve several streams of one device. */
    EXPECT(aclrtSubscribeReport(self, stream), ACL_SUCCESS);
    EXPECT(aclrtSubscribeReport(self, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    struct subscription sub = {stream, ACL_SUCCESS};
    on_thread(subscribe_other_thread, &sub);
    expect("aclrtSubscribeReport of a subscribed stream by another thread", sub.subscribe,
           ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtSubscribeReport(self, other), ACL_SUCCESS);
    /* Not one thread for streams of two devices. */
    CHECK(aclrtSetCurrentContext(g_far));
    EXPECT(aclrtSubscribeReport(self, g_far_stream), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    CHECK(aclrtSetCurrentContext(g_primary));

    /* aclrtLaunchCallback: its function and block type before the stream. */
    EXPECT(aclrtLaunchCallback(NULL, &data, ACL_CALLBACK_NO_BLOCK, g_gone),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchCallback(count_call, &data, (aclrtCallbackBlockType)2, g_gone),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchCallback(count_call, &data, ACL_CALLBACK_NO_BLOCK, g_gone),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchCallback(count_call, &data, ACL_CALLBACK_NO_BLOCK, g_side_stream),
           ACL_ERROR_RT_STREAM_CONTEXT);

    /* BLOCK: the stream's later work waits until the report thread has run the callback. */
    g_runs = 0;
    EXPECT(aclrtLaunchCallback(count_call, &data, ACL_CALLBACK_BLOCK, stream), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(dev, 1, 9, 1, stream));
    HOLDS(byte_at(dev) == 0);
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    HOLDS(g_runs == 0);
    EXPECT(aclrtProcessReport(-1), ACL_SUCCESS);
    HOLDS(g_runs == 1 && g_data == &data);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 9);
    /* NO_BLOCK: the stream goes on without it; the callback still runs once. */
    EXPECT(aclrtLaunchCallback(count_call, NULL, ACL_CALLBACK_NO_BLOCK, other), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(dev + 1, 1, 8, 1, other));
    EXPECT(aclrtSynchronizeStream(other), ACL_SUCCESS);
    HOLDS(byte_at(dev + 1) == 8 && g_runs == 1);
    EXPECT(aclrtProcessReport(-1), ACL_SUCCESS);
    HOLDS(g_runs == 2 && g_data == NULL);
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);

    /* Unsubscribing: by the subscribed thread only, once. */
    EXPECT(aclrtUnSubscribeReport(self + 1, stream), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    EXPECT(aclrtUnSubscribeReport(self, stream), ACL_SUCCESS);
    EXPECT(aclrtUnSubscribeReport(self, stream), ACL_ERROR_RT_STREAM_SUBSCRIBE);
    EXPECT(aclrtLaunchCallback(count_call, NULL, ACL_CALLBACK_NO_BLOCK, stream),
           ACL_ERROR_RT_STREAM_NO_CB_REG);
    /* NULL is the default stream, for subscriptions as for callbacks. */
    EXPECT(aclrtSubscribeReport(self, NULL), ACL_SUCCESS);
    EXPECT(aclrtLaunchCallback(count_call, &data, ACL_CALLBACK_BLOCK, NULL), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(dev + 2, 1, 7, 1, NULL));
    HOLDS(byte_at(dev + 2) == 0);
    EXPECT(aclrtProcessReport(-1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    HOLDS(g_runs == 3 && g_data == &data && byte_at(dev + 2) == 7);
    EXPECT(aclrtUnSubscribeReport(self, NULL), ACL_SUCCESS);
    /* The thread still serves `other`: it waits there (and times out). */
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);
    EXPECT(aclrtUnSubscribeReport(self, other), ACL_SUCCESS);
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_THREAD_SUBSCRIBE);
    CHECK(aclrtFree(dev));
    return 0;
}

/* A captured callback runs at each execution, queued for the thread subscribed to the stream
 * executing the instance: none there, and it is dropped. */
static int captured_callbacks(aclrtStream stream, aclrtStream exec)
{
    uint64_t self = (uint64_t)pthread_self();
    aclmdlRI model = NULL;
    int data = 0;
    CHECK(aclrtSubscribeReport(self, stream));
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    g_runs = 0;
    EXPECT(aclrtLaunchCallback(count_call, &data, ACL_CALLBACK_NO_BLOCK, stream), ACL_SUCCESS);
    CHECK(aclmdlRICaptureEnd(stream, &model));
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);
    HOLDS(g_runs == 0);
    for (int run = 1; run <= 2; ++run) {
        EXPECT(aclmdlRIExecuteAsync(model, stream), ACL_SUCCESS);
        EXPECT(aclrtProcessReport(-1), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
        HOLDS(g_runs == run && g_data == &data);
    }
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);
    HOLDS(g_runs == 2);
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtUnSubscribeReport(self, stream));
    return 0;
}

static int g_order[4];
static int g_calls;

static void log_host_func(void *args)
{
    if (g_calls < 4) {
        g_order[g_calls] = (int)(intptr_t)args;
    }
    ++g_calls;
}

struct last_task {
    aclrtStream stream;
    uint32_t before, after;
    aclError result;
};

static void *submit_elsewhere(void *arg)
{
    struct last_task *task = arg;
    void *dev = NULL;
    task->result = aclrtSetCurrentContext(g_primary);
    if (task->result == ACL_SUCCESS) {
        task->result = aclrtGetThreadLastTaskId(&task->before);
    }
    if (task->result == ACL_SUCCESS) {
        task->result = aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    }
    for (int i = 0; i < 3 && task->result == ACL_SUCCESS; ++i) {
        task->result = aclrtMemsetAsync(dev, 64, 0, 64, task->stream);
    }
    if (task->result == ACL_SUCCESS) {
        task->result = aclrtGetThreadLastTaskId(&task->after);
    }
    if (dev != NULL) {
        (void)aclrtSynchronizeStream(task->stream);
        (void)aclrtFree(dev);
    }
    return NULL;
}

static int execution_control(aclrtStream stream, aclrtStream other)
{
    /* aclrtLaunchHostFunc: the function before the stream; host functions run in their
     * stream's order, on the default stream too. */
    EXPECT(aclrtLaunchHostFunc(g_gone, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchHostFunc(g_gone, log_host_func, NULL), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtLaunchHostFunc(g_side_stream, log_host_func, NULL), ACL_ERROR_RT_STREAM_CONTEXT);
    g_calls = 0;
    EXPECT(aclrtLaunchHostFunc(stream, log_host_func, (void *)(intptr_t)1), ACL_SUCCESS);
    EXPECT(aclrtLaunchHostFunc(stream, log_host_func, (void *)(intptr_t)2), ACL_SUCCESS);
    EXPECT(aclrtLaunchHostFunc(stream, log_host_func, (void *)(intptr_t)3), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(g_calls == 3 && g_order[0] == 1 && g_order[1] == 2 && g_order[2] == 3);
    EXPECT(aclrtLaunchHostFunc(NULL, log_host_func, (void *)(intptr_t)4), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    HOLDS(g_calls == 4 && g_order[3] == 4);

    /* aclrtGetThreadLastTaskId is the calling thread's: another thread's tasks leave it. */
    void *dev = NULL;
    uint32_t mine = 0, again = 0;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    EXPECT(aclrtGetThreadLastTaskId(&mine), ACL_SUCCESS);
    struct last_task task = {other, 0, 0, ACL_ERROR_FAILURE};
    on_thread(submit_elsewhere, &task);
    expect("a thread's last task id", task.result, ACL_SUCCESS);
    HOLDS(task.after != task.before);
    EXPECT(aclrtGetThreadLastTaskId(&again), ACL_SUCCESS);
    HOLDS(again == mine);
    CHECK(aclrtSynchronizeStream(stream));

    /* Execute timeouts: the longest (interval * 254) for a timeout above it. */
    uint64_t interval = 0, actual = 0;
    uint32_t ms = 0;
    EXPECT(aclrtGetOpTimeOutInterval(&interval), ACL_SUCCESS);
    EXPECT(aclrtSetOpExecuteTimeOutV2(UINT64_MAX, &actual), ACL_SUCCESS);
    HOLDS(actual == interval * 254);
    EXPECT(aclrtSetOpExecuteTimeOutV2(interval * 254, &actual), ACL_SUCCESS);
    HOLDS(actual == interval * 254);
    EXPECT(aclrtSetOpExecuteTimeOut(UINT32_MAX), ACL_SUCCESS);
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS(ms == (uint32_t)(interval * 254 / 1000));
    /* Milliseconds are not an Atlas A2's unit: 207000, the setting kept. */
    EXPECT(aclrtSetOpExecuteTimeOutWithMs(0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS(ms == (uint32_t)(interval * 254 / 1000));

    /* aclrtReduceAsync: its pointers before the stream; the default stream. */
    int16_t left[4] = {1, -2, 300, 0}, right[4] = {5, 7, -301, 0}, got[4] = {0, 0, 0, 0};
    void *dst = NULL, *src = NULL;
    CHECK(aclrtMalloc(&dst, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&src, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    EXPECT(aclrtReduceAsync(NULL, src, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16, g_gone,
                            NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtReduceAsync(dst, NULL, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16, g_gone,
                            NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtReduceAsync(dst, src, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16, g_gone,
                            NULL),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtReduceAsync(dst, src, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16,
                            g_side_stream, NULL),
           ACL_ERROR_RT_STREAM_CONTEXT);
    FAILS(aclrtReduceAsync(dst, left, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16, stream,
                           NULL));
    CHECK(put(dst, left, sizeof left));
    CHECK(put(src, right, sizeof right));
    EXPECT(aclrtReduceAsync(dst, src, sizeof left, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT16,
                            NULL, NULL),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    CHECK(aclrtMemcpy(got, sizeof got, dst, sizeof got, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(got[0] == 6 && got[1] == 5 && got[2] == -1 && got[3] == 0);

    /* Random numbers and task updates: their information and reserve arguments first. */
    EXPECT(aclrtRandomNumAsync(NULL, g_gone, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtTaskUpdateAsync(g_gone, 1, NULL, g_gone), ACL_ERROR_INVALID_PARAM);

    CHECK(aclrtFree(dst));
    CHECK(aclrtFree(src));
    CHECK(aclrtFree(dev));
    return 0;
}

/* ---- 15 model runtime instances ---- */

static int g_destroy_calls[2];

static void first_destroy_callback(void *data)
{
    (void)data;
    ++g_destroy_calls[0];
}

static void second_destroy_callback(void *data)
{
    (void)data;
    ++g_destroy_calls[1];
}

/* Every instance function given NULL (100000) and a destroyed instance (107017). */
static int stale_instances(aclrtStream stream, aclrtStream exec)
{
    aclmdlRI dead = NULL, out = SENTINEL;
    aclrtStream bound = persistent_stream();
    aclmdlRICondHandle cond = SENTINEL;
    uint32_t id = 7, count = 7;
    char name[16] = "kept";
    CHECK(aclmdlRIBuildBegin(&dead, 0));
    CHECK(aclmdlRIBuildEnd(dead, NULL));
    EXPECT(aclmdlRIDestroy(dead), ACL_SUCCESS);

    EXPECT(aclmdlRIBindStream(dead, bound, HEAD), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIBindStream(dead, bound, 5), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIEndTask(dead, bound), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIBuildEnd(dead, NULL), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIBuildEnd(dead, &id), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIUnbindStream(dead, bound), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIExecute(dead, -1), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIExecuteAsync(dead, exec), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIDestroy(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRISetName(dead, "x"), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIGetName(dead, sizeof name, name), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(strcmp(name, "kept") == 0);
    EXPECT(aclmdlRIGetId(dead, &id), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(id == 7);
    EXPECT(aclmdlRIAbort(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIGetStreams(dead, NULL, &count), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(count == 7);
    EXPECT(aclmdlRIUpdate(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIDebugPrint(dead), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIDebugJsonPrint(dead, "/tmp/npu-sim-never-written.json",
                                  ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIDestroyRegisterCallback(dead, first_destroy_callback, NULL),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIDestroyUnregisterCallback(dead, first_destroy_callback),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRICondHandleCreate(dead, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, &cond),
           ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(cond == SENTINEL);
    EXPECT(aclmdlRICaptureToModelRIBegin(stream, dead, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_INVALID_HANDLE);

    /* Arguments that need no lookup come first: a NULL pointer (100000), a reserved
     * argument, the flags, a timeout out of range (107000, the runtime's code). */
    EXPECT(aclmdlRIDestroyRegisterCallback(dead, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDestroyUnregisterCallback(dead, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetStreams(dead, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDebugJsonPrint(dead, "/tmp/npu-sim-never-written.json", 2),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDebugJsonPrint(dead, NULL, ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIExecute(dead, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclmdlRIExecute(dead, -2), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclmdlRISetName(dead, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetId(dead, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRICondHandleCreate(dead, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, NULL),
           ACL_ERROR_INVALID_PARAM);

    EXPECT(aclmdlRIBindStream(NULL, bound, HEAD), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIEndTask(NULL, bound), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIBuildEnd(NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIUnbindStream(NULL, bound), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIExecute(NULL, -1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIAbort(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIUpdate(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetStreams(NULL, NULL, &count), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetId(NULL, &id), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetName(NULL, sizeof name, name), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDebugPrint(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDebugJsonPrint(NULL, "/tmp/npu-sim-never-written.json",
                                  ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIDestroyUnregisterCallback(NULL, first_destroy_callback),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRICondHandleCreate(NULL, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, &cond),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRICaptureToModelRIBegin(stream, NULL, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIBuildBegin(&out, 0x80000000u), ACL_ERROR_INVALID_PARAM);
    HOLDS(out == SENTINEL);
    CHECK(aclrtDestroyStream(bound));
    return 0;
}

/* aclmdlRIBuildBegin to aclmdlRIDestroy: what each state takes and refuses. */
static int build_states(aclrtStream exec)
{
    aclmdlRI model = NULL, other = NULL;
    aclrtStream head = persistent_stream(), second = persistent_stream(),
                late = persistent_stream();
    char *out = NULL;
    CHECK(aclrtMalloc((void **)&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(out, 64, 0, 64));

    EXPECT(aclmdlRIBuildBegin(&model, 0), ACL_SUCCESS);
    /* The stream: destroyed 107017, another context's 107003, bound once. */
    EXPECT(aclmdlRIBindStream(model, g_gone, HEAD), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIBindStream(model, g_side_stream, HEAD), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclmdlRIBindStream(model, head, HEAD), ACL_SUCCESS);
    FAILS(aclmdlRIBindStream(model, head, HEAD));
    EXPECT(aclmdlRIBindStream(model, second, HEAD), ACL_SUCCESS);
    /* Tasks go into the instance: nothing runs before an execution. */
    CHECK(aclrtMemsetAsync(out, 1, 1, 1, head));
    CHECK(aclrtMemsetAsync(out + 1, 1, 2, 1, second));
    EXPECT(aclrtSynchronizeStream(head), ACL_SUCCESS);
    HOLDS(byte_at(out) == 0 && byte_at(out + 1) == 0);
    /* An instance still being built does not execute. */
    FAILS(aclmdlRIExecuteAsync(model, exec));
    FAILS(aclmdlRIExecute(model, -1));
    /* aclmdlRIEndTask: a stream bound to the instance (107005 otherwise). */
    EXPECT(aclmdlRIEndTask(model, exec), ACL_ERROR_RT_STREAM_MODEL);
    EXPECT(aclmdlRIEndTask(model, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIEndTask(model, head), ACL_SUCCESS);
    FAILS(aclrtMemsetAsync(out, 1, 9, 1, head));
    EXPECT(aclmdlRIEndTask(model, second), ACL_SUCCESS);
    EXPECT(aclmdlRIBuildEnd(model, NULL), ACL_SUCCESS);
    /* Once ended: no second end, no more streams. */
    FAILS(aclmdlRIBuildEnd(model, NULL));
    FAILS(aclmdlRIBindStream(model, late, HEAD));
    /* An instance whose build never ended may be destroyed: its streams are free again. */
    aclmdlRI abandoned = NULL;
    CHECK(aclmdlRIBuildBegin(&abandoned, 0));
    CHECK(aclmdlRIBindStream(abandoned, late, HEAD));
    CHECK(aclrtMemsetAsync(out + 3, 1, 5, 1, late));
    EXPECT(aclmdlRIDestroy(abandoned), ACL_SUCCESS);
    EXPECT(aclmdlRIBuildEnd(abandoned, NULL), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(byte_at(out + 3) == 0);

    /* Both HEAD streams run at each execution, synchronous or not. */
    EXPECT(aclmdlRIExecute(model, -1), ACL_SUCCESS);
    HOLDS(byte_at(out) == 1 && byte_at(out + 1) == 2);
    CHECK(aclrtMemset(out, 2, 0, 2));
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(byte_at(out) == 1 && byte_at(out + 1) == 2);
    /* Executing on another context's stream: 107003; from another context: 107004. */
    EXPECT(aclmdlRIExecuteAsync(model, g_side_stream), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclmdlRIExecuteAsync(model, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtSetCurrentContext(g_side));
    EXPECT(aclmdlRIExecuteAsync(model, g_side_stream), ACL_ERROR_RT_MODEL_CONTEXT);
    EXPECT(aclmdlRIExecute(model, -1), ACL_ERROR_RT_MODEL_CONTEXT);
    CHECK(aclrtSetCurrentContext(g_primary));

    /* Its streams are its bound streams; unbinding one takes it out. */
    aclrtStream streams[3] = {NULL, NULL, NULL};
    uint32_t count = 3;
    EXPECT(aclmdlRIGetStreams(model, streams, &count), ACL_SUCCESS);
    HOLDS(count == 2 && ((streams[0] == head && streams[1] == second) ||
                         (streams[0] == second && streams[1] == head)));
    EXPECT(aclmdlRIUnbindStream(model, g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIUnbindStream(model, exec), ACL_ERROR_RT_STREAM_MODEL);
    EXPECT(aclmdlRIUnbindStream(model, second), ACL_SUCCESS);
    count = 0;
    EXPECT(aclmdlRIGetStreams(model, NULL, &count), ACL_SUCCESS);
    HOLDS(count == 1);
    CHECK(aclrtMemset(out, 2, 0, 2));
    EXPECT(aclmdlRIExecute(model, 60000), ACL_SUCCESS);
    HOLDS(byte_at(out) == 1 && byte_at(out + 1) == 0);
    /* The unbound stream is free for another instance. */
    EXPECT(aclmdlRIBuildBegin(&other, 0), ACL_SUCCESS);
    EXPECT(aclmdlRIBindStream(other, second, HEAD), ACL_SUCCESS);
    EXPECT(aclmdlRIBindStream(other, late, ACTIVATED), ACL_SUCCESS);

    /* Names: "" is a name; maxLen holding the name and its NUL is enough. */
    char name[8];
    EXPECT(aclmdlRISetName(model, "abc"), ACL_SUCCESS);
    memset(name, 'q', sizeof name);
    EXPECT(aclmdlRIGetName(model, 4, name), ACL_SUCCESS);
    HOLDS(strcmp(name, "abc") == 0);
    EXPECT(aclmdlRISetName(model, ""), ACL_SUCCESS);
    EXPECT(aclmdlRIGetName(model, sizeof name, name), ACL_SUCCESS);
    HOLDS(name[0] == '\0');
    /* Ids: one per instance. */
    uint32_t id = 0, other_id = 0;
    EXPECT(aclmdlRIGetId(model, &id), ACL_SUCCESS);
    EXPECT(aclmdlRIGetId(other, &other_id), ACL_SUCCESS);
    HOLDS(id != other_id);
    /* Printing a built instance. */
    EXPECT(aclmdlRIDebugPrint(model), ACL_SUCCESS);

    /* Destroy callbacks: each registered one is called once. */
    g_destroy_calls[0] = g_destroy_calls[1] = 0;
    EXPECT(aclmdlRIDestroyRegisterCallback(model, first_destroy_callback, NULL), ACL_SUCCESS);
    EXPECT(aclmdlRIDestroyRegisterCallback(model, second_destroy_callback, &id), ACL_SUCCESS);
    EXPECT(aclmdlRIDestroy(model), ACL_SUCCESS);
    HOLDS(g_destroy_calls[0] == 1 && g_destroy_calls[1] == 1);
    /* The instance's streams are free again. */
    EXPECT(aclmdlRIBindStream(other, head, ACTIVATED), ACL_SUCCESS);
    CHECK(aclmdlRIEndTask(other, second));
    CHECK(aclmdlRIEndTask(other, late));
    CHECK(aclmdlRIEndTask(other, head));
    CHECK(aclmdlRIBuildEnd(other, NULL));
    CHECK(aclmdlRIDestroy(other));
    HOLDS(g_destroy_calls[0] == 1 && g_destroy_calls[1] == 1);
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(second));
    CHECK(aclrtDestroyStream(late));
    CHECK(aclrtFree(out));
    return 0;
}

static int g_replays;

static void count_replay(void *args)
{
    (void)args;
    ++g_replays;
}

/* aclmdlRICaptureBegin to aclmdlRIDestroy for a captured instance. */
static int capture_states(aclrtStream stream, aclrtStream exec)
{
    aclmdlRI model = NULL, seen = SENTINEL;
    aclmdlRICaptureStatus status = (aclmdlRICaptureStatus)7;
    char *out = NULL;
    CHECK(aclrtMalloc((void **)&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(out, 64, 0, 64));

    /* The mode before the stream; a destroyed stream, another context's stream. */
    EXPECT(aclmdlRICaptureBegin(g_gone, (aclmdlRICaptureMode)3), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRICaptureBegin(g_gone, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRICaptureGetInfo(g_gone, &status, &seen), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRICaptureGetInfo(g_gone, NULL, &seen), ACL_ERROR_INVALID_PARAM);
    HOLDS(seen == SENTINEL);
    EXPECT(aclmdlRICaptureEnd(g_gone, &model), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRICaptureEnd(g_gone, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRICaptureTaskGrpBegin(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(g_gone), ACL_ERROR_RT_INVALID_HANDLE);
    /* The default stream is never captured: NONE. */
    EXPECT(aclmdlRICaptureGetInfo(NULL, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    /* Task groups and updates outside captures. */
    EXPECT(aclmdlRICaptureTaskGrpBegin(stream), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(stream), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRICaptureTaskUpdateBegin(stream, NULL), ACL_ERROR_INVALID_PARAM);

    /* Captured tasks do not run; each execution runs them. */
    EXPECT(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && seen != NULL && seen != SENTINEL);
    g_replays = 0;
    CHECK(aclrtMemsetAsync(out, 1, 0x11, 1, stream));
    CHECK(aclrtLaunchHostFunc(stream, count_replay, NULL));
    /* A group cannot end on a stream that began none. */
    aclrtTaskGrp group = SENTINEL;
    EXPECT(aclmdlRICaptureTaskGrpEnd(stream, &group), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    HOLDS(group == SENTINEL);
    /* Another context cannot end it. */
    CHECK(aclrtSetCurrentContext(g_side));
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_ERROR_RT_STREAM_CONTEXT);
    CHECK(aclrtSetCurrentContext(g_primary));
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_SUCCESS);
    HOLDS(model == seen && g_replays == 0 && byte_at(out) == 0);
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(g_replays == 2 && byte_at(out) == 0x11);
    /* The stream runs its own tasks again. */
    CHECK(aclrtMemsetAsync(out + 1, 1, 0x22, 1, stream));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(out + 1) == 0x22 && g_replays == 2);

    /* Its tasks: a stale stream 107017; a task of a destroyed instance 107017. */
    aclrtStream streams[1] = {NULL};
    uint32_t count = 1, ntasks = 0;
    EXPECT(aclmdlRIGetStreams(model, streams, &count), ACL_SUCCESS);
    HOLDS(count == 1 && streams[0] != NULL && streams[0] != stream);
    EXPECT(aclmdlRIGetTasksByStream(g_gone, NULL, &ntasks), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIGetTasksByStream(streams[0], NULL, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIGetTasksByStream(streams[0], NULL, &ntasks), ACL_SUCCESS);
    HOLDS(ntasks == 2);
    aclmdlRITask tasks[2] = {NULL, NULL};
    ntasks = 2;
    EXPECT(aclmdlRIGetTasksByStream(streams[0], tasks, &ntasks), ACL_SUCCESS);
    aclmdlRITaskType type = (aclmdlRITaskType)99;
    EXPECT(aclmdlRITaskGetType(tasks[0], &type), ACL_SUCCESS);
    HOLDS(type == ACL_MODEL_RI_TASK_DEFAULT);
    EXPECT(aclmdlRITaskGetType(NULL, &type), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRITaskDisable(NULL), ACL_ERROR_INVALID_PARAM);
    /* Only a kernel task has launch attributes. */
    aclrtLaunchKernelAttrValue attr;
    memset(&attr, 0, sizeof attr);
    FAILS(aclmdlRIKernelTaskGetAttribute(tasks[0], ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, &attr));
    EXPECT(aclmdlRIKernelTaskGetAttribute(tasks[0], ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, NULL),
           ACL_ERROR_INVALID_PARAM);
    /* Parameters of another type are refused. */
    aclmdlRITaskParams params;
    memset(&params, 0, sizeof params);
    EXPECT(aclmdlRITaskGetParams(tasks[0], &params), ACL_SUCCESS);
    HOLDS(params.type == ACL_MODEL_RI_TASK_DEFAULT);
    params.type = ACL_MODEL_RI_TASK_VALUE_WRITE;
    FAILS(aclmdlRITaskSetParams(tasks[0], &params));
    EXPECT(aclmdlRITaskSetParams(tasks[0], NULL), ACL_ERROR_INVALID_PARAM);
    /* Disabling the host function: the next executions run the memset only. */
    EXPECT(aclmdlRITaskDisable(tasks[1]), ACL_SUCCESS);
    EXPECT(aclmdlRIUpdate(model), ACL_SUCCESS);
    CHECK(aclrtMemset(out, 1, 0, 1));
    EXPECT(aclmdlRIExecute(model, -1), ACL_SUCCESS);
    HOLDS(g_replays == 2 && byte_at(out) == 0x11);
    /* The JSON print creates its file in a directory that exists. */
    char path[128];
    snprintf(path, sizeof path, "/tmp/npu-sim-function-by-function-%d.json", (int)getpid());
    remove(path);
    EXPECT(aclmdlRIDebugJsonPrint(model, path, ACL_MDLRI_DEBUG_JSON_PRINT_VERBOSE), ACL_SUCCESS);
    FILE *file = fopen(path, "r");
    HOLDS(file != NULL && fgetc(file) == '{');
    if (file != NULL) {
        fclose(file);
    }
    remove(path);
    /* A captured instance is not aborted (the reference excludes captures). */
    EXPECT(aclmdlRIAbort(model), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    EXPECT(aclmdlRIDestroy(model), ACL_SUCCESS);
    uint32_t seq = 7;
    EXPECT(aclmdlRITaskGetSeqId(tasks[0], &seq), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(seq == 7);
    EXPECT(aclmdlRITaskGetType(tasks[0], &type), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRITaskDisable(tasks[1]), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRITaskGetParams(tasks[0], &params), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclmdlRIKernelTaskGetAttribute(tasks[0], ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, &attr),
           ACL_ERROR_RT_INVALID_HANDLE);
    /* The attribute comes before the task: one the reference excludes → 107000. */
    EXPECT(aclmdlRIKernelTaskGetAttribute(tasks[0], ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE, &attr),
           ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtFree(out));
    return 0;
}

/* Task groups, their updates and condition handles, on a capture. */
static int groups_and_conditions(aclrtStream stream, aclrtStream updater)
{
    aclmdlRI model = NULL, capture = NULL;
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRICondHandle handle = NULL;
    aclrtTaskGrp group = NULL;
    uint64_t *word = NULL;
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclmdlRICaptureGetInfo(stream, &status, &capture));
    EXPECT(aclmdlRICaptureTaskGrpBegin(stream), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureTaskGrpEnd(stream, &group), ACL_SUCCESS);
    EXPECT(aclmdlRICondHandleCreate(capture, 5, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
                                    &handle),
           ACL_SUCCESS);
    EXPECT(aclmdlRICondHandleGetCondPtr(handle, &word), ACL_SUCCESS);
    HOLDS(word != NULL);
    /* The word is device memory holding the default. */
    uint64_t value = 0;
    CHECK(aclrtMemcpy(&value, 8, word, 8, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(value == 5);
    CHECK(aclmdlRICaptureEnd(stream, &model));
    /* An update: not on the capturing stream or while captured; one at a time; ended once. */
    EXPECT(aclmdlRICaptureTaskUpdateBegin(updater, group), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureTaskUpdateBegin(stream, group), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(stream), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(updater), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(updater), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRIDestroy(model), ACL_SUCCESS);
    /* The group and the handle went with their instance. */
    EXPECT(aclmdlRICaptureTaskUpdateBegin(updater, group), ACL_ERROR_RT_INVALID_HANDLE);
    word = SENTINEL;
    EXPECT(aclmdlRICondHandleGetCondPtr(handle, &word), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(word == SENTINEL);
    /* aclmdlRIAddCondTask: its parameters before the handle, the handle before the stream. */
    aclmdlRI branches[1] = {NULL};
    aclmdlRICondTaskParams params = {NULL, ACL_MODEL_RI_COND_TYPE_IF, 1, branches};
    EXPECT(aclmdlRIAddCondTask(params, g_gone, 0), ACL_ERROR_INVALID_PARAM);
    params.handle = handle;
    EXPECT(aclmdlRIAddCondTask(params, g_gone, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclmdlRIAddCondTask(params, g_gone, 0), ACL_ERROR_RT_INVALID_HANDLE);
    HOLDS(branches[0] == NULL);
    return 0;
}

struct exchange {
    aclmdlRICaptureMode first;
    aclError result;
};

static void *exchange_on_new_thread(void *arg)
{
    struct exchange *exchange = arg;
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    exchange->result = aclmdlRICaptureThreadExchangeMode(&mode);
    exchange->first = mode;
    return NULL;
}

/* aclmdlRICaptureThreadExchangeMode: a thread's own mode, swapped; a refused swap keeps it. */
static int thread_modes(void)
{
    struct exchange exchange = {(aclmdlRICaptureMode)9, ACL_ERROR_FAILURE};
    on_thread(exchange_on_new_thread, &exchange);
    expect("aclmdlRICaptureThreadExchangeMode on a new thread", exchange.result, ACL_SUCCESS);
    HOLDS(exchange.first == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL, start;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_SUCCESS);
    start = mode;
    mode = (aclmdlRICaptureMode)3;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_ERROR_INVALID_PARAM);
    HOLDS(mode == (aclmdlRICaptureMode)3);
    EXPECT(aclmdlRICaptureThreadExchangeMode(NULL), ACL_ERROR_INVALID_PARAM);
    mode = start;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL);
    return 0;
}

/* ---- 15's architecture check, 16 compute groups ---- */

static int architecture_and_groups(void)
{
    int32_t compatible = -1;
    /* Another architecture's operators do not run here. */
    EXPECT(aclrtCheckArchCompatibility("Ascend310P3", &compatible), ACL_SUCCESS);
    HOLDS(compatible == 0);
    EXPECT(aclrtCheckArchCompatibility(NULL, NULL), ACL_ERROR_INVALID_PARAM);

    /* Compute groups are not an Atlas A2's: the pointers first, then 207000. */
    uint32_t count = 7;
    size_t size = 7;
    int32_t value = 0;
    char bytes[64];
    aclrtGroupInfo *fake = (aclrtGroupInfo *)(void *)bytes;
    EXPECT(aclrtSetGroup(0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetGroupCount(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetGroupCount(&count), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(count == 7);
    HOLDS(aclrtCreateGroupInfo() == NULL);
    EXPECT(aclrtGetAllGroupInfo(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetAllGroupInfo(fake), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetGroupInfoDetail(NULL, 0, ACL_GROUP_AICORE_INT, &value, sizeof value, &size),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetGroupInfoDetail(fake, 0, ACL_GROUP_AICORE_INT, NULL, sizeof value, &size),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetGroupInfoDetail(fake, 0, ACL_GROUP_AICORE_INT, &value, sizeof value, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetGroupInfoDetail(fake, 0, ACL_GROUP_AICORE_INT, &value, sizeof value, &size),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(size == 7);
    EXPECT(aclrtDestroyGroupInfo(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyGroupInfo(fake), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    return 0;
}

int main(void)
{
    aclrtStream s1 = NULL, s2 = NULL, exec = NULL;
    /* A call that hangs ends the program rather than the test run. */
    alarm(300);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetCurrentContext(&g_primary));
    CHECK(aclrtCreateContext(&g_side, 0));
    CHECK(aclrtCreateStream(&g_side_stream));
    CHECK(aclrtCreateContext(&g_far, 1));
    CHECK(aclrtCreateStream(&g_far_stream));
    CHECK(aclrtSetCurrentContext(g_primary));
    CHECK(aclrtCreateStream(&g_gone));
    CHECK(aclrtDestroyStream(g_gone));
    CHECK(aclrtCreateStream(&s1));
    CHECK(aclrtCreateStream(&s2));
    CHECK(aclrtCreateStream(&exec));
    if (notify_handles(s1) != 0 || notify_order(s1, s2) != 0 || counted_notifies(s1) != 0 ||
        label_handles() != 0 || label_switching(exec) != 0 || callbacks(s1, s2) != 0 ||
        captured_callbacks(s1, exec) != 0 ||
        execution_control(s1, s2) != 0 || stale_instances(s1, exec) != 0 ||
        build_states(exec) != 0 || capture_states(s1, exec) != 0 ||
        groups_and_conditions(s1, s2) != 0 || thread_modes() != 0 ||
        architecture_and_groups() != 0) {
        return 1;
    }
    CHECK(aclrtDestroyStream(s1));
    CHECK(aclrtDestroyStream(s2));
    CHECK(aclrtDestroyStream(exec));
    CHECK(aclrtSetCurrentContext(g_side));
    CHECK(aclrtDestroyStream(g_side_stream));
    CHECK(aclrtDestroyContext(g_side));
    CHECK(aclrtSetCurrentContext(g_far));
    CHECK(aclrtDestroyStream(g_far_stream));
    CHECK(aclrtDestroyContext(g_far));
    CHECK(aclrtSetCurrentContext(g_primary));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
