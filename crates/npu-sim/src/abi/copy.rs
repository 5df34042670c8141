//! Memset and memcpy (1D and 2D, synchronous and on streams).

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use crate::capture;
use crate::context;
use crate::device::Device;
use crate::error::{Res, SimError, ensure, fail, guard, non_null};
use crate::memory::{Located, PtrClass};
use crate::sim::{Sim, sim};
use crate::stream::Stream;
use crate::sync::{Bell, wait_until};
use crate::task::{Direction, Extent, Op, Owned, Source, Task};
use crate::trace;

/// Most rows of a 2D copy.
const MAX_2D_HEIGHT: usize = 5 * 1024 * 1024;
/// Widest row of a 2D copy.
const MAX_2D_WIDTH: usize = 5_000_000;

/// Where an operation runs: on the calling thread (synchronous APIs) or on a stream.
pub(super) enum On {
    Caller(Arc<Device>),
    Stream(Arc<Stream>),
}

impl On {
    /// The current context's device for `None`, else the stream after the submission checks.
    pub(super) fn resolve(sim: &Sim, stream: Option<aclrtStream>) -> Res<On> {
        Ok(match stream {
            None => On::Caller(context::current(sim)?.device.clone()),
            Some(stream) => On::Stream(context::submit_stream(sim, stream)?),
        })
    }

    fn device(&self) -> &Arc<Device> {
        match self {
            On::Caller(device) => device,
            On::Stream(stream) => &stream.device,
        }
    }

    /// Runs the task: synchronously, or as a stream task — except that work involving
    /// pageable host memory runs synchronously once the stream's earlier work is done (CANN's
    /// documented fallback).
    /// These are the functions the capture modes restrict (aclmdlRICaptureThreadExchangeMode):
    /// refused with 107030 (synchronous) or 107041 (the synchronous fallback) on a thread a
    /// capture forbids them; a fallback on a capturing stream cannot be captured (107041, and
    /// the capture is invalid).
    fn run(&self, sim: &Sim, task: Task, pageable: bool) -> Res<()> {
        match self {
            On::Caller(device) => {
                capture::check_unsafe_call(
                    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
                    "a synchronous copy or memset",
                )?;
                run_now(sim, device, None, task)
            }
            On::Stream(stream) if pageable => {
                const WHAT: &str =
                    "an asynchronous copy or memset of pageable host memory (done synchronously)";
                if let Some(capture) = stream.capture() {
                    let error = SimError::new(
                        ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                        format!(
                            "{WHAT} cannot be captured (stream {} is being captured)",
                            stream.id
                        ),
                    );
                    return capture.refuse(error);
                }
                capture::check_unsafe_call(ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC, WHAT)?;
                stream.wait_idle(None)?;
                run_now(sim, &stream.device, Some(stream), task)
            }
            On::Stream(stream) => stream.submit(task),
        }
    }
}

