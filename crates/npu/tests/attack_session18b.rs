//! Attacks of the eighteenth session's second helper: host registrations (across contexts,
//! devices, runtimes and device loss, forgotten copies, element types at the edges), peer
//! copies (pitched, with the guard dropped, racing the loss of the peer), two AscendCL runtimes
//! in one process (every handle of one passed to the other), and pitched copies through views
//! and casts at the edges of their layouts and after faults. All three strategies where a
//! stream is involved; the simulator has twelve devices, and devices 2 to 4 and 6 to 10 are
//! lost by one test each.

mod common;

use std::sync::{Arc, MutexGuard};

use common::*;
use npu::Error;
use npu::memory::{DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, Notify, Op, ValueCondition, ValueWord};

fn exclusive() -> (MutexGuard<'static, ()>, Context, Context) {
    common::exclusive(Some(12))
}

fn registrations() -> u64 {
    sim::flush_releases();
    sim::host_stats().unwrap().registrations
}

fn registered(ctx: &Context, data: &[u32]) -> HostRegistration<PageAlignedBuffer<u32>> {
    let buffer = PageAlignedBuffer::from_slice(data).unwrap();
    HostRegistration::new(ctx, buffer, RegisterFlags::PINNED).unwrap()
}

/// A refused operation: the `(api, argument)` it named, and the value it handed back.
fn refused<T: Send + 'static>(op: Op<T>) -> ((&'static str, &'static str), T) {
    let err = run(op).err().expect("refused");
    (
        invalid(&err.error),
        err.value.expect("the value comes back"),
    )
}

fn ramp(n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect()
}

/// Held: a registration of the in-process runtime given to a stream of the dlopened one is
/// refused by name, both values come back, and the registration still serves its own runtime's
/// copies and unregisters.
#[test]
fn a_registration_given_to_another_runtimes_stream_is_refused_and_stays_usable() {
    let (_guard, ctx, _) = exclusive();
    let foreign = dlopened_simulator().device(0).unwrap();
    let fctx = foreign.primary_context().clone();
    let base = registrations();
    for strategy in STRATEGIES {
        let theirs = stream(&fctx, strategy);
        let data = ramp(1024);
        let reg = registered(&ctx, &data);

        let op = theirs.copy_h2d(reg, DeviceBuffer::<u32>::new(&fctx, 1024).unwrap());
        let (named, (reg, _)) = refused(op);
        assert_eq!(named, ("Stream::copy_h2d", "src"), "{strategy:?}");
        let shape = Copy2d {
            width: 4,
            height: 4,
            src_pitch: 4,
            dst_pitch: 8,
        };
        let op = theirs.copy_2d_d2h(DeviceBuffer::<u32>::new(&fctx, 16).unwrap(), reg, shape);
        let (named, (_, reg)) = refused(op);
        assert_eq!(named, ("Stream::copy_2d_d2h", "dst"), "{strategy:?}");

        let ours = stream(&ctx, strategy);
        let (reg, dev) = run(ours.copy_h2d(reg, DeviceBuffer::new(&ctx, 1024).unwrap())).unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), data, "{strategy:?}");
        assert_eq!(registrations(), base + 1, "{strategy:?}");
        let back = run(reg.into_inner()).unwrap();
        assert_eq!(&back[..], &data[..], "{strategy:?}");
        assert_eq!(registrations(), base, "{strategy:?}: unregistered");
    }
}

