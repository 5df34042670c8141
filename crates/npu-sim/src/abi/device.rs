//! Device management.

use std::sync::Arc;
use std::time::Instant;

use npu_sys::*;

use super::check::deadline;
use crate::context::{self, Context};
use crate::device::Primary;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::hardware::{CUBE_CORES, L2_CACHE_BYTES, VECTOR_CORES};
use crate::sim::{Sim, sim};
use crate::sync::lock;

/// Stream priorities: 0 is the greatest, 7 the least (out-of-range values are clamped).
pub(crate) const LEAST_PRIORITY: u32 = 7;

/// Binds the calling thread to a device's primary context, creating it on first use (shared by
/// all threads, reference-counted) and clearing any explicit context of the thread.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDevice(deviceId: i32) -> aclError {
    guard("aclrtSetDevice", || {
        let sim = sim()?;
        announced(
            sim,
            deviceId,
            [ACL_RT_DEVICE_STATE_SET_PRE, ACL_RT_DEVICE_STATE_SET_POST],
            |primary| primary.ctx.is_none(),
            || context::set_device(sim, deviceId).map(|()| None),
        )
    })
}

/// Runs a set or reset of an existing device. When `changes` finds that it changes the
/// device's state (the set that creates the primary context, the reset that releases it), the
/// device state callbacks are called with PRE before it and, if it succeeded, POST after it;
/// a set or reset that only moves the reference count calls none. `body` returns the primary
/// context a reset released, torn down here before POST.
fn announced(
    sim: &Sim,
    device_id: i32,
    [pre, post]: [aclrtDeviceState; 2],
    changes: impl FnOnce(&Primary) -> bool,
    body: impl FnOnce() -> Res<Option<Arc<Context>>>,
) -> Res<()> {
    let device = sim.device(device_id.into())?;
    let entered = device.state_gate.enter();
    let change = changes(&lock(&device.primary));
    if change {
        crate::stream_state::notify_device(device_id, pre);
    }
    let released = body()?;
    // Open before the teardown, which waits for the released context's streams: a task of
    // theirs (a host function) may set the device again.
    drop(entered);
    if let Some(ctx) = released {
        // The primary context is released here only: no other call destroys it.
        let _ = ctx.destroy(sim);
    }
    if change {
        crate::stream_state::notify_device(device_id, post);
    }
    Ok(())
}

/// Registers `callback` under the unique name `regName` (NULL `callback`: removes the
/// registration). It is called on the calling thread when a call changes the device's state:
/// with ACL_RT_DEVICE_STATE_SET_PRE before and SET_POST after the aclrtSetDevice that creates
/// the primary context (the reference count leaves 0), RESET_PRE / RESET_POST around the
/// aclrtResetDevice or aclrtResetDeviceForce that releases it (POST only when the call
/// succeeded). Sets and resets that only move the count call nothing. NULL or empty name →
/// 100000; a name already registered, or removing one that is not → 107000.
///
/// # Safety
/// `regName` must be NULL or a NUL-terminated string; `callback` must be safe to call with
/// `args` from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRegDeviceStateCallback(
    regName: *const std::ffi::c_char,
    callback: aclrtDeviceStateCallback,
    args: *mut std::ffi::c_void,
) -> aclError {
    guard("aclrtRegDeviceStateCallback", || {
        let name = super::check::c_str(regName, "regName")?;
        crate::stream_state::register_device(name, callback, args as usize)
    })
}

fn reset(sim: &Sim, device_id: i32, force: bool) -> Res<()> {
    let states = [
        ACL_RT_DEVICE_STATE_RESET_PRE,
        ACL_RT_DEVICE_STATE_RESET_POST,
    ];
    announced(
        sim,
        device_id,
        states,
        |primary| primary.releases(force),
        || release(sim, device_id, force),
    )
}