/// Runs a memory task on the calling thread, paced by the device's timing model: the caller is
/// held until the task's simulated end. `stream` is the stream of an asynchronous call done
/// synchronously (pageable memory, aclrtMemsetD32Async of pinned memory).
///
/// The call waits for device work twice (the device's fence, then its own simulated duration),
/// and ends early, failing, when that work stops being the device's to finish: the device is
/// lost (507010, as a stream's task the loss abandons: the caller cannot count on the copy it
/// did not see end), an aclrtDeviceTaskAbort of the device begins dropping its work, which
/// stops the running tasks and this one with them, or `stream` is aborted (107023, the code
/// the reference gives a synchronous wait an abort ends; the memory may hold part of the work
/// once the copy has begun, as on a device stopped mid-copy). A call made while a device task
/// abort runs is refused (107022), as a submission is.
pub(crate) fn run_now(sim: &Sim, device: &Device, stream: Option<&Stream>, task: Task) -> Res<()> {
    // Read before the abort flag: an abort that begins after the flag was read counts.
    let aborts = device.task_abort_count();
    let stream_aborts = stream.map(|stream| stream.abort_count());
    ensure!(
        !device.is_aborting_tasks(),
        ACL_ERROR_RT_DEVICE_TASK_ABORT,
        "a synchronous copy or memset on device {} while an aclrtDeviceTaskAbort of it runs",
        device.id
    );
    let stopped = || -> Option<SimError> {
        if device.is_lost() {
            return Some(device.loss_error());
        }
        if device.stops_since(aborts) {
            return Some(SimError::new(
                ACL_ERROR_RT_STREAM_ABORT,
                format!(
                    "a synchronous copy or memset on device {} was stopped by an \
                     aclrtDeviceTaskAbort of the device",
                    device.id
                ),
            ));
        }
        let stream = stream?;
        if stream_aborts != Some(stream.abort_count()) {
            return Some(stream.doom_error(ACL_ERROR_RT_STREAM_ABORT));
        }
        stream.discarding().map(|code| stream.doom_error(code))
    };
    device.fence(sim);
    // The fence waits for nothing an abort drops (an abort too lets the tasks taken and
    // running finish), but this call is work not started yet, which an abort drops.
    if let Some(error) = stopped() {
        return Err(error);
    }
    let start_ns = device.clock.now_ns();
    {
        let Some(_admitted) = device.admit() else {
            return Err(device.loss_error());
        };
        let result = task.run_memory(&sim.memory);
        crate::device::MEMORY_BELL.ring();
        result?;
    }
    let end_ns = match device.clock.timing() {
        Some(model) => {
            let end_ns = start_ns.saturating_add(task.duration_ns(&model));
            let wake = device.clock.instant_of(end_ns);
            let mut listens = vec![device.lost_bell.any(), device.task_abort_bell.any()];
            if let Some(stream) = stream {
                listens.extend(stream.listens(Bell::RING_ONLY));
            }
            if let Some(error) = wait_until(&listens, Some(wake), stopped) {
                return Err(error);
            }
            end_ns
        }
        None => device.clock.now_ns(),
    };
    trace::record_task(device.id, 0, &task, start_ns, end_ns, false);
    Ok(())
}

/// The copy direction the runtime uses for these pointers, given the requested kind.
///
/// Pinned/registered host and device pointers force the direction whatever the kind says;
/// with unregistered (pageable) host memory only kinds consistent with the pointers (or
/// DEFAULT) are accepted.
fn correct_kind(src: PtrClass, dst: PtrClass, kind: aclrtMemcpyKind) -> Res<Direction> {
    use Direction::*;
    use PtrClass::{Device as Dev, Host, Unregistered as Pageable};
    let to_device = matches!(
        kind,
        ACL_MEMCPY_HOST_TO_DEVICE | ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE
    );
    // Within one device or between two: device-to-device kinds, the pointers decide which.
    let device_to_device = matches!(
        kind,
        ACL_MEMCPY_DEVICE_TO_DEVICE
            | ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
            | ACL_MEMCPY_INTER_DEVICE_TO_DEVICE
    );
    let accepted = |ok: bool, dir: Direction| {
        if ok || kind == ACL_MEMCPY_DEFAULT {
            Ok(dir)
        } else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "copy kind {kind} does not match the pointers (source {src:?}, destination {dst:?})"
            )
        }
    };
    match (src, dst) {
        (Host, Dev(_)) => Ok(HostToDevice),
        (Dev(_), Host) => Ok(DeviceToHost),
        (Host, Host) => Ok(HostToHost),
        (Dev(_), Dev(_)) => Ok(DeviceToDevice),
        (Pageable, Dev(_)) => accepted(to_device || device_to_device, HostToDevice),
        (Dev(_), Pageable) => accepted(
            kind == ACL_MEMCPY_DEVICE_TO_HOST || device_to_device,
            DeviceToHost,
        ),
        (Pageable, _) | (_, Pageable) => accepted(kind == ACL_MEMCPY_HOST_TO_HOST, HostToHost),
    }
}

/// Refuses an address of a reserved virtual range that nothing is mapped at: it is neither
/// device memory nor host memory of the caller's.
/// Refuses, too, an address of memory the runtime gave out and took back (a freed allocation
/// still held back from reuse, a global of an unloaded binary): it is no host memory of the
/// caller's, and copying there as such would fault.
pub(super) fn check_mapped(sim: &Sim, class: PtrClass, ptr: usize) -> Res<()> {
    if class != PtrClass::Unregistered {
        return Ok(());
    }
    ensure!(
        !sim.vmm.reserved(ptr),
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:#x} is reserved virtual memory with no physical memory mapped at it"
    );
    // Device address windows the host's mapper does not use: unregistered there means freed.
    let in_device_window =
        super::managed::WINDOW.contains(&ptr) || crate::vmm::in_expect_window(ptr);
    ensure!(
        !in_device_window
            && !crate::quarantine::holds(ptr)
            && !crate::kernel::globals::retired(ptr),
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:#x} is memory the runtime no longer holds (freed, released, closed, or a global \
         of an unloaded binary)"
    );
    Ok(())
}

