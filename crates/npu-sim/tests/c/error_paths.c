/* Documented error paths of the device, context, stream, event, notify, memory, execution
 * control and exception functions, as a CANN program sees them: each call returns the code
 * CANN's headers name for it, and a call that fails leaves its outputs as they were. Prints a
 * line for each mismatch, then how many paths were checked. */
#include <stdint.h>

#include "check.h"
#include "expect.h"

/* What a failed call must not overwrite. */
static int g_anchor;
#define SENTINEL ((void *)&g_anchor)

#define KEPT(condition) holds("output kept: " #condition, (condition))

static void no_callback(void *data) { (void)data; }

static void no_exception(aclrtExceptionInfo *info) { (void)info; }

/* Before any device is set: the calls that need a current context, and unknown devices. */
static void without_a_device(int32_t count) {
    int32_t device = -7;
    aclrtContext context = SENTINEL;
    aclrtStream stream = SENTINEL;
    aclrtEvent event = SENTINEL;
    void *memory = SENTINEL;
    size_t free_bytes = 7, total_bytes = 7;
    aclrtDeviceStatus status = ACL_RT_DEVICE_STATUS_ABNORMAL;
    int64_t value = -7;

    EXPECT(aclrtGetDevice(&device), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(device == -7);
    EXPECT(aclrtGetCurrentContext(&context), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(context == SENTINEL);
    EXPECT(aclrtCreateStream(&stream), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(stream == SENTINEL);
    EXPECT(aclrtCreateEvent(&event), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(event == SENTINEL);
    EXPECT(aclrtMalloc(&memory, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(memory == SENTINEL);
    EXPECT(aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total_bytes), ACL_ERROR_RT_CONTEXT_NULL);
    KEPT(free_bytes == 7 && total_bytes == 7);
    EXPECT(aclrtSynchronizeDevice(), ACL_ERROR_RT_CONTEXT_NULL);
    /* A registration's range is an argument, refused before the missing context. */
    EXPECT(aclrtHostRegisterV2(SENTINEL, (uint64_t)1 << 63, ACL_HOST_REG_MAPPED),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSetDevice(count), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtResetDevice(0), ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
    EXPECT(aclrtGetDeviceCount(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtQueryDeviceStatus(count, &status), ACL_ERROR_RT_INVALID_DEVICEID);
    KEPT(status == ACL_RT_DEVICE_STATUS_ABNORMAL);
    EXPECT(aclrtGetDeviceInfo((uint32_t)count, ACL_DEV_ATTR_AICORE_CORE_NUM, &value),
           ACL_ERROR_RT_INVALID_DEVICEID);
    KEPT(value == -7);
}

static int devices_and_contexts(int32_t count) {
    int32_t can = -7;
    aclrtContext context = SENTINEL, primary = NULL;
    int64_t value = -7;

    EXPECT(aclrtDeviceCanAccessPeer(&can, 0, 0), ACL_ERROR_INVALID_PARAM);
    KEPT(can == -7);
    EXPECT(aclrtDeviceEnablePeerAccess(0, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceDisablePeerAccess(0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDeviceDisablePeerAccess(count), ACL_ERROR_RT_INVALID_DEVICEID);
    EXPECT(aclrtSynchronizeDeviceWithTimeout(0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtCreateContext(NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCreateContext(&context, count), ACL_ERROR_RT_INVALID_DEVICEID);
    KEPT(context == SENTINEL);
    CHECK(aclrtGetCurrentContext(&primary));
    EXPECT(aclrtDestroyContext(primary), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT(aclrtCtxGetSysParamOpt(ACL_OPT_DETERMINISTIC, &value),
           ACL_ERROR_RT_SYSPARAMOPT_NOT_SET);
    KEPT(value == -7);
    return 0;
}

static int streams(void) {
    aclrtStream default_stream = NULL, stream = NULL, persistent = NULL;
    aclmdlRI instance = NULL;
    uint32_t priority = 99;

    EXPECT(aclrtCreateStreamWithConfig(NULL, 0, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtDestroyStream(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtCtxGetCurrentDefaultStream(&default_stream));
    EXPECT(aclrtDestroyStream(default_stream), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtDestroyStream(stream));
    EXPECT(aclrtStreamGetPriority(stream, &priority), ACL_ERROR_RT_INVALID_HANDLE);
    KEPT(priority == 99);
    EXPECT(aclrtSynchronizeStreamWithTimeout(NULL, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtStreamStop(NULL), ACL_ERROR_INVALID_PARAM);

    /* A stream bound to a model runtime instance is not one aclrtStreamStop or
     * aclrtStreamAbort takes; unbound, it is. Flag 0 is ACL_MODEL_STREAM_FLAG_HEAD. */
    CHECK(aclrtCreateStreamWithConfig(&persistent, 0, ACL_STREAM_PERSISTENT));
    CHECK(aclmdlRIBuildBegin(&instance, 0));
    CHECK(aclmdlRIBindStream(instance, persistent, 0));
    EXPECT(aclrtStreamStop(persistent), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtStreamAbort(persistent), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK(aclmdlRIBuildEnd(instance, NULL));
    CHECK(aclmdlRIUnbindStream(instance, persistent));
    EXPECT(aclrtStreamAbort(persistent), ACL_SUCCESS);
    CHECK(aclmdlRIDestroy(instance));
    CHECK(aclrtDestroyStream(persistent));
    return 0;
}

static int events_and_notifies(void) {
    aclrtEvent event = SENTINEL, ex = NULL;
    aclrtNotify notify = SENTINEL;
    aclrtEventWaitStatus wait_status = ACL_EVENT_WAIT_STATUS_RESERVED;
    aclrtEventRecordedStatus recorded = ACL_EVENT_RECORDED_STATUS_NOT_READY;

    EXPECT(aclrtCreateEventWithFlag(&event, 0), ACL_ERROR_RT_PARAM_INVALID);
    KEPT(event == SENTINEL);
    /* A NULL event is refused before the timeout is looked at. */
    EXPECT(aclrtSynchronizeEventWithTimeout(NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtStreamWaitEventWithTimeout(NULL, NULL, -1), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtCreateEvent(&event));
    EXPECT(aclrtSynchronizeEventWithTimeout(event, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtStreamWaitEventWithTimeout(NULL, event, -1), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtCreateEventExWithFlag(&ex, ACL_EVENT_SYNC));
    EXPECT(aclrtResetEvent(ex, NULL), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtQueryEventWaitStatus(ex, &wait_status), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    KEPT(wait_status == ACL_EVENT_WAIT_STATUS_RESERVED);
    /* Never recorded, an Ex event has no task to wait for. */
    CHECK(aclrtQueryEventStatus(ex, &recorded));
    holds("a never-recorded Ex event is complete",
          recorded == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    CHECK(aclrtDestroyEvent(ex));
    CHECK(aclrtDestroyEvent(event));
    EXPECT(aclrtCreateNotify(&notify, 2), ACL_ERROR_RT_PARAM_INVALID);
    KEPT(notify == SENTINEL);
    return 0;
}

static int memory(void) {
    void *out = SENTINEL, *dev = NULL, *host = NULL, *other_host = NULL;

    EXPECT(aclrtMalloc(&out, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    KEPT(out == SENTINEL);
    EXPECT(aclrtMallocHost(&out, 0), ACL_ERROR_INVALID_PARAM);
    KEPT(out == SENTINEL);
    EXPECT(aclrtFree(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMallocHost(&host, 64));
    CHECK(aclrtMallocHost(&other_host, 64));
    EXPECT(aclrtFreeHost(dev), ACL_ERROR_RT_MEMORY_FREE);
    EXPECT(aclrtMemcpy(dev, 4, host, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemcpyAsync(other_host, 64, host, 64, ACL_MEMCPY_HOST_TO_HOST, NULL),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpy2dAsync(dev, 64, host, 64, 64, 1, ACL_MEMCPY_HOST_TO_HOST, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemcpy2dAsync(dev, 64, host, 64, 64, 5242881, ACL_MEMCPY_HOST_TO_DEVICE, NULL),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMemset(dev, 8, 0, 16), ACL_ERROR_RT_PARAM_INVALID);
    /* A count of 0 is nothing to do only once the arguments before it have passed. */
    EXPECT(aclrtMemcpy(NULL, 0, host, 0, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemset(NULL, 0, 0, 0), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtMemcpy(dev, 0, host, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtFreeHost(other_host));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtFree(dev));
    return 0;
}

static void execution_and_exceptions(void) {
    EXPECT(aclrtProcessReport(0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtLaunchCallback(no_callback, NULL, ACL_CALLBACK_BLOCK, NULL),
           ACL_ERROR_RT_STREAM_NO_CB_REG);
    EXPECT(aclrtExceptionInfoCallbackRegister(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtExceptionInfoCallbackUnregister(no_exception), ACL_SUCCESS);
    holds("the task id of no exception info is 0xFFFFFFFF",
          aclrtGetTaskIdFromExceptionInfo(NULL) == 0xFFFFFFFFu);
    EXPECT(aclrtDeviceTaskAbort(0, 36u * 60u * 1000u + 1u), ACL_ERROR_INVALID_PARAM);
    /* The thread's last error is the failure's until aclrtGetLastError clears it. */
    EXPECT(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
}

/* The ACL layer's checks come first: NULL pointers (100000) before a handle is looked up or
 * a feature refused, and the parameters in order. */
static int checks_in_order(void) {
    aclrtDrvMemHandle physical = SENTINEL, freed = NULL;
    aclrtPhysicalMemProp prop = {0};
    aclrtNotify notify = NULL;
    aclrtNotify batch[2] = {NULL, NULL};
    char key[8] = {0};
    aclrtEvent event = NULL;
    aclrtStream stream = NULL, foreign = NULL;
    aclrtContext primary = NULL, other = NULL;
    aclrtMallocAttribute attribute = {0};
    aclrtMallocConfig cfg = {0};
    aclrtAllocatorDesc desc = NULL;
    aclrtLabel label = NULL;
    aclrtLabelList list = NULL;
    void *reserved = SENTINEL, *va = NULL;
    int32_t number = -7;
    aclrtHostMemMapCapability capability = (aclrtHostMemMapCapability)7;
    aclrtAtomicOperation operation = (aclrtAtomicOperation)99;
    uint32_t atomics = 7;

    EXPECT(aclrtReserveMemAddressNoUCMemory(NULL, (size_t)1 << 30, 0,
                                            (void *)((uintptr_t)48 << 40), 0),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtMemMapSelectedLink(NULL, (size_t)2 << 20, NULL, ACL_RT_MEM_LINK_IDX_1),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCmoAsyncWithBarrier(NULL, 64, ACL_RT_CMO_TYPE_INVALID, 1, NULL),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtCmoWaitBarrier(NULL, NULL, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtIpcMemImportPidInterServer("key", NULL, 2), ACL_ERROR_INVALID_PARAM);

    /* Host physical memory is refused (207000) before the later flags are looked at. */
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_HOST;
    prop.location.id = 0;
    EXPECT(aclrtMallocPhysical(&physical, (size_t)2 << 20, &prop, 1),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    KEPT(physical == SENTINEL);
    /* A non-zero offset or flags (107000) are refused before a freed handle is looked up. */
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    CHECK(aclrtMallocPhysical(&freed, (size_t)2 << 20, &prop, 0));
    CHECK(aclrtFreePhysical(freed));
    CHECK(aclrtReserveMemAddress(&va, (size_t)2 << 20, 0, NULL, 0));
    EXPECT(aclrtMapMem(va, (size_t)2 << 20, 4096, freed, 0), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMapMem(va, (size_t)2 << 20, 0, freed, 1), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtMapMem(va, (size_t)2 << 20, 0, freed, 0), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtReleaseMemAddress(va));
    EXPECT(aclrtReserveMemAddress(&reserved, 0, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
    KEPT(reserved == SENTINEL);
    /* A peer mapping's reserved flags, and an engine type outside aclrtHacType, are refused
     * before the unknown device is looked up. */
    EXPECT(aclrtMemP2PMap(SENTINEL, 64, 99, 1), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtHostMemMapCapabilities(99, (aclrtHacType)99, &capability),
           ACL_ERROR_RT_PARAM_INVALID);
    KEPT(capability == (aclrtHostMemMapCapability)7);
    /* So is an atomic operation outside aclrtAtomicOperation, for either device query. */
    EXPECT(aclrtDeviceGetHostAtomicCapabilities(&atomics, &operation, 1, 99),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtDeviceGetP2PAtomicCapabilities(&atomics, &operation, 1, 0, 99),
           ACL_ERROR_RT_PARAM_INVALID);
    KEPT(atomics == 7);

    /* A NULL output before a kind the descriptors do not support. */
    EXPECT(aclrtGetMemcpyDescSize(ACL_MEMCPY_HOST_TO_DEVICE, NULL), ACL_ERROR_INVALID_PARAM);

    /* NULL outputs of destroyed handles: the pointer is refused first. */
    CHECK(aclrtCreateNotify(&notify, 0));
    CHECK(aclrtDestroyNotify(notify));
    EXPECT(aclrtGetNotifyId(notify, NULL), ACL_ERROR_INVALID_PARAM);
    /* Every entry of a batch is checked for NULL before any is looked up, and an export's
     * length before its notify. */
    batch[0] = notify;
    EXPECT(aclrtNotifyBatchReset(batch, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtNotifyGetExportKey(notify, key, 8, 0), ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtCreateEvent(&event));
    CHECK(aclrtDestroyEvent(event));
    EXPECT(aclrtGetEventId(event, NULL), ACL_ERROR_INVALID_PARAM);
    /* Two handles are looked up in the order the parameters name them: a record's or reset's
     * destroyed event before another context's stream, a wait's stream before the event. */
    CHECK(aclrtGetCurrentContext(&primary));
    CHECK(aclrtCreateContext(&other, 0));
    CHECK(aclrtCreateStream(&foreign));
    CHECK(aclrtSetCurrentContext(primary));
    EXPECT(aclrtRecordEvent(event, foreign), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtResetEvent(event, foreign), ACL_ERROR_RT_INVALID_HANDLE);
    EXPECT(aclrtStreamWaitEvent(foreign, event), ACL_ERROR_RT_STREAM_CONTEXT);
    EXPECT(aclrtRecordNotify(notify, foreign), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtSetCurrentContext(other));
    CHECK(aclrtDestroyStream(foreign));
    CHECK(aclrtDestroyContext(other));
    CHECK(aclrtSetCurrentContext(primary));
    /* Arguments a lookup does not decide come before it: a switch value and a resource
     * limit before a destroyed stream, a resource type before an unknown device, an out
     * pointer before the malloc configuration after it. */
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtDestroyStream(stream));
    EXPECT(aclrtSetStreamOverflowSwitch(stream, 2), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSetStreamResLimit(stream, ACL_RT_DEV_RES_CUBE_CORE, 0),
           ACL_ERROR_RT_PARAM_INVALID);
    EXPECT(aclrtSetDeviceResLimit(99, (aclrtDevResLimitType)7, 1), ACL_ERROR_RT_PARAM_INVALID);
    cfg.attrs = &attribute;
    cfg.numAttrs = 1;
    attribute.attr = (aclrtMallocAttrType)99;
    EXPECT(aclrtMallocWithCfg(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST, &cfg), ACL_ERROR_INVALID_PARAM);
    desc = aclrtAllocatorCreateDesc();
    CHECK(aclrtAllocatorDestroyDesc(desc));
    EXPECT(aclrtAllocatorSetObjToDesc(desc, NULL), ACL_ERROR_INVALID_PARAM);
    /* The destroyed stream is looked up before the descriptor, whose missing callbacks can
     * only be seen once it is. */
    desc = aclrtAllocatorCreateDesc();
    EXPECT(aclrtAllocatorRegister(stream, desc), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtAllocatorDestroyDesc(desc));

    /* A label switch's maxValue 0 is refused before its destroyed list is looked up, and the
     * list before the (unbound) default stream. */
    CHECK(aclrtCreateLabel(&label));
    CHECK(aclrtCreateLabelList(&label, 1, &list));
    CHECK(aclrtDestroyLabelList(list));
    EXPECT(aclrtSwitchLabelByIndex(SENTINEL, 0, list, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtSwitchLabelByIndex(SENTINEL, 1, list, NULL), ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtDestroyLabel(label));

    /* A package name that is not UTF-8 names no package. */
    EXPECT(aclsysGetVersionNum((char *)"\xff", &number), ACL_ERROR_INVALID_PARAM);
    KEPT(number == -7);
    return 0;
}

int main(void) {
    uint32_t count = 0;
    CHECK(aclInit(NULL));
    CHECK(aclrtGetDeviceCount(&count));
    without_a_device((int32_t)count);
    CHECK(aclrtSetDevice(0));
    if (devices_and_contexts((int32_t)count) != 0 || streams() != 0 ||
        events_and_notifies() != 0 || memory() != 0 || checks_in_order() != 0) {
        return 1;
    }
    execution_and_exceptions();
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    checks_done("error paths");
    return 0;
}
