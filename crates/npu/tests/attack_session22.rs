//! Attacks of the twenty-second session's helper, through the `npu` facade: memory of one
//! device or context used by the work of another (pinned host memory, host registrations,
//! kernel arguments and functions), stream-ordered pool allocations discarded by a stop or an
//! abort, event timing across streams and contexts, and the `_blocking` calls made inside
//! Tokio runtimes.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::sync::Once;
use std::time::Duration;

use common::*;
use npu::memory::{DevicePool, DevicePoolBackend, HostRegistration, PageAlignedBuffer};
use npu::prelude::*;
use npu::sim;
use npu::{AclCode, Error};

/// The fill kernel `{uint8_t *x, uint64_t n}`: writes 0x5A over the `n` bytes at `x`.
const FILL_KERNEL: &str = "attack_session22_fill";

fn fill_function(ctx: &Context) -> Function {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(FILL_KERNEL, 16, |block, _, args| {
            // SAFETY: launched with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe { fill_args(args) };
            if block == 0 {
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, 0x5A, n) };
            }
            0
        })
        .unwrap();
    });
    in_process(ctx, FILL_KERNEL)
}

fn device_pool(ctx: &Context, backend: DevicePoolBackend, capacity: usize) -> DevicePool {
    DevicePool::builder(ctx)
        .capacity(capacity)
        .backend(backend)
        .build()
        .unwrap()
}

fn pinned_allocations() -> u64 {
    sim::flush_releases();
    sim::host_stats().unwrap().pinned_allocations
}

/// Rules 1 to 3 for pinned host memory of one device used by another device's stream
/// (aclrtMallocHost names no device, and the reference does not tie the memory to one): a
/// pinned buffer allocated in an explicit context of device 1 is copied to device 0 and one
/// is copied into from device 0, on device 0's held stream, and then every handle of that
/// context and of device 1 the test holds, and both futures, are dropped. Neither pinned
/// allocation may be freed while held (the copies would read and write freed host memory),
/// both must be freed once the copies ran, and the bytes must land. The same with the
/// devices swapped. A break: a pinned allocation freed (or its context torn down under it)
/// while its copy is queued, or never freed.
#[test]
fn pinned_memory_of_another_devices_context_outlives_its_handles_under_a_copy() {
    let (_guard, d0, d1) = exclusive(Some(3));
    let baseline = live_objects(&d0);
    for strategy in STRATEGIES {
        for (here, there) in [(&d0, &d1), (&d1, &d0)] {
            let what = format!(
                "{strategy:?}: pinned of device {} on device {}",
                there.device_id(),
                here.device_id()
            );
            let before = pinned_allocations();
            let owner = there.device().create_context().unwrap();
            let src = PinnedBuffer::from_slice(&owner, &[7u8; 4096]).unwrap();
            let dst = PinnedBuffer::<u8>::new(&owner, 4096).unwrap();
            let on_device = DeviceBuffer::<u8>::from_host_blocking(here, &[9u8; 4096]).unwrap();
            let landing = DeviceBuffer::<u8>::new(here, 4096).unwrap();
            let s = stream(here, strategy);
            let held = sim::hold(&here.device()).unwrap();
            let upload = s.copy_h2d(src, landing);
            let download = s.copy_d2h(on_device, dst);
            let (up, down) = (upload.completion().clone(), download.completion().clone());
            drop((owner, download));
            assert_eq!(pinned_allocations(), before + 2, "{what}: kept while held");
            held.release().unwrap();
            let (_, landing) = run(upload).unwrap();
            assert_eq!(landing.to_vec_blocking().unwrap(), [7; 4096], "{what}");
            all_completed(&[up, down]);
            until_released(&format!("{what}: both pinned buffers freed"), || {
                pinned_allocations() == before
            });
            run(s.synchronize()).unwrap();
        }
    }
    until_released("everything released", || {
        within(live_objects(&d0), baseline)
    });
}

