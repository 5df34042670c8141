//! Attacks of the twenty-eighth session, through the `npu` facade: the memory side. `Arc`
//! clones of split parts of pooled blocks raced against the release after an uncorrectable
//! memory error (UCE), moved across threads and dropped while their operations are in
//! flight; each test names the promise it attacks.
//!
//! Every test takes the device lock; every wait is bounded (`run`, `until_released`), so a
//! hang fails its test.

mod common;

use std::sync::Arc;

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, PooledDeviceBuffer, Split};
use npu::prelude::*;
use npu::stream::Strategy;
use npu::{Op, PinnedBuffer, Stream, sim};

const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

/// One block of the 8 KiB class, split in halves.
const BYTES: usize = 8192;
const HALF: usize = BYTES / 2;

/// A shared half of a pooled block.
type Part = Arc<Split<PooledDeviceBuffer<u8>>>;

/// Devices 0 and 1 to this test alone, of a simulator of four devices: 2 and 3 are lost by
/// the test that needs lost devices.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    let (guard, d0, _d1) = exclusive(Some(4));
    (guard, d0)
}

/// A block of `pool` with a UCE at bytes 64..128 of its left half, split into halves; and
/// its address.
fn split_bad_block(
    pool: &DevicePool,
    s: &Stream,
) -> (
    Split<PooledDeviceBuffer<u8>>,
    Split<PooledDeviceBuffer<u8>>,
    usize,
) {
    let block = run(pool.alloc::<u8>(s, BYTES)).unwrap();
    let addr = block.as_raw() as usize;
    inject(&block, 64, 64);
    let (left, right) = block.into_halves(HALF).unwrap();
    (left, right, addr)
}

/// A read of `part` into pinned memory, on `s`: an operation owning one clone of it.
fn read(s: &Stream, part: &Part) -> Op<(Part, PinnedBuffer<u8>)> {
    let host = PinnedBuffer::<u8>::new(s.context(), part.len()).unwrap();
    s.copy_d2h(part.clone(), host)
}

/// Awaits `op`, which must fail with the memory error; drops what it hands back.
fn fails_on_the_error<T: Send>(op: Op<T>, what: &str) {
    let err = run(op).err().unwrap_or_else(|| panic!("{what}: succeeded"));
    assert_eq!(
        err.error.acl_code(),
        Some(AclCode::DEVICE_MEM_ERROR),
        "{what}: {}",
        err.error
    );
}

/// The block at `addr` is neither examined nor cached: still in use, its error still listed.
fn untouched(d0: &Context, pool: &DevicePool, addr: usize, what: &str) {
    sim::flush_releases();
    let stats = pool.stats().cache;
    assert_eq!(
        (stats.repaired, stats.quarantined, stats.awaiting_blocks),
        (0, 0, 0),
        "{what}: {stats:?}"
    );
    assert_eq!(stats.allocated, BYTES, "{what}: still a part's: {stats:?}");
    assert_eq!(uce_ranges(d0), [(addr + 64, 64)], "{what}: not repaired");
}

/// A new request of the block's class gets other memory, and it works.
fn served_elsewhere(pool: &DevicePool, s: &Stream, addr: usize, what: &str) {
    let other = run(pool.alloc::<u8>(s, BYTES)).unwrap();
    assert_ne!(
        other.as_raw() as usize,
        addr,
        "{what}: handed to a new owner"
    );
    let other = run(s.memset(other, 4)).unwrap();
    assert_eq!(run(s.download(other)).unwrap(), vec![4; BYTES], "{what}");
}

/// Once every part is gone the block is repaired (not quarantined: its error lies inside),
/// its error range no longer listed.
fn repaired_at_last(d0: &Context, pool: &DevicePool, what: &str) {
    let stats = settled(pool, what);
    assert_eq!(
        (stats.repaired, stats.quarantined),
        (1, 0),
        "{what}: {stats:?}"
    );
    assert!(uce_ranges(d0).is_empty(), "{what}: still listed");
}

