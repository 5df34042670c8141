//! Memset and memcpy (1D and 2D, synchronous and on streams).

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use crate::context;
use crate::device::Device;
use crate::error::{Res, ensure, fail, guard, non_null};
use crate::memory::PtrClass;
use crate::sim::{Sim, sim};
use crate::stream::Stream;
use crate::task::{Direction, Extent, Op, Owned, Source, Task};
use crate::trace;

/// Most rows of a 2D copy.
const MAX_2D_HEIGHT: usize = 5 * 1024 * 1024;
/// Widest row of a 2D copy.
const MAX_2D_WIDTH: usize = 5_000_000;

/// Runs a memory task on the calling thread (synchronous APIs, and the pageable fallback of
/// the async ones), paced by the device's timing model.
fn run_now(sim: &Sim, device: &Device, task: Task) -> Res<()> {
    let start_ns = device.clock.now_ns();
    {
        let Some(_admitted) = device.admit() else {
            return Err(device.loss_error());
        };
        let live = sim.memory.live();
        task.run_memory(&live)?;
    }
    let end_ns = match device.clock.timing() {
        Some(model) => {
            let end_ns = start_ns.saturating_add(task.duration_ns(&model));
            let wake = device.clock.instant_of(end_ns);
            // A synchronous operation holds its caller for its simulated duration.
            std::thread::sleep(wake.saturating_duration_since(std::time::Instant::now()));
            end_ns
        }
        None => device.clock.now_ns(),
    };
    let (_, name) = task.label();
    trace::record_sync(device.id, &name, task.bytes(), start_ns, end_ns);
    Ok(())
}

/// Runs a task on a stream: as a stream task, or, when it involves pageable host memory,
/// synchronously once the stream's earlier work is done (CANN's documented fallback).
fn run_on_stream(sim: &Sim, stream: &Arc<Stream>, task: Task, pageable: bool) -> Res<()> {
    if pageable {
        stream.wait_idle(None)?;
        return run_now(sim, &stream.device, task);
    }
    stream.submit(task)
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
        (Pageable, Dev(_)) => accepted(
            to_device || kind == ACL_MEMCPY_DEVICE_TO_DEVICE,
            HostToDevice,
        ),
        (Dev(_), Pageable) => accepted(
            matches!(
                kind,
                ACL_MEMCPY_DEVICE_TO_HOST | ACL_MEMCPY_DEVICE_TO_DEVICE
            ),
            DeviceToHost,
        ),
        (Pageable, _) | (_, Pageable) => accepted(kind == ACL_MEMCPY_HOST_TO_HOST, HostToHost),
    }
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
    dst: usize,
    src: usize,
    kind: aclrtMemcpyKind,
    extent: &Extent,
) -> Res<Plan> {
    let (dst_class, src_class) = (sim.memory.classify(dst), sim.memory.classify(src));
    let dir = correct_kind(src_class, dst_class, kind)?;
    let owned = Owned {
        dst: sim
            .memory
            .check_range(dst, extent.span(extent.dpitch), "destination")?,
        src: sim
            .memory
            .check_range(src, extent.span(extent.spitch), "source")?,
    };
    for class in [src_class, dst_class] {
        if let PtrClass::Device(id) = class {
            sim.device(id.into())?.check_alive()?;
        }
    }
    if let (PtrClass::Device(a), PtrClass::Device(b)) = (src_class, dst_class) {
        for peer in [a, b].into_iter().filter(|&d| a != b && d != current.id) {
            ensure!(
                current.peer_enabled(peer),
                ACL_ERROR_RT_NO_PERMISSION,
                "copy between device {a} and device {b}: peer access from device {} to device {peer} is not enabled (aclrtDeviceEnablePeerAccess)",
                current.id
            );
        }
    }
    let pageable = src_class == PtrClass::Unregistered || dst_class == PtrClass::Unregistered;
    Ok(Plan {
        dir,
        owned,
        pageable,
    })
}

/// Checks shared by aclrtMemcpy and aclrtMemcpyAsync, in the runtime's order. `Ok(false)`:
/// nothing to do (count 0).
fn check_memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> Res<bool> {
    if count == 0 {
        return Ok(false);
    }
    non_null(dst, "dst")?;
    non_null(src, "src")?;
    ensure!(
        kind <= ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is not valid here"
    );
    ensure!(
        count <= dest_max,
        ACL_ERROR_RT_PARAM_INVALID,
        "count ({count}) is greater than destMax ({dest_max})"
    );
    Ok(true)
}

fn copy_op(dst: usize, src: Source, extent: Extent, plan: &Plan) -> Op {
    // Staged data belongs to the task, not to an allocation that could be freed.
    let owned = Owned {
        src: plan.owned.src && matches!(src, Source::Ptr(_)),
        ..plan.owned
    };
    Op::Copy {
        dst,
        src,
        extent,
        dir: plan.dir,
        owned,
    }
}

/// Copies synchronously. The direction is inferred from the pointers (kind is checked only
/// against pageable memory); kinds 6 and 7 are rejected (100000).
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
        if !check_memcpy(dst, destMax, src, count, kind)? {
            return Ok(());
        }
        let sim = sim()?;
        let ctx = context::current(sim)?;
        if std::ptr::eq(dst.cast_const(), src) {
            return Ok(());
        }
        let extent = Extent::linear(count);
        let plan = plan(sim, &ctx.device, dst as usize, src as usize, kind, &extent)?;
        run_now(
            sim,
            &ctx.device,
            Task::new(copy_op(
                dst as usize,
                Source::Ptr(src as usize),
                extent,
                &plan,
            )),
        )
    })
}