/// Rules 2 and 3 for a host registration of one device's context used by another device's
/// stream: a registration made in device 0's explicit context is the source of a copy on
/// device 1's held stream and the destination of another, then the registration's future
/// owner (`into_inner`, polled once) and every handle of its context are dropped. The memory
/// must stay registered until both copies ran (the simulator looks the registration up again
/// when a task runs: an early unregister would fail the copy, an early free write freed
/// memory), and be unregistered after.
#[test]
fn a_registration_of_another_devices_context_stays_registered_under_its_copies() {
    let (_guard, d0, d1) = exclusive(Some(3));
    let baseline = live_objects(&d1);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let owner = d0.device().create_context().unwrap();
        let buffer = PageAlignedBuffer::from_slice(&[3u8; 8192]).unwrap();
        let registration =
            HostRegistration::new(&owner, buffer, npu::memory::RegisterFlags::PINNED).unwrap();
        let registrations = sim::host_stats().unwrap().registrations;
        let registration = std::sync::Arc::new(registration);
        let s = stream(&d1, strategy);
        let landing = DeviceBuffer::<u8>::new(&d1, 8192).unwrap();
        let held = sim::hold(&d1.device()).unwrap();
        let copy = s.copy_h2d(registration.clone(), landing);
        let done = copy.completion().clone();
        drop((registration, owner));
        sim::flush_releases();
        assert_eq!(
            sim::host_stats().unwrap().registrations,
            registrations,
            "{what}: registered while held"
        );
        held.release().unwrap();
        let (_, landing) = run(copy).unwrap();
        assert_eq!(landing.to_vec_blocking().unwrap(), [3; 8192], "{what}");
        all_completed(&[done]);
        until_released(&format!("{what}: unregistered"), || {
            sim::host_stats().unwrap().registrations < registrations
        });
    }
    until_released("everything released", || {
        within(live_objects(&d1), baseline)
    });
}

/// "Bad input gives a typed error naming the API" and rules 1 and 2 for kernels across
/// contexts and devices: a function loaded in an explicit context launched on a stream of
/// another context of the same device (ACL's 107003), a function of device 1 launched on
/// device 0's stream with an argument of either device (`InvalidArgument` naming
/// `Stream::launch` and `function`: the arguments are checked against the function's device
/// and the kernel runs on the stream's, so npu-rs must not leave this to the runtime, whose
/// reference does not promise the refusal), a buffer of device 1 passed to a kernel of
/// device 0 (naming `args`), each handing its arguments back and leaving the stream working;
/// a buffer of another context of the same device is accepted, and the kernel writes it.
/// Nothing leaks.
#[test]
fn launches_across_contexts_and_devices_are_refused_by_name_and_hand_arguments_back() {
    let (_guard, d0, d1) = exclusive(Some(3));
    let baseline = [live_objects(&d0), live_objects(&d1)];
    let other = d0.device().create_context().unwrap();
    let (here, there) = (fill_function(&other), fill_function(&d1));
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s0, s_other) = (stream(&d0, strategy), stream(&other, strategy));
        let x = DeviceBuffer::<u8>::new(&d0, 256).unwrap();

        // The function's context is not the stream's: ACL refuses it.
        // SAFETY: {uint8_t *x, uint64_t n}; x holds n bytes.
        let err = run(unsafe { s0.launch(&here, 1, (x, 256u64)) }).unwrap_err();
        assert_eq!(
            err.acl_code(),
            Some(AclCode(107003)),
            "{what}: {}",
            err.error
        );
        let (x, _) = err.value.expect("arguments back");

        // Another device's function, with an argument of either device: refused by npu-rs
        // naming `function`, before the runtime sees it (the arguments are checked against
        // the function's device, and the kernel would run on the stream's).
        let near = DeviceBuffer::<u8>::new(&d1, 256).unwrap();
        // SAFETY: as above.
        let err = run(unsafe { s0.launch(&there, 1, (x, 256u64)) }).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::launch", "function"),
            "{what}"
        );
        let (x, _) = err.value.expect("arguments back");
        // SAFETY: as above.
        let err = run(unsafe { s0.launch(&there, 1, (near, 256u64)) }).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::launch", "function"),
            "{what}"
        );
        let (near, _) = err.value.expect("arguments back");
        assert_eq!(
            near.to_vec_blocking().unwrap(),
            [0; 256],
            "{what}: untouched"
        );

        // A buffer of the primary context, on the function's own stream: device memory
        // belongs to the device, so it is accepted and written.
        // SAFETY: as above.
        let (x, _) = run(unsafe { s_other.launch(&here, 1, (x, 256u64)) }).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0x5A; 256], "{what}");

        // Another device's buffer.
        let far = DeviceBuffer::<u8>::new(&d1, 256).unwrap();
        // SAFETY: as above (refused before the kernel could run).
        let err = run(unsafe { s_other.launch(&here, 1, (far, 256u64)) }).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::launch", "args"),
            "{what}: {}",
            err.error
        );
        let (far, _) = err.value.expect("arguments back");
        assert_eq!(
            far.to_vec_blocking().unwrap(),
            [0; 256],
            "{what}: untouched"
        );
        // Both streams still work.
        run(s0.memset(x, 1)).unwrap();
        run(s_other.synchronize()).unwrap();
    }
    drop((here, there, other));
    until_released("everything released", || {
        within(live_objects(&d0), baseline[0]) && within(live_objects(&d1), baseline[1])
    });
}