/// Drops one reference to the device's primary context (`force`: all of them); returns the
/// context if that released it, for the caller to tear down.
fn release(sim: &Sim, device_id: i32, force: bool) -> Res<Option<Arc<Context>>> {
    let device = sim.device(device_id.into())?;
    let mut primary = lock(&device.primary);
    ensure!(
        primary.ctx.is_some() && primary.refs > 0,
        ACL_ERROR_RT_CONTEXT_RELEASE_ERROR,
        "device {device_id} is not set (no aclrtSetDevice reference is left to release)"
    );
    // A release that tears the primary context down waits for its streams' work: refused
    // (the count unchanged) if that would wait for the calling thread itself. Checked under
    // the lock, so the count it sees is the one released; the check takes only the
    // context's, its streams' and the subscriptions' locks, none of which is held while
    // this one is taken.
    if primary.releases(force)
        && let Some(ctx) = primary.ctx.and_then(|handle| sim.contexts.get(handle))
    {
        ctx.refuse_self_wait()?;
    }
    primary.refs = if force { 0 } else { primary.refs - 1 };
    let released = match primary.refs {
        0 => primary
            .ctx
            .take()
            .and_then(|handle| sim.contexts.get(handle)),
        _ => None,
    };
    // Under the lock: a primary context set again from now on takes the device's default
    // stream, while this context's stream is still counted until it is destroyed.
    if let Some(ctx) = &released {
        ctx.default_stream.detach_from_device_default();
    }
    Ok(released)
}

/// Drops one reference to the device's primary context; at zero the context, its streams and
/// their pending work are torn down (after the work finishes). Not set → 507007.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDevice(deviceId: i32) -> aclError {
    guard("aclrtResetDevice", || reset(sim()?, deviceId, false))
}

/// Releases the device's primary context regardless of its reference count. A second force, or
/// one after the count reached zero, fails with 507007.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDeviceForce(deviceId: i32) -> aclError {
    guard("aclrtResetDeviceForce", || reset(sim()?, deviceId, true))
}

/// The device of the calling thread's current context.
///
/// # Safety
/// `deviceId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDevice(deviceId: *mut i32) -> aclError {
    guard("aclrtGetDevice", || {
        non_null(deviceId, "deviceId")?;
        let ctx = context::current(sim()?)?;
        write_out(deviceId, "deviceId", ctx.device.id)
    })
}

/// The number of simulated devices.
///
/// # Safety
/// `count` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> aclError {
    guard("aclrtGetDeviceCount", || {
        non_null(count, "count")?;
        write_out(count, "count", sim()?.devices.len() as u32)
    })
}

/// Device attributes of the simulated SoC (an Ascend 910B3: 20 AI cores, 40 vector cores).
/// The SIMT attributes read 0, as on every product but the Ascend 950; HD_CONNECT_TYPE and
/// DEVICE_FORM_FACTOR, which only the Ascend 950 answers, → 207000; unknown → 107000; both
/// before an unknown device's 107001.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceInfo(
    deviceId: u32,
    attr: aclrtDevAttr,
    value: *mut i64,
) -> aclError {
    guard("aclrtGetDeviceInfo", || {
        non_null(value, "value")?;
        // The attribute is a value no lookup decides: refused before the device is looked up,
        // as every function's values are.
        let read: fn(&crate::device::Device) -> i64 = match attr {
            ACL_DEV_ATTR_AICPU_CORE_NUM => |_| 6,
            ACL_DEV_ATTR_AICORE_CORE_NUM | ACL_DEV_ATTR_CUBE_CORE_NUM => |_| CUBE_CORES.into(),
            ACL_DEV_ATTR_VECTOR_CORE_NUM => |_| VECTOR_CORES.into(),
            ACL_DEV_ATTR_WARP_SIZE..=ACL_DEV_ATTR_MAX_BLOCK_DIM_Z => |_| 0,
            ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE => |device| device.capacity as i64,
            ACL_DEV_ATTR_L2_CACHE_SIZE => |_| L2_CACHE_BYTES,
            ACL_DEV_ATTR_PHY_CHIP_ID => |device| i64::from(device.id),
            ACL_DEV_ATTR_SMP_ID
            | ACL_DEV_ATTR_SUPER_POD_DEVICE_ID
            | ACL_DEV_ATTR_SUPER_POD_SERVER_ID
            | ACL_DEV_ATTR_SUPER_POD_ID
            | ACL_DEV_ATTR_CUST_OP_PRIVILEGE
            | ACL_DEV_ATTR_MAINBOARD_ID
            | ACL_DEV_ATTR_IS_VIRTUAL => |_| 0,
            // The reference: only the Ascend 950 answers these two; other products fail.
            ACL_DEV_ATTR_HD_CONNECT_TYPE | ACL_DEV_ATTR_DEVICE_FORM_FACTOR => {
                return super::check::unsupported_on_a2(&format!("device attribute {attr}"));
            }
            ACL_DEV_ATTR_NPU_ARCH => |_| 2201,
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown device attribute {other}"
            ),
        };
        let device = sim()?.device(deviceId.into())?;
        write_out(value, "value", read(device))
    })
}

