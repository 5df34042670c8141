//! Attacks of the twenty-ninth session's second helper, through the `npu` facade: parts of
//! parts of buffers down to empty ones at the very end, pitched (2D) copies whose last row
//! ends exactly at, or one element past, the end of a view, halves of one buffer in flight on
//! two streams, host registrations used across devices, and event timing and waits (elapsed
//! times of unfinished, reversed and foreign records; waits whose event is recorded again or
//! dropped while the wait is queued). Each test names the promise it attacks.
//!
//! Every test takes the device lock; every wait is bounded (`run`), so a hang fails its test.

mod common;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use npu::error::AclCode;
use npu::memory::{HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::sim;
use npu::stream::Copy2d;

/// Devices 0 and 1 to this test alone.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    exclusive(Some(2))
}

/// Bytes `0..n` as a pattern nothing else writes.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 + 1).collect()
}

/// Parts of parts of one buffer down to empty ones at its start and at its very end: memsets
/// and copies of the empty parts touch nothing, a copy from a view of one part into another
/// is exact, and the parts join back into the whole buffer.
#[test]
fn parts_of_parts_down_to_empty_ends_copy_exactly_and_join_back() {
    let (_guard, d0, _d1) = devices();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let whole = DeviceBuffer::from_host_blocking(&d0, &pattern(64)).unwrap();
        run(async {
            let (left, end) = whole.into_halves(64).unwrap();
            assert_eq!(end.len(), 0, "the part at the very end is empty");
            let (start, left) = left.into_halves(0).unwrap();
            let (body, tail) = left.into_halves(60).unwrap();
            let (tail, tail_end) = tail.into_halves(4).unwrap();
            let end = s.memset(end, 0xEE).await.unwrap();
            let start = s.memset(start, 0xEE).await.unwrap();
            let tail_end = s.memset(tail_end, 0xEE).await.unwrap();
            // A view of one part as the source, a part of a part as the destination.
            let (head, tail) = s.copy_d2d(body.view(..4).unwrap(), tail).await.unwrap();
            // Empty views at the very end of a part, in both roles of one copy.
            let (head, empty) = s
                .copy_d2d(head.into_inner().view(60..).unwrap(), end.view(..).unwrap())
                .await
                .unwrap();
            let body = head.into_inner();
            let end = empty.into_inner();
            let err = body.view(61..).unwrap_err();
            assert_eq!(invalid(&err.error).0, "Memory::view", "{}", err.error);
            let body = err.value.unwrap();
            let tail = tail.join(tail_end).unwrap();
            let left = start.join(body).unwrap().join(tail).unwrap();
            let whole = left.join(end).unwrap().into_whole().unwrap();
            let mut expected = pattern(64);
            expected.copy_within(..4, 60);
            assert_eq!(s.download(whole).await.unwrap(), expected, "{strategy:?}");
        });
    }
}

/// The pitched copies' shape: `ROWS` rows of `WIDTH` elements, `PITCH` apart in the source
/// and packed in the destination.
const ROWS: usize = 4;
const WIDTH: usize = 3;
const PITCH: usize = 5;
/// The elements the copy spans in its source: `(ROWS - 1) * PITCH + WIDTH`.
const SPAN: usize = (ROWS - 1) * PITCH + WIDTH;

fn shape() -> Copy2d {
    Copy2d {
        width: WIDTH,
        height: ROWS,
        src_pitch: PITCH,
        dst_pitch: WIDTH,
    }
}

/// What [`shape`] copies out of `source`.
fn rows_of(source: &[u8]) -> Vec<u8> {
    (0..ROWS)
        .flat_map(|row| source[row * PITCH..row * PITCH + WIDTH].to_vec())
        .collect()
}

/// Asserts that `err` refuses `api`'s argument `argument`, and hands back its value.
fn refused<T>(err: npu::stream::OpError<T>, api: &str, argument: &str) -> T {
    assert_eq!(invalid(&err.error), (api, argument), "{}", err.error);
    err.value.expect("a refused copy hands its buffers back")
}