/// Rules 1 to 3 for a stream-ordered pool allocation discarded on a stopped and on an
/// aborted stream: `aclrtMemPoolMallocAsync` queued behind held work, the stream stopped (the
/// allocation fails once the sentinel finds the stream dead) or aborted, and the block the
/// runtime had named given back with `aclrtMemPoolFreeAsync`. The next allocation (on
/// another stream, while the dead stream still holds the discarded allocation's queue) may
/// get that block; it must then be the only owner: a second allocation at the same time gets
/// another block, the runtime pool counts both in use, and each keeps its bytes after the
/// first stream is aborted (a free queued late, or twice, would free the new owner's block).
#[test]
fn a_pool_allocation_discarded_by_a_stop_or_an_abort_is_freed_once_and_never_under_a_new_owner() {
    let (_guard, ctx, _) = exclusive(Some(3));
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        for stop in [true, false] {
            let what = format!("{strategy:?}, stopped: {stop}");
            let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, 2 * 4096);
            let (s, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let held = sim::hold(&ctx.device()).unwrap();
            let blocker = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let mut alloc = Box::pin(pool.alloc::<u8>(&s, 4096));
            assert!(polled_once(alloc.as_mut()).is_pending(), "{what}");
            if stop {
                s.stop().unwrap();
                held.release().unwrap();
                let err = run(alloc).unwrap_err();
                assert!(err.acl_code().is_some(), "{what}: {err}");
            } else {
                let abort = s.abort();
                let err = run(alloc).unwrap_err();
                assert!(err.is_aborted(), "{what}: {err}");
                run(abort).unwrap();
                held.release().unwrap();
            }
            let _ = run(blocker);
            until_released(&format!("{what}: the room is back"), || {
                pool.stats().cache.allocated == 0
            });
            let a = run(pool.alloc::<u8>(&s2, 4096)).unwrap();
            let b = run(pool.alloc::<u8>(&s2, 4096)).unwrap();
            assert_ne!(a.addr(), b.addr(), "{what}: two owners of one block");
            let (a, b) = (
                run(s2.memset(a, 0x11)).unwrap(),
                run(s2.memset(b, 0x22)).unwrap(),
            );
            if stop {
                run(s.abort()).unwrap();
            }
            run(s.synchronize()).unwrap();
            let usage = pool.stats().runtime.expect("a runtime pool");
            assert!(usage.used >= 2 * 4096, "{what}: {usage:?}");
            assert_eq!(run(s2.download(a)).unwrap(), vec![0x11; 4096], "{what}");
            assert_eq!(run(s2.download(b)).unwrap(), vec![0x22; 4096], "{what}");
            drop((pool, s, s2));
        }
    }
    until_released("the pools and their blocks released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// "Bad input gives a typed error naming the API, never a panic or a hang" for event timing:
/// events of two streams of two contexts of one device (a duration), an end recorded before
/// the start (a typed error, never a negative duration or a panic), an end never recorded,
/// an end whose record is held on the device (a typed error at once, never a wait), an
/// event without a timeline, events of two devices, and an end recorded on a stream a fault
/// stopped. Each refusal names `Event::elapsed` or is ACL's error.
#[test]
fn event_timing_across_streams_and_contexts_is_a_duration_or_a_typed_error() {
    let (_guard, d0, d1) = exclusive(Some(3));
    let other = d0.device().create_context().unwrap();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s0, s_other) = (stream(&d0, strategy), stream(&other, strategy));
        let (start, end) = (Event::new(&d0).unwrap(), Event::new(&other).unwrap());
        start.record(&s0).unwrap();
        run(start.wait()).unwrap();
        s_other.wait_event(&start).unwrap();
        end.record(&s_other).unwrap();
        run(end.wait()).unwrap();
        let forward = Event::elapsed(&start, &end);
        assert!(forward.is_ok(), "{what}: {forward:?}");
        // Reversed: the end is before the start.
        match Event::elapsed(&end, &start) {
            Ok(d) => assert_eq!(d, Duration::ZERO, "{what}"),
            Err(err) => assert!(
                err.to_string().contains("Event::elapsed") || err.acl_code().is_some(),
                "{what}: {err}"
            ),
        }
        // Never recorded.
        let never = Event::new(&d0).unwrap();
        let err = watchdog("elapsed of an unrecorded event", || {
            Event::elapsed(&start, &never)
        });
        assert!(err.is_err(), "{what}: {err:?}");
        // Held.
        let held = sim::hold(&d0.device()).unwrap();
        let pending = Event::new(&d0).unwrap();
        pending.record(&s0).unwrap();
        let err = watchdog("elapsed of a held event", || {
            Event::elapsed(&start, &pending)
        });
        assert!(err.is_err(), "{what}: {err:?}");
        held.release().unwrap();
        run(pending.wait()).unwrap();
        assert!(Event::elapsed(&start, &pending).is_ok(), "{what}");
        // No timeline.
        let plain = Event::builder(&d0)
            .flags(npu::ffi::ACL_EVENT_SYNC)
            .build()
            .unwrap();
        plain.record(&s0).unwrap();
        run(plain.wait()).unwrap();
        assert_eq!(
            invalid(&Event::elapsed(&start, &plain).unwrap_err()),
            ("Event::elapsed", "end")
        );
        // Two devices.
        let far = Event::new(&d1).unwrap();
        let s1 = stream(&d1, strategy);
        far.record(&s1).unwrap();
        run(far.wait()).unwrap();
        assert_eq!(
            invalid(&Event::elapsed(&start, &far).unwrap_err()),
            ("Event::elapsed", "end")
        );
        // Recorded on a stream a fault stopped (in a context of its own: a STOP-mode fault
        // stops the whole context).
        let doomed = d0.device().create_context().unwrap();
        let faulty = stream(&doomed, strategy);
        faulty
            .set_failure_mode(npu::stream::FailureMode::Stop)
            .unwrap();
        sim::fail_task(&faulty, 1, AclCode(507015)).unwrap();
        let failed = faulty.memset(DeviceBuffer::<u8>::new(&doomed, 8).unwrap(), 0);
        let dead = Event::new(&doomed).unwrap();
        let recorded = dead.record(&faulty);
        assert!(run(failed).is_err(), "{what}");
        if recorded.is_ok() {
            let _ = run(dead.wait());
        }
        let err = watchdog("elapsed of a record a fault discarded", || {
            Event::elapsed(&start, &dead)
        });
        assert!(err.is_err(), "{what}: {err:?}");
    }
}

