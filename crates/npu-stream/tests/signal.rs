//! Awaitable signalling: notifies, value writes and waits, event waits with a timeout. Each is
//! an operation with the ownership and cancellation rules of a copy, checked under every
//! completion strategy. Nothing here uses the hold gate: work is held back by waits that are
//! never satisfied, which only this test's own streams see.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{STRATEGIES, in_process, invalid, run, stream};
use npu_core::{Completion, Context};
use npu_mem::{DeviceBuffer, Memory, MemoryMut};
use npu_stream::{Event, Notify, Stream, ValueCondition, ValueWord};

fn context(device: u32) -> Context {
    in_process()
        .device(device)
        .unwrap()
        .primary_context()
        .clone()
}

/// A shared value word holding 0.
fn word(context: &Context) -> Arc<ValueWord> {
    Arc::new(ValueWord::new(context, 0).unwrap())
}

#[test]
fn a_wait_on_a_notify_resolves_once_another_stream_records_it() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let (producer, consumer) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        let waited = consumer.wait_notify(&notify);
        // Behind the wait on the consumer: it cannot run before the producer's record.
        let behind = consumer.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5);
        assert!(
            !waited.is_complete() && !behind.is_complete(),
            "{strategy:?}"
        );
        run(async {
            producer.record_notify(&notify).await.unwrap();
            waited.await.unwrap();
            let buffer = behind.await.unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
            // One record satisfies one wait; a record queued first satisfies the next.
            producer.record_notify(&notify).await.unwrap();
            consumer.wait_notify(&notify).await.unwrap();
        });
        assert_ne!(
            notify.id().unwrap(),
            Notify::new(&ctx).unwrap().id().unwrap()
        );
    }
}

#[test]
fn a_notify_wait_that_times_out_fails_with_a_timeout_and_the_stream_goes_on() {
    let ctx = context(0);
    let never_set = Notify::new(&ctx).unwrap();
    // All three at once, so the test waits for one device timeout, not three.
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let waits: Vec<_> = streams
        .iter()
        .map(|s| s.wait_notify_timeout(&never_set, Duration::from_millis(1)))
        .collect();
    run(async {
        for (waited, s) in waits.into_iter().zip(&streams) {
            let failed = waited.await.unwrap_err();
            assert!(failed.is_timeout(), "{:?}: {}", s.strategy(), failed.error);
            assert!(failed.value.is_some(), "the notify is handed back");
            let later = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 3).await;
            assert_eq!(later.unwrap().to_vec_blocking().unwrap(), [3; 8]);
        }
    });
}

#[test]
fn a_wait_on_a_notify_that_is_never_recorded_is_discarded_by_an_abort() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let never_set = Notify::new(&ctx).unwrap();
        let waited = s.wait_notify(&never_set);
        let behind = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        run(async {
            s.abort().await.unwrap();
            let failed = waited.await.unwrap_err();
            assert!(failed.is_aborted(), "{strategy:?}: {}", failed.error);
            assert!(
                failed.value.is_some(),
                "{strategy:?}: the notify is handed back"
            );
            let behind = behind.await.unwrap_err();
            assert!(behind.is_aborted(), "{strategy:?}: {}", behind.error);
            // The stream runs again, and the notify still works.
            let other = stream(&ctx, strategy);
            other.record_notify(&never_set).await.unwrap();
            s.wait_notify(&never_set).await.unwrap();
        });
    }
}

#[test]
fn a_dropped_value_wait_keeps_its_word_until_the_device_has_passed_it() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let (writer, waiter) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let mut flag = word(&ctx);
        let waited = waiter.wait_value(flag.clone(), 1, ValueCondition::Equal);
        let done: Completion = waited.completion().clone();
        drop(waited);
        npu_core::reaper::flush();
        assert!(
            Arc::get_mut(&mut flag).is_none(),
            "{strategy:?}: the queued wait still owns a clone"
        );
        run(async {
            writer.write_value(flag.clone(), 1).await.unwrap();
            done.wait().await.unwrap();
        });
        npu_core::reaper::flush();
        assert!(Arc::get_mut(&mut flag).is_some(), "{strategy:?}: released");
    }
}

