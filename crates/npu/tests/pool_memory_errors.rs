//! A pooled device block whose memory has an uncorrectable error (UCE): every operation
//! touching it fails with `ACL_ERROR_RT_DEVICE_MEM_ERROR` (507053), so a pool that cached it
//! as it is would fail one request in N for the rest of its life. A block returned after one
//! of its operations failed with a memory error comes back repaired (`aclrtMemUceRepair` on
//! its error ranges), or is quarantined and never handed out again (docs/architecture.md,
//! Memory). Through the public API, on both `DevicePool` backends, under every completion
//! strategy; npu-sim's UCE control marks the memory.
//!
//! A file of its own: it installs a process-wide tracing subscriber, to see the pool's
//! events; its tests take turns on the devices (`exclusive`), and every wait is bounded.

mod common;

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, Once};

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, PooledDeviceBuffer};
use npu::prelude::*;
use npu::stream::Strategy;
use npu::{Stream, sim};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

/// One block of the 4 KiB class.
const BYTES: usize = 4096;

/// The events logged in this process, as `field=value` lines.
static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Recorder;

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
        let mut line = String::new();
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                let _ = write!(line, "{}={value:?} ", field.name());
            },
        );
        events().push(line);
    }
}

fn events() -> MutexGuard<'static, Vec<String>> {
    EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The devices to this test alone, with the process's recorder installed and emptied.
fn turn() -> (MutexGuard<'static, ()>, Context) {
    static RECORDER: Once = Once::new();
    RECORDER.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(Recorder);
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    let (guard, d0, _d1) = exclusive(None);
    events().clear();
    (guard, d0)
}

/// How many recorded events contain `text`.
fn logged(text: &str) -> usize {
    events().iter().filter(|line| line.contains(text)).count()
}

/// The block holds `byte` everywhere after a memset with it, on `s`.
fn works(s: &Stream, block: PooledDeviceBuffer<u8>, byte: u8, what: &str) {
    let block = run(s.memset(block, byte)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
    let bytes = run(s.download(block)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
    assert!(bytes.iter().all(|&b| b == byte), "{what}");
}

/// The promise: a block whose memset failed on an uncorrectable error in it comes back with
/// the error repaired, counted (`repaired`) and logged, and serves the next request (a hit on
/// the same block) without failing. Both backends, every strategy. Before the change the
/// block was cached with its error, and the next owner's memset failed too.
#[test]
fn a_block_with_a_memory_error_comes_back_repaired() {
    let (_guard, d0) = turn();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            let addr = block.as_raw();
            inject(&block, 1024, 256);
            let block = fails_with_the_memory_error(&s, block, &what);
            drop(block);
            let stats = settled(&pool, &what);
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.cached),
                (1, 0, BYTES),
                "{what}"
            );
            assert!(uce_ranges(&d0).is_empty(), "{what}: repaired");
            let again = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            assert_eq!(again.as_raw(), addr, "{what}: the repaired block is reused");
            works(&s, again, 9, &what);
            assert_eq!(pool.stats().cache.hits, 1, "{what}");
        }
    }
    assert_eq!(logged("were repaired"), 6);
}

/// An error range that reaches past the block (into the padding of its allocation) is not
/// the block's alone to repair: the block is quarantined (counted, logged), never handed out
/// again; the next request gets a new block that works. Both backends, every strategy.
/// Before the change the bad block was the next request's hit, whose memset failed.
#[test]
fn a_block_whose_error_cannot_be_repaired_is_never_handed_out_again() {
    let (_guard, d0) = turn();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            let bad = block.as_raw();
            inject(&block, BYTES - 16, 32);
            drop(fails_with_the_memory_error(&s, block, &what));
            let stats = settled(&pool, &what);
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.quarantined_bytes),
                (0, 1, BYTES),
                "{what}"
            );
            assert_eq!((stats.cached, stats.reserved), (0, 0), "{what}");
            for _ in 0..3 {
                let next = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
                assert_ne!(next.as_raw(), bad, "{what}: the bad block came back");
                works(&s, next, 3, &what);
            }
            assert_eq!(uce_ranges(&d0).len(), 1, "{what}: held by the quarantine");
            drop(pool);
            until_released(&what, || uce_ranges(&d0).is_empty());
        }
    }
    assert_eq!(logged("quarantined"), 6);
}

