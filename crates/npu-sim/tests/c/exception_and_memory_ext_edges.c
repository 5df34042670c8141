/*
 * The API reference's chapters that no other *_chapter_edges.c program walks function by
 * function: exception handling (a callback registered twice is kept once, one set and also
 * registered is called twice, the set one cannot be unregistered, the task/stream/thread/
 * device/error getters inside a callback and outside one, the thread's last error and recent
 * message, UCE repair and aclrtRepairError after an abort), the second-generation shareable
 * handles of virtual memory, unified addressing (managed memory advice, its attribute queries,
 * single and batched prefetches and the location each range was sent to, peer mappings), the
 * reserved shared buffers of chapter 20 and the data buffers of chapter 25. Where the reference
 * names no code only a failure is required. Prints a line for each mismatch, then how many
 * checks ran. Compiled by tests/c_programs.rs (also against CANN's own headers), which
 * compares the output.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"
#include "memory_helpers.h"
#include "npusim/control.h"

/* aclrtSetExceptionInfoCallback and aclGetDataBufferSize are deprecated in CANN's headers, and
 * still documented. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define MIB ((size_t)1 << 20)
#define NO_ID 0xFFFFFFFFu

/* ---- exception handling (chapter 13) ---------------------------------------------------- */

static int g_registered_calls;
static int g_set_calls;
static uint32_t g_task, g_stream, g_thread, g_device, g_code;
static const aclrtExceptionInfo *g_delivered;

static void registered_callback(aclrtExceptionInfo *info)
{
    ++g_registered_calls;
    g_task = aclrtGetTaskIdFromExceptionInfo(info);
    g_stream = aclrtGetStreamIdFromExceptionInfo(info);
    g_thread = aclrtGetThreadIdFromExceptionInfo(info);
    g_device = aclrtGetDeviceIdFromExceptionInfo(info);
    g_code = aclrtGetErrorCodeFromExceptionInfo(info);
    g_delivered = info;
}

static void set_callback(aclrtExceptionInfo *info)
{
    (void)info;
    ++g_set_calls;
}

/* Fails one memset on a new stream with `code`; returns what its synchronisation returned,
 * the stream's id and the thread's last task id once it was submitted. */
static aclError fail_one_task(void *dev, aclError code, int32_t *stream_id, uint32_t *task_id)
{
    aclrtStream stream = NULL;
    if (aclrtCreateStream(&stream) != ACL_SUCCESS || aclrtStreamGetId(stream, stream_id) != 0 ||
        npusimFailTask(stream, 1, code) != ACL_SUCCESS ||
        aclrtMemsetAsync(dev, 64, 0, 64, stream) != ACL_SUCCESS ||
        aclrtGetThreadLastTaskId(task_id) != ACL_SUCCESS) {
        return ACL_ERROR_INTERNAL_ERROR;
    }
    aclError synchronised = aclrtSynchronizeStream(stream);
    (void)aclGetRecentErrMsg();
    (void)aclrtDestroyStream(stream);
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return synchronised;
}

static void reset_counts(void)
{
    g_registered_calls = 0;
    g_set_calls = 0;
}

