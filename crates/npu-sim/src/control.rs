//! Runtime controls for tests: timing, fault injection, device loss, the hold gate, counters.
//!
//! Every control is also exported to C with an `npusim` prefix (`include/npusim/control.h`),
//! so C programs and the dlopen'ed `libascendcl.so` can use them too.
//!
//! The hold gate makes overlap deterministic: [`hold`] a device, queue work on several
//! streams, then [`release`] it; every queued task becomes ready at the same simulated instant.
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! use std::ptr;
//! use npu_sim::{abi::*, control, TimingModel};
//!
//! // SAFETY: every pointer passed is valid for the call's contract.
//! unsafe {
//!     assert_eq!(aclrtSetDevice(0), 0);
//!     let mut dev = ptr::null_mut();
//!     assert_eq!(aclrtMalloc(&mut dev, 1 << 20, 0), 0);
//!     assert_eq!(control::device_stats(0).unwrap().live_allocations, 1);
//!
//!     // The second device task submitted to the default stream fails with 507015.
//!     control::fail_task(ptr::null_mut(), 2, 507015).unwrap();
//!     assert_eq!(aclrtMemsetAsync(dev, 1 << 20, 1, 1 << 20, ptr::null_mut()), 0);
//!     assert_eq!(aclrtMemsetAsync(dev, 1 << 20, 2, 1 << 20, ptr::null_mut()), 0);
//!     assert_eq!(aclrtSynchronizeStream(ptr::null_mut()), 507015);
//!
//!     // With a 1 GB/s timing model and the device held, a 1 MiB memset starts at the release
//!     // instant and takes 1,048,576 ns of simulated time.
//!     control::set_timing(0, Some(TimingModel::default().d2d_bandwidth(1_000_000_000))).unwrap();
//!     let mut stream = ptr::null_mut();
//!     assert_eq!(aclrtCreateStream(&mut stream), 0);
//!     let (mut start, mut end) = (ptr::null_mut(), ptr::null_mut());
//!     assert_eq!(aclrtCreateEvent(&mut start), 0);
//!     assert_eq!(aclrtCreateEvent(&mut end), 0);
//!     control::hold(0).unwrap();
//!     assert_eq!(aclrtRecordEvent(start, stream), 0);
//!     assert_eq!(aclrtMemsetAsync(dev, 1 << 20, 3, 1 << 20, stream), 0);
//!     assert_eq!(aclrtRecordEvent(end, stream), 0);
//!     control::release(0).unwrap();
//!     assert_eq!(aclrtSynchronizeStream(stream), 0);
//!     let mut ms = 0.0f32;
//!     assert_eq!(aclrtEventElapsedTime(&mut ms, start, end), 0);
//!     assert_eq!(ms, 1.048576);
//!     control::set_timing(0, None).unwrap();
//!     assert_eq!(aclrtFree(dev), 0);
//! }
//! ```

use std::time::Duration;

use npu_sys::*;

use crate::config::TimingModel;
use crate::context;
use crate::error::{Res, SimError, ensure};
use crate::sim::sim;

/// A refused control call: the ACL code the C form returns, and why.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::control;
///
/// let err = control::set_timing(99, None).unwrap_err(); // there is no device 99
/// assert_eq!(err.code, 107001); // ACL_ERROR_RT_INVALID_DEVICEID, as the C form returns
/// assert!(err.to_string().ends_with("(ACL error 107001)"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (ACL error {code})")]
#[non_exhaustive]
pub struct ControlError {
    /// The ACL error code.
    pub code: aclError,
    /// What was wrong.
    pub message: String,
}

impl From<SimError> for ControlError {
    fn from(error: SimError) -> Self {
        ControlError {
            code: error.code,
            message: error.msg,
        }
    }
}

/// Live counters of one device.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(1), 0);
///     let mut dev = ptr::null_mut();
///     assert_eq!(aclrtMalloc(&mut dev, 1000, 0), 0);
///     let stats = control::device_stats(1).unwrap();
///     assert_eq!(stats.live_allocations, 1);
///     assert!(stats.bytes_allocated >= 1000, "counted after ACL's rounding");
///     assert!(!stats.lost);
///     assert_eq!(aclrtFree(dev), 0);
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Device memory accounted to live allocations (after ACL's rounding), in bytes.
    pub bytes_allocated: u64,
    /// Live device allocations.
    pub live_allocations: u64,
    /// Live streams, default streams included.
    pub live_streams: u64,
    /// Live events.
    pub live_events: u64,
    /// Live contexts of the device: its primary context while it exists (from the first
    /// aclrtSetDevice until the aclrtResetDevice that drops its last reference, or
    /// aclrtResetDeviceForce) and each aclrtCreateContext context until aclrtDestroyContext,
    /// each counted once however many threads have it current. A context stops counting when
    /// its destruction begins, before its streams' work is waited for.
    pub live_contexts: u64,
    /// The device's capacity in bytes.
    pub capacity: u64,
    /// Whether the device was lost.
    pub lost: bool,
}