/// Fails if `class` is memory of a device that is lost.
fn check_alive(sim: &Sim, class: PtrClass) -> Res<()> {
    match class {
        PtrClass::Device(id) => sim.device(id.into())?.check_alive(),
        PtrClass::Host | PtrClass::Unregistered => Ok(()),
    }
}

/// Memory imported by key from a process of another device (`at`, the copy's `side`) takes
/// only asynchronous device-to-device copies of an explicit kind on `device`: the reference's
/// IPC constraints (no ACL_MEMCPY_DEFAULT, no copy to or from the host, no synchronous copy)
/// for an importer whose device is not the exporter's. 207000 otherwise.
fn check_import_use(
    at: &Located,
    side: &str,
    device: i32,
    kind: aclrtMemcpyKind,
    dir: Direction,
    synchronous: bool,
) -> Res<()> {
    let PtrClass::Device(owner) = at.class else {
        return Ok(());
    };
    if !at.imported || owner == device {
        return Ok(());
    }
    let refused = if kind == ACL_MEMCPY_DEFAULT {
        "an ACL_MEMCPY_DEFAULT copy"
    } else if dir != Direction::DeviceToDevice {
        "a copy to or from the host"
    } else if synchronous {
        "a synchronous copy"
    } else {
        return Ok(());
    };
    fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "the {side} is IPC memory of device {owner} imported on device {device}, which \
         supports only asynchronous device-to-device copies of an explicit kind, not {refused}"
    )
}

/// A validated copy.
struct Plan {
    dir: Direction,
    owned: Owned,
    pageable: bool,
}

fn plan(
    sim: &Sim,
    current: &Device,
    synchronous: bool,
    dst: usize,
    src: usize,
    kind: aclrtMemcpyKind,
    extent: &Extent,
) -> Res<Plan> {
    let (dst_at, src_at) = (sim.memory.locate(dst), sim.memory.locate(src));
    let (dst_class, src_class) = (dst_at.class, src_at.class);
    check_mapped(sim, dst_class, dst)?;
    check_mapped(sim, src_class, src)?;
    let dir = correct_kind(src_class, dst_class, kind)?;
    let owned = Owned {
        dst: dst_at.check_range(dst, extent.span(extent.dpitch), "destination")?,
        src: src_at.check_range(src, extent.span(extent.spitch), "source")?,
    };
    for class in [src_class, dst_class] {
        check_alive(sim, class)?;
    }
    for (at, side) in [(&src_at, "source"), (&dst_at, "destination")] {
        check_import_use(at, side, current.id, kind, dir, synchronous)?;
    }
    if let (PtrClass::Device(a), PtrClass::Device(b)) = (src_class, dst_class)
        && a != b
    {
        for peer in [a, b] {
            check_peer_access(current, peer, || {
                format!("copy between device {a} and device {b}")
            })?;
        }
    }
    let pageable = src_class == PtrClass::Unregistered || dst_class == PtrClass::Unregistered;
    Ok(Plan {
        dir,
        owned,
        pageable,
    })
}

/// Refuses (ACL_ERROR_RT_NO_PERMISSION) work issued on `current` that reaches the memory of
/// device `peer`, unless `peer` is `current` itself or `current` has enabled peer access to
/// it; `what` names the work for the message.
fn check_peer_access(current: &Device, peer: i32, what: impl FnOnce() -> String) -> Res<()> {
    ensure!(
        peer == current.id || current.peer_enabled(peer),
        ACL_ERROR_RT_NO_PERMISSION,
        "{}: peer access from device {} to device {peer} is not enabled (aclrtDeviceEnablePeerAccess)",
        what(),
        current.id
    );
    Ok(())
}

/// An operation with nothing to do (a count of 0) whose arguments have passed: the stream of
/// an asynchronous form (`Some`) is looked up all the same, since a destroyed stream, or
/// another context's, is refused by every stream function whatever its other arguments ask.
/// The memory is not looked up: no byte of it is reached.
pub(super) fn nothing_to_do(stream: Option<aclrtStream>) -> Res<()> {
    if let Some(stream) = stream {
        context::submit_stream(sim()?, stream)?;
    }
    Ok(())
}

