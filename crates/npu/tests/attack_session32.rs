//! Attacks of the thirty-second session through the `npu` facade: pooled blocks taken apart
//! (split, viewed, cast) and handed to kernels and pitched copies while their pools are
//! trimmed and dropped; handles of every kind dropped in shuffled orders under held work;
//! futures polled on one thread or runtime and dropped on another as the device finishes
//! them; the last handles of runtimes and contexts dropped by a waker on the thread that
//! completes its operation; every fallible constructor and control at its extreme values; and
//! pool reserves racing trims.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `watchdog`), so a hang fails its test.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use npu::memory::{DevicePoolBackend, PinnedPool};
use npu::prelude::*;
use npu::stream::{Copy2d, Strategy};
use npu::{Stream, sim};

/// The memory of each of the two simulated devices: small enough for a pool to fill one.
const MEMORY: u64 = 64 << 20;

/// The byte the test's fill kernel writes.
const FILLED: u8 = 0x5B;

/// The device lock and device 0's primary context, of this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(2, MEMORY)
}

/// The name the test's fill kernel is registered under.
const FILL: &str = "npu_attack_session32_fill";

/// The fill kernel `{uint8_t *x, uint64_t n}`: writes [`FILLED`] over the `n` bytes at `x`.
fn fill(ctx: &Context) -> npu::Function {
    fill_kernel(ctx, FILL, FILLED)
}

/// A zeroed pinned buffer of 4096 bytes to read device memory back into.
fn host(ctx: &Context) -> PinnedBuffer<u8> {
    PinnedBuffer::new(ctx, 4096).unwrap()
}

/// Bytes the device holds for its allocations, pooled or not.
fn device_bytes(device: &Device) -> u64 {
    sim::device_stats(device).unwrap().bytes_allocated
}

/// Promise attacked: rule 2 and the pools' "a block is handed out again, or given back to the
/// runtime, only once every operation that used it has completed", through every adapter at
/// once. A `DevicePool` block split in two: one half viewed and cast to `u32`, filled by a
/// kernel; the other the destination of a pitched copy from half of a `PinnedPool` block. With
/// the device held, both pools are trimmed and dropped, then the block's own handles: the
/// device keeps every byte of the block (nothing freed under the queued work), and once
/// released the kernel and the copy land exactly where they were aimed. In a second round the
/// futures are dropped instead of kept, and everything is given back after the device ran
/// them. Both backends, every strategy.
#[test]
fn a_pooled_block_split_viewed_and_cast_into_a_kernel_and_a_pitched_copy_outlives_its_pools() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let kernel = fill(&d0);
    let shape = Copy2d {
        width: 64,
        height: 16,
        src_pitch: 128,
        dst_pitch: 256,
    };
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            for keep in [true, false] {
                let what = format!("{backend:?} {strategy:?} keep={keep}");
                let s = stream(&d0, strategy);
                let bytes_before = device_bytes(&device);
                let pinned_before = sim::host_stats().unwrap().pinned_bytes;
                let dpool = device_pool(&d0, backend, None);
                let ppool = PinnedPool::new(&d0);
                let block = run(dpool.alloc::<u8>(&s, 8192)).unwrap();
                let mut staging = run(ppool.alloc::<u8>(4096)).unwrap();
                for (i, byte) in staging.iter_mut().enumerate() {
                    *byte = i as u8;
                }
                let (kernel_half, copy_half) = block.into_halves(4096).unwrap();
                let aimed = kernel_half.view(1024..3072).unwrap().cast::<u32>().unwrap();
                let (source, rest) = staging.into_halves(2048).unwrap();
                drop(rest);

                let held = sim::hold(&device).unwrap();
                // SAFETY: the kernel writes the 2048 bytes of `aimed`, which the launch keeps.
                let launch = unsafe { s.launch(&kernel, 1, (aimed, 2048u64)) };
                let copy = s.copy_2d_h2d(source, copy_half, shape);
                let bytes_queued = device_bytes(&device);
                let pinned_queued = sim::host_stats().unwrap().pinned_bytes;
                dpool.trim().unwrap();
                dpool.trim_to(0).unwrap();
                ppool.trim();
                drop((dpool, ppool));
                sim::flush_releases();
                assert_eq!(
                    device_bytes(&device),
                    bytes_queued,
                    "{what}: device memory given back under work the held device has queued"
                );
                assert_eq!(
                    sim::host_stats().unwrap().pinned_bytes,
                    pinned_queued,
                    "{what}: pinned memory given back under a queued copy"
                );
                if keep {
                    held.release().unwrap();
                    let (aimed, _) = run(launch).unwrap();
                    let (_source, copied) = run(copy).unwrap();
                    let view = aimed.into_inner();
                    let kernel_half = view.into_inner();
                    let written = run(s.copy_d2h(kernel_half, host(&d0))).unwrap().1;
                    assert!(written[..1024].iter().all(|&b| b == 0), "{what}: before");
                    assert!(written[1024..3072].iter().all(|&b| b == FILLED), "{what}");
                    assert!(written[3072..].iter().all(|&b| b == 0), "{what}: after");
                    let rows = run(s.copy_d2h(copied, host(&d0))).unwrap().1;
                    for (i, byte) in rows.iter().enumerate() {
                        let (row, col) = (i / 256, i % 256);
                        let expected = if row < 16 && col < 64 {
                            (row * 128 + col) as u8
                        } else {
                            0
                        };
                        assert_eq!(*byte, expected, "{what}: byte {i}");
                    }
                } else {
                    drop((launch, copy));
                    held.release().unwrap();
                }
                run(s.synchronize()).unwrap();
                let what = format!(
                    "{what}: device bytes {} of {bytes_before}, pinned {} of {pinned_before}",
                    device_bytes(&device),
                    sim::host_stats().unwrap().pinned_bytes
                );
                until_released(&what, || {
                    device_bytes(&device) <= bytes_before
                        && sim::host_stats().unwrap().pinned_bytes <= pinned_before
                });
            }
        }
    }
}

