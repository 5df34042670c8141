//! Attacks by a long chain of `BlockingSync` completions. Their waits run on threads of their
//! own and finish in any order, so each operation completes only after the one submitted
//! before it: when many finish their waits while the first is still waiting, completing the
//! first completes them all. Done by nesting each completion inside the previous one, that
//! overflowed the completing thread's stack and aborted the process.

mod common;

use std::sync::mpsc::channel;

use common::{HANG, blocking_pool, hold_the_reactor, stream};
use futures::future::join_all;
use npu_core::Device;
use npu_stream::Strategy;

/// Enough operations that completing them nested, a few hundred bytes of stack each, would
/// overflow a thread's 2 MiB stack many times over.
const CHAINED: usize = 50_000;

/// The rest are queued in batches this small, each run before the next is queued, so that
/// every wait starts long before the overseer would give it to the reactor.
const BATCH: usize = 100;

#[test]
fn completing_the_head_of_a_long_chain_does_not_overflow_the_stack() {
    let context = Device::open(0).unwrap().primary_context().clone();
    let stream = stream(&context, Strategy::BlockingSync);
    // The first operation's wait is queued behind a blocking task that holds its runtime's
    // only blocking thread until the test lets it go. The overseer then hands the operation to
    // the reactor, which the test holds too: the head stays incomplete until both are let go.
    let reactor = hold_the_reactor(&context);
    let head_runtime = blocking_pool(1);
    let (release_head, held) = channel::<()>();
    head_runtime.spawn_blocking(move || held.recv_timeout(HANG).expect("the test releases it"));
    let head = {
        let _entered = head_runtime.enter();
        stream.synchronize()
    };
    // The rest wait on another runtime, one after another on its only blocking thread; a
    // marker queued behind each batch says when every one of it has finished its wait and
    // chained itself behind the operation before it.
    let rest_runtime = blocking_pool(1);
    let mut rest = Vec::with_capacity(CHAINED);
    for _ in 0..CHAINED / BATCH {
        let _entered = rest_runtime.enter();
        rest.extend((0..BATCH).map(|_| stream.synchronize()));
        let (waited, all_waited) = channel();
        rest_runtime.spawn_blocking(move || waited.send(()).unwrap());
        all_waited
            .recv_timeout(HANG)
            .expect("every wait of the batch ran");
    }
    assert!(
        rest.iter().all(|op| !op.completion().is_complete()),
        "each waits for the one before it, and the head has not completed"
    );

    release_head.send(()).unwrap();
    drop(reactor);
    rest_runtime.block_on(async {
        head.await.expect("the head completes");
        for result in join_all(rest).await {
            result.expect("every chained operation completes");
        }
    });
}
