//! Attacks on memory views and copies through the `npu` facade only, as a user would write
//! them: views, splits, casts, `Filled`, zero-sized and zero-length memory, 1D and 2D copies
//! between parts of one buffer, across contexts and devices, memsets, and host registrations
//! whose copies fail or are dropped.
//!
//! Each test is named for the promise it attacks and asserts it. The simulator's hold gate is
//! device-global, so every test takes the file's lock; every wait is bounded by [`run`]'s
//! timeout or [`watchdog`], so a hang fails its test with a message instead of stalling the
//! suite.

mod common;

use std::future::Future;
use std::sync::{Arc, MutexGuard};

use common::*;
use npu::Stream;
use npu::memory::{HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, Strategy};

/// Device 0 and 1 to this test alone: the hold gate and the live counters are the
/// simulator's, shared by every test of this process.
fn exclusive() -> (MutexGuard<'static, ()>, Context, Context) {
    // Four devices: 0 and 1 for every test, 3 for the one that loses a device (final for the
    // process).
    common::exclusive(Some(4))
}

fn host(ctx: &Context, data: &[u8]) -> PinnedBuffer<u8> {
    PinnedBuffer::from_slice(ctx, data).unwrap()
}

/// Bytes `0..n` as a pattern nothing else writes.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 + 1).collect()
}

/// Held (the docs were wrong): a registration whose copy faulted on the device comes back
/// from the failed operation, and `into_inner` unregisters it and hands the buffer back, since
/// a completed operation, failed or not, no longer touches the memory. The documentation
/// said `into_inner` fails, and that a drop leaks both, after such a failure; a dropped
/// registration whose copy faulted is unregistered too.
#[test]
fn a_registration_whose_copy_faulted_is_unregistered_and_handed_back() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let registrations = sim::host_stats().unwrap().registrations;
        let data = PageAlignedBuffer::from_slice(&[4u8; 4096]).unwrap();
        let registered = HostRegistration::new(&ctx, data, RegisterFlags::PINNED).unwrap();
        sim::fail_task(&s, 1, npu::error::AclCode(507015)).unwrap();
        let back = run(async {
            let err = s
                .copy_h2d(registered, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap())
                .await
                .unwrap_err();
            assert_eq!(err.acl_code(), Some(npu::error::AclCode(507015)));
            let (registered, _dev) = err.value.expect("the fault hands both back");
            registered.into_inner().await
        });
        let back = back.expect("handed back after a failed copy");
        assert!(back.iter().all(|&b| b == 4), "{strategy:?}");
        assert_eq!(sim::host_stats().unwrap().registrations, registrations);

        // Dropped in flight instead: unregistered once the faulted copy completes.
        let data = PageAlignedBuffer::from_slice(&[5u8; 4096]).unwrap();
        let registered = HostRegistration::new(&ctx, data, RegisterFlags::PINNED).unwrap();
        sim::fail_task(&s, 1, npu::error::AclCode(507015)).unwrap();
        let hold = sim::hold(&ctx.device()).unwrap();
        let op = s.copy_h2d(registered, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        let done = op.completion().clone();
        drop(op);
        sim::flush_releases();
        let live = sim::host_stats().unwrap().registrations;
        assert_eq!(live, registrations + 1, "{strategy:?}: still registered");
        hold.release().unwrap();
        assert!(run(async { done.wait().await }).is_err(), "{strategy:?}");
        sim::flush_releases();
        let live = sim::host_stats().unwrap().registrations;
        assert_eq!(live, registrations, "{strategy:?}: unregistered");
    }
}

