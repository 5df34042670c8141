//! A device lost after the reactor's query found an operation done and before the reactor read
//! the operation's result from its event. On a lost device that synchronisation waits for the
//! device's running kernel, so an unbounded one stalled the reactor, and with it every device's
//! `EventPoll` work, until the kernel returned. Its own process: device 1 stays lost. (From the
//! fourteenth review.)
//!
//! The window is made deterministic with the reactor's own order: it completes what a pass
//! found done at the end of the pass, one operation after another, and a completion wakes its
//! task on the reactor thread. The test holds the reactor in a waker while two operations of
//! device 1 finish, so that the next pass finds both done; the waker of the first one
//! completed then loses the device, and the second one is read after the loss.

mod common;
mod kernel_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::thread::JoinHandle;

use common::{every_strategy_completes_on, hold_the_reactor, in_process, run, stream, until};
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::{Event, Strategy};

/// Loses device 1 when first woken, and returns once the loss is declared (the declaration
/// itself returns only when the device's running kernel has).
#[derive(Default)]
struct LosesTheDevice {
    fired: AtomicBool,
    loser: Mutex<Option<JoinHandle<()>>>,
}

impl Wake for LosesTheDevice {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.fired.swap(true, Ordering::AcqRel) {
            return;
        }
        let loser = std::thread::spawn(|| control::lose_device(1).unwrap());
        *self.loser.lock().unwrap() = Some(loser);
        until("device 1 is lost", || {
            control::device_stats(1).unwrap().lost
        });
    }
}

fn poll_with<F: Future>(future: Pin<&mut F>, waker: &Waker) {
    assert!(
        future
            .poll(&mut TaskContext::from_waker(waker))
            .is_pending(),
        "nothing it waits for can have completed yet"
    );
}

#[test]
fn a_loss_between_a_done_query_and_its_settle_stalls_no_other_device() {
    let runtime = in_process();
    let lost = runtime.device(1).unwrap().primary_context().clone();
    let healthy = runtime.device(0).unwrap().primary_context().clone();
    let (running, _gate) = kernel_support::launch_gated(&stream(&lost, Strategy::EventPoll));

    // Hold the reactor in the waker of an operation of the healthy device.
    let reactor = hold_the_reactor(&healthy);

    // Two operations of device 1 on streams of their own, done on the device before the
    // reactor, still held, can look at them.
    let streams = [
        stream(&lost, Strategy::EventPoll),
        stream(&lost, Strategy::EventPoll),
    ];
    let mut ops: Vec<_> = streams
        .iter()
        .map(|s| Box::pin(s.memset(DeviceBuffer::<u8>::new(&lost, 64).unwrap(), 1)))
        .collect();
    let marks: Vec<Event> = streams
        .iter()
        .map(|s| {
            let mark = Event::new(&lost).unwrap();
            mark.record(s).unwrap();
            mark
        })
        .collect();
    until("both operations ran on the device", || {
        marks.iter().all(|mark| mark.is_complete().unwrap())
    });
    let loses = Arc::new(LosesTheDevice::default());
    let losing = Waker::from(loses.clone());
    for op in &mut ops {
        poll_with(op.as_mut(), &losing);
    }
    drop(reactor);

    // The reactor's next pass finds both done, completes the first (whose waker loses the
    // device while its kernel runs) and reads the second's result. Every strategy's work on
    // the healthy device must complete meanwhile: on a regression the reactor waits for the
    // kernel, which only this thread releases, and the bound turns that into a failure.
    every_strategy_completes_on(&healthy, "device 1's kernel", kernel_support::open_gate);
    assert!(
        loses.fired.load(Ordering::Acquire),
        "a completion of device 1 lost it"
    );
    kernel_support::open_gate();
    loses
        .loser
        .lock()
        .unwrap()
        .take()
        .expect("the loss was declared")
        .join()
        .unwrap();
    // Both operations resolve: the one completed before the loss with its result, the one
    // read after it with its result or with the loss, never hanging.
    for op in ops {
        match run(op) {
            Ok(_) => {}
            Err(failed) => assert!(failed.error.is_device_lost(), "{}", failed.error),
        }
    }
    let _ = run(running);
}