/// Rule 5 and "never a hang" for the `_blocking` calls inside Tokio runtimes (current-thread
/// with its clock running and paused, multi-thread with one blocking thread that a
/// `spawn_blocking` task occupies with a `wait_blocking`): a `BlockingSync` memset submitted
/// on the runtime and held, waited for with `Completion::wait_blocking` from the runtime's
/// own thread while another thread releases the device; blocking copies and a context
/// synchronisation after. Each returns with the right bytes.
#[test]
fn blocking_calls_inside_tokio_runtimes_return_once_the_device_is_released() {
    let (_guard, ctx, _) = exclusive(Some(3));
    let baseline = live_memory(&ctx);
    let runtimes: [(&str, MakeRuntime); 3] = [
        ("current-thread", || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        }),
        ("paused", paused_runtime),
        ("multi-thread, one blocking thread", || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(1)
                .enable_all()
                .build()
                .unwrap()
        }),
    ];
    for strategy in STRATEGIES {
        for (name, make) in runtimes {
            let what = format!("{strategy:?}, {name}");
            let rt = make();
            let s = stream(&ctx, strategy);
            let ctx = ctx.clone();
            let result = watchdog(&what, || {
                rt.block_on(async {
                    let held = sim::hold(&ctx.device()).unwrap();
                    let buffer = DeviceBuffer::<u8>::new(&ctx, 4096).unwrap();
                    let mut memset = Box::pin(s.memset(buffer, 0x33));
                    assert!(polled_once(memset.as_mut()).is_pending());
                    let done = memset.completion().clone();
                    let waiter = done.clone();
                    let blocked =
                        tokio::task::spawn_blocking(move || waiter.wait_blocking().is_ok());
                    let releaser = std::thread::spawn(move || held.release().unwrap());
                    done.wait_blocking().unwrap();
                    releaser.join().unwrap();
                    assert!(blocked.await.unwrap());
                    let buffer = memset.await.unwrap();
                    ctx.synchronize_blocking().unwrap();
                    let copied = DeviceBuffer::from_host_blocking(&ctx, &[1u8; 64]).unwrap();
                    (
                        buffer.to_vec_blocking().unwrap(),
                        copied.to_vec_blocking().unwrap(),
                    )
                })
            });
            assert_eq!(result, (vec![0x33; 4096], vec![1; 64]), "{what}");
            drop(rt);
        }
    }
    until_released("everything released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// "Never a hang" for the synchronous calls beside a stopped stream: an explicit context whose
/// stream was stopped with a memset queued (held, then released) is synchronised with
/// `Context::synchronize_blocking` (a typed error naming the stop, not a wait for work that
/// can never run), blocking copies of other memory of the context still work, the queued
/// memset fails, and after an abort the context synchronises cleanly. All three strategies.
#[test]
fn synchronous_calls_beside_a_stopped_stream_give_typed_errors_not_a_hang() {
    let (_guard, d0, _) = exclusive(Some(3));
    let baseline = live_objects(&d0);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let ctx = d0.device().create_context().unwrap();
        let s = stream(&ctx, strategy);
        let held = sim::hold(&ctx.device()).unwrap();
        let memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        s.stop().unwrap();
        held.release().unwrap();
        let synced = watchdog("a context synchronised beside a stopped stream", || {
            ctx.synchronize_blocking()
        });
        assert!(synced.unwrap_err().acl_code().is_some(), "{what}");
        let copied = watchdog("blocking copies beside a stopped stream", || {
            DeviceBuffer::from_host_blocking(&ctx, &[4u8; 64])
                .unwrap()
                .to_vec_blocking()
        });
        assert_eq!(copied.unwrap(), [4; 64], "{what}");
        let failed = run(memset).unwrap_err();
        assert!(
            failed.error.acl_code().is_some(),
            "{what}: {}",
            failed.error
        );
        assert!(failed.value.is_some(), "{what}: the buffer back");
        run(s.abort()).unwrap();
        ctx.synchronize_blocking().unwrap();
        run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2)).unwrap();
    }
    until_released("everything released", || {
        within(live_objects(&d0), baseline)
    });
}

