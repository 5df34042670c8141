//! Attacks of the twenty-ninth session, through the `npu` facade, on what the last session
//! changed: the runtime-pool `DevicePool`'s out-of-memory drain (awaited on the reactor,
//! published under one lock) and its one-trim-at-a-time rule, memory errors against a held
//! repair thread, the device-wide bound on idle completion events, ACL's finalisation off the
//! reaper, and the refusal of runtime libraries that are not regular files. Each test names
//! the promise it attacks.
//!
//! The simulator of this process has four devices of 64 MiB (installed by the first test to
//! take the lock), so that a pool can fill a device; device 3 is lost by the test that loses a
//! device. Every test takes the device lock; every wait is bounded (`run`, `until`,
//! `until_released`, `watchdog`), so a hang fails its test.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, PooledDeviceBuffer, Split};
use npu::prelude::*;
use npu::runtime::BackendChoice;
use npu::stream::Strategy;
use npu::{Error, Stream, sim};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// A request the filled device cannot serve before the pool's cache is freed.
const BIG: usize = 24 << 20;

/// The device lock and device 0's primary context, on this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(4, DEVICE_MEMORY)
}

/// Polls `request` once and requires it to wait: it failed its first attempt out of memory
/// while the memory it needs is on its way back to the runtime, behind the held device.
fn waits_for_the_memory<T>(
    request: std::pin::Pin<&mut impl Future<Output = npu::Result<T>>>,
    what: &str,
) {
    match polled_once(request) {
        std::task::Poll::Pending => {}
        std::task::Poll::Ready(Ok(_)) => panic!("{what}: served while the device was held"),
        std::task::Poll::Ready(Err(err)) => {
            panic!("{what}: failed at once instead of waiting for the memory given back: {err}")
        }
    }
}

/// "When the device is out of memory, the pool frees its cached blocks and tries once more",
/// and a request never fails while memory the pool gave back is on its way: a `trim` (which
/// queues the cache's frees on the release stream and reports the bytes given back) followed
/// by a request for that memory, on a device the pool had filled and that is held, so that
/// the frees have not run. The request must wait for them and be served once the device runs.
/// With a fresh pool, and with a pool whose earlier drain has completed (a request must not
/// take that drain for one covering the trim's frees). Every strategy of the request's stream.
#[test]
fn a_request_out_of_memory_waits_for_the_memory_a_trim_gave_back() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        for drained_before in [false, true] {
            let what = format!("{strategy:?}, drained before: {drained_before}");
            let s = stream(&ctx, strategy);
            let pool = pool_holding_the_device(&ctx, &s);
            if drained_before {
                // Served through a drain of the whole cache; then the device filled again.
                let mut blocks = vec![run(pool.alloc::<u8>(&s, BIG)).unwrap()];
                blocks.extend(fill_the_device(&pool, &s));
                drop(blocks);
            }
            let hold = sim::hold(&ctx.device()).unwrap();
            let trimmed = pool.trim().unwrap();
            assert!(trimmed >= 48 << 20, "{what}: trimmed {trimmed}");
            let block = {
                let mut request = std::pin::pin!(pool.alloc::<u8>(&s, BIG));
                waits_for_the_memory(request.as_mut(), &what);
                hold.release().unwrap();
                run(request).unwrap_or_else(|e| panic!("{what}: {e}"))
            };
            assert_eq!(pool.stats().cache.allocated, BIG, "{what}");
            drop((block, pool, s));
            until_released(&format!("{what}: everything"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}

/// The wait for trimmed memory under a paused Tokio clock: the synchronisation a request now
/// submits itself for frees no drain covers is a device wait like any other, so the clock
/// stands still while the held device keeps the request waiting (a timer of an hour does not
/// fire), and the request is served once the device runs. Every strategy.
#[test]
fn a_request_waiting_for_trimmed_memory_keeps_a_paused_clock_still() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let pool = pool_holding_the_device(&ctx, &s);
        let hold = sim::hold(&ctx.device()).unwrap();
        pool.trim().unwrap();
        let block = paused_runtime().block_on(async {
            let start = tokio::time::Instant::now();
            let mut request = std::pin::pin!(pool.alloc::<u8>(&s, BIG));
            waits_for_the_memory(request.as_mut(), &what);
            hold.release().unwrap();
            let hour = std::time::Duration::from_secs(3600);
            let served = tokio::time::timeout(hour, request)
                .await
                .unwrap_or_else(|_| panic!("{what}: the hour passed"));
            assert_eq!(start.elapsed(), std::time::Duration::ZERO, "{what}");
            served.unwrap_or_else(|e| panic!("{what}: {e}"))
        });
        drop((block, pool, s));
        until_released(&format!("{what}: everything"), || {
            within(live_memory(&ctx), baseline)
        });
    }
}

