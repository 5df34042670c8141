/*
 * Runtime configuration as a CANN program uses it: module callbacks registered before aclInit,
 * the interface and package versions (the deprecated queries too), device ID mapping, the
 * primary context's state, device state callbacks and resource limits, runtime parameters,
 * overflow settings, a dump session, event IDs and the events left, an SDMA reduction, and the operator
 * timeouts with the default timeout step. Compiled against npu-sim's header and linked to its libascendcl.so by
 * tests/c_programs.rs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "acl/acl.h"
#include "check.h"

static aclError on_init(const char *configStr, size_t len, void *userData)
{
    printf("init callback of %s: %zu bytes of configuration%s\n", (const char *)userData, len,
           configStr[len] == '\0' ? "" : " (not terminated)");
    return ACL_SUCCESS;
}

static aclError on_finalize(void *userData)
{
    printf("finalize callback of %s\n", (const char *)userData);
    return ACL_SUCCESS;
}

static void on_device_state(int32_t deviceId, aclrtDeviceState state, void *args)
{
    static const char *const names[] = {"set pre", "set post", "reset pre", "reset post"};
    printf("%s: device %d %s\n", (const char *)args, deviceId, names[state]);
}

static int limits(void)
{
    size_t stack = 0, fifo = 0, simt = 0;
    CHECK(aclrtDeviceSetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, 40000));
    CHECK(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE, &stack));
    CHECK(aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE, &fifo));
    printf("simd stack %zu, printf fifo %zu, simt stack on an Atlas A2: %d\n", stack, fifo,
           aclrtDeviceGetLimit(ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE, &simt));
    return 0;
}

static int parameters(void)
{
    int64_t process = -1, context = -1;
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    uint32_t overflow = 2;
    CHECK(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1));
    CHECK(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, &process));
    CHECK(aclrtCtxSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 1));
    CHECK(aclrtCtxGetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, &context));
    CHECK(aclrtGetDeviceSatMode(&mode));
    CHECK(aclrtSetStreamOverflowSwitch(NULL, 1));
    CHECK(aclrtGetStreamOverflowSwitch(NULL, &overflow));
    printf("deterministic %" PRId64 ", context debug kernel %" PRId64 ", inf/nan mode %d, overflow switch %u\n",
           process, context, mode == ACL_RT_OVERFLOW_MODE_INFNAN, overflow);
    return 0;
}

static int reduction(void)
{
    float a[2] = {1.5f, -2.0f}, b[2] = {2.0f, 0.5f}, out[2] = {0.0f, 0.0f};
    void *dst = NULL, *src = NULL;
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMalloc(&dst, sizeof(a), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&src, sizeof(b), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(dst, sizeof(a), a, sizeof(a), ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpy(src, sizeof(b), b, sizeof(b), ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtReduceAsync(dst, src, sizeof(a), ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, stream, NULL));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(out, sizeof(out), dst, sizeof(out), ACL_MEMCPY_DEVICE_TO_HOST));
    printf("reduced sum %.2f %.2f\n", out[0], out[1]);
    CHECK(aclrtFree(dst));
    CHECK(aclrtFree(src));
    CHECK(aclrtDestroyStream(stream));
    return 0;
}

static int versions(void)
{
    int32_t major = -1, minor = -1, patch = -1;
    aclCANNPackageVersion cann;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(aclrtGetVersion(&major, &minor, &patch));
    CHECK(aclsysGetCANNVersion(ACL_PKG_NAME_CANN, &cann));
#pragma GCC diagnostic pop
    printf("acl %d.%d.%d (header %d.%d.%d), cann %s = %s.%s.%s patch %s\n", major, minor, patch,
           ACL_MAJOR_VERSION, ACL_MINOR_VERSION, ACL_PATCH_VERSION, cann.version,
           cann.majorVersion, cann.minorVersion, cann.releaseVersion, cann.patchVersion);
    return 0;
}

static int device_ids(void)
{
    uint32_t count = 0;
    CHECK(aclrtGetDeviceCount(&count));
    for (int32_t user = 0; user < (int32_t)count; ++user) {
        int32_t logic = -1, phy = -1, back = -1;
        CHECK(aclrtGetLogicDevIdByUserDevId(user, &logic));
        CHECK(aclrtGetPhyDevIdByUserDevId(user, &phy));
        CHECK(aclrtGetUserDevIdByPhyDevId(phy, &back));
        printf("user device %d: logical %d, physical %d, back %d\n", user, logic, phy, back);
    }
    return 0;
}

static int events(void)
{
    aclrtEvent first = NULL, second = NULL;
    uint32_t firstId = 0, secondId = 0, left = 0;
    CHECK(aclrtCreateEvent(&first));
    CHECK(aclrtCreateEventWithFlag(&second, ACL_EVENT_SYNC));
    CHECK(aclrtGetEventId(first, &firstId));
    CHECK(aclrtGetEventId(second, &secondId));
    CHECK(aclrtGetEventAvailNum(&left));
    printf("event ids differ %d, events left %u\n", firstId != secondId, left);
    CHECK(aclrtDestroyEvent(first));
    CHECK(aclrtDestroyEvent(second));
    return 0;
}

static int timeouts(void)
{
    uint64_t interval = 0, actual = 0;
    uint32_t ms = 0;
    CHECK(aclrtGetOpTimeOutInterval(&interval));
    CHECK(aclrtGetOpExecuteTimeout(&ms));
    printf("timeout step %" PRIu64 " us, default execute timeout %u ms\n", interval, ms);
    CHECK(aclrtSetOpExecuteTimeOut(60));
    CHECK(aclrtGetOpExecuteTimeout(&ms));
    printf("60 s takes effect as %u ms\n", ms);
    CHECK(aclrtSetOpExecuteTimeOutV2(0, &actual));
    printf("0 takes effect as %" PRIu64 " us\n", actual);
    printf("ms form on an Atlas A2: %d\n", aclrtSetOpExecuteTimeOutWithMs(100));
    CHECK(aclrtSetOpWaitTimeout(30));
    return 0;
}

/* A dump session with a configuration file (an overflow dump), the way CANN's samples open
 * one between aclInit and aclFinalize; a second session opened meanwhile, or a configuration
 * set after the session, is refused. */