/// A pitched copy in every direction whose source is a view ending exactly where the copy's
/// last row ends is exact and touches nothing around it; the same copy from a view one element
/// shorter is a typed error naming the API and `src`, and one into a destination one element
/// short names `dst`; the buffers come back untouched.
#[test]
fn two_dimensional_copies_end_exactly_at_a_views_end_or_are_refused() {
    let (_guard, d0, _d1) = devices();
    let data = pattern(SPAN + 2);
    // The source view is data[1..1 + SPAN]: its last row ends at its last element.
    let expected = rows_of(&data[1..]);
    let packed = ROWS * WIDTH;
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        run(async {
            // Host to device.
            let host = PinnedBuffer::from_slice(&d0, &data).unwrap();
            let dst = DeviceBuffer::<u8>::new(&d0, packed + 1).unwrap();
            let dst = s.memset(dst, 0xAA).await.unwrap();
            let (host, dst) = s
                .copy_2d_h2d(
                    host.view(1..=SPAN).unwrap(),
                    dst.view(..packed).unwrap(),
                    shape(),
                )
                .await
                .unwrap();
            let mut want = expected.clone();
            want.push(0xAA);
            let dst = dst.into_inner();
            assert_eq!(dst.to_vec_blocking().unwrap(), want);
            let api = "Stream::copy_2d_h2d";
            let short = host.into_inner().view(1..SPAN).unwrap();
            let (short, dst) = refused(
                s.copy_2d_h2d(short, dst.view(..packed).unwrap(), shape())
                    .await
                    .unwrap_err(),
                api,
                "src",
            );
            let host = short.into_inner();
            let (host, dst) = refused(
                s.copy_2d_h2d(
                    host.view(1..=SPAN).unwrap(),
                    dst.into_inner().view(1..packed).unwrap(),
                    shape(),
                )
                .await
                .unwrap_err(),
                api,
                "dst",
            );
            assert_eq!(
                &host.into_inner()[..],
                &data[..],
                "refused: source untouched"
            );
            assert_eq!(dst.into_inner().to_vec_blocking().unwrap(), want);

            // Device to host.
            let device = DeviceBuffer::from_host_blocking(&d0, &data).unwrap();
            let host = PinnedBuffer::from_slice(&d0, &[0xAAu8; 13]).unwrap();
            let (device, host) = s
                .copy_2d_d2h(
                    device.view(1..=SPAN).unwrap(),
                    host.view(1..=packed).unwrap(),
                    shape(),
                )
                .await
                .unwrap();
            let host = host.into_inner();
            assert_eq!(host[0], 0xAA);
            assert_eq!(&host[1..], &expected[..]);
            let (device, _) = refused(
                s.copy_2d_d2h(
                    device.into_inner().view(2..=SPAN).unwrap(),
                    host.view(1..).unwrap(),
                    shape(),
                )
                .await
                .unwrap_err(),
                "Stream::copy_2d_d2h",
                "src",
            );

            // Device to device, between the halves of one buffer: the source half ends
            // exactly where the copy's last row does, the destination half is packed.
            let _ = device;
            let mut both = data[1..=SPAN].to_vec();
            both.extend([0xAA; ROWS * WIDTH + 1]);
            let whole = DeviceBuffer::from_host_blocking(&d0, &both).unwrap();
            let (src, dst) = whole.into_halves(SPAN).unwrap();
            let (src, dst) = refused(
                s.copy_2d_d2d(src, dst.view(2..).unwrap(), shape())
                    .await
                    .unwrap_err(),
                "Stream::copy_2d_d2d",
                "dst",
            );
            let (src, dst) = s
                .copy_2d_d2d(src, dst.into_inner().view(..packed).unwrap(), shape())
                .await
                .unwrap();
            let whole = src.join(dst.into_inner()).unwrap().into_whole().unwrap();
            let mut want = data[1..=SPAN].to_vec();
            want.extend(&expected);
            want.push(0xAA);
            assert_eq!(s.download(whole).await.unwrap(), want, "{strategy:?}");
        });
    }
}

/// One half of a buffer written by a kernel held running on one stream while the other half
/// is filled, copied and read back on another stream: the other half's work completes while
/// the kernel still runs (nothing orders it behind the first half), exactly, and neither
/// touches the first half; the halves join once both are back. Every strategy.
#[test]
fn the_other_half_of_a_buffer_in_flight_on_another_stream_is_used_independently() {
    let (_guard, d0, _d1) = devices();
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let (writer, other) = (stream(&d0, strategy), stream(&d0, strategy));
        let whole = DeviceBuffer::from_host_blocking(&d0, &[1u8; 128]).unwrap();
        let (busy, free) = whole.into_halves(64).unwrap();
        set_gate(|gate| *gate = (false, false));
        RETURNED.store(false, Ordering::Release);
        // SAFETY: the kernel writes the 64 bytes of `busy`, which the launch keeps.
        let running = unsafe { writer.launch(&fill, 1, (busy, 64u64)) };
        wait_gate(|gate| gate.0);
        let free = run(other.memset(free, 9)).unwrap();
        let host = PinnedBuffer::from_slice(&d0, &pattern(64)).unwrap();
        let (host, free) =
            run(other.copy_h2d(host.view(..32).unwrap(), free.view(32..).unwrap())).unwrap();
        let readback = PinnedBuffer::<u8>::new(&d0, 64).unwrap();
        let (free, readback) = run(other.copy_d2h(free.into_inner(), readback)).unwrap();
        assert!(
            !running.is_complete(),
            "{strategy:?}: the kernel is held at its gate"
        );
        let mut want = vec![9u8; 32];
        want.extend(&pattern(32));
        assert_eq!(&readback[..], &want[..], "{strategy:?}");
        drop(host);
        set_gate(|gate| gate.1 = true);
        let (busy, _) = run(running).unwrap();
        let whole = busy.join(free).unwrap().into_whole().unwrap();
        let mut want_whole = vec![0x5Bu8; 64];
        want_whole.extend(&want);
        assert_eq!(whole.to_vec_blocking().unwrap(), want_whole, "{strategy:?}");
    }
}