/// Held: one buffer registered, used and handed back in turn by device 0's primary context,
/// an explicit context of device 0, device 1 and the dlopened runtime; each round trip is exact
/// and each registration ends.
#[test]
fn a_buffer_registered_in_turn_with_contexts_devices_and_runtimes_copies_exactly() {
    let (_guard, ctx, ctx1) = exclusive();
    let explicit = ctx.device().create_context().unwrap();
    let foreign = dlopened_simulator().device(1).unwrap();
    let fctx = foreign.primary_context().clone();
    let base = registrations();
    for strategy in STRATEGIES {
        let mut buffer = PageAlignedBuffer::from_slice(&ramp(2048)).unwrap();
        for (round, context) in [&ctx, &explicit, &ctx1, &fctx, &ctx]
            .into_iter()
            .enumerate()
        {
            let expected: Vec<u32> = buffer.iter().map(|x| x ^ round as u32).collect();
            buffer.copy_from_slice(&expected);
            let reg = HostRegistration::new(context, buffer, RegisterFlags::PINNED).unwrap();
            let s = stream(context, strategy);
            let (reg, dev) =
                run(s.copy_h2d(reg, DeviceBuffer::new(context, 2048).unwrap())).unwrap();
            // Round trip into the registration itself, after scribbling over it on the device.
            let dev = run(s.memset(dev.view(..1024).unwrap(), 0xab))
                .unwrap()
                .into_inner();
            let (_, reg) = run(s.copy_d2h(dev, reg)).unwrap();
            let mut want = expected.clone();
            want[..1024].fill(0xabab_abab);
            assert_eq!(&reg[..], &want[..], "{strategy:?}, round {round}");
            buffer = run(reg.into_inner()).unwrap();
        }
        assert_eq!(
            registrations(),
            base,
            "{strategy:?}: every registration ended"
        );
    }
}

/// Held: memory registered with device 1's context is host memory like any other for a stream
/// of device 0 (only device memory must be on the stream's device): copies both ways are exact,
/// including a pitched one into a view of the registration.
#[test]
fn a_registration_of_another_device_serves_copies_on_this_device() {
    let (_guard, ctx, ctx1) = exclusive();
    for strategy in STRATEGIES {
        let data = ramp(1024);
        let reg = registered(&ctx1, &data);
        let s = stream(&ctx, strategy);
        let (reg, dev) = run(s.copy_h2d(reg, DeviceBuffer::new(&ctx, 1024).unwrap())).unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), data, "{strategy:?}");
        let mut zeroed = reg;
        zeroed.fill(0);
        // Rows 0..8 of 16 elements, 32 apart on the device, into the tail of the registration.
        let shape = Copy2d {
            width: 16,
            height: 8,
            src_pitch: 32,
            dst_pitch: 16,
        };
        let tail = zeroed.view(1024 - 128..).unwrap();
        let (_, tail) = run(s.copy_2d_d2h(dev, tail, shape)).unwrap();
        let reg = tail.into_inner();
        let mut want = vec![0u32; 1024];
        for row in 0..8 {
            want[896 + row * 16..896 + row * 16 + 16]
                .copy_from_slice(&data[row * 32..row * 32 + 16]);
        }
        assert_eq!(&reg[..], &want[..], "{strategy:?}");
        drop(reg);
    }
}

/// A registration dropped or handed back after its device was lost, with copies queued on the
/// held device and one copy's future dropped: every future resolves, and every registration
/// ends (the memory is host memory; a lost device can never touch it again).
#[test]
fn registrations_on_a_lost_device_resolve_and_are_not_leaked() {
    let (_guard, _ctx, _) = exclusive();
    for (i, strategy) in STRATEGIES.into_iter().enumerate() {
        let device = Device::open(2 + i as u32).unwrap();
        let dctx = device.primary_context().clone();
        let base = registrations();
        let s = stream(&dctx, strategy);
        let hold = sim::hold(&device).unwrap();
        let kept = s.copy_h2d(
            registered(&dctx, &ramp(1024)),
            DeviceBuffer::new(&dctx, 1024).unwrap(),
        );
        let dropped = s.copy_h2d(
            registered(&dctx, &ramp(1024)),
            DeviceBuffer::new(&dctx, 1024).unwrap(),
        );
        drop(dropped);
        let idle = registered(&dctx, &ramp(1024));
        let late = registered(&dctx, &ramp(1024));
        let late_dst = DeviceBuffer::<u32>::new(&dctx, 1024).unwrap();
        assert_eq!(registrations(), base + 4, "{strategy:?}");
        sim::lose(&device).unwrap();
        drop(hold);
        let failed = run(kept).expect_err("the device was lost");
        let (reg, _) = failed.value.expect("handed back");
        drop(reg);
        drop(idle);
        // A copy submitted after the loss is refused and hands the registration back.
        let after = run(s.copy_h2d(late, late_dst));
        let late = match after {
            Ok((reg, _)) => reg,
            Err(err) => err.value.expect("handed back").0,
        };
        let back = run(late.into_inner());
        until_released(
            &format!("{strategy:?}: registrations of a lost device"),
            || sim::host_stats().unwrap().registrations == base,
        );
        assert!(
            back.is_ok(),
            "{strategy:?}: into_inner after loss: {back:?}"
        );
    }
}

