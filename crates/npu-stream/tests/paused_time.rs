//! Device work under a paused Tokio clock: a one-hour timeout must not fire while a copy that
//! takes milliseconds of real time is in flight.
//!
//! A file of its own: it gives device 0 a slow timing model.

mod common;

use std::time::Duration;

use common::*;
use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
use npu_sim::{TimingModel, control};
use npu_stream::Stream;

const SIZE: usize = 4 << 20;
const HOUR: Duration = Duration::from_secs(3600);

/// Device 0 copies at 1 GB/s: a 4 MiB copy takes about 4 ms, paced to wall time, during
/// which a paused clock with nothing to watch would jump to the timeout.
fn slow_stream(strategy: npu_stream::Strategy) -> Stream {
    let model = TimingModel::default()
        .h2d_bandwidth(1_000_000_000)
        .d2h_bandwidth(1_000_000_000);
    control::set_timing(0, Some(model)).unwrap();
    stream(in_process().device(0).unwrap().primary_context(), strategy)
}

#[tokio::test(start_paused = true)]
async fn a_round_trip_beats_a_one_hour_timeout_under_a_paused_clock() {
    for strategy in STRATEGIES {
        let stream = slow_stream(strategy);
        let ctx = stream.context().clone();
        for round in 0..5 {
            let host = PinnedBuffer::from_slice(&ctx, &vec![round as u8; SIZE]).unwrap();
            let device = DeviceBuffer::<u8>::new(&ctx, SIZE).unwrap();
            let start = tokio::time::Instant::now();
            let round_trip = async {
                let (host, device) = stream.copy_h2d(host, device).await?;
                Ok::<_, npu_core::Error>(stream.copy_d2h(device, host).await?)
            };
            tokio::select! {
                copied = round_trip => {
                    let (_, host) = copied.unwrap();
                    assert!(host.iter().all(|&b| b == round as u8));
                }
                () = tokio::time::sleep(HOUR) => panic!("{strategy:?}: the timeout fired first"),
            }
            assert_eq!(start.elapsed(), Duration::ZERO, "paused time stood still");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn timeout_around_an_op_and_a_timer_still_advances_after_it() {
    let stream = slow_stream(npu_stream::Strategy::EventPoll);
    let ctx = stream.context().clone();
    let copy = stream.copy_h2d(
        PinnedBuffer::from_slice(&ctx, &vec![1u8; SIZE]).unwrap(),
        DeviceBuffer::<u8>::new(&ctx, SIZE).unwrap(),
    );
    let (_, device) = tokio::time::timeout(HOUR, copy).await.unwrap().unwrap();
    assert_eq!(device.len(), SIZE);
    // Once the work is done the clock auto-advances again: a long sleep ends at once.
    let start = tokio::time::Instant::now();
    tokio::time::sleep(HOUR).await;
    assert_eq!(start.elapsed(), HOUR);
}

/// A device wait keeps a paused clock still for the future that awaits it, not for the work:
/// once an unsatisfied wait's future is dropped (a `select!` branch lost), timers run again,
/// although the wait itself stays queued on its stream until something satisfies it or an
/// abort discards it. (From the tenth review: before, a dropped wait nothing would satisfy
/// stopped the clock for good.)
#[test]
fn a_dropped_wait_lets_a_paused_clock_move_again() {
    for strategy in STRATEGIES {
        let ctx = in_process().device(1).unwrap().create_context().unwrap();
        let s = stream(&ctx, strategy);
        let notify = npu_stream::Notify::new(&ctx).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let paused = {
            let (s, notify) = (s.clone(), notify.clone());
            std::thread::spawn(move || {
                let tokio = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .unwrap();
                tokio.block_on(async {
                    let mut wait = s.wait_notify(&notify);
                    // Polled once (pending), so that it keeps the clock, then dropped.
                    tokio::select! {
                        biased;
                        _ = &mut wait => panic!("nothing recorded the notify"),
                        () = tokio::task::yield_now() => {}
                    }
                    drop(wait);
                    tokio::time::sleep(HOUR).await;
                });
                tx.send(()).unwrap();
            })
        };
        // On a regression the sleep never ends: the bound makes that a failure, after
        // releasing the wait so that the thread can finish.
        let slept = rx.recv_timeout(Duration::from_secs(60));
        let release = stream(&ctx, strategy);
        run(release.record_notify(&notify)).unwrap();
        paused.join().unwrap();
        slept.unwrap_or_else(|_| panic!("{strategy:?}: the dropped wait kept the clock still"));
        run(s.synchronize()).unwrap();
    }
}
