//! The in-process simulator (npu-sim): configuration, typed controls for tests, kernels and
//! the timeline trace (feature `sim`).
//!
//! These act on the simulator linked into this process, the backend
//! [`Backend::Simulator`]. The controls take npu-rs's own
//! types ([`Device`], [`Stream`]) and return [`npu::Result`](crate::Result); a device of another
//! backend (CANN, or a simulator loaded as a library through `NPU_ACL_LIB`) is refused with
//! [`Error::InvalidArgument`]. docs/simulator.md describes the
//! simulated device.
//!
//! - [`SimConfig`] / [`TimingModel`]: process-level configuration (device count, memory per
//!   device, SoC name, timing model). It is fixed when the simulator first initialises, so
//!   install it before the first device call, and give tests that need their own
//!   configuration a process of their own (a separate test file); `NPU_SIM_CONFIG` sets the
//!   same options from the environment.
//! - Faults: [`fail_task`] (the nth device task of a stream fails with a code), [`fail_kernel`]
//!   (the nth launch of a kernel on a device, on any stream, fails), [`clear_faults`] (disarms
//!   what those two armed and has not fired), [`lose`] (a device
//!   is lost), [`inject_memory_error`] (memory gets an uncorrectable error), [`fail_next_alloc`]
//!   and [`fail_next_host_alloc`].
//! - Ordering: [`hold`] keeps a device from starting work until the returned [`Hold`] is
//!   dropped (also when the test panics), so work queued meanwhile starts at one instant.
//! - Timing and counters: [`set_timing`], [`set_kernel_duration`], [`now_ns`],
//!   [`device_stats`] / [`host_stats`] (live allocations, for leak checks after
//!   [`flush_releases`]).
//! - [`kernel`]: the kernel ABI, in-process registration and the shipped kernels
//!   (`vector_add_f32`, `scale_f32`, `reduce_sum_f32`).
//! - [`trace`]: a Chrome/Perfetto trace of every device task on the simulated clock, written
//!   at exit when `NPU_TRACE=path.json` is set, or by a [`trace::Guard`] when dropped.
//!
//! ```
//! use npu::prelude::*;
//! use npu::Stream;
//! use npu::{error::AclCode, sim};
//!
//! # tokio_test::block_on(async {
//! let device = Device::open(0)?;
//! let ctx = device.primary_context();
//! let stream = Stream::new(ctx)?;
//! sim::fail_task(&stream, 1, AclCode(507015))?; // the next task fails with an AI Core trap
//! let err = stream.memset(DeviceBuffer::<u8>::new(ctx, 64)?, 0).await.unwrap_err();
//! assert_eq!(err.acl_code(), Some(AclCode(507015)));
//! # Ok::<(), npu::Error>(())
//! # })?;
//! # Ok::<(), npu::Error>(())
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use npu_core::{AclCode, Backend, Device, Error, Result};
use npu_mem::DeviceSlice;
use npu_stream::Stream;

pub use npu_sim::control::{ControlError, DeviceStats, HostStats};
pub use npu_sim::{ConfigError, JsonError, SimConfig, TimingModel, config, kernel, trace};

/// The simulator's raw controls (`i32` device ids, raw stream handles), as npu-sim exports
/// them; the typed functions of this module are the ones to use.
#[doc(hidden)]
pub use npu_sim::control as raw_control;

/// The earlier path of [`raw_control`], kept so older code compiles.
#[doc(hidden)]
pub use npu_sim::control;

/// The device's id for the raw controls, if it is a device of the in-process simulator;
/// refusals name `api` and `argument`, what the caller passed the device as (`device`, or the
/// `stream` it is a stream of).
fn simulated(api: &'static str, argument: &'static str, device: &Device) -> Result<i32> {
    if device.runtime().backend() != &Backend::Simulator {
        return Err(Error::invalid(
            api,
            argument,
            format!(
                "is on the {} backend; the simulator's controls act on the in-process \
                 simulator only",
                device.runtime().backend()
            ),
        ));
    }
    i32::try_from(device.id())
        .map_err(|_| Error::invalid(api, argument, "is beyond the simulator's device ids"))
}