/// Held: `mem::forget` on a copy out of a registration only leaks: the registration stays
/// registered (never unregistered under the device), the stream keeps working.
#[test]
fn a_forgotten_copy_from_a_registration_only_leaks_it() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let base = registrations();
        let s = stream(&ctx, strategy);
        let hold = sim::hold(&ctx.device()).unwrap();
        let op = s.copy_h2d(
            registered(&ctx, &ramp(1024)),
            DeviceBuffer::new(&ctx, 1024).unwrap(),
        );
        std::mem::forget(op);
        drop(hold);
        run(s.synchronize()).unwrap();
        assert_eq!(registrations(), base + 1, "{strategy:?}: leaked, not freed");
        let data = ramp(1024);
        let (_, dev) = run(s.copy_h2d(
            registered(&ctx, &data),
            DeviceBuffer::new(&ctx, 1024).unwrap(),
        ))
        .unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), data, "{strategy:?}");
        assert_eq!(registrations(), base + 1, "{strategy:?}");
    }
}

/// A page of bytes, aligned to a page: a `Vec<Page>` is page-aligned whole pages.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
struct Page([u8; 4096]);

/// Held: element types at the edges of `StableBuffer`: zero-sized elements (no bytes) are
/// refused by name with the buffer handed back; page-sized, page-aligned elements in a `Vec`
/// register and copy exactly, viewed as bytes.
#[test]
fn zero_sized_and_page_sized_elements_register_or_are_refused_by_name() {
    let (_guard, ctx, _) = exclusive();
    let base = registrations();
    let nothing = vec![(); 1 << 20];
    let rejected = HostRegistration::new(&ctx, nothing, RegisterFlags::PINNED).unwrap_err();
    assert_eq!(
        invalid(&rejected.error),
        ("HostRegistration::new", "buffer")
    );
    assert_eq!(rejected.buffer.len(), 1 << 20);
    let empty: Vec<Page> = Vec::new();
    let rejected = HostRegistration::new(&ctx, empty, RegisterFlags::PINNED).unwrap_err();
    assert_eq!(
        invalid(&rejected.error),
        ("HostRegistration::new", "buffer")
    );

    for strategy in STRATEGIES {
        let mut pages: Vec<Page> = vec![Page([0; 4096]); 3];
        for (i, page) in pages.iter_mut().enumerate() {
            page.0.fill(i as u8 + 1);
        }
        let reg = HostRegistration::new(&ctx, pages, RegisterFlags::PINNED).unwrap();
        assert_eq!(registrations(), base + 1);
        let s = stream(&ctx, strategy);
        let bytes = reg.cast::<u8>().unwrap();
        let (bytes, dev) =
            run(s.copy_h2d(bytes, DeviceBuffer::<u8>::new(&ctx, 3 * 4096).unwrap())).unwrap();
        let got = dev.to_vec_blocking().unwrap();
        for (i, chunk) in got.chunks(4096).enumerate() {
            assert!(
                chunk.iter().all(|&b| b == i as u8 + 1),
                "{strategy:?}: page {i}"
            );
        }
        let pages = run(bytes.into_inner().into_inner()).unwrap();
        assert_eq!(pages[2].0[4095], 3);
        assert_eq!(registrations(), base, "{strategy:?}");
    }
}

