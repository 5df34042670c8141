//! User journeys: small programs a serving-backend or data-pipeline author writes against the
//! public API (the `npu` crate only, as its docs present it), each a real task with its results
//! checked. A request handler (stream pool, device pool, staged copies, a kernel, a timeout, a
//! client that goes away), a double-buffered copy pipeline and a pitched 2D image, the Tokio
//! test-harness story (paused time, the timing model, fault injection, leak checks), the
//! tracing spans docs/observability.md promises, and the errors bad input gets at each entry
//! used.
//!
//! The file configures the simulator (three devices) and installs a process-wide subscriber
//! before anything touches a device, and its tests take turns: the hold gate, the live counters
//! and the recorded spans are process-wide.

mod common;

use std::collections::VecDeque;
use std::pin::pin;
use std::time::Duration;

use common::{Fields, HANG, Mark, invalid, live_memory, record_op_spans, since, within};
use npu::error::{AclCode, FaultKind};
use npu::prelude::*;
use npu::sim::{self, SimConfig, TimingModel};
use npu::stream::Copy2d;
use npu::{Error, Stream};

/// Simulated duration of one `scale_f32` launch on the timed device.
const SCALE_NS: u64 = 200_000;

/// A handler's service: `y = alpha * x` on the NPU for request bodies of `f32`s.
///
/// Its memory comes from pools (device blocks from a [`DevicePool`], staging blocks from a
/// [`PinnedPool`]), its streams from a [`StreamPool`]; clones share all of them, as a server's
/// per-connection tasks do.
#[derive(Clone)]
struct Scaler {
    streams: StreamPool,
    memory: DevicePool,
    staging: PinnedPool,
    scale: Function,
}

impl Scaler {
    fn new(ctx: &Context, streams: usize) -> npu::Result<Scaler> {
        Scaler::with_capacity(ctx, streams, 16 << 20)
    }

    /// A service whose pools each hold at most `capacity` bytes: requests beyond that wait
    /// their turn for a block.
    fn with_capacity(ctx: &Context, streams: usize, capacity: usize) -> npu::Result<Scaler> {
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(ctx, npu::sim::kernel::LIBRARY_PATH) }?;
        Ok(Scaler {
            streams: StreamPool::new(ctx, streams)?,
            memory: DevicePool::builder(ctx).capacity(capacity).build()?,
            staging: PinnedPool::builder(ctx).capacity(capacity).build()?,
            scale: module.function("scale_f32")?,
        })
    }

    /// Serves one request on the next stream of the pool.
    async fn handle(&self, input: &[f32], alpha: f32) -> npu::Result<Vec<f32>> {
        self.handle_on(&self.streams.next(), input, alpha).await
    }

    /// Serves one request on `stream`: a device block, the input staged in, the kernel, the
    /// output staged out. Two device tasks once the block is cached: the copy in, the kernel.
    async fn handle_on(&self, stream: &Stream, input: &[f32], alpha: f32) -> npu::Result<Vec<f32>> {
        let x = self.memory.alloc::<f32>(stream, input.len()).await?;
        let x = stream
            .copy_from_slice_staged(&self.staging, input, x)
            .await?;
        let n = input.len() as u64;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds input.len() of them.
        let (x, _, _) = unsafe { stream.launch(&self.scale, 4, (x, n, alpha)) }.await?;
        let (_x, output) = stream.copy_to_vec_staged(&self.staging, x).await?;
        Ok(output)
    }

    /// Whether neither pool has a block out or still in the device's hands.
    fn at_rest(&self) -> bool {
        let (device, host) = (self.memory.stats().cache, self.staging.stats());
        (
            device.allocated,
            device.awaiting_blocks,
            host.allocated,
            host.awaiting_blocks,
        ) == (0, 0, 0, 0)
    }
}

fn input(len: usize) -> Vec<f32> {
    (0..len).map(|i| i as f32 - 100.0).collect()
}

