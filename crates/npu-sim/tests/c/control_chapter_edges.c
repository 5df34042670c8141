/*
 * The API reference's notify, counted notify, label, execution control and model runtime
 * instance chapters, and the stream chapter's capture, switching, activation and attribute
 * parts, walked through the flows and edge cases they document: stream flags and priorities,
 * the attribute values and their ranges, the streams whose synchronisation does nothing, state
 * callbacks; a wait that resets its notify, a batch reset, export flags and the whitelist, the
 * notifies of a device and the labels of a process; every condition of a stream switch, a label
 * index past the list; building (PERSISTENT streams only, one instance per stream, HEAD and
 * activated streams, the execute timeouts); capturing (the default stream, the pairing, the
 * thread that ends it, what each capture mode lets each thread do, the error table's
 * dependency codes, the cache switch read on only in a capture (joined streams share it), task
 * groups and their updates, what an instance tells about its streams and tasks, names,
 * disabling, destroy callbacks, destroying one running, the context of each handle); conditional tasks (sizes by type, ASSIGN_DEFAULT at each
 * execution); execute timeouts rounded to the interval, the thread's last task, host functions
 * holding their stream. Where the reference names a code (its error table pins a situation to
 * one) the code is checked, else only a failure. Prints a line for each mismatch, then how many
 * checks ran. Compiled by tests/c_programs.rs (also against CANN's own headers), which compares
 * the output.
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
#include "npusim/control.h"
#include "npusim/kernel.h"

static aclrtContext g_primary;

/* ---- 06 stream flags, priorities, attributes and synchronisation ---- */

static struct {
    aclrtStream stream;
    aclrtStreamState state;
    int created, destroyed;
} g_state;

static void on_state(aclrtStream stream, aclrtStreamState state, void *args)
{
    if (args != &g_state) {
        return;
    }
    g_state.stream = stream;
    g_state.state = state;
    g_state.created += state == ACL_RT_STREAM_STATE_CREATE_POST;
    g_state.destroyed += state == ACL_RT_STREAM_STATE_DESTROY_PRE;
}

static void attribute_reads(aclrtStream stream, aclrtStreamAttr attr, uint32_t want)
{
    aclrtStreamAttrValue value;
    memset(&value, 0xA5, sizeof value);
    expect("aclrtGetStreamAttribute", aclrtGetStreamAttribute(stream, attr, &value), ACL_SUCCESS);
    uint64_t got = attr == ACL_STREAM_ATTR_FAILURE_MODE ? value.failureMode
                   : attr == ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK ? value.overflowSwitch
                   : attr == ACL_STREAM_ATTR_USER_CUSTOM_TAG   ? value.userCustomTag
                   : attr == ACL_STREAM_ATTR_CACHE_OP_INFO     ? value.cacheOpInfoSwitch
                                                               : value.streamPriority;
    if (got != want) {
        printf("attribute %d reads %llu, expected %u\n", (int)attr, (unsigned long long)got, want);
    }
    holds("the attribute reads as set", got == want);
}