/// The promise: a pooled block whose operation failed with a memory error is examined only
/// once it is idle *and* its owner is gone, so an `Arc` clone of a split part outliving the
/// failure (moved to another thread, used there again) keeps it from repair and from a new
/// owner. The clone's second read fails on the same unrepaired error (nothing repaired the
/// memory under it), and only the last part's drop sends the block for repair. Both
/// backends, every strategy.
#[test]
fn a_clone_of_a_part_outliving_its_failed_copy_keeps_the_block_from_repair_and_reuse() {
    let (_guard, d0) = devices();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let (left, right, addr) = split_bad_block(&pool, &s);
            let (left, right) = (Arc::new(left), Arc::new(right));
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let elsewhere = {
                let (kept, s, what) = (left.clone(), s.clone(), what.clone());
                std::thread::spawn(move || {
                    wait.recv().unwrap();
                    fails_on_the_error(read(&s, &kept), &format!("{what}: the clone"));
                })
            };
            fails_on_the_error(read(&s, &left), &what);
            drop(left);
            untouched(&d0, &pool, addr, &what);
            served_elsewhere(&pool, &s, addr, &what);
            go.send(()).unwrap();
            elsewhere.join().unwrap();
            untouched(&d0, &pool, addr, &format!("{what}: the right half held"));
            drop(right);
            repaired_at_last(&d0, &pool, &what);
        }
    }
}

/// The promise: the last clone of a part, owned by a read whose future was dropped in flight
/// (the device held), still brings the failure's memory error to the pool: the block is
/// dropped on the reaper as the read completes, possibly before the completion says it is
/// complete, and must be repaired, not cached with its error. The next owner's memset of the
/// same class works. Both backends, every strategy.
#[test]
fn the_last_clone_dropped_with_a_discarded_failing_copy_still_sends_the_block_for_repair() {
    let (_guard, d0) = devices();
    let device = d0.device();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let (left, right, addr) = split_bad_block(&pool, &s);
            let left = Arc::new(left);
            let hold = sim::hold(&device).unwrap();
            drop(read(&s, &left));
            // Dropped from another thread while the read is queued: the read owns the last
            // clone of the bad half, the right half goes with it.
            std::thread::spawn(move || drop((left, right)))
                .join()
                .unwrap();
            assert_eq!(
                pool.stats().cache.allocated,
                BYTES,
                "{what}: still the read's"
            );
            hold.release().unwrap();
            // The dropped read's failure, reported here.
            let _ = run(s.synchronize());
            repaired_at_last(&d0, &pool, &what);
            let again = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            assert_eq!(again.as_raw() as usize, addr, "{what}: the repaired block");
            let again = run(s.memset(again, 6)).unwrap();
            assert_eq!(run(s.download(again)).unwrap(), vec![6; BYTES], "{what}");
        }
    }
}

/// The promise: a clone of the sound half whose read is queued on another stream behind a
/// running kernel keeps the block from repair and from a new owner after the bad half's
/// memset failed and every other part was dropped; the read's future dropped too, the block
/// is repaired only after the kernel and the read ran. Both backends, every strategy.
#[test]
fn a_clone_queued_behind_a_running_kernel_keeps_the_failed_block_until_it_ran() {
    let (_guard, d0) = devices();
    let fill = gated_fill(&d0);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let (s, other) = (stream(&d0, strategy), stream(&d0, strategy));
            let (left, right, addr) = split_bad_block(&pool, &s);
            let right = Arc::new(run(other.memset(right, 0x3C)).unwrap());
            let scratch = DeviceBuffer::<u8>::new(&d0, 64).unwrap();
            set_gate(|gate| *gate = (false, false));
            // SAFETY: the kernel writes the scratch buffer's 64 bytes, which the launch keeps.
            let held = unsafe { other.launch(&fill, 1, (scratch, 64u64)) };
            wait_gate(|gate| gate.0);
            let queued = read(&other, &right);
            drop(right);
            fails_on_the_error(s.memset(left, 1), &what);
            untouched(&d0, &pool, addr, &what);
            served_elsewhere(&pool, &s, addr, &what);
            let (seen_tx, seen) = std::sync::mpsc::channel();
            // The read's future moves to another thread and is dropped there in flight,
            // after it saw nothing back.
            std::thread::spawn(move || {
                let mut queued = std::pin::pin!(queued);
                seen_tx
                    .send(polled_once(queued.as_mut()).is_pending())
                    .unwrap();
            })
            .join()
            .unwrap();
            assert!(
                seen.recv().unwrap(),
                "{what}: the read ran behind a held kernel"
            );
            untouched(&d0, &pool, addr, &format!("{what}: the read queued"));
            set_gate(|gate| gate.1 = true);
            run(held).unwrap();
            let _ = run(other.synchronize());
            repaired_at_last(&d0, &pool, &what);
        }
    }
}

