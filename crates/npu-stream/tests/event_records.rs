//! Attacks on `Event::record` from two threads at once, on two streams. The event stands for
//! its newest record, and `Event::wait` must wait for that one: the completion it watches was
//! stored after the record returned, outside any lock the two streams share, so a record that
//! reached the device first could store its completion last, and `wait` would then resolve
//! while the event's newest record had not been reached.

use std::sync::{Arc, Barrier};

use futures::FutureExt;
use npu_core::Device;
use npu_stream::{Event, Stream, ValueCondition, ValueWord};

const ROUNDS: usize = 1000;
const RECORDS: usize = 20;

#[test]
fn wait_watches_the_newest_of_records_racing_on_two_streams() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let (free, gated, opener) = (
        Stream::new(&ctx).unwrap(),
        Stream::new(&ctx).unwrap(),
        Stream::new(&ctx).unwrap(),
    );
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for _ in 0..ROUNDS {
        // The gated stream reaches none of its records until the round ends; the free one
        // reaches all of its own. So once the free stream is drained, the event is complete
        // exactly when its newest record was made on the free stream.
        let word = Arc::new(ValueWord::new(&ctx, 0).unwrap());
        let gate = gated.wait_value(word.clone(), 1, ValueCondition::Equal);
        let event = Event::new(&ctx).unwrap();
        let start = Barrier::new(2);
        std::thread::scope(|scope| {
            for stream in [&free, &gated] {
                let (event, start) = (&event, &start);
                scope.spawn(move || {
                    start.wait();
                    for _ in 0..RECORDS {
                        event.record(stream).unwrap();
                    }
                });
            }
        });
        tokio.block_on(free.synchronize()).unwrap();
        let newest_reached = event.is_complete().unwrap();
        let waited = event.wait().now_or_never().is_some();
        assert_eq!(
            waited, newest_reached,
            "wait resolved: {waited}; the event's newest record reached: {newest_reached}"
        );
        tokio.block_on(async {
            opener.write_value(word, 1).await.unwrap();
            gate.await.unwrap();
        });
    }
}
