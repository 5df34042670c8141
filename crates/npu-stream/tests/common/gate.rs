//! The gate a test kernel waits at: the kernel marks that it has started, then waits until its
//! test opens the gate. npu-stream's kernel tests and the facade's abort attacks both hold the
//! device's running task this way.

use std::sync::{Condvar, Mutex};

/// Whether the gated kernel has started, and whether it may return.
static GATE: (Mutex<(bool, bool)>, Condvar) = (Mutex::new((false, false)), Condvar::new());

/// Changes the gate's state and wakes every thread waiting at it.
pub(crate) fn set_gate(update: impl FnOnce(&mut (bool, bool))) {
    update(&mut GATE.0.lock().unwrap_or_else(|e| e.into_inner()));
    GATE.1.notify_all();
}

/// Waits until the gate's state satisfies `until`.
pub(crate) fn wait_gate(until: impl Fn(&(bool, bool)) -> bool) {
    let state = GATE.0.lock().unwrap_or_else(|e| e.into_inner());
    drop(GATE.1.wait_while(state, |state| !until(state)));
}