static int exception_callbacks(void *dev)
{
    int32_t stream_id = -1;
    uint32_t task_id = 0;
    /* Registering the same function twice succeeds and keeps one registration. */
    EXPECT(aclrtExceptionInfoCallbackRegister(registered_callback), ACL_SUCCESS);
    EXPECT(aclrtExceptionInfoCallbackRegister(registered_callback), ACL_SUCCESS);
    EXPECT(aclrtSetExceptionInfoCallback(set_callback), ACL_SUCCESS);
    reset_counts();
    EXPECT(fail_one_task(dev, ACL_ERROR_RT_AICORE_EXCEPTION, &stream_id, &task_id),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_registered_calls == 1);
    HOLDS(g_set_calls == 1);
    HOLDS(g_task == task_id && task_id != 0);
    HOLDS(g_stream == (uint32_t)stream_id);
    HOLDS(g_thread == (uint32_t)syscall(SYS_gettid));
    HOLDS(g_device == 0);
    HOLDS(g_code == ACL_ERROR_RT_AICORE_EXCEPTION);
    /* The info is valid only while the callback runs: afterwards (and for NULL) every getter
     * answers 0xFFFFFFFF, never reading it. */
    HOLDS(aclrtGetTaskIdFromExceptionInfo(g_delivered) == NO_ID);
    HOLDS(aclrtGetStreamIdFromExceptionInfo(g_delivered) == NO_ID);
    HOLDS(aclrtGetThreadIdFromExceptionInfo(g_delivered) == NO_ID);
    HOLDS(aclrtGetDeviceIdFromExceptionInfo(g_delivered) == NO_ID);
    HOLDS(aclrtGetErrorCodeFromExceptionInfo(g_delivered) == NO_ID);
    HOLDS(aclrtGetTaskIdFromExceptionInfo(NULL) == NO_ID);
    HOLDS(aclrtGetErrorCodeFromExceptionInfo(NULL) == NO_ID);

    /* A task of the default stream names the default stream's id. */
    int32_t default_id = -1;
    EXPECT(aclrtStreamGetId(NULL, &default_id), ACL_SUCCESS);
    reset_counts();
    g_stream = NO_ID;
    CHECK(npusimFailTask(NULL, 1, ACL_ERROR_RT_AICORE_EXCEPTION));
    EXPECT(aclrtMemsetAsync(dev, 64, 0, 64, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_AICORE_EXCEPTION);
    (void)aclGetRecentErrMsg();
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    HOLDS(g_registered_calls == 1 && g_stream == (uint32_t)default_id && g_device == 0);

    /* Unregister cannot remove the callback set with aclrtSetExceptionInfoCallback. */
    (void)aclrtExceptionInfoCallbackUnregister(set_callback);
    (void)aclGetRecentErrMsg();
    reset_counts();
    EXPECT(fail_one_task(dev, ACL_ERROR_RT_AICORE_EXCEPTION, &stream_id, &task_id),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_set_calls == 1);
    HOLDS(g_registered_calls == 1);

    /* One function both set and registered is two entries: called twice. */
    EXPECT(aclrtSetExceptionInfoCallback(registered_callback), ACL_SUCCESS);
    reset_counts();
    EXPECT(fail_one_task(dev, ACL_ERROR_RT_AICORE_EXCEPTION, &stream_id, &task_id),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_registered_calls == 2);
    HOLDS(g_set_calls == 0);

    /* Unregistering removes the registration, setting NULL clears the set one. */
    EXPECT(aclrtExceptionInfoCallbackUnregister(registered_callback), ACL_SUCCESS);
    reset_counts();
    EXPECT(fail_one_task(dev, ACL_ERROR_RT_AICORE_EXCEPTION, &stream_id, &task_id),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_registered_calls == 1);
    EXPECT(aclrtSetExceptionInfoCallback(NULL), ACL_SUCCESS);
    reset_counts();
    EXPECT(fail_one_task(dev, ACL_ERROR_RT_AICORE_EXCEPTION, &stream_id, &task_id),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    HOLDS(g_registered_calls == 0 && g_set_calls == 0);
    EXPECT(aclrtExceptionInfoCallbackRegister(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtExceptionInfoCallbackUnregister(NULL), ACL_ERROR_INVALID_PARAM);
    return 0;
}

/* What another thread sees of the last error and message: its own, not the main thread's. */
struct thread_view {
    aclError peek_before;
    const char *message_before;
    aclError own_peek;
    aclError own_get;
    aclError get_again;
};

static void *other_thread(void *arg)
{
    struct thread_view *view = arg;
    view->peek_before = aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL);
    view->message_before = aclGetRecentErrMsg();
    uint32_t count = 0;
    (void)aclrtSetDevice(1000);
    (void)aclrtGetDeviceCount(&count); /* a success changes nothing */
    view->own_peek = aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL);
    view->own_get = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    view->get_again = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    (void)aclGetRecentErrMsg();
    return NULL;
}

static int last_errors(void)
{
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    (void)aclGetRecentErrMsg();
    void *out = NULL;
    EXPECT(aclrtMalloc(&out, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    HOLDS(aclGetRecentErrMsg() != NULL);
    /* Read and cleared: nothing until the next failure. */
    HOLDS(aclGetRecentErrMsg() == NULL);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    /* Only a failure changes the code; a later failure replaces it. */
    int32_t device = -1;
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetDevice(1000), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    /* Only the thread level exists; asking for another keeps the thread's code. */
    FAILS(aclrtPeekAtLastError((aclrtLastErrLevel)1));
    FAILS(aclrtGetLastError((aclrtLastErrLevel)1));
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    /* Several messages: the newest comes first. */
    (void)aclGetRecentErrMsg();
    EXPECT(aclrtMalloc(&out, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetDevice(1000), ACL_ERROR_RT_INVALID_DEVICEID);
    const char *messages = aclGetRecentErrMsg();
    const char *newest = messages != NULL ? strstr(messages, "aclrtSetDevice") : NULL;
    const char *oldest = messages != NULL ? strstr(messages, "aclrtMalloc") : NULL;
    HOLDS(newest != NULL && oldest != NULL && newest < oldest);

    struct thread_view view;
    memset(&view, 0, sizeof view);
    pthread_t thread;
    if (pthread_create(&thread, NULL, other_thread, &view) != 0 ||
        pthread_join(thread, NULL) != 0) {
        printf("thread failed\n");
        return 1;
    }
    HOLDS(view.peek_before == ACL_SUCCESS);
    HOLDS(view.message_before == NULL);
    HOLDS(view.own_peek == ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(view.own_get == ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(view.get_again == ACL_SUCCESS);
    /* The other thread's reading cleared its own code, not this thread's. */
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
    (void)aclGetRecentErrMsg();
    return 0;
}

/* Two ranges: a short array gets the first and a count of what it holds; a repair is all or
 * nothing; a refused query writes nothing. */
static int memory_error_lists(void)
{
    /* A refused query writes nothing. */
    aclrtMemUceInfo untouched[2];
    memset(untouched, 0x5a, sizeof untouched);
    size_t count = 77;
    EXPECT(aclrtGetMemUceInfo(99, untouched, 2, &count), ACL_ERROR_RT_INVALID_DEVICEID);
    aclrtErrorInfo verbose;
    memset(&verbose, 0x5a, sizeof verbose);
    EXPECT(aclrtGetErrorVerbose(99, &verbose), ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(count == 77 && ((unsigned char *)untouched)[0] == 0x5a &&
          ((unsigned char *)&verbose)[0] == 0x5a);
    uint8_t *dev = NULL;
    CHECK(aclrtMalloc((void **)&dev, MIB, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(npusimInjectMemUce(dev + 4096, 4096));
    CHECK(npusimInjectMemUce(dev + 65536, 4096));
    aclrtMemUceInfo uce[4];
    memset(uce, 0, sizeof uce);
    size_t found = 0;
    EXPECT(aclrtGetMemUceInfo(0, uce, 1, &found), ACL_SUCCESS);
    HOLDS(found == 1 && uce[0].addr == dev + 4096 && uce[1].addr == NULL);
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 2 && uce[1].addr == dev + 65536);
    aclrtMemUceInfo half[2] = {uce[0], uce[1]};
    half[1].len = 8;
    FAILS(aclrtMemUceRepair(0, half, 2));
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 2);
    EXPECT(aclrtMemUceRepair(0, uce, 2), ACL_SUCCESS);
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 0);
    CHECK(aclrtFree(dev));
    return 0;
}

static int memory_errors(void)
{
    uint8_t *dev = NULL;
    CHECK(aclrtMalloc((void **)&dev, MIB, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemset(dev, MIB, 0x5a, MIB));
    CHECK(npusimInjectMemUce(dev + 4096, 4096));
    aclrtMemUceInfo uce[4];
    memset(uce, 0, sizeof uce);
    size_t found = 0;
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 1 && uce[0].addr == dev + 4096 && uce[0].len == 4096);

    /* Pointers and counts before the device. */
    EXPECT(aclrtMemUceRepair(0, NULL, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemUceRepair(0, uce, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemUceRepair(99, NULL, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemUceRepair(99, uce, 1), ACL_ERROR_RT_INVALID_DEVICEID);
    aclrtMemUceInfo wrong = uce[0];
    wrong.len = 8;
    FAILS(aclrtMemUceRepair(0, &wrong, 1));
    found = 9;
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 1);
    EXPECT(aclrtMemUceRepair(0, uce, 1), ACL_SUCCESS);
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 0);
    uint8_t bytes[3];
    CHECK(aclrtMemcpy(&bytes[0], 1, dev + 4095, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclrtMemcpy(&bytes[1], 1, dev + 4096, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(aclrtMemcpy(&bytes[2], 1, dev + 8192, 1, ACL_MEMCPY_DEVICE_TO_HOST));
    HOLDS(bytes[0] == 0x5a && bytes[1] == 0 && bytes[2] == 0x5a);

    /* The documented recovery: the error's detail, an abort of the device, then the repair. */
    CHECK(npusimInjectMemUce(dev + 65536, 4096));
    aclrtErrorInfo info;
    memset(&info, 0, sizeof info);
    EXPECT(aclrtGetErrorVerbose(0, &info), ACL_SUCCESS);
    HOLDS(info.errorType == ACL_RT_ERROR_MEMORY && info.tryRepair == 1 && info.hasDetail == 1);
    HOLDS(info.detail.uceInfo.arraySize == 1 &&
          info.detail.uceInfo.memUceInfoArray[0].addr == dev + 65536);
    EXPECT(aclrtDeviceTaskAbort(0, 0), ACL_SUCCESS);
    EXPECT(aclrtRepairError(0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRepairError(99, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtRepairError(99, &info), ACL_ERROR_RT_INVALID_DEVICEID);
    aclrtErrorInfo changed = info;
    changed.errorType = (aclrtErrorType)77;
    EXPECT(aclrtRepairError(0, &changed), ACL_ERROR_INVALID_PARAM);
    changed = info;
    changed.tryRepair = 0;
    EXPECT(aclrtRepairError(0, &changed), ACL_SUCCESS);
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 1);
    changed = info;
    changed.errorType = ACL_RT_ERROR_OTHERS;
    EXPECT(aclrtRepairError(0, &changed), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtRepairError(0, &info), ACL_SUCCESS);
    EXPECT(aclrtGetMemUceInfo(0, uce, 4, &found), ACL_SUCCESS);
    HOLDS(found == 0);
    memset(&info, 0xff, sizeof info);
    EXPECT(aclrtGetErrorVerbose(0, &info), ACL_SUCCESS);
    HOLDS(info.errorType != ACL_RT_ERROR_MEMORY);
    CHECK(aclrtFree(dev));
    (void)aclGetRecentErrMsg();
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

/* ---- shareable handles, second generation (chapter 11-04) ------------------------------- */

static int shareable_handles_v2(void)
{
    size_t granularity = 0;
    aclrtPhysicalMemProp prop = physical_prop(ACL_HBM_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                                           &granularity));
    aclrtDrvMemHandle handle = NULL, other = NULL;
    CHECK(aclrtMallocPhysical(&handle, granularity, &prop, 0));
    CHECK(aclrtMallocPhysical(&other, granularity, &prop, 0));
    uint64_t shareable = 0;
    aclrtMemFabricHandle fabric;
    memset(&fabric, 0, sizeof fabric);
    /* NULL first; then FABRIC, an Atlas A3 option; another type or flag is an error. */
    EXPECT(aclrtMemExportToShareableHandleV2(handle, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemExportToShareableHandleV2(NULL, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
                                             &shareable),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemExportToShareableHandleV2(handle, 0, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
                                             &fabric),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    FAILS(aclrtMemExportToShareableHandleV2(handle, 0, (aclrtMemSharedHandleType)3, &shareable));
    /* The flags come before the share type (parameter order). */
    EXPECT(aclrtMemExportToShareableHandleV2(handle, 4, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
                                             &fabric),
           ACL_ERROR_RT_PARAM_INVALID);
    FAILS(aclrtMemExportToShareableHandleV2(handle, 4, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
                                            &shareable));
    HOLDS(shareable == 0);
    EXPECT(aclrtMemExportToShareableHandleV2(handle, ACL_RT_VMM_EXPORT_FLAG_DEFAULT,
                                             ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &shareable),
           ACL_SUCCESS);
    HOLDS(shareable != 0);
    /* One shareable handle per handle, whichever generation exports it. */
    uint64_t again = 0;
    FAILS(aclrtMemExportToShareableHandleV2(handle, ACL_RT_VMM_EXPORT_FLAG_DEFAULT,
                                            ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &again));
    FAILS(aclrtMemExportToShareableHandle(handle, ACL_MEM_HANDLE_TYPE_NONE,
                                          ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &again));
    HOLDS(again == 0);
    uint64_t first_generation = 0;
    EXPECT(aclrtMemExportToShareableHandle(other, ACL_MEM_HANDLE_TYPE_NONE,
                                           ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                           &first_generation),
           ACL_SUCCESS);
    FAILS(aclrtMemExportToShareableHandleV2(other, ACL_RT_VMM_EXPORT_FLAG_DEFAULT,
                                            ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &again));

    int32_t pid = 0;
    CHECK(aclrtDeviceGetBareTgid(&pid));
    EXPECT(aclrtMemSetPidToShareableHandleV2(NULL, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &pid, 1),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemSetPidToShareableHandleV2(&shareable, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, NULL,
                                             1),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemSetPidToShareableHandleV2(&shareable, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &pid,
                                             0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemSetPidToShareableHandleV2(&fabric, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &pid, 1),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);

    /* Import is across processes only; its flags are reserved (0). */
    aclrtDrvMemHandle imported = NULL;
    EXPECT(aclrtMemImportFromShareableHandleV2(&shareable, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0,
                                               NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemImportFromShareableHandleV2(NULL, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0,
                                               &imported),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemImportFromShareableHandleV2(&fabric, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0,
                                               &imported),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    FAILS(aclrtMemImportFromShareableHandleV2(&shareable, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 1,
                                              &imported));
    FAILS(aclrtMemImportFromShareableHandleV2(&shareable, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0,
                                              &imported));
    HOLDS(imported == NULL);
    CHECK(aclrtFreePhysical(other));
    CHECK(aclrtFreePhysical(handle));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

/* ---- unified addressing (chapter 11-05) ------------------------------------------------- */

static aclrtMemManagedLocation location(aclrtMemManagedLocationType type, int32_t id)
{
    aclrtMemManagedLocation where;
    where.type = type;
    where.id = id;
    return where;
}

static int32_t attribute(aclrtMemManagedRangeAttribute which, const void *ptr, size_t size)
{
    int32_t value = 12345;
    if (aclrtMemManagedGetAttr(which, ptr, size, &value, sizeof value) != ACL_SUCCESS) {
        (void)aclGetRecentErrMsg();
        return 54321;
    }
    return value;
}

static int managed_advice(uint8_t *managed, void *plain)
{
    const aclrtMemManagedLocation device0 = location(ACL_MEM_LOCATIONTYPE_DEVICE, 0);
    const aclrtMemManagedLocation host = location(ACL_MEM_LOCATIONTYPE_HOST, 77);
    const aclrtMemManagedLocation invalid = location(ACL_MEM_LOCATIONTYPE_INVALID, 0);
    /* The range: managed memory, a non-zero multiple of 2 MiB, inside its allocation. */
    EXPECT(aclrtMemManagedAdvise(NULL, 2 * MIB, ACL_MEM_ADVISE_SET_READ_MOSTLY, device0),
           ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemManagedAdvise(plain, 2 * MIB, ACL_MEM_ADVISE_SET_READ_MOSTLY, device0));
    FAILS(aclrtMemManagedAdvise(managed, 0, ACL_MEM_ADVISE_SET_READ_MOSTLY, device0));
    FAILS(aclrtMemManagedAdvise(managed, MIB, ACL_MEM_ADVISE_SET_READ_MOSTLY, device0));
    FAILS(aclrtMemManagedAdvise(managed + 4 * MIB, 4 * MIB, ACL_MEM_ADVISE_SET_READ_MOSTLY,
                                device0));
    FAILS(aclrtMemManagedAdvise(managed, 2 * MIB, (aclrtMemManagedAdviseType)6, device0));
    EXPECT(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                 location(ACL_MEM_LOCATIONTYPE_DEVICE, 99)),
           ACL_ERROR_RT_INVALID_DEVICEID);
    FAILS(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION, invalid));
    /* The simulator's host is one NUMA node, 0: another node id is not a reasonable one. */
    FAILS(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                location(ACL_MEM_LOCATIONTYPE_HOST_NUMA, 5)));
    FAILS(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_ACCESSED_BY,
                                location(ACL_MEM_LOCATIONTYPE_HOST_NUMA, -1)));
    /* Read-mostly advice ignores its location (UNSET with INVALID keeps the host's copy). */
    EXPECT(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_SET_READ_MOSTLY, invalid),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 2 * MIB) == 1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 4 * MIB) == 0);
    EXPECT(aclrtMemManagedAdvise(managed, 2 * MIB, ACL_MEM_ADVISE_UNSET_READ_MOSTLY, invalid),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 2 * MIB) == 0);

    /* Preferred location: the id the whole range agrees on (the host -1), else -2. */
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * MIB) == -2);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4 * MIB) ==
          ACL_MEM_LOCATIONTYPE_INVALID);
    EXPECT(aclrtMemManagedAdvise(managed, 4 * MIB, ACL_MEM_ADVISE_SET_PREFERRED_LOCATION, host),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * MIB) == -1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4 * MIB) ==
          ACL_MEM_LOCATIONTYPE_HOST);
    EXPECT(aclrtMemManagedAdvise(managed + 2 * MIB, 2 * MIB,
                                 ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                 location(ACL_MEM_LOCATIONTYPE_DEVICE, 1)),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * MIB) == -2);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + 2 * MIB, 1) == 1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed + 2 * MIB, 1) ==
          ACL_MEM_LOCATIONTYPE_DEVICE);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, managed + 2 * MIB, 1) == 1);
    EXPECT(aclrtMemManagedAdvise(managed + 2 * MIB, 2 * MIB,
                                 ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                 location(ACL_MEM_LOCATIONTYPE_HOST_NUMA, 0)),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed + 2 * MIB, 1) ==
          ACL_MEM_LOCATIONTYPE_HOST_NUMA);
    EXPECT(aclrtMemManagedAdvise(managed, 4 * MIB, ACL_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                                 host),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 2 * MIB) == -2);

    /* Accessed by: every place set, -2 past them; a short array holds what fits. */
    EXPECT(aclrtMemManagedAdvise(managed, 4 * MIB, ACL_MEM_ADVISE_SET_ACCESSED_BY, device0),
           ACL_SUCCESS);
    EXPECT(aclrtMemManagedAdvise(managed, 4 * MIB, ACL_MEM_ADVISE_SET_ACCESSED_BY, host),
           ACL_SUCCESS);
    int32_t by[3] = {7, 7, 7};
    EXPECT(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 4 * MIB, by,
                                  sizeof by),
           ACL_SUCCESS);
    HOLDS(((by[0] == 0 && by[1] == -1) || (by[0] == -1 && by[1] == 0)) && by[2] == -2);
    int32_t one[2] = {7, 7};
    EXPECT(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 4 * MIB, one, 4),
           ACL_SUCCESS);
    HOLDS((one[0] == 0 || one[0] == -1) && one[1] == 7);
    EXPECT(aclrtMemManagedAdvise(managed, 4 * MIB, ACL_MEM_ADVISE_UNSET_ACCESSED_BY, host),
           ACL_SUCCESS);
    EXPECT(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 4 * MIB, by,
                                  sizeof by),
           ACL_SUCCESS);
    HOLDS(by[0] == 0 && by[1] == -2 && by[2] == -2);

    /* dataSize: 4 for the integer attributes, a non-zero multiple of 4 for ACCESSED_BY. */
    int64_t wide = 0;
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, MIB, &wide, 8));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, MIB,
                                 &wide, 8));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, MIB, by, 6));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, MIB, by, 0));
    FAILS(aclrtMemManagedGetAttr((aclrtMemManagedRangeAttribute)0, managed, MIB, &wide, 4));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, plain, MIB, &wide, 4));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 0, &wide, 4));
    FAILS(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 6 * MIB + 1,
                                 &wide, 4));
    EXPECT(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, MIB, NULL, 4),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedGetAttr(ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, NULL, MIB, &wide, 4),
           ACL_ERROR_INVALID_PARAM);
    HOLDS(wide == 0);

    /* Several attributes at once; a refused one leaves every output as it was. */
    aclrtMemManagedRangeAttribute which[2] = {ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                              ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY};
    int32_t mostly = 7;
    int32_t listed[2] = {7, 7};
    void *outputs[2] = {&mostly, listed};
    size_t sizes[2] = {4, sizeof listed};
    EXPECT(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, outputs, sizes), ACL_SUCCESS);
    HOLDS(mostly == 0 && listed[0] == 0 && listed[1] == -2);
    mostly = 7;
    listed[0] = 7;
    sizes[1] = 6;
    FAILS(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, outputs, sizes));
    HOLDS(mostly == 7 && listed[0] == 7);
    sizes[1] = sizeof listed;
    which[1] = (aclrtMemManagedRangeAttribute)42;
    FAILS(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, outputs, sizes));
    HOLDS(mostly == 7);
    which[1] = ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY;
    outputs[1] = NULL;
    FAILS(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, outputs, sizes));
    HOLDS(mostly == 7);
    outputs[1] = listed;
    EXPECT(aclrtMemManagedGetAttrs(NULL, 2, managed, 4 * MIB, outputs, sizes),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, NULL, sizes),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedGetAttrs(which, 2, managed, 4 * MIB, outputs, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedGetAttrs(which, 0, managed, 4 * MIB, outputs, sizes),
           ACL_ERROR_INVALID_PARAM);
    HOLDS(mostly == 7);
    return 0;
}