#[test]
fn a_forgotten_wait_only_leaks_and_the_stream_still_works() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        let waited = s.wait_notify(&notify);
        let done = waited.completion().clone();
        std::mem::forget(waited);
        run(async {
            stream(&ctx, strategy).record_notify(&notify).await.unwrap();
            done.wait().await.unwrap();
            s.synchronize().await.unwrap();
        });
    }
}

#[test]
fn dropping_a_tokio_runtime_does_not_wait_for_a_notify_wait() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (spawned_stream, spawned_notify) = (s.clone(), notify.clone());
        let pending = tokio.block_on(async move {
            // Submitted inside the runtime (BlockingSync waits on its blocking pool), then
            // left pending when the runtime goes.
            let waited = spawned_stream.wait_notify(&spawned_notify);
            let done = waited.completion().clone();
            tokio::spawn(waited);
            done
        });
        drop(tokio); // must return although the device still waits
        assert!(
            !pending.is_complete(),
            "{strategy:?}: nobody recorded the notify"
        );
        run(async {
            stream(&ctx, strategy).record_notify(&notify).await.unwrap();
            pending.wait().await.unwrap();
        });
    }
}

#[test]
fn value_waits_hold_the_stream_until_their_condition_holds() {
    let ctx = context(0);
    let cases = [
        (ValueCondition::AtLeast, 5, [4, 6]),
        (ValueCondition::Equal, 9, [8, 9]),
        (ValueCondition::AnyBitOf, 0b100, [0b011, 0b110]),
        (ValueCondition::NotAllBits, 0, [u64::MAX, u64::MAX - 1]),
    ];
    for strategy in STRATEGIES {
        for (condition, value, [miss, hit]) in cases {
            assert!(!condition.holds(miss, value) && condition.holds(hit, value));
            let (writer, waiter) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let flag = word(&ctx);
            run(async {
                writer.write_value(flag.clone(), miss).await.unwrap();
                let waited = waiter.wait_value(flag.clone(), value, condition);
                let behind = waiter.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1);
                // The miss is in device memory before the wait was queued.
                assert!(!behind.is_complete(), "{strategy:?} {condition:?}");
                let word = writer.write_value(flag.clone(), hit).await.unwrap();
                let seen = waited.await.unwrap();
                assert!(Arc::ptr_eq(&seen, &word), "the wait hands its word back");
                behind.await.unwrap();
                drop((seen, word));
                let mut flag = Arc::into_inner(flag).expect("no operation holds the word");
                assert_eq!(flag.read_blocking().unwrap(), hit);
            });
        }
    }
}

/// An `i..i + 1` view with an address that is not 8-byte aligned cannot be made safely (views
/// and casts keep element alignment), so this wraps a byte buffer in a `Memory` of its own.
#[derive(Debug)]
struct Misaligned(DeviceBuffer<u8>);

// SAFETY: forwards a range inside the wrapped allocation; the one `u64` claimed at offset 4
// lies within its 16 bytes.
unsafe impl Memory for Misaligned {
    type Elem = u64;

    fn context(&self) -> &Context {
        self.0.context()
    }

    fn addr(&self) -> *const std::ffi::c_void {
        self.0.addr().cast::<u8>().wrapping_add(4).cast()
    }

    fn len(&self) -> usize {
        1
    }

    fn record_use(&self, completion: &Completion) {
        self.0.record_use(completion)
    }
}

// SAFETY: the wrapped buffer is owned, so nothing else reaches these bytes.
unsafe impl MemoryMut for Misaligned {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        self.addr().cast_mut()
    }
}

// SAFETY: device memory, as the wrapped buffer is.
unsafe impl npu_mem::DeviceSlice for Misaligned {}

