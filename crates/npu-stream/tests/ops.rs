//! Every stream operation, checked byte for byte, under every completion strategy, on the
//! in-process simulator and on its cdylib loaded like CANN's libascendcl.so; argument errors;
//! wrong-device errors; completion order; many tasks on two devices across Tokio workers.
//!
//! Nothing here changes device-global simulator state, so the tests run in parallel.

mod common;

use std::sync::Arc;

use common::{STRATEGIES, code, invalid, pattern, run, runtimes, stream};
use npu_core::{Context, acl_call, ffi};
use npu_mem::{DeviceBuffer, Memory, MemoryMut, PinnedBuffer};
use npu_stream::{
    Copy2d, Event, EventKind, EventWait, MAX_2D_HEIGHT, MAX_2D_WIDTH_BYTES, Op, Strategy, Stream,
};
use proptest::prelude::*;

// The futures can move between Tokio workers and the handles can be shared between tasks.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<Op<(PinnedBuffer<u8>, DeviceBuffer<u8>)>>();
    send::<Op<(Arc<DeviceBuffer<f32>>, PinnedBuffer<f32>)>>();
    send::<Op<DeviceBuffer<u64>>>();
    send::<Op<()>>();
    send::<EventWait>();
    send_sync::<Stream>();
    send_sync::<Event>();
};

/// Reads device memory back with the synchronous aclrtMemcpy, a path independent of streams.
fn read_back<T: npu_mem::Pod>(buffer: &DeviceBuffer<T>) -> Vec<T> {
    buffer.to_vec_blocking().expect("blocking read-back")
}

/// H2D, D2D, D2H and memset (of the whole buffer and of a view) on one stream.
async fn linear_round_trip(context: &Context, strategy: Strategy) {
    let stream = stream(context, strategy);
    let len = 4099; // not a multiple of anything the simulator aligns to
    let data = pattern(1, len);
    let host = PinnedBuffer::from_slice(context, &data).unwrap();
    let device = DeviceBuffer::<u8>::new(context, len).unwrap();

    let (host, device) = stream.copy_h2d(host, device).await.unwrap();
    assert_eq!(&host[..], &data[..], "the source is handed back untouched");
    assert_eq!(read_back(&device), data, "H2D");

    let copy = DeviceBuffer::<u8>::new(context, len).unwrap();
    let (device, copy) = stream.copy_d2d(device, copy).await.unwrap();
    assert_eq!(read_back(&copy), data, "D2D");

    let back = PinnedBuffer::<u8>::new(context, len).unwrap();
    let (_copy, back) = stream.copy_d2h(copy, back).await.unwrap();
    assert_eq!(&back[..], &data[..], "D2H");

    let middle = stream.memset(device.view(100..2000).unwrap(), 0xa5);
    let device = middle.await.unwrap().into_inner();
    let mut expected = data.clone();
    expected[100..2000].fill(0xa5);
    assert_eq!(read_back(&device), expected, "memset of a view");

    let device = stream.memset(device, 0).await.unwrap();
    assert_eq!(
        read_back(&device),
        vec![0; len],
        "memset of the whole buffer"
    );
    stream.synchronize().await.unwrap();
}

