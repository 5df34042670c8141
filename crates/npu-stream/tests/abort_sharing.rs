//! Promise: aborts called on a stream while one is in progress share it instead of each taking
//! a thread until the device's running task ends, so a loop of aborts under a kernel that
//! never returns cannot exhaust the process's threads. Its own process, and its tests take
//! turns, so that no other test starts or ends threads while one counts them.

mod common;
mod kernel_support;

use common::{STRATEGIES, memsets_until_refused, run, stream, until_the_runtime_aborts};
use npu_core::Device;
use npu_mem::DeviceBuffer;

/// Held by each test for its whole run.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ids of the process's threads alive now. Threads are counted by id, not by number: one
/// ending meanwhile (the previous case's abort thread, which may still be winding down after
/// delivering its result) would hide one started. Not by name either: a thread names itself
/// once it runs, after `spawn` has returned.
fn thread_ids() -> std::collections::HashSet<u64> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| task.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// How many threads alive now were not among `before`: started since, since nothing else in
/// the test starts threads while it counts.
fn started_since(before: &std::collections::HashSet<u64>) -> usize {
    thread_ids().difference(before).count()
}

#[test]
fn aborts_called_during_an_abort_share_its_thread_and_its_result() {
    let _turn = turn();
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let (running, _gate) = kernel_support::launch_gated(&s);
        let queued = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        // The first abort waits in the runtime for the gated kernel; the others share it.
        let before = thread_ids();
        let aborts: Vec<_> = (0..64).map(|_| s.abort()).collect();
        let started = started_since(&before);
        assert!(
            started <= 1,
            "{strategy:?}: {started} threads for the aborts"
        );
        // The abort has begun once a submission is refused at once; those queued before then
        // are discarded with the rest.
        let (refused, mut behind) = memsets_until_refused(&s, 2);
        behind.push(queued);
        // The gated kernel is aborted only if it returns once the runtime call has begun.
        until_the_runtime_aborts(&s);
        kernel_support::open_gate();
        for abort in aborts {
            run(abort).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        }
        assert!(run(refused).unwrap_err().error.is_aborted(), "{strategy:?}");
        for memset in behind {
            assert!(run(memset).unwrap_err().error.is_aborted(), "{strategy:?}");
        }
        assert!(run(running).unwrap_err().error.is_aborted(), "{strategy:?}");
        // The shared abort is over: the next one is an abort of its own, and the stream runs.
        run(s.abort()).unwrap();
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
    }
}

/// An abort called after `stop` returned must clear that stop, so it does not share an abort
/// whose runtime call began before the stop (which may have returned before the stop took
/// effect, leaving the stream stopped once both resolve). (From the twelfth review, which
/// found the window by sweeping delays: 2 of 20,000 iterations left the stream stopped.)
#[test]
fn an_abort_called_after_a_stop_does_not_share_an_abort_from_before_it() {
    let _turn = turn();
    let ctx = Device::open(1).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let (running, _gate) = kernel_support::launch_gated(&s);
        let first = s.abort();
        // The first abort's runtime call has begun once the runtime refuses a submission.
        let (refused, behind) = memsets_until_refused(&s, 2);
        until_the_runtime_aborts(&s);
        s.stop().unwrap();
        // The second abort's thread lives until the gate opens: its runtime call waits for the
        // gated kernel too.
        let before = thread_ids();
        let second = s.abort();
        assert!(
            started_since(&before) == 1,
            "{strategy:?}: the abort after the stop shared the one from before it"
        );
        kernel_support::open_gate();
        run(first).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        run(second).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert!(run(refused).unwrap_err().error.is_aborted(), "{strategy:?}");
        for memset in behind {
            assert!(run(memset).unwrap_err().error.is_aborted(), "{strategy:?}");
        }
        let _ = run(running);
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
    }
}
