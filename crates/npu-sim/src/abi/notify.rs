//! Notifies (aclrtCreateNotify / aclrtRecordNotify / aclrtWaitAndResetNotify).

use std::sync::Arc;
use std::time::Duration;

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::handle;
use crate::notify::Notify;
use crate::sim::sim;
use crate::stream::Stream;
use crate::task::{Op, Task};

pub(super) fn lookup(notify: aclrtNotify) -> Res<Arc<Notify>> {
    non_null(notify, "notify")?;
    sim()?.notifies.resolve(handle::from_ptr(notify))
}

/// Resolves a notify and a stream of the current context that may queue operations on it.
fn notify_on_stream(notify: aclrtNotify, stream: aclrtStream) -> Res<(Arc<Notify>, Arc<Stream>)> {
    let notify = lookup(notify)?;
    let stream = context::submit_stream(sim()?, stream)?;
    ensure!(
        notify.flags != u64::from(ACL_NOTIFY_DEVICE_USE_ONLY),
        ACL_ERROR_RT_PARAM_INVALID,
        "an ACL_NOTIFY_DEVICE_USE_ONLY notify cannot be used from the host"
    );
    ensure!(
        notify.device.id == stream.device.id,
        ACL_ERROR_RT_STREAM_CONTEXT,
        "the notify belongs to device {}, the stream to device {}",
        notify.device.id,
        stream.device.id
    );
    Ok((notify, stream))
}

/// Creates a cleared notify on the current context's device. flag: ACL_NOTIFY_DEFAULT or
/// ACL_NOTIFY_DEVICE_USE_ONLY (other values → 107000). At most 8192 live notifies per device
/// (ACL_ERROR_RT_NO_NOTIFY_RESOURCE, 207009).
///
/// # Safety
/// `notify` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateNotify(notify: *mut aclrtNotify, flag: u64) -> aclError {
    guard("aclrtCreateNotify", || {
        non_null(notify, "notify")?;
        ensure!(
            flag == u64::from(ACL_NOTIFY_DEFAULT) || flag == u64::from(ACL_NOTIFY_DEVICE_USE_ONLY),
            ACL_ERROR_RT_PARAM_INVALID,
            "notify flag {flag:#x} is neither ACL_NOTIFY_DEFAULT nor ACL_NOTIFY_DEVICE_USE_ONLY"
        );
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.device.check_alive()?;
        let handle = sim
            .notifies
            .insert(Arc::new(Notify::new(&ctx.device, flag)?))?;
        write_out(notify, "notify", handle::to_ptr(handle))
    })
}

/// Destroys a notify; waits already queued on it keep it alive until they ran. An exported
/// notify's keys are withdrawn.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyNotify(notify: aclrtNotify) -> aclError {
    guard("aclrtDestroyNotify", || {
        non_null(notify, "notify")?;
        let sim = sim()?;
        let handle = handle::from_ptr(notify);
        sim.notifies.remove_live(handle)?.release_place();
        // Its keys stop being importable; other processes' notifies of it live on.
        sim.ipc.forget(crate::ipc::Kind::Notify, handle as usize);
        Ok(())
    })
}

/// Sets the notify when the stream reaches this point.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordNotify(notify: aclrtNotify, stream: aclrtStream) -> aclError {
    guard("aclrtRecordNotify", || {
        let (notify, stream) = notify_on_stream(notify, stream)?;
        stream.submit(Task::new(Op::NotifySet(notify)))
    })
}

/// Holds the stream's later work until the notify is set, then clears it. `timeout` is in
/// seconds (0 = forever); a wait still unsatisfied then fails with ACL_ERROR_RT_WAIT_TIMEOUT
/// (107019), reported by the stream's synchronisation.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtWaitAndResetNotify(
    notify: aclrtNotify,
    stream: aclrtStream,
    timeout: u32,
) -> aclError {
    guard("aclrtWaitAndResetNotify", || {
        let (notify, stream) = notify_on_stream(notify, stream)?;
        let timeout = (timeout != 0).then(|| Duration::from_secs(u64::from(timeout)));
        stream.submit(Task::new(Op::NotifyWait { notify, timeout }))
    })
}

/// The notify's id (unique per device). NULL `notify` or `notifyId` → 100000 before the notify
/// is looked up (a destroyed one → 107017).
///
/// # Safety
/// `notifyId` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetNotifyId(notify: aclrtNotify, notifyId: *mut u32) -> aclError {
    guard("aclrtGetNotifyId", || {
        non_null(notify, "notify")?;
        non_null(notifyId, "notifyId")?;
        let notify = lookup(notify)?;
        write_out(notifyId, "notifyId", notify.id)
    })
}

/// Clears every notify of the array at once, on the host: a record not yet waited for is
/// forgotten. NULL array or entry, or `num` 0 → 100000, every entry checked before any is looked
/// up; a destroyed notify → 107017 (nothing is cleared then); a notify of a lost device → 507010.
///
/// # Safety
/// `notifies` must be NULL or valid for reads of `num` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNotifyBatchReset(notifies: *mut aclrtNotify, num: usize) -> aclError {
    guard("aclrtNotifyBatchReset", || {
        non_null(notifies, "notifies")?;
        ensure!(num > 0, ACL_ERROR_INVALID_PARAM, "num is 0");
        let handles = super::check::array(notifies.cast_const(), num, "notifies")?;
        super::check::non_null_entries(handles, "an entry of notifies")?;
        let resolved = handles
            .iter()
            .map(|&notify| lookup(notify))
            .collect::<Res<Vec<_>>>()?;
        for notify in &resolved {
            notify.device.check_alive()?;
        }
        for notify in resolved {
            notify.take();
        }
        Ok(())
    })
}
