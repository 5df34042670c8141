//! `BlockingSync` hands an operation to the reactor when its blocking wait runs out, is taken
//! by the overseer, or is dropped unrun, which happens in any order across operations. The
//! reactor looks only at the oldest operation of a stream's queue, so operations must still
//! join it in submission order.

mod common;

use std::sync::mpsc;

use common::{run, stream};
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_stream::{Notify, Op, Strategy};

/// A current-thread runtime whose only blocking thread is kept busy until the returned sender
/// is dropped, so that waits submitted inside it stay queued, unrun.
fn runtime_with_a_full_pool() -> (tokio::runtime::Runtime, mpsc::Sender<()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    runtime.spawn_blocking(move || rx.recv());
    (runtime, tx)
}

/// An operation submitted within `runtime`'s context (its wait queued on that pool).
fn inside<T: Send>(runtime: &tokio::runtime::Runtime, submit: impl FnOnce() -> Op<T>) -> Op<T> {
    let _entered = runtime.enter();
    submit()
}

#[test]
fn a_later_operation_handed_over_first_does_not_hide_an_earlier_one_from_the_reactor() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let s = stream(&ctx, Strategy::BlockingSync);
    let signaller = stream(&ctx, Strategy::EventPoll);
    let gate = Notify::new(&ctx).unwrap();
    let (full, busy) = runtime_with_a_full_pool();
    // Its wait stays queued, so the overseer hands it over, 100 ms after its submission.
    let earlier = inside(&full, || {
        s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7)
    });
    // A runtime shut down refuses blocking work, and a refused wait hands its operation over
    // at once: this later one goes first. (On a host too slow to get here within the
    // overseer's 100 ms, the earlier one goes first and the test checks less.) It waits for
    // what the host does once `earlier` has completed.
    let shut = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let handle = shut.handle().clone();
    shut.shutdown_background();
    let later = {
        let _entered = handle.enter();
        s.wait_notify(&gate)
    };
    // Before the fix the reactor queried only `later`, which waits for what follows: a hang.
    let buffer = run(earlier).unwrap();
    assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 64]);
    run(signaller.record_notify(&gate)).unwrap();
    run(later).unwrap();
    full.shutdown_background();
    drop(busy);
}
