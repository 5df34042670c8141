//! Attacks on the device pool and the signalling operations through their public API only:
//! absurd sizes and timeouts, a pooled word signalled on another stream while the device is
//! held, a never-recorded notify whose every handle is gone. Each attack either found a bug
//! (now fixed, the test keeps it fixed) or documents a promise that held. The hold gate is
//! device 0's, so every test takes the device exclusively; waits are bounded by watchdogs.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

use common::{STRATEGIES, cases, code, exclusive_device0, invalid, run, stream, until};
use npu_core::Context;
use npu_mem::{DeviceBuffer, Memory};
use npu_sim::control;
use npu_stream::{
    DevicePool, DevicePoolBackend, Event, FailureMode, Notify, ValueCondition, ValueWord,
};

fn pool(ctx: &Context, backend: DevicePoolBackend, capacity: Option<usize>) -> DevicePool {
    let builder = DevicePool::builder(ctx).backend(backend);
    match capacity {
        Some(bytes) => builder.capacity(bytes),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Found: `Duration::MAX` overflowed the rounding up to whole seconds (a panic in debug
/// builds, a wrapped, far too short timeout in release) instead of being refused.
#[test]
fn a_maximal_timeout_is_refused_with_a_typed_error() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        let event = Event::new(&ctx).unwrap();
        run(async {
            let on_notify = s.wait_notify_timeout(&notify, Duration::MAX).await;
            let on_event = s.wait_event_timeout(&event, Duration::MAX).await;
            let refusals = [
                ("Stream::wait_notify_timeout", on_notify.unwrap_err().error),
                ("Stream::wait_event_timeout", on_event.unwrap_err().error),
            ];
            for (api, err) in refusals {
                assert_eq!(invalid(&err), (api, "timeout"), "{strategy:?}");
                assert!(err.to_string().contains("limit"), "{api}: {err}");
            }
            // Refused before submitting: the stream is untouched and still works.
            s.record_notify(&notify).await.unwrap();
            s.wait_notify(&notify).await.unwrap();
        });
    }
}

/// Found: a `count` whose blocks cannot even be counted panicked (capacity overflow while
/// preparing to hold them) instead of failing with a typed error.
#[test]
fn reserving_an_uncountable_number_of_blocks_is_a_typed_error() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        for capacity in [None, Some(1 << 20)] {
            let pool = pool(&ctx, backend, capacity);
            let s = stream(&ctx, strategy);
            let err = run(pool.reserve(&s, usize::MAX, 4096)).unwrap_err();
            assert_eq!(
                invalid(&err),
                ("DevicePool::reserve", "count"),
                "{backend:?} {strategy:?} {capacity:?}"
            );
            assert!(err.to_string().contains("overflow"), "{err}");
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.allocated, stats.cached, stats.misses),
                (0, 0, 0),
                "{backend:?} {strategy:?}: nothing allocated for it"
            );
            // The pool still serves a sane request.
            assert_eq!(run(pool.reserve(&s, 2, 4096)).unwrap(), 8192);
        }
    }
}

/// Held: a pooled word signalled and awaited on streams other than the one it was allocated
/// on, its future dropped and its buffer gone while the device is held, stays out of
/// circulation until the device has passed both operations; then it is reused.
#[test]
fn a_pooled_word_signalled_on_other_streams_returns_only_after_the_device_is_done() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend, None);
        let (home, writer, waiter) = (
            stream(&ctx, strategy),
            stream(&ctx, strategy),
            stream(&ctx, strategy),
        );
        let word = run(pool.alloc::<u64>(&home, 1)).unwrap();
        let address = word.addr();
        let word = Arc::new(ValueWord::from_memory(word).unwrap());
        control::hold(0).unwrap();
        let waited = waiter.wait_value(word.clone(), 5, ValueCondition::Equal);
        let written = writer.write_value(word, 5);
        let done = [waited.completion().clone(), written.completion().clone()];
        drop((waited, written));
        npu_core::reaper::flush();
        let stats = pool.stats().cache;
        assert_eq!(
            stats.allocated, 4096,
            "{backend:?} {strategy:?}: still lent"
        );
        let other = pool.try_alloc::<u64>(&home, 1).unwrap();
        assert!(
            other.as_ref().is_none_or(|b| b.addr() != address),
            "{backend:?} {strategy:?}: the block was handed out while the device held it"
        );
        drop(other);
        control::release(0).unwrap();
        run(async {
            for completion in &done {
                completion.wait().await.unwrap();
            }
        });
        npu_core::reaper::flush();
        assert_eq!(pool.stats().cache.allocated, 0, "{backend:?} {strategy:?}");
        let again = run(pool.alloc::<u64>(&home, 1)).unwrap();
        let reused = again.addr() == address || pool.stats().cache.hits > 0;
        assert!(reused, "{backend:?} {strategy:?}: the block came back");
    }
}