/// Held: parts of one buffer copied into each other (1D and pitched, device and host, under
/// every wrapper: views of parts, casts of views of parts) move exactly the bytes asked for:
/// the gaps between pitched rows and the neighbouring parts keep their bytes.
#[test]
fn parts_of_one_buffer_copy_into_each_other_exactly() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            // Device: [0, 16) | [16, 40) | [40, 64).
            let init = pattern(64);
            let whole = DeviceBuffer::from_host_blocking(&ctx, &init).unwrap();
            let (a, rest) = whole.into_halves(16).unwrap();
            let (b, c) = rest.into_halves(24).unwrap();
            // 4 rows of 2 bytes, 4 apart in a, into b's elements 1.. at 5 apart.
            let shape = Copy2d {
                width: 2,
                height: 4,
                src_pitch: 4,
                dst_pitch: 5,
            };
            let (a, b) = s.copy_2d_d2d(a, b.view(1..).unwrap(), shape).await.unwrap();
            let b = b.into_inner();
            // c's first 8 bytes as two u32, from a's bytes 8..16 as two u32.
            let src = a.view(8..16).unwrap().cast::<u32>().unwrap();
            let dst = c.view(..8).unwrap().cast::<u32>().unwrap();
            let (src, dst) = s.copy_d2d(src, dst).await.unwrap();
            let (a, c) = (src.into_inner().into_inner(), dst.into_inner().into_inner());
            // A memset of c's last 4 bytes through a byte view of a u32 cast.
            let tail = c.view(20..).unwrap().cast::<u32>().unwrap().into_bytes();
            let c = s
                .memset(tail, 0xee)
                .await
                .unwrap()
                .into_inner()
                .into_inner();
            let whole = a.join(b).unwrap().join(c.into_inner()).unwrap();
            let whole = whole.into_whole().unwrap();
            let mut expected = init.clone();
            for row in 0..4 {
                for col in 0..2 {
                    expected[16 + 1 + row * 5 + col] = init[row * 4 + col];
                }
            }
            expected.copy_within(8..16, 40);
            expected[60..].fill(0xee);
            assert_eq!(s.download(whole).await.unwrap(), expected, "{strategy:?}");

            // Host: a pitched copy from the device into a pinned part leaves its gaps and the
            // other part alone.
            let host = PinnedBuffer::from_slice(&ctx, &[0xaa; 32]).unwrap();
            let (head, tail) = host.into_halves(11).unwrap();
            let dev = DeviceBuffer::from_host_blocking(&ctx, &pattern(9)).unwrap();
            let shape = Copy2d {
                width: 3,
                height: 3,
                src_pitch: 3,
                dst_pitch: 4,
            };
            let (dev, head) = s.copy_2d_d2h(dev, head, shape).await.unwrap();
            let mut expected = [0xaa; 32];
            for row in 0..3 {
                expected[row * 4..row * 4 + 3].copy_from_slice(&pattern(9)[row * 3..row * 3 + 3]);
            }
            assert_eq!(&head[..], &expected[..11], "{strategy:?}");
            assert_eq!(&tail[..], &expected[11..], "{strategy:?}");
            // And back up, pitched the other way, from the tail into a device view.
            let shape = Copy2d {
                width: 2,
                height: 3,
                src_pitch: 7,
                dst_pitch: 3,
            };
            let (_tail, dev) = s
                .copy_2d_h2d(tail.view(1..).unwrap(), dev.view(1..).unwrap(), shape)
                .await
                .unwrap();
            let mut expected = pattern(9);
            for row in 0..3 {
                expected[1 + row * 3..1 + row * 3 + 2].fill(0xaa);
            }
            assert_eq!(s.download(dev.into_inner()).await.unwrap(), expected);
        });
    }
}

/// Held: an `Arc` shared by copies on two streams, whose futures are dropped while the device
/// is held, cannot be unwrapped (and so written through `&mut`) until both copies completed.
#[test]
fn an_arc_read_by_dropped_copies_is_unwrapped_only_after_they_complete() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let shared = Arc::new(DeviceBuffer::from_host_blocking(&ctx, &[3u8; 64]).unwrap());
        let hold = sim::hold(&ctx.device()).unwrap();
        let x = a.copy_d2d(shared.clone(), DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
        let y = b.copy_d2d(
            shared.clone().view(32..).unwrap(),
            DeviceBuffer::<u8>::new(&ctx, 32).unwrap(),
        );
        let done = [x.completion().clone(), y.completion().clone()];
        drop((x, y));
        sim::flush_releases();
        let shared = Arc::try_unwrap(shared).expect_err("two queued copies read it");
        hold.release().unwrap();
        all_completed(&done);
        sim::flush_releases();
        let mut alone = Arc::try_unwrap(shared).expect("both copies are done");
        alone.copy_from_host_blocking(&[4; 64]).unwrap();
        assert_eq!(alone.to_vec_blocking().unwrap(), [4; 64], "{strategy:?}");
    }
}

