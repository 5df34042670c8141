//! A device lost while one of its kernels still runs: the simulator reports the loss only once
//! the kernel has returned, and until then the shared threads that look at the lost device's
//! work (the reactor's queries, the sentinel's timed waits) must not wait for the kernel, or
//! every other device's work stalls behind it. Its own process: device 1 stays lost.
//! (From the tenth review.)

mod common;
mod kernel_support;

use std::num::NonZeroU32;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use common::{STRATEGIES, in_process, run, stream};
use npu_core::LaunchConfig;
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::Event;

/// A kernel that runs until the test opens its gate.
const GATED: &str = "npu_stream_test_gated_under_loss";

/// Whether the gated kernel has started, and whether it may return.
static GATE: (Mutex<(bool, bool)>, Condvar) = (Mutex::new((false, false)), Condvar::new());

fn set_gate(update: impl FnOnce(&mut (bool, bool))) {
    update(&mut GATE.0.lock().unwrap());
    GATE.1.notify_all();
}

fn wait_gate(until: impl Fn(&(bool, bool)) -> bool) {
    let state = GATE.0.lock().unwrap();
    drop(GATE.1.wait_while(state, |state| !until(state)).unwrap());
}

#[test]
fn a_lost_device_running_a_kernel_stalls_no_other_device() {
    npu_sim::kernel::register(GATED, |_, _, _| {
        set_gate(|gate| gate.0 = true);
        wait_gate(|gate| gate.1);
        0
    })
    .unwrap();
    let runtime = in_process();
    let lost = runtime.device(1).unwrap().primary_context().clone();
    let healthy = runtime.device(0).unwrap().primary_context().clone();
    let gated = kernel_support::in_process(&lost, GATED);
    // Work of every strategy queued on the device about to be lost, behind its running
    // kernel: the reactor, the callback worker and a blocking wait each watch some of it.
    let streams: Vec<_> = STRATEGIES.map(|strategy| stream(&lost, strategy)).into();
    // SAFETY: the gated kernel takes no arguments and touches no memory.
    let running = unsafe { streams[0].launch_with(&gated, LaunchConfig::new(NonZeroU32::MIN), ()) };
    wait_gate(|gate| gate.0);
    // The other streams wait for the kernel too.
    let kernel_done = Event::new(&lost).unwrap();
    kernel_done.record(&streams[0]).unwrap();
    for s in &streams[1..] {
        s.wait_event(&kernel_done).unwrap();
    }
    let behind: Vec<_> = streams
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&lost, 64).unwrap(), 1))
        .collect();
    // The loss returns only once the kernel has: it is declared on a thread of its own.
    let loser = std::thread::spawn(|| control::lose_device(1).unwrap());
    while !control::device_stats(1).unwrap().lost {
        std::thread::yield_now();
    }
    // Every strategy on the healthy device completes while the lost device's kernel runs. On
    // a regression the reactor waits for the kernel, which only this thread releases: the
    // bound turns that deadlock into a failure.
    for strategy in STRATEGIES {
        let s = stream(&healthy, strategy);
        let (tx, rx) = mpsc::channel();
        let healthy = healthy.clone();
        std::thread::spawn(move || {
            let done = run(s.memset(DeviceBuffer::<u8>::new(&healthy, 64).unwrap(), 7));
            let _ = tx.send(done.map(|buffer| buffer.to_vec_blocking().unwrap()));
        });
        let done = rx.recv_timeout(Duration::from_secs(60));
        if done.is_err() {
            set_gate(|gate| gate.1 = true);
        }
        let filled = done
            .unwrap_or_else(|_| panic!("{strategy:?}: device 0 waited for device 1's kernel"))
            .unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(filled, [7; 64], "{strategy:?}");
    }
    set_gate(|gate| gate.1 = true);
    loser.join().unwrap();
    // The lost device's work resolves: what was queued behind the kernel fails with the loss.
    for op in behind {
        let err = run(op).unwrap_err().error;
        assert!(err.is_device_lost(), "{err}");
    }
    let _ = run(running);
}