/// The same promise for the pool's own evictions: a pool bounded at 48 MiB, its cache full of
/// 4 MiB blocks, asked for a 48 MiB block (`alloc`, or `reserve` of one block) on the held
/// device. Making room evicts every cached block (their frees queued behind the hold), then
/// the allocation fails out of memory with nothing left in the cache: the request must wait
/// for the frees of its own eviction, not fail. Every strategy.
#[test]
fn a_bounded_pool_that_evicts_its_cache_for_a_request_waits_for_that_memory() {
    const CAPACITY: usize = 48 << 20;
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        for reserving in [false, true] {
            let what = format!("{strategy:?}, reserving: {reserving}");
            let s = stream(&ctx, strategy);
            let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(CAPACITY));
            let blocks: Vec<_> = (0..CAPACITY / (4 << 20))
                .map(|_| run(pool.alloc::<u8>(&s, 4 << 20)).unwrap())
                .collect();
            drop(blocks);
            assert_eq!(pool.stats().cache.cached, CAPACITY, "{what}");
            let hold = sim::hold(&ctx.device()).unwrap();
            let evicted = || {
                let cached = pool.stats().cache.cached;
                assert_eq!(cached, 0, "{what}: the cache was evicted");
            };
            let block = if reserving {
                let mut request = std::pin::pin!(pool.reserve(&s, 1, CAPACITY));
                waits_for_the_memory(request.as_mut(), &what);
                evicted();
                hold.release().unwrap();
                let reserved = run(request).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(reserved, CAPACITY, "{what}");
                None
            } else {
                let mut request = std::pin::pin!(pool.alloc::<u8>(&s, CAPACITY));
                waits_for_the_memory(request.as_mut(), &what);
                evicted();
                hold.release().unwrap();
                Some(run(request).unwrap_or_else(|e| panic!("{what}: {e}")))
            };
            let stats = pool.stats().cache;
            let expected = match reserving {
                true => (0, CAPACITY),
                false => (CAPACITY, 0),
            };
            assert_eq!((stats.allocated, stats.cached), expected, "{what}");
            drop((block, pool, s));
            until_released(&format!("{what}: everything"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}

/// The drain is the pool's: two pools sharing one filled device, each with its cache holding
/// about half of it, each asked for 24 MiB on the held device (every strategy among their
/// streams), a second request of the first pool waiting on that pool's drain and dropped
/// there, and a thread trimming both pools once the device runs (racing the retries' trims).
/// Each request frees its own pool's cache and waits for that pool's release stream; both
/// are served once the device runs, and everything goes back.
#[test]
fn requests_of_two_pools_on_one_device_each_wait_for_their_own_pools_drain() {
    let (_guard, ctx) = devices();
    let baseline = live_memory(&ctx);
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let (a, b) = (
        device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
        device_pool(&ctx, DevicePoolBackend::RuntimePool, None),
    );
    let first: Vec<_> = (0..8)
        .map(|_| run(a.alloc::<u8>(&streams[0], 4 << 20)).unwrap())
        .collect();
    let second = fill_the_device(&b, &streams[1]);
    assert!(second.len() >= 6, "{} blocks", second.len());
    drop((first, second));
    let hold = sim::hold(&ctx.device()).unwrap();
    let mut of_a = Box::pin(a.alloc::<u8>(&streams[0], BIG));
    let mut of_b = Box::pin(b.alloc::<u8>(&streams[1], BIG));
    waits_for_the_memory(of_a.as_mut(), "the first pool's request");
    waits_for_the_memory(of_b.as_mut(), "the second pool's request");
    let mut dropped = Box::pin(a.alloc::<u8>(&streams[2], 5 << 20));
    waits_for_the_memory(dropped.as_mut(), "the first pool's second request");
    drop(dropped);
    // Racing the retries' trims of the runtime pools once the device runs.
    let trimming = Arc::new(AtomicBool::new(true));
    let trimmer = {
        let (a, b, trimming) = (a.clone(), b.clone(), trimming.clone());
        std::thread::spawn(move || {
            while trimming.load(Ordering::Acquire) {
                a.trim().unwrap();
                b.trim().unwrap();
                std::thread::yield_now();
            }
        })
    };
    hold.release().unwrap();
    let (of_a, of_b) = run(async { (of_a.await, of_b.await) });
    trimming.store(false, Ordering::Release);
    watchdog("the trimming thread", || trimmer.join().unwrap());
    let (of_a, of_b) = (of_a.unwrap(), of_b.unwrap());
    assert_eq!(a.stats().cache.allocated, BIG);
    assert_eq!(b.stats().cache.allocated, BIG);
    drop((of_a, of_b));
    for pool in [&a, &b] {
        let stats = pool.stats().cache;
        assert_eq!((stats.allocated, stats.waiters), (0, 0), "{stats:?}");
    }
    drop((a, b, streams));
    until_released("everything", || within(live_memory(&ctx), baseline));
}

/// "Every operation resolves exactly once; bad input gets a typed error": device 3 lost while
/// three requests of one pool (a stream of each strategy) wait for its drain on the held
/// device, a thread trimming the pool meanwhile. Each request ends with an error that says the
/// device is lost (its retry is refused); the pool then refuses new requests as lost, and
/// dropping the pool and streams returns.
#[test]
fn a_device_lost_while_requests_wait_for_a_drain_ends_each_with_a_typed_error() {
    let (_guard, _ctx) = devices();
    let device = Device::open(3).unwrap();
    let ctx = device.primary_context().clone();
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let pool = pool_holding_the_device(&ctx, &streams[0]);
    let hold = sim::hold(&device).unwrap();
    let mut requests: Vec<_> = streams
        .iter()
        .map(|s| Box::pin(pool.alloc::<u8>(s, BIG)))
        .collect();
    for (request, strategy) in requests.iter_mut().zip(STRATEGIES) {
        waits_for_the_memory(request.as_mut(), &format!("{strategy:?}"));
    }
    let trimmer = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            for _ in 0..100 {
                let _ = pool.trim();
            }
        })
    };
    sim::lose(&device).unwrap();
    drop(hold);
    for (request, strategy) in requests.into_iter().zip(STRATEGIES) {
        let err = run(request).expect_err("no request is served by a lost device");
        assert!(err.is_device_lost(), "{strategy:?}: {err}");
    }
    watchdog("the trimming thread", || trimmer.join().unwrap());
    let err = run(pool.alloc::<u8>(&streams[0], 4096)).unwrap_err();
    assert!(err.is_device_lost(), "{err}");
    assert_eq!(pool.stats().cache.allocated, 0);
    watchdog("dropping the pool and streams", || drop((pool, streams)));
}