/// Copies on a stream. With pinned/registered host memory (or device to device) this is a
/// stream task; with pageable host memory the call waits for the stream and copies
/// synchronously. Host to host → 207000. ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE stages the source,
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
        if !check_memcpy(dst, destMax, src, count, kind)? {
            return Ok(());
        }
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        if std::ptr::eq(dst.cast_const(), src) {
            return Ok(());
        }
        let extent = Extent::linear(count);
        let plan = plan(
            sim,
            &stream.device,
            dst as usize,
            src as usize,
            kind,
            &extent,
        )?;
        ensure!(
            plan.dir != Direction::HostToHost,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "asynchronous host-to-host copies are not supported"
        );
        let source = if kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE && !plan.pageable {
            Source::Staged(super::check::bytes(src, count, "src")?.into())
        } else {
            Source::Ptr(src as usize)
        };
        let task = Task::new(copy_op(dst as usize, source, extent, &plan));
        run_on_stream(sim, &stream, task, plan.pageable)
    })
}

/// Checks shared by the 2D copies, in the runtime's order; `Ok(None)`: nothing to do.
fn check_2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: aclrtMemcpyKind,
) -> Res<Option<Extent>> {
    if width == 0 || height == 0 {
        return Ok(None);
    }
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
    ensure!(
        matches!(
            kind,
            ACL_MEMCPY_HOST_TO_DEVICE
                | ACL_MEMCPY_DEVICE_TO_HOST
                | ACL_MEMCPY_DEVICE_TO_DEVICE
                | ACL_MEMCPY_DEFAULT
        ),
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is not valid for a 2D copy"
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
    let extent = Extent {
        width,
        rows: height,
        dpitch,
        spitch,
    };
    let spans = (height - 1)
        .checked_mul(dpitch.max(spitch))
        .and_then(|s| s.checked_add(width));
    ensure!(
        spans.is_some(),
        ACL_ERROR_RT_PARAM_INVALID,
        "the 2D copy spans more than the address space"
    );
    Ok(Some(extent))
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
    guard("aclrtMemcpy2d", || {
        let Some(extent) = check_2d(dst, dpitch, src, spitch, width, height, kind)? else {
            return Ok(());
        };
        let sim = sim()?;
        let ctx = context::current(sim)?;
        let plan = plan(sim, &ctx.device, dst as usize, src as usize, kind, &extent)?;
        ensure!(
            matches!(plan.dir, Direction::HostToDevice | Direction::DeviceToHost),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "synchronous 2D copies support only host-to-device and device-to-host, not {}",
            plan.dir.name()
        );
        run_now(
            sim,
            &ctx.device,
            Task::new(copy_op(
                dst as usize,
                Source::Ptr(src as usize),
                extent,
                &plan,
            )),
        )
    })
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
    guard("aclrtMemcpy2dAsync", || {
        let Some(extent) = check_2d(dst, dpitch, src, spitch, width, height, kind)? else {
            return Ok(());
        };
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let plan = plan(
            sim,
            &stream.device,
            dst as usize,
            src as usize,
            kind,
            &extent,
        )?;
        ensure!(
            plan.dir != Direction::HostToHost,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "asynchronous host-to-host copies are not supported"
        );
        let task = Task::new(copy_op(
            dst as usize,
            Source::Ptr(src as usize),
            extent,
            &plan,
        ));
        run_on_stream(sim, &stream, task, plan.pageable)
    })
}

/// Checks shared by the memsets; `Ok(false)`: nothing to do (count 0).
fn check_memset(dev_ptr: *mut c_void, max_count: usize, count: usize) -> Res<bool> {
    if count == 0 {
        return Ok(false);
    }
    non_null(dev_ptr, "devPtr")?;
    ensure!(
        count <= max_count,
        ACL_ERROR_RT_PARAM_INVALID,
        "count ({count}) is greater than maxCount ({max_count})"
    );
    Ok(true)
}

fn memset_task(sim: &Sim, dev_ptr: *mut c_void, value: i32, count: usize) -> Res<Task> {
    let owned = sim.memory.check_range(dev_ptr as usize, count, "devPtr")?;
    if let PtrClass::Device(id) = sim.memory.classify(dev_ptr as usize) {
        sim.device(id.into())?.check_alive()?;
    }
    // Byte-wise like C memset: the low byte of `value`.
    Ok(Task::new(Op::Memset {
        dst: dev_ptr as usize,
        len: count,
        value: value as u8,
        owned,
    }))
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
        if !check_memset(devPtr, maxCount, count)? {
            return Ok(());
        }
        let sim = sim()?;
        let ctx = context::current(sim)?;
        let task = memset_task(sim, devPtr, value, count)?;
        run_now(sim, &ctx.device, task)
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
        if !check_memset(devPtr, maxCount, count)? {
            return Ok(());
        }
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let task = memset_task(sim, devPtr, value, count)?;
        let pageable = sim.memory.classify(devPtr as usize) == PtrClass::Unregistered;
        run_on_stream(sim, &stream, task, pageable)
    })
}
