//! What the unit tests share.

use std::sync::{Mutex, MutexGuard};

use npu_core::{BackendChoice, Runtime};

use crate::Stream;

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

/// Taken by every unit test that closes a device's hold gate, for as long as it may be
/// closed: a gate is one per device, and one test's release would open another's.
pub(crate) fn gate_turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
