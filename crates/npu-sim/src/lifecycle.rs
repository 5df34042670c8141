//! The init and finalize callbacks of aclInitCallbackRegister / aclFinalizeCallbackRegister:
//! one registration per (module type, function), kept in registration order.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, SimError, ensure};
use crate::sync::lock;

/// An init callback: the configuration text, its length and the user data.
pub(crate) type InitFn = unsafe extern "C" fn(*const c_char, usize, *mut c_void) -> aclError;
/// A finalize callback: the user data.
pub(crate) type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> aclError;

/// A callback type; registrations are told apart by the function's address.
pub(crate) trait Callback: Copy {
    fn addr(self) -> usize;
}

impl Callback for InitFn {
    fn addr(self) -> usize {
        self as usize
    }
}

impl Callback for FinalizeFn {
    fn addr(self) -> usize {
        self as usize
    }
}

struct Entry<F> {
    module: aclRegisterCallbackType,
    func: F,
    user_data: usize,
}

/// The registrations of one kind of callback.
pub(crate) struct Registry<F> {
    entries: Mutex<Vec<Entry<F>>>,
}

/// Init callbacks, run by aclInit.
pub(crate) static INIT: Registry<InitFn> = Registry::new();
/// Finalize callbacks, run by aclFinalize.
pub(crate) static FINALIZE: Registry<FinalizeFn> = Registry::new();

/// Checks a callback's module type is one of `aclRegisterCallbackType`'s values.
pub(crate) fn check_module(module: aclRegisterCallbackType) -> Res<()> {
    ensure!(
        module <= ACL_REG_TYPE_ACL_RETR || module == ACL_REG_TYPE_OTHER,
        ACL_ERROR_INVALID_PARAM,
        "type {module} is not an aclRegisterCallbackType"
    );
    Ok(())
}

impl<F> Registry<F> {
    const fn new() -> Self {
        Self {
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl<F: Callback> Registry<F> {
    /// Registers `func` for `module`; registering it again for the same module replaces its
    /// user data and keeps its place.
    pub(crate) fn register(&self, module: aclRegisterCallbackType, func: F, user_data: usize) {
        let mut entries = lock(&self.entries);
        match entries
            .iter_mut()
            .find(|e| e.module == module && e.func.addr() == func.addr())
        {
            Some(entry) => entry.user_data = user_data,
            None => entries.push(Entry {
                module,
                func,
                user_data,
            }),
        }
    }

    /// Removes the registration of `func` for `module`, if there is one.
    pub(crate) fn unregister(&self, module: aclRegisterCallbackType, func: F) {
        lock(&self.entries).retain(|e| !(e.module == module && e.func.addr() == func.addr()));
    }

    /// Calls every registered callback in registration order, outside the registry's lock (a
    /// callback may register or unregister), with `call(func, user_data)`. With `stop_early`
    /// the first failure ends the run; either way the first failure is returned.
    pub(crate) fn run(
        &self,
        stop_early: bool,
        mut call: impl FnMut(F, usize) -> aclError,
    ) -> Res<()> {
        let entries: Vec<(aclRegisterCallbackType, F, usize)> = lock(&self.entries)
            .iter()
            .map(|e| (e.module, e.func, e.user_data))
            .collect();
        let mut first = None;
        for (module, func, user_data) in entries {
            let code = call(func, user_data);
            if code != ACL_SUCCESS && first.is_none() {
                first = Some(SimError::new(
                    code,
                    format!("a callback registered for type {module} returned {code}"),
                ));
                if stop_early {
                    break;
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
