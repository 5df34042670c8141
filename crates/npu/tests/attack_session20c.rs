//! Attacks of the twentieth session's third helper, through the `npu` facade: arithmetic at
//! the edges (pitched copies of random and extreme shapes over casts of views, memsets of
//! views, casts and split parts, value words carved at byte offsets, checked byte for byte
//! against a host model), ownership across contexts (an explicit context's events, notifies,
//! value words, pool blocks and registrations used with the streams of other contexts of its
//! device, every handle of it dropped under held work; another device's handles refused by
//! name, or kept by a peer copy), and OS threads sharing streams, pools,
//! events and completions with a fixed-seed generator.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::future::Future;
use std::sync::Arc;

use bytemuck::Pod;
use common::*;
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, MAX_2D_HEIGHT, MAX_2D_WIDTH_BYTES};
use npu::{Error, Stream};

/// Random bytes from `rng`.
fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// One of the values a shape's field takes: mostly small, sometimes at an edge of its type or
/// of ACL's limits, for elements of `size` bytes.
fn field(rng: &mut Rng, size: usize) -> usize {
    let edges = [
        0,
        1,
        usize::MAX,
        usize::MAX / size,
        (usize::MAX / size).saturating_add(1),
        MAX_2D_HEIGHT,
        MAX_2D_HEIGHT + 1,
        MAX_2D_WIDTH_BYTES / size,
        MAX_2D_WIDTH_BYTES / size + 1,
        isize::MAX as usize,
    ];
    match rng.below(10) {
        0 => edges[rng.below(edges.len())],
        _ => rng.below(9),
    }
}

/// Whether a pitched copy of `shape` over elements of `size` bytes, between a source of
/// `src_len` and a destination of `dst_len` elements, can run, from first principles: ACL's
/// limits (each pitch at least the width, the rows, the bytes per row, pitches expressible in
/// bytes) and every element touched inside its buffer. `Err` holds the arguments a refusal
/// may name: the buffer that is too short when only that is wrong.
fn runnable(
    shape: Copy2d,
    size: usize,
    src_len: usize,
    dst_len: usize,
) -> Result<(), Vec<&'static str>> {
    let Copy2d {
        width,
        height,
        src_pitch,
        dst_pitch,
    } = shape;
    let shape_ok = width <= src_pitch
        && width <= dst_pitch
        && height <= MAX_2D_HEIGHT
        && width
            .checked_mul(size)
            .is_some_and(|w| w <= MAX_2D_WIDTH_BYTES)
        && src_pitch.checked_mul(size).is_some()
        && dst_pitch.checked_mul(size).is_some();
    // The last element touched, plus one, in u128 so that nothing overflows here.
    let extent = |pitch: usize| -> u128 {
        if height == 0 {
            0
        } else {
            pitch as u128 * (height as u128 - 1) + width as u128
        }
    };
    let src_ok = extent(src_pitch) <= src_len as u128;
    let dst_ok = extent(dst_pitch) <= dst_len as u128;
    if shape_ok && src_ok && dst_ok {
        return Ok(());
    }
    let mut named = vec!["shape"];
    if !src_ok {
        named.push("src");
    }
    if !dst_ok {
        named.push("dst");
    }
    if shape_ok {
        named.retain(|&a| a != "shape");
    }
    Err(named)
}

/// What the device must leave in `dst` (the whole destination buffer's bytes) after the copy
/// of `shape` from element `src_at` of `src` to element `dst_at` of `dst`.
fn model_2d(src: &[u8], src_at: usize, dst: &mut [u8], dst_at: usize, shape: Copy2d, size: usize) {
    for row in 0..shape.height {
        let from = (src_at + row * shape.src_pitch) * size;
        let to = (dst_at + row * shape.dst_pitch) * size;
        let n = shape.width * size;
        dst[to..to + n].copy_from_slice(&src[from..from + n]);
    }
}

#[derive(Clone, Copy, Debug)]
enum Direction {
    H2d,
    D2h,
    D2d,
}

