//! The twenty-seventh session's second helper: streams, events, kernels and the reactor.
//! All three strategies where a stream is involved.

mod common;

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;

use common::{exclusive, run, stream, until};

/// Rule 5 ("the reactor never waits on device work") and the reactor's pacing for a stream
/// that once had a fault: a `BlockingSync` stream's task fails (the runtime's exception
/// callback flags the stream), then, the device held, an operation of that stream is handed
/// to the reactor (outside Tokio it goes there at once). The reactor must go on parking
/// between its queries of the held head, as for any stream, rather than take the old fault
/// for a fresh one and spin on the stream until the device is released.
#[test]
fn a_fault_long_settled_does_not_make_the_reactor_spin_on_held_work() {
    let (_devices, ctx, _) = exclusive(None);
    for strategy in [Strategy::EventPoll, Strategy::BlockingSync] {
        let s = stream(&ctx, strategy);
        sim::fail_task(&s, 1, AclCode(507015)).unwrap();
        let failed = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(run(failed).is_err(), "{strategy:?}: the armed task fails");
        // The stream is healthy again: a memset after the fault succeeds.
        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)).unwrap();

        let held = sim::hold(&ctx.device()).unwrap();
        let before = npu::stream::reactor_stats();
        // Outside Tokio a `BlockingSync` wait runs on a plain thread, which hands the
        // operation to the reactor after its 100 ms bound; EventPoll registers at once.
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3);
        until("the reactor takes the held memset", || {
            npu::stream::reactor_stats().registered > before.registered
        });
        let taken = npu::stream::reactor_stats();
        // A reactor with one held head queries it at most every millisecond and parks in
        // between; one that spins never parks again.
        until("the reactor parks again while the head is held", || {
            npu::stream::reactor_stats().parks >= taken.parks + 20
        });
        if strategy == Strategy::BlockingSync {
            assert!(
                npu::stream::reactor_stats().fault_notices > before.fault_notices,
                "the reactor read the stream's old fault notice when it took the memset over"
            );
        }
        assert!(!op.is_complete());
        held.release().unwrap();
        run(op).unwrap();
    }
}