/// Live counters of host memory the simulator manages.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let mut host = ptr::null_mut();
///     assert_eq!(aclrtMallocHost(&mut host, 4096), 0);
///     let stats = control::host_stats().unwrap();
///     assert_eq!((stats.pinned_allocations, stats.pinned_bytes), (1, 4096));
///     assert_eq!(aclrtFreeHost(host), 0);
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HostStats {
    /// Bytes of live aclrtMallocHost memory.
    pub pinned_bytes: u64,
    /// Live aclrtMallocHost allocations.
    pub pinned_allocations: u64,
    /// Live host registrations.
    pub registrations: u64,
}

pub(crate) fn set_timing_impl(device: i32, model: Option<TimingModel>) -> Res<()> {
    sim()?.device(device.into())?.clock.set_timing(model);
    Ok(())
}

pub(crate) fn set_kernel_ns_impl(device: i32, name: &str, ns: u64) -> Res<()> {
    let device = sim()?.device(device.into())?;
    kernel_name_impl(name)?;
    device.clock.set_kernel_ns(name, ns);
    Ok(())
}

/// Refuses a name no kernel can have, for the controls that name a kernel (a duration, a
/// fault): one that is empty or holds a NUL would be stored and never match a launch.
fn kernel_name_impl(name: &str) -> Res<()> {
    ensure!(
        !name.is_empty() && !name.contains('\0'),
        ACL_ERROR_INVALID_PARAM,
        "the kernel name is empty or holds a NUL (no kernel is named so)"
    );
    Ok(())
}

/// Refuses what no injected fault may fail a task with: success, and the codes a
/// synchronisation returns when its wait runs out (a task's failure is what a wait on it
/// returns: a task failed with one would tell every wait on it "still running", and a program
/// such as npu-rs's own waits would wait for a task that has ended, for ever).
pub(crate) fn fault_code_impl(code: aclError) -> Res<()> {
    ensure!(
        code != ACL_SUCCESS,
        ACL_ERROR_INVALID_PARAM,
        "the injected code must be an error"
    );
    ensure!(
        ![
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
            ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
        ]
        .contains(&code),
        ACL_ERROR_INVALID_PARAM,
        "code {code} is what a synchronisation returns when its wait runs out, not a task \
         failure"
    );
    Ok(())
}

/// The checks every counted fault shares: `nth` counts from 1 (the next of what `counts`
/// names), and `code` is one a task may fail with.
fn counted_fault_impl(nth: u64, code: aclError, counts: &str) -> Res<()> {
    ensure!(
        nth > 0,
        ACL_ERROR_INVALID_PARAM,
        "nth counts from 1 (the next {counts})"
    );
    fault_code_impl(code)
}

pub(crate) fn fail_task_impl(stream: aclrtStream, nth: u64, code: aclError) -> Res<()> {
    counted_fault_impl(nth, code, "task")?;
    let stream = context::any_stream(sim()?, stream)?;
    stream.inject_failure(nth, code)
}

pub(crate) fn fail_kernel_impl(device: i32, name: &str, nth: u64, code: aclError) -> Res<()> {
    let device = sim()?.device(device.into())?;
    kernel_name_impl(name)?;
    counted_fault_impl(nth, code, "launch")?;
    device.kernel_faults.arm(name, nth, code);
    Ok(())
}

pub(crate) fn clear_faults_impl(device: i32) -> Res<u64> {
    let sim = sim()?;
    let device = sim.device(device.into())?;
    let on_streams: usize = sim
        .streams_of(device.id)
        .iter()
        .map(|stream| stream.clear_injections())
        .sum();
    let on_kernels = device.kernel_faults.clear();
    let on_alloc = usize::from(device.clear_fail_next_alloc());
    Ok((on_streams + on_kernels + on_alloc) as u64)
}