/// Promise attacked: rule 5 ("no drop waits for the device") and rules 2 and 3 for the
/// handles the earlier teardown attacks left out, dropped in shuffled orders while the device
/// holds work that needs each of them: a `Notify` recorded on one stream and waited on by
/// another, an `Arc`-shared `ValueWord` written on one stream and waited for on another (a
/// memset queued behind the wait), a `Module` and its `Function` with a launch queued, an
/// `Arc`-shared `HostRegistration` being copied from, a `StreamPool` with a memset on each
/// stream, an `Event` recorded on one stream and waited on by another, both streams, the
/// explicit context they all live in, and the `Device`. Every drop returns with the device
/// held; once released, every operation completes successfully in its order, the memset
/// behind the value wait wrote its bytes, and everything is given back. Every strategy, six
/// orders each (forward, reverse, four shuffles).
#[test]
fn handles_of_every_signalling_and_kernel_kind_dropped_in_shuffled_orders_never_wait() {
    let (_guard, d0) = devices();
    let kernel_image = sim::kernel::registry_image(&[FILL]);
    fill(&d0); // registers the kernel
    let baseline = live_objects(&d0);
    let mut rng = Rng(0x5e55_1032);
    for strategy in STRATEGIES {
        for order in 0..6 {
            let what = format!("{strategy:?} order {order}");
            let device = Device::open(0).unwrap();
            let ctx = device.create_context().unwrap();
            let (s1, s2) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let held = sim::hold(&device).unwrap();
            let mut done = Vec::new();
            let mut watch = |op: &dyn HasCompletion| done.push(op.completion_of());

            let notify = npu::stream::Notify::new(&ctx).unwrap();
            watch(&s1.record_notify(&notify));
            watch(&s2.wait_notify(&notify));

            let word = Arc::new(npu::stream::ValueWord::new(&ctx, 0).unwrap());
            watch(&s1.write_value(word.clone(), 5));
            watch(&s2.wait_value(word.clone(), 5, npu::stream::ValueCondition::AtLeast));
            let behind = s2.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9);
            let behind_done = behind.completion().clone();

            // SAFETY: a registry image only names in-process kernels; loading it runs no code.
            let module = unsafe { Module::from_data(&ctx, &kernel_image) }.unwrap();
            let function = module.function(FILL).unwrap();
            let x = DeviceBuffer::<u8>::new(&ctx, 256).unwrap();
            // SAFETY: the kernel writes the 256 bytes of `x`, which the launch keeps.
            watch(&unsafe { s1.launch(&function, 1, (x, 256u64)) });

            let mut pages = npu::memory::PageAlignedBuffer::<u8>::new(8192).unwrap();
            pages.fill(4);
            let registration = Arc::new(
                npu::memory::HostRegistration::new(&ctx, pages, npu::memory::RegisterFlags::PINNED)
                    .unwrap(),
            );
            watch(&s2.copy_h2d(
                registration.clone(),
                DeviceBuffer::<u8>::new(&ctx, 8192).unwrap(),
            ));

            let pool = npu::stream::StreamPool::new(&ctx, 2).unwrap();
            for _ in 0..2 {
                watch(
                    &pool
                        .next()
                        .memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1),
                );
            }

            let event = Event::new(&ctx).unwrap();
            event.record(&s1).unwrap();
            s2.wait_event(&event)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            watch(&s2.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2));

            let mut handles: Vec<Box<dyn std::any::Any + Send>> = vec![
                Box::new(notify),
                Box::new(word),
                Box::new(module),
                Box::new(function),
                Box::new(registration),
                Box::new(pool),
                Box::new(event),
                Box::new(s1),
                Box::new(s2),
                Box::new(ctx),
                Box::new(device),
            ];
            match order {
                0 => {}
                1 => handles.reverse(),
                _ => {
                    for i in (1..handles.len()).rev() {
                        handles.swap(i, rng.below(i + 1));
                    }
                }
            }
            watchdog(&format!("{what}: dropping the handles"), || {
                handles.into_iter().for_each(drop)
            });
            assert!(!behind_done.is_complete(), "{what}: the device is held");
            drop(held);
            for done in done {
                run(done.wait()).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            let behind = run(behind).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            assert_eq!(behind.to_vec_blocking().unwrap(), [9; 64], "{what}");
            drop(behind);
            until_released(&what, || within(live_objects(&d0), baseline));
        }
    }
}