/// The gate [`hold`] closed: the device starts no work until this is dropped or
/// [`released`](Hold::release).
///
/// Dropping it during a panic releases the device too, so a failing test never leaves the
/// device held for the tests after it.
///
/// ```
/// use npu::prelude::*;
/// use npu::Stream;
///
/// # tokio_test::block_on(async {
/// let device = Device::open(1)?;
/// let ctx = device.primary_context();
/// let stream = Stream::new(ctx)?;
/// let held = npu::sim::hold(&device)?;
/// // Queued while held: a test can now look at the operation before the device runs it.
/// let op = stream.memset(DeviceBuffer::<u8>::new(ctx, 16)?, 5);
/// assert!(!op.is_complete());
/// drop(held); // releases the device, as `release` does
/// assert_eq!(op.await?.to_vec_blocking()?, [5; 16]);
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
#[must_use = "the device is released as soon as the Hold is dropped"]
#[derive(Debug)]
pub struct Hold {
    device: i32,
    released: bool,
}

impl Hold {
    /// Releases the device now and reports whether that worked (dropping releases too, and
    /// logs a failure instead).
    ///
    /// ```
    /// use npu::prelude::*;
    /// use npu::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let device = Device::open(1)?;
    /// let ctx = device.primary_context();
    /// let stream = Stream::new(ctx)?;
    /// let held = npu::sim::hold(&device)?;
    /// let op = stream.memset(DeviceBuffer::<u8>::new(ctx, 64)?, 0);
    /// assert!(!op.is_complete(), "the device starts nothing while held");
    /// held.release()?;
    /// op.await?;
    /// # Ok::<(), npu::Error>(())
    /// # })?;
    /// # Ok::<(), npu::Error>(())
    /// ```
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        Ok(unhold(self.device)?)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.released
            && let Err(err) = unhold(self.device)
        {
            npu_core::log!(warn, %err, device = self.device, "releasing a held simulated device failed");
        }
    }
}

/// Holds `device`: tasks queued on it wait until the returned [`Hold`] is dropped.
///
/// Holds of one device nest: it runs again once every one of them is gone. Work queued on
/// other devices is not held.
///
/// ```
/// use npu::prelude::*;
/// use npu::Stream;
///
/// let device = Device::open(1)?;
/// let result = std::panic::catch_unwind(|| {
///     let _held = npu::sim::hold(&device).unwrap();
///     panic!("a failing test");
/// });
/// assert!(result.is_err());
/// // The panic dropped the hold: the device runs work again.
/// let ctx = device.primary_context();
/// let memset = Stream::new(ctx)?.memset(DeviceBuffer::<u8>::new(ctx, 8)?, 3);
/// let buffer = tokio_test::block_on(memset)?;
/// assert_eq!(buffer.to_vec_blocking()?, [3; 8]);
/// # Ok::<(), npu::Error>(())
/// ```
pub fn hold(device: &Device) -> Result<Hold> {
    let id = simulated("npu::sim::hold", "device", device)?;
    let mut holds = holds();
    let count = holds.entry(id).or_default();
    if *count == 0 {
        control::hold(id)?;
    }
    *count += 1;
    Ok(Hold {
        device: id,
        released: false,
    })
}

/// The live [`Hold`]s of each device: the simulator's gate is open or closed, not counted.
fn holds() -> MutexGuard<'static, BTreeMap<i32, usize>> {
    static HOLDS: Mutex<BTreeMap<i32, usize>> = Mutex::new(BTreeMap::new());
    HOLDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops one hold of `device`, opening its gate with the last one.
fn unhold(device: i32) -> std::result::Result<(), ControlError> {
    let mut holds = holds();
    let count = holds.entry(device).or_default();
    *count = count.saturating_sub(1);
    if *count == 0 {
        control::release(device)?;
    }
    Ok(())
}