/// Held: a registration split in two, one part copied to the device on one stream and the
/// other written from the device on another, both futures dropped while the device is held,
/// stays registered until both copies completed; awaited, the parts rejoin and the buffer
/// comes back with the device's bytes in its second part.
#[test]
fn a_split_registration_stays_registered_until_both_parts_are_done() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let (a, b) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let registrations = sim::host_stats().unwrap().registrations;
        let data = PageAlignedBuffer::from_slice(&[1u8; 8192]).unwrap();
        let registered = HostRegistration::new(&ctx, data, RegisterFlags::PINNED).unwrap();
        let (head, tail) = registered.into_halves(4096).unwrap();
        let source = DeviceBuffer::from_host_blocking(&ctx, &[2u8; 4096]).unwrap();
        let hold = sim::hold(&ctx.device()).unwrap();
        let x = a.copy_h2d(head, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        let y = b.copy_d2h(source, tail);
        let done = [x.completion().clone(), y.completion().clone()];
        drop((x, y));
        sim::flush_releases();
        let live = sim::host_stats().unwrap().registrations;
        assert_eq!(
            live,
            registrations + 1,
            "{strategy:?}: unregistered under copies"
        );
        hold.release().unwrap();
        all_completed(&done);
        sim::flush_releases();
        assert_eq!(sim::host_stats().unwrap().registrations, registrations);

        let data = PageAlignedBuffer::from_slice(&[1u8; 8192]).unwrap();
        let registered = HostRegistration::new(&ctx, data, RegisterFlags::PINNED).unwrap();
        let (head, tail) = registered.into_halves(4096).unwrap();
        let back = run(async {
            let source = DeviceBuffer::from_host_blocking(&ctx, &[2u8; 4096]).unwrap();
            let x = a.copy_h2d(head, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
            let y = b.copy_d2h(source, tail);
            let ((head, dev), (_, tail)) = (x.await.unwrap(), y.await.unwrap());
            assert_eq!(s_download(&a, dev).await, [1; 4096]);
            let registered = tail.join(head).unwrap().into_whole().unwrap();
            registered.into_inner().await.unwrap()
        });
        assert!(back[..4096].iter().all(|&x| x == 1), "{strategy:?}");
        assert!(back[4096..].iter().all(|&x| x == 2), "{strategy:?}");
        assert_eq!(sim::host_stats().unwrap().registrations, registrations);
    }
}

async fn s_download(s: &Stream, buffer: DeviceBuffer<u8>) -> Vec<u8> {
    s.download(buffer).await.unwrap()
}

/// Held: forgetting the operation that writes one part leaks that allocation (the part's `Arc`
/// with it), never frees it: the other part keeps working, `into_whole` keeps refusing, and
/// the device still finishes the forgotten write without faulting.
#[test]
fn forgetting_a_copy_into_a_part_only_leaks_its_allocation() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_allocations(&ctx);
        let (head, tail) = DeviceBuffer::<u8>::new(&ctx, 64)
            .unwrap()
            .into_halves(32)
            .unwrap();
        let hold = sim::hold(&ctx.device()).unwrap();
        let op = s.copy_h2d(host(&ctx, &[7; 32]), head);
        let done = op.completion().clone();
        std::mem::forget(op);
        hold.release().unwrap();
        run(async {
            done.wait().await.unwrap();
            let tail = s.memset(tail, 9).await.unwrap();
            let err = tail.into_whole().unwrap_err();
            assert!(err.to_string().contains("1 other part"), "{err}");
            let tail = err.value.unwrap();
            assert_eq!(s.download(tail).await.unwrap(), [9; 32], "{strategy:?}");
            s.synchronize().await.unwrap();
        });
        assert_eq!(live_allocations(&ctx), before + 1, "{strategy:?}: leaked");
    }
}