/// Typed views: element offsets become byte offsets.
async fn typed_views(context: &Context, strategy: Strategy) {
    let stream = stream(context, strategy);
    let values: Vec<u32> = (0..1000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let host = PinnedBuffer::from_slice(context, &values[..300]).unwrap();
    let device = DeviceBuffer::<u32>::new(context, 1000).unwrap();
    let window = device.view(500..800).unwrap();
    let (host, window) = stream.copy_h2d(host, window).await.unwrap();
    let device = window.into_inner();
    let mut expected = vec![0u32; 1000];
    expected[500..800].copy_from_slice(&values[..300]);
    assert_eq!(read_back(&device), expected);

    // Reading through a shared handle: two reads of one buffer may be in flight together.
    let shared = Arc::new(device);
    let (a, b) = (
        PinnedBuffer::<u32>::new(context, 300).unwrap(),
        PinnedBuffer::<u32>::new(context, 300).unwrap(),
    );
    let first = stream.copy_d2h(shared.clone().view(500..800).unwrap(), a);
    let second = stream.copy_d2h(shared.clone().view(500..800).unwrap(), b);
    let ((_, a), (_, b)) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(&a[..], &host[..]);
    assert_eq!(&b[..], &host[..]);
}

#[test]
fn linear_copies_and_memsets_move_the_right_bytes() {
    for (name, runtime) in runtimes() {
        let context = runtime.device(0).unwrap().primary_context().clone();
        for strategy in STRATEGIES {
            println!("{name}, {strategy:?}");
            run(linear_round_trip(&context, strategy));
            run(typed_views(&context, strategy));
        }
    }
}

#[test]
fn explicit_contexts_and_both_devices_work() {
    for (_, runtime) in runtimes() {
        for id in 0..2 {
            let context = runtime.device(id).unwrap().create_context().unwrap();
            run(linear_round_trip(&context, Strategy::EventPoll));
        }
    }
}

#[test]
fn async_host_to_host_is_refused_as_acl_does() {
    // The simulator follows CANN ≥ 8.0.RC3: an asynchronous host-to-host copy fails with
    // ACL_ERROR_RT_FEATURE_NOT_SUPPORT at submission (docs/simulator.md).
    for (name, runtime) in runtimes() {
        let context = runtime.device(0).unwrap().primary_context().clone();
        for strategy in STRATEGIES {
            let stream = stream(&context, strategy);
            let src = PinnedBuffer::from_slice(&context, &pattern(2, 256)).unwrap();
            let dst = PinnedBuffer::<u8>::new(&context, 256).unwrap();
            let err = run(stream.copy_h2h(src, dst)).unwrap_err().error;
            assert_eq!(code(&err), ffi::ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "{name}");
            assert_eq!(
                err.acl_code().unwrap().name(),
                Some("ACL_ERROR_RT_FEATURE_NOT_SUPPORT")
            );
            // The stream is unaffected.
            run(linear_round_trip(&context, strategy));
        }
    }
}

#[test]
fn cross_device_copies_need_peer_access_both_ways() {
    for (name, runtime) in runtimes() {
        let (d0, d1) = (runtime.device(0).unwrap(), runtime.device(1).unwrap());
        let (c0, c1) = (d0.primary_context().clone(), d1.primary_context().clone());
        let data = pattern(3, 10_000);
        let on_0 = DeviceBuffer::from_host_blocking(&c0, &data).unwrap();
        let on_1 = DeviceBuffer::<u8>::new(&c1, data.len()).unwrap();
        let s0 = stream(&c0, Strategy::EventPoll);

        let err = run(s0.copy_d2d(on_0, on_1)).unwrap_err().error;
        assert_eq!(code(&err), ffi::ACL_ERROR_RT_NO_PERMISSION, "{name}: {err}");

        let _forward = d0.enable_peer_access(&d1).unwrap();
        let _backward = d1.enable_peer_access(&d0).unwrap();
        for strategy in STRATEGIES {
            let (s0, s1) = (stream(&c0, strategy), stream(&c1, strategy));
            let on_0 = DeviceBuffer::from_host_blocking(&c0, &data).unwrap();
            let on_1 = DeviceBuffer::<u8>::new(&c1, data.len()).unwrap();
            let (on_0, on_1) = run(s0.copy_d2d(on_0, on_1)).unwrap();
            assert_eq!(
                read_back(&on_1),
                data,
                "{name}: device 0 → 1 on device 0's stream"
            );

            let on_1 = run(s1.memset(on_1, 0x3c)).unwrap();
            let (_, on_0) = run(s1.copy_d2d(on_1, on_0)).unwrap();
            assert_eq!(
                read_back(&on_0),
                vec![0x3c; data.len()],
                "{name}: 1 → 0 on device 1"
            );
        }
    }
}

/// Row `r` of a pitched copy moves `src[r*sp..][..w]` to `dst[r*dp..][..w]`; nothing else
/// of `dst` changes.
fn reference_2d<T: Copy>(src: &[T], dst: &mut [T], shape: Copy2d) {
    for row in 0..shape.height {
        let (s, d) = (row * shape.src_pitch, row * shape.dst_pitch);
        dst[d..d + shape.width].copy_from_slice(&src[s..s + shape.width]);
    }
}

/// Buffer lengths for a shape: the extent it spans, plus `slack` elements.
fn extent(pitch: usize, shape: Copy2d, slack: usize) -> usize {
    pitch * (shape.height - 1) + shape.width + slack
}

/// `len` distinctive 16-bit elements.
fn words(seed: u64, len: usize) -> Vec<u16> {
    let bytes = pattern(seed, 2 * len);
    bytes
        .chunks(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

async fn pitched_round_trip(context: &Context, strategy: Strategy, shape: Copy2d, seed: u64) {
    let stream = stream(context, strategy);
    let (src_len, dst_len) = (
        extent(shape.src_pitch, shape, 3),
        extent(shape.dst_pitch, shape, 5),
    );

    // Host → device: the destination starts with its own pattern, so every byte outside the
    // rows is checked to be untouched.
    let src: Vec<u16> = words(seed, src_len);
    let before: Vec<u16> = words(!seed, dst_len);
    let host = PinnedBuffer::from_slice(context, &src).unwrap();
    let device = DeviceBuffer::from_host_blocking(context, &before).unwrap();
    let (_, device) = stream.copy_2d_h2d(host, device, shape).await.unwrap();
    let mut expected = before;
    reference_2d(&src, &mut expected, shape);
    assert_eq!(read_back(&device), expected, "2D H2D {shape:?}");

    // Device → host, with the pitches swapped.
    let back_shape = Copy2d {
        src_pitch: shape.dst_pitch,
        dst_pitch: shape.src_pitch,
        ..shape
    };
    let canvas: Vec<u16> = words(seed ^ 0x55, src_len);
    let host = PinnedBuffer::from_slice(context, &canvas).unwrap();
    let (device, host) = stream.copy_2d_d2h(device, host, back_shape).await.unwrap();
    let mut expected_back = canvas;
    reference_2d(&read_back(&device), &mut expected_back, back_shape);
    assert_eq!(&host[..], &expected_back[..], "2D D2H {back_shape:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// 2D copies against the reference on random shapes and pitches.
    #[test]
    fn pitched_copies_match_the_reference(
        width in 1usize..40,
        height in 1usize..24,
        src_gap in 0usize..9,
        dst_gap in 0usize..9,
        strategy in 0usize..3,
        seed in any::<u64>(),
    ) {
        let shape = Copy2d {
            width,
            height,
            src_pitch: width + src_gap,
            dst_pitch: width + dst_gap,
        };
        let runtime = common::in_process();
        let context = runtime.device(0).unwrap().primary_context().clone();
        run(pitched_round_trip(&context, STRATEGIES[strategy], shape, seed));
    }
}

#[test]
fn pitched_copies_run_on_the_dlopened_library_too() {
    let (_, runtime) = runtimes().pop().unwrap();
    let context = runtime.device(1).unwrap().primary_context().clone();
    let shape = Copy2d {
        width: 7,
        height: 5,
        src_pitch: 9,
        dst_pitch: 11,
    };
    for strategy in STRATEGIES {
        run(pitched_round_trip(&context, strategy, shape, 9));
    }
}

#[test]
fn bad_arguments_are_typed_errors_before_any_acl_call() {
    let runtime = common::in_process();
    let context = runtime.device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let stream = stream(&context, strategy);
        let host = |len| PinnedBuffer::<u32>::new(&context, len).unwrap();
        let device = |len| DeviceBuffer::<u32>::new(&context, len).unwrap();
        let rejected = |op: Op<(PinnedBuffer<u32>, DeviceBuffer<u32>)>| {
            assert!(op.is_complete(), "rejected before anything was submitted");
            let failed = run(op).unwrap_err();
            let (src, dst) = failed
                .value
                .expect("a rejected copy hands its buffers back");
            assert!(!src.is_empty() && !dst.is_empty());
            failed.error
        };

        let err = rejected(stream.copy_h2d(host(10), device(11)));
        assert_eq!(invalid(&err), ("Stream::copy_h2d", "dst"));
        assert_eq!(
            err.to_string(),
            "Stream::copy_h2d: invalid argument `dst`: holds 11 elements but the source has 10"
        );
        let err = run(stream.copy_d2h(device(4), host(3))).unwrap_err().error;
        assert_eq!(invalid(&err), ("Stream::copy_d2h", "dst"));

        let shape = |width, height, src_pitch, dst_pitch| Copy2d {
            width,
            height,
            src_pitch,
            dst_pitch,
        };
        let cases = [
            (shape(5, 2, 4, 8), "shape", "exceeds its source pitch 4"),
            (
                shape(5, 2, 8, 4),
                "shape",
                "exceeds its destination pitch 4",
            ),
            (
                shape(1, MAX_2D_HEIGHT + 1, 1, 1),
                "shape",
                "its height 5242881 exceeds ACL's limit of 5242880 rows",
            ),
            (
                shape(MAX_2D_WIDTH_BYTES / 4 + 1, 1, 2_000_000, 2_000_000),
                "shape",
                "exceeds ACL's limit of 5000000 bytes per row",
            ),
            (
                shape(4, 3, 8, 4),
                "src",
                "holds 16 elements but the copy spans 20",
            ),
            (
                shape(4, 3, 4, 8),
                "dst",
                "holds 16 elements but the copy spans 20",
            ),
            (
                shape(1, 4, usize::MAX / 2, 1),
                "src",
                "the copy's extent overflows",
            ),
            // A pitch so large that its size in bytes overflows, on a one-row copy whose extent
            // is only `width` and therefore fits.
            (
                shape(1, 1, usize::MAX / 2, 1),
                "shape",
                "its src_pitch of 9223372036854775807 elements overflows as a byte count",
            ),
            (
                shape(1, 1, 1, usize::MAX / 2),
                "shape",
                "its dst_pitch of 9223372036854775807 elements overflows as a byte count",
            ),
        ];
        for (shape, argument, rule) in cases {
            let err = rejected(stream.copy_2d_h2d(host(16), device(16), shape));
            assert_eq!(
                invalid(&err),
                ("Stream::copy_2d_h2d", argument),
                "{shape:?}"
            );
            assert!(err.to_string().contains(rule), "{shape:?}: {err}");
        }
        // The D2H direction names its own API and checks the same rules.
        let err = run(stream.copy_2d_d2h(device(16), host(16), shape(4, 3, 4, 8)))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::copy_2d_d2h", "dst"));

        // Nothing was left pending: the stream still works.
        run(linear_round_trip(&context, strategy));
    }
}

#[test]
fn buffers_events_and_streams_of_another_runtime_are_refused() {
    let [(_, local), (_, library)] = runtimes().try_into().unwrap();
    let here = local.device(0).unwrap().primary_context().clone();
    let there = library.device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let stream = stream(&here, strategy);

        let foreign_host = PinnedBuffer::<u8>::new(&there, 64).unwrap();
        let err = run(stream.copy_h2d(foreign_host, DeviceBuffer::<u8>::new(&here, 64).unwrap()))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::copy_h2d", "src"));
        assert!(
            err.to_string().contains("different AscendCL runtime"),
            "{err}"
        );

        let foreign_device = DeviceBuffer::<u8>::new(&there, 64).unwrap();
        let err = run(stream.memset(foreign_device, 1)).unwrap_err().error;
        assert_eq!(invalid(&err), ("Stream::memset", "dst"));

        let foreign_device = DeviceBuffer::<u8>::new(&there, 64).unwrap();
        let local_host = PinnedBuffer::<u8>::new(&here, 64).unwrap();
        let err = run(stream.copy_d2h(foreign_device, local_host))
            .unwrap_err()
            .error;
        assert_eq!(invalid(&err), ("Stream::copy_d2h", "src"));

        let foreign_event = Event::new(&there).unwrap();
        let err = foreign_event.record(&stream).unwrap_err();
        assert_eq!(invalid(&err), ("Event::record", "stream"));
        let err = stream.wait_event(&foreign_event).unwrap_err();
        assert_eq!(invalid(&err), ("Stream::wait_event", "event"));

        let local_event = Event::new(&here).unwrap();
        let err = Event::elapsed(&local_event, &foreign_event).unwrap_err();
        assert_eq!(invalid(&err), ("Event::elapsed", "end"));
    }
}

#[test]
fn events_and_streams_of_different_devices_fail_with_107003() {
    for (name, runtime) in runtimes() {
        let c0 = runtime.device(0).unwrap().primary_context().clone();
        let c1 = runtime.device(1).unwrap().primary_context().clone();
        for strategy in STRATEGIES {
            let (s0, e1) = (stream(&c0, strategy), Event::new(&c1).unwrap());
            // Recorded on its own device first: a legacy event never recorded is refused by
            // npu-rs before ACL could judge its device.
            e1.record(&stream(&c1, strategy)).unwrap();

            let err = e1.record(&s0).unwrap_err();
            assert_eq!(
                code(&err),
                ffi::ACL_ERROR_RT_STREAM_CONTEXT,
                "{name}: {err}"
            );
            let err = s0.wait_event(&e1).unwrap_err();
            assert_eq!(
                code(&err),
                ffi::ACL_ERROR_RT_STREAM_CONTEXT,
                "{name}: {err}"
            );
            assert!(err.to_string().contains("aclrtStreamWaitEvent"), "{err}");

            // ACL itself rejects a stream of another context with 107003: with device 1's
            // context current, a raw memset on device 0's stream fails...
            let mut on_0 = DeviceBuffer::<u8>::new(&c0, 64).unwrap();
            let (ptr, raw_stream) = (on_0.addr_mut(), s0.as_raw());
            c1.bind().unwrap();
            // SAFETY: a valid 64-byte device allocation; the call is expected to be refused.
            let raw = unsafe { acl_call!(&runtime, aclrtMemsetAsync(ptr, 64, 1, 64, raw_stream)) };
            assert_eq!(
                code(&raw.unwrap_err()),
                ffi::ACL_ERROR_RT_STREAM_CONTEXT,
                "{name}"
            );
            // ...while npu-rs binds the stream's context itself, from the same thread.
            let on_0 = run(s0.memset(on_0, 1)).unwrap();
            assert_eq!(read_back(&on_0), vec![1; 64], "{name}");
        }
    }
}

/// ACL holds a stream waiting for a legacy event until the event's first record (a reset
/// restores that state, after which a wait cannot go on), and the wait keeps the event alive:
/// `wait_event` and `wait_event_timeout` refuse a legacy event npu-rs never recorded instead of
/// holding the stream for ever, and queue nothing. An Ex event holds no work before its first
/// record: a wait on it passes at once.
#[test]
fn a_wait_on_a_never_recorded_legacy_event_is_refused_and_on_an_ex_event_passes() {
    for (name, runtime) in runtimes() {
        let context = runtime.device(0).unwrap().primary_context().clone();
        for strategy in STRATEGIES {
            let stream = stream(&context, strategy);
            let never = Event::new(&context).unwrap();
            let err = stream.wait_event(&never).unwrap_err();
            assert_eq!(invalid(&err), ("Stream::wait_event", "event"), "{name}");
            assert!(err.to_string().contains("never recorded"), "{err}");
            let refused = run(stream.wait_event_timeout(&never, std::time::Duration::from_secs(1)))
                .unwrap_err();
            assert_eq!(
                invalid(&refused.error),
                ("Stream::wait_event_timeout", "event"),
                "{name}"
            );
            assert!(refused.value.is_some(), "{name}: the event handed back");
            // Nothing was queued: the stream's later work runs, and is reported clean.
            let after = stream.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 3);
            assert_eq!(read_back(&run(after).unwrap()), vec![3; 64], "{name}");
            run(stream.synchronize()).unwrap();

            let ex = Event::builder(&context)
                .kind(EventKind::Ex)
                .build()
                .unwrap();
            stream.wait_event(&ex).unwrap();
            run(stream.wait_event_timeout(&ex, std::time::Duration::from_secs(1))).unwrap();
            // Once recorded, the legacy event is waited for.
            never.record(&stream).unwrap();
            stream.wait_event(&never).unwrap();
            run(stream.synchronize()).unwrap();
        }
    }
}

#[test]
fn legacy_and_ex_events_hide_acl_status_numbering() {
    for (name, runtime) in runtimes() {
        let context = runtime.device(0).unwrap().primary_context().clone();
        for strategy in STRATEGIES {
            let stream = stream(&context, strategy);
            for kind in [EventKind::Legacy, EventKind::Ex] {
                let event = Event::builder(&context).kind(kind).build().unwrap();
                assert_eq!(event.kind(), kind);
                // ACL: a never-recorded legacy event is not complete, an Ex event is.
                assert_eq!(
                    event.is_complete().unwrap(),
                    kind == EventKind::Ex,
                    "{name}"
                );
                run(event.wait()).unwrap();

                let start = Event::builder(&context).kind(kind).build().unwrap();
                start.record(&stream).unwrap();
                let buffer = stream.memset(DeviceBuffer::<u8>::new(&context, 1 << 16).unwrap(), 7);
                event.record(&stream).unwrap();
                run(event.wait()).unwrap();
                assert!(event.is_complete().unwrap(), "{name} {kind:?}");
                assert_eq!(read_back(&run(buffer).unwrap()), vec![7; 1 << 16]);
                let elapsed = Event::elapsed(&start, &event).unwrap();
                assert!(elapsed < std::time::Duration::from_secs(60), "{elapsed:?}");
                assert!(event.timestamp_us().unwrap() >= start.timestamp_us().unwrap());
            }
        }
    }
}

/// With the event-polling and callback strategies, one thread completes a stream's operations
/// in the order the device ran them: when an operation resolves, all earlier ones have.
/// (`BlockingSync` gives every operation its own waiting thread, so only the device order,
/// checked in simulated time by `timing.rs`, holds there.)
#[test]
fn completions_arrive_in_stream_order() {
    for (name, runtime) in runtimes() {
        let context = runtime.device(0).unwrap().primary_context().clone();
        for strategy in [Strategy::EventPoll, Strategy::CallbackThread] {
            let stream = stream(&context, strategy);
            let mut ops: Vec<_> = (0..200)
                .map(|i| stream.memset(DeviceBuffer::<u8>::new(&context, 64 + i).unwrap(), i as u8))
                .collect();
            run(async {
                while let Some(last) = ops.pop() {
                    let buffer = last.await.unwrap();
                    assert!(ops.iter().all(Op::is_complete), "{name} {strategy:?}");
                    assert_eq!(read_back(&buffer), vec![ops.len() as u8; 64 + ops.len()]);
                }
            });
        }
    }
}

async fn two_device_task(contexts: [Context; 2], task: usize, rounds: usize) -> usize {
    let streams: Vec<Stream> = contexts
        .iter()
        .enumerate()
        .map(|(i, c)| stream(c, STRATEGIES[(task + i) % 3]))
        .collect();
    let mut threads = std::collections::HashSet::new();
    for round in 0..rounds {
        threads.insert(std::thread::current().id());
        let side = (task + round) % 2;
        let (context, stream) = (&contexts[side], &streams[side]);
        let data = pattern((task * 1000 + round) as u64, 512 + round);
        let host = PinnedBuffer::from_slice(context, &data).unwrap();
        let device = DeviceBuffer::<u8>::new(context, data.len()).unwrap();
        let (host, device) = stream.copy_h2d(host, device).await.unwrap();
        let device = stream
            .memset(device.view(..8).unwrap(), 0xee)
            .await
            .unwrap();
        let (_, host) = stream.copy_d2h(device.into_inner(), host).await.unwrap();
        assert_eq!(&host[..8], &[0xee; 8]);
        assert_eq!(&host[8..], &data[8..]);
        tokio::task::yield_now().await;
    }
    threads.len()
}

/// Contexts follow the task: tasks using streams of two devices (one of them in an explicit
/// context) migrate between the workers of a multi-threaded runtime, and no call ever fails
/// with 107002 (no context) or 107003 (stream of another context): every unwrap would show it.
#[test]
fn tasks_on_two_devices_interleave_across_workers() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    for (name, runtime) in runtimes() {
        let contexts = [
            runtime.device(0).unwrap().primary_context().clone(),
            runtime.device(1).unwrap().create_context().unwrap(),
        ];
        let tasks: Vec<_> = (0..24)
            .map(|task| tokio.spawn(two_device_task(contexts.clone(), task, 20)))
            .collect();
        let migrated = tokio.block_on(async {
            let mut migrated = 0;
            for task in tasks {
                let threads = tokio::time::timeout(common::HANG, task)
                    .await
                    .unwrap()
                    .unwrap();
                migrated += usize::from(threads > 1);
            }
            migrated
        });
        // Not asserted: whether Tokio moved a given task is up to its scheduler.
        println!("{name}: {migrated} of 24 tasks ran on more than one worker thread");
    }
}