/// A bounded pool whose every block went bad (two blocks, the capacity, both quarantined)
/// still serves new requests with blocks that work: the quarantined blocks hold no room.
/// Before the change, both were cached, and every request got one.
#[test]
fn a_pool_whose_blocks_all_went_bad_still_serves_new_requests() {
    let (_guard, d0) = turn();
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let pool = device_pool(&d0, backend, Some(2 * BYTES));
        let s = stream(&d0, Strategy::EventPoll);
        let (a, b) = run(async {
            let a = pool.alloc::<u8>(&s, BYTES).await.unwrap();
            (a, pool.alloc::<u8>(&s, BYTES).await.unwrap())
        });
        let bad = [a.as_raw(), b.as_raw()];
        for block in [a, b] {
            inject(&block, BYTES - 16, 32);
            drop(fails_with_the_memory_error(&s, block, &what));
        }
        let stats = settled(&pool, &what);
        assert_eq!((stats.quarantined, stats.reserved), (2, 0), "{what}");
        let (c, d) = run(async {
            let c = pool.alloc::<u8>(&s, BYTES).await.unwrap();
            (c, pool.alloc::<u8>(&s, BYTES).await.unwrap())
        });
        assert_eq!(pool.stats().cache.reserved, 2 * BYTES, "{what}");
        for block in [c, d] {
            assert!(
                !bad.contains(&block.as_raw()),
                "{what}: a bad block came back"
            );
            works(&s, block, 5, &what);
        }
    }
}

/// A memory error on a block another operation still uses: a kernel on another stream holds
/// the block's right half while a memset of its left half fails on the error there. The pool
/// must neither repair nor reuse the block before the kernel is done (its error stays listed,
/// the block awaits); then it comes back repaired, the kernel's bytes intact, and serves the
/// next request. Under every strategy, both backends. Before the change the block was cached
/// with its error once the kernel was done.
#[test]
fn a_memory_error_on_a_block_still_in_use_waits_for_its_other_operation() {
    let (_guard, d0) = turn();
    let fill = gated_fill(&d0);
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let (s, other) = (stream(&d0, strategy), stream(&d0, strategy));
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            let addr = block.as_raw() as usize;
            inject(&block, 64, 64);
            let (left, right) = block.into_halves(BYTES / 2).unwrap();
            set_gate(|gate| *gate = (false, false));
            // SAFETY: the kernel writes the right half's bytes, which the launch keeps.
            let held = unsafe { other.launch(&fill, 1, (right, (BYTES / 2) as u64)) };
            wait_gate(|gate| gate.0);
            let err = run(s.memset(left, 1)).unwrap_err();
            assert_eq!(
                err.error.acl_code(),
                Some(AclCode::DEVICE_MEM_ERROR),
                "{what}"
            );
            drop(err);
            sim::flush_releases();
            let stats = pool.stats().cache;
            assert_eq!(
                (stats.repaired, stats.cached),
                (0, 0),
                "{what}: still in use"
            );
            assert_eq!(
                uce_ranges(&d0),
                [(addr + 64, 64)],
                "{what}: not repaired yet"
            );
            set_gate(|gate| gate.1 = true);
            let (right, _) = run(held).unwrap();
            let kept = run(s.download(right)).unwrap();
            assert!(
                kept.iter().all(|&b| b == 0x5B),
                "{what}: the kernel's bytes"
            );
            let stats = settled(&pool, &what);
            assert_eq!((stats.repaired, stats.cached), (1, BYTES), "{what}");
            let again = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            assert_eq!(again.as_raw() as usize, addr, "{what}");
            works(&s, again, 2, &what);
        }
    }
}

/// The pool dropped while its bad blocks' operations are queued (the device held), one of them
/// dropped in flight:
/// once the device runs them, the blocks are still examined (one repaired, one quarantined,
/// both logged), and everything the pool held goes back to the device: no error range and no
/// allocation is left. Both backends, every strategy. Before the change the blocks went to
/// the dropped pool's cache and were freed unexamined: nothing was repaired or quarantined.
#[test]
fn dropping_the_pool_meanwhile_still_settles_its_bad_blocks_and_leaks_nothing() {
    let (_guard, d0) = turn();
    let device = d0.device();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let s = stream(&d0, strategy);
            sim::flush_releases();
            let baseline = sim::device_stats(&device).unwrap().live_allocations;
            let before = (logged("were repaired"), logged("quarantined"));
            let pool = device_pool(&d0, backend, None);
            let (a, b) = run(async {
                let a = pool.alloc::<u8>(&s, BYTES).await.unwrap();
                (a, pool.alloc::<u8>(&s, BYTES).await.unwrap())
            });
            inject(&a, 0, 128);
            inject(&b, BYTES - 16, 32);
            let hold = sim::hold(&device).unwrap();
            let awaited = s.memset(a, 1);
            // Dropped in flight: its block is dropped on the reaper once the memset fails.
            drop(s.memset(b, 1));
            drop(pool);
            hold.release().unwrap();
            let err = run(awaited).unwrap_err();
            assert!(err.error.is_memory_error(), "{what}: {}", err.error);
            drop(err);
            // The dropped memset's failure, reported here.
            let _ = run(s.synchronize());
            until_released(&what, || {
                let now = sim::device_stats(&device).unwrap().live_allocations;
                now <= baseline && uce_ranges(&d0).is_empty()
            });
            let after = (logged("were repaired"), logged("quarantined"));
            assert_eq!(after, (before.0 + 1, before.1 + 1), "{what}");
        }
    }
}

