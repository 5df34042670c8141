//! What the unit tests share.

use std::sync::{Mutex, MutexGuard};

use npu_core::{BackendChoice, Completer, Runtime};

use crate::Stream;
use crate::event_pool::PooledEvent;

/// Forks aimed inside the start of one of npu-stream's threads: npu-core's helper, shared.
#[path = "../../npu-core/src/fork/held.rs"]
pub(crate) mod held;

/// A new stream of `device` of an in-process simulator (the stream keeps its context and the
/// runtime alive).
pub(crate) fn sim_stream(device: u32) -> Stream {
    let runtime = Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .unwrap();
    let ctx = runtime.device(device).unwrap().primary_context().clone();
    Stream::new(&ctx).unwrap()
}

/// Records an event on `stream` for `completer`, as a strategy does after an operation: it
/// completes once the work queued on the stream so far has.
pub(crate) fn recorded(stream: &Stream, completer: Completer) -> (PooledEvent, Completer) {
    stream.shared.context.bind().unwrap();
    crate::strategy::record(&stream.shared, completer)
        .map_err(|unwatched| unwatched.error)
        .unwrap()
}

/// `device`'s hold gate closed (nothing on it starts) for as long as this lives, for one test
/// at a time: a gate is one per device, and one test's release would open another's. Reopened
/// when dropped, also when the test panics: a gate left closed would hang the next test that
/// uses the device instead of showing the failure.
pub(crate) struct Held {
    device: i32,
    _turn: MutexGuard<'static, ()>,
}

/// Closes `device`'s hold gate; see [`Held`].
pub(crate) fn hold(device: u32) -> Held {
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let device = device as i32;
    npu_sim::control::hold(device).unwrap();
    Held {
        device,
        _turn: turn,
    }
}

impl Held {
    /// Opens the gate; the test keeps its turn until the guard is dropped.
    pub(crate) fn release(&self) {
        npu_sim::control::release(self.device).unwrap();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Already open when the test released it: harmless.
        let _ = npu_sim::control::release(self.device);
    }
}