/// Held: a pitched cross-device copy queued on a held device keeps the peer access it was
/// accepted under after the user's guard is dropped, moves exactly its rows, and the access
/// ends once the copy has completed.
#[test]
fn a_pitched_peer_copy_keeps_peer_access_after_the_guard_is_dropped() {
    let (_guard, ctx, ctx1) = exclusive();
    let (d0, d1) = (ctx.device(), ctx1.device());
    for strategy in STRATEGIES {
        let access = d0.enable_peer_access(&d1).unwrap();
        let s = stream(&ctx, strategy);
        let data = ramp(64);
        let src = DeviceBuffer::from_host_blocking(&ctx, &data).unwrap();
        let dst = DeviceBuffer::<u32>::from_host_blocking(&ctx1, &[7; 40]).unwrap();
        let shape = Copy2d {
            width: 3,
            height: 8,
            src_pitch: 8,
            dst_pitch: 5,
        };
        let hold = sim::hold(&d0).unwrap();
        let op = s.copy_2d_d2d(src, dst.view(2..).unwrap(), shape);
        drop(access);
        assert!(
            d0.peer_access_to(&d1).is_some(),
            "{strategy:?}: the copy holds it"
        );
        drop(hold);
        let (_, dst) = run(op).unwrap();
        let got = dst.into_inner().to_vec_blocking().unwrap();
        let mut want = vec![7u32; 40];
        for row in 0..8 {
            for col in 0..3 {
                want[2 + row * 5 + col] = data[row * 8 + col];
            }
        }
        assert_eq!(got, want, "{strategy:?}");
        until_released(&format!("{strategy:?}: peer access disabled"), || {
            d0.peer_access_to(&d1).is_none()
        });
    }
}

/// Held: peer copies (linear and pitched, one future dropped) queued on a held device whose
/// peer is lost meanwhile, the peer's memory in an explicit context whose handle is dropped:
/// everything resolves, the peer's allocations and the guard are released, and the stream's
/// device goes on working.
#[test]
fn peer_copies_racing_the_loss_of_the_peer_resolve_and_release_everything() {
    let (_guard, _ctx, _) = exclusive();
    for (i, strategy) in STRATEGIES.into_iter().enumerate() {
        let (a, b) = (
            Device::open(5).unwrap(),
            Device::open(7 + i as u32).unwrap(),
        );
        let actx = a.primary_context().clone();
        let bctx = b.create_context().unwrap();
        let access = a.enable_peer_access(&b).unwrap();
        let base_a = live_allocations(&actx);
        let s = stream(&actx, strategy);
        let src = DeviceBuffer::from_host_blocking(&actx, &ramp(256)).unwrap();
        let hold = sim::hold(&a).unwrap();
        let linear = s.copy_d2d(Arc::new(src), DeviceBuffer::<u32>::new(&bctx, 256).unwrap());
        let shape = Copy2d {
            width: 4,
            height: 16,
            src_pitch: 16,
            dst_pitch: 4,
        };
        let pitched = s.copy_2d_d2d(
            DeviceBuffer::<u32>::new(&bctx, 256).unwrap(),
            DeviceBuffer::<u32>::new(&actx, 64).unwrap(),
            shape,
        );
        drop(pitched);
        drop(bctx);
        drop(access);
        sim::lose(&b).unwrap();
        drop(hold);
        let _ = run(linear);
        until_released(&format!("{strategy:?}: the guard of a lost peer"), || {
            a.peer_access_to(&b).is_none()
        });
        until_released(&format!("{strategy:?}: device {} memory", a.id()), || {
            live_allocations(&actx) == base_a
        });
        let data = ramp(64);
        let (_, back) = run(s.copy_h2d(
            PinnedBuffer::from_slice(&actx, &data).unwrap(),
            DeviceBuffer::new(&actx, 64).unwrap(),
        ))
        .unwrap();
        assert_eq!(back.to_vec_blocking().unwrap(), data, "{strategy:?}");
    }
}