fn scaled(input: &[f32], alpha: f32) -> Vec<f32> {
    input.iter().map(|x| x * alpha).collect()
}

/// The simulator's configuration and the span recorder, installed once, before any device is
/// touched; then this test's turn.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    spans();
    TURN.lock().await
}

fn device(id: u32) -> Context {
    Device::open(id).unwrap().primary_context().clone()
}

/// The simulator configured, then the process-wide span record installed (before any device
/// is touched).
fn spans() {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        SimConfig::default().devices(3).install().unwrap();
        record_op_spans();
    });
}

/// The recorded `npu_op` spans of `stream` (by its id and device), in submission order: their
/// fields and messages.
fn spans_of(stream: &Stream) -> Vec<(Fields, Vec<String>)> {
    let (id, device) = (
        stream.id().to_string(),
        stream.context().device_id().to_string(),
    );
    let ours = |fields: &Fields| {
        fields.get("stream") == Some(&id) && fields.get("device") == Some(&device)
    };
    let spans = since(Mark::ZERO).spans;
    spans
        .into_iter()
        .filter(|span| ours(&span.fields))
        .map(|span| {
            let messages = span.messages();
            (span.fields, messages)
        })
        .collect()
}

/// Many requests at once, spread over four streams by a stream pool, on a multi-threaded
/// runtime, each bounded by a timeout: every one gets its own answer, the pools end at rest,
/// and the device holds no more memory than before once they are trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_over_a_stream_pool_each_get_their_own_answer() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(0);
    let before = live_memory(&ctx);
    let scaler = Scaler::new(&ctx, 4)?;
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let scaler = scaler.clone();
        requests.spawn(async move {
            let body = input(1000 + 37 * i);
            let alpha = i as f32;
            let answer = tokio::time::timeout(HANG, scaler.handle(&body, alpha))
                .await
                .expect("a request hung")?;
            assert_eq!(answer, scaled(&body, alpha), "request {i}");
            Ok::<_, npu::Error>(())
        });
    }
    let mut served = 0;
    while let Some(request) = requests.join_next().await {
        request.expect("a request panicked")?;
        served += 1;
    }
    assert_eq!(served, 32);
    for stream in scaler.streams.streams() {
        assert!(
            spans_of(stream).len() >= 8 * 3,
            "each stream served its share"
        );
    }
    assert!(scaler.at_rest());
    scaler.memory.trim()?;
    scaler.staging.trim();
    drop(scaler);
    common::until_released("the pools' memory", || within(live_memory(&ctx), before));
    Ok(())
}

/// Backpressure: 32 requests at once against pools with room for two blocks each, on a
/// multi-threaded runtime. Requests wait their turn for memory (no error, no deadlock: a
/// request holding a staging block is in a copy, which completes) and every one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_pools_capacity_wait_their_turn() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(0);
    const LEN: usize = 4096;
    let scaler = Scaler::with_capacity(&ctx, 4, 2 * LEN * size_of::<f32>())?;
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let scaler = scaler.clone();
        requests.spawn(async move {
            let body = input(LEN - i);
            let request = scaler.handle(&body, 0.5);
            let answer = tokio::time::timeout(HANG, request)
                .await
                .expect("a request hung")?;
            assert_eq!(answer, scaled(&body, 0.5), "request {i}");
            Ok::<_, npu::Error>(())
        });
    }
    while let Some(request) = requests.join_next().await {
        request.expect("a request panicked")?;
    }
    let (device, host) = (scaler.memory.stats().cache, scaler.staging.stats());
    assert!(
        device.peak_reserved <= 2 * LEN * size_of::<f32>(),
        "{device:?}"
    );
    assert!(host.peak_reserved <= 2 * LEN * size_of::<f32>(), "{host:?}");
    assert!(scaler.at_rest());
    Ok(())
}

