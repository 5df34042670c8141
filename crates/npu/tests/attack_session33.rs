//! Attacks of the thirty-third session through the `npu` facade: every awaitable kind polled
//! once and forgotten on streams of all three strategies mixed on one device, with every
//! handle and the Tokio runtime dropped before the device runs anything (then released, or
//! lost); device resets (the last handles dropped and the device opened again) with futures of
//! the old handles held; events, pools, value words and notifies reused after the stream they
//! served was aborted; forgotten waits and their paused-clock keepers; a pool block used by
//! other contexts' streams after its pool and context are gone; a wait on a record of a
//! stopped stream dropped without an abort; pooled blocks at their edges; and a device lost
//! while its work paces for centuries.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `watchdog`), so a hang fails its test. Devices 2 and 3 are lost for the rest of the process
//! by the two tests that lose a device.

mod common;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::memory::{DevicePoolBackend, PinnedPool};
use npu::prelude::*;
use npu::stream::{Completion, Copy2d, Notify, ValueCondition, ValueWord};
use npu::{Stream, sim};

/// The memory of each of the two simulated devices.
const MEMORY: u64 = 64 << 20;

/// The byte the test's fill kernel writes.
const FILLED: u8 = 0x3C;

/// The name the test's fill kernel is registered under.
const FILL: &str = "npu_attack_session33_fill";

/// The device lock and device 0's primary context, of this file's four-device simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(4, MEMORY)
}

/// The fill kernel `{uint8_t *x, uint64_t n}`: writes [`FILLED`] over the `n` bytes at `x`.
fn fill(ctx: &Context) -> npu::Function {
    fill_kernel(ctx, FILL, FILLED)
}

/// The addresses of the futures [`poll_once_and_forget`] forgot: kept so that a leak checker
/// sees their boxes as reachable (what `mem::forget` leaks is the point of the test, not a
/// finding of the checker).
static FORGOTTEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Polls `future` once in the current task, then forgets it (`mem::forget`): its destructor
/// never runs, whatever it borrowed may go. Whether that poll left it pending.
async fn poll_once_and_forget<F: Future>(future: F) -> bool {
    let mut boxed = Box::pin(future);
    let pending =
        std::future::poll_fn(|cx| Poll::Ready(boxed.as_mut().poll(cx).is_pending())).await;
    let address = std::ptr::from_ref::<F>(&boxed) as usize;
    FORGOTTEN.lock().unwrap().push(address);
    std::mem::forget(boxed);
    pending
}

/// A zeroed device buffer of `n` bytes.
fn dev(ctx: &Context, n: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::new(ctx, n).unwrap()
}

/// A pinned buffer of `n` bytes, each `byte`.
fn pinned(ctx: &Context, n: usize, byte: u8) -> PinnedBuffer<u8> {
    PinnedBuffer::from_slice(ctx, &vec![byte; n]).unwrap()
}