/// Held: memory of another context of the same device, and pinned or registered memory of
/// another device's context, is copied; device memory of another device is refused before
/// submission (memsets, streams on neither side) or by ACL without peer access (207006),
/// each with a typed error handing both buffers back.
#[test]
fn foreign_contexts_and_devices_are_copied_or_refused_with_typed_errors() {
    let (_guard, ctx, ctx1) = exclusive();
    let sibling = ctx.device().create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            let (_, dst) = s
                .copy_h2d(
                    host(&ctx1, &[5; 64]),
                    DeviceBuffer::new(&sibling, 64).unwrap(),
                )
                .await
                .unwrap();
            let data = PageAlignedBuffer::from_slice(&[6u8; 4096]).unwrap();
            let registered = HostRegistration::new(&ctx1, data, RegisterFlags::PINNED).unwrap();
            let (registered, _) = s
                .copy_h2d(registered, DeviceBuffer::new(&ctx, 4096).unwrap())
                .await
                .unwrap();
            drop(registered);
            let (_, dst) = s
                .copy_d2d(dst.view(8..).unwrap(), DeviceBuffer::new(&ctx, 56).unwrap())
                .await
                .unwrap();
            assert_eq!(s.download(dst).await.unwrap(), [5; 56], "{strategy:?}");

            let far = DeviceBuffer::from_host_blocking(&ctx1, &[7u8; 64]).unwrap();
            let err = s.memset(far.view(..8).unwrap(), 0).await.unwrap_err();
            assert_eq!(invalid(&err.error), ("Stream::memset", "dst"));
            let far = err.value.unwrap().into_inner();
            let (far, near) = (far, DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
            let err = s.copy_d2d(far, near).await.unwrap_err();
            assert_eq!(err.acl_code(), Some(npu::error::AclCode(207006)), "{err}");
            let (far, near) = err.value.expect("both back");
            let shape = Copy2d {
                width: 8,
                height: 8,
                src_pitch: 8,
                dst_pitch: 8,
            };
            let err = s.copy_2d_d2d(far, near, shape).await.unwrap_err();
            assert_eq!(err.acl_code(), Some(npu::error::AclCode(207006)), "{err}");
            let (far, _near) = err.value.expect("both back");
            let (part, _) = DeviceBuffer::<u8>::new(&ctx1, 128)
                .unwrap()
                .into_halves(64)
                .unwrap();
            let err = s.copy_2d_d2d(far, part, shape).await.unwrap_err();
            assert_eq!(invalid(&err.error), ("Stream::copy_2d_d2d", "self"));
            s.synchronize().await.unwrap();
        });
    }
}

/// Held: the parts of a buffer on device 1 used at once by a peer copy on device 0's stream
/// and a memset on device 1's stream, with both devices held and the futures, the peer access
/// and the parts all dropped, keep the allocation until both are done; awaited, the bytes
/// are right.
#[test]
fn parts_of_a_peer_buffer_on_two_devices_keep_the_allocation_and_the_access() {
    let (_guard, ctx, ctx1) = exclusive();
    for strategy in STRATEGIES {
        let (near, far) = (stream(&ctx, strategy), stream(&ctx1, strategy));
        let before = live_allocations(&ctx1);
        let access = ctx.device().enable_peer_access(&ctx1.device()).unwrap();
        let (head, tail) = DeviceBuffer::from_host_blocking(&ctx1, &[1u8; 128])
            .unwrap()
            .into_halves(64)
            .unwrap();
        let holds = [
            sim::hold(&ctx.device()).unwrap(),
            sim::hold(&ctx1.device()).unwrap(),
        ];
        let x = near.copy_d2d(
            head.view(8..).unwrap(),
            DeviceBuffer::new(&ctx, 56).unwrap(),
        );
        let y = far.memset(tail, 2);
        let done = [x.completion().clone(), y.completion().clone()];
        drop((x, y, access));
        assert_eq!(live_allocations(&ctx1), before + 1, "{strategy:?}: in use");
        for hold in holds {
            hold.release().unwrap();
        }
        all_completed(&done);
        assert_eq!(
            live_allocations(&ctx1),
            before,
            "{strategy:?}: freed after both"
        );

        let access = ctx.device().enable_peer_access(&ctx1.device()).unwrap();
        run(async {
            let whole = DeviceBuffer::from_host_blocking(&ctx1, &pattern(128)).unwrap();
            let (head, tail) = whole.into_halves(64).unwrap();
            let x = near.copy_d2d(
                head.view(8..).unwrap(),
                DeviceBuffer::new(&ctx, 56).unwrap(),
            );
            let y = far.memset(tail, 2);
            let ((head, copied), tail) = (x.await.unwrap(), y.await.unwrap());
            assert_eq!(near.download(copied).await.unwrap(), pattern(128)[8..64]);
            let whole = head.into_inner().join(tail).unwrap().into_whole().unwrap();
            let mut expected = pattern(128);
            expected[64..].fill(2);
            assert_eq!(far.download(whole).await.unwrap(), expected, "{strategy:?}");
        });
        drop(access);
    }
}