/// An operation failing with `ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR` (507054: an HBM
/// multi-bit ECC error, which CANN has no repair for) on a pool block: a memory error
/// (`is_memory_error`), and the block is quarantined at once (counted, logged), never
/// repaired, never handed out again, and freed with the pool. npu-sim's task-failure control
/// gives the memset the code. Both backends, every strategy. Before the change the code was
/// no memory error: the block was cached and the next request got it.
#[test]
fn a_block_whose_operation_failed_with_an_hbm_ecc_error_is_quarantined_at_once() {
    let (_guard, d0) = turn();
    let device = d0.device();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let s = stream(&d0, strategy);
            sim::flush_releases();
            let baseline = sim::device_stats(&device).unwrap().live_allocations;
            let pool = device_pool(&d0, backend, None);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            let bad = block.as_raw();
            sim::fail_task(&s, 1, AclCode::HBM_MULTI_BIT_ECC_ERROR).unwrap();
            let ecc = AclCode::HBM_MULTI_BIT_ECC_ERROR;
            drop(fails_with_memory_error(&s, block, ecc, &what));
            let stats = settled(&pool, &what);
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.quarantined_bytes),
                (0, 1, BYTES),
                "{what}"
            );
            assert_eq!((stats.cached, stats.reserved), (0, 0), "{what}");
            for _ in 0..3 {
                let next = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
                assert_ne!(next.as_raw(), bad, "{what}: the bad block came back");
                works(&s, next, 4, &what);
            }
            drop(pool);
            until_released(&what, || {
                sim::device_stats(&device).unwrap().live_allocations <= baseline
            });
        }
    }
    assert_eq!(logged("which has no repair"), 6);
    assert_eq!(logged("were repaired"), 0);
}

/// A block that saw both kinds of memory error, through the two halves of a split: an
/// uncorrectable error in the left half (repairable) and an HBM ECC error on the right half's
/// memset (not), with a later successful memset of the right half in between (whose use list
/// forgets completed uses, but must not forget the worse error). The worse one decides: the
/// block is quarantined, not repaired, its UCE range stays listed (its memory held by the
/// quarantine) until the pool is gone. Both backends, every strategy.
#[test]
fn a_block_that_saw_both_kinds_of_memory_error_is_quarantined_not_repaired() {
    let (_guard, d0) = turn();
    for backend in BACKENDS {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let pool = device_pool(&d0, backend, None);
            let s = stream(&d0, strategy);
            let block = run(pool.alloc::<u8>(&s, BYTES)).unwrap();
            inject(&block, 64, 64);
            let (left, right) = block.into_halves(BYTES / 2).unwrap();
            let uce = AclCode::DEVICE_MEM_ERROR;
            let left = fails_with_memory_error(&s, left, uce, &what);
            sim::fail_task(&s, 1, AclCode::HBM_MULTI_BIT_ECC_ERROR).unwrap();
            let ecc = AclCode::HBM_MULTI_BIT_ECC_ERROR;
            let right = fails_with_memory_error(&s, right, ecc, &what);
            // The pruning this use's recording does keeps both errors.
            let right = run(s.memset(right, 1)).unwrap_or_else(|e| panic!("{what}: {}", e.error));
            drop((left, right));
            let stats = settled(&pool, &what);
            assert_eq!(
                (stats.repaired, stats.quarantined, stats.cached),
                (0, 1, 0),
                "{what}: {stats:?}"
            );
            assert_eq!(uce_ranges(&d0).len(), 1, "{what}: not repaired");
            drop(pool);
            until_released(&what, || uce_ranges(&d0).is_empty());
        }
    }
}