/// Every awaitable kind the facade offers, on three streams of `ctx`'s device (one per
/// strategy), each polled once on a multi-thread runtime and forgotten while the device is
/// held; then every handle the work used (streams, events, notifies, value words, pools, the
/// kernel) and the runtime are dropped, and `end` lets the device go on (a release) or ends it
/// (a loss). The completions of the forgotten operations.
fn forget_every_awaitable_then(ctx: &Context, end: impl FnOnce(sim::Hold)) -> Vec<Completion> {
    let kernel = fill(ctx);
    let held = sim::hold(&ctx.device()).unwrap();
    let streams = STRATEGIES.map(|strategy| stream(ctx, strategy));
    let events: Vec<Event> = streams.iter().map(|_| Event::new(ctx).unwrap()).collect();
    let notifies: Vec<Notify> = streams.iter().map(|_| Notify::new(ctx).unwrap()).collect();
    let words: Vec<Arc<ValueWord>> = streams
        .iter()
        .map(|_| Arc::new(ValueWord::new(ctx, 0).unwrap()))
        .collect();
    let device_pool = DevicePool::builder(ctx)
        .backend(DevicePoolBackend::Caching)
        .build()
        .unwrap();
    let pinned_pool = PinnedPool::new(ctx);
    let shape = Copy2d {
        width: 16,
        height: 4,
        src_pitch: 32,
        dst_pitch: 64,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut done: Vec<Completion> = Vec::new();
    let mut pending = 0;
    runtime.block_on(async {
        // An operation's completion is kept before it is forgotten, to see it end.
        macro_rules! forget {
            (op $op:expr) => {{
                let op = $op;
                done.push(op.completion().clone());
                forget!(future op);
            }};
            (future $future:expr) => {
                if poll_once_and_forget($future).await {
                    pending += 1;
                }
            };
        }
        // Each stream's own work first, so that every wait submitted below finds the record or
        // write it waits for already queued on its stream (no cycle between the streams).
        for (i, s) in streams.iter().enumerate() {
            forget!(op s.memset(dev(ctx, 64), 1));
            forget!(op s.copy_h2d(pinned(ctx, 64, 2), dev(ctx, 64)));
            forget!(op s.copy_d2h(dev(ctx, 64), pinned(ctx, 64, 0)));
            forget!(op s.copy_d2d(dev(ctx, 64), dev(ctx, 64)));
            // Refused at once by the simulator's EP host (207000): forgotten all the same.
            forget!(future s.copy_h2h(pinned(ctx, 64, 3), pinned(ctx, 64, 0)));
            forget!(op s.copy_2d_h2d(pinned(ctx, 128, 4), dev(ctx, 256), shape));
            forget!(op s.copy_2d_d2h(dev(ctx, 128), pinned(ctx, 256, 0), shape));
            forget!(op s.copy_2d_d2d(dev(ctx, 128), dev(ctx, 256), shape));
            // SAFETY: the fill kernel writes the 64 bytes of the buffer it is given.
            forget!(op unsafe { s.launch(&kernel, 1, (dev(ctx, 64), 64u64)) });
            forget!(op s.write_value(words[i].clone(), 1));
            forget!(op s.record_notify(&notifies[i]));
            forget!(op s.synchronize());
            events[i].record(s).unwrap();
            forget!(future events[i].wait());
            forget!(future s.timed(|s| s.memset(dev(ctx, 64), 5)));
            forget!(future s.upload(&[6u8; 64]));
            forget!(future s.download(dev(ctx, 64)));
            forget!(future device_pool.alloc::<u8>(s, 64));
            forget!(future pinned_pool.alloc::<u8>(64));
        }
        // The waits: each stream waits on the previous stream's record, write and notify.
        for (i, t) in streams.iter().enumerate() {
            let before = (i + streams.len() - 1) % streams.len();
            t.wait_event(&events[before]).unwrap();
            forget!(op t.wait_value(words[before].clone(), 1, ValueCondition::Equal));
            forget!(op t.wait_notify(&notifies[before]));
            forget!(op t.synchronize());
        }
    });
    assert!(pending > 0, "the held device left nothing pending");
    let ran: Vec<_> = done
        .iter()
        .enumerate()
        .filter(|(_, op)| op.is_complete())
        .map(|(n, op)| (n, op.result()))
        .collect();
    assert!(ran.is_empty(), "the held device ran operations: {ran:?}");
    watchdog("dropping every handle and the runtime", || {
        drop((streams, events, notifies, words));
        drop((device_pool, pinned_pool, kernel));
        drop(runtime);
    });
    end(held);
    done
}

/// Promise attacked: rules 2 and 5 and "every future completes" for every awaitable kind the
/// facade offers, on three streams of one device, one per strategy. With the device held, each
/// stream gets a memset, copies in every direction (linear and pitched), a kernel, a
/// synchronisation, an event record and its `Event::wait`, another stream's `wait_event`, a
/// value write and another stream's value wait, a notify record and another stream's notify
/// wait, a `timed` memset, an `upload`, a `download` and allocations from a `DevicePool` and a
/// `PinnedPool`; each future is polled once on a multi-thread runtime and forgotten. Then every
/// handle (streams, events, notifies, words, pools, the kernel) and the runtime are dropped,
/// and only then is the device released. Every operation the device was given must still
/// complete successfully (forgetting only leaks), nothing it was given stays registered with
/// the reactor, and each strategy serves fresh streams of the device afterwards.
#[test]
fn every_awaitable_forgotten_after_its_first_poll_on_mixed_strategies_only_leaks() {
    let (_guard, d0) = devices();
    let baseline = npu::stream::reactor_stats().pending();
    let done = forget_every_awaitable_then(&d0, |held| held.release().unwrap());
    for (n, op) in done.iter().enumerate() {
        let result = run(op.wait());
        assert!(result.is_ok(), "forgotten operation {n}: {result:?}");
    }
    until_released("the forgotten operations' registrations", || {
        npu::stream::reactor_stats().pending() <= baseline
    });
    for strategy in STRATEGIES {
        let fresh = stream(&d0, strategy);
        a_memset_writes(
            &d0,
            &fresh,
            9,
            &format!("{strategy:?} after the forgotten work"),
        );
        run(fresh.synchronize()).unwrap();
    }
}

/// Promise attacked: "every future completes or fails typed, never hangs" and rule 5 when the
/// device is lost under forgotten work. The same forgotten work as above on device 2 (lost for
/// the rest of the process), every handle and the runtime dropped, and then the device is lost
/// while still held: every forgotten operation ends with a typed error (none succeeds: the
/// device never ran anything), nothing stays registered with the reactor, new work on the lost
/// device is refused, and device 0 keeps serving every strategy.
#[test]
fn every_awaitable_forgotten_on_a_device_lost_under_it_ends_typed() {
    let (_guard, d0) = devices();
    let lost = Device::open(2).unwrap().primary_context().clone();
    let baseline = npu::stream::reactor_stats().pending();
    let done = forget_every_awaitable_then(&lost, |held| {
        sim::lose(&lost.device()).unwrap();
        drop(held);
    });
    for (n, op) in done.iter().enumerate() {
        let result = run(op.wait());
        assert!(
            result.is_err(),
            "forgotten operation {n} ran on a lost device"
        );
    }
    until_released("the forgotten operations' registrations", || {
        npu::stream::reactor_stats().pending() <= baseline
    });
    // The forgotten futures keep the lost device's context: new work on it is refused.
    let refused = Stream::new(&lost).and_then(|s| {
        let buffer = DeviceBuffer::<u8>::new(&lost, 64)?;
        run(s.memset(buffer, 1)).map(drop).map_err(|e| e.error)
    });
    assert!(refused.is_err(), "new work ran on the lost device");
    for strategy in STRATEGIES {
        a_memset_writes(
            &d0,
            &stream(&d0, strategy),
            8,
            &format!("{strategy:?} beside the loss"),
        );
    }
}

/// Promise attacked: rules 2, 3 and 5 and "every future completes" across a device reset.
/// With device 1 held, a memset is queued on a stream of an explicit context and one on a
/// stream of the primary context, each polled once; then every handle of the device is
/// dropped (streams, contexts, the `Device`), so that only the queued work keeps it, and the
/// device is opened again: a new explicit context and a stream of the new primary context
/// queue memsets of their own. Once released, every memset resolves with its own bytes, old
/// and new, the old futures polled on another runtime than the new ones; once everything is
/// dropped, the device is back to what it held before. Every strategy.
#[test]
fn a_device_reopened_while_futures_of_its_old_handles_are_held_serves_both() {
    let (_guard, _d0) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let probe = Device::open(1).unwrap();
        let before = live_objects(probe.primary_context());
        let held = sim::hold(&probe).unwrap();
        drop(probe);
        let queue = |ctx: &Context, value: u8| {
            let s = stream(ctx, strategy);
            let mut op = Box::pin(s.memset(dev(ctx, 64), value));
            assert!(
                polled_once(op.as_mut()).is_pending(),
                "{what}: ran while held"
            );
            op
        };
        let old = {
            let device = Device::open(1).unwrap();
            let explicit = device.create_context().unwrap();
            [
                queue(&explicit, 0x11),
                queue(device.primary_context(), 0x22),
            ]
        };
        let new = {
            let device = Device::open(1).unwrap();
            let explicit = device.create_context().unwrap();
            [
                queue(&explicit, 0x33),
                queue(device.primary_context(), 0x44),
            ]
        };
        held.release().unwrap();
        let old = std::thread::spawn(move || run(futures::future::join_all(old)));
        let new = run(futures::future::join_all(new));
        let old = old.join().unwrap();
        for (result, value) in old.into_iter().chain(new).zip([0x11, 0x22, 0x33, 0x44]) {
            let buffer = result.unwrap_or_else(|err| panic!("{what}: {err}"));
            assert_eq!(buffer.to_vec_blocking().unwrap(), [value; 64], "{what}");
        }
        let device = Device::open(1).unwrap();
        until_released(&what, || {
            within(live_objects(device.primary_context()), before)
        });
    }
}