/// Checks shared by aclrtMemcpy and aclrtMemcpyAsync, in parameter order. `Ok(false)`:
/// nothing to do (count 0, once every argument has passed: a NULL pointer or a bad kind is
/// refused whatever the count).
fn check_memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> Res<bool> {
    non_null(dst, "dst")?;
    non_null(src, "src")?;
    ensure!(
        kind <= ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is not an aclrtMemcpyKind"
    );
    ensure!(
        count <= dest_max,
        ACL_ERROR_RT_PARAM_INVALID,
        "count ({count}) is greater than destMax ({dest_max})"
    );
    Ok(count != 0)
}

/// Every direction; the directions of asynchronous copies; of synchronous 2D copies.
pub(super) const ALL: &[Direction] = &[
    Direction::HostToHost,
    Direction::HostToDevice,
    Direction::DeviceToHost,
    Direction::DeviceToDevice,
];
pub(super) const ASYNC: &[Direction] = &[
    Direction::HostToDevice,
    Direction::DeviceToHost,
    Direction::DeviceToDevice,
];
const SYNC_2D: &[Direction] = &[Direction::HostToDevice, Direction::DeviceToHost];

/// A copy of `extent` after the argument checks: classifies the pointers, checks the direction
/// is one of `allowed` (207000 otherwise), and runs it where `on` says.
pub(super) fn copy(
    sim: &Sim,
    on: &On,
    dst: *mut c_void,
    src: *const c_void,
    kind: aclrtMemcpyKind,
    extent: Extent,
    allowed: &[Direction],
) -> Res<()> {
    let synchronous = matches!(on, On::Caller(_));
    let plan = plan(
        sim,
        on.device(),
        synchronous,
        dst as usize,
        src as usize,
        kind,
        &extent,
    )?;
    ensure!(
        allowed.contains(&plan.dir),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{} {}copies are not supported",
        plan.dir.name(),
        if extent.rows > 1 { "2D " } else { "" }
    );
    // Staged host data (HOST_TO_BUF_TO_DEVICE on a stream) belongs to the task, so the caller
    // may reuse its buffer at once, and it is not an allocation that could be freed. Pageable
    // memory is what the kind is for: once staged it takes no part in the copy, which is then
    // a stream task like one from pinned memory, not the synchronous fallback that waits for
    // the stream. Only a host source is staged; a device one is read in stream order.
    let staged = kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE
        && matches!(on, On::Stream(_))
        && plan.dir == Direction::HostToDevice;
    let source = if staged {
        Source::Staged(super::check::bytes(src, extent.width, "src")?.into())
    } else {
        Source::Ptr(src as usize)
    };
    let owned = Owned {
        src: plan.owned.src && !staged,
        ..plan.owned
    };
    let op = Op::Copy {
        dst: dst as usize,
        src: source,
        extent,
        dir: plan.dir,
        owned,
    };
    on.run(sim, Task::new(op), plan.pageable && !staged)
}

pub(super) fn memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: Option<aclrtStream>,
) -> Res<()> {
    if !check_memcpy(dst, dest_max, src, count, kind)? {
        return nothing_to_do(stream);
    }
    copy_checked(dst, src, count, kind, stream)
}

/// A copy whose arguments [`check_memcpy`] accepted.
fn copy_checked(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: Option<aclrtStream>,
) -> Res<()> {
    let sim = sim()?;
    let on = On::resolve(sim, stream)?;
    // On an Ascend EP host the asynchronous copy refuses the kind itself, not only host
    // pointers: a program asking for it fails there even with device or pinned pointers. The
    // stream is looked up first, as every call looks its handles up before refusing a feature.
    ensure!(
        stream.is_none() || kind != ACL_MEMCPY_HOST_TO_HOST,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "an asynchronous copy of kind ACL_MEMCPY_HOST_TO_HOST is not supported on an Ascend \
         EP host (whatever memory the pointers name)"
    );
    if std::ptr::eq(dst.cast_const(), src) {
        return Ok(());
    }
    let allowed = if stream.is_some() { ASYNC } else { ALL };
    copy(sim, &on, dst, src, kind, Extent::linear(count), allowed)
}

/// Copies synchronously. The direction is inferred from the pointers alone (the kind is
/// reserved); a value that is no `aclrtMemcpyKind` → 100000.
///
/// # Safety
/// Host pointers the runtime does not own must be valid for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    guard("aclrtMemcpy", || {
        // The kind is reserved: once it is checked to be an aclrtMemcpyKind, the pointers
        // alone decide the direction.
        if !check_memcpy(dst, destMax, src, count, kind)? {
            return Ok(());
        }
        copy_checked(dst, src, count, ACL_MEMCPY_DEFAULT, None)
    })
}