/// The promise: a `PinnedPool` block, split and shared across threads, whose read from device
/// memory with a UCE failed with the memory error is cached as usual once its last clone is
/// gone (the error is the device memory's; host memory has none in the runtime's API), and
/// its next owner's read of sound memory gets the right bytes. Every strategy.
#[test]
fn a_pinned_part_whose_copy_met_a_device_memory_error_is_cached_after_its_last_clone() {
    let (_guard, d0) = devices();
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&d0, strategy);
        let pool = PinnedPool::builder(&d0).capacity(BYTES).build().unwrap();
        let block = run(pool.alloc::<u8>(BYTES)).unwrap();
        let addr = block.as_ptr() as usize;
        let (left, right) = block.into_halves(HALF).unwrap();
        let bad = DeviceBuffer::<u8>::new(&d0, HALF).unwrap();
        sim::raw_control::inject_mem_uce(bad.as_raw(), 16).unwrap();
        let err = run(s.copy_d2h(bad, left)).unwrap_err();
        assert!(err.error.is_memory_error(), "{what}: {}", err.error);
        let (bad, left) = err.value.unwrap();
        drop(bad);
        let right = Arc::new(right);
        let elsewhere = {
            let (right, s) = (right.clone(), s.clone());
            std::thread::spawn(move || {
                let sound = DeviceBuffer::<u8>::new(s.context(), HALF).unwrap();
                run(s.copy_h2d(right, sound)).unwrap()
            })
        };
        drop((left, right));
        let stats = pool.stats();
        assert_eq!(
            stats.allocated, BYTES,
            "{what}: a clone is alive: {stats:?}"
        );
        drop(elsewhere.join().unwrap());
        until_released(&what, || pool.stats().awaiting_blocks == 0);
        let stats = pool.stats();
        assert_eq!(
            (stats.cached, stats.repaired, stats.quarantined),
            (BYTES, 0, 0),
            "{what}: {stats:?}"
        );
        let source = run(s.upload(&[0x71u8; BYTES])).unwrap();
        let again = run(pool.alloc::<u8>(BYTES)).unwrap();
        assert_eq!(again.as_ptr() as usize, addr, "{what}: the cached block");
        let (_, again) = run(s.copy_d2h(source, again)).unwrap();
        assert!(again.iter().all(|&b| b == 0x71), "{what}");
    }
}