/// Makes the `nth` device task (1 = the next one) submitted to `stream` from now on fail with
/// `code` instead of running. Device tasks are the copies, memsets and kernels operations
/// queue; the events and host callbacks npu-rs queues around them do not count, so under
/// every [`Strategy`](crate::Strategy) a memset or a single copy is one task. The operation
/// that task belongs to fails with an [`AclError`](crate::AclError) of that code; the stream's
/// failure mode decides what happens to the rest of its work. The codes a synchronisation
/// returns when its wait runs out ([`AclCode::STREAM_SYNC_TIMEOUT`],
/// [`AclCode::EVENT_SYNC_TIMEOUT`]) are refused, as an `nth` of 0 is, with
/// [`Error::InvalidArgument`] naming `npu::sim::fail_task` and the argument: no task fails
/// with them, and every wait on a task failed with one would take it for a task still
/// running. So is (as an ACL error) an `nth` that counts past the last task number the stream can give (its
/// tasks are numbered by a `u64`).
///
/// ```
/// use npu::prelude::*;
/// use npu::Stream;
/// use npu::{error::AclCode, sim};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// sim::fail_task(&stream, 2, AclCode(507015))?; // the second task from now
/// let first = stream.memset(DeviceBuffer::<u8>::new(&ctx, 8)?, 1);
/// let second = stream.memset(DeviceBuffer::<u8>::new(&ctx, 8)?, 2);
/// assert!(first.await.is_ok());
/// assert_eq!(second.await.unwrap_err().acl_code(), Some(AclCode(507015)));
/// let from_zero = sim::fail_task(&stream, 0, AclCode(507015));
/// assert!(matches!(from_zero, Err(npu::Error::InvalidArgument { argument: "nth", .. })));
/// let a_waits_code = sim::fail_task(&stream, 1, AclCode::EVENT_SYNC_TIMEOUT);
/// assert!(matches!(a_waits_code, Err(npu::Error::InvalidArgument { argument: "code", .. })));
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn fail_task(stream: &Stream, nth: u64, code: AclCode) -> Result<()> {
    const API: &str = "npu::sim::fail_task";
    simulated(API, "stream", &stream.context().device())?;
    check_nth_and_code(API, nth, code)?;
    Ok(control::fail_task(stream.as_raw(), nth, code.0)?)
}

/// The checks [`fail_task`] and [`fail_kernel`] share, named after `api`: `nth` counts from 1,
/// and `code` is one a task may fail with.
fn check_nth_and_code(api: &'static str, nth: u64, code: AclCode) -> Result<()> {
    if nth == 0 {
        return Err(Error::invalid(api, "nth", "counts from 1 (the next one)"));
    }
    control::check_fault_code(code.0).map_err(|err| Error::invalid(api, "code", err.message))
}

/// Makes the `nth` launch (1 = the next) of the kernel `name` on `device`, on whichever of its
/// streams, fail with `code` instead of running, as [`fail_task`] fails a task: the operation
/// the launch belongs to fails with an [`AclError`](crate::AclError) of that code, and the
/// stream's failure mode decides what happens to the rest of its work. It serves code whose
/// streams the test does not choose, such as a service taking them from a
/// [`StreamPool`](crate::stream::StreamPool).
///
/// A launch counts when it is queued to run on a stream of `device`: every launch npu-rs
/// makes ([`Stream::launch`] and the rest, whatever the launch function), and each kernel of
/// a captured model each time an execution of it queues its tasks, under the name it was
/// captured with (a task update that changes its function takes effect only as it runs).
/// Capturing a launch is not one, nor is a launch on a stream that keeps its tasks for a model
/// and runs none, on a stream bound to a model instance being built, or staged by a task
/// group's update; a model with branches (conditional or switch tasks) runs as one program
/// whose kernels do not count. A fault fires when its launch is queued, not when it runs: a
/// launch queued behind held work, or later aborted, has used it up. Launches of one stream
/// count in their order; launches racing on several streams count in the order they reach
/// the device, so exactly one of them fails. Faults count on their own: two armed for the same
/// launch both fire with it, and a launch a [`fail_task`] fault also targets fails with that
/// fault's code and uses this one up too.
///
/// The name is matched as launches are queued, not looked up now: a fault may be armed before
/// the module holding the kernel is loaded, and a misspelt name is armed anyway and never
/// fires. [`clear_faults`] says how many faults had not fired, so a test expecting every fault
/// to fire can check it returns 0. An empty `name`, an `nth` of 0 and the codes [`fail_task`]
/// refuses are refused with [`Error::InvalidArgument`] naming `npu::sim::fail_kernel`.
///
/// A device's faults are shared by every example in the process (another launching the same
/// kernel, or arming a fault, on the device), so this one runs as a program of its own:
///
/// ```standalone_crate
/// use npu::prelude::*;
/// use npu::Stream;
/// use npu::{error::AclCode, sim};
///
/// # tokio_test::block_on(async {
/// let device = Device::open(0)?;
/// let ctx = device.primary_context();
/// // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
/// let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }?;
/// let scale = module.function(sim::kernel::SCALE_F32)?;
/// let (first, second) = (Stream::new(ctx)?, Stream::new(ctx)?);
/// sim::fail_kernel(&device, sim::kernel::SCALE_F32, 2, AclCode(507015))?; // the second launch
/// let x = DeviceBuffer::<f32>::new(ctx, 4)?;
/// // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x; x holds 4.
/// let (x, _, _) = unsafe { first.launch(&scale, 1, (x, 4u64, 2.0f32)) }.await?;
/// // SAFETY: as above.
/// let err = unsafe { second.launch(&scale, 1, (x, 4u64, 2.0f32)) }.await.unwrap_err();
/// assert_eq!(err.acl_code(), Some(AclCode(507015)), "on another stream: counted on the device");
/// let refused = sim::fail_kernel(&device, sim::kernel::SCALE_F32, 0, AclCode(507015));
/// assert!(matches!(refused, Err(npu::Error::InvalidArgument { argument: "nth", .. })));
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn fail_kernel(device: &Device, name: &str, nth: u64, code: AclCode) -> Result<()> {
    const API: &str = "npu::sim::fail_kernel";
    let id = simulated(API, "device", device)?;
    check_kernel_name(API, name)?;
    check_nth_and_code(API, nth, code)?;
    Ok(control::fail_kernel(id, name, nth, code.0)?)
}