/// Every handle of one runtime passed to the other's API, in both directions, is a typed error
/// naming the method and the argument, and hands the values back.
#[test]
fn every_handle_of_another_runtime_is_refused_by_name() {
    let (_guard, ctx, _) = exclusive();
    let foreign = dlopened_simulator().device(0).unwrap();
    let fctx = foreign.primary_context().clone();
    for (strategy, (here, there)) in STRATEGIES
        .into_iter()
        .flat_map(|s| [(s, (&ctx, &fctx)), (s, (&fctx, &ctx))])
    {
        let s = stream(here, strategy);
        let theirs = |n| DeviceBuffer::<u32>::new(there, n).unwrap();
        let ours = |n| DeviceBuffer::<u32>::new(here, n).unwrap();
        let what = format!("{strategy:?}, stream of {}", here.runtime().backend());

        let (named, _) = refused(s.memset(theirs(4), 0));
        assert_eq!(named, ("Stream::memset", "dst"), "{what}");
        let shape = Copy2d {
            width: 2,
            height: 2,
            src_pitch: 2,
            dst_pitch: 2,
        };
        let (named, _) = refused(s.copy_2d_d2d(theirs(4), ours(4), shape));
        assert_eq!(named, ("Stream::copy_2d_d2d", "src"), "{what}");
        let (named, _) = refused(s.copy_2d_d2d(ours(4), theirs(4), shape));
        assert_eq!(named, ("Stream::copy_2d_d2d", "dst"), "{what}");
        let host = PinnedBuffer::<u32>::new(there, 4).unwrap();
        let (named, _) = refused(s.copy_2d_h2d(host, ours(4), shape));
        assert_eq!(named, ("Stream::copy_2d_h2d", "src"), "{what}");

        let word = ValueWord::new(there, 0).unwrap();
        let (named, word) = refused(s.write_value(word, 1));
        assert_eq!(named, ("Stream::write_value", "word"), "{what}");
        let (named, _) = refused(s.wait_value(word, 1, ValueCondition::Equal));
        assert_eq!(named, ("Stream::wait_value", "word"), "{what}");
        let notify = Notify::new(there).unwrap();
        let (named, _) = refused(s.record_notify(&notify));
        assert_eq!(named, ("Stream::record_notify", "notify"), "{what}");
        let (named, _) = refused(s.wait_notify(&notify));
        assert_eq!(named, ("Stream::wait_notify", "notify"), "{what}");

        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(there, sim::kernel::LIBRARY_PATH) }.unwrap();
        let scale = module.function("scale_f32").unwrap();
        let x = DeviceBuffer::<f32>::new(here, 4).unwrap();
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n = 4 elements of x.
        let err = run(unsafe { s.launch(&scale, 1, (x, 4u64, 2.0f32)) }).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::launch", "function"),
            "{what}"
        );
        assert!(err.value.is_some(), "{what}: the arguments come back");
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(here, sim::kernel::LIBRARY_PATH) }.unwrap();
        let scale = module.function("scale_f32").unwrap();
        let x = DeviceBuffer::<f32>::new(there, 4).unwrap();
        // SAFETY: as above; the argument is refused before any launch.
        let err = run(unsafe { s.launch(&scale, 1, (x, 4u64, 2.0f32)) }).unwrap_err();
        let (api, _) = invalid(&err.error);
        assert_eq!(api, "Stream::launch", "{what}");
        assert!(err.value.is_some(), "{what}: the arguments come back");

        let pool = DevicePool::new(there).unwrap();
        let err = run(pool.alloc::<u32>(&s, 16)).unwrap_err();
        assert_eq!(invalid(&err), ("DevicePool::alloc", "stream"), "{what}");
        let staging = PinnedPool::new(here);
        let err = run(s.copy_from_slice_staged(&staging, &[1u32; 4], theirs(4))).unwrap_err();
        let (api, argument) = invalid(&err.error);
        assert_eq!(
            (api, argument),
            ("Stream::copy_from_slice_staged", "dst"),
            "{what}"
        );
        let foreign_staging = PinnedPool::new(there);
        let err = run(s.copy_from_slice_staged(&foreign_staging, &[1u32; 4], ours(4))).unwrap_err();
        let (api, argument) = invalid(&err.error);
        assert_eq!(
            (api, argument),
            ("Stream::copy_from_slice_staged", "pool"),
            "{what}"
        );
        let err = run(s.copy_to_vec_staged(&foreign_staging, ours(4))).unwrap_err();
        let (api, argument) = invalid(&err.error);
        assert_eq!(
            (api, argument),
            ("Stream::copy_to_vec_staged", "pool"),
            "{what}"
        );
        let err = run(s.download(theirs(4))).unwrap_err();
        assert_eq!(invalid(&err.error), ("Stream::download", "src"), "{what}");

        // The stream still works.
        let (_, back) =
            run(s.copy_h2d(PinnedBuffer::from_slice(here, &[5u32; 4]).unwrap(), ours(4))).unwrap();
        assert_eq!(back.to_vec_blocking().unwrap(), [5; 4], "{what}");
    }
}