/// "Nothing leaks" for the device's completion events, with the pools of its contexts made
/// and dropped while others return bursts: four threads, each with a runtime of its own of
/// the in-process library (one device, one bound between them), make eight contexts of
/// device 0 one after another, each with a stream (strategies in turn) that awaits a burst of
/// 300 synchronisations, and drop every other one at once; the contexts kept, all idle, keep
/// at most the device's 1,024 idle events, `Event::new` still works, and once everything is
/// dropped no event is left.
#[test]
fn contexts_made_and_dropped_while_others_return_bursts_keep_the_device_bound() {
    const BOUND: u64 = 1024;
    let (_guard, ctx) = devices();
    let device = ctx.device();
    let baseline = sim::device_stats(&device).unwrap().live_events;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let runtime = npu::Runtime::builder()
                    .backend(BackendChoice::Sim)
                    .build()
                    .unwrap();
                let mut kept = Vec::new();
                for round in 0..8 {
                    let ctx = runtime.device(0).unwrap().create_context().unwrap();
                    let s = stream(&ctx, STRATEGIES[(t + round) % STRATEGIES.len()]);
                    let burst: Vec<_> = (0..300).map(|_| s.synchronize()).collect();
                    run(futures::future::try_join_all(burst)).unwrap();
                    if round % 2 == 0 {
                        kept.push((s, ctx));
                    }
                }
                kept
            })
        })
        .collect();
    let kept: Vec<_> = threads
        .into_iter()
        .flat_map(|t| watchdog("a thread of bursts", || t.join().unwrap()))
        .collect();
    sim::flush_releases();
    let live = sim::device_stats(&device).unwrap().live_events;
    assert!(
        live <= baseline + BOUND,
        "{} events live with nothing in flight (bound {BOUND})",
        live - baseline
    );
    let event = Event::new(&ctx).unwrap();
    let s = Stream::new(&ctx).unwrap();
    event.record(&s).unwrap();
    run(event.wait()).unwrap();
    drop((event, s, kept));
    until_released("every event", || {
        sim::device_stats(&device).unwrap().live_events <= baseline
    });
}