/// "Bad input gives a typed error naming the API, never a panic or a hang" for events of every
/// creation flag and both kinds (including flags the runtime refuses, device-only, external and
/// IPC events, and events without a timeline or without `ACL_EVENT_SYNC`): each is created or
/// refused, and every use (record, wait, query, timestamp, `Event::elapsed` of itself, a stream
/// waiting on it, with and without a timeout) gives a result or a typed error, bounded; the
/// stream keeps working.
#[test]
fn events_of_every_flag_and_kind_give_results_or_typed_errors() {
    let (_guard, d0, _) = exclusive(Some(3));
    // Timing a record the runtime refused, or waiting for a legacy event whose record it
    // refused, is the caller's InvalidArgument ("was never recorded").
    let typed = |err: &Error| {
        err.acl_code().is_some()
            || matches!(
                invalid(err).0,
                "Event::elapsed"
                    | "Event::timestamp_us"
                    | "Stream::wait_event"
                    | "Stream::wait_event_timeout"
            )
    };
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        for kind in [npu::stream::EventKind::Legacy, npu::stream::EventKind::Ex] {
            for flags in [
                0u32,
                1,
                2,
                8,
                16,
                32,
                64,
                0x80,
                1 | 8,
                2 | 8,
                1 | 2,
                1 | 16,
                8 | 16,
                u32::MAX,
            ] {
                let what = format!("{strategy:?}, {kind:?}, flags {flags:#x}");
                let event = match Event::builder(&d0).kind(kind).flags(flags).build() {
                    Ok(event) => event,
                    Err(err) => {
                        assert!(err.acl_code().is_some(), "{what}: {err}");
                        continue;
                    }
                };
                watchdog(&what, || {
                    let results = [
                        event.record(&s),
                        run(event.wait()),
                        event.is_complete().map(drop),
                        event.timestamp_us().map(drop),
                        Event::elapsed(&event, &event).map(drop),
                        s.wait_event(&event),
                        run(s.wait_event_timeout(&event, Duration::from_secs(1)))
                            .map(drop)
                            .map_err(|failed| failed.error),
                    ];
                    for result in results {
                        if let Err(err) = result {
                            assert!(typed(&err), "{what}: {err}");
                        }
                    }
                    run(s.synchronize()).unwrap();
                });
            }
        }
    }
}