/// Held: work of the dlopened runtime resolves with its data after every handle of that
/// runtime (the runtime, its device, context and stream) was dropped before it was awaited, and
/// the in-process runtime's work awaited beside it is unaffected.
#[test]
fn a_foreign_runtimes_work_resolves_after_every_handle_of_it_is_dropped() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let data = ramp(1 << 16);
        let (up, down) = {
            let runtime = dlopened_simulator();
            let device = runtime.device(1).unwrap();
            let fctx = device.primary_context().clone();
            let s = stream(&fctx, strategy);
            let up = s.copy_h2d(
                PinnedBuffer::from_slice(&fctx, &data).unwrap(),
                DeviceBuffer::new(&fctx, 1 << 16).unwrap(),
            );
            let dev = DeviceBuffer::from_host_blocking(&fctx, &data).unwrap();
            let down = s.copy_d2h(dev, PinnedBuffer::<u32>::new(&fctx, 1 << 16).unwrap());
            (up, down)
        };
        let ours = stream(&ctx, strategy);
        let local = ours.copy_h2d(
            PinnedBuffer::from_slice(&ctx, &data).unwrap(),
            DeviceBuffer::new(&ctx, 1 << 16).unwrap(),
        );
        let (up, down, local) = run(async { (up.await, down.await, local.await) });
        let (_, dev) = up.unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), data, "{strategy:?}");
        let (_, host) = down.unwrap();
        assert_eq!(&host[..], &data[..], "{strategy:?}");
        let (_, dev) = local.unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), data, "{strategy:?}");
    }
}

/// Pitched copies through casts of views that end exactly at the last element of their
/// buffer move exactly those rows; one more row is a typed error naming the buffer, handing
/// both back untouched.
#[test]
fn pitched_copies_through_casts_of_views_reach_exactly_the_last_element() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let bytes: Vec<u8> = (0..64).collect();
        // 56 bytes from byte 8: 14 u32, the last one ending at the buffer's end.
        let src = DeviceBuffer::from_host_blocking(&ctx, &bytes).unwrap();
        let src = src.view(8..).unwrap().cast::<u32>().unwrap();
        let host = PinnedBuffer::<u8>::new(&ctx, 48).unwrap();
        let dst = host.view(8..).unwrap().cast::<u32>().unwrap(); // 10 u32
        // 5 rows of 2, 3 apart in the source (its last row is elements 12 and 13, the very
        // end), packed in the destination (elements 0..10, its very end).
        let fits = Copy2d {
            width: 2,
            height: 5,
            src_pitch: 3,
            dst_pitch: 2,
        };
        let too_wide = Copy2d {
            dst_pitch: 3,
            ..fits
        };
        let (named, (src, dst)) = refused(s.copy_2d_d2h(src, dst, too_wide));
        assert_eq!(named, ("Stream::copy_2d_d2h", "dst"), "{strategy:?}");
        // One element shorter at the start: the last row would run past the end.
        let src = src
            .into_inner()
            .into_inner()
            .view(12..)
            .unwrap()
            .cast::<u32>()
            .unwrap();
        let (named, (src, dst)) = refused(s.copy_2d_d2h(src, dst, fits));
        assert_eq!(named, ("Stream::copy_2d_d2h", "src"), "{strategy:?}");
        let src = src
            .into_inner()
            .into_inner()
            .view(8..)
            .unwrap()
            .cast::<u32>()
            .unwrap();
        let (src, dst) = run(s.copy_2d_d2h(src, dst, fits)).unwrap();
        let host = dst.into_inner().into_inner();
        let mut want = [0u8; 48];
        for row in 0..5 {
            let from = 8 + row * 12;
            want[8 + row * 8..16 + row * 8].copy_from_slice(&bytes[from..from + 8]);
        }
        assert_eq!(&host[..], &want[..], "{strategy:?}");
        // The source is unchanged by the refusals and the copy.
        let src = src.into_inner().into_inner();
        assert_eq!(src.to_vec_blocking().unwrap(), bytes, "{strategy:?}");
    }
}