/// Refuses, as an error of `api` naming `name`, a name no kernel can have (the simulator's
/// rule): checked here so the error is typed instead of the simulator's parameter code.
fn check_kernel_name(api: &'static str, name: &str) -> Result<()> {
    control::check_kernel_name(name).map_err(|err| Error::invalid(api, "name", err.message))
}

/// Disarms every fault armed on `device` that has not fired: those [`fail_task`] armed on any
/// live stream of it, those [`fail_kernel`] armed on it, and a [`fail_next_alloc`] not yet
/// used. Returns how many it disarmed (0: every fault armed before fired, or was cleared
/// already). A fault fires when its task is queued (not when it runs). Faults of other devices
/// stay armed, and a device's last for the process, across `aclrtResetDevice` and a new
/// runtime, until they fire or are cleared: a suite clears them between cases.
///
/// For a test that arms a fault for work that may not come (a batch the service never
/// launches) and must not leave it to the tests after it, or that checks every fault it armed
/// was hit.
///
/// A device's faults are shared by every example in the process (another launching the same
/// kernel, or arming a fault, on the device), so this one runs as a program of its own:
///
/// ```standalone_crate
/// use npu::prelude::*;
/// use npu::Stream;
/// use npu::{error::AclCode, sim};
///
/// # tokio_test::block_on(async {
/// let device = Device::open(1)?;
/// let ctx = device.primary_context();
/// let stream = Stream::new(ctx)?;
/// sim::fail_task(&stream, 1, AclCode(507015))?;
/// sim::fail_kernel(&device, "a kernel never launched", 1, AclCode(507015))?;
/// assert_eq!(sim::clear_faults(&device)?, 2);
/// stream.memset(DeviceBuffer::<u8>::new(ctx, 8)?, 1).await?; // disarmed: it runs
/// assert_eq!(sim::clear_faults(&device)?, 0);
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn clear_faults(device: &Device) -> Result<u64> {
    let id = simulated("npu::sim::clear_faults", "device", device)?;
    Ok(control::clear_faults(id)?)
}

/// Loses `device`, as if it had failed: running and queued work fails, and every later call
/// on it fails with `ACL_ERROR_RT_LOST_HEARTBEAT` (507010). A lost device stays lost for the
/// rest of the process.
///
/// It returns once every task that was running on the device has finished (the simulator's
/// kernels are host code and cannot be stopped), so that whoever sees the loss may free the
/// memory that work used: do not call it from the thread that lets such a task finish (the
/// one that opens a test kernel's gate, say), nor from an async task, whose worker it would
/// hold meanwhile.
///
/// Losing is final for the process, so this example runs as a program of its own
/// (examples/test_harness.rs gives a test suite's lost device a process of its own too):
///
/// ```standalone_crate
/// use npu::prelude::*;
/// use npu::Stream;
/// use npu::error::AclCode;
///
/// # tokio_test::block_on(async {
/// let device = Device::open(1)?;
/// let stream = Stream::new(device.primary_context())?;
/// npu::sim::lose(&device)?;
/// let err = stream.synchronize().await.unwrap_err();
/// assert_eq!(err.acl_code(), Some(AclCode::DEVICE_LOST));
/// assert!(Stream::new(device.primary_context()).is_err(), "nothing new starts either");
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn lose(device: &Device) -> Result<()> {
    Ok(control::lose_device(simulated(
        "npu::sim::lose",
        "device",
        device,
    )?)?)
}