/// NORMAL, or ABNORMAL once the device was lost.
///
/// # Safety
/// `deviceStatus` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryDeviceStatus(
    deviceId: i32,
    deviceStatus: *mut aclrtDeviceStatus,
) -> aclError {
    guard("aclrtQueryDeviceStatus", || {
        non_null(deviceStatus, "deviceStatus")?;
        let device = sim()?.device(deviceId.into())?;
        let status = if device.is_lost() {
            ACL_RT_DEVICE_STATUS_ABNORMAL
        } else {
            ACL_RT_DEVICE_STATUS_NORMAL
        };
        write_out(deviceStatus, "deviceStatus", status)
    })
}

fn synchronize_context(ctx: &Arc<Context>, deadline: Option<Instant>) -> Res<()> {
    ensure!(
        ctx.device.check_alive_by(deadline)?,
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
        "device {} is lost and still runs a task: its work did not finish in time",
        ctx.device.id
    );
    let streams = ctx.all_streams();
    // A caller running a host task of one of the streams (or the report thread a BLOCK
    // callback there waits for) is refused before any stream is waited for: another stream may
    // wait for an event recorded behind that task, and would hold the caller for ever before
    // the refusal of the caller's own stream was reached.
    for stream in &streams {
        stream.refuse_sync_self_wait()?;
    }
    let mut first = Ok(());
    for stream in streams {
        let result = stream.synchronize(deadline);
        if first.is_ok() {
            first = result;
        }
    }
    first
}

/// Waits for every stream of the calling thread's current context (not of other contexts on
/// the device); returns the first task error among them (and clears them).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeDevice() -> aclError {
    guard("aclrtSynchronizeDevice", || {
        synchronize_context(&context::current(sim()?)?, None)
    })
}

/// aclrtSynchronizeDevice with a timeout in ms (-1 = forever); expiry → 507046.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeDeviceWithTimeout(timeout: i32) -> aclError {
    guard("aclrtSynchronizeDeviceWithTimeout", || {
        let deadline = deadline(timeout, ACL_ERROR_RT_PARAM_INVALID)?;
        synchronize_context(&context::current(sim()?)?, deadline)
    })
}

/// Every pair of simulated devices can access each other (1), once enabled.
///
/// # Safety
/// `canAccessPeer` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceCanAccessPeer(
    canAccessPeer: *mut i32,
    deviceId: i32,
    peerDeviceId: i32,
) -> aclError {
    guard("aclrtDeviceCanAccessPeer", || {
        non_null(canAccessPeer, "canAccessPeer")?;
        ensure!(
            deviceId != peerDeviceId,
            ACL_ERROR_INVALID_PARAM,
            "deviceId and peerDeviceId are both {deviceId}"
        );
        let sim = sim()?;
        sim.device(deviceId.into())?;
        sim.device(peerDeviceId.into())?;
        write_out(canAccessPeer, "canAccessPeer", 1)
    })
}