pub(crate) fn lose_device_impl(device: i32) -> Res<()> {
    sim()?.device(device.into())?.lose();
    Ok(())
}

pub(crate) fn fail_next_alloc_impl(device: i32) -> Res<()> {
    sim()?.device(device.into())?.fail_next_alloc();
    Ok(())
}

pub(crate) fn inject_mem_uce_impl(ptr: *mut std::ffi::c_void, len: usize) -> Res<()> {
    crate::error::non_null(ptr, "devPtr")?;
    ensure!(len > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
    let sim = sim()?;
    let located = sim.memory.locate(ptr as usize);
    let Some((_, _, crate::memory::AllocKind::Device { device, .. })) = located.allocation else {
        crate::error::fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{ptr:p} is not in a device allocation of the simulator"
        );
    };
    located.check_range(ptr as usize, len, "the UCE")?;
    sim.memory.uce.mark(device, ptr as usize, len);
    Ok(())
}

pub(crate) fn fail_next_host_alloc_impl(code: aclError) -> Res<()> {
    ensure!(
        code != ACL_SUCCESS,
        ACL_ERROR_INVALID_PARAM,
        "the injected code must be an error"
    );
    sim()?.memory.fail_next_host_alloc(code);
    Ok(())
}

pub(crate) fn hold_impl(device: i32, hold: bool) -> Res<()> {
    let device = sim()?.device(device.into())?;
    if hold {
        device.hold()
    } else {
        device.release()
    }
    Ok(())
}

pub(crate) fn device_stats_impl(device: i32) -> Res<DeviceStats> {
    let device = sim()?.device(device.into())?;
    Ok(DeviceStats {
        bytes_allocated: device.used(),
        live_allocations: device.live_allocations(),
        live_streams: device
            .live_streams
            .load(std::sync::atomic::Ordering::Relaxed),
        live_events: device
            .live_events
            .load(std::sync::atomic::Ordering::Relaxed),
        live_contexts: device
            .live_contexts
            .load(std::sync::atomic::Ordering::Relaxed),
        capacity: device.capacity,
        lost: device.is_lost(),
    })
}

pub(crate) fn host_stats_impl() -> Res<HostStats> {
    let memory = &sim()?.memory;
    let (pinned_bytes, pinned_allocations) = memory.pinned_stats();
    Ok(HostStats {
        pinned_bytes,
        pinned_allocations,
        registrations: memory.registration_count(),
    })
}

pub(crate) fn now_ns_impl(device: i32) -> Res<u64> {
    Ok(sim()?.device(device.into())?.clock.now_ns())
}

/// Sets (or with `None` clears) a device's timing model. Tasks already started keep their
/// times.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{TimingModel, abi::*, control};
/// use npu_sys::ACL_MEMCPY_HOST_TO_DEVICE;
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
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let (mut host, mut dev) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtMallocHost(&mut host, 1 << 20), 0);
/// #   assert_eq!(aclrtMalloc(&mut dev, 1 << 20, 0), 0);
///     // Host-to-device copies on device 1 move 1 GB/s from now on.
///     control::set_timing(1, Some(TimingModel::default().h2d_bandwidth(1_000_000_000))).unwrap();
///     let ms = timed(1, |stream| {
///         let kind = ACL_MEMCPY_HOST_TO_DEVICE;
///         assert_eq!(aclrtMemcpyAsync(dev, 1 << 20, host, 1 << 20, kind, stream), 0);
///     });
///     assert_eq!(ms, 1.048576); // 1 MiB at 1 GB/s, on the simulated clock
///     control::set_timing(1, None).unwrap(); // as fast as the host can again
/// }
/// ```
pub fn set_timing(device: i32, model: Option<TimingModel>) -> Result<(), ControlError> {
    Ok(set_timing_impl(device, model)?)
}