/// Held: a wait on a notify that is never recorded, whose future and every handle of the
/// notify are dropped, is discarded by an abort; once everything is dropped the device holds
/// no more streams or allocations than before.
#[test]
fn an_orphaned_notify_wait_is_aborted_and_nothing_leaks() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let before = control::device_stats(0).unwrap();
        let s = stream(&ctx, strategy);
        let notify = Notify::new(&ctx).unwrap();
        let waited = s.wait_notify(&notify);
        let done = waited.completion().clone();
        drop((waited, notify));
        run(async {
            s.abort().await.unwrap();
            let err = done.wait().await.unwrap_err();
            assert!(err.is_aborted(), "{strategy:?}: {err}");
        });
        drop(s);
        // A callback stream is destroyed once its callback thread has stopped, which is not
        // ordered with this thread. At most the count before: an earlier test's callback
        // stream may still be on its way out.
        until("the stream and its buffers are destroyed", || {
            npu_core::reaper::flush();
            let after = control::device_stats(0).unwrap();
            after.live_streams <= before.live_streams
                && after.live_allocations <= before.live_allocations
        });
    }
}

/// Held: lengths whose byte size overflows, or that no size class can round, are typed
/// errors naming `len` from both `alloc` and `try_alloc`, and leave the counters untouched.
#[test]
fn overflowing_lengths_are_typed_errors() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend, None);
        let s = stream(&ctx, strategy);
        for len in [usize::MAX, usize::MAX / 8 + 1, isize::MAX as usize] {
            let err = run(pool.alloc::<u64>(&s, len)).unwrap_err();
            assert_eq!(invalid(&err), ("DevicePool::alloc", "len"), "{len}: {err}");
            let err = pool.try_alloc::<u64>(&s, len).unwrap_err();
            assert_eq!(invalid(&err), ("DevicePool::try_alloc", "len"), "{len}");
        }
        let err = run(pool.alloc::<u8>(&s, usize::MAX)).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::alloc", "len"), "{err}");
        let stats = pool.stats().cache;
        assert_eq!((stats.allocated, stats.misses, stats.waiters), (0, 0, 0));
    }
}

/// Held: trimming while a dropped block still awaits its operation frees nothing of it (the
/// device keeps writing it); once the operation completes, the block is served again with
/// what the device wrote, and the next trim gives it back.
#[test]
fn trim_spares_a_block_whose_operation_is_in_flight() {
    let (_device, ctx) = exclusive_device0();
    for (backend, strategy) in cases() {
        let pool = pool(&ctx, backend, None);
        let s = stream(&ctx, strategy);
        let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        let address = block.addr();
        control::hold(0).unwrap();
        let op = s.memset(block, 3);
        let done = op.completion().clone();
        drop(op);
        npu_core::reaper::flush();
        assert_eq!(pool.trim().unwrap(), 0, "{backend:?} {strategy:?}");
        let stats = pool.stats().cache;
        assert_eq!(
            (stats.allocated + stats.awaiting_bytes, stats.cached),
            (4096, 0),
            "{backend:?} {strategy:?}: {stats:?}"
        );
        control::release(0).unwrap();
        run(done.wait()).unwrap();
        npu_core::reaper::flush();
        // Served from the cache, untouched by the trim: the device's write is in it.
        let again = run(pool.alloc::<u8>(&s, 4096)).unwrap();
        assert_eq!(again.addr(), address, "{backend:?} {strategy:?}");
        assert_eq!(pool.stats().cache.hits, 1, "{backend:?} {strategy:?}");
        let host = npu_mem::PinnedBuffer::<u8>::new(&ctx, 4096).unwrap();
        let (again, host) = run(s.copy_d2h(again, host)).unwrap();
        assert!(host.iter().all(|&x| x == 3), "{backend:?} {strategy:?}");
        drop(again);
        npu_core::reaper::flush();
        assert_eq!(pool.trim().unwrap(), 4096, "{backend:?} {strategy:?}");
        assert_eq!(pool.stats().cache.reserved, 0, "{backend:?} {strategy:?}");
    }
}

/// A waker that panics when woken, as a buggy executor's might.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a buggy executor's waker");
    }
}

/// Held: a notify wait polled with a waker that panics when woken still completes once the
/// notify is recorded, and the stream, its completion thread and the reactor go on working.
#[test]
fn a_panicking_waker_on_a_notify_wait_harms_nothing() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let (waiter, recorder) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        let mut waited = Box::pin(waiter.wait_notify(&notify));
        let waker = Waker::from(Arc::new(PanickingWaker));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(waited.as_mut().poll(&mut cx).is_pending(), "{strategy:?}");
        let done = waited.completion().clone();
        run(async {
            recorder.record_notify(&notify).await.unwrap();
            done.wait().await.unwrap();
            let Poll::Ready(result) = waited.as_mut().poll(&mut cx) else {
                panic!("{strategy:?}: complete but not ready");
            };
            result.unwrap();
            // Everything that delivered the completion still works.
            let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
            let buffer = waiter.memset(buffer, 5).await.unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), vec![5; 64]);
        });
    }
}