/// Rules 2 and 3 and "ownership survives failure" for staged copies: through a pinned pool of
/// another device's context (legal: pinned memory names no device), and on a stream that was
/// stopped or aborted under them (the copy held on the device, the future polled once): the
/// destination (or source) comes back in the error, the staging block returns to its pool,
/// and nothing leaks.
#[test]
fn staged_copies_through_another_devices_pool_or_on_a_dead_stream_give_everything_back() {
    let (_guard, d0, d1) = exclusive(Some(3));
    let baseline = live_objects(&d0);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let pool = PinnedPool::new(&d1);
        let s = stream(&d0, strategy);
        let data: Vec<u32> = (0..1024).collect();
        let dst = DeviceBuffer::<u32>::new(&d0, 1024).unwrap();
        let dst = run(s.copy_from_slice_staged(&pool, &data, dst)).unwrap();
        let (dst, back) = run(s.copy_to_vec_staged(&pool, dst)).unwrap();
        assert_eq!(back, data, "{what}");

        for stop in [true, false] {
            let what = format!("{what}, stopped: {stop}");
            let held = sim::hold(&d0.device()).unwrap();
            let mut upload = Box::pin(s.copy_from_slice_staged(&pool, &data, dst_of(&d0)));
            assert!(polled_once(upload.as_mut()).is_pending(), "{what}");
            let mut download = Box::pin(s.copy_to_vec_staged(&pool, dst_of(&d0)));
            assert!(polled_once(download.as_mut()).is_pending(), "{what}");
            if stop {
                s.stop().unwrap();
                held.release().unwrap();
            } else {
                let abort = s.abort();
                run(abort).unwrap();
                held.release().unwrap();
            }
            let failed = run(upload).unwrap_err();
            assert!(failed.value.is_some(), "{what}: {}", failed.error);
            let failed = run(download).unwrap_err();
            assert!(failed.value.is_some(), "{what}: {}", failed.error);
            if stop {
                run(s.abort()).unwrap();
            }
            until_released(&format!("{what}: the staging blocks are back"), || {
                pool.stats().allocated == 0 && pool.stats().awaiting_blocks == 0
            });
        }
        let dst = run(s.copy_from_slice_staged(&pool, &data, dst)).unwrap();
        assert_eq!(run(s.download(dst)).unwrap(), data, "{what}");
    }
    until_released("everything released", || {
        within(live_objects(&d0), baseline)
    });
}