/// Sets how long the kernel `name` takes on a device (turning the timing model on, with no
/// other costs, if it was off). A name no kernel can have, empty or holding a NUL, is refused
/// with 100000, as [`fail_kernel`] refuses it (it would be stored and never match a launch);
/// an unknown device with 107001.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ptr, time::Duration};
/// use npu_sim::{abi::*, control, kernel::{SCALE_F32, ScaleArgs, registry_image}};
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
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let image = registry_image(&[SCALE_F32]);
/// #   let (mut bin, mut scale) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
/// #   assert_eq!(aclrtBinaryGetFunction(bin, c"scale_f32".as_ptr(), &mut scale), 0);
///     control::set_kernel_duration(1, SCALE_F32, Duration::from_millis(2)).unwrap();
///     let mut args = ScaleArgs { x: 0, n: 0, alpha: 1.0, reserved: 0 }; // over no elements
///     let ms = timed(1, |stream| {
///         let (bytes, size) = ((&raw mut args).cast(), size_of::<ScaleArgs>());
///         let (cfg, holders) = (ptr::null_mut(), ptr::null_mut());
///         let code =
///             aclrtLaunchKernelWithHostArgs(scale, 1, stream, cfg, bytes, size, holders, 0);
///         assert_eq!(code, 0);
///     });
///     assert_eq!(ms, 2.0);
///     let refused = control::set_kernel_duration(1, "", Duration::from_millis(2));
///     assert_eq!(refused.unwrap_err().code, 100000, "no kernel is named so");
/// #   control::set_timing(1, None).unwrap();
/// }
/// ```
pub fn set_kernel_duration(
    device: i32,
    name: &str,
    duration: Duration,
) -> Result<(), ControlError> {
    let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    Ok(set_kernel_ns_impl(device, name, ns)?)
}

/// Makes the `nth` device task (copy, memset, kernel, reduction, random numbers, task update;
/// event, notify and value operations do not count, nor do callbacks and host functions,
/// which run on a host thread, nor the tasks a PERSISTENT stream keeps, which never run)
/// submitted to `stream` from now on fail with `code` when it runs, without touching memory.
/// `nth` = 1 is the next one; NULL is the calling thread's current default stream. The
/// failure then follows the stream's failure mode. `code` is any error but
/// the two a synchronisation returns when its wait runs out (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
/// ACL_ERROR_RT_EVENT_SYNC_TIMEOUT), which are refused with 100000: no task fails with them,
/// and a wait on a task failed with one would take it for a task still running. An `nth` that
/// counts past the last number the stream's `u64` task count can reach is refused with 100000
/// too.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let (mut stream, mut event, mut dev) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #   assert_eq!(aclrtCreateEvent(&mut event), 0);
/// #   assert_eq!(aclrtMalloc(&mut dev, 64, 0), 0);
///     control::fail_task(stream, 1, 507015).unwrap(); // the next device task on `stream`
///     assert_eq!(aclrtRecordEvent(event, stream), 0); // event operations do not count ...
///     assert_eq!(aclrtMemsetAsync(dev, 64, 0, 64, stream), 0); // ... this memset does
///     assert_eq!(aclrtSynchronizeStream(stream), 507015);
///     assert!(control::fail_task(stream, 0, 507015).is_err(), "nth counts from 1");
///     assert_eq!(control::fail_task(stream, 1, 507047).unwrap_err().code, 100000, "a wait's");
/// }
/// ```
pub fn fail_task(stream: aclrtStream, nth: u64, code: aclError) -> Result<(), ControlError> {
    Ok(fail_task_impl(stream, nth, code)?)
}

/// Whether the fault controls ([`fail_task`], [`fail_kernel`]) accept `code`: any error but
/// the two a synchronisation returns when its wait runs out (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
/// ACL_ERROR_RT_EVENT_SYNC_TIMEOUT). For wrappers that check their arguments before arming.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::control;
///
/// assert!(control::check_fault_code(507015).is_ok()); // an AI Core trap
/// assert_eq!(control::check_fault_code(0).unwrap_err().code, 100000);
/// assert_eq!(control::check_fault_code(507046).unwrap_err().code, 100000); // a wait's code
/// ```
pub fn check_fault_code(code: aclError) -> Result<(), ControlError> {
    Ok(fault_code_impl(code)?)
}

/// Whether the controls naming a kernel ([`fail_kernel`], [`set_kernel_duration`]) accept `name`:
/// any but an empty one or one holding a NUL, which no kernel has (stored, it would never match
/// a launch). For wrappers that check their arguments before calling.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::control;
///
/// assert!(control::check_kernel_name("scale_f32").is_ok());
/// assert_eq!(control::check_kernel_name("").unwrap_err().code, 100000);
/// assert_eq!(control::check_kernel_name("scale\0f32").unwrap_err().code, 100000);
/// ```
pub fn check_kernel_name(name: &str) -> Result<(), ControlError> {
    Ok(kernel_name_impl(name)?)
}

