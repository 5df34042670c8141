//! The simulator's own controls, exported to C (`include/npusim/control.h`). They mirror
//! [`crate::control`], [`crate::trace`] and [`crate::kernel`], so C programs and the dlopen'ed
//! `libascendcl.so` can configure and steer the simulator they run on.

use std::ffi::c_char;

use npu_sys::*;

use super::check::{c_path, c_str, c_str_or, optional};
use crate::config::{SimConfig, TimingModel};
use crate::control::*;
use crate::error::{Res, fail, guard, non_null, write_out};
use crate::kernel::{self, KernelEntry};
use crate::sim::sim;

/// C form of [`TimingModel`] without per-kernel durations (see npusimSetKernelDuration).
/// Bandwidths in bytes per second (0 = instantaneous), times in ns.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// # /// Runs `work` on a new stream of `device` between two events, with every task starting
/// # /// at one instant (the hold gate), and returns the simulated time between the events in ms.
/// # fn timed(device: i32, work: impl FnOnce(aclrtStream)) -> f32 {
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         assert_eq!(aclrtSetDevice(device), 0);
/// #         let (mut stream, mut start, mut end) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #         assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #         assert_eq!(aclrtCreateEvent(&mut start), 0);
/// #         assert_eq!(aclrtCreateEvent(&mut end), 0);
/// #         control::hold(device).unwrap();
/// #         assert_eq!(aclrtRecordEvent(start, stream), 0);
/// #         work(stream);
/// #         assert_eq!(aclrtRecordEvent(end, stream), 0);
/// #         control::release(device).unwrap();
/// #         assert_eq!(aclrtSynchronizeStream(stream), 0);
/// #         let mut ms = 0.0;
/// #         assert_eq!(aclrtEventElapsedTime(&mut ms, start, end), 0);
/// #         ms
/// #     }
/// # }
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let mut dev = ptr::null_mut();
/// #   assert_eq!(aclrtMalloc(&mut dev, 1 << 20, 0), 0);
///     let model = npusimTimingModel { d2dBytesPerSec: 1_000_000_000, ..Default::default() };
///     assert_eq!(npusimSetTiming(1, &model), 0);
///     let ms = timed(1, |stream| {
///         assert_eq!(aclrtMemsetAsync(dev, 1 << 20, 0, 1 << 20, stream), 0);
///     });
///     assert_eq!(ms, 1.048576); // 1 MiB at 1 GB/s
///     assert_eq!(npusimSetTiming(1, ptr::null()), 0); // NULL: no timing model
/// }
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct npusimTimingModel {
    /// Host-to-device bandwidth.
    pub h2dBytesPerSec: u64,
    /// Device-to-host bandwidth.
    pub d2hBytesPerSec: u64,
    /// Device-to-device (and memset) bandwidth.
    pub d2dBytesPerSec: u64,
    /// Launch latency added to every work task.
    pub launchLatencyNs: u64,
    /// Lower bound of every work task.
    pub minTaskNs: u64,
}

/// C form of [`DeviceStats`].
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::abi::*;
///
/// let mut stats = npusimDeviceStats::default();
/// // SAFETY: `stats` is valid for a write.
/// unsafe { assert_eq!(npusimGetDeviceStats(0, &mut stats), 0) };
/// assert_eq!(stats.capacity, npu_sim::control::device_stats(0).unwrap().capacity);
/// assert_eq!(stats.lost, 0);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct npusimDeviceStats {
    /// Device memory accounted to live allocations, in bytes.
    pub bytesAllocated: u64,
    /// Live device allocations.
    pub liveAllocations: u64,
    /// Live streams, default streams included.
    pub liveStreams: u64,
    /// Live events.
    pub liveEvents: u64,
    /// Capacity in bytes.
    pub capacity: u64,
    /// 1 once the device was lost.
    pub lost: i32,
    /// Zero.
    pub reserved: i32,
    /// Live contexts, the primary one included (after `reserved`, so that the fields before
    /// keep their offsets for programs built against the earlier header).
    pub liveContexts: u64,
}

/// C form of [`HostStats`].
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::abi::*;
///
/// let (mut stats, mut host) = (npusimHostStats::default(), ptr::null_mut());
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     assert_eq!(aclrtMallocHost(&mut host, 4096), 0);
///     assert_eq!(npusimGetHostStats(&mut stats), 0);
/// }
/// assert_eq!((stats.pinnedAllocations, stats.pinnedBytes), (1, 4096));
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct npusimHostStats {
    /// Bytes of live aclrtMallocHost memory.
    pub pinnedBytes: u64,
    /// Live aclrtMallocHost allocations.
    pub pinnedAllocations: u64,
    /// Live host registrations.
    pub registrations: u64,
}

