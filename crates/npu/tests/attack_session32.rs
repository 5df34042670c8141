//! Attacks of the thirty-second session through the `npu` facade: pooled blocks taken apart
//! (split, viewed, cast) and handed to kernels and pitched copies while their pools are
//! trimmed and dropped; every fallible constructor and control at its extreme values; futures
//! polled on one thread or runtime and dropped on another as the device finishes them.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded (`run`,
//! `watchdog`), so a hang fails its test.

mod common;

use std::sync::Once;

use common::*;
use npu::memory::{DevicePoolBackend, PinnedPool};
use npu::prelude::*;
use npu::sim;
use npu::stream::Copy2d;

/// The memory of each of the two simulated devices: small enough for a pool to fill one.
const MEMORY: u64 = 64 << 20;

/// The byte the test's fill kernel writes.
const FILLED: u8 = 0x5B;

/// The device lock and device 0's primary context, of this file's simulator.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    devices_of(2, MEMORY)
}

/// The fill kernel `{uint8_t *x, uint64_t n}`: writes [`FILLED`] over the `n` bytes at `x`.
fn fill(ctx: &Context) -> npu::Function {
    const NAME: &str = "npu_attack_session32_fill";
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(NAME, 16, |block, _, args| {
            // SAFETY: launched with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe { fill_args(args) };
            if block == 0 {
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, FILLED, n) };
            }
            0
        })
        .unwrap();
    });
    in_process(ctx, NAME)
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