/// Held: empty views (at the very end of their buffers) and pitched copies of no bytes (no
/// width, with pitches up to `usize::MAX / 8` or rows up to a million) complete or are typed
/// errors, quickly, and touch nothing.
#[test]
fn degenerate_copies_of_empty_views_complete_and_touch_nothing() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            let mut dev = DeviceBuffer::from_host_blocking(&ctx, &[7u8; 4096]).unwrap();
            let shapes = [
                (0, 1, usize::MAX / 8, usize::MAX / 8),
                (0, 3, 0, 0),
                (0, 1_000_000, 0, 0),
                (1, 1, 1 << 40, 1 << 40),
            ];
            for (width, height, src_pitch, dst_pitch) in shapes {
                let shape = Copy2d {
                    width,
                    height,
                    src_pitch,
                    dst_pitch,
                };
                let src = PinnedBuffer::<u8>::new(&ctx, 4096)
                    .unwrap()
                    .view(4096..)
                    .unwrap();
                let outcome = s.copy_2d_h2d(src, dev.view(4096..).unwrap(), shape).await;
                dev = match outcome {
                    Ok((_, dst)) => dst.into_inner(),
                    Err(err) => {
                        assert_eq!(invalid(&err.error).0, "Stream::copy_2d_h2d", "{shape:?}");
                        err.value.unwrap().1.into_inner()
                    }
                };
                let src = DeviceBuffer::<u8>::new(&ctx, 4096)
                    .unwrap()
                    .view(4096..)
                    .unwrap();
                let outcome = s.copy_2d_d2d(src, dev.view(4096..).unwrap(), shape).await;
                dev = match outcome {
                    Ok((_, dst)) => dst.into_inner(),
                    Err(err) => {
                        assert_eq!(invalid(&err.error).0, "Stream::copy_2d_d2d", "{shape:?}");
                        err.value.unwrap().1.into_inner()
                    }
                };
            }
            let (head, tail) = dev.into_halves(4096).unwrap();
            let tail = s.memset(tail, 0).await.unwrap();
            let (tail, _) = s
                .copy_d2h(
                    tail,
                    PinnedBuffer::<u8>::new(&ctx, 1).unwrap().view(1..).unwrap(),
                )
                .await
                .unwrap();
            let dev = head.join(tail).unwrap().into_whole().unwrap();
            assert_eq!(s.download(dev).await.unwrap(), [7; 4096], "{strategy:?}");
        });
    }
}

/// Held: lengths whose byte size overflows, or cannot be a Rust slice, are typed errors
/// naming the API, never a panic or an abort.
#[test]
fn overflowing_lengths_are_typed_errors() {
    let (_guard, ctx, _) = exclusive();
    let err = DeviceBuffer::<u64>::new(&ctx, usize::MAX / 8 + 1).unwrap_err();
    assert_eq!(invalid(&err), ("DeviceBuffer::new", "len"));
    let err = PinnedBuffer::<[u8; 4096]>::new(&ctx, usize::MAX / 4096).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedBuffer::new", "len"));
    for len in [isize::MAX as usize, isize::MAX as usize - 8191] {
        let err = PageAlignedBuffer::<u8>::new(len).unwrap_err();
        assert_eq!(invalid(&err), ("PageAlignedBuffer::new", "len"));
    }
    let pool = PinnedPool::new(&ctx);
    let err = pool.try_alloc::<u64>(usize::MAX / 8).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedPool::try_alloc", "len"));
    let err = DeviceBuffer::<u8>::new(&ctx, 1 << 50).unwrap_err();
    assert!(err.acl_code().is_some(), "{err}");
}