/// A pitched copy after faults: the one the device faults hands both buffers back with the
/// fault, and the next pitched copy on the same stream (continuing mode) is exact; on a stream
/// whose device was lost, pitched copies are refused with a device error, never a hang.
#[test]
fn pitched_copies_after_faults_hand_back_and_the_next_one_is_exact() {
    let (_guard, ctx, _) = exclusive();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let shape = Copy2d {
            width: 3,
            height: 4,
            src_pitch: 4,
            dst_pitch: 3,
        };
        let data = ramp(16);
        sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
        let failed = run(s.copy_2d_h2d(
            PinnedBuffer::from_slice(&ctx, &data).unwrap(),
            DeviceBuffer::<u32>::new(&ctx, 12).unwrap(),
            shape,
        ))
        .expect_err("faulted");
        assert!(failed.value.is_some(), "{strategy:?}: handed back");
        let _ = run(s.synchronize());
        let (_, dev) = run(s.copy_2d_h2d(
            PinnedBuffer::from_slice(&ctx, &data).unwrap(),
            DeviceBuffer::<u32>::new(&ctx, 12).unwrap(),
            shape,
        ))
        .unwrap();
        let want: Vec<u32> = (0..4)
            .flat_map(|r| data[r * 4..r * 4 + 3].to_vec())
            .collect();
        assert_eq!(dev.to_vec_blocking().unwrap(), want, "{strategy:?}");
    }
    // A device lost under queued pitched copies (device 6), then pitched copies on its
    // streams with memory allocated before the loss.
    let device = Device::open(6).unwrap();
    let dctx = device.primary_context().clone();
    let shape = Copy2d {
        width: 2,
        height: 2,
        src_pitch: 2,
        dst_pitch: 2,
    };
    let streams = STRATEGIES.map(|strategy| stream(&dctx, strategy));
    let later: Vec<_> = STRATEGIES
        .iter()
        .map(|_| DeviceBuffer::<u32>::new(&dctx, 4).unwrap())
        .collect();
    let hold = sim::hold(&device).unwrap();
    let queued: Vec<_> = streams
        .iter()
        .map(|s| {
            s.copy_2d_d2d(
                DeviceBuffer::<u32>::new(&dctx, 4).unwrap(),
                DeviceBuffer::<u32>::new(&dctx, 4).unwrap(),
                shape,
            )
        })
        .collect();
    sim::lose(&device).unwrap();
    drop(hold);
    for ((s, queued), dev) in streams.iter().zip(queued).zip(later) {
        let strategy = s.strategy();
        let err = run(queued).expect_err("lost");
        assert!(err.value.is_some(), "{strategy:?}");
        let host = PinnedBuffer::<u32>::new(&ctx, 4).unwrap();
        let err = run(s.copy_2d_d2h(dev, host, shape)).expect_err("lost");
        assert!(err.value.is_some(), "{strategy:?}");
        assert!(
            !matches!(err.error, Error::InvalidArgument { .. }),
            "{strategy:?}: {}",
            err.error
        );
    }
}

/// Held: registering with a context whose device was lost either fails, handing the buffer
/// back unchanged, or registers memory that a drop (and `into_inner`) unregisters (plain and
/// mapped); nothing is left registered. npu-sim accepts it: registration is host bookkeeping.
#[test]
fn registering_on_a_lost_device_leaks_nothing_either_way() {
    let (_guard, _ctx, _) = exclusive();
    let device = Device::open(10).unwrap();
    let dctx = device.primary_context().clone();
    let base = registrations();
    sim::lose(&device).unwrap();
    for flags in [
        RegisterFlags::PINNED,
        RegisterFlags::PINNED | RegisterFlags::MAPPED,
    ] {
        for give_back in [false, true] {
            let data = ramp(2048);
            let buffer = PageAlignedBuffer::from_slice(&data).unwrap();
            match HostRegistration::new(&dctx, buffer, flags) {
                Err(rejected) => {
                    assert!(
                        !matches!(rejected.error, Error::InvalidArgument { .. }),
                        "a device error, not bad input: {}",
                        rejected.error
                    );
                    assert_eq!(&rejected.buffer[..], &data[..]);
                }
                Ok(reg) if give_back => {
                    assert_eq!(registrations(), base + 1);
                    let back = run(reg.into_inner()).unwrap();
                    assert_eq!(&back[..], &data[..]);
                }
                Ok(reg) => drop(reg),
            }
            assert_eq!(registrations(), base, "{flags:?}, into_inner {give_back}");
        }
    }
}