/// A client that goes away mid-request (its task aborted, as a server drops a handler whose
/// connection closed, or a `timeout` gives up on it) leaves the device's copy running: the
/// blocks it used stay out of the pools' hands until the device is done, then come back, and
/// the stream serves the next request.
#[tokio::test]
async fn a_request_given_up_on_returns_its_blocks_once_the_device_is_done() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(0);
    let scaler = Scaler::new(&ctx, 1)?;
    let stream = scaler.streams.next();
    // A warm pool, so that the request's device block is a cache hit.
    scaler.memory.reserve(&stream, 1, 4096 * 4).await?;

    for how in ["client gone", "deadline"] {
        let held = sim::hold(&ctx.device())?;
        let request = tokio::spawn({
            let (scaler, stream) = (scaler.clone(), stream.clone());
            async move {
                let request = scaler.handle_on(&stream, &[1.0; 4096], 3.0);
                tokio::time::timeout(Duration::from_millis(20), request).await
            }
        });
        // Until the request waits for the device: its copy in is queued on the held device.
        while scaler.staging.stats().allocated == 0 {
            tokio::task::yield_now().await;
        }
        if how == "client gone" {
            request.abort();
            assert!(request.await.unwrap_err().is_cancelled());
        } else {
            // The device is held: the deadline passes first, whatever the machine's speed.
            assert!(request.await.unwrap().is_err(), "{how}: timed out");
        }
        // The dropped copy owns both blocks until the device is done with them: neither pool
        // can hand them out meanwhile.
        let (device, host) = (scaler.memory.stats().cache, scaler.staging.stats());
        assert_eq!(
            (device.allocated, host.allocated),
            (4096 * 4, 4096 * 4),
            "{how}: the device still owns the copy's memory"
        );
        drop(held);
        stream.synchronize().await?;
        common::until_released("the given-up request's blocks", || scaler.at_rest());
        let answer = scaler.handle_on(&stream, &[1.0, 2.0], 3.0).await?;
        assert_eq!(
            answer,
            [3.0, 6.0],
            "{how}: the stream serves the next request"
        );
    }
    Ok(())
}