static int managed_prefetches(uint8_t *managed, void *plain, aclrtStream stream)
{
    const aclrtMemManagedLocation device0 = location(ACL_MEM_LOCATIONTYPE_DEVICE, 0);
    const aclrtMemManagedLocation host = location(ACL_MEM_LOCATIONTYPE_HOST, 0);
    /* The prefetch headers name ACL_ERROR_INVALID_PARAM for error input. */
    EXPECT(aclrtMemManagedPrefetchAsync(NULL, 2 * MIB, device0, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(plain, 2 * MIB, device0, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, MIB, device0, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 0, device0, 0, stream), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB,
                                        location(ACL_MEM_LOCATIONTYPE_INVALID, 0), 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB,
                                        location(ACL_MEM_LOCATIONTYPE_HOST_NUMA, 3), 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB, device0, 1, stream),
           ACL_ERROR_INVALID_PARAM);
    /* Values before lookups: the flags before the location's device, as in a batch. */
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB,
                                        location(ACL_MEM_LOCATIONTYPE_DEVICE, 99), 1, stream),
           ACL_ERROR_INVALID_PARAM);
    aclrtMemManagedLocation nowhere = location(ACL_MEM_LOCATIONTYPE_DEVICE, 99);
    const void *one_range[1] = {managed};
    size_t one_size[1] = {2 * MIB};
    size_t first[1] = {0};
    EXPECT(aclrtMemManagedPrefetchBatchAsync(one_range, one_size, 1, &nowhere, first, 1, 1,
                                             stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB,
                                        location(ACL_MEM_LOCATIONTYPE_DEVICE, 99), 0, stream),
           ACL_ERROR_RT_INVALID_DEVICEID);
    /* Nothing refused was recorded; a request is recorded as made, not as completed. */
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * MIB) == -2);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 4 * MIB, device0, 0, stream), ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4 * MIB) == 0);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, managed, 4 * MIB) ==
          ACL_MEM_LOCATIONTYPE_DEVICE);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID, managed, 4 * MIB) == 0);
    EXPECT(aclrtMemManagedPrefetchAsync(managed, 2 * MIB, host, 0, NULL), ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * MIB) == -1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4 * MIB) == -2);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, managed, 4 * MIB) ==
          ACL_MEM_LOCATIONTYPE_INVALID);

    /* A batch: prefetchLocs[k] takes ptrs[idx[k]] up to the next index, the last to count-1. */
    const void *ptrs[3] = {managed, managed + 2 * MIB, managed + 4 * MIB};
    size_t sizes[3] = {2 * MIB, 2 * MIB, 2 * MIB};
    aclrtMemManagedLocation places[2] = {location(ACL_MEM_LOCATIONTYPE_DEVICE, 1), host};
    size_t starts[2] = {0, 2};
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, starts, 2, 0, stream),
           ACL_SUCCESS);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4 * MIB) == 1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed + 4 * MIB, 2 * MIB) ==
          -1);
    /* Its indexes start at 0, increase and stay below count; numPrefetchLocs <= count. */
    size_t from_one[2] = {1, 2};
    size_t not_increasing[2] = {0, 0};
    size_t past[2] = {0, 3};
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, from_one, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, not_increasing, 2, 0,
                                             stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, past, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 1, places, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, starts, 0, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 0, places, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, starts, 2, 1, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(NULL, sizes, 3, places, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, NULL, 3, places, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, NULL, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, NULL, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    /* One bad range or place refuses the whole batch, recording nothing. */
    sizes[2] = MIB;
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, starts, 2, 0, stream),
           ACL_ERROR_INVALID_PARAM);
    sizes[2] = 2 * MIB;
    places[1] = location(ACL_MEM_LOCATIONTYPE_DEVICE, 99);
    EXPECT(aclrtMemManagedPrefetchBatchAsync(ptrs, sizes, 3, places, starts, 2, 0, stream),
           ACL_ERROR_RT_INVALID_DEVICEID);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed + 4 * MIB, 2 * MIB) ==
          -1);
    HOLDS(attribute(ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4 * MIB) == 1);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    return 0;
}

