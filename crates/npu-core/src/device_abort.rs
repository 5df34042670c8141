//! Aborts npu-rs did not make: `aclrtDeviceTaskAbort`, called through the raw API, discards
//! every queued task of every stream of a device, npu-rs's operations and their completion
//! events' records among them. npu-core registers a device task abort callback
//! (`aclrtSetDeviceTaskAbortCallback`) once per loaded runtime that has the function, and
//! tells whoever watches a device ([`DeviceAbortWatch`], npu-stream's streams) before the
//! runtime discards anything (PRE) and once it has (POST). A runtime without the function
//! tells no one: the work such an abort discards is found later, by npu-stream's probes of
//! streams without progress, once its stream is idle.
//!
//! The callback runs on the thread that called `aclrtDeviceTaskAbort`, which may hold
//! npu-rs's locks (a tracing subscriber called from inside a submission): the watchers take
//! theirs with `contain::lock_here` and refuse what would wait for this very thread. It
//! contains every panic: unwinding into C is undefined behaviour.

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex, Weak};

use crate::backend::Loaded;
use crate::ffi;

/// Told of every `aclrtDeviceTaskAbort` of the device it watches (see
/// [`Runtime::watch_device_aborts`](crate::Runtime::watch_device_aborts)). Both calls run on
/// the aborting thread, inside the runtime's call: they must not submit work or synchronise.
///
/// # Safety
///
/// Dropping a watcher must not block (see [`reaper::release_later`](crate::reaper::release_later)):
/// the callback holds each watcher while it calls it, and, should the watcher's other
/// references go meanwhile, drops the last one on the reaper.
#[doc(hidden)]
pub unsafe trait DeviceAbortWatch: Send + Sync {
    /// The runtime is about to discard the device's queued tasks. `false` refuses the abort
    /// (the runtime then discards nothing and calls no POST): this thread cannot mark what it
    /// would discard without waiting for itself.
    fn before(&self) -> bool;
    /// The runtime has discarded what it was about to. Not called when the abort did not
    /// happen (a PRE callback refused it) or did not finish in time.
    fn after(&self);
}

/// The watchers of each device of one runtime.
#[derive(Default)]
pub(crate) struct DeviceAborts {
    watchers: Mutex<HashMap<u32, Vec<Weak<dyn DeviceAbortWatch>>>>,
}

impl DeviceAborts {
    pub(crate) fn watch(&self, device: u32, watcher: Weak<dyn DeviceAbortWatch>) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        let of_device = watchers.entry(device).or_default();
        // Pruned here, so that a device whose streams come and go keeps a bounded list.
        of_device.retain(|watcher| watcher.strong_count() > 0);
        of_device.push(watcher);
    }

    /// The live watchers of `device`, taken out of the lock before any is called: a watcher
    /// dropping its last reference inside its call must not find the lock held.
    fn of(&self, device: u32) -> Vec<Arc<dyn DeviceAbortWatch>> {
        let watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        watchers
            .get(&device)
            .map(|of_device| of_device.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default()
    }
}

/// The name npu-core's callback is registered under (unique per runtime).
const NAME: &CStr = c"npu-rs device task abort";

/// Registers the callback with `loaded`, after its `aclInit`, if the runtime has the function.
pub(crate) fn register(loaded: &'static Loaded) {
    let Some(set) = loaded.api.aclrtSetDeviceTaskAbortCallback else {
        return;
    };
    let args = std::ptr::from_ref(loaded).cast_mut().cast::<c_void>();
    // SAFETY: the name is NUL-terminated and static; the callback is safe to call from any
    // thread; `args` points at the leaked (never freed) `Loaded`.
    let code = unsafe { set(NAME.as_ptr(), Some(on_device_abort), args) };
    if code != ffi::ACL_SUCCESS {
        // Already registered by an earlier aclInit of the same library is the usual reason;
        // the runtime's message is taken off this thread, as `fault::register` does.
        let message = crate::runtime::recent_message(loaded).unwrap_or_default();
        crate::log!(debug, code = %crate::AclCode(code), message, "device task abort callback not (re)registered");
    }
}

unsafe extern "C" fn on_device_abort(
    device: i32,
    stage: ffi::aclrtDeviceTaskAbortStage,
    _timeout: u32,
    args: *mut c_void,
) -> i32 {
    let mut refused = false;
    let panicked = crate::contain::contained(crate::SEAL, || {
        // SAFETY: `args` is the `&'static Loaded` given at registration.
        let loaded = unsafe { &*args.cast_const().cast::<Loaded>() };
        let Ok(device) = u32::try_from(device) else {
            return;
        };
        let watchers = loaded.device_aborts.of(device);
        if stage == ffi::ACL_RT_DEVICE_TASK_ABORT_PRE {
            // One refusal refuses the abort; the others' marks are then never confirmed (no
            // POST follows), and so discard nothing.
            for watcher in &watchers {
                refused |= !watcher.before();
            }
        } else if stage == ffi::ACL_RT_DEVICE_TASK_ABORT_POST {
            watchers.iter().for_each(|watcher| watcher.after());
        }
        // Not dropped here: if a watcher's other references went while it was called (a
        // stream dropped on another thread), this one is its last, and a stream's drop
        // destroys it, which inside the runtime's abort, on the caller's thread (binding the
        // stream's context there), it must not.
        // SAFETY: dropping a watcher does not block (the trait's contract).
        unsafe { crate::reaper::release_later(move || drop(watchers)) };
    });
    if panicked {
        crate::log!(
            error,
            device,
            stage,
            "npu-rs's device task abort callback panicked: the abort is refused (PRE) or the \
             work it discarded may stay pending (POST)"
        );
    }
    // Refused when a watcher could not mark its work: discarding it unmarked would leave it
    // pending for ever.
    i32::from(refused || panicked)
}