/// `counts` of [`live_objects`] but the device's events, which the contexts' completion-event
/// pools keep idle between operations (up to a bound of the device's).
fn without_events(mut counts: LiveObjects) -> LiveObjects {
    counts[2] = 0;
    counts
}

/// Promise attacked: rules 2, 3 and 7 and "reuse after an abort" for the handles an aborted
/// stream's work used, with the two streams of different strategies. With the device held,
/// stream `a` queues a copy from a `PinnedPool` block into a `DevicePool` block, an event
/// record, a value write and a notify record; stream `b` waits on each of the three and then
/// memsets. `a` is aborted, which discards all of it, so `b`'s value and notify waits are left
/// unsatisfied. Then the same event, word and notify are recorded, written and set again on
/// `a`, the same pools serve `a` again, and the device is released: `a`'s new work succeeds,
/// each of `b`'s waits resolves (the wait on the discarded record with the runtime's error or
/// success, never `Aborted`, which only an abort of `b` may report), `b`'s memset writes, the
/// aborted copy hands both blocks back to their pools, and nothing is left in flight. Every
/// ordered pair of strategies.
#[test]
fn events_words_notifies_and_pools_reused_after_an_abort_serve_another_strategys_waits() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    for sa in STRATEGIES {
        for sb in STRATEGIES {
            let what = format!("a {sa:?}, b {sb:?}");
            let before = live_objects(&d0);
            let (a, b) = (stream(&d0, sa), stream(&d0, sb));
            let event = Event::new(&d0).unwrap();
            let word = Arc::new(ValueWord::new(&d0, 0).unwrap());
            let notify = Notify::new(&d0).unwrap();
            let device_pool = DevicePool::new(&d0).unwrap();
            let pinned_pool = PinnedPool::new(&d0);
            // Both blocks allocated before the hold: a new runtime-pool block is awaited on
            // its stream before it is handed out.
            let (staging, block) = run(async {
                let mut staging = pinned_pool.alloc::<u8>(64).await.unwrap();
                staging.fill(0x5A);
                (staging, device_pool.alloc::<u8>(&a, 64).await.unwrap())
            });
            let held = sim::hold(&device).unwrap();
            let copy = a.copy_h2d(staging, block);
            event.record(&a).unwrap();
            let write = a.write_value(word.clone(), 1);
            let record = a.record_notify(&notify);
            b.wait_event(&event).unwrap();
            let waits = (
                b.wait_value(word.clone(), 1, ValueCondition::AtLeast),
                b.wait_notify(&notify),
            );
            let memset = b.memset(dev(&d0, 64), 0x6B);
            let behind = b.synchronize();
            run(a.abort()).unwrap_or_else(|err| panic!("{what}: the abort: {err}"));
            for (name, result) in [
                ("copy", run(copy).map(drop).map_err(|e| e.error)),
                ("write", run(write).map(drop).map_err(|e| e.error)),
                ("record", run(record).map(drop).map_err(|e| e.error)),
            ] {
                let err = result.expect_err(&format!("{what}: the aborted {name} succeeded"));
                assert!(err.is_aborted(), "{what}: the aborted {name}: {err}");
            }
            // The same handles again, on the aborted stream.
            event.record(&a).unwrap();
            let rewrite = a.write_value(word.clone(), 2);
            let rerecord = a.record_notify(&notify);
            // The block the aborted copy handed back is cached: served while the device is held.
            let (staging, block) = run(async {
                let mut staging = pinned_pool.alloc::<u8>(64).await.unwrap();
                staging.fill(0x7C);
                (staging, device_pool.alloc::<u8>(&a, 64).await.unwrap())
            });
            let again = a.copy_h2d(staging, block);
            held.release().unwrap();
            run(rewrite).unwrap_or_else(|err| panic!("{what}: the second write: {err}"));
            run(rerecord).unwrap_or_else(|err| panic!("{what}: the second notify: {err}"));
            let (_, copied) = run(again).unwrap_or_else(|err| panic!("{what}: the copy: {err}"));
            // Staged through the test's own pool: `Stream::download`'s is the context's, which
            // the streams another test forgot keep alive, with the blocks it caches.
            let (_, data) = run(b.copy_to_vec_staged(&pinned_pool, copied)).unwrap();
            assert_eq!(data, [0x7C; 64], "{what}");
            for (name, result) in [
                ("value wait", run(waits.0).map(drop).map_err(|e| e.error)),
                ("notify wait", run(waits.1).map(drop).map_err(|e| e.error)),
            ] {
                result.unwrap_or_else(|err| panic!("{what}: {name}: {err}"));
            }
            let written = run(memset).unwrap_or_else(|err| panic!("{what}: memset: {err}"));
            assert_eq!(written.to_vec_blocking().unwrap(), [0x6B; 64], "{what}");
            drop(written);
            // The wait on the discarded record may fail with the runtime's code for a discard
            // (107023), reported at `b`'s next synchronisation; never as a discard of `b`'s own.
            if let Err(err) = run(behind) {
                assert!(
                    !matches!(err.error, npu::Error::Aborted { .. }),
                    "{what}: b was never aborted: {err}"
                );
            }
            run(event.wait()).unwrap_or_else(|err| panic!("{what}: the event: {err}"));
            run(a.synchronize()).unwrap();
            run(b.synchronize()).unwrap();
            let word = Arc::into_inner(word).expect("every value operation gave its word back");
            assert_eq!(word.into_inner().to_vec_blocking().unwrap(), [2], "{what}");
            until_released(&format!("{what}: the pools' blocks"), || {
                device_pool.stats().cache.allocated == 0 && pinned_pool.stats().allocated == 0
            });
            drop((a, b, event, notify, device_pool, pinned_pool));
            until_released(&what, || {
                within(without_events(live_objects(&d0)), without_events(before))
            });
        }
    }
}