/// ACL's finalisation off the reaper and a runtime built while another of the same library is
/// torn down: a runtime of its own (npu-sim's cdylib) whose last objects go inside a task of a
/// multi-thread Tokio runtime (its memset awaited there, another memset's future dropped in
/// flight so that its buffer goes on the reaper), while another thread builds a second runtime
/// of the library and runs a round trip on it. Whichever of the two drops and builds comes
/// first, the second runtime serves, nothing waits for ever, and once both are gone ACL is
/// finalised. Every strategy, four rounds each.
#[test]
fn a_runtime_built_while_another_of_its_library_is_torn_down_serves() {
    let (_guard, _ctx) = devices();
    let own = OwnRuntime::new("attack29-torn-down");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for strategy in STRATEGIES {
        for round in 0..4 {
            let what = format!("{strategy:?}, round {round}");
            let first = own.build();
            let ctx = first.device(0).unwrap().primary_context().clone();
            let s = stream(&ctx, strategy);
            drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 1));
            let buffer = DeviceBuffer::<u8>::new(&ctx, 4096).unwrap();
            let torn_down = tokio.spawn(async move {
                let buffer = s.memset(buffer, 2).await.unwrap();
                assert_eq!(buffer.to_vec_blocking().unwrap(), [2; 4096]);
                drop((buffer, s, ctx, first));
            });
            let second = std::thread::spawn(move || {
                let runtime = dlopened_simulator();
                let ctx = runtime.device(0).unwrap().primary_context().clone();
                let s = stream(&ctx, strategy);
                let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 512).unwrap(), 5));
                buffer.unwrap().to_vec_blocking().unwrap()
            });
            let read = watchdog(&what, || second.join().unwrap());
            assert_eq!(read, [5; 512], "{what}");
            run(torn_down).unwrap();
        }
    }
    drop(tokio);
    own.when_finalised("both runtimes dropped", drop);
}

