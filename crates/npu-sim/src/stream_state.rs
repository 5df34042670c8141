//! Callbacks registered under unique names: aclrtRegStreamStateCallback's (told when a
//! stream, default streams included, has been created or is about to be destroyed),
//! aclrtRegDeviceStateCallback's (told before and after a device is set or reset) and
//! aclrtSetDeviceTaskAbortCallback's (told before and after aclrtDeviceTaskAbort).

use std::ffi::c_void;
use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, ensure};
use crate::handle::{self, Handle};
use crate::sync::lock;

type StreamCallback = unsafe extern "C" fn(aclrtStream, aclrtStreamState, *mut c_void);
type DeviceCallback = unsafe extern "C" fn(i32, aclrtDeviceState, *mut c_void);
type AbortCallback = unsafe extern "C" fn(i32, aclrtDeviceTaskAbortStage, u32, *mut c_void) -> i32;

struct Registration<F> {
    name: String,
    callback: F,
    args: usize,
}

/// Callbacks of one kind, each under a name registered at most once.
pub(crate) struct Named<F> {
    what: &'static str,
    registry: Mutex<Vec<Registration<F>>>,
}

static STREAMS: Named<StreamCallback> = Named::new("stream state");
static DEVICES: Named<DeviceCallback> = Named::new("device state");
static ABORTS: Named<AbortCallback> = Named::new("device task abort");

impl<F: Copy> Named<F> {
    const fn new(what: &'static str) -> Self {
        Self {
            what,
            registry: Mutex::new(Vec::new()),
        }
    }

    /// Registers `callback` under `name` (`None`: removes the registration of the name). An
    /// empty name → 100000; a name registered twice, or removing one that is not registered →
    /// 107000.
    fn register(&self, name: &str, callback: Option<F>, args: usize) -> Res<()> {
        ensure!(
            !name.is_empty(),
            ACL_ERROR_INVALID_PARAM,
            "regName must not be empty"
        );
        let what = self.what;
        let mut registry = lock(&self.registry);
        let at = registry.iter().position(|r| r.name == name);
        match callback {
            Some(callback) => {
                ensure!(
                    at.is_none(),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "a {what} callback is already registered as \"{name}\""
                );
                registry.push(Registration {
                    name: name.to_owned(),
                    callback,
                    args,
                });
            }
            None => {
                let Some(at) = at else {
                    crate::error::fail!(
                        ACL_ERROR_RT_PARAM_INVALID,
                        "no {what} callback is registered as \"{name}\""
                    );
                };
                registry.remove(at);
            }
        }
        Ok(())
    }

    /// The registered names, callbacks and their arguments, to call outside the registry's
    /// lock (a callback may register, or use streams and devices).
    fn snapshot(&self) -> Vec<(String, F, usize)> {
        lock(&self.registry)
            .iter()
            .map(|r| (r.name.clone(), r.callback, r.args))
            .collect()
    }
}

/// aclrtRegStreamStateCallback.
pub(crate) fn register_stream(
    name: &str,
    callback: Option<StreamCallback>,
    args: usize,
) -> Res<()> {
    STREAMS.register(name, callback, args)
}

/// aclrtRegDeviceStateCallback.
pub(crate) fn register_device(
    name: &str,
    callback: Option<DeviceCallback>,
    args: usize,
) -> Res<()> {
    DEVICES.register(name, callback, args)
}

/// Tells every registered stream callback that `stream` reached `state`.
pub(crate) fn notify(stream: Handle, state: aclrtStreamState) {
    for (_, callback, args) in STREAMS.snapshot() {
        // SAFETY: the user registered a C function taking these arguments, with `args` as its
        // user data; the stream handle is live during the call.
        unsafe { callback(handle::to_ptr(stream), state, args as *mut c_void) };
    }
}

/// Tells every registered device callback that `device` reaches (PRE) or reached (POST)
/// `state`.
pub(crate) fn notify_device(device: i32, state: aclrtDeviceState) {
    for (_, callback, args) in DEVICES.snapshot() {
        // SAFETY: the user registered a C function taking these arguments, with `args` as its
        // user data.
        unsafe { callback(device, state, args as *mut c_void) };
    }
}

/// aclrtSetDeviceTaskAbortCallback.
pub(crate) fn register_abort(name: &str, callback: Option<AbortCallback>, args: usize) -> Res<()> {
    ABORTS.register(name, callback, args)
}

/// Tells every registered abort callback that aclrtDeviceTaskAbort of `device` (with its
/// `timeout`) reaches `stage`. Every callback is called; returns the first non-zero value one
/// returned, with its registration name.
pub(crate) fn notify_abort(
    device: i32,
    stage: aclrtDeviceTaskAbortStage,
    timeout: u32,
) -> Option<(String, i32)> {
    let mut failure = None;
    for (name, callback, args) in ABORTS.snapshot() {
        // SAFETY: the user registered a C function taking these arguments, with `args` as its
        // user data.
        let status = unsafe { callback(device, stage, timeout, args as *mut c_void) };
        if status != 0 && failure.is_none() {
            failure = Some((name, status));
        }
    }
    failure
}