/// Promise attacked: the paused clock's keepers end once the work is done, "done" including
/// failed by an abort, even when the futures that wanted it were forgotten while pending. On a
/// paused runtime, a notify wait nothing will set, a `Completion::wait` of it and an
/// `Event::wait` of a record behind it are each polled once and forgotten; the stream is
/// aborted (awaited on the same runtime) and then a one-hour sleep on that runtime must end.
/// The runtime is dropped and the stream serves afterwards. Every strategy.
#[test]
fn forgotten_waits_on_work_only_an_abort_ends_let_a_paused_clock_move_after_it() {
    let (_guard, d0) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let notify = Notify::new(&d0).unwrap();
        let event = Event::new(&d0).unwrap();
        let runtime = paused_runtime();
        watchdog(&what, || {
            runtime.block_on(async {
                let wait = s.wait_notify(&notify);
                let done = wait.completion().clone();
                event.record(&s).unwrap();
                assert!(
                    poll_once_and_forget(wait).await,
                    "{what}: the notify wait ended"
                );
                assert!(poll_once_and_forget(done.wait()).await, "{what}");
                assert!(poll_once_and_forget(event.wait()).await, "{what}");
                s.abort().await.unwrap();
                let err = done.wait().await.expect_err("an abort discarded the wait");
                assert!(err.is_aborted(), "{what}: {err}");
                tokio::time::sleep(Duration::from_secs(3600)).await;
            })
        });
        drop(runtime);
        a_memset_writes(&d0, &s, 0x2E, &what);
    }
}

