//! Stream state callbacks (aclrtRegStreamStateCallback): named user callbacks told when a
//! stream, default streams included, has been created or is about to be destroyed.

use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, ensure};
use crate::handle::{self, Handle};
use crate::sync::lock;

type Callback = unsafe extern "C" fn(aclrtStream, aclrtStreamState, *mut std::ffi::c_void);

struct Registration {
    name: String,
    callback: Callback,
    args: usize,
}

static REGISTRY: Mutex<Vec<Registration>> = Mutex::new(Vec::new());

/// Registers `callback` under `name` (`None`: removes the registration of `name`). A name is
/// registered at most once.
pub(crate) fn register(name: &str, callback: Option<Callback>, args: usize) -> Res<()> {
    let mut registry = lock(&REGISTRY);
    let at = registry.iter().position(|r| r.name == name);
    match callback {
        Some(callback) => {
            ensure!(
                at.is_none(),
                ACL_ERROR_RT_PARAM_INVALID,
                "a stream state callback is already registered as \"{name}\""
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
                    "no stream state callback is registered as \"{name}\""
                );
            };
            registry.remove(at);
        }
    }
    Ok(())
}

/// Tells every registered callback that `stream` reached `state`, outside the registry's
/// lock (a callback may register or use streams).
pub(crate) fn notify(stream: Handle, state: aclrtStreamState) {
    let callbacks: Vec<(Callback, usize)> = lock(&REGISTRY)
        .iter()
        .map(|r| (r.callback, r.args))
        .collect();
    for (callback, args) in callbacks {
        // SAFETY: the user registered a C function taking these arguments, with `args` as its
        // user data; the stream handle is live during the call.
        unsafe { callback(handle::to_ptr(stream), state, args as *mut std::ffi::c_void) };
    }
}