/// What [`handles_of_every_signalling_and_kernel_kind_dropped_in_shuffled_orders_never_wait`]
/// keeps of each operation before dropping it: its completion.
trait HasCompletion {
    fn completion_of(&self) -> npu::stream::Completion;
}

impl<T: Send + 'static> HasCompletion for npu::stream::Op<T> {
    fn completion_of(&self) -> npu::stream::Completion {
        self.completion().clone()
    }
}

/// A waker (made with `futures::task::waker`) whose wake panics, and which counts its wakes.
struct PanickingWaker(std::sync::atomic::AtomicUsize);

impl futures::task::ArcWake for PanickingWaker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        panic!("a user waker panics when woken");
    }
}

/// Promise attacked: rules 2, 6 and 7 for futures that change threads and runtimes while the
/// device finishes them. Each round queues, on a held device, a memset and a copy reading an
/// `Arc`-shared buffer; a current-thread Tokio runtime started inside a multi-thread one's
/// `spawn_blocking` polls both once (registering its wakers); they move to a plain thread,
/// which drops them as the test's thread releases the device (after polling them again with a
/// waker that panics when woken, every other round), or before it: then the `Arc` must still
/// be shared while the device is held. Every `Arc` clone must go once the copy completed, the panicking waker harms no thread
/// (the next round's operations complete), and every buffer comes back. Every strategy, 100
/// rounds each.
#[test]
fn futures_polled_in_a_blocking_task_and_dropped_on_another_thread_as_the_device_finishes() {
    const ROUNDS: usize = 100;
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let baseline = live_memory(&d0);
    let outer = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let shared =
            Arc::new(run(s.memset(DeviceBuffer::<u8>::new(&d0, 4096).unwrap(), 6)).unwrap());
        for round in 0..ROUNDS {
            let what = format!("{strategy:?} round {round}");
            let held = sim::hold(&device).unwrap();
            let memset = s.memset(DeviceBuffer::<u8>::new(&d0, 4096).unwrap(), round as u8);
            let read = s.copy_d2h(shared.clone(), PinnedBuffer::<u8>::new(&d0, 4096).unwrap());
            let read_done = read.completion().clone();
            let (memset, read) = outer
                .block_on(outer.spawn_blocking(move || {
                    let inner = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    inner.block_on(async move {
                        let (mut memset, mut read) = (memset, read);
                        std::future::poll_fn(|cx| {
                            assert!(std::pin::Pin::new(&mut memset).poll(cx).is_pending());
                            assert!(std::pin::Pin::new(&mut read).poll(cx).is_pending());
                            std::task::Poll::Ready(())
                        })
                        .await;
                        (memset, read)
                    })
                }))
                .unwrap();
            let go = Arc::new(std::sync::Barrier::new(2));
            let theirs = go.clone();
            let panicking = round % 2 == 1;
            let dropper = std::thread::spawn(move || {
                let (mut memset, mut read) = (memset, read);
                let waker = Arc::new(PanickingWaker(Default::default()));
                if panicking {
                    let waker = futures::task::waker(waker.clone());
                    let mut cx = std::task::Context::from_waker(&waker);
                    let _ = std::pin::Pin::new(&mut memset).poll(&mut cx);
                    let _ = std::pin::Pin::new(&mut read).poll(&mut cx);
                }
                theirs.wait();
                drop((memset, read));
                waker
            });
            let waker = if round % 3 == 2 {
                // Dropped first, on the other thread, with the device still held: the copy's
                // clone is kept for the device.
                go.wait();
                let waker = watchdog(&what, || dropper.join().unwrap());
                assert!(!read_done.is_complete(), "{what}: held");
                assert_eq!(
                    Arc::strong_count(&shared),
                    2,
                    "{what}: let go under the copy"
                );
                held.release().unwrap();
                waker
            } else {
                go.wait();
                held.release().unwrap();
                watchdog(&what, || dropper.join().unwrap())
            };
            run(read_done.wait()).unwrap_or_else(|e| panic!("{what}: {e}"));
            until_released(&what, || Arc::strong_count(&shared) == 1);
            if panicking {
                // Either the device finished first (woken, the panic contained) or the
                // futures were dropped first (never woken): at most one wake each.
                assert!(
                    waker.0.load(std::sync::atomic::Ordering::SeqCst) <= 2,
                    "{what}"
                );
            }
        }
        let shared = Arc::try_unwrap(shared).unwrap();
        assert_eq!(shared.to_vec_blocking().unwrap(), [6; 4096], "{strategy:?}");
    }
    drop(outer);
    until_released("every buffer", || within(live_memory(&d0), baseline));
}