static int stream_attributes(void)
{
    aclrtStream plain = NULL, fast = NULL;
    uint32_t before = 0, after = 0, flags = 0xFF, priority = 0xFF;
    EXPECT(aclrtGetStreamAvailableNum(&before), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&plain), ACL_SUCCESS);
    /* What is left is the maximum less the streams that exist. */
    EXPECT(aclrtGetStreamAvailableNum(&after), ACL_SUCCESS);
    HOLDS(after == before - 1);
    FAILS(aclrtGetStreamAvailableNum(NULL));

    /* No flag reads 0; several read as their bitwise or. */
    EXPECT(aclrtStreamGetFlags(plain, &flags), ACL_SUCCESS);
    HOLDS(flags == 0);
    EXPECT(aclrtCreateStreamWithConfig(&fast, 0, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC),
           ACL_SUCCESS);
    EXPECT(aclrtStreamGetFlags(fast, &flags), ACL_SUCCESS);
    HOLDS(flags == 0x3);
    EXPECT(aclrtStreamGetFlags(NULL, &flags), ACL_SUCCESS);
    FAILS(aclrtStreamGetFlags(plain, NULL));
    /* Another value makes an aclrtCreateStream stream. */
    aclrtStream unknown = NULL;
    EXPECT(aclrtCreateStreamWithConfig(&unknown, 0, 0x40), ACL_SUCCESS);
    flags = 0xFF;
    EXPECT(aclrtStreamGetFlags(unknown, &flags), ACL_SUCCESS);
    HOLDS(flags == 0);
    CHECK(aclrtDestroyStream(unknown));
    /* aclrtCreateStream's stream and the default stream have the highest priority, 0. */
    EXPECT(aclrtStreamGetPriority(plain, &priority), ACL_SUCCESS);
    HOLDS(priority == 0);
    priority = 0xFF;
    EXPECT(aclrtStreamGetPriority(NULL, &priority), ACL_SUCCESS);
    HOLDS(priority == 0);
    FAILS(aclrtStreamGetPriority(plain, NULL));
    int32_t default_id = -1, plain_id = -1;
    EXPECT(aclrtStreamGetId(NULL, &default_id), ACL_SUCCESS);
    EXPECT(aclrtStreamGetId(plain, &plain_id), ACL_SUCCESS);
    HOLDS(default_id != plain_id);
    FAILS(aclrtStreamGetId(plain, NULL));

    /* Attributes: the defaults, each value's range, and the functions that are the same. */
    attribute_reads(plain, ACL_STREAM_ATTR_FAILURE_MODE, 0);
    attribute_reads(plain, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, 0);
    attribute_reads(plain, ACL_STREAM_ATTR_CACHE_OP_INFO, 0);
    attribute_reads(plain, ACL_STREAM_ATTR_PRIORITY, 0);
    aclrtStreamAttrValue value;
    memset(&value, 0, sizeof value);
    value.streamPriority = 7;
    EXPECT(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_PRIORITY, &value), ACL_SUCCESS);
    attribute_reads(plain, ACL_STREAM_ATTR_PRIORITY, 7);
    EXPECT(aclrtStreamGetPriority(plain, &priority), ACL_SUCCESS);
    HOLDS(priority == 7);
    value.streamPriority = 8;
    FAILS(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_PRIORITY, &value));
    attribute_reads(plain, ACL_STREAM_ATTR_PRIORITY, 7);
    memset(&value, 0, sizeof value);
    value.overflowSwitch = 1;
    EXPECT(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, &value),
           ACL_SUCCESS);
    uint32_t overflow = 7;
    EXPECT(aclrtGetStreamOverflowSwitch(plain, &overflow), ACL_SUCCESS);
    HOLDS(overflow == 1);
    EXPECT(aclrtSetStreamOverflowSwitch(plain, 0), ACL_SUCCESS);
    attribute_reads(plain, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, 0);
    FAILS(aclrtSetStreamOverflowSwitch(plain, 2));
    FAILS(aclrtGetStreamOverflowSwitch(plain, NULL));
    value.overflowSwitch = 2;
    FAILS(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK, &value));
    /* The operator information cache switch reads on only in a capture (see introspection). */
    memset(&value, 0, sizeof value);
    value.cacheOpInfoSwitch = 1;
    EXPECT(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_CACHE_OP_INFO, &value), ACL_SUCCESS);
    attribute_reads(plain, ACL_STREAM_ATTR_CACHE_OP_INFO, 0);
    value.cacheOpInfoSwitch = 2;
    FAILS(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_CACHE_OP_INFO, &value));
    /* A custom tag takes any uint32_t. */
    memset(&value, 0, sizeof value);
    value.userCustomTag = UINT32_MAX;
    EXPECT(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_USER_CUSTOM_TAG, &value), ACL_SUCCESS);
    attribute_reads(plain, ACL_STREAM_ATTR_USER_CUSTOM_TAG, UINT32_MAX);
    memset(&value, 0, sizeof value);
    value.failureMode = 2;
    FAILS(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_FAILURE_MODE, &value));
    FAILS(aclrtSetStreamAttribute(plain, (aclrtStreamAttr)0, &value));
    FAILS(aclrtSetStreamAttribute(plain, (aclrtStreamAttr)6, &value));
    FAILS(aclrtGetStreamAttribute(plain, (aclrtStreamAttr)0, &value));
    FAILS(aclrtGetStreamAttribute(plain, (aclrtStreamAttr)6, &value));
    FAILS(aclrtSetStreamAttribute(plain, ACL_STREAM_ATTR_PRIORITY, NULL));
    FAILS(aclrtGetStreamAttribute(plain, ACL_STREAM_ATTR_PRIORITY, NULL));
    /* The Atlas A2 takes the default stream (NULL) for the other attributes. */
    memset(&value, 0, sizeof value);
    EXPECT(aclrtSetStreamAttribute(NULL, ACL_STREAM_ATTR_CACHE_OP_INFO, &value), ACL_SUCCESS);
    attribute_reads(NULL, ACL_STREAM_ATTR_PRIORITY, 0);

    /* Failure modes, in a context of their own (STOP spreads to the context's streams). */
    aclrtContext side = NULL;
    aclrtStream first = NULL;
    CHECK(aclrtCreateContext(&side, 0));
    CHECK(aclrtCreateStream(&first));
    FAILS(aclrtSetStreamFailureMode(first, 2));
    EXPECT(aclrtSetStreamFailureMode(first, ACL_STOP_ON_FAILURE), ACL_SUCCESS);
    attribute_reads(first, ACL_STREAM_ATTR_FAILURE_MODE, 1);
    /* Once per stream. */
    FAILS(aclrtSetStreamFailureMode(first, ACL_CONTINUE_ON_FAILURE));
    /* Not the attribute of a context's default stream, but the function on an Atlas A2. */
    value.failureMode = 1;
    FAILS(aclrtSetStreamAttribute(NULL, ACL_STREAM_ATTR_FAILURE_MODE, &value));
    EXPECT(aclrtSetStreamFailureMode(NULL, ACL_CONTINUE_ON_FAILURE), ACL_SUCCESS);
    CHECK(aclrtDestroyStream(first));
    /* Destroying a stream needs its own context to be current. */
    CHECK(aclrtCreateStream(&first));
    CHECK(aclrtSetCurrentContext(g_primary));
    FAILS(aclrtDestroyStream(first));
    FAILS(aclrtDestroyStreamForce(first));
    CHECK(aclrtSetCurrentContext(side));
    EXPECT(aclrtDestroyStreamForce(first), ACL_SUCCESS);
    CHECK(aclrtDestroyContext(side));
    CHECK(aclrtSetCurrentContext(g_primary));

    /* PERSISTENT, CPU_SCHEDULE and DEVICE_USE_ONLY streams: synchronising does nothing. */
    aclrtStream kept = persistent_stream(), cpu = NULL, device_only = NULL;
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtCreateStreamWithConfig(&cpu, 0, ACL_STREAM_CPU_SCHEDULE));
    CHECK(aclrtCreateStreamWithConfig(&device_only, 0, ACL_STREAM_DEVICE_USE_ONLY));
    EXPECT(aclrtMemsetAsync(dev, 64, 1, 64, kept), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(kept), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStreamWithTimeout(kept, 1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(cpu), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(device_only), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtStreamQuery(kept, &status), ACL_SUCCESS);
    /* Only a PERSISTENT stream's tasks are cleaned. */
    EXPECT(aclrtPersistentTaskClean(kept), ACL_SUCCESS);
    FAILS(aclrtPersistentTaskClean(plain));
    FAILS(aclrtPersistentTaskClean(NULL));
    FAILS(aclrtStreamStop(NULL));

    /* A timed synchronisation of a stream that cannot finish: 507046, the documented code. */
    aclrtNotify never = NULL;
    CHECK(aclrtCreateNotify(&never, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtWaitAndResetNotify(never, plain, 0));
    EXPECT(aclrtSynchronizeStreamWithTimeout(plain, 10), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    FAILS(aclrtSynchronizeStreamWithTimeout(plain, 0));
    FAILS(aclrtSynchronizeStreamWithTimeout(plain, -2));
    CHECK(aclrtRecordNotify(never, fast));
    EXPECT(aclrtSynchronizeStreamWithTimeout(plain, -1), ACL_SUCCESS);
    CHECK(aclrtDestroyNotify(never));

    /* State callbacks: a unique, non-empty name; explicit and default streams; NULL removes. */
    memset(&g_state, 0, sizeof g_state);
    EXPECT(aclrtRegStreamStateCallback("control edges", on_state, &g_state), ACL_SUCCESS);
    FAILS(aclrtRegStreamStateCallback("control edges", on_state, &g_state));
    FAILS(aclrtRegStreamStateCallback(NULL, on_state, &g_state));
    FAILS(aclrtRegStreamStateCallback("", on_state, &g_state));
    aclrtStream watched = NULL;
    CHECK(aclrtCreateStream(&watched));
    HOLDS(g_state.created == 1 && g_state.stream == watched &&
          g_state.state == ACL_RT_STREAM_STATE_CREATE_POST);
    CHECK(aclrtDestroyStream(watched));
    HOLDS(g_state.destroyed == 1 && g_state.stream == watched &&
          g_state.state == ACL_RT_STREAM_STATE_DESTROY_PRE);
    CHECK(aclrtCreateContext(&side, 0));
    HOLDS(g_state.created == 2);
    CHECK(aclrtDestroyContext(side));
    HOLDS(g_state.destroyed == 2);
    CHECK(aclrtSetCurrentContext(g_primary));
    EXPECT(aclrtRegStreamStateCallback("control edges", NULL, NULL), ACL_SUCCESS);
    CHECK(aclrtCreateStream(&watched));
    CHECK(aclrtDestroyStream(watched));
    HOLDS(g_state.created == 2 && g_state.destroyed == 2);

    CHECK(aclrtDestroyStream(kept));
    CHECK(aclrtDestroyStream(cpu));
    CHECK(aclrtDestroyStream(device_only));
    CHECK(aclrtDestroyStream(fast));
    CHECK(aclrtDestroyStream(plain));
    EXPECT(aclrtGetStreamAvailableNum(&after), ACL_SUCCESS);
    HOLDS(after == before);
    CHECK(aclrtFree(dev));
    return 0;
}

/* ---- 08 notifies, 09 counted notifies ---- */

static aclrtNotify g_notifies[8192];

static int notifies(aclrtStream s1, aclrtStream s2)
{
    aclrtNotify notify = NULL;
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    FAILS(aclrtCreateNotify(NULL, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtCreateNotify(&notify, ACL_NOTIFY_DEFAULT));
    /* A wait resets the notify: a second wait holds its stream until the next record. */
    EXPECT(aclrtRecordNotify(notify, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(notify, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(notify, s2, 0), ACL_SUCCESS);
    EXPECT(aclrtStreamQuery(s2, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtRecordNotify(notify, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    /* A batch reset clears a record nobody waited for. */
    EXPECT(aclrtRecordNotify(notify, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s1), ACL_SUCCESS);
    aclrtNotify batch[1] = {notify};
    EXPECT(aclrtNotifyBatchReset(batch, 1), ACL_SUCCESS);
    EXPECT(aclrtWaitAndResetNotify(notify, s2, 0), ACL_SUCCESS);
    status = ACL_STREAM_STATUS_RESERVED;
    EXPECT(aclrtStreamQuery(s2, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtRecordNotify(notify, s1), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s2), ACL_SUCCESS);
    FAILS(aclrtNotifyBatchReset(NULL, 1));
    FAILS(aclrtNotifyBatchReset(batch, 0));
    FAILS(aclrtRecordNotify(NULL, s1));
    FAILS(aclrtWaitAndResetNotify(NULL, s2, 0));
    uint32_t id = 0;
    FAILS(aclrtGetNotifyId(NULL, &id));
    FAILS(aclrtGetNotifyId(notify, NULL));

    /* IPC: export flags are DEFAULT or DISABLE_PID_VALIDATION; the whitelist belongs to an
     * exported notify; import flags are DEFAULT or ENABLE_PEER_ACCESS. */
    char key[65];
    int32_t pid = 0;
    CHECK(aclrtDeviceGetBareTgid(&pid));
    FAILS(aclrtNotifySetImportPid(notify, &pid, 1));
    FAILS(aclrtNotifyGetExportKey(notify, key, sizeof key, 1));
    FAILS(aclrtNotifyGetExportKey(notify, NULL, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));
    FAILS(aclrtNotifyGetExportKey(NULL, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));
    EXPECT(aclrtNotifyGetExportKey(notify, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    HOLDS(memchr(key, '\0', sizeof key) != NULL && key[0] != '\0');
    EXPECT(aclrtNotifySetImportPid(notify, &pid, 1), ACL_SUCCESS);
    FAILS(aclrtNotifySetImportPid(notify, NULL, 1));
    FAILS(aclrtNotifySetImportPid(notify, &pid, 0));
    FAILS(aclrtNotifySetImportPid(NULL, &pid, 1));
    aclrtNotify imported = SENTINEL;
    FAILS(aclrtNotifyImportByKey(&imported, key, 1));
    FAILS(aclrtNotifyImportByKey(NULL, key, ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtNotifyImportByKey(&imported, NULL, ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtNotifyImportByKey(&imported, "no such key", ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT));
    HOLDS(imported == SENTINEL);
    EXPECT(aclrtDestroyNotify(notify), ACL_SUCCESS);
    FAILS(aclrtDestroyNotify(notify));
    FAILS(aclrtDestroyNotify(NULL));
    FAILS(aclrtNotifyGetExportKey(notify, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));

    /* 8192 notifies a device on an Atlas A2; the next one: 207009; another device has its own. */
    int made = 0;
    while (made < 8192 && aclrtCreateNotify(&g_notifies[made], ACL_NOTIFY_DEFAULT) == ACL_SUCCESS) {
        ++made;
    }
    HOLDS(made == 8192);
    aclrtNotify extra = SENTINEL;
    EXPECT(aclrtCreateNotify(&extra, ACL_NOTIFY_DEFAULT), ACL_ERROR_RT_NO_NOTIFY_RESOURCE);
    HOLDS(extra == SENTINEL);
    aclrtContext elsewhere = NULL;
    CHECK(aclrtCreateContext(&elsewhere, 1));
    EXPECT(aclrtCreateNotify(&extra, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(extra), ACL_SUCCESS);
    CHECK(aclrtDestroyContext(elsewhere));
    CHECK(aclrtSetCurrentContext(g_primary));
    for (int i = 0; i < made; ++i) {
        CHECK(aclrtDestroyNotify(g_notifies[i]));
    }
    EXPECT(aclrtCreateNotify(&extra, ACL_NOTIFY_DEFAULT), ACL_SUCCESS);
    EXPECT(aclrtDestroyNotify(extra), ACL_SUCCESS);

    /* Counted notifies are not supported on an Atlas A2. */
    aclrtCntNotify counted = SENTINEL;
    aclrtCntNotifyRecordInfo record = {ACL_RT_CNT_NOTIFY_RECORD_ADD_MODE, 1};
    aclrtCntNotifyWaitInfo wait;
    memset(&wait, 0, sizeof wait);
    wait.mode = ACL_RT_CNT_NOTIFY_WAIT_BIGGER_OR_EQUAL_MODE;
    wait.value = 1;
    EXPECT(aclrtCntNotifyCreate(&counted, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(counted == SENTINEL);
    EXPECT(aclrtCntNotifyRecord(counted, s1, &record), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCntNotifyWaitWithTimeout(counted, s2, &wait), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCntNotifyReset(counted, NULL), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    id = 7;
    EXPECT(aclrtCntNotifyGetId(counted, &id), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(id == 7);
    EXPECT(aclrtCntNotifyDestroy(counted), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    return 0;
}

/* ---- 10 labels ---- */

static aclrtLabel g_labels[65535];

static int labels(aclrtStream exec)
{
    FAILS(aclrtCreateLabel(NULL));
    /* 65535 labels a process. */
    int made = 0;
    while (made < 65535 && aclrtCreateLabel(&g_labels[made]) == ACL_SUCCESS) {
        ++made;
    }
    HOLDS(made == 65535);
    aclrtLabel extra = SENTINEL;
    FAILS(aclrtCreateLabel(&extra));
    HOLDS(extra == SENTINEL);
    /* A list takes (0, 65535] labels. */
    aclrtLabelList list = SENTINEL;
    EXPECT(aclrtCreateLabelList(g_labels, 65535, &list), ACL_SUCCESS);
    EXPECT(aclrtDestroyLabelList(list), ACL_SUCCESS);
    FAILS(aclrtDestroyLabelList(list));
    FAILS(aclrtDestroyLabelList(NULL));
    list = SENTINEL;
    FAILS(aclrtCreateLabelList(g_labels, 0, &list));
    FAILS(aclrtCreateLabelList(NULL, 1, &list));
    FAILS(aclrtCreateLabelList(g_labels, 1, NULL));
    HOLDS(list == SENTINEL);
    for (int i = 3; i < made; ++i) {
        CHECK(aclrtDestroyLabel(g_labels[i]));
    }
    /* Its labels must be ones aclrtCreateLabel made. */
    FAILS(aclrtCreateLabelList(&g_labels[3], 1, &list));
    FAILS(aclrtDestroyLabel(g_labels[3]));
    FAILS(aclrtDestroyLabel(NULL));

    /* aclrtSetLabel and aclrtSwitchLabelByIndex take streams bound to an instance only. */
    aclrtStream plain = NULL, head = persistent_stream(), one = persistent_stream(),
                two = persistent_stream();
    void *index = NULL, *out = NULL;
    aclmdlRI model = NULL;
    CHECK(aclrtCreateStream(&plain));
    CHECK(aclrtMalloc(&index, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtCreateLabelList(g_labels, 3, &list));
    EXPECT(aclrtSetLabel(g_labels[0], plain), ACL_ERROR_RT_STREAM_MODEL);
    FAILS(aclrtSetLabel(g_labels[0], NULL));
    EXPECT(aclrtSwitchLabelByIndex(index, 3, list, plain), ACL_ERROR_RT_STREAM_MODEL);
    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, HEAD));
    CHECK(aclmdlRIBindStream(model, one, ACTIVATED));
    CHECK(aclmdlRIBindStream(model, two, ACTIVATED));
    FAILS(aclrtSetLabel(NULL, head));
    FAILS(aclrtSwitchLabelByIndex(NULL, 3, list, head));
    FAILS(aclrtSwitchLabelByIndex(index, 3, NULL, head));
    /* maxValue is the number of labels in the list. */
    FAILS(aclrtSwitchLabelByIndex(index, 4, list, head));
    EXPECT(aclrtSwitchLabelByIndex(index, 3, list, head), ACL_SUCCESS);
    EXPECT(aclrtSetLabel(g_labels[0], head), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out, 1, 10, 1, head));
    EXPECT(aclrtSetLabel(g_labels[1], one), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out, 1, 11, 1, one));
    EXPECT(aclrtSetLabel(g_labels[2], two), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out, 1, 12, 1, two));
    CHECK(aclmdlRIEndTask(model, head));
    CHECK(aclmdlRIEndTask(model, one));
    CHECK(aclmdlRIEndTask(model, two));
    CHECK(aclmdlRIBuildEnd(model, NULL));
    /* After the build no label is set on its streams. */
    FAILS(aclrtSetLabel(g_labels[0], head));
    /* The list and its labels may go: the instance keeps what it was given. */
    CHECK(aclrtDestroyLabelList(list));
    /* An index past the list's largest goes to the last label. */
    const uint32_t indexes[5] = {0, 1, 2, 3, UINT32_MAX};
    const uint8_t chosen[5] = {10, 11, 12, 12, 12};
    for (int i = 0; i < 5; ++i) {
        CHECK(put(index, &indexes[i], 4));
        CHECK(aclrtMemset(out, 1, 0, 1));
        EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
        HOLDS(byte_at(out) == chosen[i]);
    }
    CHECK(aclmdlRIDestroy(model));
    for (int i = 0; i < 3; ++i) {
        EXPECT(aclrtDestroyLabel(g_labels[i]), ACL_SUCCESS);
    }
    CHECK(aclrtDestroyStream(plain));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(one));
    CHECK(aclrtDestroyStream(two));
    CHECK(aclrtFree(index));
    CHECK(aclrtFree(out));
    return 0;
}

/* ---- 15 (building) and 06 (activation, switches) ---- */

static int g_destroyed_calls;
static void *g_destroyed_data = SENTINEL;

static void on_destroy(void *data)
{
    ++g_destroyed_calls;
    g_destroyed_data = data;
}

static void not_called(void *data)
{
    (void)data;
    g_destroyed_calls += 100;
}

static int builds(aclrtStream exec)
{
    aclmdlRI model = NULL, other = NULL, refused = SENTINEL;
    aclrtStream plain = NULL, head = persistent_stream(), activated = persistent_stream(),
                head2 = persistent_stream(), idle = persistent_stream();
    void *out = NULL, *words = NULL;
    CHECK(aclrtCreateStream(&plain));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&words, 64, ACL_MEM_MALLOC_HUGE_FIRST));

    FAILS(aclmdlRIBuildBegin(NULL, 0));
    /* flag is reserved: 0. */
    FAILS(aclmdlRIBuildBegin(&refused, 1));
    HOLDS(refused == SENTINEL);
    EXPECT(aclmdlRIBuildBegin(&model, 0), ACL_SUCCESS);
    EXPECT(aclmdlRIBuildBegin(&other, 0), ACL_SUCCESS);
    /* Only PERSISTENT streams, not NULL, flag HEAD or DEFAULT, one instance a stream. */
    FAILS(aclmdlRIBindStream(model, NULL, HEAD));
    FAILS(aclmdlRIBindStream(model, plain, HEAD));
    FAILS(aclmdlRIBindStream(model, head, 1));
    EXPECT(aclmdlRIBindStream(model, head, HEAD), ACL_SUCCESS);
    EXPECT(aclmdlRIBindStream(model, activated, ACTIVATED), ACL_SUCCESS);
    FAILS(aclmdlRIBindStream(other, head, HEAD));
    EXPECT(aclmdlRIBindStream(other, head2, HEAD), ACL_SUCCESS);
    EXPECT(aclmdlRIBindStream(other, idle, ACTIVATED), ACL_SUCCESS);
    /* Activation: both streams bound to the instance. */
    EXPECT(aclrtActiveStream(activated, plain), ACL_ERROR_RT_STREAM_MODEL);
    EXPECT(aclrtActiveStream(plain, head), ACL_ERROR_RT_STREAM_MODEL);
    /* Switches: falseStream is reserved (NULL), the condition and type are enums. */
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, activated, head,
                            head));
    FAILS(aclrtSwitchStream(words, (aclrtCondition)6, words, ACL_RT_SWITCH_INT32, activated,
                            NULL, head));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, (aclrtCompareDataType)2, activated,
                            NULL, head));
    FAILS(aclrtSwitchStream(NULL, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, activated, NULL,
                            head));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, NULL, ACL_RT_SWITCH_INT32, activated, NULL,
                            head));
    FAILS(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, NULL, NULL, head));
    EXPECT(aclrtSwitchStream(words, ACL_RT_EQUAL, words, ACL_RT_SWITCH_INT32, activated, NULL,
                             plain),
           ACL_ERROR_RT_STREAM_MODEL);
    CHECK(aclrtMemsetAsync(out, 1, 1, 1, head));
    EXPECT(aclrtActiveStream(activated, head), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync((char *)out + 1, 1, 2, 1, activated));
    CHECK(aclrtMemsetAsync((char *)out + 2, 1, 3, 1, head2));
    /* A DEFAULT stream nothing activates does not run. */
    CHECK(aclrtMemsetAsync((char *)out + 3, 1, 4, 1, idle));
    EXPECT(aclmdlRIEndTask(model, plain), ACL_ERROR_RT_STREAM_MODEL);
    EXPECT(aclmdlRIEndTask(model, head2), ACL_ERROR_RT_STREAM_MODEL);
    EXPECT(aclmdlRIEndTask(model, head), ACL_SUCCESS);
    EXPECT(aclmdlRIEndTask(model, activated), ACL_SUCCESS);
    CHECK(aclmdlRIEndTask(other, head2));
    CHECK(aclmdlRIEndTask(other, idle));
    /* reserve is NULL. */
    FAILS(aclmdlRIBuildEnd(model, words));
    EXPECT(aclmdlRIBuildEnd(model, NULL), ACL_SUCCESS);
    EXPECT(aclmdlRIBuildEnd(other, NULL), ACL_SUCCESS);
    /* No task goes to a bound stream after the build. */
    FAILS(aclrtMemsetAsync(out, 1, 9, 1, head));

    /* aclmdlRIExecute: -1 or a timeout above 0. */
    FAILS(aclmdlRIExecute(model, 0));
    FAILS(aclmdlRIExecute(model, -2));
    CHECK(aclrtMemset(out, 4, 0, 4));
    EXPECT(aclmdlRIExecute(model, -1), ACL_SUCCESS);
    HOLDS(byte_at(out) == 1 && byte_at((char *)out + 1) == 2);
    CHECK(aclrtMemset(out, 4, 0, 4));
    EXPECT(aclmdlRIExecute(model, 60000), ACL_SUCCESS);
    HOLDS(byte_at(out) == 1 && byte_at((char *)out + 1) == 2);
    CHECK(aclrtMemset(out, 4, 0, 4));
    EXPECT(aclmdlRIExecuteAsync(other, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(byte_at((char *)out + 2) == 3 && byte_at((char *)out + 3) == 0);
    FAILS(aclmdlRIExecuteAsync(NULL, exec));
    /* A bound PERSISTENT stream is not synchronised. */
    EXPECT(aclrtSynchronizeStream(head), ACL_SUCCESS);

    /* Unbinding: a stream bound to the instance, once; then it is free for another. */
    FAILS(aclmdlRIUnbindStream(model, plain));
    EXPECT(aclmdlRIUnbindStream(other, idle), ACL_SUCCESS);
    FAILS(aclmdlRIUnbindStream(other, idle));
    aclmdlRI third = NULL;
    CHECK(aclmdlRIBuildBegin(&third, 0));
    EXPECT(aclmdlRIBindStream(third, idle, HEAD), ACL_SUCCESS);
    /* PERSISTENT together with another flag is still PERSISTENT. */
    aclrtStream fast = NULL;
    CHECK(aclrtCreateStreamWithConfig(&fast, 0, ACL_STREAM_PERSISTENT | ACL_STREAM_FAST_LAUNCH));
    EXPECT(aclmdlRIBindStream(third, fast, ACTIVATED), ACL_SUCCESS);
    /* Contexts: a stream, an instance, a label of another context than the current one. */
    aclrtContext side = NULL;
    aclrtStream foreign = NULL, foreign_exec = NULL;
    aclmdlRI foreign_model = NULL;
    aclrtLabel foreign_label = NULL;
    CHECK(aclrtCreateContext(&side, 0));
    CHECK(aclrtCreateStreamWithConfig(&foreign, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclrtCreateStream(&foreign_exec));
    CHECK(aclmdlRIBuildBegin(&foreign_model, 0));
    CHECK(aclrtCreateLabel(&foreign_label));
    CHECK(aclrtSetCurrentContext(g_primary));
    EXPECT(aclmdlRIBindStream(third, foreign, HEAD), ACL_ERROR_RT_STREAM_CONTEXT);
    aclrtStream spare = persistent_stream();
    EXPECT(aclmdlRIBindStream(foreign_model, spare, HEAD), ACL_ERROR_RT_MODEL_CONTEXT);
    CHECK(aclrtDestroyStream(spare));
    EXPECT(aclrtSetLabel(foreign_label, idle), ACL_ERROR_RT_LABEL_CONTEXT);
    EXPECT(aclmdlRIExecuteAsync(other, foreign_exec), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclmdlRICaptureBegin(foreign_exec, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_STREAM_CONTEXT);
    CHECK(aclrtSetCurrentContext(side));
    CHECK(aclrtDestroyLabel(foreign_label));
    CHECK(aclmdlRIBuildEnd(foreign_model, NULL));
    CHECK(aclmdlRIDestroy(foreign_model));
    CHECK(aclrtDestroyStream(foreign));
    CHECK(aclrtDestroyStream(foreign_exec));
    CHECK(aclrtDestroyContext(side));
    CHECK(aclrtSetCurrentContext(g_primary));
    CHECK(aclmdlRIEndTask(third, idle));
    CHECK(aclmdlRIEndTask(third, fast));
    CHECK(aclmdlRIBuildEnd(third, NULL));
    CHECK(aclmdlRIDestroy(third));
    CHECK(aclrtDestroyStream(fast));

    /* Destroy callbacks: userData may be NULL; an unregistered one is not called. */
    FAILS(aclmdlRIDestroyRegisterCallback(model, NULL, NULL));
    FAILS(aclmdlRIDestroyRegisterCallback(NULL, on_destroy, NULL));
    EXPECT(aclmdlRIDestroyRegisterCallback(model, on_destroy, NULL), ACL_SUCCESS);
    EXPECT(aclmdlRIDestroyRegisterCallback(model, not_called, NULL), ACL_SUCCESS);
    EXPECT(aclmdlRIDestroyUnregisterCallback(model, not_called), ACL_SUCCESS);
    FAILS(aclmdlRIDestroyUnregisterCallback(model, NULL));
    /* An abort of a built instance (nothing running). */
    EXPECT(aclmdlRIAbort(model), ACL_SUCCESS);
    g_destroyed_calls = 0;
    EXPECT(aclmdlRIDestroy(model), ACL_SUCCESS);
    HOLDS(g_destroyed_calls == 1 && g_destroyed_data == NULL);
    FAILS(aclmdlRIDestroy(model));
    FAILS(aclmdlRIDestroy(NULL));
    EXPECT(aclmdlRIDestroy(other), ACL_SUCCESS);
    HOLDS(g_destroyed_calls == 1);
    CHECK(aclrtDestroyStream(plain));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(activated));
    CHECK(aclrtDestroyStream(head2));
    CHECK(aclrtDestroyStream(idle));
    CHECK(aclrtFree(out));
    CHECK(aclrtFree(words));
    return 0;
}

/* Whether `cond` holds between the two values. */
static int compare(aclrtCondition cond, int64_t left, int64_t right)
{
    switch (cond) {
    case ACL_RT_EQUAL:
        return left == right;
    case ACL_RT_NOT_EQUAL:
        return left != right;
    case ACL_RT_GREATER:
        return left > right;
    case ACL_RT_GREATER_OR_EQUAL:
        return left >= right;
    case ACL_RT_LESS:
        return left < right;
    default:
        return left <= right;
    }
}

/* A built instance whose HEAD stream switches to another when `cond` holds between the two
 * words: the stream switched to writes 2, the switching stream's next task 1. Run with values
 * below, equal to and above each other (signed: the types are int32 and int64). */
static int stream_switch(aclrtCondition cond, aclrtCompareDataType type, aclrtStream exec)
{
    aclmdlRI model = NULL;
    aclrtStream head = persistent_stream(), taken = persistent_stream();
    void *words = NULL, *out = NULL;
    CHECK(aclrtMalloc(&words, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclmdlRIBuildBegin(&model, 0));
    CHECK(aclmdlRIBindStream(model, head, HEAD));
    CHECK(aclmdlRIBindStream(model, taken, ACTIVATED));
    EXPECT(aclrtSwitchStream(words, cond, (char *)words + 8, type, taken, NULL, head),
           ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(out, 1, 1, 1, head));
    CHECK(aclrtMemsetAsync(out, 1, 2, 1, taken));
    CHECK(aclmdlRIEndTask(model, head));
    CHECK(aclmdlRIEndTask(model, taken));
    CHECK(aclmdlRIBuildEnd(model, NULL));
    const int wide = type == ACL_RT_SWITCH_INT64;
    const int64_t lefts[3] = {wide ? INT64_MIN : INT32_MIN, 5, wide ? INT64_MAX : INT32_MAX};
    const int64_t right = 5;
    for (int i = 0; i < 3; ++i) {
        int64_t l = lefts[i];
        if (wide) {
            CHECK(put(words, &l, 8));
            CHECK(put((char *)words + 8, &right, 8));
        } else {
            int32_t l32 = (int32_t)l, r32 = (int32_t)right;
            CHECK(put(words, &l32, 4));
            CHECK(put((char *)words + 8, &r32, 4));
        }
        CHECK(aclrtMemset(out, 1, 0, 1));
        EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
        uint8_t want = compare(cond, l, right) ? 2 : 1;
        if (byte_at(out) != want) {
            printf("switch %d of type %d with %lld against %lld ran %u\n", (int)cond, (int)type,
                   (long long)l, (long long)right, byte_at(out));
        }
        holds("the switch follows its condition", byte_at(out) == want);
    }
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyStream(head));
    CHECK(aclrtDestroyStream(taken));
    CHECK(aclrtFree(words));
    CHECK(aclrtFree(out));
    return 0;
}

/* ---- 15 capture ---- */

struct ending {
    aclrtStream stream;
    aclmdlRI model;
    aclError result;
};

static void *end_capture(void *arg)
{
    struct ending *end = arg;
    end->result = aclrtSetCurrentContext(g_primary);
    if (end->result == ACL_SUCCESS) {
        end->result = aclmdlRICaptureEnd(end->stream, &end->model);
    }
    return NULL;
}

/* The unsafe functions of a capture mode, called by one thread in `mode`. */
struct unsafe_calls {
    aclmdlRICaptureMode mode;
    void *dev;
    void *host;
    aclrtStream other;
    aclError memset, memcpy, memcpy2d, pageable;
};

static void call_unsafe(struct unsafe_calls *calls)
{
    aclmdlRICaptureMode mode = calls->mode;
    if (aclmdlRICaptureThreadExchangeMode(&mode) != ACL_SUCCESS) {
        calls->memset = calls->memcpy = calls->memcpy2d = calls->pageable = ACL_ERROR_FAILURE;
        return;
    }
    calls->memset = aclrtMemset(calls->dev, 64, 0, 64);
    calls->memcpy = aclrtMemcpy(calls->dev, 64, calls->host, 64, ACL_MEMCPY_HOST_TO_DEVICE);
    calls->memcpy2d = aclrtMemcpy2d(calls->dev, 16, calls->host, 16, 16, 4,
                                    ACL_MEMCPY_HOST_TO_DEVICE);
    calls->pageable = aclrtMemcpyAsync(calls->dev, 64, calls->host, 64,
                                       ACL_MEMCPY_HOST_TO_DEVICE, calls->other);
    if (calls->pageable == ACL_SUCCESS) {
        calls->pageable = aclrtSynchronizeStream(calls->other);
    }
    /* Back to the mode the thread had. */
    (void)aclmdlRICaptureThreadExchangeMode(&mode);
}

static void *unsafe_thread(void *arg)
{
    struct unsafe_calls *calls = arg;
    if (aclrtSetCurrentContext(g_primary) != ACL_SUCCESS) {
        calls->memset = calls->memcpy = calls->memcpy2d = calls->pageable = ACL_ERROR_FAILURE;
        return NULL;
    }
    call_unsafe(calls);
    return NULL;
}

/* Checks what `thread` (0: the capturing one) in `mode` may call during a capture in `capture`. */
static void unsafe_case(aclrtStream stream, aclmdlRICaptureMode capture, int thread,
                        aclmdlRICaptureMode mode, aclrtStream other, void *dev, void *host)
{
    struct unsafe_calls calls = {mode, dev, host, other, 0, 0, 0, 0};
    /* GLOBAL forbids every thread until it switches (the capturing one to RELAXED, the
     * others to RELAXED or THREAD_LOCAL); THREAD_LOCAL the capturing thread until it
     * switches to RELAXED; RELAXED nobody. */
    int refused = capture == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
                      ? (thread ? mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
                                : mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
                  : capture == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL
                      ? (!thread && mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
                      : 0;
    aclmdlRI model = NULL;
    if (aclmdlRICaptureBegin(stream, capture) != ACL_SUCCESS) {
        holds("the capture began", 0);
        return;
    }
    if (thread) {
        on_thread(unsafe_thread, &calls);
    } else {
        call_unsafe(&calls);
    }
    expect("aclrtMemset in a capture", calls.memset,
           refused ? ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT : ACL_SUCCESS);
    expect("aclrtMemcpy in a capture", calls.memcpy,
           refused ? ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT : ACL_SUCCESS);
    expect("aclrtMemcpy2d in a capture", calls.memcpy2d,
           refused ? ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT : ACL_SUCCESS);
    expect("aclrtMemcpyAsync of pageable memory in a capture", calls.pageable,
           refused ? ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC : ACL_SUCCESS);
    /* A refused call leaves the capture as it was. */
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI seen = NULL;
    expect("aclmdlRICaptureGetInfo", aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    holds("the capture is active", status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    (void)aclrtMemsetAsync(dev, 64, 0, 64, stream);
    expect("aclmdlRICaptureEnd", aclmdlRICaptureEnd(stream, &model), ACL_SUCCESS);
    (void)aclmdlRIDestroy(model);
}

/* Ends a capture whatever its state, and destroys the instance it may give. */
static void end_anyway(aclrtStream stream)
{
    aclmdlRI model = NULL;
    if (aclmdlRICaptureEnd(stream, &model) == ACL_SUCCESS) {
        (void)aclmdlRIDestroy(model);
    }
    (void)aclGetRecentErrMsg();
}

/* The error table's capture codes: a wait with no record in the capture, a record of another
 * capture, a stream that joined and did not return, operations on a capturing stream. */
static int capture_dependencies(aclrtStream stream, aclrtStream other, aclrtStream third)
{
    aclrtEvent outside = NULL, inside = NULL;
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtCreateEvent(&outside));
    CHECK(aclrtCreateEvent(&inside));
    CHECK(aclrtRecordEvent(outside, third));
    CHECK(aclrtSynchronizeStream(third));
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    EXPECT(aclrtStreamWaitEvent(stream, outside), ACL_ERROR_RT_CAPTURE_DEPENDENCY);
    end_anyway(stream);

    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclmdlRICaptureBegin(other, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclrtRecordEvent(inside, stream));
    EXPECT(aclrtStreamWaitEvent(other, inside), ACL_ERROR_STREAM_CAPTURE_CONFLICT);
    end_anyway(other);
    end_anyway(stream);

    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclrtRecordEvent(inside, stream));
    CHECK(aclrtStreamWaitEvent(other, inside));
    CHECK(aclrtMemsetAsync(dev, 64, 1, 64, other));
    aclmdlRI model = SENTINEL;
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_ERROR_RT_STREAM_UNJOINED);
    HOLDS(model == SENTINEL);
    EXPECT(aclrtSynchronizeStream(other), ACL_SUCCESS);

    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    EXPECT(aclrtSynchronizeStream(stream), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT(aclrtStreamQuery(stream, &status), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT(aclrtDestroyStream(stream), ACL_ERROR_RT_STREAM_CAPTURED);
    end_anyway(stream);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    CHECK(aclrtDestroyEvent(outside));
    CHECK(aclrtDestroyEvent(inside));
    CHECK(aclrtFree(dev));
    return 0;
}

static int capture_modes(aclrtStream stream, aclrtStream other)
{
    void *dev = NULL;
    char *host = malloc(64);
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    memset(host, 3, 64);
    /* The exchange returns the previous mode; a mode outside the enum is refused. */
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED, start;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_SUCCESS);
    start = mode;
    mode = ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    mode = (aclmdlRICaptureMode)3;
    FAILS(aclmdlRICaptureThreadExchangeMode(&mode));
    FAILS(aclmdlRICaptureThreadExchangeMode(NULL));
    mode = start;
    EXPECT(aclmdlRICaptureThreadExchangeMode(&mode), ACL_SUCCESS);
    HOLDS(mode == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL);

    const aclmdlRICaptureMode modes[3] = {ACL_MODEL_RI_CAPTURE_MODE_GLOBAL,
                                          ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
                                          ACL_MODEL_RI_CAPTURE_MODE_RELAXED};
    for (int capture = 0; capture < 3; ++capture) {
        for (int thread = 0; thread < 2; ++thread) {
            for (int own = 0; own < 3; ++own) {
                unsafe_case(stream, modes[capture], thread, modes[own], other, dev, host);
            }
        }
    }
    CHECK(aclrtFree(dev));
    free(host);
    return 0;
}

/* aclmdlRIDebugPrint is deprecated in CANN's headers, and still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int capture_edges(aclrtStream stream, aclrtStream other, aclrtStream exec)
{
    aclmdlRI model = SENTINEL, seen = NULL, ended = NULL;
    aclmdlRICaptureStatus status = (aclmdlRICaptureStatus)7;
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));

    EXPECT(aclmdlRICaptureBegin(NULL, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT);
    FAILS(aclmdlRICaptureBegin(stream, (aclmdlRICaptureMode)3));
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    FAILS(aclmdlRICaptureGetInfo(stream, NULL, &seen));
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    HOLDS(model == SENTINEL);

    EXPECT(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && seen != NULL);
    /* An instance still being captured neither executes nor goes, nor is it printed. */
    EXPECT(aclmdlRIExecuteAsync(seen, exec), ACL_ERROR_RT_MODEL_CAPTURED);
    EXPECT(aclmdlRIDestroy(seen), ACL_ERROR_RT_MODEL_CAPTURED);
    FAILS(aclmdlRIDebugPrint(seen));
    EXPECT(aclmdlRIUpdate(seen), ACL_ERROR_RT_MODEL_UPDATE_FAILED);
    CHECK(aclrtMemsetAsync(dev, 64, 0x5A, 64, stream));
    FAILS(aclmdlRICaptureEnd(stream, NULL));
    EXPECT(aclmdlRICaptureEnd(stream, &ended), ACL_SUCCESS);
    HOLDS(ended == seen);
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &seen), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    EXPECT(aclmdlRIDebugPrint(ended), ACL_SUCCESS);
    /* Not in a capture. */
    EXPECT(aclmdlRIAbort(ended), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    /* Names: "" until set, the last one wins, at most 512 bytes. */
    char name[1024];
    memset(name, 'q', sizeof name);
    EXPECT(aclmdlRIGetName(ended, sizeof name, name), ACL_SUCCESS);
    HOLDS(name[0] == '\0');
    EXPECT(aclmdlRISetName(ended, "first"), ACL_SUCCESS);
    EXPECT(aclmdlRISetName(ended, "second"), ACL_SUCCESS);
    EXPECT(aclmdlRIGetName(ended, sizeof name, name), ACL_SUCCESS);
    HOLDS(strcmp(name, "second") == 0);
    char long_name[700];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    EXPECT(aclmdlRISetName(ended, long_name), ACL_SUCCESS);
    EXPECT(aclmdlRIGetName(ended, sizeof name, name), ACL_SUCCESS);
    size_t kept = strnlen(name, sizeof name);
    HOLDS(kept > 0 && kept <= 512 && strncmp(name, long_name, kept) == 0);
    FAILS(aclmdlRISetName(ended, NULL));
    FAILS(aclmdlRIGetName(ended, sizeof name, NULL));
    FAILS(aclmdlRISetName(NULL, "name"));
    uint32_t id = 0, other_id = 0;
    EXPECT(aclmdlRIGetId(ended, &id), ACL_SUCCESS);
    FAILS(aclmdlRIGetId(ended, NULL));

    /* A capture begun in a mode other than RELAXED ends on its own thread. */
    const aclmdlRICaptureMode strict[2] = {ACL_MODEL_RI_CAPTURE_MODE_GLOBAL,
                                           ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL};
    for (int i = 0; i < 2; ++i) {
        struct ending end = {other, NULL, ACL_SUCCESS};
        CHECK(aclmdlRICaptureBegin(other, strict[i]));
        CHECK(aclrtMemsetAsync(dev, 64, 1, 64, other));
        on_thread(end_capture, &end);
        expect("aclmdlRICaptureEnd on another thread", end.result,
               ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD);
        EXPECT(aclmdlRICaptureEnd(other, &model), ACL_SUCCESS);
        CHECK(aclmdlRIDestroy(model));
    }
    struct ending end = {other, NULL, ACL_ERROR_FAILURE};
    CHECK(aclmdlRICaptureBegin(other, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclrtMemsetAsync(dev, 64, 1, 64, other));
    on_thread(end_capture, &end);
    expect("aclmdlRICaptureEnd of a RELAXED capture on another thread", end.result, ACL_SUCCESS);
    HOLDS(end.model != NULL);
    EXPECT(aclmdlRIGetId(end.model, &other_id), ACL_SUCCESS);
    HOLDS(other_id != id);
    CHECK(aclmdlRIDestroy(end.model));

    /* The JSON print: SUMMARY or VERBOSE, into a file whose directory exists. */
    char path[128];
    snprintf(path, sizeof path, "/tmp/npu-sim-control-edges-%d.json", (int)getpid());
    FILE *created = fopen(path, "w");
    if (created != NULL) {
        fclose(created);
    }
    EXPECT(aclmdlRIDebugJsonPrint(ended, path, ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY), ACL_SUCCESS);
    FILE *file = fopen(path, "r");
    HOLDS(file != NULL && fgetc(file) != EOF);
    if (file != NULL) {
        fclose(file);
    }
    EXPECT(aclmdlRIDebugJsonPrint(ended, path, ACL_MDLRI_DEBUG_JSON_PRINT_VERBOSE), ACL_SUCCESS);
    FAILS(aclmdlRIDebugJsonPrint(ended, path, 2));
    FAILS(aclmdlRIDebugJsonPrint(ended, NULL, ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY));
    FAILS(aclmdlRIDebugJsonPrint(ended, "/nonexistent-npu-sim-dir/model.json",
                                 ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY));
    FAILS(aclmdlRIDebugJsonPrint(ended, "/tmp", ACL_MDLRI_DEBUG_JSON_PRINT_SUMMARY));
    remove(path);

    /* Destroying an instance while it runs: 107037, then once it is over. */
    aclrtNotify hold = NULL;
    CHECK(aclrtCreateNotify(&hold, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtWaitAndResetNotify(hold, exec, 0));
    EXPECT(aclmdlRIExecuteAsync(ended, exec), ACL_SUCCESS);
    EXPECT(aclmdlRIDestroy(ended), ACL_ERROR_RT_MODEL_RUNNING);
    CHECK(aclrtRecordNotify(hold, other));
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 0x5A);
    EXPECT(aclmdlRIDestroy(ended), ACL_SUCCESS);
    CHECK(aclrtDestroyNotify(hold));
    CHECK(aclrtFree(dev));
    return 0;
}

/* What an instance tells about its streams and tasks, a task group and its update. */
static int introspection(aclrtStream stream, aclrtStream other, aclrtStream updater,
                         aclrtStream exec)
{
    enum { N = 256 };
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL;
    void *a = NULL, *b = NULL, *word = NULL, *out = NULL;
    aclrtEvent event = NULL, back = NULL;
    aclmdlRI model = NULL;
    aclrtTaskGrp group = SENTINEL, unmatched = SENTINEL;
    CHECK(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin));
    CHECK(aclrtBinaryGetFunction(bin, "vector_add_f32", &add));
    CHECK(aclrtMalloc(&a, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&b, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&word, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(a, N * sizeof(float), 0, N * sizeof(float)));
    CHECK(aclrtMemset(b, N * sizeof(float), 0, N * sizeof(float)));
    CHECK(aclrtCreateEvent(&event));
    CHECK(aclrtCreateEvent(&back));
    npusimVectorAddArgs into_b = {(const float *)a, (const float *)a, (float *)b, N};

    EXPECT(aclmdlRICaptureTaskGrpBegin(stream), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    /* The seven task types, one each, on the capturing stream. */
    CHECK(aclrtMemsetAsync(out, 1, 0x5A, 1, stream));
    CHECK(aclrtLaunchKernelWithHostArgs(add, 1, stream, NULL, &into_b, sizeof into_b, NULL, 0));
    CHECK(aclrtRecordEvent(event, stream));
    CHECK(aclrtStreamWaitEvent(stream, event));
    CHECK(aclrtResetEvent(event, stream));
    CHECK(aclrtValueWrite(word, 1, 0, stream));
    CHECK(aclrtValueWait(word, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    /* In the capture the switch set on its stream reads on. */
    aclrtStreamAttrValue cache;
    memset(&cache, 0, sizeof cache);
    cache.cacheOpInfoSwitch = 1;
    CHECK(aclrtSetStreamAttribute(stream, ACL_STREAM_ATTR_CACHE_OP_INFO, &cache));
    attribute_reads(stream, ACL_STREAM_ATTR_CACHE_OP_INFO, 1);
    attribute_reads(other, ACL_STREAM_ATTR_CACHE_OP_INFO, 0);
    /* `other` joins the capture by waiting on one of its records: the same instance, and the
     * capturing stream's cache switch. */
    CHECK(aclrtRecordEvent(event, stream));
    CHECK(aclrtStreamWaitEvent(other, event));
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI of_other = NULL, of_stream = NULL;
    EXPECT(aclmdlRICaptureGetInfo(other, &status, &of_other), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureGetInfo(stream, &status, &of_stream), ACL_SUCCESS);
    HOLDS(status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && of_other == of_stream);
    attribute_reads(other, ACL_STREAM_ATTR_CACHE_OP_INFO, 1);
    cache.cacheOpInfoSwitch = 0;
    CHECK(aclrtSetStreamAttribute(stream, ACL_STREAM_ATTR_CACHE_OP_INFO, &cache));
    attribute_reads(other, ACL_STREAM_ATTR_CACHE_OP_INFO, 0);
    /* An event recorded in the capture is not synchronised while it goes on. */
    EXPECT(aclrtSynchronizeEvent(event), ACL_ERROR_RT_EVENT_CAPTURED);
    /* A group: single-operator tasks only; on its stream; not interrupted by another. */
    EXPECT(aclmdlRICaptureTaskGrpBegin(stream), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureTaskGrpBegin(stream), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclrtMemsetAsync(out, 1, 1, 1, stream), ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT);
    EXPECT(aclrtLaunchKernelWithHostArgs(add, 1, stream, NULL, &into_b, sizeof into_b, NULL, 0),
           ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(out, 1, 1, 1, other), ACL_ERROR_STREAM_TASK_GROUP_INTR);
    EXPECT(aclmdlRICaptureTaskGrpEnd(other, &unmatched), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    HOLDS(unmatched == SENTINEL);
    FAILS(aclmdlRICaptureTaskGrpEnd(stream, NULL));
    EXPECT(aclmdlRICaptureTaskGrpEnd(stream, &group), ACL_SUCCESS);
    HOLDS(group != SENTINEL && group != NULL);
    EXPECT(aclmdlRICaptureTaskGrpEnd(stream, &unmatched), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    /* `other` returns to the capture. */
    CHECK(aclrtMemsetAsync((char *)out + 1, 1, 0x6B, 1, other));
    CHECK(aclrtRecordEvent(back, other));
    CHECK(aclrtStreamWaitEvent(stream, back));
    /* A stream that joined does not end the capture. */
    aclmdlRI joined = SENTINEL;
    EXPECT(aclmdlRICaptureEnd(other, &joined), ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED);
    EXPECT(aclmdlRICaptureTaskUpdateBegin(stream, group), ACL_ERROR_RT_STREAM_CAPTURED);
    CHECK(aclmdlRICaptureEnd(stream, &model));

    /* Streams and tasks: NULL arrays count (whatever the count passed), short arrays fail. */
    uint32_t count = 100;
    aclrtStream streams[4] = {NULL, NULL, NULL, NULL};
    EXPECT(aclmdlRIGetStreams(model, NULL, &count), ACL_SUCCESS);
    HOLDS(count == 2);
    count = 0;
    EXPECT(aclmdlRIGetStreams(model, NULL, &count), ACL_SUCCESS);
    HOLDS(count == 2);
    count = 1;
    EXPECT(aclmdlRIGetStreams(model, streams, &count), ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY);
    count = 4;
    EXPECT(aclmdlRIGetStreams(model, streams, &count), ACL_SUCCESS);
    HOLDS(count == 2 && streams[0] != NULL && streams[1] != NULL && streams[0] != streams[1]);
    FAILS(aclmdlRIGetStreams(model, streams, NULL));
    EXPECT(aclmdlRIGetTasksByStream(exec, NULL, &count), ACL_ERROR_RT_STREAM_MODEL);
    /* The capturing stream's tasks: the seven, the record `other` waited on, the group's
     * kernel and the wait for `other`'s record, in order. */
    aclrtStream main_stream = NULL;
    aclmdlRITask tasks[16];
    uint32_t tasks_of[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
        tasks_of[i] = 0;
        EXPECT(aclmdlRIGetTasksByStream(streams[i], NULL, &tasks_of[i]), ACL_SUCCESS);
        if (tasks_of[i] == 10) {
            main_stream = streams[i];
        }
    }
    HOLDS(main_stream != NULL);
    if (main_stream == NULL) {
        return 1;
    }
    count = 9;
    EXPECT(aclmdlRIGetTasksByStream(main_stream, tasks, &count),
           ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY);
    count = 16;
    EXPECT(aclmdlRIGetTasksByStream(main_stream, tasks, &count), ACL_SUCCESS);
    HOLDS(count == 10);
    const aclmdlRITaskType types[10] = {
        ACL_MODEL_RI_TASK_DEFAULT,      ACL_MODEL_RI_TASK_KERNEL,
        ACL_MODEL_RI_TASK_EVENT_RECORD, ACL_MODEL_RI_TASK_EVENT_WAIT,
        ACL_MODEL_RI_TASK_EVENT_RESET,  ACL_MODEL_RI_TASK_VALUE_WRITE,
        ACL_MODEL_RI_TASK_VALUE_WAIT,   ACL_MODEL_RI_TASK_EVENT_RECORD,
        ACL_MODEL_RI_TASK_KERNEL,       ACL_MODEL_RI_TASK_EVENT_WAIT};
    uint32_t previous = 0;
    for (uint32_t i = 0; i < 10 && i < count; ++i) {
        aclmdlRITaskType type = (aclmdlRITaskType)99;
        uint32_t seq = UINT32_MAX;
        expect("aclmdlRITaskGetType", aclmdlRITaskGetType(tasks[i], &type), ACL_SUCCESS);
        if (type != types[i]) {
            printf("task %u is of type %d, expected %d\n", i, (int)type, (int)types[i]);
        }
        holds("the task has the type of the call that issued it", type == types[i]);
        expect("aclmdlRITaskGetSeqId", aclmdlRITaskGetSeqId(tasks[i], &seq), ACL_SUCCESS);
        holds("sequence ids follow the tasks' order", i == 0 || seq > previous);
        previous = seq;
    }
    FAILS(aclmdlRITaskGetType(tasks[0], NULL));
    FAILS(aclmdlRITaskGetSeqId(NULL, &previous));
    /* The kernel task's attributes, but not the three the reference excludes. */
    aclrtLaunchKernelAttrValue attr;
    memset(&attr, 0, sizeof attr);
    EXPECT(aclmdlRIKernelTaskGetAttribute(tasks[1], ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, &attr),
           ACL_SUCCESS);
    FAILS(aclmdlRIKernelTaskGetAttribute(tasks[1], ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE, &attr));
    FAILS(aclmdlRIKernelTaskGetAttribute(tasks[1], ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET,
                                         &attr));
    FAILS(aclmdlRIKernelTaskGetAttribute(tasks[1], ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH,
                                         &attr));
    aclmdlRITaskParams params;
    memset(&params, 0, sizeof params);
    EXPECT(aclmdlRITaskGetParams(tasks[1], &params), ACL_SUCCESS);
    HOLDS(params.type == ACL_MODEL_RI_TASK_KERNEL);
    memset(&params, 0, sizeof params);
    EXPECT(aclmdlRITaskGetParams(tasks[8], &params), ACL_SUCCESS);
    HOLDS(params.type == ACL_MODEL_RI_TASK_KERNEL && params.taskGrp == group);

    /* Execute; then disable the memset, update, execute: it is skipped. */
    CHECK(aclrtMemset(out, 2, 0, 2));
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(byte_at(out) == 0x5A && byte_at((char *)out + 1) == 0x6B);
    CHECK(aclrtMemset(out, 2, 0, 2));
    CHECK(aclrtMemset(word, 8, 0, 8));
    EXPECT(aclmdlRITaskDisable(tasks[0]), ACL_SUCCESS);
    FAILS(aclmdlRITaskDisable(NULL));
    EXPECT(aclmdlRIUpdate(model), ACL_SUCCESS);
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    HOLDS(byte_at(out) == 0 && byte_at((char *)out + 1) == 0x6B);

    /* Updating the group: from a stream not capturing, one update at a time, the same number
     * of tasks; the update's kernels replace the group's. */
    EXPECT(aclmdlRICaptureTaskUpdateEnd(updater), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRICaptureTaskUpdateBegin(updater, group), ACL_SUCCESS);
    EXPECT(aclmdlRICaptureTaskUpdateBegin(other, group), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    EXPECT(aclmdlRICaptureTaskUpdateEnd(other), ACL_ERROR_STREAM_TASK_GROUP_STATUS);
    CHECK(aclrtLaunchKernelWithHostArgs(add, 1, updater, NULL, &into_b, sizeof into_b, NULL, 0));
    CHECK(aclrtLaunchKernelWithHostArgs(add, 1, updater, NULL, &into_b, sizeof into_b, NULL, 0));
    FAILS(aclmdlRICaptureTaskUpdateEnd(updater));
    float ones[N];
    for (int i = 0; i < N; ++i) {
        ones[i] = 1.0f;
    }
    CHECK(put(a, ones, sizeof ones));
    npusimVectorAddArgs into_a = {(const float *)a, (const float *)a, (float *)a, N};
    EXPECT(aclmdlRICaptureTaskUpdateBegin(updater, group), ACL_SUCCESS);
    CHECK(aclrtLaunchKernelWithHostArgs(add, 1, updater, NULL, &into_a, sizeof into_a, NULL, 0));
    EXPECT(aclmdlRICaptureTaskUpdateEnd(updater), ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(updater));
    EXPECT(aclmdlRIExecuteAsync(model, exec), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(exec), ACL_SUCCESS);
    /* The first kernel doubled a into b (2), the updated group's doubled a itself. */
    float seen[2] = {0, 0};
    CHECK(aclrtMemcpy(&seen[0], 4, a, 4, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclrtMemcpy(&seen[1], 4, b, 4, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(seen[0] == 2.0f && seen[1] == 2.0f);

    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtDestroyEvent(event));
    CHECK(aclrtDestroyEvent(back));
    CHECK(aclrtFree(a));
    CHECK(aclrtFree(b));
    CHECK(aclrtFree(word));
    CHECK(aclrtFree(out));
    CHECK(aclrtBinaryUnLoad(bin));
    return 0;
}

/* Conditional tasks: sizes by type, the flags, the branches, ASSIGN_DEFAULT at each run. */
static int conditional_tasks(aclrtStream stream, aclrtStream other)
{
    aclmdlRI model = NULL, capture = NULL, branch = NULL;
    aclmdlRICondHandle assigned = NULL, own = NULL, refused = SENTINEL;
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI branches[3] = {NULL, NULL, NULL};
    uint64_t *assigned_word = NULL, *own_word = NULL;
    void *out = NULL;
    CHECK(aclrtMalloc(&out, 64, ACL_MEM_MALLOC_HUGE_FIRST));

    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK(aclmdlRICaptureGetInfo(stream, &status, &capture));
    FAILS(aclmdlRICondHandleCreate(NULL, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, &refused));
    FAILS(aclmdlRICondHandleCreate(capture, 0, (aclmdlRICondHandleFlag)2, &refused));
    FAILS(aclmdlRICondHandleCreate(capture, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, NULL));
    HOLDS(refused == SENTINEL);
    EXPECT(aclmdlRICondHandleCreate(capture, 0, ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
                                    &assigned),
           ACL_SUCCESS);
    EXPECT(aclmdlRICondHandleCreate(capture, 0, (aclmdlRICondHandleFlag)0, &own), ACL_SUCCESS);
    FAILS(aclmdlRICondHandleGetCondPtr(assigned, NULL));
    FAILS(aclmdlRICondHandleGetCondPtr(NULL, &own_word));
    EXPECT(aclmdlRICondHandleGetCondPtr(assigned, &assigned_word), ACL_SUCCESS);
    EXPECT(aclmdlRICondHandleGetCondPtr(own, &own_word), ACL_SUCCESS);
    HOLDS(assigned_word != NULL && own_word != NULL && assigned_word != own_word);

    /* IF takes 1 or 2 branches, WHILE 1, SWITCH more than 0; flags are reserved. */
    aclmdlRICondTaskParams params = {assigned, ACL_MODEL_RI_COND_TYPE_IF, 0, branches};
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.size = 3;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.type = ACL_MODEL_RI_COND_TYPE_WHILE;
    params.size = 0;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.size = 2;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.type = ACL_MODEL_RI_COND_TYPE_SWITCH;
    params.size = 0;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.type = (aclmdlRICondTaskType)3;
    params.size = 1;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.type = ACL_MODEL_RI_COND_TYPE_IF;
    FAILS(aclmdlRIAddCondTask(params, stream, 1));
    params.modelRIArray = NULL;
    FAILS(aclmdlRIAddCondTask(params, stream, 0));
    params.modelRIArray = branches;
    HOLDS(branches[0] == NULL);
    /* The stream must be capturing. */
    EXPECT(aclmdlRIAddCondTask(params, other, 0), ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    EXPECT(aclmdlRIAddCondTask(params, stream, 0), ACL_SUCCESS);
    params.handle = own;
    params.modelRIArray = &branches[1];
    EXPECT(aclmdlRIAddCondTask(params, stream, 0), ACL_SUCCESS);
    HOLDS(branches[0] != NULL && branches[1] != NULL && branches[0] != branches[1]);
    CHECK(aclmdlRICaptureEnd(stream, &model));
    HOLDS(model == capture);

    /* The branches are captured into with aclmdlRICaptureToModelRIBegin. */
    EXPECT(aclmdlRICaptureToModelRIBegin(NULL, branches[0], ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
           ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT);
    FAILS(aclmdlRICaptureToModelRIBegin(other, branches[0], (aclmdlRICaptureMode)3));
    for (int i = 0; i < 2; ++i) {
        EXPECT(aclmdlRICaptureToModelRIBegin(other, branches[i], ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
               ACL_SUCCESS);
        CHECK(aclrtMemsetAsync((char *)out + i, 1, 7 + i, 1, other));
        EXPECT(aclmdlRICaptureEnd(other, &branch), ACL_SUCCESS);
        HOLDS(branch == branches[i]);
    }
    /* Such an instance is not destroyed on its own. */
    FAILS(aclmdlRIDestroy(branches[0]));

    /* Both words hold 1 before each execution: ASSIGN_DEFAULT sets its own to 0 as the
     * execution starts (its IF runs nothing), the other is the program's (its IF runs). */
    const uint64_t one = 1;
    for (int run = 0; run < 2; ++run) {
        CHECK(put(assigned_word, &one, 8));
        CHECK(put(own_word, &one, 8));
        CHECK(aclrtMemset(out, 2, 0, 2));
        EXPECT(aclmdlRIExecuteAsync(model, stream), ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
        HOLDS(byte_at(out) == 0 && byte_at((char *)out + 1) == 8);
    }
    CHECK(aclmdlRIDestroy(model));
    CHECK(aclrtFree(out));
    return 0;
}

/* ---- 12 execution control ---- */

static pthread_mutex_t g_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_open = PTHREAD_COND_INITIALIZER;
static int g_gate;
static pthread_t g_host_func_thread;

static void held_host_func(void *args)
{
    (void)args;
    g_host_func_thread = pthread_self();
    pthread_mutex_lock(&g_gate_lock);
    while (!g_gate) {
        pthread_cond_wait(&g_gate_open, &g_gate_lock);
    }
    pthread_mutex_unlock(&g_gate_lock);
}

static pthread_t g_callback_thread;
static void *g_callback_data;
static int g_callback_runs;

static void on_callback(void *data)
{
    g_callback_thread = pthread_self();
    g_callback_data = data;
    ++g_callback_runs;
}

static int execution_control(aclrtStream stream)
{
    /* Execute timeouts take effect as interval * N, N in [1, 254], rounded up. */
    uint64_t interval = 0, actual = 0;
    uint32_t ms = 0;
    /* Before any setting: the default, 1091 s on an Atlas A2. */
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS((ms + 500) / 1000 == 1091);
    EXPECT(aclrtGetOpTimeOutInterval(&interval), ACL_SUCCESS);
    HOLDS(interval > 0);
    FAILS(aclrtGetOpTimeOutInterval(NULL));
    EXPECT(aclrtSetOpExecuteTimeOutV2(1, &actual), ACL_SUCCESS);
    HOLDS(actual == interval);
    EXPECT(aclrtSetOpExecuteTimeOutV2(interval * 3 - 1, &actual), ACL_SUCCESS);
    HOLDS(actual == interval * 3);
    EXPECT(aclrtSetOpExecuteTimeOutV2(interval * 3, &actual), ACL_SUCCESS);
    HOLDS(actual == interval * 3);
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS(ms == (uint32_t)(interval * 3 / 1000));
    EXPECT(aclrtSetOpExecuteTimeOutV2(interval * 254 + 1, &actual), ACL_SUCCESS);
    HOLDS(actual == interval * 254);
    /* 0: the longest, which is never with an interval below 100,000 us. */
    EXPECT(aclrtSetOpExecuteTimeOutV2(0, &actual), ACL_SUCCESS);
    HOLDS(actual == (interval < 100000 ? UINT64_MAX : interval * 254));
    FAILS(aclrtSetOpExecuteTimeOutV2(5, NULL));
    EXPECT(aclrtSetOpExecuteTimeOut(1), ACL_SUCCESS);
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS(ms == (uint32_t)((1000000 + interval - 1) / interval * interval / 1000));
    /* The last setting wins. */
    EXPECT(aclrtSetOpExecuteTimeOut(0), ACL_SUCCESS);
    EXPECT(aclrtGetOpExecuteTimeout(&ms), ACL_SUCCESS);
    HOLDS(interval < 100000 ? ms == UINT32_MAX : ms == (uint32_t)(interval * 254 / 1000));
    FAILS(aclrtGetOpExecuteTimeout(NULL));
    EXPECT(aclrtSetOpExecuteTimeOutWithMs(100), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    /* The thread's last task: tasks of streams the program created only. */
    void *dev = NULL;
    uint32_t first = 0, second = 0, third = 0;
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    EXPECT(aclrtGetThreadLastTaskId(&first), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(dev, 64, 0, 64, stream));
    EXPECT(aclrtGetThreadLastTaskId(&second), ACL_SUCCESS);
    HOLDS(second != first);
    CHECK(aclrtMemsetAsync(dev, 64, 0, 64, NULL));
    EXPECT(aclrtGetThreadLastTaskId(&third), ACL_SUCCESS);
    HOLDS(third == second);
    FAILS(aclrtGetThreadLastTaskId(NULL));
    CHECK(aclrtSynchronizeStream(NULL));

    /* A callback runs in the thread subscribed to its stream, once per launch, with its data;
     * with nothing to run, aclrtProcessReport times out (507012). */
    uint64_t self = (uint64_t)pthread_self();
    int data = 0;
    EXPECT(aclrtSubscribeReport(self, stream), ACL_SUCCESS);
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);
    g_callback_runs = 0;
    EXPECT(aclrtLaunchCallback(on_callback, &data, ACL_CALLBACK_NO_BLOCK, stream), ACL_SUCCESS);
    EXPECT(aclrtLaunchCallback(on_callback, &data, ACL_CALLBACK_NO_BLOCK, stream), ACL_SUCCESS);
    EXPECT(aclrtProcessReport(-1), ACL_SUCCESS);
    EXPECT(aclrtProcessReport(10000), ACL_SUCCESS);
    HOLDS(g_callback_runs == 2 && g_callback_data == &data &&
          pthread_equal(g_callback_thread, pthread_self()));
    EXPECT(aclrtProcessReport(1), ACL_ERROR_RT_REPORT_TIMEOUT);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtUnSubscribeReport(self, stream), ACL_SUCCESS);
    EXPECT(aclrtLaunchCallback(on_callback, &data, ACL_CALLBACK_NO_BLOCK, stream),
           ACL_ERROR_RT_STREAM_NO_CB_REG);

    /* A host function runs on a thread of the runtime's and holds the stream's later tasks. */
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    FAILS(aclrtLaunchHostFunc(stream, NULL, NULL));
    CHECK(aclrtSynchronizeStream(stream));
    g_gate = 0;
    EXPECT(aclrtLaunchHostFunc(stream, held_host_func, NULL), ACL_SUCCESS);
    CHECK(aclrtMemsetAsync(dev, 1, 0x33, 1, stream));
    EXPECT(aclrtStreamQuery(stream, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    HOLDS(byte_at(dev) == 0);
    pthread_mutex_lock(&g_gate_lock);
    g_gate = 1;
    pthread_cond_broadcast(&g_gate_open);
    pthread_mutex_unlock(&g_gate_lock);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(byte_at(dev) == 0x33);
    HOLDS(!pthread_equal(g_host_func_thread, pthread_self()));

    /* Reductions: reserve is NULL; the Atlas A2's types; memory of the stream's device. */
    int32_t left[4] = {1, -5, 7, 0}, right[4] = {2, 3, -9, 0}, got[4] = {0, 0, 0, 0};
    void *dst = NULL, *src = NULL, *far = NULL;
    aclrtContext other_device = NULL;
    CHECK(aclrtMalloc(&dst, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&src, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(put(src, right, sizeof right));
    const aclrtReduceKind kinds[3] = {ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM,
                                      ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX,
                                      ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN};
    for (int k = 0; k < 3; ++k) {
        CHECK(put(dst, left, sizeof left));
        EXPECT(aclrtReduceAsync(dst, src, sizeof left, kinds[k], ACL_INT32, stream, NULL),
               ACL_SUCCESS);
        EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
        CHECK(aclrtMemcpy(got, sizeof got, dst, sizeof got, ACL_MEMCPY_DEVICE_TO_HOST));
        int right_result = 1;
        for (int i = 0; i < 4; ++i) {
            int32_t want = k == 0   ? left[i] + right[i]
                           : k == 1 ? (left[i] > right[i] ? left[i] : right[i])
                                    : (left[i] < right[i] ? left[i] : right[i]);
            right_result &= got[i] == want;
        }
        holds("the reduction computes its kind", right_result);
    }
    FAILS(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT32, stream,
                           dev));
    const aclDataType supported[5] = {ACL_INT8, ACL_INT16, ACL_FLOAT16, ACL_FLOAT, ACL_BF16};
    for (int i = 0; i < 5; ++i) {
        EXPECT(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX, supported[i],
                                stream, NULL),
               ACL_SUCCESS);
    }
    const aclDataType unsupported[3] = {ACL_UINT32, ACL_INT64, ACL_DOUBLE};
    for (int i = 0; i < 3; ++i) {
        FAILS(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, unsupported[i],
                               stream, NULL));
    }
    FAILS(aclrtReduceAsync(dst, src, 16, (aclrtReduceKind)99, ACL_INT32, stream, NULL));
    CHECK(aclrtCreateContext(&other_device, 1));
    CHECK(aclrtMalloc(&far, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtSetCurrentContext(g_primary));
    FAILS(aclrtReduceAsync(far, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT32, stream,
                           NULL));
    FAILS(aclrtReduceAsync(dst, far, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT32, stream,
                           NULL));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    CHECK(aclrtSetCurrentContext(other_device));
    CHECK(aclrtFree(far));
    CHECK(aclrtDestroyContext(other_device));
    CHECK(aclrtSetCurrentContext(g_primary));

    /* Random numbers: task information and reserve NULL. */
    FAILS(aclrtRandomNumAsync(NULL, stream, NULL));
    /* Task updates: information, and a task stream bound to an instance. */
    FAILS(aclrtTaskUpdateAsync(stream, 1, NULL, stream));

    /* The instruction compatibility of the device's own SoC. */
    int32_t compatible = -1;
    EXPECT(aclrtCheckArchCompatibility(aclrtGetSocName(), &compatible), ACL_SUCCESS);
    HOLDS(compatible == 1);
    FAILS(aclrtCheckArchCompatibility(NULL, &compatible));
    FAILS(aclrtCheckArchCompatibility(aclrtGetSocName(), NULL));

    CHECK(aclrtFree(dst));
    CHECK(aclrtFree(src));
    CHECK(aclrtFree(dev));
    return 0;
}

int main(void)
{
    aclrtStream s1 = NULL, s2 = NULL, s3 = NULL, exec = NULL;
    /* A call that hangs ends the program rather than the test run. */
    alarm(300);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetCurrentContext(&g_primary));
    CHECK(aclrtCreateStream(&s1));
    CHECK(aclrtCreateStream(&s2));
    CHECK(aclrtCreateStream(&s3));
    CHECK(aclrtCreateStream(&exec));
    if (stream_attributes() != 0 || notifies(s1, s2) != 0 || labels(exec) != 0 ||
        builds(exec) != 0) {
        return 1;
    }
    const aclrtCondition conditions[6] = {ACL_RT_EQUAL, ACL_RT_NOT_EQUAL,
                                          ACL_RT_GREATER, ACL_RT_GREATER_OR_EQUAL,
                                          ACL_RT_LESS, ACL_RT_LESS_OR_EQUAL};
    for (int c = 0; c < 6; ++c) {
        if (stream_switch(conditions[c], ACL_RT_SWITCH_INT32, exec) != 0 ||
            stream_switch(conditions[c], ACL_RT_SWITCH_INT64, exec) != 0) {
            return 1;
        }
    }
    if (capture_edges(s1, s2, exec) != 0 || capture_dependencies(s1, s2, s3) != 0 ||
        capture_modes(s1, s2) != 0 ||
        introspection(s1, s2, s3, exec) != 0 || conditional_tasks(s1, s2) != 0 ||
        execution_control(s1) != 0) {
        return 1;
    }
    CHECK(aclrtDestroyStream(s1));
    CHECK(aclrtDestroyStream(s2));
    CHECK(aclrtDestroyStream(s3));
    CHECK(aclrtDestroyStream(exec));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
