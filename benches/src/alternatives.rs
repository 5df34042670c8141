//! npu-rs against what a Tokio user would otherwise write to wait for device work, on the
//! same work in the same run:
//!
//! - (a) `aclrtSynchronizeStream` called directly in the async task (it blocks a worker);
//! - (b) `tokio::task::spawn_blocking` around `aclrtSynchronizeStream`;
//! - (c) a callback thread looping `aclrtProcessReport`, with `aclrtLaunchCallback` after each
//!   operation completing a `tokio::sync::oneshot`;
//! - npu-rs: `stream.copy_h2d(src, dst).await`.
//!
//! The work: [`TASKS`] tasks on a 2-worker multi-threaded Tokio runtime, each with its own
//! stream, each doing [`OPS_PER_TASK`] 64 KiB host-to-device copies one after the other, while
//! a heartbeat task sleeps 1 ms at a time and records how late it wakes (how responsive the
//! runtime stays for everything else the server does). The simulator's timing model makes
//! every copy take [`TASK_NS`] of device time, so the device work is the same for every
//! variant and the differences are the waiting strategies. The raw variants call the ACL
//! function table of the same runtime npu-rs uses.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use npu::Stream;
use npu::ffi::{
    ACL_CALLBACK_NO_BLOCK, ACL_ERROR_RT_REPORT_TIMEOUT, ACL_MEMCPY_HOST_TO_DEVICE, ACL_SUCCESS,
};
use npu::prelude::*;
use npu_core::acl_call;
use tokio::sync::oneshot;

use crate::Table;
use crate::stats::{micros, percentile, thread_count};

const SECTION: &str = "vs alternatives";
/// Concurrent tasks, each with its own stream.
pub const TASKS: usize = 32;
/// Copies each task awaits one after the other.
pub const OPS_PER_TASK: usize = 60;
/// Device time of each copy under the timing model.
pub const TASK_NS: u64 = 200_000;
/// Bytes per copy.
const BYTES: usize = 64 << 10;
/// The device the section runs on (its timing model is set for the section only).
const DEVICE: u32 = 1;
/// Rounds per variant; the median round is reported.
const ROUNDS: usize = 3;

/// How a task waits for its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    NpuRs,
    SyncOnWorker,
    SpawnBlocking,
    CallbackThread,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::NpuRs,
        Variant::SyncOnWorker,
        Variant::SpawnBlocking,
        Variant::CallbackThread,
    ];

    fn label(self) -> &'static str {
        match self {
            Variant::NpuRs => "npu-rs (.await, reactor)",
            Variant::SyncOnWorker => "(a) aclrtSynchronizeStream on the worker",
            Variant::SpawnBlocking => "(b) spawn_blocking + aclrtSynchronizeStream",
            Variant::CallbackThread => "(c) callback thread + oneshot",
        }
    }
}

/// One round of one variant.
struct Round {
    wall: Duration,
    latencies: Vec<Duration>,
    heartbeat_lateness: Vec<Duration>,
    /// Threads the process had at the peak of the round beyond those it had at the start.
    added_threads: usize,
}

/// What one task owns: its stream and the two buffers its copies use.
struct Lane {
    stream: Stream,
    host: PinnedBuffer<u8>,
    device: DeviceBuffer<u8>,
}

/// Runs the section.
pub fn run(table: &mut Table) {
    let device = Device::open(DEVICE).expect("open the bench device");
    let model = npu::sim::TimingModel::default().min_task_ns(TASK_NS);
    npu::sim::control::set_timing(DEVICE as i32, Some(model)).expect("set the timing model");
    let ctx = device.primary_context();
    let mut callback = CallbackThread::start(ctx);
    let mut lanes: Vec<Lane> = (0..TASKS)
        .map(|_| Lane {
            stream: Stream::new(ctx).expect("a stream"),
            host: PinnedBuffer::new(ctx, BYTES).expect("pinned memory"),
            device: DeviceBuffer::new(ctx, BYTES).expect("device memory"),
        })
        .collect();
    callback.subscribe(&lanes);
    let mut rounds: Vec<(Variant, Vec<Round>)> = Variant::ALL.map(|v| (v, Vec::new())).into();
    // Interleave the variants round by round, so each sees the same machine state. Each round
    // gets a fresh Tokio runtime, so threads one variant starts (the blocking pool) are gone
    // before the next one is measured.
    for _ in 0..ROUNDS {
        for (variant, results) in &mut rounds {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a Tokio runtime");
            let (round, back) = runtime.block_on(round(*variant, ctx.clone(), lanes));
            lanes = back;
            results.push(round);
        }
    }
    drop(callback);
    npu::sim::control::set_timing(DEVICE as i32, None).expect("clear the timing model");

    let medians: Vec<(Variant, Round)> = rounds
        .into_iter()
        .map(|(variant, mut results)| {
            results.sort_by_key(|r| r.wall);
            (variant, results.swap_remove(ROUNDS / 2))
        })
        .collect();
    report(table, &medians);
}