/// Promise attacked: rules 2, 3 and 5 for pooled device memory crossing contexts of one
/// device. A `DevicePool` block of an explicit context (device memory, valid for every
/// context of its device) is split: one half filled by a kernel on a stream of a second
/// explicit context, the other the destination of a copy on a stream of the primary context,
/// both queued on the held device. Then every handle of the pool's context is dropped (the
/// pool, its stream, the context) and the futures with them; the drops return at once. Once
/// released, the device's bytes are all given back (nothing was freed under the queued work,
/// which a freed and reallocated block would show as a write into another owner's memory:
/// a buffer allocated meanwhile stays untouched). Both backends, every strategy.
#[test]
fn a_pool_block_used_by_other_contexts_streams_outlives_its_pool_and_context() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let kernel_context = device.create_context().unwrap();
    let kernel = fill(&kernel_context);
    let baseline = sim::device_stats(&device).unwrap().bytes_allocated;
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let owner = device.create_context().unwrap();
            let pool = DevicePool::builder(&owner)
                .backend(backend)
                .build()
                .unwrap();
            let own_stream = stream(&owner, strategy);
            let block = run(pool.alloc::<u8>(&own_stream, 8192)).unwrap();
            let (head, tail) = block.into_halves(4096).unwrap();
            let (ks, cs) = (stream(&kernel_context, strategy), stream(&d0, strategy));
            let held = sim::hold(&device).unwrap();
            // SAFETY: the fill kernel writes the 4096 bytes of the half it is given.
            let mut filled = Box::pin(unsafe { ks.launch(&kernel, 1, (head, 4096u64)) });
            let mut copied = Box::pin(cs.copy_h2d(pinned(&d0, 4096, 0x4D), tail));
            assert!(polled_once(filled.as_mut()).is_pending(), "{what}");
            assert!(polled_once(copied.as_mut()).is_pending(), "{what}");
            watchdog(&what, || {
                drop((filled, copied));
                drop((pool, own_stream, owner));
            });
            // Memory allocated while the dropped work is queued: never a block of the pool's.
            let bystander = DeviceBuffer::<u8>::new(&d0, 8192).unwrap();
            held.release().unwrap();
            run(ks.synchronize()).unwrap();
            run(cs.synchronize()).unwrap();
            assert_eq!(bystander.to_vec_blocking().unwrap(), [0; 8192], "{what}");
            drop((bystander, ks, cs));
            until_released(&what, || {
                sim::device_stats(&device).unwrap().bytes_allocated <= baseline
            });
        }
    }
}