fn peer_access(api_flags: u32, peer: i32, enable: bool) -> Res<()> {
    ensure!(
        api_flags == 0,
        ACL_ERROR_FEATURE_UNSUPPORTED,
        "flags must be 0, not {api_flags}"
    );
    let sim = sim()?;
    let ctx = context::current(sim)?;
    ensure!(
        peer != ctx.device.id,
        ACL_ERROR_INVALID_PARAM,
        "peer device {peer} is the current device"
    );
    let peer_device = sim.device(peer.into())?;
    ctx.device.check_alive()?;
    if enable {
        // Access to a lost device's memory cannot start (copies to it are refused); taking
        // it away still works, as teardown does.
        peer_device.check_alive()?;
        ctx.device.enable_peer(peer)
    } else {
        ctx.device.disable_peer(peer)
    }
    Ok(())
}

/// Lets the current device access `peerDeviceId`'s memory (directional; enabling twice is
/// harmless). flags must be 0 (else 200006).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceEnablePeerAccess(peerDeviceId: i32, flags: u32) -> aclError {
    guard("aclrtDeviceEnablePeerAccess", || {
        peer_access(flags, peerDeviceId, true)
    })
}

/// Withdraws the current device's access to `peerDeviceId` (disabling twice is harmless).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceDisablePeerAccess(peerDeviceId: i32) -> aclError {
    guard("aclrtDeviceDisablePeerAccess", || {
        peer_access(0, peerDeviceId, false)
    })
}

/// Free and total memory of the current device. The simulated device has one memory pool,
/// HBM unless the SoC is of the Ascend 310 line: every attribute of its kind (and the kind-free
/// ACL_MEM_* ones) reports it; DDR attributes on an HBM device, and attributes outside the
/// enum, report 0 / 0; HBM attributes on a DDR device report its DDR.
///
/// # Safety
/// `free` and `total` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(
    attr: aclrtMemAttr,
    free: *mut usize,
    total: *mut usize,
) -> aclError {
    guard("aclrtGetMemInfo", || {
        non_null(free, "free")?;
        non_null(total, "total")?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.device.check_alive()?;
        let (f, t) = if reports(attr, has_hbm(&sim.config.soc_name)) {
            (ctx.device.free() as usize, ctx.device.capacity as usize)
        } else {
            (0, 0)
        };
        write_out(free, "free", f)?;
        write_out(total, "total", t)
    })
}

/// Whether the SoC's device memory is HBM (the Ascend 910 and 950 lines) rather than DDR (the
/// Ascend 310 line).
fn has_hbm(soc_name: &str) -> bool {
    !soc_name.starts_with("Ascend310")
}

/// Whether `attr` names the device's kind of memory. The reference: an attribute of memory the
/// hardware lacks reports 0 / 0, except that HBM attributes on a device without HBM report its
/// DDR; the attributes from ACL_MEM_NORMAL on pick the kind themselves.
fn reports(attr: aclrtMemAttr, hbm: bool) -> bool {
    match attr {
        ACL_DDR_MEM
        | ACL_DDR_MEM_HUGE
        | ACL_DDR_MEM_NORMAL
        | ACL_DDR_MEM_P2P_HUGE
        | ACL_DDR_MEM_P2P_NORMAL => !hbm,
        _ => attr <= ACL_MEM_P2P_HUGE1G,
    }
}

/// Stream priorities: least 7, greatest 0.
///
/// # Safety
/// Both pointers must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetStreamPriorityRange(
    leastPriority: *mut i32,
    greatestPriority: *mut i32,
) -> aclError {
    guard("aclrtDeviceGetStreamPriorityRange", || {
        non_null(leastPriority, "leastPriority")?;
        non_null(greatestPriority, "greatestPriority")?;
        write_out(leastPriority, "leastPriority", LEAST_PRIORITY as i32)?;
        write_out(greatestPriority, "greatestPriority", 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ddr_device_answers_hbm_queries_with_its_ddr() {
        assert!(has_hbm("Ascend910B3") && !has_hbm("Ascend310P3"));
        for attr in [ACL_DDR_MEM, ACL_HBM_MEM, ACL_HBM_MEM_P2P_HUGE, ACL_MEM_HUGE] {
            assert!(reports(attr, false), "attribute {attr} on a DDR device");
        }
        assert!(!reports(ACL_DDR_MEM_HUGE, true));
        assert!(!reports(ACL_MEM_P2P_HUGE1G + 1, false));
    }
}