/// Held: a device lost while its memory is queued in a peer copy on a healthy device (and
/// its pinned and registered memory in copies there) resolves every operation with its
/// buffers handed back, and dropping all of it afterwards neither hangs nor crashes.
#[test]
fn a_device_lost_under_queued_peer_and_host_copies_resolves_everything() {
    let (_guard, ctx, _) = exclusive();
    let lost = Device::open(3).unwrap();
    let ctx3 = lost.primary_context().clone();
    let s = stream(&ctx, Strategy::EventPoll);
    let access = ctx.device().enable_peer_access(&lost).unwrap();
    let (head, tail) = DeviceBuffer::from_host_blocking(&ctx3, &[3u8; 128])
        .unwrap()
        .into_halves(64)
        .unwrap();
    let pinned = host(&ctx3, &[4; 64]);
    let data = PageAlignedBuffer::from_slice(&[5u8; 4096]).unwrap();
    let registered = HostRegistration::new(&ctx3, data, RegisterFlags::PINNED).unwrap();
    let hold = sim::hold(&ctx.device()).unwrap();
    let x = s.copy_d2d(head, DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
    let y = s.copy_h2d(pinned, DeviceBuffer::<u8>::new(&ctx, 64).unwrap());
    let z = s.copy_h2d(registered, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
    drop(access);
    sim::lose(&lost).unwrap();
    hold.release().unwrap();
    let outcomes = run(async { (x.await, y.await, z.await) });
    let (x, y, z) = outcomes;
    let head = x.map(|(h, _)| h).unwrap_or_else(|e| e.value.unwrap().0);
    let _ = y.map(|(p, _)| p).unwrap_or_else(|e| e.value.unwrap().0);
    let registered = z.map(|(r, _)| r).unwrap_or_else(|e| e.value.unwrap().0);
    watchdog("dropping a lost device's memory", || {
        drop((head, tail, registered));
        sim::flush_releases();
    });
    // The peer copy reading the lost device's memory failed on this stream (npu-sim fails a
    // copy that reaches a lost device when it runs): the stream may report that failure once
    // more, then runs on.
    run(async {
        if let Err(failed) = s.synchronize().await {
            assert!(failed.error.is_device_lost(), "{}", failed.error);
        }
        s.synchronize().await.unwrap()
    });
}

/// A plain-data element aligned to 128 bytes, more than `aclrtMallocHost` guarantees.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(128))]
struct Wide([u8; 128]);

// SAFETY: 128 bytes of `u8`: no padding, and every bit pattern is a value.
unsafe impl bytemuck::Zeroable for Wide {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for Wide {}

/// Broke: device memory of an element type aligned to more than 64 bytes is legal (and
/// allocated), yet staging it failed: `Stream::upload`, `download` and the staged copies
/// asked their pinned pool for blocks of that type, and the pool refuses it, so the user
/// got an error naming `PinnedPool::alloc`, an API they never called, for valid input. The
/// staging block holds bytes, whatever the element type.
#[test]
fn staged_copies_of_elements_aligned_beyond_pinned_memory_work() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            let data = [Wide([1; 128]), Wide([2; 128]), Wide([3; 128])];
            let device = s.upload(&data).await.expect("upload");
            let (device, back) = s
                .copy_to_vec_staged(s.staging_pool(), device)
                .await
                .expect("copy_to_vec_staged");
            assert_eq!(back, data, "{strategy:?}");
            assert_eq!(back.as_ptr() as usize % 128, 0);
            let device = s
                .copy_from_slice_staged(s.staging_pool(), &data[..1], device.view(2..).unwrap())
                .await
                .expect("copy_from_slice_staged");
            let back = s.download(device.into_inner()).await.expect("download");
            assert_eq!(back, [data[0], data[1], data[0]], "{strategy:?}");
        });
    }
}