/// Held: every handle of a notify dropped while its record and wait are queued behind a held
/// device: the operations keep it alive, complete once the device runs them, and nothing
/// blocks on the way.
#[test]
fn a_notify_dropped_under_held_work_lives_until_its_operations_complete() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let (waiter, recorder) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let notify = Notify::new(&ctx).unwrap();
        control::hold(0).unwrap();
        let waited = waiter.wait_notify(&notify);
        let recorded = recorder.record_notify(&notify);
        drop(notify);
        assert!(
            !waited.is_complete() && !recorded.is_complete(),
            "{strategy:?}"
        );
        control::release(0).unwrap();
        run(async {
            let notify = recorded.await.unwrap();
            waited.await.unwrap();
            // The handle the operation kept is as good as the original.
            recorder.record_notify(&notify).await.unwrap();
            waiter.wait_notify(&notify).await.unwrap();
        });
    }
}

/// Held: a stream-ordered allocation queued behind a task the device fails: in `Stop` mode
/// it fails with the fault's ACL error (the context accepts no more work), in `Continue` mode
/// it is served and the full capacity is served again; either way no granted room is lost.
#[test]
fn an_allocation_behind_a_fault_keeps_the_capacity_whole() {
    let (_device, ctx) = exclusive_device0();
    for mode in [FailureMode::Continue, FailureMode::Stop] {
        for strategy in STRATEGIES {
            // A context of its own: `Stop` stops every stream of the context.
            let ctx = ctx.device().create_context().unwrap();
            let pool = pool(&ctx, DevicePoolBackend::RuntimePool, Some(4096));
            let s = stream(&ctx, strategy);
            s.set_failure_mode(mode).unwrap();
            control::fail_task(s.as_raw(), 1, 507015).unwrap();
            let faulted = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let allocated = run(pool.alloc::<u8>(&s, 4096));
            let err = run(faulted).unwrap_err();
            assert_eq!(code(&err.error), 507015, "{mode:?} {strategy:?}");
            match (mode, allocated) {
                (FailureMode::Continue, Ok(block)) => drop(block),
                (FailureMode::Stop, Err(err)) => {
                    assert_eq!(code(&err), 507015, "{strategy:?}: {err}");
                    assert!(err.to_string().contains("aclrtMemPoolMallocAsync"), "{err}");
                    let fault = err
                        .fault()
                        .expect("the refusal says which fault stopped it");
                    assert_eq!(fault.code, npu_core::AclCode(507015), "{strategy:?}");
                }
                (mode, other) => panic!("{mode:?} {strategy:?}: {other:?}"),
            }
            npu_core::reaper::flush();
            let stats = pool.stats().cache;
            assert_eq!(stats.waiters, 0, "{mode:?} {strategy:?}");
            assert!(stats.allocated == 0, "{mode:?} {strategy:?}: {stats:?}");
            if mode == FailureMode::Continue {
                let block = run(pool.alloc::<u8>(&s, 4096)).unwrap();
                run(s.memset(block, 1)).unwrap();
            }
        }
    }
}

/// Held: a `reserve` dropped while its stream-ordered allocation is held on the device leaks
/// no capacity: once the device has run the allocation, the whole capacity is reserved again.
#[test]
fn a_reserve_dropped_under_a_held_device_leaks_no_capacity() {
    let (_device, ctx) = exclusive_device0();
    for strategy in STRATEGIES {
        let pool = pool(&ctx, DevicePoolBackend::RuntimePool, Some(3 * 4096));
        let s = stream(&ctx, strategy);
        control::hold(0).unwrap();
        let mut reserving = Box::pin(pool.reserve(&s, 3, 4096));
        let mut cx = std::task::Context::from_waker(Waker::noop());
        assert!(
            reserving.as_mut().poll(&mut cx).is_pending(),
            "{strategy:?}"
        );
        drop(reserving);
        assert_eq!(
            pool.stats().cache.allocated,
            0,
            "{strategy:?}: room given back"
        );
        control::release(0).unwrap();
        // The dropped allocation's block goes back to the runtime once it has run; a
        // synchronize orders this thread after it.
        run(s.synchronize()).unwrap();
        npu_core::reaper::flush();
        assert_eq!(
            run(pool.reserve(&s, 3, 4096)).unwrap(),
            3 * 4096,
            "{strategy:?}"
        );
        assert_eq!(pool.stats().cache.cached, 3 * 4096, "{strategy:?}");
    }
}