/// Makes the next device-memory allocation on `device` fail with
/// `ACL_ERROR_RT_MEMORY_ALLOCATION`.
///
/// ```
/// use npu::prelude::*;
///
/// let device = Device::open(1)?;
/// npu::sim::fail_next_alloc(&device)?;
/// let err = DeviceBuffer::<u8>::new(device.primary_context(), 64).unwrap_err();
/// assert_eq!(err.acl_code(), Some(npu::error::AclCode(207001)));
/// assert!(DeviceBuffer::<u8>::new(device.primary_context(), 64).is_ok(), "only the next");
/// # Ok::<(), npu::Error>(())
/// ```
pub fn fail_next_alloc(device: &Device) -> Result<()> {
    let id = simulated("npu::sim::fail_next_alloc", "device", device)?;
    Ok(control::fail_next_alloc(id)?)
}

/// Gives `bytes` of `memory` (a byte range from its start) an uncorrectable memory error, as
/// the device's ECC would find one. From now on a copy, memset, value write or wait, or
/// reduction that touches the range fails with [`AclCode::DEVICE_MEM_ERROR`]
/// ([`Error::is_memory_error`]) without touching memory. A kernel's buffers are not checked:
/// npu-rs passes a launch's arguments packed on the host, and the simulator cannot tell which
/// memory a kernel reads or writes.
///
/// The error stays until the range is repaired or the allocation is freed. A block of a
/// [`DevicePool`](crate::DevicePool) one of whose operations failed with the error is repaired
/// by the pool when it comes back (counted in `PoolStats::repaired`); a pooled block dropped
/// without such a failure goes back to the pool's cache with the error, to its next owner.
/// Until then the device reports a memory error in the detail of every fault on it
/// (`aclrtGetErrorVerbose`), the faults of other streams included: free or repair the memory
/// before a test that checks what kind of fault it got. Marking a range that starts where a
/// marked one does keeps the longer of the two.
///
/// For testing what your code does with a memory error on memory it uses: the simulator's
/// `inject_mem_uce` control, checked. An empty range, or one past the memory's end (its
/// `len()` elements, whatever its `byte_len` says), is refused with [`Error::InvalidArgument`].
///
/// ```
/// use npu::prelude::*;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = NpuStream::new(&ctx)?;
/// let buffer = DeviceBuffer::<u32>::new(&ctx, 1024)?;
/// npu::sim::inject_memory_error(&buffer, 64..128)?;
/// let err = stream.memset(buffer, 0).await.unwrap_err();
/// assert!(err.error.is_memory_error(), "{err}");
/// assert!(err.value.is_some(), "the buffer comes back, to be freed (which clears the error)");
/// let past_the_end = npu::sim::inject_memory_error(&DeviceBuffer::<u32>::new(&ctx, 4)?, 8..17);
/// assert!(matches!(past_the_end, Err(npu::Error::InvalidArgument { argument: "bytes", .. })));
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn inject_memory_error<M: DeviceSlice>(memory: &M, bytes: Range<usize>) -> Result<()> {
    const API: &str = "npu::sim::inject_memory_error";
    simulated(API, "memory", &memory.context().device())?;
    // `len()` elements, never the implementation's own `byte_len` (which `Memory`'s contract
    // does not cover): a range past them would mark memory another value owns.
    let held = npu_mem::bytes_of(crate::SEAL, memory);
    if bytes.is_empty() || bytes.end > held {
        return Err(Error::invalid(
            API,
            "bytes",
            format!("{bytes:?} is not a non-empty range within the memory's {held} bytes"),
        ));
    }
    let start = memory.addr().cast_mut().wrapping_byte_add(bytes.start);
    Ok(control::inject_mem_uce(start, bytes.len())?)
}

