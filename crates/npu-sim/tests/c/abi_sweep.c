/* A sweep of every function the runtime headers declare, for robustness against misuse: each
 * runs in a child process of its own (a crash or hang of one hides none of the others) and is
 * called, in this order:
 *   zero-before-init      every pointer NULL, every integer 0, before aclInit;
 *   no-context-ones       after aclInit, no device set: pointers at zeroed scratch memory,
 *                         integers 1;
 *   zero, null-max, null-min  NULL and 0 after aclrtSetDevice(0), then with every
 *                         bit of every integer set (-1, SIZE_MAX), then the top bit alone;
 *   valid-ones, valid-max pointers at zeroed scratch memory, integers 1, then all bits set;
 *   misaligned-ones       pointers one byte into the scratch memory, integers 1;
 *   stale, garbage, zeroed (each with -ones, -max and -min)  for each handle argument: a
 *                         handle created and destroyed (a binary's functions, arguments and
 *                         parameters by its unload, an instance's tasks and task groups by its
 *                         destruction), a value never issued (0x1234), a pointer to zeroed
 *                         memory; the other pointers at scratch memory;
 *   garbage-among-live    0x1234 with the function's other handles live (integers 1);
 *   other-kind            a live handle of another kind (an event; a stream for an event);
 *   reset, finalized      handles made before aclrtResetDeviceForce(0), then before aclFinalize;
 *   zero-after-finalize   NULL and 0 after aclFinalize;
 *   device-ones, -max, -min  after a second aclInit, pointers at zeroed device memory;
 *   live (-ones, -max)    live handles of the right kinds, pointers at scratch memory (not
 *                         -min: 2^63 bytes of pageable memory are the caller's word, which a
 *                         memset on a live stream would take);
 *   live-misaligned-ones, live-device-misaligned-ones  live handles, integers 1, pointers one
 *                         byte into the scratch memory, then into the device memory.
 *
 * The calls come from abi_sweep_calls.h, which tests/c_programs.rs generates from the headers
 * at test time (so a function added to a header is swept without a change here): one thunk per
 * function that fills each argument with sweep_fill and returns what the function returned (a
 * pointer as whether it is non-NULL).
 *
 * Output: one line "<function> <mode>[@<argument>] <value>" per call ("<function> panic ..."
 * after one the library turned from a panic into 507000), then "<function> done" when its child
 * exited 0, or "<function> signal <n>" / "<function> exit <n>" when it did not; SIGALRM (14)
 * means the child hung for 20 s. With an argument, only the function of that name is swept. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acl/acl.h"
#include "acl/acl_platform.h"
#include "acl/acl_rt_allocator.h"
#include "acl/acl_rt_memory_soma.h"
#include "memory_helpers.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

/* How a thunk fills an argument. */
enum sweep_kind {
    SWEEP_VALUE,    /* an integer, enum, float or struct: zero, or 1 when the call asks for ones */
    SWEEP_CALLBACK, /* a function pointer: NULL (anything else would be called) */
    SWEEP_POINTER,  /* NULL, or the zeroed memory the call names */
    SWEEP_HANDLE,   /* NULL, or the call's bad value when it is the argument under attack */
};

/* The handle types a function can take (named after the type, so the generator can name them). */
enum sweep_handle {
    HANDLE_aclrtStream,
    HANDLE_aclrtEvent,
    HANDLE_aclrtContext,
    HANDLE_aclrtNotify,
    HANDLE_aclrtCntNotify,
    HANDLE_aclrtLabel,
    HANDLE_aclrtLabelList,
    HANDLE_aclrtMemPool,
    HANDLE_aclDataBuffer,
    HANDLE_aclrtDrvMemHandle,
    HANDLE_aclrtGroupInfo,
    HANDLE_aclrtAllocatorDesc,
    HANDLE_aclrtMbuf,
    HANDLE_aclmdlRI,
    HANDLE_aclrtBinary,
    HANDLE_aclrtBinHandle,
    HANDLE_aclrtFuncHandle,
    HANDLE_aclrtArgsHandle,
    HANDLE_aclrtParamHandle,
    HANDLE_aclmdlRITask,
    HANDLE_aclrtTaskGrp,
};