/// Promise attacked: "every future completes" across real device resets. Device 1 is opened,
/// given a stream of every strategy at once (one `CallbackThread` worker, one reactor, blocking
/// waits), each stream's memset awaited and one more dropped in flight, and then every handle
/// is dropped, so that the device's primary context is released (`aclrtResetDevice`: the
/// simulator then holds no context of it). Three rounds: each new opening serves every strategy
/// again, the shared threads carrying over the reset.
#[test]
fn every_strategy_serves_a_device_across_resets() {
    let (_guard, _d0) = devices();
    for round in 0..3 {
        let device = Device::open(1).unwrap();
        let ctx = device.primary_context().clone();
        let streams = STRATEGIES.map(|strategy| stream(&ctx, strategy));
        for (s, strategy) in streams.iter().zip(STRATEGIES) {
            a_memset_writes(&ctx, s, round + 1, &format!("round {round}, {strategy:?}"));
            drop(s.memset(dev(&ctx, 64), 0xEE));
        }
        drop((streams, ctx, device));
        until_released(&format!("round {round}: the device's reset"), || {
            let probe = sim::raw_control::device_stats(1).unwrap();
            probe.live_contexts == 0 && probe.live_allocations == 0
        });
    }
}

/// Promise attacked: "every future completes" with destruction in any order. An event is
/// recorded on stream `a` behind a memset on the held device, stream `b` waits on that record
/// and memsets behind the wait; `a` is stopped, so its record will never run, and then, instead
/// of the abort that would discard it, every handle of `a` is dropped (with the event, and in a
/// second case with `a`'s explicit context too). Once released, `b`'s memset resolves (with
/// its bytes, or a typed error) rather than waiting for ever on a record of a stream that no
/// longer exists, and `b` serves afterwards. Every strategy.
#[test]
fn a_wait_on_a_record_of_a_stopped_stream_dropped_without_an_abort_ends() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        for own_context in [false, true] {
            let what = format!("{strategy:?}, a in its own context: {own_context}");
            let actx = if own_context {
                device.create_context().unwrap()
            } else {
                d0.clone()
            };
            let (a, b) = (stream(&actx, strategy), stream(&d0, strategy));
            let event = Event::new(&actx).unwrap();
            let held = sim::hold(&device).unwrap();
            let first = a.memset(dev(&actx, 64), 1);
            event.record(&a).unwrap();
            b.wait_event(&event).unwrap();
            let behind = b.memset(dev(&d0, 64), 2);
            a.stop().unwrap();
            watchdog(&what, || drop((a, event, actx)));
            held.release().unwrap();
            assert!(run(first).is_err(), "{what}: a stopped stream's work ran");
            match run(behind) {
                Ok(buffer) => assert_eq!(buffer.to_vec_blocking().unwrap(), [2; 64], "{what}"),
                Err(err) => assert!(err.value.is_some(), "{what}: {err}"),
            }
            let _ = run(b.synchronize());
            a_memset_writes(&d0, &b, 3, &what);
        }
    }
}