static int dumps(void)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/npusim-dump-%d.json", (int)getpid());
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        printf("cannot write %s\n", path);
        return 1;
    }
    fputs("{\"dump\": {\"dump_path\": \"output\", \"dump_debug\": \"on\"}}\n", file);
    fclose(file);
    CHECK(aclmdlInitDump());
    CHECK(aclmdlSetDump(path));
    aclError again = aclmdlInitDump();
    CHECK(aclmdlFinalizeDump());
    aclError late = aclmdlSetDump(path);
    remove(path);
    printf("dump session: opened twice %d, configured after it ended %d\n", again, late);
    return 0;
}

int main(void)
{
    int32_t active = -1;
    CHECK(aclInitCallbackRegister(ACL_REG_TYPE_OTHER, on_init, (void *)"app"));
    CHECK(aclFinalizeCallbackRegister(ACL_REG_TYPE_OTHER, on_finalize, (void *)"app"));
    CHECK(aclInit(NULL));
    if (versions() != 0 || device_ids() != 0 || limits() != 0 || dumps() != 0) {
        return 1;
    }
    CHECK(aclrtRegDeviceStateCallback("app", on_device_state, (void *)"state"));
    CHECK(aclrtGetPrimaryCtxState(0, NULL, &active));
    printf("primary context of device 0 before aclrtSetDevice: %d\n", active);
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetPrimaryCtxState(0, NULL, &active));
    printf("after: %d\n", active);
    if (events() != 0 || timeouts() != 0 || parameters() != 0 || reduction() != 0) {
        return 1;
    }
    CHECK(aclrtResetDevice(0));
    CHECK(aclrtRegDeviceStateCallback("app", NULL, NULL));
    CHECK(aclrtGetPrimaryCtxState(0, NULL, &active));
    printf("after aclrtResetDevice: %d\n", active);
    CHECK(aclFinalize());
    printf("runtime config ok\n");
    return 0;
}