/* What integers, enums and floats (their bits) hold. */
enum sweep_values {
    SWEEP_ZEROS,
    SWEEP_ONES, /* so that a size or count check does not answer before a handle is looked up */
    SWEEP_MAX,  /* every bit set: -1, SIZE_MAX, UINT32_MAX */
    SWEEP_MIN,  /* the top bit alone: INT32_MIN, 2^63 */
};
static const char *const value_names[] = {"", "-ones", "-max", "-min"};

struct sweep_call {
    int target;         /* the argument given `bad`, or -1 */
    void *bad;          /* the bad handle value */
    void *pointers;     /* where non-handle pointers point (zeroed memory), or NULL */
    enum sweep_values values;
    void *live[16]; /* by argument: a live handle for a handle argument (NULL: none) */
};

struct sweep_entry {
    const char *name;
    long long (*call)(const struct sweep_call *call);
    int handles;
    struct {
        int index;
        enum sweep_handle type;
    } handle[8];
};

/* Large enough for every structure and string a function writes through a pointer argument. */
static _Alignas(64) unsigned char scratch[1 << 16];
/* What a "pointer to zeroed memory" handle points at. */
static _Alignas(64) unsigned char zeroed_handle[4096];

static void sweep_fill(void *arg, size_t size, enum sweep_kind kind, int index,
                       const struct sweep_call *call)
{
    if (index == call->target && size == sizeof call->bad) {
        memcpy(arg, &call->bad, sizeof call->bad);
    } else if (kind == SWEEP_HANDLE && call->live[index] != NULL) {
        memcpy(arg, &call->live[index], sizeof call->live[index]);
    } else if (kind == SWEEP_POINTER) {
        memcpy(arg, &call->pointers, sizeof call->pointers);
    } else if (kind == SWEEP_VALUE && call->values != SWEEP_ZEROS && size <= sizeof(uint64_t)) {
        /* Little-endian: the low bytes of a 64-bit 1 are a 1 of any narrower integer. */
        uint64_t value = call->values == SWEEP_ONES ? 1 : UINT64_MAX;
        if (call->values == SWEEP_MIN) {
            value = (uint64_t)1 << (size * 8 - 1);
        }
        memcpy(arg, &value, size);
    } else {
        memset(arg, 0, size);
    }
}

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "abi_sweep_calls.h"

/* A live handle of `type` (on device 0, in the current context), or NULL where the sweep makes
 * none: kernel, argument, task and task group handles need a loaded kernel or a capture to
 * exist at all, and are swept stale (stale()) and never issued, not live (a live function
 * would run the swept arguments as a kernel's). */
