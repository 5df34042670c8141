//! Attacks of the twenty-first session's helper, through the `npu` facade: Tokio shapes not
//! tried before (a multi-thread runtime shut down with a zero timeout under thousands of
//! unordered operations, a runtime dropped inside another runtime's task, a runtime whose
//! blocking pool cannot start a thread), wakers whose clone panics, and wakers that drop the
//! last handles of streams, contexts, pools and a whole runtime on the thread that completes
//! an operation.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::pin::Pin;
use std::sync::Arc;

use common::*;
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;

/// A current-thread Tokio runtime whose blocking pool can never start a thread: its threads'
/// stack (64 TiB) is more than the host can map, so `spawn_blocking` panics ("OS can't spawn
/// worker thread") when no pool thread exists yet. User configuration, in safe code.
fn runtime_without_blocking_threads() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_stack_size(1 << 46)
        .build()
        .unwrap()
}

/// Rules 2 and 3 when Tokio cannot start a blocking thread: a `BlockingSync` submission made
/// inside a runtime whose blocking pool cannot spawn (Tokio's `spawn_blocking` panics then)
/// must not let go of what the operation owns once the device has accepted the work. Two
/// submissions on a held device: a copy from an `Arc`-shared pinned buffer, and a copy into
/// one part of a split pinned buffer. Whatever the submission does (resolve, fail, or even
/// panic), the device has the work: `Arc::get_mut` must fail and the other part must not
/// unwrap to the whole buffer until the device has run the copies, or the caller would hold
/// `&mut` to memory the device reads or writes. A break: either succeeds while the device is
/// held.
#[test]
fn a_blocking_pool_that_cannot_start_a_thread_never_lets_a_submitted_operations_value_go() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    let s = stream(&ctx, Strategy::BlockingSync);
    let rt = runtime_without_blocking_threads();
    let mut shared = Arc::new(PinnedBuffer::from_slice(&ctx, &[0x5a_u8; 4096]).unwrap());
    let src = DeviceBuffer::from_host_blocking(&ctx, &[0xab_u8; 4096]).unwrap();
    let (part, rest) = PinnedBuffer::<u8>::new(&ctx, 8192)
        .unwrap()
        .split_at(4096)
        .unwrap();
    let held = sim::hold(&ctx.device()).unwrap();
    let (copy_in, copy_out) = rt.block_on(async {
        let copy_in = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.copy_h2d(shared.clone(), DeviceBuffer::<u8>::new(&ctx, 4096).unwrap())
        }));
        let copy_out =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.copy_d2h(src, part)));
        (copy_in.ok(), copy_out.ok())
    });
    assert!(
        Arc::get_mut(&mut shared).is_none(),
        "the caller has `&mut` to a buffer a held copy still reads (submission {})",
        if copy_in.is_some() {
            "returned"
        } else {
            "panicked"
        }
    );
    let rest = match rest.into_whole() {
        Ok(_whole) => panic!(
            "the caller unwrapped the whole buffer while a held copy still writes into it \
             (submission {})",
            if copy_out.is_some() {
                "returned"
            } else {
                "panicked"
            }
        ),
        Err(refused) => refused.value.unwrap(),
    };
    drop(held);
    let outcome = run(async {
        let copied_in = match copy_in {
            Some(op) => Some(op.await),
            None => None,
        };
        let copied_out = match copy_out {
            Some(op) => Some(op.await),
            None => None,
        };
        (copied_in, copied_out)
    });
    drop((outcome, rest, rt));
    run(s.synchronize()).unwrap();
    assert!(Arc::get_mut(&mut shared).is_some(), "the copy has run");
    drop((shared, s));
    until_released("every allocation", || within(live_memory(&ctx), baseline));
}

/// "Never a panic", and rule 7, when Tokio cannot start a blocking thread under a paused
/// clock: the first pending poll of an operation (and of an event wait) on a paused runtime
/// spawns a blocking task that keeps the clock still. On a runtime whose
/// blocking pool cannot start a thread, each future must still resolve with its data, under
/// every strategy. A break: a poll that panics (Tokio's "OS can't spawn worker thread"),
/// every time it is polled.
#[test]
fn futures_polled_on_a_paused_runtime_that_cannot_start_a_blocking_thread_resolve() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .thread_stack_size(1 << 46)
            .build()
            .unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        let polled = rt.block_on(async {
            let mut memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4);
            let event = Event::new(&ctx).unwrap();
            event.record(&s).unwrap();
            let mut event_wait = Box::pin(event.wait());
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                polled_once(Pin::new(&mut memset)).is_pending()
                    && polled_once(event_wait.as_mut()).is_pending()
            }));
            drop(held);
            match panicked {
                Ok(pending) => {
                    assert!(pending, "{strategy:?}: held work resolved");
                    let buffer = memset.await.unwrap();
                    event_wait.await.unwrap();
                    Ok(buffer.to_vec_blocking().unwrap())
                }
                Err(_) => Err(()),
            }
        });
        assert_eq!(
            polled.expect("a poll panicked: Tokio could not start the clock's keeper"),
            [4; 64],
            "{strategy:?}"
        );
        drop((rt, s));
        until_released(&format!("{strategy:?}: every allocation"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}