/// A waker that drops what it keeps the first time it is woken.
struct DropsWhenWoken(std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>);

impl std::task::Wake for DropsWhenWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let kept = self.0.lock().unwrap().take();
        drop(kept);
    }
}

/// Promise attacked: rule 5, "no drop waits for the device, and no shared thread waits on
/// device work beyond a short bound", on the completing threads, with the last handles of a
/// runtime of the program's own (npu-sim's cdylib) dropped there by a waker, as the brief's
/// "last `Arc` dropped inside a waker" does. The last handle finalises ACL, which on CANN
/// waits up to 2 s for the device's logs (a finalize callback stands in for that wait, as in
/// `attack_session28b`). The reaper hands such a teardown to `npu-teardown`; the reactor, a
/// callback worker or a blocking waiter must not run it either: while it waits, a later
/// operation of the in-process runtime completing on the same kind of thread must still
/// complete, and the finalisation must not run on a shared thread. Every strategy.
#[test]
fn a_runtime_of_its_own_whose_last_handle_a_waker_drops_is_finalised_off_the_completing_thread() {
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let own = OwnRuntime::new("attack32-waker-finalises");
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let runtime = own.build();
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, Strategy::EventPoll);
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3)).unwrap();
        hold_finalisation(&runtime);
        let _let_go = FinalisationHeld;
        let waker = Arc::new(DropsWhenWoken(std::sync::Mutex::new(Some(Box::new((
            buffer, s, ctx, runtime,
        ))))));

        let local = stream(&d0, strategy);
        let held = sim::hold(&device).unwrap();
        let mut op = local.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 8);
        let woken = std::task::Waker::from(waker.clone());
        let polled = std::pin::Pin::new(&mut op).poll(&mut std::task::Context::from_waker(&woken));
        assert!(polled.is_pending(), "{what}: held");
        drop((woken, waker));
        held.release().unwrap();
        until_finalising(&format!("{what}: finalising"), |state| {
            !state.threads.is_empty()
        });
        // The completing threads go on while ACL's finalisation waits.
        let (answered, answer) = std::sync::mpsc::channel();
        let (later_ctx, later_stream) = (d0.clone(), local.clone());
        std::thread::spawn(move || {
            let later = later_stream.memset(DeviceBuffer::<u8>::new(&later_ctx, 64).unwrap(), 6);
            let _ = answered.send(later.completion().wait_blocking().is_ok());
        });
        let completed = answer.recv_timeout(HANG);
        let threads = let_finalisation_go();
        assert_eq!(
            completed,
            Ok(true),
            "{what}: a later operation waited for ACL's finalisation on {threads:?}"
        );
        assert_eq!(
            threads,
            ["npu-teardown"],
            "{what}: finalised on {threads:?}"
        );
        assert_eq!(
            run(op).unwrap().to_vec_blocking().unwrap(),
            [8; 64],
            "{what}"
        );
        own.when_finalised(&what, drop);
    }
}

/// How a call given an extreme value ended: a panic fails the test (`what` names the case).
fn never_panics<T>(what: &str, call: impl FnOnce() -> npu::Result<T>) -> npu::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        .unwrap_or_else(|_| panic!("{what}: panicked instead of returning a typed error"))
}

/// A call given an extreme value must be refused with a typed error: an invalid argument of
/// `api` itself (never of a call made on the caller's behalf), or the runtime's refusal
/// naming its ACL function.
fn refused<T>(what: &str, api: &str, call: impl FnOnce() -> npu::Result<T>) -> npu::Error {
    let Err(err) = never_panics(what, call) else {
        panic!("{what}: accepted");
    };
    match &err {
        npu::Error::InvalidArgument { .. } => assert_eq!(invalid(&err).0, api, "{what}: {err}"),
        npu::Error::Acl(_) => assert!(err.to_string().starts_with("acl"), "{what}: {err}"),
        other => panic!("{what}: not a refusal: {other:?}"),
    }
    err
}

