//! Waker behaviour of the operation futures, polled by hand with `tokio_test::task::spawn`:
//! spurious polls, a waker replaced between polls, a drop while pending, and polling after
//! completion; and dropping a stream with work queued. Device 0's hold gate keeps the
//! operations pending for exactly as long as a test needs; the tests share a mutex because the
//! gate is device-wide.

mod common;

use std::sync::mpsc;
use std::task::Poll;

use common::{HANG, STRATEGIES, exclusive_device0, pattern, stream, until};
use npu_core::Error;
use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
use npu_sim::control;
use npu_stream::Event;
use tokio_test::task::spawn;

#[test]
fn spurious_polls_stay_pending_and_keep_one_registration() {
    let (_serial, context) = exclusive_device0();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let mut op = spawn(s.memset(DeviceBuffer::<u8>::new(&context, 512).unwrap(), 9));
        assert!(op.poll().is_pending());
        assert_eq!(op.waker_ref_count(), 2, "the completion holds one waker");
        for _ in 0..3 {
            assert!(op.poll().is_pending(), "{strategy:?}: a spurious poll");
            assert!(!op.is_woken());
            assert_eq!(
                op.waker_ref_count(),
                2,
                "re-registering does not pile up wakers"
            );
        }
        control::release(0).unwrap();
        until("the device work is done", || op.is_woken());
        // Waking consumes the registered waker (the waker flags itself before it is dropped,
        // so the count is awaited rather than read once).
        until("no waker clone is left behind", || {
            op.waker_ref_count() == 1
        });
        let Poll::Ready(Ok(buffer)) = op.poll() else {
            panic!("{strategy:?}: woken but not ready")
        };
        assert_eq!(buffer.to_vec_blocking().unwrap(), vec![9; 512]);
    }
}

#[test]
fn only_the_latest_waker_is_woken() {
    let (_serial, context) = exclusive_device0();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let mut op = s.memset(DeviceBuffer::<u8>::new(&context, 512).unwrap(), 3);
        let (mut first, mut second) = (spawn(()), spawn(()));
        let polled = first.enter(|cx, _| std::pin::Pin::new(&mut op).poll(cx));
        assert!(polled.is_pending());
        assert_eq!(first.waker_ref_count(), 2);
        // The future moves to another task (as after a `select!` hands it on).
        let polled = second.enter(|cx, _| std::pin::Pin::new(&mut op).poll(cx));
        assert!(polled.is_pending());
        assert_eq!(
            first.waker_ref_count(),
            1,
            "the replaced waker was released"
        );
        assert_eq!(second.waker_ref_count(), 2);
        control::release(0).unwrap();
        until("the latest waker is woken", || second.is_woken());
        assert!(
            !first.is_woken(),
            "{strategy:?}: the replaced waker is not woken"
        );
        let polled = second.enter(|cx, _| std::pin::Pin::new(&mut op).poll(cx));
        assert_eq!(polled.map(|r| r.unwrap().len()), Poll::Ready(512));
    }
}

/// Dropping a pending operation neither cancels the device work nor frees its buffers before
/// that work is done; they are released right after it.
#[test]
fn a_future_dropped_while_pending_releases_its_buffers_after_the_device() {
    let (_serial, context) = exclusive_device0();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        let before_device = control::device_stats(0).unwrap().live_allocations;
        let before_pinned = control::host_stats().unwrap().pinned_allocations;
        let data = pattern(21, 8192);

        control::hold(0).unwrap();
        let source = PinnedBuffer::from_slice(&context, &data).unwrap();
        let target = DeviceBuffer::<u8>::new(&context, data.len()).unwrap();
        let mut op = spawn(s.copy_h2d(source, target));
        assert!(op.poll().is_pending());
        let completion = op.completion().clone();
        drop(op);

        // Nothing was released: the device has not run the copy yet.
        npu_core::reaper::flush();
        let live = (
            control::device_stats(0).unwrap().live_allocations,
            control::host_stats().unwrap().pinned_allocations,
        );
        assert_eq!(live, (before_device + 1, before_pinned + 1), "{strategy:?}");

        // The completer queues the releases before the result becomes visible; flushing the
        // reaper once `wait_blocking` returns therefore observes them.
        control::release(0).unwrap();
        assert!(completion.wait_blocking().is_ok(), "the copy still ran");
        npu_core::reaper::flush();
        let live = (
            control::device_stats(0).unwrap().live_allocations,
            control::host_stats().unwrap().pinned_allocations,
        );
        assert_eq!(live, (before_device, before_pinned), "{strategy:?}");
    }
}

#[test]
fn polling_after_completion_is_an_error_not_a_panic() {
    let (_serial, context) = exclusive_device0();
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let mut op = spawn(s.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 1));
        let event = Event::new(&context).unwrap();
        event.record(&s).unwrap();
        let mut wait = spawn(event.wait());
        let mut sync = spawn(s.synchronize());
        assert!(op.poll().is_pending() && wait.poll().is_pending() && sync.poll().is_pending());
        control::release(0).unwrap();
        until("all three are woken", || {
            op.is_woken() && wait.is_woken() && sync.is_woken()
        });
        assert!(matches!(op.poll(), Poll::Ready(Ok(_))));
        let Poll::Ready(Err(npu_core::OpError {
            error: err,
            value: None,
        })) = op.poll()
        else {
            panic!("{strategy:?}: a second poll must fail")
        };
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    api: "Op::poll",
                    ..
                }
            ),
            "{err}"
        );
        // `synchronize()` is an operation like the others...
        assert!(matches!(sync.poll(), Poll::Ready(Ok(()))));
        assert!(matches!(
            sync.poll(),
            Poll::Ready(Err(npu_core::OpError {
                error: Error::InvalidArgument { .. },
                value: None
            }))
        ));
        // ...while an event wait holds no value: polling it again repeats the result.
        for _ in 0..2 {
            assert!(matches!(wait.poll(), Poll::Ready(Ok(()))));
        }
    }
}

/// Dropping the last handle of a stream with work still queued neither blocks nor loses the
/// work: the futures still resolve, and the ACL stream is destroyed once that work is done.
#[test]
fn dropping_a_stream_with_pending_work_does_not_block() {
    let (_serial, context) = exclusive_device0();
    // An earlier test's streams may still be on their way out (their last reference goes on
    // the reaper once the reactor lets go of them), so the count can only fall meanwhile:
    // this test's own streams are gone once it is back at or below where it started.
    npu_core::reaper::flush();
    let streams_before = control::device_stats(0).unwrap().live_streams;
    for strategy in STRATEGIES {
        let s = stream(&context, strategy);
        control::hold(0).unwrap();
        let op = s.memset(DeviceBuffer::<u8>::new(&context, 256).unwrap(), 0x77);
        let (dropped, wait) = mpsc::channel();
        std::thread::spawn(move || {
            drop(s);
            dropped.send(()).unwrap();
        });
        // The device is held, so a drop that waited for the stream's work would never return.
        wait.recv_timeout(HANG)
            .expect("dropping the stream returned");
        control::release(0).unwrap();
        let buffer = common::run(op).expect("the queued memset still ran");
        assert_eq!(buffer.to_vec_blocking().unwrap(), vec![0x77; 256]);
    }
    until("every stream is destroyed", || {
        npu_core::reaper::flush();
        control::device_stats(0).unwrap().live_streams <= streams_before
    });
}
