//! The thirty-second session's audit of every `unsafe` block and `unsafe impl` in npu-core,
//! npu-mem, npu-stream and npu, attacked through the `npu` facade: what safe code can read
//! from memory no one has written yet, and page-locked memory shared read-only through `Arc`
//! clones on several threads while the device reads it.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `until_released`), so a hang fails its test. Run under valgrind (docs/cancellation.md), a
//! read of uninitialised memory that reaches an assertion is an error of its own.

mod common;

use std::sync::{Arc, Barrier};

use common::*;
use npu::memory::DevicePoolBackend;
use npu::prelude::*;
use npu::{HostRegistration, PageAlignedBuffer, RegisterFlags, sim};

/// The elements each attack moves.
const N: usize = 4096;

/// Held: every kind of memory safe code can allocate reads back as initialised elements
/// before anything wrote it, whichever way it is read (`Deref` of host memory, a blocking
/// copy, an async copy, a staged download): the `Memory` contract's "initialised elements"
/// and the `Deref`s' "zero-filled when pinned" are true of fresh memory, not only of memory
/// a copy filled. On npu-sim fresh memory is zeroed, which the attack checks; a block reused
/// by a pool holds its previous owner's values (initialised too), which it checks as well.
#[test]
fn memory_no_one_wrote_reads_back_initialised() {
    let (_guard, ctx, _) = exclusive(None);
    // Host memory: pinned, pooled, page-aligned and registered.
    let pinned = PinnedBuffer::<u64>::new(&ctx, N).unwrap();
    assert!(pinned.iter().all(|&x| x == 0), "a fresh pinned buffer");
    let pool = PinnedPool::new(&ctx);
    let mut pooled = pool.try_alloc::<u32>(N).unwrap().unwrap();
    assert!(pooled.iter().all(|&x| x == 0), "a fresh pooled block");
    pooled.fill(0xa5a5_a5a5);
    drop(pooled);
    sim::flush_releases();
    let reused = pool.try_alloc::<u16>(2 * N).unwrap().unwrap();
    assert!(
        reused.iter().all(|&x| x == 0xa5a5),
        "a reused pooled block holds what its last owner wrote, as another element type"
    );
    let aligned = PageAlignedBuffer::<f32>::new(N).unwrap();
    assert!(
        aligned.iter().all(|&x| x == 0.0),
        "a fresh page-aligned buffer"
    );
    let registered = HostRegistration::new(&ctx, aligned, RegisterFlags::PINNED).unwrap();
    assert!(registered.iter().all(|&x| x == 0.0), "its registration");
    // Device memory, read back blocking, by an async copy and by a staged download.
    let device = DeviceBuffer::<u64>::new(&ctx, N).unwrap();
    assert_eq!(device.to_vec_blocking().unwrap(), vec![0; N], "blocking");
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let fresh = DeviceBuffer::<u64>::new(&ctx, N).unwrap();
        let into = PinnedBuffer::<u64>::new(&ctx, N).unwrap();
        let (_, into) = run(s.copy_d2h(fresh, into)).unwrap();
        assert!(into.iter().all(|&x| x == 0), "{strategy:?}: async copy");
        let fresh = DeviceBuffer::<u32>::new(&ctx, N).unwrap();
        assert_eq!(run(s.download(fresh)).unwrap(), vec![0; N], "{strategy:?}");
        for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
            let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
            let block = run(pool.alloc::<u32>(&s, N)).unwrap();
            let read = run(s.download(block)).unwrap();
            assert_eq!(read, vec![0; N], "{strategy:?}: a fresh {backend:?} block");
        }
    }
}

/// Held: page-locked memory shared read-only through `Arc` clones of a `Cast` of it, on
/// several threads at once, each dereferencing its clone while it queues two copies from it
/// on a stream of its own, dropping one of them in flight and then its own clone: the value of
/// the dropped copy (its clone) is kept until the device is done with it, so the memory can be
/// neither unwrapped nor freed under the device (`Memory for Arc`, `Cast`'s `Deref` and the
/// buffers' `Sync`: shared access only reads, and uses are recorded on the buffer).
#[test]
fn an_arc_of_a_cast_read_on_several_threads_outlives_every_copy_of_it() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    let words: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    let bytes = PinnedBuffer::from_slice(&ctx, bytemuck::cast_slice::<u32, u8>(&words)).unwrap();
    let shared = Arc::new(bytes.cast::<u32>().unwrap());
    let hold = sim::hold(&ctx.device()).unwrap();
    let start = Arc::new(Barrier::new(STRATEGIES.len()));
    let threads = STRATEGIES.map(|strategy| {
        let (ctx, shared, start) = (ctx.clone(), shared.clone(), start.clone());
        let words = words.clone();
        std::thread::spawn(move || {
            let s = stream(&ctx, strategy);
            start.wait();
            let dst = || DeviceBuffer::<u32>::new(&ctx, N).unwrap();
            let kept = s.copy_h2d(shared.clone(), dst());
            let dropped = s.copy_h2d(shared.clone(), dst());
            assert_eq!(
                shared[..],
                words[..],
                "{strategy:?}: read beside the copies"
            );
            drop((dropped, shared));
            (strategy, kept)
        })
    });
    let kept = threads.map(|t| t.join().unwrap());
    sim::flush_releases();
    assert_eq!(
        Arc::strong_count(&shared),
        1 + 2 * STRATEGIES.len(),
        "each held copy keeps its clone, the dropped ones too"
    );
    hold.release().unwrap();
    for (strategy, copy) in kept {
        let (source, copied) = run(copy).unwrap();
        assert_eq!(copied.to_vec_blocking().unwrap(), words, "{strategy:?}");
        drop(source);
    }
    until_released("the dropped copies' clones", || {
        Arc::strong_count(&shared) == 1
    });
    let cast = Arc::try_unwrap(shared).expect("the last clone");
    assert_eq!(cast[..], words[..], "the device only read it");
    drop(cast.into_inner());
    until_released("the source and every destination", || {
        within(live_memory(&ctx), baseline)
    });
}