/// One pitched copy of elements `T` between a view of `src_total` elements (from `src_at`,
/// `src_len` long) and one of `dst_total` (from `dst_at`, `dst_len` long), both reached as a
/// cast of a byte view: checked against [`runnable`] and [`model_2d`], byte for byte over both
/// whole buffers, and the values must come back whatever happens.
#[allow(clippy::too_many_arguments)]
fn pitched_case<T: Pod>(
    what: &str,
    ctx: &Context,
    stream: &Stream,
    rng: &mut Rng,
    direction: Direction,
    (src_total, src_at, src_len): (usize, usize, usize),
    (dst_total, dst_at, dst_len): (usize, usize, usize),
    shape: Copy2d,
) {
    let size = size_of::<T>();
    let src_bytes = bytes(rng, src_total * size);
    let dst_bytes = bytes(rng, dst_total * size);
    let expected = runnable(shape, size, src_len, dst_len);
    let mut model = dst_bytes.clone();
    if expected.is_ok() {
        model_2d(&src_bytes, src_at, &mut model, dst_at, shape, size);
    }
    let window = |at: usize, len: usize| at * size..(at + len) * size;
    let device = |data: &[u8]| DeviceBuffer::from_host_blocking(ctx, data).unwrap();
    let pinned = |data: &[u8]| PinnedBuffer::from_slice(ctx, data).unwrap();
    let outcome: (Result<(), Error>, Vec<u8>, Vec<u8>) = match direction {
        Direction::H2d => {
            let src = pinned(&src_bytes)
                .view(window(src_at, src_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let dst = device(&dst_bytes)
                .view(window(dst_at, dst_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let (result, (src, dst)) = settle(run(stream.copy_2d_h2d(src, dst, shape)));
            let src: PinnedBuffer<u8> = src.into_inner().into_inner();
            let dst: DeviceBuffer<u8> = dst.into_inner().into_inner();
            (result, src[..].to_vec(), dst.to_vec_blocking().unwrap())
        }
        Direction::D2h => {
            let src = device(&src_bytes)
                .view(window(src_at, src_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let dst = pinned(&dst_bytes)
                .view(window(dst_at, dst_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let (result, (src, dst)) = settle(run(stream.copy_2d_d2h(src, dst, shape)));
            let src: DeviceBuffer<u8> = src.into_inner().into_inner();
            let dst: PinnedBuffer<u8> = dst.into_inner().into_inner();
            (result, src.to_vec_blocking().unwrap(), dst[..].to_vec())
        }
        Direction::D2d => {
            let src = device(&src_bytes)
                .view(window(src_at, src_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let dst = device(&dst_bytes)
                .view(window(dst_at, dst_len))
                .unwrap()
                .cast::<T>()
                .unwrap();
            let (result, (src, dst)) = settle(run(stream.copy_2d_d2d(src, dst, shape)));
            let src: DeviceBuffer<u8> = src.into_inner().into_inner();
            let dst: DeviceBuffer<u8> = dst.into_inner().into_inner();
            (
                result,
                src.to_vec_blocking().unwrap(),
                dst.to_vec_blocking().unwrap(),
            )
        }
    };
    let (result, src_after, dst_after) = outcome;
    let what = format!(
        "{what}: {direction:?} of {} ({size} bytes), {shape:?}, src {src_at}+{src_len} of \
         {src_total}, dst {dst_at}+{dst_len} of {dst_total}",
        std::any::type_name::<T>()
    );
    match (&expected, &result) {
        (Ok(()), Ok(())) => {}
        (Err(named), Err(err)) => {
            let (api, argument) = invalid(err);
            assert!(api.starts_with("Stream::copy_2d_"), "{what}: {err}");
            assert!(
                named.contains(&argument),
                "{what}: refused naming `{argument}`, expected one of {named:?}: {err}"
            );
        }
        _ => panic!("{what}: expected {expected:?}, got {result:?}"),
    }
    assert!(src_after == src_bytes, "{what}: the source changed");
    if dst_after != model {
        let first = (0..model.len())
            .find(|&i| dst_after[i] != model[i])
            .unwrap();
        panic!(
            "{what}: the destination differs from the model at byte {first} (element {})",
            first / size
        );
    }
}

/// An operation's outcome and its values, which must come back whether it failed or not.
fn settle<V>(result: Result<V, npu::stream::OpError<V>>) -> (Result<(), Error>, V) {
    match result {
        Ok(value) => (Ok(()), value),
        Err(failed) => {
            let (error, value) = failed.into_parts();
            (
                Err(error),
                value.expect("a failed copy hands its buffers back"),
            )
        }
    }
}

/// A shape that fits views of `src_len` and `dst_len` elements: rows up to the shorter one's
/// length, pitches from the width up to the largest that fits (any pitch expressible in bytes,
/// `usize::MAX / size` among them, for a single row).
fn fitting(rng: &mut Rng, size: usize, src_len: usize, dst_len: usize) -> Copy2d {
    let shorter = src_len.min(dst_len);
    let width = match rng.below(8) {
        0 => 0,
        _ => shorter.min(1 + rng.below(shorter.max(1))),
    };
    // At most as many rows as fit at the width.
    let rows = (shorter / width.max(1)).clamp(1, 6);
    let height = match rng.below(8) {
        0 => 0,
        1 => 1,
        _ => 1 + rng.below(rows),
    };
    let mut pitch = |len: usize| {
        if height <= 1 {
            match rng.below(3) {
                0 => usize::MAX / size,
                _ => width + rng.below(5),
            }
        } else {
            // (height - 1) * pitch + width <= len, or the widest that fits when none does.
            let most = len.saturating_sub(width) / (height - 1);
            width + rng.below(most.saturating_sub(width) + 1)
        }
    };
    let (src_pitch, dst_pitch) = (pitch(src_len), pitch(dst_len));
    Copy2d {
        width,
        height,
        src_pitch,
        dst_pitch,
    }
}

/// Runs `cases` random pitched copies of elements `T` in every direction.
fn pitched_cases<T: Pod>(ctx: &Context, streams: &[Stream], rng: &mut Rng, cases: usize) {
    let size = size_of::<T>();
    for case in 0..cases {
        let direction = [Direction::H2d, Direction::D2h, Direction::D2d][case % 3];
        let stream = &streams[case % streams.len()];
        let side = |rng: &mut Rng| {
            let total = 1 + rng.below(48);
            let at = match rng.below(8) {
                0 => total,
                _ => rng.below(total / 2 + 1),
            };
            // Often the view ends exactly at the buffer's end; sometimes it is empty.
            let len = match rng.below(8) {
                0..=2 => total - at,
                3 => 0,
                _ => rng.below(total - at + 1),
            };
            (total, at, len)
        };
        let src = side(rng);
        let dst = side(rng);
        let shape = match rng.below(3) {
            // A shape that fits both views, so that most cases move data.
            0 | 1 => fitting(rng, size, src.2, dst.2),
            _ => Copy2d {
                width: field(rng, size),
                height: field(rng, size),
                src_pitch: field(rng, size),
                dst_pitch: field(rng, size),
            },
        };
        pitched_case::<T>(
            &format!("case {case}"),
            ctx,
            stream,
            rng,
            direction,
            src,
            dst,
            shape,
        );
    }
}

/// "Bad input is a typed error naming the API and the argument, never a wrong result":
/// pitched copies in every direction, of elements of 1, 2, 3, 4, 8 and 16 bytes, between casts
/// of byte views that start anywhere in their buffers and may end exactly at the end or be
/// empty, with widths, heights and pitches drawn from small values and the edges (0, 1,
/// `usize::MAX`, the largest pitch expressible in bytes and one past it, ACL's row and width
/// limits and one past them, `isize::MAX`). A copy runs exactly when the shape fits ACL's
/// limits and both buffers (a first-principles model, in `u128`), and then the whole of both
/// buffers must match a host model byte for byte; a refusal names the copy and `shape`, or the
/// buffer that is too short, and leaves both untouched. Every strategy; seeded.
#[test]
fn pitched_copies_of_random_and_extreme_shapes_match_a_host_model() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    let streams: Vec<Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let mut rng = Rng(0x02dc_0ffe_e20c);
    pitched_cases::<u8>(&ctx, &streams, &mut rng, 150);
    pitched_cases::<u16>(&ctx, &streams, &mut rng, 150);
    pitched_cases::<[u8; 3]>(&ctx, &streams, &mut rng, 150);
    pitched_cases::<u32>(&ctx, &streams, &mut rng, 150);
    pitched_cases::<u64>(&ctx, &streams, &mut rng, 150);
    pitched_cases::<[u64; 2]>(&ctx, &streams, &mut rng, 150);
    for s in &streams {
        run(s.synchronize()).unwrap();
    }
    drop(streams);
    until_released("every buffer released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// How one job of the shared-streams stress ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Every step succeeded and the data read back was the job's own.
    Exact,
    /// A step failed in a way a concurrent abort or stop of a shared stream explains.
    Disrupted,
    /// The job's future was dropped at a poll chosen by the generator.
    Dropped,
}

/// Whether `err` is what an abort or a stop of a shared stream (by this or another thread)
/// makes of an operation: discarded, or refused by a stopped stream. Anything else (a
/// refused argument, above all) is a defect.
fn disrupted(err: &Error) -> bool {
    matches!(err, Error::Aborted { .. } | Error::Acl(_))
}

/// A future that is ready at its `n`th poll and wakes itself before, so that a `select!`
/// against it drops the other branch at a poll the generator chose, without a timer.
struct ReadyAfter(usize);

impl std::future::Future for ReadyAfter {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 == 0 {
            return std::task::Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// What the streams, pools and events the stress threads share are.
struct Shared {
    ctx: Context,
    streams: Vec<Stream>,
    pinned: PinnedPool,
    device: DevicePool,
    events: Vec<Event>,
    completions: std::sync::Mutex<Vec<npu::stream::Completion>>,
}

/// One job: a pinned block and a device block from the shared pools, a copy in on one shared
/// stream, an event to a second that memsets the upper half of a split of the device block,
/// an event back and a copy out on the first, with aborts and stops of either stream mixed in.
async fn job(shared: &Shared, rng: &mut Rng, tag: u32) -> Result<(), Error> {
    let n = 2 + rng.below(2047);
    let s = &shared.streams[rng.below(shared.streams.len())];
    let t = &shared.streams[rng.below(shared.streams.len())];
    let disruption = rng.below(24);
    let mut host = shared.pinned.alloc::<u32>(n).await?;
    for (k, word) in host.iter_mut().enumerate() {
        *word = tag.wrapping_add(k as u32);
    }
    let device = shared.device.alloc::<u32>(s, n).await?;
    let abort = match disruption {
        0 => Some(s.abort()),
        1 => {
            s.stop()?;
            Some(s.abort())
        }
        _ => None,
    };
    let copy_in = s.copy_h2d(host, device);
    shared
        .completions
        .lock()
        .unwrap()
        .push(copy_in.completion().clone());
    if let Some(abort) = abort {
        abort.await?;
    }
    let (host, device) = copy_in.await.map_err(|e| e.error)?;
    let event = &shared.events[rng.below(shared.events.len())];
    event.record(s)?;
    t.wait_event(event)?;
    let (head, tail) = device.into_halves(n / 2).map_err(|e| e.error)?;
    let tail = t.memset(tail, 0xab).await.map_err(|e| e.error)?;
    if disruption == 2 {
        t.abort().await?;
    }
    let device = head
        .join(tail)
        .map_err(|e| e.error)?
        .into_whole()
        .map_err(|e| e.error)?;
    let back = Event::new(&shared.ctx)?;
    back.record(t)?;
    s.wait_event(&back)?;
    let copy_out = s.copy_d2h(device, host);
    shared
        .completions
        .lock()
        .unwrap()
        .push(copy_out.completion().clone());
    let (_device, host) = copy_out.await.map_err(|e| e.error)?;
    for (k, &word) in host.iter().enumerate() {
        let expected = if k < n / 2 {
            tag.wrapping_add(k as u32)
        } else {
            0xabab_abab
        };
        assert_eq!(
            word, expected,
            "job {tag:#x}: word {k} of {n} is another job's or stale"
        );
    }
    Ok(())
}

/// Rules 1 to 3, 5 and 7 and "nothing leaks" under concurrency: four OS threads, each on a
/// Tokio runtime of its own, share three streams (one per strategy), a pinned pool and a
/// device pool of 64 KiB each (so that they wait on each other's blocks) and two events; each
/// runs 60 jobs of [`job`] (a unique pattern per job, copied in, half of it overwritten on
/// another stream after an event, copied out), and the generator (seeded per thread) aborts
/// or stops-then-aborts a shared stream inside some jobs and drops others at a chosen poll.
/// A job whose every step succeeded must read back exactly its own pattern (a pool block
/// handed out while another job's copy still used it would show another job's words); a
/// failed step must be an abort's or a stopped stream's error, never a refused argument; once
/// the threads are done every operation completes, each stream runs work again after one
/// more abort, and the pools and the device hold nothing. Both device-pool backends.
#[test]
fn threads_sharing_streams_pools_and_events_get_their_own_data_and_leak_nothing() {
    use npu::memory::DevicePoolBackend;
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for (round, backend) in [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching]
        .into_iter()
        .enumerate()
    {
        let shared = Shared {
            ctx: ctx.clone(),
            streams: STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect(),
            pinned: PinnedPool::builder(&ctx)
                .capacity(64 << 10)
                .build()
                .unwrap(),
            device: DevicePool::builder(&ctx)
                .capacity(64 << 10)
                .backend(backend)
                .build()
                .unwrap(),
            events: vec![Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap()],
            completions: Default::default(),
        };
        let ended = watchdog("the shared-streams stress", || {
            std::thread::scope(|scope| {
                let threads: Vec<_> = (0..4u32)
                    .map(|i| {
                        let shared = &shared;
                        scope.spawn(move || {
                            let mut rng = Rng(0x5eed_0000 + (round as u64) * 16 + u64::from(i) + 1);
                            let mut ended = Vec::new();
                            for j in 0..60u32 {
                                let tag = (i << 28) | (j << 16);
                                let drop_at = match rng.below(6) {
                                    0 => Some(rng.below(12)),
                                    _ => None,
                                };
                                let outcome = run(async {
                                    let work = job(shared, &mut rng, tag);
                                    match drop_at {
                                        None => Some(work.await),
                                        Some(polls) => tokio::select! {
                                            biased;
                                            result = work => Some(result),
                                            () = ReadyAfter(polls) => None,
                                        },
                                    }
                                });
                                ended.push(match outcome {
                                    None => Ended::Dropped,
                                    Some(Ok(())) => Ended::Exact,
                                    Some(Err(err)) => {
                                        assert!(
                                            disrupted(&err),
                                            "thread {i} job {j}: not an abort's or a stop's \
                                             error: {err:?}"
                                        );
                                        Ended::Disrupted
                                    }
                                });
                            }
                            ended
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .flat_map(|t| t.join().expect("a stress thread failed"))
                    .collect::<Vec<_>>()
            })
        });
        let exact = ended.iter().filter(|&e| *e == Ended::Exact).count();
        assert!(
            exact >= 60,
            "{backend:?}: only {exact} jobs ran to the end: {ended:?}"
        );
        // A stream a thread stopped may still be stopped if another's abort came first: one
        // more abort each, then every stream must run work again.
        for s in &shared.streams {
            run(s.abort()).unwrap();
            let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
            let buffer = run(s.memset(buffer, 7)).unwrap();
            assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 64], "{backend:?}");
        }
        let completions = std::mem::take(&mut *shared.completions.lock().unwrap());
        run(async {
            for done in &completions {
                let _ = done.wait().await;
            }
        });
        until_released(&format!("{backend:?}: every block back"), || {
            let (p, d) = (shared.pinned.stats(), shared.device.stats().cache);
            p.allocated == 0 && p.awaiting_blocks == 0 && d.allocated == 0 && d.awaiting_blocks == 0
        });
        drop(shared);
    }
    until_released("every stream, block and buffer released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Rule 7 ("every waiting task is woken") across OS threads, with the waiters churning while
/// the operation completes: for a memset (held on the device in half the rounds, its `Op`
/// dropped by another thread in a third of them), one thread waits with
/// `Completion::wait_blocking`, one with a `BlockingWaiter` in short slices, one polls and drops
/// 200 `Completion::wait` futures before awaiting one, and one runs eight tasks of a
/// multi-thread runtime that each poll, drop and await `wait` futures; the device is released
/// while they churn. Every waiter must return the operation's `Ok`, the `Op` must resolve to
/// its buffer with the memset's bytes (or, dropped, release it), every strategy, 40 rounds.
#[test]
fn a_completion_waited_and_dropped_on_many_threads_wakes_every_waiter() {
    use std::sync::Barrier;
    use std::time::{Duration, Instant};
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for round in 0..40u8 {
            let what = format!("{strategy:?} round {round}");
            let held = (round % 2 == 0).then(|| sim::hold(&ctx.device()).unwrap());
            let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), round);
            let done = op.completion().clone();
            let dropper = round % 3 == 1;
            let start = Arc::new(Barrier::new(6));
            let outcome = watchdog(&what, || {
                std::thread::scope(|scope| {
                    let blocking = {
                        let (done, start) = (done.clone(), start.clone());
                        scope.spawn(move || {
                            start.wait();
                            done.wait_blocking()
                        })
                    };
                    let sliced = {
                        let (done, start) = (done.clone(), start.clone());
                        scope.spawn(move || {
                            start.wait();
                            let deadline = Instant::now() + HANG;
                            let waiter = done.blocking_waiter();
                            loop {
                                if let Some(result) = waiter.wait_for(Duration::from_micros(50)) {
                                    return result;
                                }
                                assert!(Instant::now() < deadline, "the sliced waiter hung");
                            }
                        })
                    };
                    let churning = {
                        let (done, start) = (done.clone(), start.clone());
                        scope.spawn(move || {
                            start.wait();
                            run(async {
                                for _ in 0..200 {
                                    let mut wait = std::pin::pin!(done.wait());
                                    let _ = polled_once(wait.as_mut());
                                }
                                done.wait().await
                            })
                        })
                    };
                    let tasks = {
                        let (done, start) = (done.clone(), start.clone());
                        scope.spawn(move || {
                            let rt = tokio::runtime::Builder::new_multi_thread()
                                .worker_threads(2)
                                .enable_time()
                                .build()
                                .unwrap();
                            start.wait();
                            rt.block_on(async {
                                let waiters: Vec<_> = (0..8)
                                    .map(|k| {
                                        let done = done.clone();
                                        tokio::spawn(async move {
                                            for _ in 0..(k * 10) {
                                                let mut wait = std::pin::pin!(done.wait());
                                                // Registers this task's waker, then drops it.
                                                std::future::poll_fn(|cx| {
                                                    let _ = wait.as_mut().poll(cx);
                                                    std::task::Poll::Ready(())
                                                })
                                                .await;
                                                tokio::task::yield_now().await;
                                            }
                                            done.wait().await
                                        })
                                    })
                                    .collect();
                                let mut results = Vec::new();
                                for waiter in waiters {
                                    results.push(
                                        tokio::time::timeout(HANG, waiter)
                                            .await
                                            .expect("a task waiter hung")
                                            .unwrap(),
                                    );
                                }
                                results
                            })
                        })
                    };
                    let owner = {
                        let start = start.clone();
                        scope.spawn(move || {
                            start.wait();
                            if dropper {
                                drop(op);
                                None
                            } else {
                                Some(run(op))
                            }
                        })
                    };
                    start.wait();
                    // Released while the waiters register, churn and drop.
                    if let Some(held) = held {
                        held.release().unwrap();
                    }
                    (
                        blocking.join().unwrap(),
                        sliced.join().unwrap(),
                        churning.join().unwrap(),
                        tasks.join().unwrap(),
                        owner.join().unwrap(),
                    )
                })
            });
            let (blocking, sliced, churning, tasks, owner) = outcome;
            assert!(
                blocking.is_ok() && sliced.is_ok() && churning.is_ok(),
                "{what}"
            );
            assert!(tasks.iter().all(Result::is_ok), "{what}: {tasks:?}");
            if let Some(owner) = owner {
                let buffer = owner.unwrap();
                assert_eq!(
                    buffer.to_vec_blocking().unwrap(),
                    vec![round; 4096],
                    "{what}"
                );
            }
        }
        run(s.synchronize()).unwrap();
    }
    until_released("every buffer released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Rules 2 and 3 across contexts: every handle an explicit context `X` owns (an event, a
/// notify, a shared value word, a device-pool block of each backend, a host registration, the
/// stream the pool allocated on, and `X` itself) is given to the streams of two other contexts
/// of the same device (another explicit one and the primary) while the device is held: the
/// block memset and the registration copied from on one, the event recorded there and waited
/// for on the other, the notify recorded and waited for, the word written and waited on; every
/// future is dropped, and then every handle of `X`. Nothing may be freed or destroyed while
/// the device is held (the block is not served again, the allocations stay); once released,
/// every operation completes without error, the copy's bytes are there, and every allocation,
/// stream, event and registration goes. Every strategy.
#[test]
fn a_contexts_handles_used_by_other_contexts_streams_outlive_the_context() {
    use npu::memory::{DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags};
    use npu::stream::{Notify, ValueCondition, ValueWord};
    let (_guard, primary, _) = exclusive(None);
    let baseline = live_objects(&primary);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let device = primary.device();
        let x = device.create_context().unwrap();
        let y = device.create_context().unwrap();
        let (sy, sp) = (stream(&y, strategy), stream(&primary, strategy));
        let sx = stream(&x, strategy);
        let event = Event::new(&x).unwrap();
        let notify = Notify::new(&x).unwrap();
        let word = Arc::new(ValueWord::new(&x, 0).unwrap());
        let pools: Vec<DevicePool> = [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching]
            .into_iter()
            .map(|backend| {
                DevicePool::builder(&x)
                    .capacity(4096)
                    .backend(backend)
                    .build()
                    .unwrap()
            })
            .collect();
        let blocks: Vec<_> = pools
            .iter()
            .map(|pool| run(pool.alloc::<u8>(&sx, 4096)).unwrap())
            .collect();
        let page = PageAlignedBuffer::<u8>::from_slice(&[0x5a; 4096]).unwrap();
        let registration = HostRegistration::new(&x, page, RegisterFlags::PINNED).unwrap();
        let landing = DeviceBuffer::<u8>::new(&y, 4096).unwrap();
        let before = live_objects(&primary);

        let held = sim::hold(&device).unwrap();
        let mut done = Vec::new();
        for (k, block) in blocks.into_iter().enumerate() {
            let op = sy.memset(block, 0x30 + k as u8);
            done.push(op.completion().clone());
        }
        let copy = sy.copy_h2d(registration, landing);
        done.push(copy.completion().clone());
        event.record(&sy).unwrap();
        sp.wait_event(&event).unwrap();
        done.push(sy.record_notify(&notify).completion().clone());
        done.push(sp.wait_notify(&notify).completion().clone());
        done.push(sp.write_value(word.clone(), 9).completion().clone());
        done.push(
            sy.wait_value(word.clone(), 9, ValueCondition::Equal)
                .completion()
                .clone(),
        );
        let waited = event.wait();
        drop((event, notify, word, sx, x));
        sim::flush_releases();
        assert!(
            done.iter().all(|d| !d.is_complete()),
            "{what}: work finished on a held device"
        );
        for pool in &pools {
            assert!(
                pool.try_alloc::<u8>(&stream(pool.context(), strategy), 4096)
                    .unwrap()
                    .is_none(),
                "{what}: a block in flight was served again"
            );
        }
        drop(pools);
        let during = live_objects(&primary);
        assert!(
            during[0] >= before[0] && during[4] >= before[4],
            "{what}: memory or a registration went under held work: {before:?} -> {during:?}"
        );
        held.release().unwrap();
        run(async {
            for d in &done {
                d.wait().await.unwrap();
            }
            waited.await.unwrap();
        });
        let (registration, landing) = run(copy).unwrap();
        assert_eq!(landing.to_vec_blocking().unwrap(), [0x5a; 4096], "{what}");
        drop((registration, landing));
        run(sy.synchronize()).unwrap();
        run(sp.synchronize()).unwrap();
        drop((sy, sp, y));
        until_released(&format!("{what}: everything of X released"), || {
            within(live_objects(&primary), baseline)
        });
    }
}

/// "Never a wrong result" for memsets and value stores through every kind of sub-range: a
/// device buffer of random length is split at random points (parts of zero length among
/// them), each part seen through a view (empty views at the part's end among them) and a cast
/// to elements of 1, 2, 3, 4 or 8 bytes where its bytes allow (otherwise the cast is refused by
/// name and hands the part back), memset with its own value; some one-`u64` casts become value
/// words and get a store (a word at a byte offset not a multiple of 8 is refused by name). The
/// parts are joined back in random order and the whole buffer must match a host model byte for
/// byte. Every strategy, seeded, 60 rounds each.
#[test]
fn memsets_and_value_stores_through_views_casts_and_parts_match_a_host_model() {
    use npu::memory::{Cast, Split, View};
    use npu::stream::ValueWord;
    type Part = Split<DeviceBuffer<u8>>;
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_memory(&ctx);
    let mut rng = Rng(0x5e7_20c);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for round in 0..60 {
            let what = format!("{strategy:?} round {round}");
            let total = 1 + rng.below(200);
            let initial = bytes(&mut rng, total);
            let mut model = initial.clone();
            let buffer = DeviceBuffer::from_host_blocking(&ctx, &initial).unwrap();
            // Random cut points, some repeated (empty parts), from 0 to the end.
            let mut cuts: Vec<usize> = (0..rng.below(6)).map(|_| rng.below(total + 1)).collect();
            cuts.sort_unstable();
            let mut parts: Vec<Part> = Vec::new();
            let (mut rest, mut at) = (buffer.into_halves(0).unwrap().1, 0);
            for cut in cuts {
                let (head, tail) = rest.into_halves(cut - at).unwrap();
                parts.push(head);
                (rest, at) = (tail, cut);
            }
            parts.push(rest);
            let mut back: Vec<Part> = Vec::new();
            for part in parts {
                let (offset, len) = (part.offset(), part.len());
                let from = rng.below(len + 1);
                let to = from + rng.below(len - from + 1);
                let value = rng.next() as u8;
                let view: View<Part> = part.view(from..to).unwrap();
                let (lo, hi) = (offset + from, offset + to);
                macro_rules! memset_as {
                    ($t:ty) => {{
                        let size = size_of::<$t>();
                        match view.cast::<$t>() {
                            Ok(cast) => {
                                let cast: Cast<View<Part>, $t> = run(s.memset(cast, value))
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                                model[lo..hi].fill(value);
                                cast.into_inner()
                            }
                            Err(refused) => {
                                let (api, argument) = invalid(&refused.error);
                                assert_eq!((api, argument), ("Memory::cast", "U"), "{what}");
                                let view = refused.value.unwrap();
                                let addr = npu::memory::Memory::addr(&view) as usize;
                                assert!(
                                    (hi - lo) % size != 0 || addr % align_of::<$t>() != 0,
                                    "{what}: a cast of {} bytes at {addr:#x} to {} refused",
                                    hi - lo,
                                    stringify!($t)
                                );
                                view
                            }
                        }
                    }};
                }
                let view = match rng.below(6) {
                    0 => memset_as!(u8),
                    1 => memset_as!(u16),
                    2 => memset_as!([u8; 3]),
                    3 => memset_as!(u32),
                    4 => memset_as!(u64),
                    _ => {
                        // A value word: a cast to one u64, if the view is eight bytes long.
                        let store = rng.next();
                        match view.cast::<u64>() {
                            Ok(cast) if cast.len() == 1 => match ValueWord::from_memory(cast) {
                                Ok(word) => {
                                    let word = run(s.write_value(word, store)).unwrap();
                                    model[lo..hi].copy_from_slice(&store.to_ne_bytes());
                                    word.into_inner().into_inner()
                                }
                                Err(refused) => {
                                    assert_eq!(
                                        invalid(&refused.error),
                                        ("ValueWord::from_memory", "memory"),
                                        "{what}"
                                    );
                                    refused.value.unwrap().into_inner()
                                }
                            },
                            Ok(cast) => cast.into_inner(),
                            Err(refused) => refused.value.unwrap(),
                        }
                    }
                };
                back.push(view.into_inner());
            }
            // Joined back in a random order: each join takes a part adjacent to the whole so
            // far, from either side. An empty part left inside the joined range (its
            // neighbours were joined past it) touches nothing any more: a join of it is
            // refused by name, handing both back, and it is dropped.
            let mut whole = back.swap_remove(rng.below(back.len()));
            while !back.is_empty() {
                let next = rng.below(back.len());
                let adjacent = (0..back.len()).map(|k| (next + k) % back.len()).find(|&k| {
                    let p = &back[k];
                    p.offset() + p.len() == whole.offset()
                        || whole.offset() + whole.len() == p.offset()
                });
                whole = match adjacent {
                    Some(k) => whole.join(back.swap_remove(k)).unwrap(),
                    None => {
                        let stranded = back.swap_remove(next);
                        assert!(stranded.is_empty(), "{what}: {stranded:?} touches no part");
                        let refused = whole.join(stranded).unwrap_err();
                        assert_eq!(invalid(&refused.error), ("Split::join", "other"), "{what}");
                        refused.value.unwrap().0
                    }
                };
            }
            let buffer = whole.into_whole().unwrap();
            let got = buffer.to_vec_blocking().unwrap();
            if got != model {
                let first = (0..total).find(|&i| got[i] != model[i]).unwrap();
                panic!("{what}: byte {first} of {total} differs from the model");
            }
        }
        run(s.synchronize()).unwrap();
    }
    until_released("every buffer released", || {
        within(live_memory(&ctx), baseline)
    });
}

/// Ownership across devices: device 1's notify, shared value word, device-pool block and
/// event given to a stream of device 0 are refused naming the method and the argument
/// (`notify`, `word`, `dst`; the event's wait is ACL's typed refusal), each value handed back
/// and still usable on device 1. Then, with peer access from device 0 enabled, the block is the
/// source of a copy on device 0's held stream whose future and access guard are both dropped:
/// the block is not served again by its pool until the copy ran, then comes back holding its
/// bytes, and the stream goes on. Every strategy.
#[test]
fn another_devices_handles_are_refused_by_name_or_kept_until_a_peer_copy_ran() {
    use npu::memory::DevicePoolBackend;
    use npu::stream::{Notify, ValueWord};
    let (_guard, d0, d1) = exclusive(None);
    let baseline = (live_memory(&d0), live_memory(&d1));
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let (s0, s1) = (stream(&d0, strategy), stream(&d1, strategy));
        let notify = Notify::new(&d1).unwrap();
        let word = Arc::new(ValueWord::new(&d1, 3).unwrap());
        let pool = DevicePool::builder(&d1)
            .capacity(4096)
            .backend(DevicePoolBackend::Caching)
            .build()
            .unwrap();
        let block = run(pool.alloc::<u8>(&s1, 4096)).unwrap();
        let event = Event::new(&d1).unwrap();
        event.record(&s1).unwrap();

        let err = run(s0.record_notify(&notify)).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::record_notify", "notify"),
            "{what}"
        );
        let err = run(s0.write_value(word.clone(), 7)).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::write_value", "word"),
            "{what}"
        );
        drop(err.value.expect("the word comes back"));
        let err = run(s0.memset(block, 1)).unwrap_err();
        assert_eq!(invalid(&err.error), ("Stream::memset", "dst"), "{what}");
        let block = err.value.expect("the block comes back");
        assert!(
            s0.wait_event(&event).is_err(),
            "{what}: another device's event"
        );
        // Still usable where they belong.
        run(s1.record_notify(&notify)).unwrap();
        run(s1.wait_notify(&notify)).unwrap();
        let mut word = Arc::into_inner(run(s1.write_value(word, 7)).unwrap()).unwrap();
        assert_eq!(word.read_blocking().unwrap(), 7, "{what}");
        let block = run(s1.memset(block, 0x6b)).unwrap();

        let access = d0.device().enable_peer_access(&d1.device()).unwrap();
        let held = sim::hold(&d0.device()).unwrap();
        let copy = s0.copy_d2d(block, DeviceBuffer::<u8>::new(&d0, 4096).unwrap());
        let copied = copy.completion().clone();
        drop((copy, access));
        sim::flush_releases();
        assert!(!copied.is_complete(), "{what}: the device is held");
        assert!(
            pool.try_alloc::<u8>(&s1, 4096).unwrap().is_none(),
            "{what}: the block was served again under the held copy"
        );
        held.release().unwrap();
        run(copied.wait()).unwrap();
        until_released(&format!("{what}: the block is back"), || {
            pool.stats().cache.cached == 4096
        });
        let block = pool.try_alloc::<u8>(&s1, 4096).unwrap().expect("the block");
        assert_eq!(run(s1.download(block)).unwrap(), vec![0x6b; 4096], "{what}");
        run(s0.synchronize()).unwrap();
        drop((s0, s1, notify, word, pool, event));
    }
    until_released("everything of both devices released", || {
        within(live_memory(&d0), baseline.0) && within(live_memory(&d1), baseline.1)
    });
}