/// Builds a Tokio runtime of one shape.
type MakeRuntime = fn() -> tokio::runtime::Runtime;

fn dst_of(ctx: &Context) -> DeviceBuffer<u32> {
    DeviceBuffer::<u32>::new(ctx, 1024).unwrap()
}

/// Rules 1 to 3 for pinned host memory whose device is lost under it: pinned buffers of device
/// 2's explicit and primary contexts are copied to and from device 0 on its held stream when
/// device 2 is lost (the simulator's fault injection; device 2 is this file's doomed device,
/// lost for the rest of the process). The memory must not go with the device: both copies run
/// with their bytes once device 0 is released, a third pinned buffer of the lost device's
/// context still serves a healthy stream, and every pinned allocation is freed afterwards
/// (freeing binds the lost device's context). Opening the lost device is a typed error.
#[test]
fn pinned_memory_of_a_lost_device_keeps_serving_other_devices_and_is_freed() {
    let (_guard, d0, _) = exclusive(Some(3));
    let before = pinned_allocations();
    let doomed = Device::open(DOOMED).unwrap();
    let owner = doomed.create_context().unwrap();
    let src = PinnedBuffer::from_slice(&owner, &[7u8; 4096]).unwrap();
    let dst = PinnedBuffer::<u8>::new(doomed.primary_context(), 4096).unwrap();
    let spare = PinnedBuffer::<u8>::from_slice(&owner, &[1u8; 4096]).unwrap();
    let on_device = DeviceBuffer::<u8>::from_host_blocking(&d0, &[9u8; 4096]).unwrap();
    let s = stream(&d0, npu::stream::Strategy::EventPoll);
    let held = sim::hold(&d0.device()).unwrap();
    let upload = s.copy_h2d(src, DeviceBuffer::<u8>::new(&d0, 4096).unwrap());
    let download = s.copy_d2h(on_device, dst);
    sim::lose(&doomed).unwrap();
    assert_eq!(
        pinned_allocations(),
        before + 3,
        "kept with the device lost"
    );
    held.release().unwrap();
    let (src, landed) = run(upload).unwrap();
    assert_eq!(landed.to_vec_blocking().unwrap(), [7; 4096]);
    let (_, dst) = run(download).unwrap();
    assert_eq!((&dst[..], &src[..]), (&[9; 4096][..], &[7; 4096][..]));
    let landing = DeviceBuffer::<u8>::new(&d0, 4096).unwrap();
    let (spare, landed) = run(s.copy_h2d(spare, landing)).unwrap();
    assert_eq!(landed.to_vec_blocking().unwrap(), [1; 4096]);
    drop((src, dst, spare, owner, doomed));
    until_released("the lost device's pinned memory freed", || {
        pinned_allocations() == before
    });
    assert!(Device::open(DOOMED).unwrap_err().acl_code().is_some());
}