/// Makes the `nth` launch (1 = the next) of the kernel `name` queued on any stream of `device`
/// from now on fail with `code` when it runs, instead of running, as a [`fail_task`] fault
/// fails a task: the failure follows its stream's failure mode.
///
/// A launch counts when it is queued to run: one by any launch function
/// (aclrtLaunchKernel, aclrtLaunchKernelV2, aclrtLaunchKernelWithConfig,
/// aclrtLaunchKernelWithHostArgs, ...), and each kernel of a model runtime instance each time
/// the instance's tasks are queued by an execution (aclmdlRIExecute / aclmdlRIExecuteAsync);
/// capturing a launch into an instance is not one, nor is a launch a PERSISTENT stream keeps
/// (it never runs), nor a kernel of an instance with branches (conditional or switch tasks),
/// which runs as one program. Launches of one stream
/// count in their order; launches racing on several streams count in the order they reach
/// the device, so exactly one of them fails. A launch that a [`fail_task`] fault also targets
/// fails with that fault's code and uses this one up all the same; two faults on one launch
/// both fire on it.
///
/// The name is matched when a launch is queued, so a fault may be armed before the binary
/// holding the kernel is loaded: a name no launch uses is armed anyway and never fires
/// ([`clear_faults`] reports it). An empty name, `nth` = 0 and the codes [`check_fault_code`]
/// refuses are refused with 100000; an unknown device with 107001.
///
/// A device's faults are shared by every example in the process (another launching the same
/// kernel, or arming a fault, on the device), so this one runs as a program of its own:
///
/// ```standalone_crate
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control, kernel::{SCALE_F32, ScaleArgs, registry_image}};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let image = registry_image(&[SCALE_F32]);
/// #   let (mut bin, mut scale) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
/// #   assert_eq!(aclrtBinaryGetFunction(bin, c"scale_f32".as_ptr(), &mut scale), 0);
///     let (mut first, mut second) = (ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtCreateStream(&mut first), 0);
///     assert_eq!(aclrtCreateStream(&mut second), 0);
///     control::fail_kernel(1, SCALE_F32, 2, 507015).unwrap(); // the second launch from now
///     let mut args = ScaleArgs { x: 0, n: 0, alpha: 1.0, reserved: 0 }; // over no elements
///     for stream in [first, second] {
///         let (bytes, size) = ((&raw mut args).cast(), size_of::<ScaleArgs>());
///         let (cfg, holders) = (ptr::null_mut(), ptr::null_mut());
///         let code =
///             aclrtLaunchKernelWithHostArgs(scale, 1, stream, cfg, bytes, size, holders, 0);
///         assert_eq!(code, 0);
///     }
///     assert_eq!(aclrtSynchronizeStream(first), 0);
///     assert_eq!(aclrtSynchronizeStream(second), 507015, "the second launch, on another stream");
///     assert_eq!(control::fail_kernel(1, "", 1, 507015).unwrap_err().code, 100000);
/// }
/// ```
pub fn fail_kernel(device: i32, name: &str, nth: u64, code: aclError) -> Result<(), ControlError> {
    Ok(fail_kernel_impl(device, name, nth, code)?)
}

/// Disarms every fault armed on `device` that has not fired: those [`fail_task`] armed on any
/// live stream of it, those [`fail_kernel`] armed on it and a [`fail_next_alloc`] not yet
/// used. Returns how many it disarmed, so a test that expected every fault to fire can check
/// for 0. A fault fires when its task is queued, not when it runs. Faults of other devices
/// stay armed, and a device's last for the process (across `aclrtResetDevice`, `aclFinalize`
/// and a new `aclInit`) until they fire or are cleared.
///
/// A device's faults are shared by every example in the process (another launching the same
/// kernel, or arming a fault, on the device), so this one runs as a program of its own:
///
/// ```standalone_crate
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let (mut stream, mut dev) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #   assert_eq!(aclrtMalloc(&mut dev, 64, 0), 0);
///     control::fail_task(stream, 1, 507015).unwrap();
///     control::fail_kernel(1, "scale_f32", 1, 507015).unwrap();
///     assert_eq!(control::clear_faults(1).unwrap(), 2);
///     assert_eq!(aclrtMemsetAsync(dev, 64, 0, 64, stream), 0);
///     assert_eq!(aclrtSynchronizeStream(stream), 0, "disarmed: the memset runs");
///     assert_eq!(control::clear_faults(1).unwrap(), 0);
/// }
/// ```
pub fn clear_faults(device: i32) -> Result<u64, ControlError> {
    Ok(clear_faults_impl(device)?)
}