/// The test-harness story: under a paused Tokio clock, with the simulator's timing model on
/// device 1 (200 µs kernels), a handler bounded by a one-hour timeout answers (pending device
/// work keeps the clock from jumping to the deadline); the kernel takes exactly its simulated
/// time; a kernel fault injected on the handler's stream is the handler's typed error, naming
/// the kernel launch and where the device saw the fault; the stream goes on serving, and
/// nothing leaked.
#[tokio::test(start_paused = true)]
async fn in_paused_time_a_device_fault_is_the_handlers_typed_error() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(1);
    let model = TimingModel::default()
        .h2d_bandwidth(10_000_000_000)
        .d2h_bandwidth(10_000_000_000)
        .kernel("scale_f32", SCALE_NS);
    sim::set_timing(&ctx.device(), Some(model))?;
    let before = live_memory(&ctx);
    let scaler = Scaler::new(&ctx, 1)?;
    let stream = scaler.streams.next();
    let body = input(4096);
    let deadline = Duration::from_secs(3600);

    let answer = tokio::time::timeout(deadline, scaler.handle_on(&stream, &body, 0.5))
        .await
        .expect("the paused clock jumped past device work")?;
    assert_eq!(answer, scaled(&body, 0.5));

    // Timed from one instant: the device starts nothing until released, so the kernel starts
    // with its start event rather than when the host got round to submitting it.
    let x = stream.upload(&body).await?;
    let held = sim::hold(&ctx.device())?;
    // SAFETY: as in `Scaler::handle_on`: x holds body.len() elements.
    let launch = |s: &Stream| unsafe { s.launch(&scaler.scale, 4, (x, body.len() as u64, 1.0f32)) };
    let took = {
        let mut timed = pin!(stream.timed(launch));
        assert!(common::polled_once(timed.as_mut()).is_pending());
        drop(held);
        timed.await?.1
    };
    assert_eq!(
        took.as_micros(),
        u128::from(SCALE_NS / 1000),
        "simulated time: {took:?}"
    );

    // The handler's second device task from now is its kernel (the first is its copy in).
    sim::fail_task(&stream, 2, AclCode::AICORE_EXCEPTION)?;
    let err = tokio::time::timeout(deadline, scaler.handle_on(&stream, &body, 0.5))
        .await
        .expect("the paused clock jumped past device work")
        .unwrap_err();
    let Error::Acl(failure) = &err else {
        panic!("a device fault is an ACL error: {err:?}")
    };
    assert_eq!(failure.api, "aclrtLaunchKernelWithHostArgs");
    assert_eq!(failure.code, AclCode::AICORE_EXCEPTION);
    let fault = err.fault().expect("the device's report of the fault");
    assert_eq!((fault.stream_id, fault.device_id), (stream.id(), 1));
    assert_eq!(
        fault.kind,
        Some(FaultKind::Other),
        "an Atlas A2 reports Memory or Other"
    );
    let shown = err.to_string();
    for part in [
        "aclrtLaunchKernelWithHostArgs",
        "ACL_ERROR_RT_AICORE_EXCEPTION",
        "507015",
    ] {
        assert!(shown.contains(part), "{shown}");
    }
    assert!(
        shown.contains(&format!("stream {} on device 1", stream.id())),
        "{shown}"
    );
    assert!(scaler.at_rest(), "the failed request's blocks came back");

    let answer = scaler.handle_on(&stream, &body, 2.0).await?;
    assert_eq!(answer, scaled(&body, 2.0), "the stream goes on serving");
    assert!(
        stream.synchronize().await.is_err(),
        "synchronize reports the fault once"
    );
    stream.synchronize().await?;

    sim::set_timing(&ctx.device(), None)?;
    scaler.memory.trim()?;
    scaler.staging.trim();
    drop((scaler, stream));
    common::until_released("the harness's memory", || within(live_memory(&ctx), before));
    Ok(())
}

/// A data pipeline over more data than its pinned budget: chunks staged through a pinned pool
/// of two blocks (allocation waits for a block to come back), each chunk's copy in queued on
/// a copy stream while the previous chunk's kernel runs on the compute stream, its result
/// copied out into the same block.
#[tokio::test]
async fn a_double_buffered_pipeline_scales_every_chunk() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(2);
    let (copy, compute) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, npu::sim::kernel::LIBRARY_PATH) }?;
    let scale = module.function("scale_f32")?;
    const CHUNK: usize = 1 << 14;
    let data = input(CHUNK * 7 + 123);
    let blocks = PinnedPool::builder(&ctx)
        .capacity(2 * CHUNK * size_of::<f32>())
        .build()?;

    let mut output = Vec::with_capacity(data.len());
    let mut in_flight = VecDeque::new();
    for chunk in data.chunks(CHUNK) {
        let mut block = blocks.alloc::<f32>(chunk.len()).await?;
        block.copy_from_slice(chunk);
        let (block, x) = copy
            .copy_h2d(block, DeviceBuffer::new(&ctx, chunk.len())?)
            .await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha); x holds chunk.len() elements.
        let launch = unsafe { compute.launch(&scale, 8, (x, chunk.len() as u64, 3.0f32)) };
        in_flight.push_back((launch, block));
        if in_flight.len() == 2 {
            drain_one(&compute, &mut in_flight, &mut output).await?;
        }
    }
    while !in_flight.is_empty() {
        drain_one(&compute, &mut in_flight, &mut output).await?;
    }
    assert_eq!(output, scaled(&data, 3.0));
    assert!(blocks.stats().peak_allocated <= 2 * CHUNK * size_of::<f32>());
    Ok(())
}

type Launched = (npu::Op<(DeviceBuffer<f32>, u64, f32)>, PooledBuffer<f32>);

