//! Ordering within a stream, concurrency across streams and ordering through events, shown in
//! simulated device time.
//!
//! Device 0 runs a timing model in this process: memsets move 1 byte per ns and every other
//! task (event records, waits, the callback strategy's host callbacks) takes no time. Each
//! test queues its work behind the device's hold gate and then releases it, so every task
//! starts at a computed simulated instant: max(end of the stream's previous task, awaited
//! events, release). Event timestamps are therefore exact, however busy the host is.

mod common;

use std::sync::MutexGuard;
use std::time::Duration;

use common::{STRATEGIES, exclusive_device0, run, stream};
use npu_core::Context;
use npu_mem::DeviceBuffer;
use npu_sim::{TimingModel, control};
use npu_stream::{Event, Op, Stream};

/// Exclusive use of device 0 (the hold gate and the timing model are device-wide), under the
/// timing model.
fn device() -> (MutexGuard<'static, ()>, Context) {
    let (guard, context) = exclusive_device0();
    let model = TimingModel::default().d2d_bandwidth(1_000_000_000);
    control::set_timing(0, Some(model)).unwrap();
    (guard, context)
}

/// A memset that takes `us` microseconds of device time.
fn busy(context: &Context, stream: &Stream, us: usize) -> Op<DeviceBuffer<u8>> {
    stream.memset(DeviceBuffer::<u8>::new(context, us * 1000).unwrap(), 0x42)
}

fn recorded(context: &Context, stream: &Stream) -> Event {
    let event = Event::new(context).unwrap();
    event.record(stream).unwrap();
    event
}

/// Device time from `a` to `b`, rounded to whole microseconds (ACL reports milliseconds as
/// an f32).
fn micros(a: &Event, b: &Event) -> u128 {
    let elapsed = Event::elapsed(a, b).unwrap();
    (elapsed + Duration::from_nanos(500)).as_micros()
}

/// Awaits every operation and event, checking each succeeded.
async fn finish(ops: Vec<Op<DeviceBuffer<u8>>>, events: &[&Event]) {
    for op in ops {
        op.await.unwrap();
    }
    for event in events {
        event.wait().await.unwrap();
    }
}

#[test]
fn a_stream_runs_its_work_in_order() {
    let (_serial, context) = device();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let start = recorded(&context, &s);
        let first = busy(&context, &s, 300);
        let after_first = recorded(&context, &s);
        let second = busy(&context, &s, 100);
        let after_second = recorded(&context, &s);
        let third = busy(&context, &s, 200);
        let end = recorded(&context, &s);
        control::release(0).unwrap();
        run(finish(vec![first, second, third], &[&end]));

        // Each task starts when the previous one ends: the spans add up.
        assert_eq!(micros(&start, &after_first), 300, "{strategy:?}");
        assert_eq!(micros(&after_first, &after_second), 100, "{strategy:?}");
        assert_eq!(micros(&after_second, &end), 200, "{strategy:?}");
    }
}

#[test]
fn streams_run_concurrently() {
    let (_serial, context) = device();
    for strategy in STRATEGIES {
        let streams: Vec<Stream> = (0..4).map(|_| stream(&context, strategy)).collect();
        control::hold(0).unwrap();
        let starts: Vec<Event> = streams.iter().map(|s| recorded(&context, s)).collect();
        let ops = streams.iter().map(|s| busy(&context, s, 250)).collect();
        let ends: Vec<Event> = streams.iter().map(|s| recorded(&context, s)).collect();
        control::release(0).unwrap();
        run(finish(ops, &ends.iter().collect::<Vec<_>>()));

        // All four started at the release and finished 250 µs later: 250 µs for 1 ms of work.
        for (start, end) in starts.iter().zip(&ends) {
            assert_eq!(micros(&starts[0], start), 0, "{strategy:?}");
            assert_eq!(micros(&starts[0], end), 250, "{strategy:?}");
        }
    }
}

#[test]
fn an_event_orders_two_streams() {
    let (_serial, context) = device();
    for strategy in STRATEGIES {
        let (producer, consumer, free) = (
            stream(&context, strategy),
            stream(&context, strategy),
            stream(&context, strategy),
        );
        control::hold(0).unwrap();
        let start = recorded(&context, &producer);
        let produced = busy(&context, &producer, 400);
        let ready = recorded(&context, &producer);
        consumer.wait_event(&ready).unwrap();
        let consumed = busy(&context, &consumer, 100);
        let consumer_done = recorded(&context, &consumer);
        let unordered = busy(&context, &free, 100);
        let free_done = recorded(&context, &free);
        control::release(0).unwrap();
        run(finish(
            vec![produced, consumed, unordered],
            &[&consumer_done, &free_done],
        ));

        assert_eq!(micros(&start, &ready), 400, "{strategy:?}");
        // The consumer's work started only when the producer's event completed...
        assert_eq!(micros(&start, &consumer_done), 500, "{strategy:?}");
        // ...while a stream that waits for nothing ran at once.
        assert_eq!(micros(&start, &free_done), 100, "{strategy:?}");
    }
}

#[test]
fn awaiting_an_event_waits_for_the_work_it_captured() {
    let (_serial, context) = device();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let start = recorded(&context, &s);
        let op = busy(&context, &s, 300);
        let done = recorded(&context, &s);
        assert!(!done.is_complete().unwrap(), "held: nothing ran yet");
        control::release(0).unwrap();
        run(done.wait()).unwrap();
        assert!(done.is_complete().unwrap());
        assert_eq!(micros(&start, &done), 300, "{strategy:?}");
        run(op).unwrap();
    }
}