/// Host memory registered in device 0's context, used by copies on a stream of device 1 (to
/// and from device 1's memory), and by 2D copies ending exactly at its end: every copy is
/// exact or a typed error, and the registration is handed back unregistered afterwards; the
/// same memory can then be registered again. Every strategy.
#[test]
fn a_registration_of_one_device_used_by_another_devices_copies_is_exact_or_refused() {
    let (_guard, d0, d1) = devices();
    for strategy in STRATEGIES {
        let s1 = stream(&d1, strategy);
        let data = PageAlignedBuffer::from_slice(&pattern(8192)).unwrap();
        let reg = HostRegistration::new(&d0, data, RegisterFlags::PINNED).unwrap();
        run(async {
            let dev = DeviceBuffer::<u8>::new(&d1, 8192).unwrap();
            let (reg, dev) = match s1.copy_h2d(reg, dev).await {
                Ok(pair) => pair,
                Err(err) => panic!("{strategy:?}: {}", err.error),
            };
            assert_eq!(dev.to_vec_blocking().unwrap(), pattern(8192));
            let (reg, rest) = reg.into_halves(4096).unwrap();
            let rows = Copy2d {
                width: 16,
                height: 256,
                src_pitch: 16,
                dst_pitch: 16,
            };
            let (dev, rest) = s1
                .copy_2d_d2h(dev.view(..4096).unwrap(), rest, rows)
                .await
                .unwrap();
            let reg = reg.join(rest).unwrap().into_whole().unwrap();
            let mut want = pattern(8192);
            want.copy_within(..4096, 4096);
            assert_eq!(&reg[..], &want[..], "{strategy:?}");
            drop(dev);
            let data = reg.into_inner().await.unwrap();
            // Unregistered: registering the same memory again is accepted.
            let again = HostRegistration::new(&d0, data, RegisterFlags::PINNED).unwrap();
            drop(again.into_inner().await.unwrap());
        });
    }
}