/// Copies on a stream. With pinned/registered host memory (or device to device) this is a
/// stream task; with pageable host memory the call waits for the stream and copies
/// synchronously, except under ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE (below). Host to host, or the kind ACL_MEMCPY_HOST_TO_HOST whatever the pointers,
/// → 207000. ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE stages the source,
/// so the caller may reuse it at once.
///
/// # Safety
/// Host pointers the runtime does not own must stay valid for `count` bytes until the copy
/// completes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsync", || {
        memcpy(dst, destMax, src, count, kind, Some(stream))
    })
}

/// Deprecated in CANN in favour of aclrtMemcpyAsync, and the same copy.
///
/// # Safety
/// As aclrtMemcpyAsync.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsyncWithCondition(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsyncWithCondition", || {
        memcpy(dst, destMax, src, count, kind, Some(stream))
    })
}

/// The arguments of a 2D copy: dst, dpitch, src, spitch, width, height, kind.
type Copy2d = (
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    aclrtMemcpyKind,
);

/// A 2D copy: checks in the runtime's order, then [`copy`].
fn memcpy_2d(args: Copy2d, stream: Option<aclrtStream>) -> Res<()> {
    let (dst, dpitch, src, spitch, width, height, kind) = args;
    non_null(dst, "dst")?;
    non_null(src, "src")?;
    ensure!(
        width <= spitch,
        ACL_ERROR_INVALID_PARAM,
        "width ({width}) is greater than spitch ({spitch})"
    );
    ensure!(
        width <= dpitch,
        ACL_ERROR_INVALID_PARAM,
        "width ({width}) is greater than dpitch ({dpitch})"
    );
    // The kinds each form supports; the reference gives the asynchronous form's code for the
    // others, and the synchronous form (no code given) answers the same.
    let (kinds, supported): (&[aclrtMemcpyKind], &str) = if stream.is_some() {
        (
            &[
                ACL_MEMCPY_HOST_TO_DEVICE,
                ACL_MEMCPY_DEVICE_TO_HOST,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
            ],
            "HOST_TO_DEVICE, DEVICE_TO_HOST or DEVICE_TO_DEVICE",
        )
    } else {
        (
            &[ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST],
            "HOST_TO_DEVICE or DEVICE_TO_HOST",
        )
    };
    ensure!(
        kinds.contains(&kind),
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is not supported by this 2D copy (only {supported})"
    );
    ensure!(
        height <= MAX_2D_HEIGHT,
        ACL_ERROR_RT_PARAM_INVALID,
        "height ({height}) exceeds {MAX_2D_HEIGHT}"
    );
    ensure!(
        width <= MAX_2D_WIDTH,
        ACL_ERROR_RT_PARAM_INVALID,
        "width ({width}) exceeds {MAX_2D_WIDTH}"
    );
    // Nothing to copy, once every argument has passed (an empty copy spans nothing).
    if width == 0 || height == 0 {
        return nothing_to_do(stream);
    }
    let spans = (height - 1)
        .checked_mul(dpitch.max(spitch))
        .and_then(|s| s.checked_add(width));
    ensure!(
        spans.is_some(),
        ACL_ERROR_RT_PARAM_INVALID,
        "the 2D copy spans more than the address space"
    );
    let sim = sim()?;
    let on = On::resolve(sim, stream)?;
    let extent = Extent {
        width,
        rows: height,
        dpitch,
        spitch,
    };
    let allowed = if stream.is_some() { ASYNC } else { SYNC_2D };
    copy(sim, &on, dst, src, kind, extent, allowed)
}

/// Copies a 2D region synchronously: host to device or device to host only (others → 207000).
///
/// # Safety
/// Host pointers the runtime does not own must be valid for the region they describe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    let args = (dst, dpitch, src, spitch, width, height, kind);
    guard("aclrtMemcpy2d", || memcpy_2d(args, None))
}

/// Copies a 2D region on a stream (host to device, device to host, device to device);
/// pageable host memory falls back to a synchronous copy.
///
/// # Safety
/// Host pointers the runtime does not own must stay valid for the region until the copy
/// completes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy2dAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    let args = (dst, dpitch, src, spitch, width, height, kind);
    guard("aclrtMemcpy2dAsync", || memcpy_2d(args, Some(stream)))
}