/// Installs a JSON simulator configuration (see [`SimConfig`]); fails with 100000 if it is
/// invalid or the simulator already runs with a different one.
///
/// # Safety
/// `json` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimConfigure(json: *const c_char) -> aclError {
    guard("npusimConfigure", || {
        let config = SimConfig::from_json(c_str(json, "json")?);
        match config.and_then(SimConfig::install) {
            Ok(()) => Ok(()),
            Err(e) => fail!(ACL_ERROR_INVALID_PARAM, "{e}"),
        }
    })
}

/// Sets a device's timing model (NULL clears it). Per-kernel durations set before are kept.
///
/// # Safety
/// `model` must be NULL or valid for a read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimSetTiming(
    deviceId: i32,
    model: *const npusimTimingModel,
) -> aclError {
    guard("npusimSetTiming", || {
        let timing = optional(model).map(|m| TimingModel {
            h2d_bytes_per_sec: m.h2dBytesPerSec,
            d2h_bytes_per_sec: m.d2hBytesPerSec,
            d2d_bytes_per_sec: m.d2dBytesPerSec,
            launch_latency_ns: m.launchLatencyNs,
            min_task_ns: m.minTaskNs,
            kernel_ns: Default::default(),
        });
        sim()?.device(deviceId.into())?.clock.set_costs(timing);
        Ok(())
    })
}

/// Sets how long a kernel takes on a device, in ns ([`crate::control::set_kernel_duration`]);
/// a NULL, empty or non-UTF-8 `kernelName` is refused with 100000, as npusimFailKernel
/// refuses it.
///
/// # Safety
/// `kernelName` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimSetKernelDuration(
    deviceId: i32,
    kernelName: *const c_char,
    ns: u64,
) -> aclError {
    guard("npusimSetKernelDuration", || {
        let name = c_str_or(kernelName, "kernelName", ACL_ERROR_INVALID_PARAM)?;
        set_kernel_ns_impl(deviceId, name, ns)
    })
}

/// Makes the `nth` device task submitted to `stream` from now on (1 = the next) fail with
/// `code`. NULL is the current context's default stream.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimFailTask(stream: aclrtStream, nth: u64, code: aclError) -> aclError {
    guard("npusimFailTask", || fail_task_impl(stream, nth, code))
}

/// Makes the `nth` launch of the kernel `kernelName` queued on any stream of a device from now
/// on (1 = the next) fail with `code` ([`crate::control::fail_kernel`]).
///
/// # Safety
/// `kernelName` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimFailKernel(
    deviceId: i32,
    kernelName: *const c_char,
    nth: u64,
    code: aclError,
) -> aclError {
    guard("npusimFailKernel", || {
        let name = c_str_or(kernelName, "kernelName", ACL_ERROR_INVALID_PARAM)?;
        fail_kernel_impl(deviceId, name, nth, code)
    })
}

/// Disarms the faults npusimFailTask, npusimFailKernel and npusimFailNextAlloc armed on a
/// device that have not fired ([`crate::control::clear_faults`]); `*cleared` (if not NULL) receives how many.
///
/// # Safety
/// `cleared` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimClearFaults(deviceId: i32, cleared: *mut u64) -> aclError {
    guard("npusimClearFaults", || {
        let count = clear_faults_impl(deviceId)?;
        if !cleared.is_null() {
            write_out(cleared, "cleared", count)?;
        }
        Ok(())
    })
}

/// Loses a device (every later call on it fails with 507010).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimLoseDevice(deviceId: i32) -> aclError {
    guard("npusimLoseDevice", || lose_device_impl(deviceId))
}

/// Makes the next device allocation on a device fail with 207001.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimFailNextAlloc(deviceId: i32) -> aclError {
    guard("npusimFailNextAlloc", || fail_next_alloc_impl(deviceId))
}

/// Gives `[devPtr, devPtr+size)` of one device allocation an uncorrectable memory error
/// ([`crate::control::inject_mem_uce`]).
///
/// # Safety
/// No preconditions: the pointer is looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimInjectMemUce(
    devPtr: *mut std::ffi::c_void,
    size: usize,
) -> aclError {
    guard("npusimInjectMemUce", || inject_mem_uce_impl(devPtr, size))
}

/// Makes the next host allocation (aclrtMallocHost / aclrtMallocHostWithCfg) fail with `code`
/// (0 → 100000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimFailNextHostAlloc(code: aclError) -> aclError {
    guard("npusimFailNextHostAlloc", || {
        fail_next_host_alloc_impl(code)
    })
}

/// Closes a device's hold gate.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimHold(deviceId: i32) -> aclError {
    guard("npusimHold", || hold_impl(deviceId, true))
}

/// Opens a device's hold gate: waiting tasks become ready at this simulated instant.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimRelease(deviceId: i32) -> aclError {
    guard("npusimRelease", || hold_impl(deviceId, false))
}

