//! The reaper thread held by a test: the window between the device finishing with memory and
//! that memory coming back, as the pool tests open it.

use std::sync::{Arc, Condvar, Mutex};

use super::HANG;

/// The reaper thread held in a release of the test's until [`ReaperHeld::open`] (or the
/// drop), so that every release handed to it meanwhile is queued and not yet run: the window
/// between the device finishing with memory and that memory coming back.
pub(crate) struct ReaperHeld(Arc<(Mutex<(bool, bool)>, Condvar)>);

/// Holds the reaper: returns once it runs the test's release, which waits (bounded by
/// [`HANG`]) for the gate to open.
pub(crate) fn hold_the_reaper() -> ReaperHeld {
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let theirs = gate.clone();
    // SAFETY: this release blocks the reaper on purpose, and for at most `HANG`: the test's
    // hold on the thread every deferred release runs on, as the device's hold stops tasks.
    unsafe {
        npu::reaper::release_later(move || {
            let (state, changed) = &*theirs;
            let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
            state.0 = true;
            changed.notify_all();
            let _ = changed.wait_timeout_while(state, HANG, |state| !state.1);
        })
    };
    let held = ReaperHeld(gate);
    let (state, changed) = &*held.0;
    let (_state, waited) = changed
        .wait_timeout_while(state.lock().unwrap(), HANG, |state| !state.0)
        .unwrap();
    assert!(!waited.timed_out(), "the reaper never ran the hold");
    drop(_state);
    held
}

impl ReaperHeld {
    /// Lets the reaper go on.
    pub(crate) fn open(self) {}
}

impl Drop for ReaperHeld {
    fn drop(&mut self) {
        let (state, changed) = &*self.0;
        state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        changed.notify_all();
    }
}