static void *create(enum sweep_handle type)
{
    void *handle = NULL;
    aclrtStream stream = NULL;
    aclrtContext current = NULL;
    aclrtLabel label = NULL;
    aclError err = ACL_ERROR_FEATURE_UNSUPPORTED;
    switch (type) {
    case HANDLE_aclrtStream:
        err = aclrtCreateStream(&handle);
        break;
    case HANDLE_aclrtEvent:
        err = aclrtCreateEvent(&handle);
        break;
    case HANDLE_aclrtContext:
        /* Creating a context makes it current: the previous one is current again afterwards. */
        err = aclrtGetCurrentContext(&current);
        if (err == ACL_SUCCESS && (err = aclrtCreateContext(&handle, 0)) == ACL_SUCCESS) {
            err = aclrtSetCurrentContext(current);
        }
        break;
    case HANDLE_aclrtNotify:
        err = aclrtCreateNotify(&handle, 0);
        break;
    case HANDLE_aclrtCntNotify:
        err = aclrtCntNotifyCreate(&handle, 0);
        break;
    case HANDLE_aclrtLabel:
        err = aclrtCreateLabel(&handle);
        break;
    case HANDLE_aclrtLabelList:
        if ((err = aclrtCreateLabel(&label)) == ACL_SUCCESS) {
            err = aclrtCreateLabelList(&label, 1, &handle);
        }
        break;
    case HANDLE_aclrtMemPool: {
        aclrtMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED;
        props.handleType = ACL_MEM_HANDLE_TYPE_NONE;
        props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        err = aclrtMemPoolCreate(&handle, &props);
        break;
    }
    case HANDLE_aclDataBuffer:
        handle = aclCreateDataBuffer(NULL, 0);
        break;
    case HANDLE_aclrtDrvMemHandle: {
        aclrtPhysicalMemProp prop = physical_prop(ACL_HBM_MEM_HUGE, ACL_MEM_LOCATION_TYPE_DEVICE, 0);
        err = aclrtMallocPhysical(&handle, 2 << 20, &prop, 0);
        break;
    }
    case HANDLE_aclrtGroupInfo:
        handle = aclrtCreateGroupInfo();
        break;
    case HANDLE_aclrtAllocatorDesc:
        handle = aclrtAllocatorCreateDesc();
        break;
    case HANDLE_aclrtMbuf:
        err = aclrtAllocBuf(&handle, 64);
        break;
    case HANDLE_aclmdlRI:
        if ((err = aclrtCreateStream(&stream)) == ACL_SUCCESS &&
            (err = aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)) == ACL_SUCCESS) {
            err = aclmdlRICaptureEnd(stream, &handle);
        }
        break;
    case HANDLE_aclrtBinary:
        handle = aclrtCreateBinary(scratch, 64);
        break;
    default:
        break;
    }
    /* The functions returning a handle say nothing but NULL when they fail. */
    return err == ACL_SUCCESS || handle != NULL ? handle : NULL;
}

/* Destroys a handle create() made; 0 on success. */
static aclError destroy(enum sweep_handle type, void *handle)
{
    switch (type) {
    case HANDLE_aclrtStream:
        return aclrtDestroyStream(handle);
    case HANDLE_aclrtEvent:
        return aclrtDestroyEvent(handle);
    case HANDLE_aclrtContext:
        return aclrtDestroyContext(handle);
    case HANDLE_aclrtNotify:
        return aclrtDestroyNotify(handle);
    case HANDLE_aclrtCntNotify:
        return aclrtCntNotifyDestroy(handle);
    case HANDLE_aclrtLabel:
        return aclrtDestroyLabel(handle);
    case HANDLE_aclrtLabelList:
        return aclrtDestroyLabelList(handle);
    case HANDLE_aclrtMemPool:
        return aclrtMemPoolDestroy(handle);
    case HANDLE_aclDataBuffer:
        return aclDestroyDataBuffer(handle);
    case HANDLE_aclrtDrvMemHandle:
        return aclrtFreePhysical(handle);
    case HANDLE_aclrtGroupInfo:
        return aclrtDestroyGroupInfo(handle);
    case HANDLE_aclrtAllocatorDesc:
        return aclrtAllocatorDestroyDesc(handle);
    case HANDLE_aclrtMbuf:
        return aclrtFreeBuf(handle);
    case HANDLE_aclmdlRI:
        return aclmdlRIDestroy(handle);
    case HANDLE_aclrtBinary:
        return aclrtDestroyBinary(handle);
    default:
        return ACL_ERROR_FEATURE_UNSUPPORTED;
    }
}

/* A handle that lives only through a binary of the shipped kernel library (the binary, one
 * of its functions, arguments initialised for it, a parameter appended to them), made stale by
 * unloading the binary, which takes them along; NULL if a step failed. */