/// The promise, under concurrency: threads of a bounded pool each take a block a round (every
/// other one given a UCE in its left half), share its right half with the next thread through
/// an `Arc` clone, read both halves (the received clone's read dropped in flight every other
/// round) and drop everything, the last clone of a block on whichever thread lets go last.
/// A thread trims the pool all along. Every bad block is repaired exactly once, after its last
/// clone; no read of a sound half fails (no repair or new owner raced it); the pool never
/// holds more than its capacity; and at the end nothing is listed, awaited, quarantined or
/// counted, and the device's memory is back. Both backends, every strategy.
#[test]
fn threads_trading_clones_of_parts_of_bad_and_sound_blocks_settle_each_block_once() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 6;
    const CAPACITY: usize = THREADS * BYTES;
    let (_guard, d0) = devices();
    let baseline = live_memory(&d0);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, Some(CAPACITY));
            let round_done = Arc::new(std::sync::Barrier::new(THREADS));
            let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
                .map(|_| std::sync::mpsc::channel::<Part>())
                .unzip();
            let workers: Vec<_> = receivers
                .into_iter()
                .enumerate()
                .map(|(at, received)| {
                    let next = senders[(at + 1) % THREADS].clone();
                    let (pool, round_done) = (pool.clone(), round_done.clone());
                    let (s, what) = (stream(&d0, strategy), format!("{what}, thread {at}"));
                    std::thread::spawn(move || {
                        for round in 0..ROUNDS {
                            let what = format!("{what}, round {round}");
                            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
                            let bad = (at + round) % 2 == 0;
                            if bad {
                                inject(&block, 64, 64);
                            }
                            let (left, right) = block.into_halves(HALF).unwrap();
                            let (left, right) = (Arc::new(left), Arc::new(right));
                            next.send(right.clone()).unwrap();
                            match run(read(&s, &left)) {
                                Err(err) if bad => assert!(err.error.is_memory_error(), "{what}"),
                                Err(err) => panic!("{what}: a sound left half: {}", err.error),
                                Ok(_) => assert!(!bad, "{what}: read past its UCE"),
                            }
                            let theirs = received.recv().unwrap();
                            let reading = read(&s, &theirs);
                            drop(theirs);
                            if round % 2 == 0 {
                                drop(reading);
                            } else {
                                let (_, host) =
                                    run(reading).unwrap_or_else(|e| panic!("{what}: {}", e.error));
                                assert_eq!(host.len(), HALF, "{what}");
                            }
                            drop((left, right));
                            round_done.wait();
                        }
                    })
                })
                .collect();
            drop(senders);
            // Trims race the returns, the repairs and the grants throughout.
            let working = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let trimmer = {
                let (pool, working) = (pool.clone(), working.clone());
                std::thread::spawn(move || {
                    while working.load(std::sync::atomic::Ordering::Acquire) {
                        pool.trim().unwrap();
                        std::thread::yield_now();
                    }
                })
            };
            for worker in workers {
                worker.join().unwrap();
            }
            working.store(false, std::sync::atomic::Ordering::Release);
            trimmer.join().unwrap();
            let stats = settled(&pool, &what);
            let bad = (THREADS * ROUNDS / 2) as u64;
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.allocated),
                (bad, 0, 0),
                "{what}: {stats:?}"
            );
            assert!(stats.peak_reserved <= CAPACITY, "{what}: {stats:?}");
            assert!(uce_ranges(&d0).is_empty(), "{what}: still listed");
            // The counters add up to nothing once the cache is trimmed: none went astray.
            pool.trim().unwrap();
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.reserved, stats.cached, stats.awaiting_bytes),
                (0, 0, 0),
                "{what}: {stats:?}"
            );
            drop(pool);
            until_released(&what, || within(live_memory(&d0), baseline));
        }
    }
}

/// The promise, after a device fault: a block whose read failed with the memory error, its
/// halves shared by `Arc` clones, one of them on another thread, when the device is lost. The
/// clone's later read is a typed error, not a hang; the block, once its last clone is gone, is
/// settled (repaired or quarantined, never cached unexamined) and dropping the pool and its
/// stream returns. One device per backend (a loss is for good).
#[test]
fn a_device_lost_under_clones_of_a_failed_blocks_parts_settles_it_and_hangs_nothing() {
    let (_guard, _d0) = devices();
    for (id, backend) in [2, 3].into_iter().zip(BACKENDS) {
        let what = format!("device {id}, {backend:?}");
        let device = Device::open(id).unwrap();
        let ctx = device.primary_context().clone();
        let s = stream(&ctx, Strategy::EventPoll);
        let pool = device_pool(&ctx, backend, None);
        let (left, right, _) = split_bad_block(&pool, &s);
        let (left, right) = (Arc::new(left), Arc::new(right));
        fails_on_the_error(read(&s, &left), &what);
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let elsewhere = {
            let (kept, s) = (right.clone(), s.clone());
            std::thread::spawn(move || {
                wait.recv().unwrap();
                run(read(&s, &kept)).map(drop).map_err(|e| e.error)
            })
        };
        sim::lose(&device).unwrap();
        drop((left, right));
        go.send(()).unwrap();
        let outcome = watchdog("the clone's read", || elsewhere.join().unwrap());
        assert!(
            outcome.is_err(),
            "{what}: a read on a lost device: {outcome:?}"
        );
        let stats = watchdog("the block settled", || settled(&pool, &what));
        assert_eq!(
            stats.repaired + stats.quarantined,
            1,
            "{what}: examined: {stats:?}"
        );
        assert_eq!(
            stats.cached,
            stats.repaired as usize * BYTES,
            "{what}: {stats:?}"
        );
        watchdog("dropping the pool and stream", || drop((pool, s)));
    }
}

