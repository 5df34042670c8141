//! Attacks by a waker whose drop re-enters the completion it waits on. A waker is the task's
//! code: a custom one may own other futures of the same operation and drop them in its own
//! drop. The completion kept its wakers under a lock and dropped a replaced or deregistered
//! waker while holding it, so that drop deadlocked on the same lock.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use common::{HANG, exclusive_device0, stream};
use npu_core::{Completion, Wait};
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::Strategy;

/// Owns a future of the same completion, and drops it when the last clone of the waker goes.
struct DropsAWait(Mutex<Option<Pin<Box<Wait>>>>);

impl Wake for DropsAWait {
    fn wake(self: Arc<Self>) {}
}

impl Drop for DropsAWait {
    fn drop(&mut self) {
        drop(self.0.lock().unwrap().take());
    }
}

fn poll(wait: &mut Pin<Box<Wait>>, waker: &Waker) -> bool {
    let pending = wait.as_mut().poll(&mut TaskContext::from_waker(waker));
    matches!(pending, Poll::Pending)
}

/// Registers a [`DropsAWait`] waker with `first`, the only clone left of it, holding a second
/// registered future of the same completion; then `release` makes the completion let go of
/// that waker (a poll with another waker, or dropping `first`). Runs on its own thread, so
/// that a deadlock fails the test instead of hanging it.
fn reenter(done: &Completion, release: fn(Pin<Box<Wait>>)) {
    let (mut first, mut second) = (Box::pin(done.wait()), Box::pin(done.wait()));
    let noop = Waker::noop();
    assert!(poll(&mut second, noop), "the device is held");
    let waker = Waker::from(Arc::new(DropsAWait(Mutex::new(Some(second)))));
    assert!(poll(&mut first, &waker));
    drop(waker);
    let (finished, finish) = channel();
    std::thread::spawn(move || {
        release(first);
        let _ = finished.send(());
    });
    finish
        .recv_timeout(HANG)
        .expect("deadlocked: the waker was dropped under the completion's lock");
}

#[test]
fn a_waker_whose_drop_drops_a_future_of_the_same_operation_does_not_deadlock() {
    let (_device, ctx) = exclusive_device0();
    for strategy in [Strategy::EventPoll, Strategy::CallbackThread] {
        let s = stream(&ctx, strategy);
        control::hold(0).unwrap();
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1);
        let done = op.completion().clone();
        // Replaced by a poll with another waker.
        reenter(&done, |mut first| {
            assert!(poll(&mut first, Waker::noop()));
        });
        // Deregistered by dropping the future that registered it.
        reenter(&done, drop);
        control::release(0).unwrap();
        done.blocking_waiter()
            .wait_for(HANG)
            .expect("completes")
            .unwrap();
        drop(op);
    }
}