/// Makes the next pinned host allocation in the process fail with `code`. Code 0, which is
/// success and no failure, is refused with [`Error::InvalidArgument`] naming
/// `npu::sim::fail_next_host_alloc` and `code`, and arms nothing.
///
/// ```
/// use npu::prelude::*;
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// npu::sim::fail_next_host_alloc(npu::error::AclCode(207001))?;
/// let err = PinnedBuffer::<u8>::new(&ctx, 64).unwrap_err();
/// assert_eq!(err.acl_code(), Some(npu::error::AclCode(207001)));
/// let refused = npu::sim::fail_next_host_alloc(npu::error::AclCode(0));
/// assert!(matches!(refused, Err(npu::Error::InvalidArgument { argument: "code", .. })));
/// # Ok::<(), npu::Error>(())
/// ```
pub fn fail_next_host_alloc(code: AclCode) -> Result<()> {
    if code.0 == 0 {
        return Err(Error::invalid(
            "npu::sim::fail_next_host_alloc",
            "code",
            "is 0, success: an allocation fails with an error code",
        ));
    }
    Ok(control::fail_next_host_alloc(code.0)?)
}

/// Gives `device` a timing model (`None`: work runs as fast as the host can).
///
/// ```
/// use npu::prelude::*;
/// use npu::sim::{self, TimingModel};
///
/// let device = Device::open(1)?;
/// sim::set_timing(&device, Some(TimingModel::default().h2d_bandwidth(1_000_000_000)))?;
/// sim::set_timing(&device, None)?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn set_timing(device: &Device, model: Option<TimingModel>) -> Result<()> {
    let id = simulated("npu::sim::set_timing", "device", device)?;
    Ok(control::set_timing(id, model)?)
}

/// Sets how long the kernel `name` takes on `device` (turning the timing model on, with no
/// other costs, if it was off). An empty `name`, or one holding a NUL, is refused with
/// [`Error::InvalidArgument`] naming `npu::sim::set_kernel_duration` and `name`, as
/// [`fail_kernel`] refuses it: no kernel is named so.
///
/// ```
/// use std::time::Duration;
/// use npu::prelude::*;
///
/// let device = Device::open(1)?;
/// npu::sim::set_kernel_duration(&device, "scale_f32", Duration::from_micros(50))?;
/// let refused = npu::sim::set_kernel_duration(&device, "", Duration::from_micros(50));
/// assert!(matches!(refused, Err(npu::Error::InvalidArgument { argument: "name", .. })));
/// npu::sim::set_timing(&device, None)?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn set_kernel_duration(device: &Device, name: &str, duration: Duration) -> Result<()> {
    const API: &str = "npu::sim::set_kernel_duration";
    let id = simulated(API, "device", device)?;
    check_kernel_name(API, name)?;
    Ok(control::set_kernel_duration(id, name, duration)?)
}

/// Live counters of `device`: allocations, bytes, streams, events, contexts (the primary
/// context while the device is set, and each explicit context until it is destroyed; see
/// [`DeviceStats::live_contexts`]), whether it is lost.
///
/// ```
/// use npu::prelude::*;
///
/// let device = Device::open(1)?;
/// let before = npu::sim::device_stats(&device)?.live_allocations;
/// let buffer = DeviceBuffer::<u8>::new(device.primary_context(), 1000)?;
/// assert_eq!(npu::sim::device_stats(&device)?.live_allocations, before + 1);
/// drop(buffer);
/// npu::sim::flush_releases();
/// assert_eq!(npu::sim::device_stats(&device)?.live_allocations, before);
/// # Ok::<(), npu::Error>(())
/// ```
pub fn device_stats(device: &Device) -> Result<DeviceStats> {
    let id = simulated("npu::sim::device_stats", "device", device)?;
    Ok(control::device_stats(id)?)
}

/// Live counters of the host side: pinned allocations and registrations.
///
/// ```
/// let stats = npu::sim::host_stats()?;
/// let _ = stats.pinned_allocations;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn host_stats() -> Result<HostStats> {
    Ok(control::host_stats()?)
}

/// The simulated clock of `device`, in nanoseconds.
///
/// ```
/// use npu::prelude::*;
///
/// let device = Device::open(0)?;
/// let (a, b) = (npu::sim::now_ns(&device)?, npu::sim::now_ns(&device)?);
/// assert!(b >= a);
/// # Ok::<(), npu::Error>(())
/// ```
pub fn now_ns(device: &Device) -> Result<u64> {
    Ok(control::now_ns(simulated(
        "npu::sim::now_ns",
        "device",
        device,
    )?)?)
}