/// "A typed error that says what happened" for a stream that waits on a record another
/// stream's abort discarded: stream `a` records an event behind held work, stream `b` waits on
/// it (`wait_event`, and `wait_event_timeout` as an operation of its own) with work queued
/// after the waits, and `a` is aborted. `a`'s work is discarded (`Error::Aborted`), but `b` was
/// not aborted: its waits ran and failed (the record can never be reached: the runtime's
/// `ACL_ERROR_RT_STREAM_ABORT`, which `is_aborted` still reports), and the work queued after
/// them ran. `Error::Aborted` there ("discarded: its stream was aborted", which promises the
/// device never ran it) would tell the caller that `b` lost its queue when it did not.
#[test]
fn a_wait_on_a_record_another_streams_abort_discarded_is_not_reported_as_aborted() {
    let (_guard, d0, _) = exclusive(Some(3));
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (a, b) = (stream(&d0, strategy), stream(&d0, strategy));
        let event = Event::new(&d0).unwrap();
        let held = sim::hold(&d0.device()).unwrap();
        let discarded = a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 1);
        event.record(&a).unwrap();
        b.wait_event(&event).unwrap();
        let timed = b.wait_event_timeout(&event, Duration::from_secs(60));
        let after = b.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 2);
        run(a.abort()).unwrap();
        held.release().unwrap();
        let err = run(discarded).unwrap_err().error;
        assert!(matches!(err, Error::Aborted { .. }), "{what}: {err}");
        assert!(run(event.wait()).unwrap_err().is_aborted(), "{what}");
        let err = run(timed).unwrap_err().error;
        assert!(err.is_aborted(), "{what}: {err}");
        assert!(
            matches!(&err, Error::Acl(acl) if acl.api == "aclrtStreamWaitEventWithTimeout"),
            "{what}: b's timed wait ran and failed, it was not discarded: {err}"
        );
        let after = run(after).unwrap();
        assert_eq!(after.to_vec_blocking().unwrap(), [2; 64], "{what}: ran");
        let err = run(b.synchronize()).unwrap_err().error;
        assert!(err.is_aborted(), "{what}: {err}");
        assert!(
            matches!(&err, Error::Acl(acl) if acl.api == "aclrtStreamWaitEvent"),
            "{what}: b's wait ran and failed, it was not discarded: {err}"
        );
        run(b.synchronize()).unwrap();
        run(a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 3)).unwrap();

        // The same wait on a stream in STOP mode (in a context of its own, which its failure
        // stops): the work after the wait never runs, and it fails with the wait's failure,
        // not as discarded by an abort of its stream, which nothing aborted.
        let stopping = d0.device().create_context().unwrap();
        let b = stream(&stopping, strategy);
        b.set_failure_mode(npu::stream::FailureMode::Stop).unwrap();
        let held = sim::hold(&d0.device()).unwrap();
        let discarded = a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 1);
        event.record(&a).unwrap();
        b.wait_event(&event).unwrap();
        let after = b.memset(DeviceBuffer::<u8>::new(&stopping, 64).unwrap(), 2);
        run(a.abort()).unwrap();
        held.release().unwrap();
        assert!(run(discarded).unwrap_err().error.is_aborted(), "{what}");
        let failed = run(after).unwrap_err();
        assert!(
            !matches!(failed.error, Error::Aborted { .. }),
            "{what}: b was not aborted: {}",
            failed.error
        );
        assert_eq!(
            failed
                .value
                .expect("the buffer back")
                .to_vec_blocking()
                .unwrap(),
            [0; 64],
            "{what}: never ran"
        );
        run(a.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 3)).unwrap();
    }
}

/// Device 2, lost by the test above for the rest of the process.
const DOOMED: u32 = 2;