/// `Event::elapsed` and `Event::timestamp_us` on records that are not there or not done, in
/// reverse order, of one event twice, of two contexts of one device and of two devices: each
/// a duration or a typed error naming the API, never a panic or a bogus duration.
#[test]
fn elapsed_and_timestamps_of_missing_unfinished_and_foreign_records_are_typed() {
    let (_guard, d0, d1) = devices();
    let device = Device::open(0).unwrap();
    let own = device.create_context().unwrap();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let (a, b) = (Event::new(&d0).unwrap(), Event::new(&own).unwrap());
        let never = Event::new(&d0).unwrap();
        assert!(Event::elapsed(&never, &a).is_err(), "never recorded");
        assert!(never.timestamp_us().is_err(), "never recorded");
        a.record(&s).unwrap();
        run(a.wait()).unwrap();
        assert_eq!(Event::elapsed(&a, &a).unwrap(), Duration::ZERO);
        // An event of another context of the same device shares its clock.
        let s_own = stream(&own, strategy);
        b.record(&s_own).unwrap();
        run(b.wait()).unwrap();
        Event::elapsed(&a, &b).unwrap();
        // Reversed: a duration of zero (the same instant) or the runtime's reversal code.
        if let Err(err) = Event::elapsed(&b, &a) {
            assert_eq!(
                err.acl_code(),
                Some(AclCode(npu::ffi::ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL)),
                "{err}"
            );
        }
        // A record the device has not reached yet.
        let held = sim::hold(&device).unwrap();
        let _memset = s.memset(DeviceBuffer::<u8>::new(&d0, 64).unwrap(), 0);
        b.record(&s).unwrap();
        // npu-sim: the timestamp is not written yet (107006), as for an event without one.
        let unwritten = Some(AclCode(npu::ffi::ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
        let err = Event::elapsed(&a, &b).unwrap_err();
        assert_eq!(err.acl_code(), unwritten, "{err}");
        let err = b.timestamp_us().unwrap_err();
        assert_eq!(err.acl_code(), unwritten, "{err}");
        held.release().unwrap();
        run(b.wait()).unwrap();
        assert!(Event::elapsed(&a, &b).is_ok(), "{strategy:?}");
        // Two devices.
        let c = Event::new(&d1).unwrap();
        c.record(&stream(&d1, strategy)).unwrap();
        run(c.wait()).unwrap();
        let err = Event::elapsed(&a, &c).unwrap_err();
        assert_eq!(invalid(&err), ("Event::elapsed", "end"), "{err}");
        // Without timestamps.
        let bare = Event::builder(&d0)
            .flags(npu::ffi::ACL_EVENT_SYNC)
            .build()
            .unwrap();
        bare.record(&s).unwrap();
        run(bare.wait()).unwrap();
        let err = Event::elapsed(&bare, &a).unwrap_err();
        assert_eq!(invalid(&err), ("Event::elapsed", "start"), "{err}");
        assert!(bare.timestamp_us().is_err(), "no timestamp recorded");
    }
}

/// A stream waiting on an event whose record is behind a kernel held running, while the event
/// is recorded again elsewhere (and then dropped with every handle of it): the work queued
/// behind the wait resolves exactly once, after the kernel or (if the wait took the newer
/// record) before it, never hangs, and nothing is left once both streams are done. Every
/// strategy.
#[test]
fn a_queued_wait_whose_event_is_recorded_again_and_dropped_resolves_once() {
    let (_guard, d0, _d1) = devices();
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let (a, b, c) = (
            stream(&d0, strategy),
            stream(&d0, strategy),
            stream(&d0, strategy),
        );
        let x = DeviceBuffer::<u8>::new(&d0, 32).unwrap();
        set_gate(|gate| *gate = (false, false));
        RETURNED.store(false, Ordering::Release);
        // SAFETY: the kernel writes the 32 bytes of `x`, which the launch keeps.
        let running = unsafe { a.launch(&fill, 1, (x, 32u64)) };
        wait_gate(|gate| gate.0);
        let event = Event::new(&d0).unwrap();
        event.record(&a).unwrap();
        b.wait_event(&event).unwrap();
        let behind = b.memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 4);
        event.record(&c).unwrap();
        run(event.wait()).unwrap();
        drop(event);
        let timed = Event::new(&d0).unwrap();
        timed.record(&a).unwrap();
        let waited = b.wait_event_timeout(&timed, Duration::from_secs(60));
        drop(timed);
        let after = b.memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 5);
        // A wait takes the record current when it is submitted, not a later one.
        assert!(
            !behind.is_complete(),
            "{strategy:?}: behind the first record"
        );
        assert!(
            !after.is_complete(),
            "{strategy:?}: behind a record behind the kernel"
        );
        set_gate(|gate| gate.1 = true);
        let (x, _) = run(running).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0x5B; 32]);
        assert_eq!(run(behind).unwrap().to_vec_blocking().unwrap(), [4; 16]);
        run(waited).unwrap();
        assert_eq!(run(after).unwrap().to_vec_blocking().unwrap(), [5; 16]);
        run(b.synchronize()).unwrap();
    }
}

