/*
 * npusim/control.h: controls of npu-sim, the software Ascend device of npu-rs, for tests and
 * tools written in C (or loading libascendcl.so with dlopen). Every function returns an ACL
 * error code and, on failure, sets the thread's last error and aclGetRecentErrMsg like the ACL
 * functions do. The Rust forms live in npu_sim::control, npu_sim::trace and npu_sim::kernel.
 */
#ifndef NPUSIM_CONTROL_H
#define NPUSIM_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "npusim/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A timing model: bandwidths in bytes per second (0 = instantaneous), times in ns. */
typedef struct npusimTimingModel {
    uint64_t h2dBytesPerSec;
    uint64_t d2hBytesPerSec;
    uint64_t d2dBytesPerSec;
    uint64_t launchLatencyNs;
    uint64_t minTaskNs;
} npusimTimingModel;

typedef struct npusimDeviceStats {
    uint64_t bytesAllocated;  /* device memory accounted to live allocations */
    uint64_t liveAllocations;
    uint64_t liveStreams;     /* default streams included */
    uint64_t liveEvents;
    uint64_t capacity;
    int32_t lost;             /* 1 once the device was lost */
    int32_t reserved;
    uint64_t liveContexts;    /* the primary context (while set) and each explicit one */
} npusimDeviceStats;

typedef struct npusimHostStats {
    uint64_t pinnedBytes;
    uint64_t pinnedAllocations;
    uint64_t registrations;
} npusimHostStats;

/* Installs a JSON configuration ({"devices":2,"memory_per_device":...,"soc_name":"...",
 * "timing":{...}}) before the simulator starts; fails if it already runs with another one. */
aclError npusimConfigure(const char *json);
/* Sets a device's timing model; NULL clears it. Per-kernel durations are kept. */
aclError npusimSetTiming(int32_t deviceId, const npusimTimingModel *model);
/* Sets how long the kernel kernelName takes on a device, in ns. A NULL, empty or non-UTF-8
 * name: 100000 (as npusimFailKernel). */
aclError npusimSetKernelDuration(int32_t deviceId, const char *kernelName, uint64_t ns);
/* The nth device task (copy, memset, kernel, reduction, random numbers, task update; not
 * events, notifies, value operations, callbacks or host functions, nor the tasks a
 * PERSISTENT stream keeps, which never run) submitted to stream from now on (1 = the next; NULL = current default stream) fails with code when it runs. The
 * codes a synchronisation returns when its wait runs out (507046, 507047) are no task's:
 * refused with 100000, as is an nth past the last task number the stream can count to. */
aclError npusimFailTask(aclrtStream stream, uint64_t nth, aclError code);
/* The nth launch of the kernel kernelName queued on any stream of the device from now on
 * (1 = the next; every launch function counts, and each kernel of a model runtime instance
 * each time an execution queues it, under its captured name; not a capture, a PERSISTENT
 * stream's kept launch, a launch on a stream bound to an instance being built or staged by a
 * task group's update, nor a kernel of an instance with branches) fails with code when it
 * runs, as npusimFailTask's task does. The fault is used up when the launch is queued. The
 * name is matched at launch, so an unknown one is armed anyway. An empty or non-UTF-8 name,
 * nth 0 or a code npusimFailTask refuses: 100000. */
aclError npusimFailKernel(int32_t deviceId, const char *kernelName, uint64_t nth, aclError code);
/* Disarms the device's npusimFailTask (any live stream of it), npusimFailKernel and
 * npusimFailNextAlloc faults that have not fired; *cleared (unless NULL) receives how many.
 * A device's faults outlive aclrtResetDevice and aclFinalize: they last until they fire or
 * are cleared. */
aclError npusimClearFaults(int32_t deviceId, uint64_t *cleared);
/* Loses a device: queued work is abandoned; later calls on it fail with 507010. */
aclError npusimLoseDevice(int32_t deviceId);
/* The next device allocation on the device fails with 207001. */
aclError npusimFailNextAlloc(int32_t deviceId);
/* Gives [devPtr, devPtr+size), inside one device allocation, an uncorrectable memory error
 * (UCE): tasks touching it fail with 507053 ACL_ERROR_RT_DEVICE_MEM_ERROR, aclrtGetMemUceInfo
 * lists it, until aclrtMemUceRepair / aclrtRepairError repairs it (zeroed) or it is freed. */
aclError npusimInjectMemUce(void *devPtr, size_t size);
/* The next host allocation of the process (aclrtMallocHost / aclrtMallocHostWithCfg) fails with
 * code (not 0). */
aclError npusimFailNextHostAlloc(aclError code);
/* Hold gate: tasks not started wait until npusimRelease, then start at one simulated instant. */
aclError npusimHold(int32_t deviceId);
aclError npusimRelease(int32_t deviceId);
aclError npusimGetDeviceStats(int32_t deviceId, npusimDeviceStats *stats);
aclError npusimGetHostStats(npusimHostStats *stats);
/* The device's simulated clock now, in ns. */
aclError npusimGetTimeNs(int32_t deviceId, uint64_t *ns);
/* Timeline (Chrome/Perfetto trace JSON): start recording into path; write what was recorded. */
aclError npusimTraceEnable(const char *path);
aclError npusimTraceFlush(void);
/* Registers a C function as the in-process kernel name (declaring no argument size). */
aclError npusimRegisterKernel(const char *name, npusimKernel kernel);
/* Registers a C function as the in-process kernel name that reads argsSize bytes of arguments:
 * launches passing fewer are refused with ACL_ERROR_RT_PARAM_INVALID. */
aclError npusimRegisterKernelWithArgsSize(const char *name, npusimKernel kernel, size_t argsSize);
/* Writes a registry image naming count registered kernels (count 0: all) into buffer; *size
 * receives its size (pass buffer NULL to learn it). Load it with aclrtBinaryLoadFromData. */
aclError npusimRegistryImage(const char *const *names, size_t count, uint8_t *buffer, size_t capacity,
                             size_t *size);
/* Path of the shared object with the shipped kernels, as built with this simulator. */
const char *npusimKernelLibraryPath(void);

#ifdef __cplusplus
}
#endif

#endif /* NPUSIM_CONTROL_H */