/// Promise attacked: rule 5 for the paused clock's keepers of forgotten futures. On a paused
/// runtime, a memset of each strategy's stream (its `Op`, a `Completion::wait` of it and an
/// `Event::wait` of a record behind it) is polled once and forgotten while the device is held,
/// so each keeps a keeper waiting on the runtime's blocking pool; then the runtime is dropped
/// with the device still held. The drop returns (the keepers wait in bounded slices and end
/// with their runtime), and once released every memset completes and the streams serve.
#[test]
fn a_paused_runtime_dropped_under_forgotten_keepers_of_held_work_returns() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let streams = STRATEGIES.map(|strategy| stream(&d0, strategy));
    let events: Vec<Event> = streams.iter().map(|_| Event::new(&d0).unwrap()).collect();
    let held = sim::hold(&device).unwrap();
    let runtime = paused_runtime();
    let done: Vec<Completion> = runtime.block_on(async {
        let mut done = Vec::new();
        for (s, event) in streams.iter().zip(&events) {
            let op = s.memset(dev(&d0, 64), 0x19);
            done.push(op.completion().clone());
            event.record(s).unwrap();
            let wait = op.completion().wait();
            assert!(poll_once_and_forget(op).await, "ran while held");
            assert!(poll_once_and_forget(wait).await, "ran while held");
            assert!(poll_once_and_forget(event.wait()).await, "ran while held");
        }
        done
    });
    watchdog("dropping the paused runtime", || drop(runtime));
    held.release().unwrap();
    for op in &done {
        run(op.wait()).unwrap();
    }
    for (s, event) in streams.iter().zip(&events) {
        run(event.wait()).unwrap();
        a_memset_writes(&d0, s, 0x1A, &format!("{:?}", s.strategy()));
    }
}

/// Promise attacked: "bad input is a typed error naming the API, never a panic" and rule 2 at
/// the edges of pooled memory, whose blocks are larger than what was asked for (the rest of
/// the size class). A one-element and a 4097-byte block of each pool: views up to the
/// requested length and no further (the block's tail is never reachable), splits at 0, at the
/// length and past it, casts of odd and unaligned parts refused with the part handed back,
/// empty parts copied without touching their neighbours, a one-word `ValueWord` cast out of a
/// view of a pooled block; every part queued at once on the held stream, then joined back
/// whole with exactly what each wrote, and every block back in its pool. Every strategy.
#[test]
fn pooled_blocks_at_their_edges_are_refused_by_name_or_exact() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let device_pool = DevicePool::new(&d0).unwrap();
        let pinned_pool = PinnedPool::new(&d0);
        let (one, odd, mut host) = run(async {
            (
                s.memset(device_pool.alloc::<u8>(&s, 1).await.unwrap(), 0x25)
                    .await
                    .unwrap(),
                device_pool.alloc::<u8>(&s, 4097).await.unwrap(),
                pinned_pool.alloc::<u8>(4097).await.unwrap(),
            )
        });
        let pooled_word = run(device_pool.alloc::<u8>(&s, 16)).unwrap();
        host.fill(0x55);
        assert!(one.block_bytes() > 1 && host.block_bytes() > 4097, "{what}");
        // Past the requested length, though the block goes on: refused, handed back.
        let err = one.view(0..2).unwrap_err();
        assert_eq!(invalid(&err.error), ("Memory::view", "range"), "{what}");
        let one = err.value.unwrap();
        let err = odd.into_halves(4098).unwrap_err();
        assert_eq!(err.value.as_ref().map(|b| b.len()), Some(4097), "{what}");
        let odd = err.value.unwrap();
        let err = host.view(usize::MAX..).unwrap_err();
        let host = err.value.unwrap();
        // A u64 cast of 4097 bytes, and of a part one byte in, refused by name.
        let err = odd.cast::<u64>().unwrap_err();
        assert_eq!(invalid(&err.error), ("Memory::cast", "U"), "{what}");
        let (head, rest) = err.value.unwrap().into_halves(1).unwrap();
        let (middle, tail) = rest.into_halves(4088).unwrap();
        let err = middle.cast::<u64>().unwrap_err();
        assert_eq!(invalid(&err.error), ("Memory::cast", "U"), "{what}");
        let middle = err.value.unwrap();
        // Empty parts at both ends of the host block.
        let (empty_front, host_rest) = host.into_halves(0).unwrap();
        let (host_body, empty_back) = host_rest.into_halves(4097).unwrap();
        assert_eq!((empty_front.len(), empty_back.len()), (0, 0), "{what}");
        let held = sim::hold(&device).unwrap();
        let word_op = {
            let word = pooled_word.view(8..16).unwrap().cast::<u64>().unwrap();
            s.write_value(ValueWord::from_memory(word).unwrap(), 0x0102_0304_0506_0708)
        };
        let middle_op = s.memset(middle, 0x21);
        let head_op = s.memset(head, 0x22);
        let tail_op = s.memset(tail, 0x23);
        let empty_op = s.copy_h2d(empty_front, dev(&d0, 1).view(1..).unwrap());
        let host_op = s.copy_d2h(one, host_body.view(0..1).unwrap());
        let back_op = s.copy_d2h(
            DeviceBuffer::<u8>::new(&d0, 1).unwrap().view(0..0).unwrap(),
            empty_back,
        );
        assert!(!middle_op.is_complete(), "{what}: ran while held");
        held.release().unwrap();
        let word = run(word_op).unwrap();
        let written = run(s.download(word.into_inner())).unwrap();
        assert_eq!(written, [0x0102_0304_0506_0708], "{what}");
        let (head, middle, tail) = (
            run(head_op).unwrap(),
            run(middle_op).unwrap(),
            run(tail_op).unwrap(),
        );
        let whole = head
            .join(middle)
            .unwrap()
            .join(tail)
            .unwrap()
            .into_whole()
            .unwrap();
        let mut expected = vec![0x22u8];
        expected.extend([0x21; 4088]);
        expected.extend([0x23; 8]);
        assert_eq!(run(s.download(whole)).unwrap(), expected, "{what}");
        let (empty_front, _) = run(empty_op).unwrap();
        let (one, host_view) = run(host_op).unwrap();
        let (_, empty_back) = run(back_op).unwrap();
        let host = empty_front
            .join(host_view.into_inner())
            .unwrap()
            .join(empty_back)
            .unwrap()
            .into_whole()
            .unwrap();
        assert_eq!(host.len(), 4097, "{what}");
        assert_eq!(host[0], 0x25, "{what}: the one-byte block");
        assert!(
            host[1..].iter().all(|&b| b == 0x55),
            "{what}: past the copied byte"
        );
        drop((one, host));
        until_released(&what, || {
            device_pool.stats().cache.allocated == 0 && pinned_pool.stats().allocated == 0
        });
    }
}

