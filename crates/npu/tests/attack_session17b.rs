//! Attacks of the seventeenth session's second helper, through the `npu` facade: the serving
//! path under load with cancellation (timeouts, `select!`, `JoinHandle::abort`, a runtime
//! shut down under held work) and the accounting afterwards; futures moved between runtimes
//! and executors; contexts, devices and modules dropped under in-flight work; notifies,
//! value words and cross-device event waits; views, splits and casts with parts in flight;
//! `Debug` of every public type at every stage.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::time::Instant;

use common::*;
use npu::Stream;
use npu::prelude::*;
use npu::sim;
use npu::stream::StreamPool;

/// Device memory, pinned memory, registrations and events in use in the simulator for `ctx`'s
/// device, once every deferred release has run.
fn live(ctx: &Context) -> (u64, u64, u64, u64) {
    sim::flush_releases();
    let host = sim::host_stats().unwrap();
    let dev = sim::device_stats(&ctx.device()).unwrap();
    (
        dev.live_allocations,
        host.pinned_allocations,
        host.registrations,
        dev.live_events,
    )
}

/// Waits (bounded) until the simulator's counters for `ctx`'s device are back to `baseline`.
fn back_to(ctx: &Context, baseline: (u64, u64, u64, u64), what: &str) {
    let deadline = Instant::now() + HANG;
    loop {
        let now = live(ctx);
        if now == baseline {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now:?} live, {baseline:?} before"
        );
        std::thread::yield_now();
    }
}

/// Bad input is a typed error naming the API the caller called, not an inner one: the
/// constructors that build on another (`DeviceBuffer::from_host_blocking` on
/// `DeviceBuffer::new`, `PinnedBuffer::from_slice` on `PinnedBuffer::new`,
/// `PageAlignedBuffer::from_slice` on `PageAlignedBuffer::new`, `StreamPool::with_builder` on
/// `StreamBuilder::build`) refuse empty slices, zero-sized and over-aligned elements and
/// unwatchable stream flags in their own name.
#[test]
fn constructors_built_on_others_name_themselves_in_their_errors() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live(&ctx);

    let err = DeviceBuffer::<u32>::from_host_blocking(&ctx, &[]).unwrap_err();
    assert_eq!(invalid(&err).0, "DeviceBuffer::from_host_blocking");
    let err = DeviceBuffer::<()>::from_host_blocking(&ctx, &[(); 3]).unwrap_err();
    assert_eq!(invalid(&err).0, "DeviceBuffer::from_host_blocking");

    let err = PinnedBuffer::<u32>::from_slice(&ctx, &[]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");
    let err = PinnedBuffer::<()>::from_slice(&ctx, &[(); 3]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");
    #[derive(Clone, Copy)]
    #[repr(C, align(8192))]
    struct Aligned([u8; 8192]);
    // SAFETY: plain bytes, no padding (size equals alignment).
    unsafe impl bytemuck::Zeroable for Aligned {}
    // SAFETY: as above.
    unsafe impl bytemuck::Pod for Aligned {}
    let err = PinnedBuffer::<Aligned>::from_slice(&ctx, &[Aligned([0; 8192])]).unwrap_err();
    assert_eq!(invalid(&err).0, "PinnedBuffer::from_slice");

    let err = npu::PageAlignedBuffer::<u32>::from_slice(&[]).unwrap_err();
    assert_eq!(invalid(&err).0, "PageAlignedBuffer::from_slice");

    let unwatchable = Stream::builder(&ctx).flags(npu::ffi::ACL_STREAM_PERSISTENT);
    let err = StreamPool::with_builder(unwatchable, 2).unwrap_err();
    assert_eq!(invalid(&err), ("StreamPool::with_builder", "builder"));

    back_to(&ctx, baseline, "after the refusals");
}