fn report(table: &mut Table, medians: &[(Variant, Round)]) {
    let ops = (TASKS * OPS_PER_TASK) as f64;
    let throughput = |r: &Round| ops / r.wall.as_secs_f64();
    let npu = &medians[0].1;
    for (variant, r) in medians {
        let mut latencies = r.latencies.clone();
        let mut lateness = r.heartbeat_lateness.clone();
        table.push(
            SECTION,
            format!("{}: throughput", variant.label()),
            format!("{:.0} ops/s", throughput(r)),
            if *variant == Variant::NpuRs {
                format!(
                    "{TASKS} tasks x {OPS_PER_TASK} awaited 64 KiB copies, {} µs each on the device",
                    TASK_NS / 1000
                )
            } else {
                format!("npu-rs is {:.2}x this", throughput(npu) / throughput(r))
            },
        );
        table.push(
            SECTION,
            format!("{}: op latency p50 / p99", variant.label()),
            format!(
                "{:.0} / {:.0} µs",
                micros(percentile(&mut latencies, 0.50)),
                micros(percentile(&mut latencies, 0.99))
            ),
            "submit to awaited result",
        );
        table.push(
            SECTION,
            format!("{}: 1 ms heartbeat lateness p99", variant.label()),
            format!("{:.0} µs", micros(percentile(&mut lateness, 0.99))),
            format!("threads added while waiting: {}", r.added_threads),
        );
    }
}

/// Runs the tasks of one variant to completion next to the heartbeat; gives the lanes back.
async fn round(variant: Variant, ctx: Context, lanes: Vec<Lane>) -> (Round, Vec<Lane>) {
    let done = Arc::new(AtomicBool::new(false));
    let threads_before = thread_count();
    let heartbeat = tokio::spawn(heartbeat(done.clone()));
    let start = Instant::now();
    let tasks: Vec<_> = lanes
        .into_iter()
        .map(|lane| tokio::spawn(task(variant, ctx.clone(), lane)))
        .collect();
    let mut latencies = Vec::with_capacity(TASKS * OPS_PER_TASK);
    let mut lanes = Vec::with_capacity(TASKS);
    for task in tasks {
        let (lane, task_latencies) = task.await.expect("a bench task panicked");
        lanes.push(lane);
        latencies.extend(task_latencies);
    }
    let wall = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let (heartbeat_lateness, peak_threads) = heartbeat.await.expect("the heartbeat panicked");
    let round = Round {
        wall,
        latencies,
        heartbeat_lateness,
        added_threads: peak_threads.saturating_sub(threads_before),
    };
    (round, lanes)
}

/// Sleeps 1 ms at a time until `done`, recording how late each wake-up is and the peak
/// thread count of the process.
async fn heartbeat(done: Arc<AtomicBool>) -> (Vec<Duration>, usize) {
    const PERIOD: Duration = Duration::from_millis(1);
    let (mut lateness, mut peak) = (Vec::new(), 0);
    while !done.load(Ordering::Relaxed) {
        let start = Instant::now();
        tokio::time::sleep(PERIOD).await;
        lateness.push(start.elapsed().saturating_sub(PERIOD));
        peak = peak.max(thread_count());
    }
    (lateness, peak)
}

/// One task: its copies, one after the other, each awaited the variant's way.
async fn task(variant: Variant, ctx: Context, lane: Lane) -> (Lane, Vec<Duration>) {
    let Lane {
        stream,
        mut host,
        mut device,
    } = lane;
    let mut latencies = Vec::with_capacity(OPS_PER_TASK);
    for _ in 0..OPS_PER_TASK {
        let start = Instant::now();
        if variant == Variant::NpuRs {
            (host, device) = stream.copy_h2d(host, device).await.expect("npu-rs copy");
        } else {
            submit_raw_copy(&ctx, &stream, &host, &mut device);
            match variant {
                Variant::SyncOnWorker => synchronize(&ctx, &stream),
                Variant::SpawnBlocking => {
                    let (ctx, stream) = (ctx.clone(), stream.clone());
                    tokio::task::spawn_blocking(move || synchronize(&ctx, &stream))
                        .await
                        .expect("the blocking wait panicked");
                }
                Variant::CallbackThread => callback_wait(&ctx, &stream).await,
                Variant::NpuRs => unreachable!("handled above"),
            }
        }
        latencies.push(start.elapsed());
    }
    let lane = Lane {
        stream,
        host,
        device,
    };
    (lane, latencies)
}