/// Promise attacked: "never a hang" and rules 3 and 5 for a device lost while its work paces
/// under a timing model for centuries (`min_task_ns` near `u64::MAX / 2`). On device 3 (lost
/// for the rest of the process), a memset of each strategy's stream paces, a `synchronize`
/// waits behind each, and another thread makes a synchronous copy (`to_vec_blocking`), which
/// the simulator holds for the copy's simulated duration. `npu::sim::lose` returns, every
/// memset and synchronisation ends with a typed error, the memsets' buffers come back, and the
/// synchronous copy returns an error instead of waiting out its centuries.
#[test]
fn a_device_lost_while_its_work_paces_for_centuries_ends_everything() {
    let (_guard, _d0) = devices();
    let ctx = Device::open(3).unwrap().primary_context().clone();
    let device = ctx.device();
    let streams = STRATEGIES.map(|strategy| stream(&ctx, strategy));
    let century = sim::TimingModel::default().min_task_ns(u64::MAX / 2);
    sim::set_timing(&device, Some(century)).unwrap();
    let paced: Vec<_> = streams
        .iter()
        .map(|s| (s.memset(dev(&ctx, 64), 1), s.synchronize()))
        .collect();
    let copying = dev(&ctx, 64);
    let copier = std::thread::spawn(move || copying.to_vec_blocking());
    watchdog("losing a device whose work paces for centuries", || {
        sim::lose(&device).unwrap();
        let copied = copier.join().unwrap();
        assert!(
            copied.is_err(),
            "a synchronous copy on a lost device succeeded"
        );
        for ((memset, synchronize), strategy) in paced.into_iter().zip(STRATEGIES) {
            let err = run(memset).expect_err("a memset on a lost device succeeded");
            assert!(
                err.value.is_some(),
                "{strategy:?}: the buffer did not come back"
            );
            assert!(run(synchronize).is_err(), "{strategy:?}");
        }
    });
}