/// Held: the parts of one buffer on two streams of two contexts, one of which a
/// `FailureMode::Stop` fault stops (taking the queued work behind the fault with it), resolve
/// with their parts handed back; the healthy part's bytes are right, the allocation is whole
/// again, and with the futures dropped it is freed only once both sides completed.
#[test]
fn parts_on_a_stop_faulted_context_and_a_healthy_one_come_back_whole() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        for dropped in [false, true] {
            let doomed = ctx.device().create_context().unwrap();
            let (bad, good) = (stream(&doomed, strategy), stream(&ctx, strategy));
            bad.set_failure_mode(npu::stream::FailureMode::Stop)
                .unwrap();
            sim::fail_task(&bad, 1, npu::error::AclCode(507015)).unwrap();
            let before = live_allocations(&ctx);
            let whole = DeviceBuffer::from_host_blocking(&ctx, &[1u8; 64]).unwrap();
            let (head, rest) = whole.into_halves(16).unwrap();
            let (middle, tail) = rest.into_halves(16).unwrap();
            let hold = sim::hold(&ctx.device()).unwrap();
            let x = bad.memset(head, 2);
            let y = bad.memset(middle, 3);
            let z = good.memset(tail, 4);
            if dropped {
                let done = [x.completion(), y.completion(), z.completion()].map(|c| c.clone());
                drop((x, y, z));
                assert_eq!(live_allocations(&ctx), before + 1, "{strategy:?}: in use");
                hold.release().unwrap();
                run(async {
                    let results = [done[0].wait().await, done[1].wait().await];
                    assert!(results.iter().all(Result::is_err), "{strategy:?}");
                    done[2].wait().await.unwrap();
                });
                assert_eq!(
                    live_allocations(&ctx),
                    before,
                    "{strategy:?}: freed after all"
                );
                continue;
            }
            hold.release().unwrap();
            run(async {
                let (x, y, z) = (x.await, y.await, z.await);
                let head = x.expect_err("the faulted memset").value.unwrap();
                let middle = y.expect_err("stopped behind the fault").value.unwrap();
                let tail = z.unwrap();
                let whole = head.join(middle).unwrap().join(tail).unwrap();
                let whole = whole.into_whole().unwrap();
                let back = good.download(whole).await.unwrap();
                assert!(back[48..].iter().all(|&b| b == 4), "{strategy:?}: {back:?}");
            });
            assert_eq!(live_allocations(&ctx), before, "{strategy:?}");
        }
    }
}

/// Held: `HostRegistration::into_inner` waits for a use recorded by hand (an operation that
/// does not own the registration), and its future dropped meanwhile leaves the registration
/// registered until that operation completes, then unregisters it.
#[test]
fn a_dropped_into_inner_unregisters_only_after_the_recorded_use() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let registrations = sim::host_stats().unwrap().registrations;
        let data = PageAlignedBuffer::from_slice(&[1u8; 4096]).unwrap();
        let registered = HostRegistration::new(&ctx, data, RegisterFlags::PINNED).unwrap();
        let hold = sim::hold(&ctx.device()).unwrap();
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0);
        registered.record_use(op.completion());
        let mut back = Box::pin(registered.into_inner());
        let waker = std::task::Waker::noop();
        let polled = back
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker));
        assert!(
            polled.is_pending(),
            "{strategy:?}: waits for the recorded use"
        );
        drop(back);
        sim::flush_releases();
        let live = sim::host_stats().unwrap().registrations;
        assert_eq!(live, registrations + 1, "{strategy:?}: still registered");
        hold.release().unwrap();
        run(async { op.await.unwrap() });
        sim::flush_releases();
        let live = sim::host_stats().unwrap().registrations;
        assert_eq!(
            live, registrations,
            "{strategy:?}: unregistered after the use"
        );
    }
}

type Part = npu::memory::Split<DeviceBuffer<u8>>;
type Round<'a> = std::pin::Pin<Box<dyn Future<Output = Vec<Part>> + 'a>>;