/// Pitched copies of `u32`s between whole allocations whose last row ends exactly at the
/// allocation's end, with the padding on either side (source pitched, destination packed, and
/// the reverse), in every direction: the runtime accepts them (no extent rounded up to whole
/// pitches, no bytes counted as elements) and copies exactly. Every strategy.
#[test]
fn pitched_rows_ending_exactly_at_an_allocations_end_copy_in_every_direction() {
    let (_guard, d0, _d1) = devices();
    const PADDED: usize = (ROWS - 1) * PITCH + WIDTH;
    const PACKED: usize = ROWS * WIDTH;
    let padded: Vec<u32> = (0..PADDED as u32).map(|i| i * 7 + 1).collect();
    let packed: Vec<u32> = (0..ROWS)
        .flat_map(|row| padded[row * PITCH..row * PITCH + WIDTH].to_vec())
        .collect();
    // What spreading `packed` over `PADDED` zeroed elements gives.
    let mut spread = vec![0u32; PADDED];
    for row in 0..ROWS {
        spread[row * PITCH..row * PITCH + WIDTH]
            .copy_from_slice(&packed[row * WIDTH..(row + 1) * WIDTH]);
    }
    let gather = shape();
    let scatter = Copy2d {
        src_pitch: WIDTH,
        dst_pitch: PITCH,
        ..gather
    };
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        run(async {
            let src = PinnedBuffer::from_slice(&d0, &padded).unwrap();
            let dst = DeviceBuffer::<u32>::new(&d0, PACKED).unwrap();
            let (_, dst) = s.copy_2d_h2d(src, dst, gather).await.unwrap();
            assert_eq!(
                dst.to_vec_blocking().unwrap(),
                packed,
                "{strategy:?} h2d gather"
            );
            let src = PinnedBuffer::from_slice(&d0, &packed).unwrap();
            let dst = s
                .memset(DeviceBuffer::<u32>::new(&d0, PADDED).unwrap(), 0)
                .await
                .unwrap();
            let (_, dst) = s.copy_2d_h2d(src, dst, scatter).await.unwrap();
            assert_eq!(
                dst.to_vec_blocking().unwrap(),
                spread,
                "{strategy:?} h2d scatter"
            );

            let src = DeviceBuffer::from_host_blocking(&d0, &padded).unwrap();
            let dst = PinnedBuffer::<u32>::new(&d0, PACKED).unwrap();
            let (_, dst) = s.copy_2d_d2h(src, dst, gather).await.unwrap();
            assert_eq!(&dst[..], &packed[..], "{strategy:?} d2h gather");
            let src = DeviceBuffer::from_host_blocking(&d0, &packed).unwrap();
            let dst = PinnedBuffer::from_slice(&d0, &[0u32; PADDED]).unwrap();
            let (_, dst) = s.copy_2d_d2h(src, dst, scatter).await.unwrap();
            assert_eq!(&dst[..], &spread[..], "{strategy:?} d2h scatter");

            let src = DeviceBuffer::from_host_blocking(&d0, &padded).unwrap();
            let dst = DeviceBuffer::<u32>::new(&d0, PACKED).unwrap();
            let (_, dst) = s.copy_2d_d2d(src, dst, gather).await.unwrap();
            assert_eq!(
                dst.to_vec_blocking().unwrap(),
                packed,
                "{strategy:?} d2d gather"
            );
            let src = DeviceBuffer::from_host_blocking(&d0, &packed).unwrap();
            let dst = DeviceBuffer::from_host_blocking(&d0, &[0u32; PADDED]).unwrap();
            let (_, dst) = s.copy_2d_d2d(src, dst, scatter).await.unwrap();
            assert_eq!(
                dst.to_vec_blocking().unwrap(),
                spread,
                "{strategy:?} d2d scatter"
            );

            // Registered host memory: whole pages, the last row ending at the last element.
            let rows = Copy2d {
                width: 1,
                height: 1024,
                src_pitch: 1,
                dst_pitch: 1,
            };
            let pages = PageAlignedBuffer::<u32>::new(1024).unwrap();
            let reg = HostRegistration::new(&d0, pages, RegisterFlags::PINNED).unwrap();
            let src = DeviceBuffer::from_host_blocking(&d0, &[3u32; 1024]).unwrap();
            let (_, reg) = s.copy_2d_d2h(src, reg, rows).await.unwrap();
            assert!(reg.iter().all(|&x| x == 3), "{strategy:?} registered");
            let tall = Copy2d {
                width: 2,
                height: 512,
                src_pitch: 2,
                dst_pitch: 2,
            };
            let (reg, dst) = s
                .copy_2d_h2d(reg, DeviceBuffer::<u32>::new(&d0, 1024).unwrap(), tall)
                .await
                .unwrap();
            assert_eq!(dst.to_vec_blocking().unwrap(), [3u32; 1024]);
            drop(reg.into_inner().await.unwrap());
        });
    }
}

/// Events and streams of two devices: a wait on another device's event and a record of an
/// event on another device's stream are refused by the runtime with a typed error (npu-sim:
/// 107003), or, for the waits, honoured; never a hang, and the streams' later work runs.
/// Every strategy.
#[test]
fn waits_and_records_across_devices_are_refused_or_honoured() {
    let (_guard, d0, d1) = devices();
    let across = |err: &npu::Error| {
        assert!(err.acl_code().is_some(), "a runtime's refusal: {err}");
    };
    for strategy in STRATEGIES {
        let (s0, s1) = (stream(&d0, strategy), stream(&d1, strategy));
        let e1 = Event::new(&d1).unwrap();
        e1.record(&s1).unwrap();
        if let Err(err) = s0.wait_event(&e1) {
            across(&err);
        }
        if let Err(err) = run(s0.wait_event_timeout(&e1, Duration::from_secs(60))) {
            across(&err.error);
            assert!(err.value.is_some(), "the event's clone comes back");
        }
        let e0 = Event::new(&d0).unwrap();
        if let Err(err) = e0.record(&s1) {
            across(&err);
        }
        let done = s0.memset(DeviceBuffer::<u8>::new(&d0, 8).unwrap(), 2);
        assert_eq!(run(done).unwrap().to_vec_blocking().unwrap(), [2; 8]);
        run(s0.synchronize()).unwrap();
        run(s1.synchronize()).unwrap();
        run(e0.wait()).unwrap();
    }
}