/// Copies the oldest chunk's result out (behind its kernel, on the compute stream).
async fn drain_one(
    compute: &Stream,
    in_flight: &mut VecDeque<Launched>,
    output: &mut Vec<f32>,
) -> npu::Result<()> {
    let (launch, block) = in_flight.pop_front().unwrap();
    let (x, _, _) = launch.await?;
    let (_x, block) = compute.copy_d2h(x, block).await?;
    output.extend_from_slice(&block);
    Ok(())
}

/// A pitched image (rows padded to a pitch, as decoders hand them over): its pixels copied
/// to a tight device buffer with a 2D copy, scaled, and copied back into a pitched buffer
/// whose padding the copy leaves alone.
#[tokio::test]
async fn a_pitched_image_round_trips_through_2d_copies() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(2);
    let stream = Stream::new(&ctx)?;
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, npu::sim::kernel::LIBRARY_PATH) }?;
    let scale = module.function("scale_f32")?;
    let (width, height, pitch) = (100, 30, 128);
    let mut image = PinnedBuffer::<f32>::new(&ctx, height * pitch)?;
    for (y, row) in image.chunks_mut(pitch).enumerate() {
        for (x, pixel) in row.iter_mut().enumerate() {
            *pixel = if x < width {
                (y * width + x) as f32
            } else {
                -1.0
            };
        }
    }
    let tight = Copy2d {
        width,
        height,
        src_pitch: pitch,
        dst_pitch: width,
    };
    let device = DeviceBuffer::<f32>::new(&ctx, width * height)?;
    let (image, device) = stream.copy_2d_h2d(image, device, tight).await?;
    let n = (width * height) as u64;
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha); x holds width * height elements.
    let (device, _, _) = unsafe { stream.launch(&scale, 4, (device, n, 2.0f32)) }.await?;
    let mut back = PinnedBuffer::<f32>::new(&ctx, height * pitch)?;
    back.fill(f32::NAN);
    let pitched = Copy2d {
        width,
        height,
        src_pitch: width,
        dst_pitch: pitch,
    };
    let (_device, back) = stream.copy_2d_d2h(device, back, pitched).await?;
    for (y, (row, original)) in back.chunks(pitch).zip(image.chunks(pitch)).enumerate() {
        for (x, (pixel, was)) in row.iter().zip(original).take(width).enumerate() {
            assert_eq!(*pixel, 2.0 * was, "pixel ({x}, {y})");
        }
        assert!(row[width..].iter().all(|p| p.is_nan()), "row {y}'s padding");
    }
    Ok(())
}

/// What docs/observability.md promises a subscriber: one `npu_op` span per operation, with the
/// ACL function, the stream's id (`Stream::id`), the device, the bytes, the direction or the
/// kernel, and a `completed` event when awaited, or an `error` field and a `failed` event.
#[tokio::test]
async fn each_operation_is_a_span_a_subscriber_sees() -> npu::Result<()> {
    let _turn = turn().await;
    let ctx = device(2);
    let scaler = Scaler::new(&ctx, 1)?;
    let stream = scaler.streams.next();
    let body = input(1000);
    scaler.handle_on(&stream, &body, 2.0).await?;
    let seen = spans_of(&stream);
    let ops: Vec<&str> = seen.iter().map(|(f, _)| f["op"].as_str()).collect();
    assert_eq!(
        ops,
        [
            "aclrtMemPoolMallocAsync",
            "aclrtMemcpyAsync",
            "aclrtLaunchKernelWithHostArgs",
            "aclrtMemcpyAsync"
        ]
    );
    let (alloc, copy_in, launch, copy_out) = (&seen[0].0, &seen[1].0, &seen[2].0, &seen[3].0);
    assert_eq!(
        alloc["bytes"], "4096",
        "a pool allocation's bytes are its block's"
    );
    assert_eq!(copy_in["direction"], "h2d");
    assert_eq!(copy_in["bytes"], "4000");
    assert_eq!(launch["kernel"], "scale_f32");
    assert_eq!(launch["bytes"], "0");
    assert_eq!(copy_out["direction"], "d2h");
    for (fields, messages) in &seen {
        assert_eq!(fields["device"], "2");
        assert_eq!(messages, &["completed"], "{fields:?}");
        assert!(!fields.contains_key("error"), "{fields:?}");
    }

    sim::fail_task(&stream, 2, AclCode::AICORE_EXCEPTION)?;
    let err = scaler.handle_on(&stream, &body, 2.0).await.unwrap_err();
    let seen = spans_of(&stream);
    let (launch, messages) = &seen[seen.len() - 1];
    assert_eq!(launch["op"], "aclrtLaunchKernelWithHostArgs");
    assert_eq!(messages, &["failed"]);
    assert_eq!(launch["error"], err.to_string());
    stream.synchronize().await.unwrap_err();
    Ok(())
}