/// Held: rounds of random splits, joins, memsets, uploads, downloads, 1D and pitched copies
/// between parts, each round's operations running at once on two streams, keep the buffer's
/// bytes equal to a host model's (every strategy, fixed seeds).
#[test]
fn random_work_on_the_parts_of_one_buffer_matches_a_model() {
    const LEN: usize = 512;
    let (_guard, ctx, _) = exclusive();
    for (seed, strategy) in [1u64, 2, 3, 4, 5, 6]
        .into_iter()
        .zip(STRATEGIES.iter().cycle())
    {
        let streams = [stream(&ctx, *strategy), stream(&ctx, *strategy)];
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut model = pattern(LEN);
        let whole = DeviceBuffer::from_host_blocking(&ctx, &model).unwrap();
        let mut parts = vec![whole.into_halves(0).unwrap().1];
        run(async {
            for round in 0..40 {
                // Split some parts.
                let mut next = Vec::new();
                for part in parts.drain(..) {
                    if part.len() >= 2 && rng.below(2) == 0 {
                        let mid = 1 + rng.below(part.len() - 1);
                        let (a, b) = part.into_halves(mid).unwrap();
                        next.extend([a, b]);
                    } else {
                        next.push(part);
                    }
                }
                // One operation per part (or pair of neighbours), all submitted at once.
                let mut ops: Vec<Round<'_>> = Vec::new();
                let mut queue = next.into_iter().peekable();
                while let Some(part) = queue.next() {
                    let s = &streams[rng.below(2)];
                    let (at, len) = (part.offset(), part.len());
                    match rng.below(5) {
                        0 => {
                            let value = rng.next() as u8;
                            model[at..at + len].fill(value);
                            ops.push(Box::pin(async move {
                                vec![s.memset(part, value).await.unwrap()]
                            }));
                        }
                        1 => {
                            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                            model[at..at + len].copy_from_slice(&data);
                            let src = PinnedBuffer::from_slice(&ctx, &data).unwrap();
                            ops.push(Box::pin(async move {
                                vec![s.copy_h2d(src, part).await.unwrap().1]
                            }));
                        }
                        2 => {
                            let expected = model[at..at + len].to_vec();
                            let dst = PinnedBuffer::<u8>::new(&ctx, len).unwrap();
                            ops.push(Box::pin(async move {
                                let (part, host) = s.copy_d2h(part, dst).await.unwrap();
                                assert_eq!(&host[..], &expected[..], "round {round} at {at}");
                                vec![part]
                            }));
                        }
                        _ if queue.peek().is_some() => {
                            let other = queue.next().unwrap();
                            let (to, room) = (other.offset(), other.len());
                            let (src, dst, from, into) = if rng.below(2) == 0 {
                                (part, other, (at, len), (to, room))
                            } else {
                                (other, part, (to, room), (at, len))
                            };
                            // A pitched shape that fits both: rows of `width` bytes.
                            let width = 1 + rng.below(from.1.min(into.1));
                            let spitch = width + rng.below(from.1 - width + 1);
                            let dpitch = width + rng.below(into.1 - width + 1);
                            let height = (1 + (from.1 - width) / spitch)
                                .min(1 + (into.1 - width) / dpitch)
                                .max(1);
                            let height = 1 + rng.below(height);
                            let shape = Copy2d {
                                width,
                                height,
                                src_pitch: spitch,
                                dst_pitch: dpitch,
                            };
                            let snapshot = model.clone();
                            for row in 0..height {
                                let (r, w) = (from.0 + row * spitch, into.0 + row * dpitch);
                                model[w..w + width].copy_from_slice(&snapshot[r..r + width]);
                            }
                            ops.push(Box::pin(async move {
                                let (src, dst) = s.copy_2d_d2d(src, dst, shape).await.unwrap();
                                vec![src, dst]
                            }));
                        }
                        _ => ops.push(Box::pin(async move { vec![part] })),
                    }
                }
                parts = futures::future::join_all(ops)
                    .await
                    .into_iter()
                    .flatten()
                    .collect();
                parts.sort_by_key(|part| part.offset());
                // Join some neighbours.
                let mut joined: Vec<Part> = Vec::new();
                for part in parts.drain(..) {
                    match joined.pop() {
                        Some(last) if rng.below(2) == 0 => joined.push(last.join(part).unwrap()),
                        Some(last) => joined.extend([last, part]),
                        None => joined.push(part),
                    }
                }
                parts = joined;
            }
            let mut whole = parts.remove(0);
            for part in parts.drain(..) {
                whole = whole.join(part).unwrap();
            }
            let whole = whole.into_whole().unwrap();
            let back = streams[0].download(whole).await.unwrap();
            assert_eq!(back, model, "seed {seed} {strategy:?}");
        });
    }
}