/// A device's live counters.
///
/// # Safety
/// `stats` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimGetDeviceStats(
    deviceId: i32,
    stats: *mut npusimDeviceStats,
) -> aclError {
    guard("npusimGetDeviceStats", || {
        non_null(stats, "stats")?;
        let s = device_stats_impl(deviceId)?;
        let value = npusimDeviceStats {
            bytesAllocated: s.bytes_allocated,
            liveAllocations: s.live_allocations,
            liveStreams: s.live_streams,
            liveEvents: s.live_events,
            capacity: s.capacity,
            lost: i32::from(s.lost),
            reserved: 0,
            liveContexts: s.live_contexts,
        };
        write_out(stats, "stats", value)
    })
}

/// Host memory counters.
///
/// # Safety
/// `stats` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimGetHostStats(stats: *mut npusimHostStats) -> aclError {
    guard("npusimGetHostStats", || {
        non_null(stats, "stats")?;
        let s = host_stats_impl()?;
        let value = npusimHostStats {
            pinnedBytes: s.pinned_bytes,
            pinnedAllocations: s.pinned_allocations,
            registrations: s.registrations,
        };
        write_out(stats, "stats", value)
    })
}

/// The device's simulated clock now, in ns.
///
/// # Safety
/// `ns` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimGetTimeNs(deviceId: i32, ns: *mut u64) -> aclError {
    guard("npusimGetTimeNs", || {
        non_null(ns, "ns")?;
        write_out(ns, "ns", now_ns_impl(deviceId)?)
    })
}

/// Starts recording the timeline into `path` (written by aclFinalize and npusimTraceFlush).
///
/// # Safety
/// `path` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimTraceEnable(path: *const c_char) -> aclError {
    guard("npusimTraceEnable", || {
        crate::trace::enable(c_path(path, "path")?);
        Ok(())
    })
}

/// Writes the timeline recorded so far (107000 if tracing was never enabled).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimTraceFlush() -> aclError {
    guard("npusimTraceFlush", || match crate::trace::flush() {
        Ok(Some(_)) => Ok(()),
        Ok(None) => fail!(ACL_ERROR_RT_PARAM_INVALID, "tracing was never enabled"),
        Err(e) => fail!(ACL_ERROR_RT_FILE_WRITE, "writing the trace failed: {e}"),
    })
}

/// Registers a C function as the in-process kernel `name` (loadable through a registry image),
/// declaring no argument size.
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `kernel` a function with the npusim/kernel.h ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimRegisterKernel(
    name: *const c_char,
    kernel: Option<KernelEntry>,
) -> aclError {
    guard("npusimRegisterKernel", || register_kernel(name, kernel, 0))
}

/// Registers a C function as the in-process kernel `name` that reads `argsSize` bytes of
/// arguments: launches passing fewer are refused with 107000.
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `kernel` a function with the npusim/kernel.h ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimRegisterKernelWithArgsSize(
    name: *const c_char,
    kernel: Option<KernelEntry>,
    argsSize: usize,
) -> aclError {
    guard("npusimRegisterKernelWithArgsSize", || {
        register_kernel(name, kernel, argsSize)
    })
}

fn register_kernel(name: *const c_char, kernel: Option<KernelEntry>, args_size: usize) -> Res<()> {
    let name = c_str(name, "name")?;
    let Some(kernel) = kernel else {
        fail!(ACL_ERROR_INVALID_PARAM, "kernel is NULL")
    };
    kernel::register_entry_with_args_size(name, kernel, args_size)
        .or_else(|e| fail!(ACL_ERROR_INVALID_PARAM, "{e}"))
}

/// Writes a registry image naming `count` registered kernels (see
/// `npu_sim::kernel::registry_image`) into `buffer` of `capacity` bytes; `*size` receives the
/// image's size (call with `buffer` NULL to learn it).
///
/// # Safety
/// `names` must hold `count` NUL-terminated strings; `buffer` NULL or writable for `capacity`
/// bytes; `size` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimRegistryImage(
    names: *const *const c_char,
    count: usize,
    buffer: *mut u8,
    capacity: usize,
    size: *mut usize,
) -> aclError {
    guard("npusimRegistryImage", || {
        non_null(size, "size")?;
        let names = image_names(names, count)?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let image = kernel::registry_image(&refs);
        write_out(size, "size", image.len())?;
        if buffer.is_null() {
            return Ok(());
        }
        if capacity < image.len() {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "the image needs {} bytes, the buffer has {capacity}",
                image.len()
            );
        }
        // SAFETY: the caller provides `capacity` writable bytes, at least the image's size.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), buffer, image.len()) };
        Ok(())
    })
}

fn image_names(names: *const *const c_char, count: usize) -> Res<Vec<String>> {
    let pointers = super::check::array(names, count, "names")?;
    pointers
        .iter()
        .map(|&p| c_str(p, "names[i]").map(str::to_owned))
        .collect()
}

/// Path of the shipped C kernel library (vector_add_f32, scale_f32, reduce_sum_f32) as built
/// with this simulator.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npusimKernelLibraryPath() -> *const c_char {
    static PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| std::ffi::CString::new(kernel::LIBRARY_PATH).unwrap_or_default())
        .as_ptr()
}