/// Loses a device: queued work is abandoned (a task already touching memory finishes first)
/// and every later call on the device fails with ACL_ERROR_RT_LOST_HEARTBEAT (507010).
/// Irreversible for the life of the process.
///
/// ```standalone_crate
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(1), 0);
///     control::lose_device(1).unwrap(); // for the rest of the process: this example runs alone
///     let mut dev = ptr::null_mut();
///     assert_eq!(aclrtMalloc(&mut dev, 64, 0), 507010); // ACL_ERROR_RT_LOST_HEARTBEAT
///     assert!(control::device_stats(1).unwrap().lost);
/// }
/// ```
pub fn lose_device(device: i32) -> Result<(), ControlError> {
    Ok(lose_device_impl(device)?)
}

/// Makes the next device allocation on `device` fail with ACL_ERROR_RT_MEMORY_ALLOCATION.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(1), 0);
///     control::fail_next_alloc(1).unwrap();
///     let mut dev = ptr::null_mut();
///     assert_eq!(aclrtMalloc(&mut dev, 64, 0), 207001); // ACL_ERROR_RT_MEMORY_ALLOCATION
///     assert_eq!(aclrtMalloc(&mut dev, 64, 0), 0, "only the next one fails");
///     assert_eq!(aclrtFree(dev), 0);
/// }
/// ```
pub fn fail_next_alloc(device: i32) -> Result<(), ControlError> {
    Ok(fail_next_alloc_impl(device)?)
}

/// Gives `[ptr, ptr+len)`, inside one device allocation, an uncorrectable memory error
/// (UCE), as the device's ECC would find one: every task touching the range from now on fails
/// with ACL_ERROR_RT_DEVICE_MEM_ERROR (507053) without touching memory, aclrtGetMemUceInfo lists
/// the range and aclrtGetErrorVerbose reports a memory error to repair, until
/// aclrtMemUceRepair or aclrtRepairError repairs it (zeroing it) or the allocation is freed.
/// NULL or a length of 0 → 100000; a range not inside one device allocation → 107000.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers; the memset stays inside the allocation.
/// unsafe {
///     assert_eq!(aclrtSetDevice(1), 0);
///     let (mut dev, mut stream) = (ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtMalloc(&mut dev, 4096, 0), 0);
///     assert_eq!(aclrtCreateStream(&mut stream), 0);
///     control::inject_mem_uce(dev, 64).unwrap();
///     assert_eq!(aclrtMemsetAsync(dev, 4096, 1, 4096, stream), 0);
///     assert_eq!(aclrtSynchronizeStream(stream), 507053); // ACL_ERROR_RT_DEVICE_MEM_ERROR
///     assert_eq!(aclrtDestroyStream(stream), 0);
///     assert_eq!(aclrtFree(dev), 0); // the error goes with the memory
/// }
/// ```
pub fn inject_mem_uce(ptr: *mut std::ffi::c_void, len: usize) -> Result<(), ControlError> {
    Ok(inject_mem_uce_impl(ptr, len)?)
}

/// Makes the next host allocation of the process (aclrtMallocHost or aclrtMallocHostWithCfg,
/// once its arguments and context are checked) fail with `code`, allocating nothing. A code of
/// 0 is refused. The host-memory counterpart of [`fail_next_alloc`].
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     control::fail_next_host_alloc(207001).unwrap();
///     let mut host = ptr::null_mut();
///     assert_eq!(aclrtMallocHost(&mut host, 4096), 207001);
///     assert_eq!(aclrtMallocHost(&mut host, 4096), 0, "only the next one fails");
///     assert_eq!(aclrtFreeHost(host), 0);
/// }
/// ```
pub fn fail_next_host_alloc(code: aclError) -> Result<(), ControlError> {
    Ok(fail_next_host_alloc_impl(code)?)
}