/// npu-sim's `npusimInjectMemUce` in the cdylib a runtime of its own loaded (the in-process
/// control reaches the in-process simulator only).
fn own_injector() -> unsafe extern "C" fn(*mut std::ffi::c_void, usize) -> i32 {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().join("libascendcl.so");
    let path = std::ffi::CString::new(path.into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: RTLD_NOLOAD only looks the library up (the runtime of its own loaded it) and
    // takes a reference, which the handle's `dlclose` gives back; the symbol is npu-sim's
    // C ABI function of this signature, valid while the runtime keeps the library loaded.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(
            !handle.is_null(),
            "the runtime of its own loaded the library"
        );
        let symbol = libc::dlsym(handle, c"npusimInjectMemUce".as_ptr());
        assert!(!symbol.is_null(), "npu-sim exports npusimInjectMemUce");
        libc::dlclose(handle);
        std::mem::transmute::<
            *mut libc::c_void,
            unsafe extern "C" fn(*mut std::ffi::c_void, usize) -> i32,
        >(symbol)
    }
}

/// The promise, with a runtime of its own: its pools' blocks, one repaired and one
/// quarantined after a memory error in a split part, their last `Arc` clones dropped on
/// another thread after the pool handles, leave nothing behind: every error range goes, and
/// once every handle is dropped ACL is finalised (the repair thread, which holds the pool and
/// binds its context, keeps neither). Both backends, every strategy.
#[test]
fn a_runtime_of_its_own_whose_pools_repaired_and_quarantined_split_blocks_is_finalised() {
    let (_guard, _d0) = devices();
    let own = OwnRuntime::new("attack28");
    for strategy in STRATEGIES {
        let runtime = own.build();
        let inject_uce = own_injector();
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, strategy);
        let mut last_clones = Vec::new();
        for (n, backend) in BACKENDS.into_iter().enumerate() {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&ctx, backend, None);
            // Inside the left half (repaired); reaching past the block's end (quarantined).
            for (at, len) in [(64, 64), (BYTES - 16, 32)] {
                let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
                let ptr = block.as_raw().wrapping_byte_add(at);
                // SAFETY: the pointer is looked up by the simulator, never dereferenced.
                assert_eq!(unsafe { inject_uce(ptr, len) }, 0, "{what}");
                let (left, right) = block.into_halves(HALF).unwrap();
                let (part, other) = match at < HALF {
                    true => (left, right),
                    false => (right, left),
                };
                let failed = run(s.memset(part, 1)).unwrap_err();
                assert!(failed.error.is_memory_error(), "{what}: {}", failed.error);
                let other = Arc::new(other);
                last_clones.push(other.clone());
                drop((failed, other));
            }
            let held = 2 * (n + 1);
            assert_eq!(
                uce_ranges(&ctx).len(),
                held,
                "{what}: unexamined while held"
            );
        }
        std::thread::spawn(move || drop(last_clones))
            .join()
            .unwrap();
        let what = format!("{strategy:?}");
        until_released(&what, || uce_ranges(&ctx).is_empty());
        drop((s, ctx, runtime));
        own.when_finalised(&what, |applied| {
            let ctx = applied.device(0).unwrap().primary_context().clone();
            let s = stream(&ctx, strategy);
            let pool = DevicePool::new(&ctx).unwrap();
            let block = run(pool.alloc::<u8>(&s, 64)).unwrap();
            let set = run(s.memset(block, 8)).unwrap();
            assert_eq!(run(s.download(set)).unwrap(), vec![8; 64]);
        });
    }
}