/// Checks shared by the memsets; `Ok(false)`: nothing to do (count 0, once `devPtr` has
/// been checked).
fn check_memset(dev_ptr: *mut c_void, max_count: usize, count: usize) -> Res<bool> {
    non_null(dev_ptr, "devPtr")?;
    ensure!(
        count <= max_count,
        ACL_ERROR_RT_PARAM_INVALID,
        "count ({count}) is greater than maxCount ({max_count})"
    );
    Ok(count != 0)
}

fn memset(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: Option<aclrtStream>,
) -> Res<()> {
    if !check_memset(dev_ptr, max_count, count)? {
        return nothing_to_do(stream);
    }
    // Byte-wise like C memset: the low byte of `value`.
    fill(dev_ptr, count, u32::from(value as u8), 1, stream, false)
}

/// Fills `len` bytes at `ptr` with the low `width` bytes of `value`, synchronously or on a
/// stream. With `runtime_only`, the memory must be device or aclrtMallocHost memory, and host
/// memory is filled at once even for a stream (aclrtMemsetD32Async's rules).
fn fill(
    ptr: *mut c_void,
    len: usize,
    value: u32,
    width: usize,
    stream: Option<aclrtStream>,
    runtime_only: bool,
) -> Res<()> {
    let sim = sim()?;
    let on = On::resolve(sim, stream)?;
    let at = sim.memory.locate(ptr as usize);
    check_mapped(sim, at.class, ptr as usize)?;
    ensure!(
        !runtime_only || at.allocation.is_some(),
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p} is neither aclrtMalloc nor aclrtMallocHost memory"
    );
    let owned = at.check_range(ptr as usize, len, "ptr")?;
    let class = at.class;
    check_alive(sim, class)?;
    // As a copy between two devices: the device running the memset writes the other's memory.
    if let PtrClass::Device(owner) = class {
        check_peer_access(on.device(), owner, || {
            format!("memset of memory of device {owner}")
        })?;
    }
    let op = Op::Memset {
        dst: ptr as usize,
        len,
        value,
        width,
        owned,
    };
    let task = Task::new(op);
    match on {
        On::Stream(stream) if runtime_only && class == PtrClass::Host => {
            run_now(sim, &stream.device, Some(&stream), task)
        }
        _ => on.run(sim, task, class == PtrClass::Unregistered),
    }
}

/// The byte length of `n` 32-bit words, checked against `mem_size`; `Ok(None)`: nothing to do
/// (`n` 0, once `ptr` has been checked).
fn check_memset_d32(ptr: *mut c_void, mem_size: usize, n: usize) -> Res<Option<usize>> {
    non_null(ptr, "ptr")?;
    match n.checked_mul(4) {
        Some(0) => Ok(None),
        Some(len) if len <= mem_size => Ok(Some(len)),
        _ => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{n} 32-bit values do not fit memSize ({mem_size} bytes)"
        ),
    }
}

/// Sets `N` 32-bit words at `ptr` to `value`, synchronously. The memory must be aclrtMalloc or
/// aclrtMallocHost memory (107000 otherwise, and when `memSize` < 4 × `N`).
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetD32(
    ptr: *mut c_void,
    memSize: usize,
    value: u32,
    N: usize,
) -> aclError {
    guard("aclrtMemsetD32", || {
        match check_memset_d32(ptr, memSize, N)? {
            Some(len) => fill(ptr, len, value, 4, None, true),
            None => Ok(()),
        }
    })
}

/// aclrtMemsetD32 as a task of `stream` (NULL: the default stream); aclrtMallocHost memory is
/// filled at once, not on the stream.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetD32Async(
    ptr: *mut c_void,
    memSize: usize,
    value: u32,
    N: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemsetD32Async", || {
        match check_memset_d32(ptr, memSize, N)? {
            Some(len) => fill(ptr, len, value, 4, Some(stream), true),
            None => nothing_to_do(Some(stream)),
        }
    })
}

/// Sets `count` bytes to the low byte of `value`, synchronously (device or host memory).
///
/// # Safety
/// Host pointers the runtime does not own must be valid for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemset(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
) -> aclError {
    guard("aclrtMemset", || {
        memset(devPtr, maxCount, value, count, None)
    })
}

/// aclrtMemset as a stream task (pageable host memory: synchronously after the stream's work).
///
/// # Safety
/// Host pointers the runtime does not own must stay valid for `count` bytes until the task
/// completes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetAsync(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemsetAsync", || {
        memset(devPtr, maxCount, value, count, Some(stream))
    })
}