/// Held: one registration shared through an `Arc` by copies on streams of two devices, both
/// futures dropped while both devices are held: the `Arc` cannot be unwrapped, and the memory
/// stays registered, until both copies completed; then it comes back whole.
#[test]
fn a_registration_shared_by_copies_on_two_devices_comes_back_after_both() {
    let (_guard, ctx, ctx1) = exclusive();
    for strategy in STRATEGIES {
        let base = registrations();
        let data = ramp(1024);
        let shared = Arc::new(registered(&ctx, &data));
        let (s0, s1) = (stream(&ctx, strategy), stream(&ctx1, strategy));
        let (h0, h1) = (
            sim::hold(&ctx.device()).unwrap(),
            sim::hold(&ctx1.device()).unwrap(),
        );
        let done0 = {
            let op = s0.copy_h2d(shared.clone(), DeviceBuffer::new(&ctx, 1024).unwrap());
            op.completion().clone()
        };
        let done1 = {
            let op = s1.copy_h2d(shared.clone(), DeviceBuffer::new(&ctx1, 1024).unwrap());
            op.completion().clone()
        };
        let shared = Arc::try_unwrap(shared).expect_err("both copies hold it");
        drop(h0);
        all_completed(&[done0]);
        sim::flush_releases();
        let shared = Arc::try_unwrap(shared).expect_err("device 1's copy still holds it");
        assert_eq!(registrations(), base + 1, "{strategy:?}");
        drop(h1);
        all_completed(&[done1]);
        let mut shared = Some(shared);
        until_released(&format!("{strategy:?}: both copies let go"), || {
            Arc::strong_count(shared.as_ref().unwrap()) == 1
        });
        let reg = Arc::try_unwrap(shared.take().unwrap()).unwrap();
        let back = run(reg.into_inner()).unwrap();
        assert_eq!(&back[..], &data[..], "{strategy:?}");
        assert_eq!(registrations(), base, "{strategy:?}");
    }
}

/// Held: a device-pool block of device 1 written by a peer copy that a held device 0 performs,
/// the copy's future dropped: the pool never hands the block out again (on either backend)
/// until the copy has completed, and the block then holds the copy's bytes.
#[test]
fn a_pool_block_written_by_a_held_peer_copy_is_not_handed_out_again_early() {
    let (_guard, ctx, ctx1) = exclusive();
    let (d0, d1) = (ctx.device(), ctx1.device());
    for backend in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let access = d0.enable_peer_access(&d1).unwrap();
            let (s0, s1) = (stream(&ctx, strategy), stream(&ctx1, strategy));
            let pool = DevicePool::builder(&ctx1)
                .backend(backend)
                .capacity(2 * 4096)
                .build()
                .unwrap();
            let block = run(pool.alloc::<u32>(&s1, 1024)).unwrap();
            let addr = block.addr();
            let data = ramp(1024);
            let src = DeviceBuffer::from_host_blocking(&ctx, &data).unwrap();
            let hold = sim::hold(&d0).unwrap();
            let done = {
                let op = s0.copy_d2d(src, block);
                op.completion().clone()
            };
            drop(access);
            // The pool has room for one more block: it must not be the one in flight.
            let other = pool.try_alloc::<u32>(&s1, 1024).unwrap();
            if let Some(other) = &other {
                assert_ne!(other.addr(), addr, "{what}: the block in flight came back");
            }
            assert!(
                pool.try_alloc::<u32>(&s1, 1024).unwrap().is_none(),
                "{what}: the block in flight is counted out"
            );
            drop(other);
            drop(hold);
            all_completed(&[done]);
            sim::flush_releases();
            // Now both blocks may come back; the copied one holds the copy's bytes.
            let a = run(pool.alloc::<u32>(&s1, 1024)).unwrap();
            let b = run(pool.alloc::<u32>(&s1, 1024)).unwrap();
            let copied = if a.addr() == addr { a } else { b };
            assert_eq!(copied.addr(), addr, "{what}: the block came back");
            let (_, host) =
                run(s1.copy_d2h(copied, PinnedBuffer::<u32>::new(&ctx1, 1024).unwrap())).unwrap();
            assert_eq!(&host[..], &data[..], "{what}");
        }
    }
}