/// Bad input at each public entry these journeys use gives an `InvalidArgument` naming the
/// API and the argument, with a rule a user can act on, and hands the buffers back; nothing is
/// submitted, and no panic.
#[tokio::test]
async fn bad_input_names_the_api_the_argument_and_the_problem() -> npu::Result<()> {
    let _turn = turn().await;
    let (ctx, other) = (device(0), device(1));
    let stream = Stream::new(&ctx)?;
    let scaler = Scaler::new(&ctx, 1)?;

    let checks: Vec<(npu::Error, (&str, &str), &str)> = vec![
        (
            stream
                .copy_h2d(
                    PinnedBuffer::<f32>::new(&ctx, 4)?,
                    DeviceBuffer::new(&ctx, 5)?,
                )
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_h2d", "dst"),
            "holds 5 elements but the source has 4",
        ),
        (
            stream
                .copy_h2d(
                    PinnedBuffer::<f32>::new(&ctx, 4)?,
                    DeviceBuffer::new(&other, 4)?,
                )
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_h2d", "dst"),
            "belongs to device 1, but the stream is on device 0",
        ),
        (
            stream
                .copy_d2h(
                    DeviceBuffer::<f32>::new(&other, 4)?,
                    PinnedBuffer::new(&ctx, 4)?,
                )
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_d2h", "src"),
            "belongs to device 1",
        ),
        (
            stream
                .memset(DeviceBuffer::<u8>::new(&other, 4)?, 0)
                .await
                .unwrap_err()
                .error,
            ("Stream::memset", "dst"),
            "belongs to device 1",
        ),
        (
            // SAFETY: refused before anything runs.
            unsafe {
                stream.launch(
                    &scaler.scale,
                    0,
                    (DeviceBuffer::<f32>::new(&ctx, 4)?, 4u64, 1.0f32),
                )
            }
            .await
            .unwrap_err()
            .error,
            ("Stream::launch", "blocks"),
            "must be at least 1",
        ),
        (
            // SAFETY: refused before anything runs.
            unsafe {
                stream.launch(
                    &scaler.scale,
                    1,
                    (DeviceBuffer::<f32>::new(&other, 4)?, 4u64, 1.0f32),
                )
            }
            .await
            .unwrap_err()
            .error,
            ("Stream::launch", "args"),
            "the buffer is on device 1 but the kernel runs on device 0",
        ),
        (
            stream
                .copy_2d_h2d(
                    PinnedBuffer::<f32>::new(&ctx, 100)?,
                    DeviceBuffer::new(&ctx, 100)?,
                    Copy2d {
                        width: 10,
                        height: 11,
                        src_pitch: 10,
                        dst_pitch: 10,
                    },
                )
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_2d_h2d", "src"),
            "holds 100 elements but the copy spans 110",
        ),
        (
            stream
                .copy_2d_h2d(
                    PinnedBuffer::<f32>::new(&ctx, 100)?,
                    DeviceBuffer::new(&ctx, 100)?,
                    Copy2d {
                        width: 11,
                        height: 2,
                        src_pitch: 10,
                        dst_pitch: 20,
                    },
                )
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_2d_h2d", "shape"),
            "its width 11 exceeds its source pitch 10",
        ),
        (
            scaler.memory.alloc::<f32>(&stream, 0).await.unwrap_err(),
            ("DevicePool::alloc", "len"),
            "must be at least 1",
        ),
        (
            scaler
                .memory
                .alloc::<f32>(&Stream::new(&other)?, 4)
                .await
                .unwrap_err(),
            ("DevicePool::alloc", "stream"),
            "another context (device 1) than the pool's (device 0): allocate on a stream of \
             the pool's context (DevicePool::context)",
        ),
        (
            scaler
                .memory
                .alloc::<f32>(&Stream::new(&ctx.device().create_context()?)?, 4)
                .await
                .unwrap_err(),
            ("DevicePool::alloc", "stream"),
            "another context (device 0) than the pool's (device 0): allocate on a stream of \
             the pool's context (DevicePool::context)",
        ),
        (
            scaler
                .memory
                .alloc::<u8>(&stream, 32 << 20)
                .await
                .unwrap_err(),
            ("DevicePool::alloc", "len"),
            "capacity",
        ),
        (
            scaler.staging.alloc::<f32>(0).await.unwrap_err(),
            ("PinnedPool::alloc", "len"),
            "must be at least 1",
        ),
        (
            stream
                .copy_from_slice_staged(&scaler.staging, &[1.0f32; 3], DeviceBuffer::new(&ctx, 4)?)
                .await
                .unwrap_err()
                .error,
            ("Stream::copy_from_slice_staged", "dst"),
            "holds 4 elements but the source has 3",
        ),
        (
            stream.upload::<f32>(&[]).await.unwrap_err(),
            ("Stream::upload", "data"),
            "`data`: is empty: ACL rejects empty allocations",
        ),
        (
            PinnedBuffer::<f32>::from_slice(&ctx, &[]).unwrap_err(),
            ("PinnedBuffer::from_slice", "data"),
            "`data`: is empty",
        ),
        (
            DeviceBuffer::<f32>::new(&ctx, 0).unwrap_err(),
            ("DeviceBuffer::new", "len"),
            "must be at least 1",
        ),
        (
            DeviceBuffer::<f32>::new(&ctx, 8)?
                .view(4..9)
                .unwrap_err()
                .error,
            ("Memory::view", "range"),
            "4..9 is outside the slice's 8 elements",
        ),
        (
            Event::elapsed(&Event::new(&ctx)?, &Event::new(&ctx)?).unwrap_err(),
            ("Event::elapsed", "start"),
            "was never recorded",
        ),
        (
            Event::new(&ctx)?.timestamp_us().unwrap_err(),
            ("Event::timestamp_us", "self"),
            "was never recorded",
        ),
        (
            StreamPool::new(&ctx, 0).unwrap_err(),
            ("StreamPool::new", "count"),
            "at least one",
        ),
        (
            Device::open(7).unwrap_err(),
            ("Device::open", "id"),
            "device 7 does not exist: 3 device(s) are visible",
        ),
    ];
    for (err, expected, rule) in checks {
        assert_eq!(invalid(&err), expected, "{err}");
        assert!(err.to_string().contains(rule), "{err}");
    }
    // The buffers come back with the error, for a retry.
    let wrong = stream
        .copy_h2d(
            PinnedBuffer::<f32>::new(&ctx, 4)?,
            DeviceBuffer::new(&ctx, 5)?,
        )
        .await
        .unwrap_err();
    let (src, dst) = wrong.value.expect("handed back");
    assert_eq!((src.len(), dst.len()), (4, 5));
    assert!(
        spans_of(&stream)
            .iter()
            .all(|(f, m)| f.contains_key("error") && m == &["failed"])
    );
    Ok(())
}