/// A shared (`Arc`) half of a buffer read on two streams while a kernel held running writes
/// the other half: the read queued behind the kernel, its future dropped, keeps its clone (the
/// half cannot be unwrapped) until the device has run it; the other stream's read of the same
/// half completes meanwhile, exact; the halves join once every clone is gone. Every strategy.
#[test]
fn a_shared_half_read_behind_a_running_write_of_the_other_half_is_kept_until_read() {
    let (_guard, d0, _d1) = devices();
    let fill = gated_fill(&d0);
    for strategy in STRATEGIES {
        let (writer, reader) = (stream(&d0, strategy), stream(&d0, strategy));
        let whole = DeviceBuffer::from_host_blocking(&d0, &pattern(128)).unwrap();
        let (busy, shared) = whole.into_halves(64).unwrap();
        let shared = Arc::new(shared);
        set_gate(|gate| *gate = (false, false));
        RETURNED.store(false, Ordering::Release);
        // SAFETY: the kernel writes the 64 bytes of `busy`, which the launch keeps.
        let running = unsafe { writer.launch(&fill, 1, (busy, 64u64)) };
        wait_gate(|gate| gate.0);
        let host = PinnedBuffer::<u8>::new(&d0, 64).unwrap();
        drop(writer.copy_d2h(shared.clone(), host));
        let host = PinnedBuffer::<u8>::new(&d0, 64).unwrap();
        let (_, host) = run(reader.copy_d2h(shared.clone(), host)).unwrap();
        assert_eq!(&host[..], &pattern(128)[64..], "{strategy:?}");
        let shared = Arc::try_unwrap(shared).expect_err("the queued read keeps its clone");
        assert!(
            !running.is_complete(),
            "{strategy:?}: the kernel is held at its gate"
        );
        set_gate(|gate| gate.1 = true);
        let (busy, _) = run(running).unwrap();
        let mut shared = Some(shared);
        let mut free = None;
        until_released("the dropped read's clone", || {
            match Arc::try_unwrap(shared.take().unwrap()) {
                Ok(part) => free = Some(part),
                Err(again) => shared = Some(again),
            }
            free.is_some()
        });
        let whole = busy.join(free.unwrap()).unwrap().into_whole().unwrap();
        let mut want = vec![0x5Bu8; 64];
        want.extend(&pattern(128)[64..]);
        assert_eq!(whole.to_vec_blocking().unwrap(), want, "{strategy:?}");
    }
}

/// `Event::timestamp_us` of an event created without `ACL_EVENT_TIME_LINE`, which records no
/// timestamp: refused before the runtime is asked, with an error naming the API and the event,
/// as `Event::elapsed` refuses one, whether the event was recorded or not (a runtime may
/// answer for the unwritten stamp with any number).
#[test]
fn a_timestamp_of_an_event_recording_none_is_refused_naming_the_api() {
    let (_guard, d0, _d1) = devices();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let bare = Event::builder(&d0)
            .flags(npu::ffi::ACL_EVENT_SYNC)
            .build()
            .unwrap();
        let err = bare.timestamp_us().unwrap_err();
        assert_eq!(invalid(&err), ("Event::timestamp_us", "self"), "{err}");
        bare.record(&s).unwrap();
        run(bare.wait()).unwrap();
        let err = bare.timestamp_us().unwrap_err();
        assert_eq!(invalid(&err), ("Event::timestamp_us", "self"), "{err}");
        assert!(err.to_string().contains("ACL_EVENT_TIME_LINE"), "{err}");
        // An event with timestamps still reads its stamp.
        let timed = Event::new(&d0).unwrap();
        timed.record(&s).unwrap();
        run(timed.wait()).unwrap();
        timed.timestamp_us().unwrap();
    }
}

/// Pitched-copy shapes whose extent or pitch in bytes overflows `usize`, whose pitch is below
/// the width, or whose height is above ACL's limit, in every direction with `u32` elements:
/// each a typed error naming the API and the argument at fault (`src` or `dst` for an extent
/// past a buffer, `shape` for a rule of the shape alone), the buffers handed back, and the
/// stream still copies afterwards. Every strategy.
#[test]
fn overflowing_and_malformed_pitched_shapes_are_refused_naming_the_argument() {
    let (_guard, d0, _d1) = devices();
    let huge = usize::MAX / 2;
    let one = Copy2d {
        width: 1,
        height: 3,
        src_pitch: 1,
        dst_pitch: 1,
    };
    let cases = [
        (
            Copy2d {
                src_pitch: huge,
                ..one
            },
            "src",
        ),
        (
            Copy2d {
                dst_pitch: huge,
                ..one
            },
            "dst",
        ),
        (
            Copy2d {
                height: 1,
                src_pitch: huge,
                ..one
            },
            "shape",
        ),
        (
            Copy2d {
                height: 1,
                dst_pitch: huge,
                ..one
            },
            "shape",
        ),
        (Copy2d { width: 2, ..one }, "shape"),
        (
            Copy2d {
                height: npu::stream::MAX_2D_HEIGHT + 1,
                ..one
            },
            "shape",
        ),
    ];
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        run(async {
            let mut host = PinnedBuffer::from_slice(&d0, &[7u32; 8]).unwrap();
            let mut dev = DeviceBuffer::<u32>::new(&d0, 8).unwrap();
            let mut other = DeviceBuffer::<u32>::new(&d0, 8).unwrap();
            for (shape, argument) in cases {
                let what = format!("{strategy:?} {shape:?}");
                let err = s.copy_2d_h2d(host, dev, shape).await.unwrap_err();
                assert_eq!(
                    invalid(&err.error),
                    ("Stream::copy_2d_h2d", argument),
                    "{what}"
                );
                (host, dev) = err.value.unwrap();
                let err = s.copy_2d_d2h(dev, host, shape).await.unwrap_err();
                assert_eq!(
                    invalid(&err.error),
                    ("Stream::copy_2d_d2h", argument),
                    "{what}"
                );
                (dev, host) = err.value.unwrap();
                let err = s.copy_2d_d2d(dev, other, shape).await.unwrap_err();
                assert_eq!(
                    invalid(&err.error),
                    ("Stream::copy_2d_d2d", argument),
                    "{what}"
                );
                (dev, other) = err.value.unwrap();
            }
            let (_, dev) = s.copy_2d_h2d(host, dev, one).await.unwrap();
            assert_eq!(
                &dev.to_vec_blocking().unwrap()[..3],
                &[7; 3],
                "{strategy:?}"
            );
        });
    }
}