/// Waits until every release deferred so far (memory freed once the device was done with it,
/// dropped operations' values) has run on npu-rs's reaper thread.
///
/// For tests that count live allocations: after dropping buffers, call this before reading
/// [`device_stats`] or [`host_stats`]. It waits for npu-rs's own reaper, so it works on every
/// backend. Called on the reaper thread itself (from a tracing subscriber or a waker that the
/// reaper runs), it returns at once instead of waiting for itself; so it does from code
/// npu-rs runs under one of its locks (a tracing subscriber's callback from an ACL call made
/// under a stream's submission lock, say), since a release queued before it may need that
/// lock.
///
/// ```
/// npu::sim::flush_releases(); // nothing deferred: returns at once
/// ```
///
/// A [`DevicePool`](crate::DevicePool) is the exception: once its last clone and last block
/// are gone, it gives its memory back to the runtime on a thread of its own (destroying a
/// runtime pool synchronises the device, which no release may wait for), and this does not
/// wait for that thread, so [`device_stats`] counts the pool's memory until the thread has
/// run. Check code that allocates from a pool by the pool's own counters while the pool
/// lives: once its work is awaited, nothing `allocated` and no block `awaiting_blocks`. Once
/// it is dropped, [`wait_for_teardowns`](crate::runtime::wait_for_teardowns) waits for that
/// thread (it counts as a teardown), and [`device_stats`] is back where it started then.
///
/// ```
/// use npu::prelude::*;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (stream, pool) = (NpuStream::new(&ctx)?, DevicePool::new(&ctx)?);
/// let block = stream.memset(pool.alloc::<u8>(&stream, 4096).await?, 0).await?;
/// drop(block);
/// npu::sim::flush_releases();
/// let at_rest = pool.stats().cache;
/// assert_eq!((at_rest.allocated, at_rest.awaiting_blocks), (0, 0), "nothing leaked");
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
///
/// The device's own count, once the pool is gone (a program of its own, so that no other
/// example allocates on the device meanwhile):
///
/// ```standalone_crate
/// use std::time::Duration;
/// use npu::prelude::*;
///
/// # tokio_test::block_on(async {
/// let device = Device::open(0)?;
/// let ctx = device.primary_context();
/// let stream = NpuStream::new(ctx)?;
/// npu::sim::flush_releases();
/// let before = npu::sim::device_stats(&device)?.live_allocations;
/// let pool = DevicePool::new(ctx)?;
/// drop(stream.memset(pool.alloc::<u8>(&stream, 4096).await?, 0).await?);
/// drop(pool);
/// npu::runtime::wait_for_teardowns(Duration::from_secs(30))?; // the pool's own thread
/// npu::sim::flush_releases();
/// assert_eq!(npu::sim::device_stats(&device)?.live_allocations, before, "nothing leaked");
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
///
/// Nor does it wait for a pool's repairs: a block one of whose operations failed with a
/// repairable memory error (an uncorrectable error the runtime lists, [`AclCode::DEVICE_MEM_ERROR`])
/// is examined for the error, and repaired or quarantined, on a thread of the pool's own (the
/// examination asks the runtime, which no release may wait for), and counts in
/// `awaiting_blocks` until then, however long ago its operation was awaited. (A block whose
/// error has no repair, an HBM multi-bit ECC error, is quarantined at once.) Await the pool's
/// `settled()` instead, bounded: it resolves once every block is back, repairs included (and
/// it is not the simulator's: it works the same on CANN). Under a paused Tokio clock
/// (`start_paused`), a `tokio::time::timeout` around it fires as soon as the runtime goes
/// idle, since nothing keeps the clock while a repair runs: bound it there with a thread of
/// your own (for example `spawn_blocking` and a channel's `recv_timeout`) instead.
///
/// ```
/// use npu::prelude::*;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (stream, pool) = (NpuStream::new(&ctx)?, DevicePool::new(&ctx)?);
/// let block = pool.alloc::<u8>(&stream, 4096).await?;
/// npu::sim::inject_memory_error(&block, 0..16)?;
/// drop(stream.memset(block, 0).await.unwrap_err()); // hands the block back to the pool
/// let bound = std::time::Duration::from_secs(30);
/// tokio::time::timeout(bound, pool.settled()).await.expect("the repair ended");
/// assert_eq!(pool.stats().cache.repaired, 1, "repaired, and cached for reuse");
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
pub fn flush_releases() {
    npu_core::reaper::flush();
}
