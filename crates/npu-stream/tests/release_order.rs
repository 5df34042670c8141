//! Promise: whoever sees an operation complete (a task awaiting its completion, a thread in
//! `wait_blocking`, a caller polling `is_complete`) finds the buffers of the operation's
//! dropped future already handed to the reaper, so `reaper::flush` then frees them, even when
//! the future is dropped on another thread while the operation completes, and when the
//! operation fails. Its own process: it counts the device's live allocations. (From the twelfth
//! session's adversarial test of the completion's publication order.)

mod common;

use common::{Rng, STRATEGIES, run, stream};
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::{Op, Strategy};

const ROUNDS: usize = 100;

fn live() -> u64 {
    control::device_stats(0).unwrap().live_allocations
}

/// One strategy's rounds: four memsets, each future dropped by a thread of its own after a
/// random number of yields (racing the completion), each operation then seen complete in one
/// of three ways; a third of the rounds with one memset failing when `fail`.
fn rounds(strategy: Strategy, fail: bool) {
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    let s = stream(&ctx, strategy);
    let mut rng = Rng(u64::from(fail) * 1_000 + strategy as u64);
    for round in 0..ROUNDS {
        npu_core::reaper::flush();
        let before = live();
        if fail && round % 3 == 0 {
            let nth = rng.below(4) + 1;
            control::fail_task(s.as_raw(), nth, 507015).unwrap();
        }
        let ops: Vec<Op<DeviceBuffer<u8>>> = (0..4)
            .map(|value| s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), value))
            .collect();
        let seen: Vec<_> = ops.iter().map(|op| op.completion().clone()).collect();
        let droppers: Vec<_> = ops
            .into_iter()
            .map(|op| {
                let yields = rng.below(200);
                std::thread::spawn(move || {
                    (0..yields).for_each(|_| std::thread::yield_now());
                    drop(op);
                })
            })
            .collect();
        droppers
            .into_iter()
            .for_each(|dropper| dropper.join().unwrap());
        for (way, completion) in seen.iter().enumerate() {
            match way % 3 {
                0 => drop(completion.wait_blocking()),
                1 => common::until("the operation completes", || completion.is_complete()),
                _ => drop(run(completion.wait())),
            }
        }
        npu_core::reaper::flush();
        assert_eq!(
            live(),
            before,
            "{strategy:?}, fail {fail}, round {round}: a buffer stayed allocated"
        );
        // A failure is remembered for the next synchronize: clear it for the next round.
        let _ = run(s.synchronize());
    }
}

#[test]
fn a_dropped_futures_buffers_are_queued_for_release_once_its_operation_is_seen_complete() {
    for strategy in STRATEGIES {
        for fail in [false, true] {
            rounds(strategy, fail);
        }
    }
}