/// `aclrtMemcpyAsync` from `host` to `device` on `stream`, as a user of the C API writes it.
fn submit_raw_copy(
    ctx: &Context,
    stream: &Stream,
    host: &PinnedBuffer<u8>,
    device: &mut DeviceBuffer<u8>,
) {
    ctx.bind().expect("bind the context");
    let (dst, src) = (device.addr_mut(), host.addr());
    // SAFETY: both buffers hold BYTES bytes and are not touched by anyone else until the
    // caller has waited for the stream; the stream is alive and of the bound context.
    unsafe {
        acl_call!(
            ctx.runtime(),
            aclrtMemcpyAsync(
                dst,
                BYTES,
                src,
                BYTES,
                ACL_MEMCPY_HOST_TO_DEVICE,
                stream.as_raw()
            )
        )
    }
    .expect("aclrtMemcpyAsync");
}

/// `aclrtSynchronizeStream`: blocks the calling thread until the stream is idle.
fn synchronize(ctx: &Context, stream: &Stream) {
    ctx.bind().expect("bind the context");
    // SAFETY: a live stream of the bound context.
    unsafe { acl_call!(ctx.runtime(), aclrtSynchronizeStream(stream.as_raw())) }
        .expect("aclrtSynchronizeStream");
}

/// Runs on the callback thread when the stream reaches the callback: completes the oneshot
/// whose sender `user_data` owns.
unsafe extern "C" fn complete_oneshot(user_data: *mut c_void) {
    // SAFETY: `user_data` is the `Box<oneshot::Sender<()>>` leaked by `callback_wait`, and
    // ACL runs each launched callback exactly once.
    let sender = unsafe { Box::from_raw(user_data.cast::<oneshot::Sender<()>>()) };
    let _ = sender.send(());
}

/// `aclrtLaunchCallback` after the copy, then await the oneshot its callback completes.
async fn callback_wait(ctx: &Context, stream: &Stream) {
    let (tx, rx) = oneshot::channel::<()>();
    let user_data = Box::into_raw(Box::new(tx)).cast::<c_void>();
    ctx.bind().expect("bind the context");
    // SAFETY: the stream is alive, of the bound context and subscribed to the callback
    // thread; `complete_oneshot` takes back ownership of `user_data` when it runs.
    unsafe {
        acl_call!(
            ctx.runtime(),
            aclrtLaunchCallback(
                Some(complete_oneshot),
                user_data,
                ACL_CALLBACK_NO_BLOCK,
                stream.as_raw()
            )
        )
    }
    .expect("aclrtLaunchCallback");
    rx.await.expect("the callback ran");
}

/// The thread a C-API user starts for callbacks: it loops `aclrtProcessReport`, which runs
/// the callbacks of the streams subscribed to it.
struct CallbackThread {
    ctx: Context,
    tid: u64,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    subscribed: Vec<Stream>,
}

impl CallbackThread {
    fn start(ctx: &Context) -> CallbackThread {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (thread_ctx, thread_stop) = (ctx.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            let tid = unsafe { libc::pthread_self() } as u64;
            tx.send(tid).expect("report the thread id");
            thread_ctx.bind().expect("bind the context");
            let api = thread_ctx.runtime().api();
            while !thread_stop.load(Ordering::Relaxed) {
                // SAFETY: plain integer argument; runs callbacks of streams subscribed to this
                // thread (none yet: 107012, retried).
                let code = unsafe { (api.aclrtProcessReport)(10) };
                if code != ACL_SUCCESS && code != ACL_ERROR_RT_REPORT_TIMEOUT {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        CallbackThread {
            ctx: ctx.clone(),
            tid: rx.recv().expect("the callback thread started"),
            stop,
            thread: Some(thread),
            subscribed: Vec::new(),
        }
    }

    /// Subscribes every lane's stream to this thread.
    fn subscribe(&mut self, lanes: &[Lane]) {
        for lane in lanes {
            // SAFETY: a live stream; `self.tid` is the callback thread's pthread id.
            unsafe {
                acl_call!(
                    self.ctx.runtime(),
                    aclrtSubscribeReport(self.tid, lane.stream.as_raw())
                )
            }
            .expect("aclrtSubscribeReport");
            self.subscribed.push(lane.stream.clone());
        }
    }
}

impl Drop for CallbackThread {
    fn drop(&mut self) {
        for stream in self.subscribed.drain(..) {
            // SAFETY: the stream is alive (held here) and subscribed to `self.tid`.
            unsafe {
                acl_call!(
                    self.ctx.runtime(),
                    aclrtUnSubscribeReport(self.tid, stream.as_raw())
                )
            }
            .expect("aclrtUnSubscribeReport");
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the callback thread panicked");
        }
    }
}