/// Bad input is a typed error, never a hang, for library paths the FIFO check must see
/// through: a symlink to a FIFO, a symlink to a directory, a directory itself, an empty file,
/// a dangling symlink and a loop of symlinks, as the library of a runtime; and a symlink to a
/// FIFO as its `acl_config`. Each is refused by `RuntimeBuilder::build` with the path listed.
#[test]
fn library_paths_through_symlinks_fifos_and_empty_files_are_typed_errors() {
    let (_guard, _ctx) = devices();
    let dir = std::env::temp_dir().join(format!("npu-attack29-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the file.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    let link = |name: &str, to: &std::path::Path| {
        let at = dir.join(name);
        std::os::unix::fs::symlink(to, &at).unwrap();
        at
    };
    let to_fifo = link("to-fifo.so", &fifo);
    let to_dir = link("to-dir.so", &dir);
    let dangling = link("dangling.so", &dir.join("nothing-here"));
    let looping = link("loop-a.so", &dir.join("loop-b.so"));
    link("loop-b.so", &looping);
    let empty = dir.join("empty.so");
    std::fs::File::create(&empty).unwrap();
    for (path, reason) in [
        (&to_fifo, "not a regular file"),
        (&to_dir, "not a regular file"),
        (&dir, "not a regular file"),
        (&empty, ""),
        (&dangling, "no such file"),
        (&looping, "no such file"),
    ] {
        // SAFETY: none of these is a library: each is refused before anything calls into it.
        let builder = unsafe { npu::Runtime::builder().library(path) };
        let err = watchdog(&path.display().to_string(), || builder.build()).unwrap_err();
        assert!(matches!(err, Error::Load(_)), "{}: {err}", path.display());
        let text = err.to_string();
        assert!(text.contains(&*path.to_string_lossy()), "{text}");
        assert!(text.contains(reason), "{text}");
    }
    let own = OwnRuntime::new("attack29-config");
    let err = watchdog("a FIFO behind a symlink as acl_config", || {
        own.builder().acl_config(&to_fifo).build()
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("RuntimeBuilder::build: invalid argument `acl_config`"),
        "{text}"
    );
    assert!(text.contains("not a regular file"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Where a pool's repair thread stops when armed: at the log of a repair, after the block's
/// errors were repaired and before it is cached (`settle` logs first).
#[derive(Default)]
struct RepairGate {
    armed: bool,
    held: bool,
}

static REPAIR_GATE: Mutex<RepairGate> = Mutex::new(RepairGate {
    armed: false,
    held: false,
});
static REPAIR_GATE_CHANGED: Condvar = Condvar::new();

/// A tracing layer that holds the repair thread at [`RepairGate`] while it is armed: the
/// test's hold on a thread that makes only immediate runtime calls, which the device's hold
/// cannot stop.
struct HoldsRepairs;

impl<S: tracing::Subscriber> Layer<S> for HoldsRepairs {
    fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
        if std::thread::current().name() != Some("npu-pool-repair") {
            return;
        }
        let mut repaired = false;
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                if field.name() == "message" {
                    repaired |= format!("{value:?}").contains("were repaired");
                }
            },
        );
        let mut gate = REPAIR_GATE.lock().unwrap_or_else(|e| e.into_inner());
        if !repaired || !gate.armed {
            return;
        }
        gate.held = true;
        REPAIR_GATE_CHANGED.notify_all();
        while gate.armed {
            gate = REPAIR_GATE_CHANGED
                .wait(gate)
                .unwrap_or_else(|e| e.into_inner());
        }
        gate.held = false;
    }
}

/// Arms the gate (installing the layer as the process's subscriber the first time).
fn arm_the_repair_gate() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(HoldsRepairs);
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    REPAIR_GATE.lock().unwrap().armed = true;
}

/// Opens the gate: the held repair thread goes on.
fn open_the_repair_gate() {
    REPAIR_GATE.lock().unwrap().armed = false;
    REPAIR_GATE_CHANGED.notify_all();
}

/// Memory errors against the repair thread: a bounded pool of two 4 KiB blocks, one with an
/// uncorrectable error (507053) whose failed memset's block is split, a half shared through
/// an `Arc`, and every part dropped, so that its last part sends it for repair; the repair
/// thread held once it has repaired the block and before it caches it. Meanwhile the other
/// block's memset fails with an HBM ECC error (507054) and the block is quarantined at once,
/// a request is served in the room the quarantine freed, a second request waits for room,
/// and another thread trims the pool. Then either the pool is kept (the waiter must be served
/// with the repaired block, whose memset now works) or everything is dropped under the held
/// repair (the waiter cancelled, the pool, its blocks and the stream), and once the repair
/// goes on the pool's last holder is the repair thread: no error range and no allocation may
/// be left. Both backends, every strategy.
#[test]
fn a_pool_kept_or_dropped_while_its_repair_thread_settles_a_block_loses_nothing() {
    const BYTES: usize = 4096;
    let (_guard, ctx) = devices();
    let device = ctx.device();
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            for dropped in [false, true] {
                let what = format!("{backend:?}, {strategy:?}, pool dropped: {dropped}");
                let s = stream(&ctx, strategy);
                sim::flush_releases();
                let baseline = sim::device_stats(&device).unwrap().live_allocations;
                let pool = device_pool(&ctx, backend, Some(2 * BYTES));
                let (repairable, ecc) = run(async {
                    let a = pool.alloc::<u8>(&s, BYTES).await.unwrap();
                    (a, pool.alloc::<u8>(&s, BYTES).await.unwrap())
                });
                let bad = repairable.as_raw();
                inject(&repairable, 64, 64);
                let repairable =
                    fails_with_memory_error(&s, repairable, AclCode::DEVICE_MEM_ERROR, &what);
                let (left, right) = repairable.into_halves(BYTES / 2).unwrap();
                let shared: Arc<Split<PooledDeviceBuffer<u8>>> = Arc::new(left);
                arm_the_repair_gate();
                let elsewhere = {
                    let shared = shared.clone();
                    std::thread::spawn(move || drop(shared))
                };
                drop((shared, right));
                watchdog(&what, || elsewhere.join().unwrap());
                until(&what, || REPAIR_GATE.lock().unwrap().held);
                sim::fail_task(&s, 1, AclCode::HBM_MULTI_BIT_ECC_ERROR).unwrap();
                let ecc = fails_with_memory_error(&s, ecc, AclCode::HBM_MULTI_BIT_ECC_ERROR, &what);
                drop(ecc);
                let stats = pool.stats().cache;
                assert_eq!(
                    (stats.quarantined, stats.awaiting_blocks, stats.repaired),
                    (1, 1, 0),
                    "{what}: quarantined at once while the repair is held: {stats:?}"
                );
                let served = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
                assert_ne!(served.as_raw(), bad, "{what}");
                let mut waiting = Box::pin(pool.alloc::<u8>(&s, BYTES));
                assert!(
                    polled_once(waiting.as_mut()).is_pending(),
                    "{what}: no room"
                );
                let trimmer = {
                    let pool = pool.clone();
                    std::thread::spawn(move || {
                        for _ in 0..50 {
                            pool.trim().unwrap();
                        }
                    })
                };
                watchdog(&what, || trimmer.join().unwrap());
                if dropped {
                    drop(waiting);
                    drop((served, pool, s));
                    open_the_repair_gate();
                    until_released(&what, || {
                        let now = sim::device_stats(&device).unwrap().live_allocations;
                        now <= baseline && uce_ranges(&ctx).is_empty()
                    });
                    continue;
                }
                open_the_repair_gate();
                let again = run(waiting).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    again.as_raw(),
                    bad,
                    "{what}: the repaired block serves the waiter"
                );
                let again =
                    run(s.memset(again, 9)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
                let bytes =
                    run(s.download(again)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
                assert!(bytes.iter().all(|&b| b == 9), "{what}");
                let stats = pool.stats().cache;
                assert_eq!(
                    (stats.repaired, stats.quarantined),
                    (1, 1),
                    "{what}: {stats:?}"
                );
                drop((served, pool, s));
                until_released(&what, || {
                    let now = sim::device_stats(&device).unwrap().live_allocations;
                    now <= baseline && uce_ranges(&ctx).is_empty()
                });
            }
        }
    }
}