static void *stale_of_binary(enum sweep_handle type)
{
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle func = NULL;
    aclrtArgsHandle args = NULL;
    aclrtParamHandle param = NULL;
    npusimVectorAddArgs values;
    memset(&values, 0, sizeof values);
    void *handle = NULL;
    if (aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin) != ACL_SUCCESS) {
        return NULL;
    }
    if (aclrtBinaryGetFunction(bin, "vector_add_f32", &func) == ACL_SUCCESS &&
        aclrtKernelArgsInit(func, &args) == ACL_SUCCESS &&
        aclrtKernelArgsAppend(args, &values, sizeof values, &param) == ACL_SUCCESS) {
        handle = type == HANDLE_aclrtBinHandle    ? (void *)bin
                 : type == HANDLE_aclrtFuncHandle ? (void *)func
                 : type == HANDLE_aclrtArgsHandle ? (void *)args
                                                  : (void *)param;
    }
    return aclrtBinaryUnLoad(bin) == ACL_SUCCESS ? handle : NULL;
}

/* A task or task group of a captured instance (a kernel launch in a task group), made stale by
 * destroying the instance; NULL if a step failed. */
static void *stale_of_instance(enum sweep_handle type)
{
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle func = NULL;
    aclrtStream stream = NULL;
    aclrtTaskGrp group = NULL;
    aclmdlRI model = NULL;
    aclrtStream model_stream = NULL;
    aclmdlRITask task = NULL;
    uint32_t count = 1;
    npusimVectorAddArgs values;
    memset(&values, 0, sizeof values);
    void *handle = NULL;
    if (aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin) != ACL_SUCCESS) {
        return NULL;
    }
    if (aclrtBinaryGetFunction(bin, "vector_add_f32", &func) == ACL_SUCCESS &&
        aclrtCreateStream(&stream) == ACL_SUCCESS &&
        aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == ACL_SUCCESS) {
        aclError err = aclmdlRICaptureTaskGrpBegin(stream);
        if (err == ACL_SUCCESS) {
            err = aclrtLaunchKernelWithHostArgs(func, 1, stream, NULL, &values, sizeof values, NULL, 0);
        }
        if (err == ACL_SUCCESS) {
            err = aclmdlRICaptureTaskGrpEnd(stream, &group);
        }
        if (aclmdlRICaptureEnd(stream, &model) == ACL_SUCCESS && err == ACL_SUCCESS &&
            aclmdlRIGetStreams(model, &model_stream, &count) == ACL_SUCCESS && count == 1 &&
            aclmdlRIGetTasksByStream(model_stream, &task, &count) == ACL_SUCCESS && count == 1) {
            handle = type == HANDLE_aclmdlRITask ? (void *)task : (void *)group;
        }
        if (model == NULL || aclmdlRIDestroy(model) != ACL_SUCCESS) {
            handle = NULL;
        }
    }
    if (stream != NULL) {
        (void)aclrtDestroyStream(stream);
    }
    (void)aclrtBinaryUnLoad(bin);
    return handle;
}

/* A handle of `type` created and destroyed again, or NULL where the sweep makes none. */
static void *stale(enum sweep_handle type)
{
    switch (type) {
    case HANDLE_aclrtBinHandle:
    case HANDLE_aclrtFuncHandle:
    case HANDLE_aclrtArgsHandle:
    case HANDLE_aclrtParamHandle:
        return stale_of_binary(type);
    case HANDLE_aclmdlRITask:
    case HANDLE_aclrtTaskGrp:
        return stale_of_instance(type);
    default: {
        void *handle = create(type);
        return handle != NULL && destroy(type, handle) == ACL_SUCCESS ? handle : NULL;
    }
    }
}

static void report(const struct sweep_entry *entry, const char *mode, int arg, long long value)
{
    printf("%s %s", entry->name, mode);
    if (arg >= 0) {
        printf("@%d", arg);
    }
    printf(" %lld\n", value);
    /* The library turns a panic into 507000 with this message: a check it missed. */
    const char *message = aclGetRecentErrMsg();
    if (message != NULL && strstr(message, "): internal error: ") != NULL) {
        printf("%s panic %s: %s\n", entry->name, mode, message);
    }
    fflush(stdout);
}