/// Closes a device's hold gate: tasks that have not started wait until [`release`].
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
/// use npu_sys::ACL_STREAM_STATUS_NOT_READY;
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let (mut stream, mut dev) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #   assert_eq!(aclrtMalloc(&mut dev, 64, 0), 0);
///     control::hold(1).unwrap();
///     assert_eq!(aclrtMemsetAsync(dev, 64, 1, 64, stream), 0);
///     let mut status = 0;
///     assert_eq!(aclrtStreamQuery(stream, &mut status), 0);
///     assert_eq!(status, ACL_STREAM_STATUS_NOT_READY, "held: the memset has not started");
///     control::release(1).unwrap();
///     assert_eq!(aclrtSynchronizeStream(stream), 0);
/// }
/// ```
pub fn hold(device: i32) -> Result<(), ControlError> {
    Ok(hold_impl(device, true)?)
}

/// Opens a device's hold gate: every waiting task becomes ready at this simulated instant.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{TimingModel, abi::*, control};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(1), 0);
/// #   let mut work = Vec::new();
/// #   for _ in 0..2 {
/// #       let (mut stream, mut dev, mut done) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #       assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #       assert_eq!(aclrtMalloc(&mut dev, 1 << 20, 0), 0);
/// #       assert_eq!(aclrtCreateEvent(&mut done), 0);
/// #       work.push((stream, dev, done));
/// #   }
///     control::set_timing(1, Some(TimingModel::default().d2d_bandwidth(1_000_000_000))).unwrap();
///     control::hold(1).unwrap();
///     for &(stream, dev, done) in &work {
///         assert_eq!(aclrtMemsetAsync(dev, 1 << 20, 0, 1 << 20, stream), 0);
///         assert_eq!(aclrtRecordEvent(done, stream), 0);
///     }
///     control::release(1).unwrap(); // both memsets start now, side by side
///     assert_eq!(aclrtSynchronizeDevice(), 0);
///     let mut ms = -1.0;
///     assert_eq!(aclrtEventElapsedTime(&mut ms, work[0].2, work[1].2), 0);
///     assert_eq!(ms, 0.0, "they ended at the same simulated instant");
/// #   control::set_timing(1, None).unwrap();
/// }
/// ```
pub fn release(device: i32) -> Result<(), ControlError> {
    Ok(hold_impl(device, false)?)
}

/// A device's live counters.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: valid out pointers.
/// unsafe {
///     assert_eq!(aclrtSetDevice(1), 0);
///     let before = control::device_stats(1).unwrap();
///     let mut stream = ptr::null_mut();
///     assert_eq!(aclrtCreateStream(&mut stream), 0);
///     assert_eq!(control::device_stats(1).unwrap().live_streams, before.live_streams + 1);
///     assert_eq!(aclrtDestroyStream(stream), 0);
///     assert_eq!(control::device_stats(1).unwrap(), before);
/// }
/// ```
pub fn device_stats(device: i32) -> Result<DeviceStats, ControlError> {
    Ok(device_stats_impl(device)?)
}

/// Host memory counters.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
/// use npu_sys::ACL_HOST_REG_PINNED;
///
/// #[repr(C, align(4096))]
/// struct Page([u8; 4096]);
///
/// let mut page = Box::new(Page([0; 4096]));
/// let ptr = (&raw mut *page).cast();
/// // SAFETY: `page` is 4096 writable bytes and outlives the registration.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     assert_eq!(aclrtHostRegisterV2(ptr, 4096, ACL_HOST_REG_PINNED), 0);
///     assert_eq!(control::host_stats().unwrap().registrations, 1);
///     assert_eq!(aclrtHostUnregister(ptr), 0);
/// }
/// assert_eq!(control::host_stats().unwrap().registrations, 0);
/// ```
pub fn host_stats() -> Result<HostStats, ControlError> {
    Ok(host_stats_impl()?)
}

/// The device's simulated clock now, in ns.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, control};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(0), 0);
/// #   let (mut stream, mut event) = (ptr::null_mut(), ptr::null_mut());
/// #   assert_eq!(aclrtCreateStream(&mut stream), 0);
/// #   assert_eq!(aclrtCreateEvent(&mut event), 0);
///     assert_eq!(aclrtRecordEvent(event, stream), 0);
///     assert_eq!(aclrtSynchronizeEvent(event), 0);
///     let mut recorded_us = 0;
///     assert_eq!(aclrtEventGetTimestamp(event, &mut recorded_us), 0);
///     assert!(recorded_us <= control::now_ns(0).unwrap() / 1000, "on the same clock, earlier");
/// }
/// ```
pub fn now_ns(device: i32) -> Result<u64, ControlError> {
    Ok(now_ns_impl(device)?)
}