/// Whether a thread of this process named `name` is asleep (`/proc`'s state `S`).
fn a_thread_sleeps(name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        let named = std::fs::read_to_string(task.path().join("comm"))
            .is_ok_and(|comm| comm.trim_end() == name);
        // The state follows the parenthesised name in `stat`.
        let state = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| Some(stat.get(stat.rfind(')')? + 2..)?.starts_with('S')));
        named && state == Some(true)
    })
}

/// "Whether a second runtime built while the first is tearing down works", with the teardown
/// held: a runtime of its own whose last object goes with a deferred release (a memset's
/// buffer, its future dropped), so that the context's reset and ACL's finalisation run on
/// `npu-teardown` (or, if the memset ran before the handles went, on the thread dropping
/// them), held there inside ACL's finalisation (a finalize callback standing in for
/// CANN's wait of up to 2 s). Meanwhile the in-process runtime serves, and another thread
/// builds a runtime of the same library, which waits (it is let go once that thread sleeps);
/// once the finalisation returns, that runtime is a fresh initialisation that serves a round
/// trip, and once it is dropped ACL is finalised again. Every strategy.
#[test]
fn a_runtime_built_while_its_library_is_being_finalised_waits_and_then_serves() {
    let (_guard, ctx) = devices();
    let own = OwnRuntime::new("attack29-finalising");
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let runtime = own.build();
        hold_finalisation(&runtime);
        let theirs = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&theirs, strategy);
        drop(s.memset(DeviceBuffer::<u8>::new(&theirs, 4096).unwrap(), 3));
        // On a thread of its own: if the memset has run already, the last drop is this one,
        // and the finalisation it makes here waits for the test.
        let dropping = std::thread::spawn(move || drop((s, theirs, runtime)));
        until_finalising(&what, |state| !state.threads.is_empty());
        let ours = stream(&ctx, strategy).memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4);
        let ours = run(ours).unwrap_or_else(|e| panic!("{what}: {}", e.error));
        assert_eq!(ours.to_vec_blocking().unwrap(), [4; 64], "{what}");
        let second = std::thread::Builder::new()
            .name("attack29-second".into())
            .spawn(move || {
                let runtime = dlopened_simulator();
                let ctx = runtime.device(0).unwrap().primary_context().clone();
                let s = stream(&ctx, strategy);
                let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 512).unwrap(), 5));
                buffer.unwrap().to_vec_blocking().unwrap()
            })
            .unwrap();
        until(&what, || {
            a_thread_sleeps("attack29-second") || second.is_finished()
        });
        let threads = let_finalisation_go();
        assert!(
            !threads.iter().any(|thread| thread == "npu-reaper"),
            "{what}: finalised on {threads:?}"
        );
        let read = watchdog(&what, || second.join().unwrap());
        assert_eq!(read, [5; 512], "{what}");
        watchdog(&what, || dropping.join().unwrap());
        own.when_finalised(&what, drop);
    }
}