static int peer_mappings(void)
{
    void *dev0 = NULL;
    CHECK(aclrtMalloc(&dev0, MIB, ACL_MEM_MALLOC_HUGE_FIRST));
    EXPECT(aclrtMemP2PMap(NULL, MIB, 1, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemP2PMap(dev0, 0, 1, 0), ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemP2PMap(dev0, MIB, 1, 1));
    EXPECT(aclrtMemP2PMap(dev0, MIB, 99, 0), ACL_ERROR_RT_INVALID_DEVICEID);
    FAILS(aclrtMemP2PMap(dev0, MIB, 0, 0));
    FAILS(aclrtMemP2PMap(dev0, 2 * MIB, 1, 0));
    /* Peer access first: device 1 must have enabled access to device 0's memory. */
    EXPECT(aclrtMemP2PMap(dev0, MIB, 1, 0), ACL_ERROR_RT_NO_PERMISSION);
    aclrtContext ctx0 = NULL, ctx1 = NULL;
    CHECK(aclrtGetCurrentContext(&ctx0));
    CHECK(aclrtCreateContext(&ctx1, 1));
    CHECK(aclrtDeviceEnablePeerAccess(0, 0));
    CHECK(aclrtSetCurrentContext(ctx0));
    EXPECT(aclrtMemP2PMap(dev0, MIB, 1, 0), ACL_SUCCESS);
    CHECK(aclrtSetCurrentContext(ctx1));
    CHECK(aclrtDeviceDisablePeerAccess(0));
    CHECK(aclrtSetCurrentContext(ctx0));
    CHECK(aclrtDestroyContext(ctx1));
    CHECK(aclrtFree(dev0));
    (void)aclGetRecentErrMsg();
    return 0;
}

static int unified_addressing(aclrtStream stream)
{
    uint8_t *managed = NULL;
    void *plain = NULL;
    /* Managed memory: in the unified window [0x90000000000, +3 TB), sizes rounded up to
     * 2 MiB, ACL_RT_MEM_ATTACH_GLOBAL the only flag, at most 3 TB in a process. */
    EXPECT(aclrtMemAllocManaged(NULL, MIB, ACL_RT_MEM_ATTACH_GLOBAL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemAllocManaged((void **)&managed, 0, ACL_RT_MEM_ATTACH_GLOBAL),
           ACL_ERROR_INVALID_PARAM);
    FAILS(aclrtMemAllocManaged((void **)&managed, MIB, 0));
    FAILS(aclrtMemAllocManaged((void **)&managed, (3ull << 40) + 1, ACL_RT_MEM_ATTACH_GLOBAL));
    HOLDS(managed == NULL);
    CHECK(aclrtMemAllocManaged((void **)&managed, 5 * MIB + 1, ACL_RT_MEM_ATTACH_GLOBAL));
    const uintptr_t window = (uintptr_t)0x90000000000ull;
    HOLDS((uintptr_t)managed >= window && (uintptr_t)managed < window + (3ull << 40));
    void *base = NULL;
    size_t whole = 0;
    EXPECT(aclrtMemGetAddressRange(managed + 5 * MIB, &base, &whole), ACL_SUCCESS);
    HOLDS(base == managed && whole == 6 * MIB);
    CHECK(aclrtMalloc(&plain, 2 * MIB, ACL_MEM_MALLOC_HUGE_FIRST));
    if (managed_advice(managed, plain) != 0 || managed_prefetches(managed, plain, stream) != 0 ||
        peer_mappings() != 0) {
        return 1;
    }
    CHECK(aclrtFree(plain));
    CHECK(aclrtFree(managed));
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

/* ---- shared buffers, reserved (chapter 20) ---------------------------------------------- */

static int shared_buffers(void)
{
    /* Reserved and not supported: NULL pointers are parameter errors, the rest 207000, and
     * nothing is written. */
    aclrtMbuf buf = NULL;
    aclrtMbuf fake = (aclrtMbuf)&buf;
    void *data = NULL;
    size_t size = 5;
    uint32_t num = 5;
    char user[96] = {0};
    EXPECT(aclrtAllocBuf(NULL, 64), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAllocBuf(&buf, 64), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(buf == NULL);
    EXPECT(aclrtFreeBuf(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtFreeBuf(fake), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetBufData(fake, NULL, &size), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufData(fake, &data, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufData(fake, &data, &size), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(data == NULL && size == 5);
    EXPECT(aclrtSetBufUserData(fake, NULL, 8, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetBufUserData(fake, user, 8, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetBufUserData(NULL, user, 8, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufUserData(fake, user, 8, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetBufDataLen(fake, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufDataLen(fake, &size), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(size == 5);
    EXPECT(aclrtSetBufDataLen(NULL, 4), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetBufDataLen(fake, 4), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtCopyBufRef(fake, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCopyBufRef(fake, &buf), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(buf == NULL);
    EXPECT(aclrtAppendBufChain(fake, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtAppendBufChain(fake, fake), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtGetBufFromChain(fake, 0, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufFromChain(fake, 0, &buf), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(buf == NULL);
    EXPECT(aclrtGetBufChainNum(NULL, &num), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetBufChainNum(fake, &num), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    HOLDS(num == 5);
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

/* ---- data buffers (chapter 25) ---------------------------------------------------------- */

static int data_buffers(void)
{
    char bytes[16];
    /* NULL data describes an empty buffer and needs size 0. */
    aclDataBuffer *empty = aclCreateDataBuffer(NULL, 0);
    HOLDS(empty != NULL);
    HOLDS(aclCreateDataBuffer(NULL, 8) == NULL);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    HOLDS(aclGetDataBufferAddr(empty) == NULL && aclGetDataBufferSizeV2(empty) == 0);
    aclDataBuffer *buffer = aclCreateDataBuffer(bytes, sizeof bytes);
    HOLDS(buffer != NULL);
    HOLDS(aclGetDataBufferAddr(buffer) == bytes);
    HOLDS(aclGetDataBufferSizeV2(buffer) == sizeof bytes);
    HOLDS(aclGetDataBufferSize(buffer) == sizeof bytes);
    /* An update replaces address and size; NULL data again needs size 0. */
    EXPECT(aclUpdateDataBuffer(buffer, bytes + 8, 8), ACL_SUCCESS);
    HOLDS(aclGetDataBufferAddr(buffer) == bytes + 8 && aclGetDataBufferSizeV2(buffer) == 8);
    EXPECT(aclUpdateDataBuffer(buffer, NULL, 8), ACL_ERROR_INVALID_PARAM);
    HOLDS(aclGetDataBufferAddr(buffer) == bytes + 8);
    EXPECT(aclUpdateDataBuffer(buffer, NULL, 0), ACL_SUCCESS);
    HOLDS(aclGetDataBufferAddr(buffer) == NULL && aclGetDataBufferSizeV2(buffer) == 0);
    EXPECT(aclUpdateDataBuffer(NULL, bytes, 1), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclDestroyDataBuffer(NULL), ACL_ERROR_INVALID_PARAM);
    HOLDS(aclGetDataBufferAddr(NULL) == NULL && aclGetDataBufferSizeV2(NULL) == 0);
    EXPECT(aclDestroyDataBuffer(buffer), ACL_SUCCESS);
    EXPECT(aclDestroyDataBuffer(empty), ACL_SUCCESS);
    /* The stream configuration handles of the same chapter are not an Atlas A2's. */
    HOLDS(aclrtCreateStreamConfigHandle() == NULL);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtDestroyStreamConfigHandle(NULL), ACL_ERROR_INVALID_PARAM);
    (void)aclGetRecentErrMsg();
    (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    return 0;
}

int main(void)
{
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, MIB, ACL_MEM_MALLOC_HUGE_FIRST));
    if (exception_callbacks(dev) != 0 || last_errors() != 0) {
        return 1;
    }
    CHECK(aclrtFree(dev));
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));
    if (memory_error_lists() != 0 || memory_errors() != 0 || shareable_handles_v2() != 0 || unified_addressing(stream) != 0 ||
        shared_buffers() != 0 || data_buffers() != 0) {
        return 1;
    }
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("documented edges");
    return 0;
}