/// A stream of a context created on device 0 waiting on an event of device 0's primary
/// context, recorded behind a kernel held running: the work behind the wait waits for the
/// kernel, and resolves once it has run, whichever context's stream is dropped first. Every
/// strategy.
#[test]
fn a_wait_on_another_contexts_event_of_the_same_device_orders_the_work_behind_it() {
    let (_guard, d0, _d1) = devices();
    let fill = gated_fill(&d0);
    let created = Device::open(0).unwrap().create_context().unwrap();
    for strategy in STRATEGIES {
        let (a, b) = (stream(&d0, strategy), stream(&created, strategy));
        let x = DeviceBuffer::<u8>::new(&d0, 32).unwrap();
        set_gate(|gate| *gate = (false, false));
        RETURNED.store(false, Ordering::Release);
        // SAFETY: the kernel writes the 32 bytes of `x`, which the launch keeps.
        let running = unsafe { a.launch(&fill, 1, (x, 32u64)) };
        wait_gate(|gate| gate.0);
        let event = Event::new(&d0).unwrap();
        event.record(&a).unwrap();
        b.wait_event(&event).unwrap();
        drop(event);
        let behind = b.memset(DeviceBuffer::<u8>::new(&created, 16).unwrap(), 6);
        drop(b);
        assert!(!behind.is_complete(), "{strategy:?}: behind the kernel");
        set_gate(|gate| gate.1 = true);
        drop(a);
        let (x, _) = run(running).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0x5B; 32]);
        assert_eq!(run(behind).unwrap().to_vec_blocking().unwrap(), [6; 16]);
    }
}

/// A pitched copy from the end half of a device 1 buffer (its last row ending at the
/// allocation's end) into device 0 memory on a held device 0 stream, its peer access dropped
/// by the user while the copy is queued: the copy keeps the access until it ran, and is exact;
/// without the access the same copy is the runtime's typed refusal with both buffers handed
/// back. Every strategy.
#[test]
fn a_queued_pitched_peer_copy_keeps_its_access_after_the_users_guard_is_dropped() {
    let (_guard, d0, d1) = devices();
    let (dev0, dev1) = (d0.device(), d1.device());
    let data = pattern(64);
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let whole = DeviceBuffer::from_host_blocking(&d1, &data).unwrap();
        let (_head, tail) = whole.into_halves(64 - SPAN).unwrap();
        let dst = DeviceBuffer::<u8>::new(&d0, ROWS * WIDTH).unwrap();
        let err = run(s.copy_2d_d2d(tail, dst, shape())).unwrap_err();
        assert!(
            err.error.acl_code().is_some(),
            "{strategy:?}: {}",
            err.error
        );
        let (tail, dst) = err.value.unwrap();
        let access = dev0.enable_peer_access(&dev1).unwrap();
        let held = sim::hold(&dev0).unwrap();
        let copy = s.copy_2d_d2d(tail, dst, shape());
        drop(access);
        assert!(
            dev0.peer_access_to(&dev1).is_some(),
            "{strategy:?}: the queued copy keeps the access"
        );
        held.release().unwrap();
        let (_tail, dst) = run(copy).unwrap();
        assert_eq!(dst.to_vec_blocking().unwrap(), rows_of(&data[64 - SPAN..]));
        until_released("the copy's peer access", || {
            dev0.peer_access_to(&dev1).is_none()
        });
    }
}