/// The variable that makes a run of this binary's `child` test a case of its own.
const CHILD_ENV: &str = "NPU_ATTACK29_CHILD";

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "exit" => exits_while_a_runtime_is_finalised(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// ACL's finalisation at process exit: a process whose runtime of its own is being finalised
/// (held inside ACL's finalisation for good, on `npu-teardown` or the thread that dropped its
/// last handle) while the in-process runtime has a memset in flight on a held device, exits
/// (its test returns and the harness ends the process). The exit must neither hang (the
/// finalisation holds the library's `aclInit` lock, and the device is held) nor crash.
#[test]
fn the_process_exits_while_a_runtime_of_its_own_is_being_finalised() {
    let (_guard, _ctx) = devices();
    in_child_test("child", CHILD_ENV, "exit");
}

/// The child's side of [`the_process_exits_while_a_runtime_of_its_own_is_being_finalised`].
fn exits_while_a_runtime_is_finalised() {
    let own = OwnRuntime::new("attack29-exit");
    let runtime = own.build();
    hold_finalisation(&runtime);
    let theirs = runtime.device(0).unwrap().primary_context().clone();
    let s = stream(&theirs, Strategy::CallbackThread);
    drop(s.memset(DeviceBuffer::<u8>::new(&theirs, 4096).unwrap(), 3));
    let dropping = std::thread::spawn(move || drop((s, theirs, runtime)));
    until_finalising("the child's finalisation", |state| {
        !state.threads.is_empty()
    });
    let ours = Device::open(0).unwrap();
    let ctx = ours.primary_context().clone();
    let hold = sim::hold(&ours).unwrap();
    let s = stream(&ctx, Strategy::EventPoll);
    let in_flight = s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 4);
    // Left as they are when the process exits: the finalisation waiting, the device held.
    std::mem::forget((dropping, hold, in_flight, s, ctx, ours));
}