static long long call(const struct sweep_entry *entry, const struct sweep_call *how)
{
    memset(scratch, 0, sizeof scratch);
    memset(zeroed_handle, 0, sizeof zeroed_handle);
    return entry->call(how);
}

/* aclInit and device 0 set; the call swept before may have been aclInit itself. */
static int set_up(void)
{
    aclError init = aclInit(NULL);
    return (init == ACL_SUCCESS || init == ACL_ERROR_REPEAT_INITIALIZE) && aclrtSetDevice(0) == ACL_SUCCESS;
}

static void sweep_one(const struct sweep_entry *entry)
{
    alarm(20);
    struct sweep_call how = {-1, NULL, NULL, SWEEP_ZEROS, {NULL}};
    report(entry, "zero-before-init", -1, call(entry, &how));
    /* Initialised, with no device set: no current context (set_up's aclInit then answers
     * 100002, which it accepts). */
    (void)aclInit(NULL);
    how.pointers = scratch;
    how.values = SWEEP_ONES;
    report(entry, "no-context-ones", -1, call(entry, &how));
    how.pointers = NULL;
    how.values = SWEEP_ZEROS;
    if (!set_up()) {
        printf("%s setup failed\n", entry->name);
        exit(3);
    }
    report(entry, "zero", -1, call(entry, &how));
    how.values = SWEEP_MAX;
    report(entry, "null-max", -1, call(entry, &how));
    how.values = SWEEP_MIN;
    report(entry, "null-min", -1, call(entry, &how));
    how.pointers = scratch;
    how.values = SWEEP_ONES;
    report(entry, "valid-ones", -1, call(entry, &how));
    how.values = SWEEP_MAX;
    report(entry, "valid-max", -1, call(entry, &how));
    how.pointers = scratch + 1;
    how.values = SWEEP_ONES;
    report(entry, "misaligned-ones", -1, call(entry, &how));
    for (int h = 0; h < entry->handles; h++) {
        how.target = entry->handle[h].index;
        how.pointers = scratch;
        for (how.values = SWEEP_ZEROS; how.values <= SWEEP_MIN; how.values++) {
            /* An earlier call may have reset the device (aclrtResetDevice): set it again. */
            (void)aclrtSetDevice(0);
            char mode[32];
            void *old = stale(entry->handle[h].type);
            if (old != NULL) {
                how.bad = old;
                snprintf(mode, sizeof mode, "stale%s", value_names[how.values]);
                report(entry, mode, how.target, call(entry, &how));
            }
            how.bad = (void *)(uintptr_t)0x1234;
            snprintf(mode, sizeof mode, "garbage%s", value_names[how.values]);
            report(entry, mode, how.target, call(entry, &how));
            how.bad = zeroed_handle;
            snprintf(mode, sizeof mode, "zeroed%s", value_names[how.values]);
            report(entry, mode, how.target, call(entry, &how));
        }
        /* The never-issued value with the function's other handles live, so that a check of
         * this one is not hidden behind a refusal of a NULL other. */
        (void)aclrtSetDevice(0);
        how.values = SWEEP_ONES;
        for (int k = 0; k < entry->handles; k++) {
            how.live[entry->handle[k].index] = k == h ? NULL : create(entry->handle[k].type);
        }
        how.bad = (void *)(uintptr_t)0x1234;
        report(entry, "garbage-among-live", how.target, call(entry, &how));
        memset(how.live, 0, sizeof how.live);
        /* A live handle of another kind: an event, or a stream where an event belongs. */
        (void)aclrtSetDevice(0);
        how.bad = NULL;
        if (entry->handle[h].type == HANDLE_aclrtEvent ? aclrtCreateStream(&how.bad) : aclrtCreateEvent(&how.bad)) {
            printf("%s other-kind setup failed\n", entry->name);
            exit(3);
        }
        report(entry, "other-kind", how.target, call(entry, &how));
    }
    /* Handles made before a forced reset of their device, then before aclFinalize: every one
     * of them went with the device (or the runtime). */
    void *before_reset[8] = {NULL};
    for (int h = 0; h < entry->handles; h++) {
        before_reset[h] = create(entry->handle[h].type);
    }
    (void)aclrtResetDeviceForce(0);
    how.values = SWEEP_ONES;
    for (int h = 0; h < entry->handles; h++) {
        if (before_reset[h] != NULL) {
            how.target = entry->handle[h].index;
            how.bad = before_reset[h];
            report(entry, "reset", how.target, call(entry, &how));
        }
    }
    void *before_finalize[8] = {NULL};
    (void)aclrtSetDevice(0);
    for (int h = 0; h < entry->handles; h++) {
        before_finalize[h] = create(entry->handle[h].type);
    }
    (void)aclFinalize();
    for (int h = 0; h < entry->handles; h++) {
        if (before_finalize[h] != NULL) {
            how.target = entry->handle[h].index;
            how.bad = before_finalize[h];
            report(entry, "finalized", how.target, call(entry, &how));
        }
    }
    how.target = -1;
    how.pointers = NULL;
    how.values = SWEEP_ZEROS;
    report(entry, "zero-after-finalize", -1, call(entry, &how));
    /* Last, as a second initialisation: pointers at device memory, then live handles of the
     * right kinds, so that the other arguments' checks past the lookups run (one call may
     * destroy a handle the next gets: a stale one, as it should be). A call may leave a stream
     * waiting for ever (on an event or notify never recorded, or device memory never holding
     * the value waited for), which a device reset would wait for: the process exits instead. */
    if (!set_up()) {
        printf("%s second setup failed\n", entry->name);
        exit(3);
    }
    /* Device memory as large as the scratch memory. An earlier call may have left the default
     * stream capturing (aclmdlRICaptureBegin), which refuses the synchronous memset. */
    void *device = NULL;
    if (aclrtMalloc(&device, sizeof scratch, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS &&
        aclrtMemset(device, sizeof scratch, 0, sizeof scratch) == ACL_SUCCESS) {
        how.pointers = device;
        how.values = SWEEP_ONES;
        report(entry, "device-ones", -1, call(entry, &how));
        how.values = SWEEP_MAX;
        report(entry, "device-max", -1, call(entry, &how));
        how.values = SWEEP_MIN;
        report(entry, "device-min", -1, call(entry, &how));
    }
    how.pointers = scratch;
    for (int h = 0; h < entry->handles; h++) {
        how.live[entry->handle[h].index] = create(entry->handle[h].type);
    }
    for (how.values = SWEEP_ZEROS; how.values <= SWEEP_MAX; how.values++) {
        char mode[32];
        snprintf(mode, sizeof mode, "live%s", value_names[how.values]);
        report(entry, mode, -1, call(entry, &how));
    }
    how.pointers = scratch + 1;
    how.values = SWEEP_ONES;
    report(entry, "live-misaligned-ones", -1, call(entry, &how));
    if (device != NULL) {
        how.pointers = (unsigned char *)device + 1;
        report(entry, "live-device-misaligned-ones", -1, call(entry, &how));
    }
    exit(0);
}

int main(int argc, char **argv)
{
    size_t count = sizeof sweep_entries / sizeof sweep_entries[0];
    size_t swept = 0;
    for (size_t i = 0; i < count; i++) {
        const struct sweep_entry *entry = &sweep_entries[i];
        if (argc > 1 && strcmp(argv[1], entry->name) != 0) {
            continue;
        }
        swept++;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            sweep_one(entry);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid) {
            printf("%s fork failed\n", entry->name);
        } else if (WIFSIGNALED(status)) {
            printf("%s signal %d\n", entry->name, WTERMSIG(status));
        } else if (WEXITSTATUS(status) != 0) {
            printf("%s exit %d\n", entry->name, WEXITSTATUS(status));
        } else {
            printf("%s done\n", entry->name);
        }
    }
    printf("swept %zu functions\n", swept);
    return 0;
}