#[test]
fn a_value_word_is_one_aligned_word() {
    let ctx = context(0);
    let two = DeviceBuffer::<u64>::new(&ctx, 2).unwrap();
    let failed = ValueWord::from_memory(two).unwrap_err();
    assert_eq!(invalid(&failed.error), ("ValueWord::from_memory", "memory"));
    assert!(
        failed.error.to_string().contains("holds 2 words"),
        "{}",
        failed.error
    );
    let two = failed.value.expect("handed back");
    let one = ValueWord::from_memory(two.view(1..2).unwrap()).unwrap();
    let s = stream(&ctx, STRATEGIES[0]);
    let one = run(s.write_value(one, 7))
        .unwrap()
        .into_inner()
        .into_inner();
    let mut back = [0; 2];
    one.copy_to_host_blocking(&mut back).unwrap();
    assert_eq!(back, [0, 7], "the view's word, not the buffer's first");

    let misaligned = Misaligned(DeviceBuffer::new(&ctx, 16).unwrap());
    let failed = ValueWord::from_memory(misaligned).unwrap_err();
    assert_eq!(invalid(&failed.error), ("ValueWord::from_memory", "memory"));
    assert!(
        failed.error.to_string().contains("not 8-byte aligned"),
        "{}",
        failed.error
    );
}

#[test]
fn value_operations_check_their_word_before_submitting() {
    let ctx = context(0);
    let other_device = context(1);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            let elsewhere = ValueWord::new(&other_device, 0).unwrap();
            let failed = s
                .wait_value(elsewhere, 0, ValueCondition::Equal)
                .await
                .unwrap_err();
            assert_eq!(invalid(&failed.error), ("Stream::wait_value", "word"));
            assert!(failed.error.to_string().contains("belongs to device 1"));
            let elsewhere = failed.value.expect("handed back");
            let failed = s.write_value(elsewhere, 1).await.unwrap_err();
            assert_eq!(invalid(&failed.error), ("Stream::write_value", "word"));
        });
    }
}

#[test]
fn notifies_belong_to_their_device() {
    let ctx = context(0);
    let foreign = Notify::new(&context(1)).unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            let failed = s.record_notify(&foreign).await.unwrap_err();
            assert_eq!(invalid(&failed.error), ("Stream::record_notify", "notify"));
            let failed = s.wait_notify(&foreign).await.unwrap_err();
            assert_eq!(invalid(&failed.error), ("Stream::wait_notify", "notify"));
            let zero = s.wait_notify_timeout(&foreign, Duration::ZERO).await;
            let failed = zero.unwrap_err();
            assert_eq!(
                invalid(&failed.error),
                ("Stream::wait_notify_timeout", "timeout")
            );
        });
    }
}

#[test]
fn an_event_wait_with_a_timeout_resolves_or_times_out() {
    let ctx = context(0);
    let streams: Vec<(Stream, Stream)> = STRATEGIES
        .iter()
        .map(|&s| (stream(&ctx, s), stream(&ctx, s)))
        .collect();
    let never_set = Notify::new(&ctx).unwrap();
    let mut stuck = Vec::new();
    for (producer, consumer) in &streams {
        // In time: recorded after finished work.
        let ready = Event::new(&ctx).unwrap();
        ready.record(producer).unwrap();
        let waited = consumer.wait_event_timeout(&ready, Duration::from_secs(30));
        run(async { waited.await.unwrap() });
        // Too late: the record sits behind a wait nobody satisfies.
        let blocked = stream(&ctx, producer.strategy());
        let held = blocked.wait_notify(&never_set);
        let late = Event::new(&ctx).unwrap();
        late.record(&blocked).unwrap();
        stuck.push((
            consumer.clone(),
            consumer.wait_event_timeout(&late, Duration::from_millis(1)),
            blocked,
            held,
        ));
        let zero = consumer.wait_event_timeout(&late, Duration::ZERO);
        let failed = run(async { zero.await.unwrap_err() });
        assert_eq!(
            invalid(&failed.error),
            ("Stream::wait_event_timeout", "timeout")
        );
    }
    run(async {
        for (consumer, late, blocked, held) in stuck {
            let failed = late.await.unwrap_err();
            assert!(
                failed.is_timeout(),
                "{:?}: {}",
                consumer.strategy(),
                failed.error
            );
            let later = consumer.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 2);
            assert_eq!(later.await.unwrap().to_vec_blocking().unwrap(), [2; 8]);
            blocked.abort().await.unwrap();
            assert!(held.await.unwrap_err().is_aborted());
        }
    });
}