/// Promise attacked: "bad input gives a typed error naming the API, never a panic", for the
/// constructors and controls the earlier rounds left at their extremes: device buffers of
/// every allocation policy and pinned buffers of every allocation configuration at 0, past
/// `isize::MAX` bytes and past the device or host; page-aligned buffers too large to round to
/// pages; registrations of every flag; streams and events of every flag bit and the extreme
/// priorities; device attributes and memory kinds the runtime does not know; pools and their
/// requests at `usize::MAX`; the simulator's controls at their extremes (an injected task
/// failure numbered past the last task a stream can count to, handles that are no
/// simulator's). Each is a typed
/// error (or works, where the value is legal), and the device serves a copy afterwards.
#[test]
fn every_constructor_and_control_at_its_extremes_is_typed_or_works() {
    use npu::device::{DeviceAttr, MemAttr};
    use npu::memory::{
        HostAllocConfig, HostRegistration, MallocPolicy, PageAlignedBuffer, RegisterFlags,
    };
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let policies = [
        MallocPolicy::HugeFirst,
        MallocPolicy::HugeOnly,
        MallocPolicy::NormalOnly,
        MallocPolicy::HugeFirstP2p,
        MallocPolicy::HugeOnlyP2p,
        MallocPolicy::NormalOnlyP2p,
    ];
    for policy in policies {
        let what = format!("{policy:?}");
        let api = "DeviceBuffer::with_policy";
        for len in [0, usize::MAX, isize::MAX as usize / 4 + 1, 1 << 40] {
            refused(&format!("{what} {len}"), api, || {
                DeviceBuffer::<u32>::with_policy(&d0, len, policy)
            });
        }
        let small = never_panics(&what, || DeviceBuffer::<u32>::with_policy(&d0, 16, policy));
        if let Ok(small) = small {
            assert_eq!(small.to_vec_blocking().unwrap(), [0; 16], "{what}");
        }
    }
    let configs = [
        HostAllocConfig::new(),
        HostAllocConfig::new().module_id(0),
        HostAllocConfig::new().module_id(u16::MAX),
        HostAllocConfig::new().device_va(true),
        HostAllocConfig::new()
            .module_id(HostAllocConfig::APP_MODULE)
            .device_va(true),
    ];
    for config in configs {
        let what = format!("{config:?}");
        let api = "PinnedBuffer::with_config";
        for len in [0, usize::MAX, isize::MAX as usize / 8 + 1, 1 << 40] {
            refused(&format!("{what} {len}"), api, || {
                PinnedBuffer::<u64>::with_config(&d0, len, &config)
            });
        }
        if let Ok(mut host) =
            never_panics(&what, || PinnedBuffer::<u64>::with_config(&d0, 8, &config))
        {
            host.copy_from_slice(&[u64::MAX; 8]);
            let s = stream(&d0, Strategy::EventPoll);
            let (host, device_copy) =
                run(s.copy_h2d(host, DeviceBuffer::<u64>::new(&d0, 8).unwrap())).unwrap();
            assert_eq!(device_copy.to_vec_blocking().unwrap(), &host[..], "{what}");
        }
    }
    for len in [
        0,
        usize::MAX,
        isize::MAX as usize,
        isize::MAX as usize - 4095,
    ] {
        let what = format!("PageAlignedBuffer {len}");
        refused(&what, "PageAlignedBuffer::new", || {
            PageAlignedBuffer::<u8>::new(len)
        });
    }
    for flags in [
        RegisterFlags::PINNED,
        RegisterFlags::MAPPED,
        RegisterFlags::PINNED | RegisterFlags::MAPPED,
    ] {
        let what = format!("{flags:?}");
        let pages = PageAlignedBuffer::<u8>::new(1).unwrap();
        let registered = never_panics(&what, || {
            HostRegistration::new(&d0, pages, flags).map_err(npu::Error::from)
        });
        if let Ok(registered) = registered {
            let s = stream(&d0, Strategy::EventPoll);
            let (registered, _) =
                run(s.copy_h2d(registered, DeviceBuffer::<u8>::new(&d0, 1).unwrap())).unwrap();
            run(registered.into_inner()).unwrap();
        }
    }
    for priority in [0, 1, u32::MAX / 2, u32::MAX] {
        let what = format!("priority {priority}");
        if let Ok(s) = never_panics(&what, || Stream::builder(&d0).priority(priority).build()) {
            a_memset_writes(&d0, &s, 1, &what);
        }
    }
    for bit in 0..32 {
        let flags = 1u32 << bit;
        let what = format!("stream flags {flags:#x}");
        if let Ok(s) = never_panics(&what, || Stream::builder(&d0).flags(flags).build()) {
            a_memset_writes(&d0, &s, 2, &what);
        }
        let what = format!("event flags {flags:#x}");
        if let Ok(event) = never_panics(&what, || Event::builder(&d0).flags(flags).build()) {
            let s = stream(&d0, Strategy::EventPoll);
            if event.record(&s).is_ok() {
                run(event.wait()).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
    for what in ["stream flags u32::MAX", "event flags u32::MAX"] {
        let _ = never_panics(what, || Stream::builder(&d0).flags(u32::MAX).build());
        let _ = never_panics(what, || Event::builder(&d0).flags(u32::MAX).build());
    }
    for raw in [u32::MAX, u32::MAX / 2, 1 << 16] {
        let _ = never_panics("attribute", || device.attribute(DeviceAttr::Raw(raw as _)));
        let _ = never_panics("memory info", || device.memory_info(MemAttr::Raw(raw as _)));
    }
    for id in [u32::MAX, i32::MAX as u32, i32::MAX as u32 + 1, 64] {
        let what = format!("Device::open({id})");
        let _ = never_panics(&what, || Device::open(id)).expect_err(&what);
    }

    let s = stream(&d0, Strategy::EventPoll);
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, None);
        refused(&what, "DevicePool::alloc", || {
            run(pool.alloc::<u64>(&s, usize::MAX))
        });
        refused(&what, "DevicePool::try_alloc", || {
            pool.try_alloc::<u64>(&s, usize::MAX)
        });
        refused(&what, "DevicePool::reserve", || {
            run(pool.reserve(&s, usize::MAX, usize::MAX))
        });
        refused(&what, "DevicePool::reserve", || {
            run(pool.reserve(&s, 2, usize::MAX / 2))
        });
        let reserved = never_panics(&what, || run(pool.reserve(&s, 0, 4096)));
        assert_eq!(
            reserved.unwrap_or(0),
            0,
            "{what}: nothing reserved for no blocks"
        );
        assert_eq!(
            pool.trim_to(usize::MAX).unwrap(),
            0,
            "{what}: nothing to trim"
        );
        let block = run(s.memset(run(pool.alloc::<u8>(&s, 64)).unwrap(), 4)).unwrap();
        let (_, read) = run(s.copy_d2h(block, PinnedBuffer::<u8>::new(&d0, 64).unwrap())).unwrap();
        assert_eq!(read[..], [4; 64], "{what}");
    }
    let pinned = PinnedPool::new(&d0);
    refused("pinned", "PinnedPool::alloc", || {
        run(pinned.alloc::<u64>(usize::MAX))
    });
    refused("pinned", "PinnedPool::try_alloc", || {
        pinned.try_alloc::<u64>(usize::MAX)
    });
    refused("pinned", "PinnedPool::reserve", || {
        pinned.reserve(usize::MAX, usize::MAX)
    });
    refused("pinned", "PinnedPool::reserve", || {
        pinned.reserve(2, usize::MAX / 2)
    });
    assert_eq!(pinned.trim(), 0, "nothing pinned was kept");

    // `s` has run tasks: its next task number plus `u64::MAX` cannot be counted to.
    let past = sim::fail_task(&s, u64::MAX, npu::error::AclCode(507015))
        .expect_err("a task number past the last one is refused");
    assert!(past.to_string().contains("nth"), "{past}");
    for nth in [0, 1 << 40, u64::MAX] {
        for code in [i32::MIN, -1, 0, i32::MAX] {
            let what = format!("fail_task({nth}, {code})");
            let _ = never_panics(&what, || sim::fail_task(&s, nth, npu::error::AclCode(code)));
        }
    }
    for name in ["", "\0", "npu_attack_session32_fill\0tail"] {
        for duration in [Duration::ZERO, Duration::MAX] {
            let what = format!("set_kernel_duration({name:?}, {duration:?})");
            let _ = never_panics(&what, || sim::set_kernel_duration(&device, name, duration));
        }
    }
    sim::set_timing(&device, None).unwrap();
    let dangling = std::ptr::without_provenance_mut(0x10);
    for (ptr, len) in [(dangling, 1), (dangling, usize::MAX)] {
        let what = format!("inject_mem_uce({ptr:p}, {len})");
        sim::raw_control::inject_mem_uce(ptr, len).expect_err(&what);
        let what = format!("raw fail_task({ptr:p})");
        sim::raw_control::fail_task(ptr, 1, 507015).expect_err(&what);
    }
    let block = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
    let what = "inject_mem_uce past the block";
    sim::raw_control::inject_mem_uce(block.as_raw(), usize::MAX).expect_err(what);
    let s = stream(&d0, Strategy::EventPoll);
    a_memset_writes(&d0, &s, 5, "after every extreme");
}

/// The invariants of a pool's counters in any snapshot (`what` names the case): the bytes it
/// holds are exactly those handed out, awaiting their operations and cached, within its
/// capacity, and so is the most it ever held.
fn counters_add_up(stats: &npu::memory::PoolStats, capacity: usize, what: &str) {
    assert_eq!(
        stats.reserved,
        stats.allocated + stats.awaiting_bytes + stats.cached,
        "{what}: {stats:?}"
    );
    assert!(stats.peak_reserved <= capacity, "{what}: {stats:?}");
}

/// Promise attacked: the pools' accounting and capacity, and "nothing leaks", with reserves
/// racing trims (left unattacked by the thirty-first session): on a `DevicePool` of each
/// backend and a `PinnedPool`, each with a capacity of eight 1 MiB blocks, one thread
/// reserves four blocks at a time, another trims the pool (wholly or down to a random size),
/// the two setting off together each round, and a third allocates a block, writes it on the device (its future dropped every other
/// time) and drops it, 200 rounds each. Every reserve and allocation either succeeds or fails
/// with a typed error, every snapshot of the counters adds up within the capacity, and once
/// the threads are done and the pool trimmed and dropped, every byte is given back.
#[test]
fn reserves_racing_trims_and_allocations_keep_the_counters_and_give_every_byte_back() {
    const ROUNDS: usize = 200;
    const BLOCK: usize = 1 << 20;
    const CAPACITY: usize = 8 * BLOCK;
    let (_guard, d0) = devices();
    let device = Device::open(0).unwrap();
    let bytes_before = device_bytes(&device);
    let pinned_before = sim::host_stats().unwrap().pinned_bytes;
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?} {strategy:?}");
            let pool = device_pool(&d0, backend, Some(CAPACITY));
            let turn = Turns::new(2);
            watchdog(&what, || {
                std::thread::scope(|threads| {
                    let reserving = threads.spawn(|| {
                        let _breaker = turn.breaker();
                        let s = stream(&d0, strategy);
                        let mut reserved = 0;
                        for round in 0..ROUNDS {
                            turn.wait();
                            match run(pool.reserve(&s, 4, BLOCK)) {
                                Ok(bytes) => {
                                    assert!(bytes <= 4 * BLOCK, "{what}: {bytes}");
                                    reserved += bytes;
                                }
                                Err(err) => assert!(
                                    err.is_out_of_memory() || err.to_string().contains("capacity"),
                                    "{what} round {round}: {err}"
                                ),
                            }
                            counters_add_up(&pool.stats().cache, CAPACITY, &what);
                        }
                        reserved
                    });
                    let trimming = threads.spawn(|| {
                        let _breaker = turn.breaker();
                        let mut rng = Rng(0x7e1a_5e32);
                        let mut trimmed = 0;
                        for _ in 0..ROUNDS {
                            turn.wait();
                            let keep = rng.below(CAPACITY + BLOCK);
                            let freed = match rng.below(2) {
                                0 => pool.trim(),
                                _ => pool.trim_to(keep),
                            };
                            let freed = freed.unwrap_or_else(|e| panic!("{what}: {e}"));
                            assert!(freed <= CAPACITY, "{what}: {freed}");
                            trimmed += freed;
                            counters_add_up(&pool.stats().cache, CAPACITY, &what);
                        }
                        trimmed
                    });
                    let s = stream(&d0, strategy);
                    for round in 0..ROUNDS {
                        match run(pool.alloc::<u8>(&s, BLOCK)) {
                            Ok(block) => {
                                let write = s.memset(block, round as u8);
                                if round % 2 == 0 {
                                    run(write).unwrap_or_else(|e| panic!("{what}: {}", e.error));
                                }
                            }
                            Err(err) => assert!(err.is_out_of_memory(), "{what}: {err}"),
                        }
                        counters_add_up(&pool.stats().cache, CAPACITY, &what);
                    }
                    run(s.synchronize()).unwrap();
                    let reserved = reserving.join().unwrap();
                    let trimmed = trimming.join().unwrap();
                    // Not required: which of a round's reserve and trim goes first is the race's.
                    println!("{what}: reserved {reserved} bytes, trimmed {trimmed}");
                    assert!(reserved > 0, "{what}: no reserve succeeded");
                })
            });
            until_released(&what, || {
                pool.trim().unwrap();
                let stats = pool.stats().cache;
                stats.reserved == 0 && stats.allocated == 0
            });
            drop(pool);
            until_released(&what, || device_bytes(&device) <= bytes_before);
        }
    }
    let pool = PinnedPool::builder(&d0).capacity(CAPACITY).build().unwrap();
    let turn = Turns::new(2);
    watchdog("pinned", || {
        std::thread::scope(|threads| {
            let reserving = threads.spawn(|| {
                let _breaker = turn.breaker();
                for round in 0..ROUNDS {
                    turn.wait();
                    if let Err(err) = pool.reserve(4, BLOCK) {
                        assert!(
                            err.is_out_of_memory() || err.to_string().contains("capacity"),
                            "pinned round {round}: {err}"
                        );
                    }
                    counters_add_up(&pool.stats(), CAPACITY, "pinned");
                }
            });
            let trimming = threads.spawn(|| {
                let _breaker = turn.breaker();
                for _ in 0..ROUNDS {
                    turn.wait();
                    assert!(pool.trim() <= CAPACITY);
                    counters_add_up(&pool.stats(), CAPACITY, "pinned");
                }
            });
            let s = stream(&d0, Strategy::EventPoll);
            for round in 0..ROUNDS {
                match run(pool.alloc::<u8>(BLOCK)) {
                    Ok(block) => {
                        let read = s.copy_h2d(block, DeviceBuffer::<u8>::new(&d0, BLOCK).unwrap());
                        if round % 2 == 0 {
                            run(read).unwrap();
                        }
                    }
                    Err(err) => assert!(err.is_out_of_memory(), "pinned: {err}"),
                }
                counters_add_up(&pool.stats(), CAPACITY, "pinned");
            }
            run(s.synchronize()).unwrap();
            reserving.join().unwrap();
            trimming.join().unwrap();
        })
    });
    until_released("pinned", || {
        pool.trim();
        pool.stats().reserved == 0
    });
    drop(pool);
    until_released("pinned bytes", || {
        sim::host_stats().unwrap().pinned_bytes <= pinned_before
    });
}

