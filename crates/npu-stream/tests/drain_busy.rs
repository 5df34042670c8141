//! An operation no strategy can watch (here: its memory panicked while it was submitted) is
//! completed once the device is done with its stream's work up to it, and its memory let go.
//! Waiting for the stream to finish the work queued so far never ends on a stream that always
//! has work it cannot finish yet, as a busy server's may: the drain must also end when work
//! submitted after it finishes, and before that work's own completion.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{STRATEGIES, run, stream};
use npu_core::{Completion, Context, Device};
use npu_mem::{DeviceBuffer, DeviceSlice, Memory, MemoryMut};
use npu_sim::control;
use npu_stream::{Notify, Strategy};

/// Device memory whose `addr_mut` panics, holding a token whose count says whether it was
/// let go.
struct Exploding {
    inner: DeviceBuffer<u8>,
    _token: Arc<()>,
}

// SAFETY: every method answers for the wrapped buffer, or panics before answering.
unsafe impl Memory for Exploding {
    type Elem = u8;
    fn context(&self) -> &Context {
        self.inner.context()
    }
    fn addr(&self) -> *const std::ffi::c_void {
        self.inner.addr()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn record_use(&self, completion: &Completion) {
        self.inner.record_use(completion)
    }
}

// SAFETY: as above.
unsafe impl MemoryMut for Exploding {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        panic!("a user Memory panicked in addr_mut");
    }
}

// SAFETY: the wrapped buffer is device memory.
unsafe impl DeviceSlice for Exploding {}

#[test]
fn a_drained_operation_ends_before_the_next_one_on_a_stream_that_never_goes_idle() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let signaller = stream(&ctx, Strategy::EventPoll);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let gate = Notify::new(&ctx).unwrap();
        control::hold(0).unwrap();
        // Work queued before it, so that the drain cannot end at once.
        let before = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        let token = Arc::new(());
        let exploding = Exploding {
            inner: DeviceBuffer::<u8>::new(&ctx, 64).unwrap(),
            _token: token.clone(),
        };
        let panicked = catch_unwind(AssertUnwindSafe(|| s.memset(exploding, 2)));
        assert!(panicked.is_err(), "{strategy:?}: the memory panics");
        let after = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
        // From here on the stream always has work it cannot finish: it never goes idle.
        let blocked = s.wait_notify(&gate);
        control::release(0).unwrap();
        run(before).unwrap();

        run(after).unwrap();
        // Completions keep submission order: the drained operation ended before `after` did,
        // and its memory goes once the reaper has run. Before the change the drain ended only
        // when a synchronisation of the stream, in slices of 1 ms, found the work queued
        // before it done: one that began before `blocked` was queued could still end it here
        // (so this failed only when a slice began while the device was held after `blocked`
        // was queued, as a delay there shows); the unit tests of `stream::drains` pin the
        // rule itself.
        npu_core::reaper::flush();
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "{strategy:?}: the memory is let go"
        );
        run(signaller.record_notify(&gate)).unwrap();
        run(blocked).unwrap();
    }
}