/// Forgetting a registration (never dropping it) only leaks it: new registrations work. A
/// registration split while one half is in a copy held on the device cannot be made whole
/// (a typed error hands the part back) until the copy ran; then its `into_inner`, once every
/// copy handed it back, resolves at its first poll. A `Vec` that is not page-aligned is a typed
/// error handing the `Vec` back. Every strategy.
#[test]
fn forgetting_a_registration_only_leaks_it_and_into_inner_never_waits_after_its_copies() {
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    let registrations = || sim::host_stats().unwrap().registrations;
    let baseline = registrations();
    for strategy in STRATEGIES {
        let s = stream(&d0, strategy);
        let pages = PageAlignedBuffer::from_slice(&[1u8; 4096]).unwrap();
        // Forgotten as `mem::forget` would, but kept reachable in a static (never dropped), so
        // that valgrind's leak check reports no definite loss for it.
        static FORGOTTEN: Mutex<Vec<HostRegistration<PageAlignedBuffer<u8>>>> =
            Mutex::new(Vec::new());
        let forgotten = HostRegistration::new(&d0, pages, RegisterFlags::PINNED).unwrap();
        FORGOTTEN.lock().unwrap().push(forgotten);
        let pages = PageAlignedBuffer::from_slice(&[2u8; 4096]).unwrap();
        let reg = HostRegistration::new(&d0, pages, RegisterFlags::PINNED).unwrap();
        let held = sim::hold(&device).unwrap();
        let (reg, rest) = reg.into_halves(2048).unwrap();
        let copy = s.copy_h2d(reg, DeviceBuffer::<u8>::new(&d0, 2048).unwrap());
        let err = rest.into_whole().unwrap_err();
        assert_eq!(invalid(&err.error), ("Split::into_whole", "self"));
        let rest = err.value.unwrap();
        held.release().unwrap();
        let (reg, dev) = run(copy).unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), [2u8; 2048], "{strategy:?}");
        let reg = reg.join(rest).unwrap().into_whole().unwrap();
        let dev = DeviceBuffer::from_host_blocking(&d0, &[3u8; 4096]).unwrap();
        let (_dev, reg) = run(s.copy_d2h(dev, reg)).unwrap();
        let mut into_inner = std::pin::pin!(reg.into_inner());
        let waker = std::task::Waker::noop();
        let polled = into_inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker));
        let std::task::Poll::Ready(pages) = polled else {
            panic!("{strategy:?}: into_inner waited after its copies had completed");
        };
        assert_eq!(&pages.unwrap()[..], &[3u8; 4096]);
        let again = PageAlignedBuffer::from_slice(&[4u8; 4096]).unwrap();
        let reg = HostRegistration::new(&d0, again, RegisterFlags::PINNED).unwrap();
        let (_, dev) = run(s.copy_h2d(reg, DeviceBuffer::<u8>::new(&d0, 4096).unwrap())).unwrap();
        assert_eq!(dev.to_vec_blocking().unwrap(), [4u8; 4096], "{strategy:?}");
        let rejected =
            HostRegistration::new(&d0, vec![5u8; 100], RegisterFlags::PINNED).unwrap_err();
        assert_eq!(
            invalid(&rejected.error),
            ("HostRegistration::new", "buffer")
        );
        assert_eq!(rejected.buffer, vec![5u8; 100]);
    }
    // Every registration but the forgotten ones is gone.
    let forgotten = STRATEGIES.len() as u64;
    until_released("the registrations that were dropped", || {
        registrations() <= baseline + forgotten
    });
}

/// An event dropped by the user while its record is queued on a held device and another
/// stream's wait on it is queued too, 64 rounds: the wait's work resolves once the device
/// runs, and the event is destroyed afterwards. The device's live events grow by no more than
/// the streams' pool of idle completion events may (a round has at most four operations in
/// flight), never by one event a round. Every strategy.
#[test]
fn an_event_dropped_with_its_record_and_a_wait_queued_is_destroyed_after_them() {
    const ROUNDS: u64 = 64;
    let (_guard, d0, _d1) = devices();
    let device = Device::open(0).unwrap();
    let events = || sim::device_stats(&device).unwrap().live_events;
    for strategy in STRATEGIES {
        let (a, b) = (stream(&d0, strategy), stream(&d0, strategy));
        let mut baseline = None;
        for _round in 0..ROUNDS {
            let held = sim::hold(&device).unwrap();
            let event = Event::new(&d0).unwrap();
            event.record(&a).unwrap();
            b.wait_event(&event).unwrap();
            let behind = b.memset(DeviceBuffer::<u8>::new(&d0, 16).unwrap(), 8);
            drop(event);
            assert!(!behind.is_complete(), "{strategy:?}: the device is held");
            held.release().unwrap();
            assert_eq!(run(behind).unwrap().to_vec_blocking().unwrap(), [8; 16]);
            run(a.synchronize()).unwrap();
            run(b.synchronize()).unwrap();
            baseline.get_or_insert_with(events);
        }
        let bound = baseline.unwrap() + 8;
        until_released("the dropped events", || events() <= bound);
    }
}