/// Promise attacked: "nothing leaks" and rule 5 with the teardowns a waker now hands to
/// `npu-teardown`: in each of 40 rounds, a waker woken on the thread completing an in-process
/// memset drops the last handles of an explicit context of device 1 (with a stream of every
/// strategy that ran work, a device pool with a cached block, a pinned pool, an event and a
/// value word), while the test's thread makes the next round's context at once. Every round's
/// memset completes, the completing thread goes on, and once the rounds are done every
/// stream, event and allocation of both devices is back to where it started, and so is device
/// 1's count of contexts: every explicit context the rounds made was destroyed. Every strategy.
#[test]
fn explicit_contexts_a_waker_drops_on_the_completing_thread_are_all_released() {
    const ROUNDS: usize = 40;
    let (_guard, d0) = devices();
    let d1 = Device::open(1).unwrap().primary_context().clone();
    let device = Device::open(0).unwrap();
    let baseline = (live_objects(&d0), live_objects(&d1));
    let [.., contexts_before] = baseline.1;
    for strategy in STRATEGIES {
        let local = stream(&d0, strategy);
        for round in 0..ROUNDS {
            let what = format!("{strategy:?} round {round}");
            let ctx = d1.device().create_context().unwrap();
            // The count the final check relies on sees the round's context.
            let contexts = sim::device_stats(&d1.device()).unwrap().live_contexts;
            assert!(
                contexts > contexts_before,
                "{what}: {contexts} live contexts"
            );
            let streams: Vec<Stream> = STRATEGIES.iter().map(|&k| stream(&ctx, k)).collect();
            for s in &streams {
                run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1)).unwrap();
            }
            let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, None);
            drop(run(pool.alloc::<u8>(&streams[0], 4096)).unwrap());
            let pinned = PinnedPool::new(&ctx);
            drop(run(pinned.alloc::<u8>(4096)).unwrap());
            let event = Event::new(&ctx).unwrap();
            event.record(&streams[1]).unwrap();
            let word = npu::stream::ValueWord::new(&ctx, 3).unwrap();
            let waker = Arc::new(DropsWhenWoken(std::sync::Mutex::new(Some(Box::new((
                streams, pool, pinned, event, word, ctx,
            ))))));

            let held = sim::hold(&device).unwrap();
            let mut op = local.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), round as u8);
            let woken = std::task::Waker::from(waker.clone());
            let polled =
                std::pin::Pin::new(&mut op).poll(&mut std::task::Context::from_waker(&woken));
            assert!(polled.is_pending(), "{what}: held");
            drop(woken);
            held.release().unwrap();
            // Waited for through another waiter, so that the waker polled above stays the
            // operation's own until the completing thread wakes it.
            run(op.completion().wait()).unwrap_or_else(|e| panic!("{what}: {e}"));
            until_released(&what, || waker.0.lock().unwrap().is_none());
            let written = run(op).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            assert_eq!(
                written.to_vec_blocking().unwrap(),
                [round as u8; 64],
                "{what}"
            );
        }
    }
    until_released("every context's objects", || {
        within(live_objects(&d0), baseline.0) && within(live_objects(&d1), baseline.1)
    });
}
