//! A new user's tensor-parallel inference step across four simulated devices, and its CI tests.
//!
//! The job: a `K × N` weight matrix, row-major on the host, is sharded by columns across four
//! devices (a pitched 2D copy per shard, from one pinned buffer the four uploads share). Each
//! step takes a `K × N` activation, uploads its column shards (2D copies again), runs the
//! shard kernel on every device (`y = (x + w) * alpha`, an in-process simulator kernel standing
//! in for an Ascend C one), then all-gathers the four outputs: every device pushes its shard
//! into every device's output buffer with peer copies, so each device ends with the whole
//! result (shard-major: `[y0 | y1 | y2 | y3]`).
//!
//! Two streams per device: `transfer` (uploads and the all-gather's pushes) and `compute` (the
//! kernel). The kernel's completion orders the pushes on the device, through an event recorded
//! on `compute` that `transfer` waits for, so the pushes are queued without the host waiting
//! for the kernels. The caller stages step N+1's upload before awaiting step N, so the upload
//! runs on `transfer` while step N's kernel runs on `compute`.
//!
//! The tests: bit-exact results against the host's computation, the overlap, a fault on one
//! device mid-step, a device lost mid-step (in a child process: a loss is for the process),
//! the device handles dropped (the devices reset) mid-step, the step future dropped at its
//! uploads and at its kernels (docs/cancellation.md says why not at its pushes), `select!`
//! cancellation and deadlines, and a seeded soak of random cancellations; each ends with
//! nothing left behind (memory, streams, events, contexts, peer access).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use futures::future::join_all;
use npu::device::PeerAccess;
use npu::error::AclCode;
use npu::memory::{MemoryMut, Split, View};
use npu::prelude::*;
use npu::runtime::{BackendChoice, wait_for_teardowns};
use npu::sim::{self, SimConfig};
use npu::stream::Copy2d;
use npu::{Op, Stream};
use tokio::sync::watch;

/// Devices the simulator has, and the job uses.
const DEVICES: usize = 4;
/// Rows of the weight and activation matrices.
const K: usize = 64;
/// Columns of one device's shard.
const NC: usize = 48;
/// Columns of the whole matrices.
const N: usize = NC * DEVICES;
/// Elements of one shard (`K × NC`, packed).
const SHARD: usize = K * NC;
/// Blocks per kernel launch.
const BLOCKS: u32 = 4;
/// The shard kernel's name.
const KERNEL: &str = "tp_shard_add_scale_f32";
/// A hang detector, not a synchronisation: everything awaited finishes long before.
const HANG: Duration = Duration::from_secs(60);

/// The shard kernel's parameters, as the launch packs them (C struct layout).
#[repr(C)]
struct ShardArgs {
    x: *const f32,
    w: *const f32,
    y: *mut f32,
    n: u64,
    alpha: f32,
}

/// Where the shard kernel waits while a test holds it: closed, every launch waits in it
/// (counted) until it opens.
struct Gate {
    /// Whether it is closed, and the launches that reached it since it closed.
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

static GATE: Gate = Gate {
    state: Mutex::new((false, 0)),
    changed: Condvar::new(),
};

impl Gate {
    fn close(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (true, 0);
    }

    fn open(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = false;
        self.changed.notify_all();
    }

    /// Called by block 0 of every launch.
    fn pass(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        self.changed.notify_all();
        while state.0 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits (on a blocking thread) until `launches` launches wait at the closed gate.
    async fn reached_by(&'static self, launches: usize) {
        let waited = tokio::task::spawn_blocking(move || {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (state, timeout) = self
                .changed
                .wait_timeout_while(state, HANG, |s| s.1 < launches)
                .unwrap_or_else(|e| e.into_inner());
            let reached = state.1;
            drop(state);
            assert!(
                !timeout.timed_out(),
                "{reached} of {launches} launches reached the gate"
            );
        });
        waited.await.unwrap()
    }
}

/// Opens the gate when dropped, so that a failing test leaves no kernel waiting.
struct Closed;

impl Closed {
    fn new() -> Self {
        GATE.close();
        Closed
    }
}

impl Drop for Closed {
    fn drop(&mut self) {
        GATE.open();
    }
}

/// The simulator with four devices and the shard kernel registered; the runtime on it.
fn simulator() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            SimConfig::default()
                .devices(DEVICES as u32)
                .memory_per_device(64 << 20)
                .install()
                .expect("the simulator was configured differently");
            let args = std::mem::offset_of!(ShardArgs, alpha) + size_of::<f32>();
            sim::kernel::register_with_args_size(KERNEL, args, |block, blocks, args| {
                // SAFETY: the launch packs `ShardArgs` (the declared size guarantees the bytes),
                // with x, w and y each holding `n` elements.
                let a = unsafe { &*args.cast::<ShardArgs>() };
                if block == 0 {
                    GATE.pass();
                }
                let n = a.n as usize;
                let per = n.div_ceil(blocks as usize);
                let (start, end) = (
                    (block as usize * per).min(n),
                    ((block as usize + 1) * per).min(n),
                );
                for i in start..end {
                    // SAFETY: i < n, within each buffer; blocks write disjoint ranges of y.
                    unsafe { *a.y.add(i) = (*a.x.add(i) + *a.w.add(i)) * a.alpha };
                }
                0
            })
            .unwrap();
            Runtime::builder()
                .backend(BackendChoice::Sim)
                .build()
                .unwrap()
        })
        .clone()
}

/// Tests share the devices, the hold gate and the kernel gate: they take turns.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Where a step is, for tests that stop it at one of its await points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Awaiting the step's uploads.
    Uploading,
    /// Kernels launched and pushes queued behind them; awaiting the kernels.
    Computing,
    /// Awaiting the all-gather's pushes.
    Gathering,
    Done,
}

/// One device's part of the job.
struct Shard {
    device: Device,
    transfer: Stream,
    compute: Stream,
    kernel: Function,
    /// The device's column shard of the weights, `K × NC` packed.
    weights: Arc<DeviceBuffer<f32>>,
    /// Recorded on `compute` after each kernel; `transfer` waits for it before its pushes.
    computed: Event,
}

/// The four devices, with peer access enabled between every pair.
struct Cluster {
    shards: Vec<Shard>,
    _peers: Vec<PeerAccess>,
    phase: watch::Sender<Phase>,
}

/// One upload of a step's activation: the pinned host matrix (shared by the four uploads) and
/// the device shard it fills.
type Upload = Op<(View<Arc<PinnedBuffer<f32>>>, DeviceBuffer<f32>)>;

/// A step's input on its way to the devices, or there once [`Staged::ready`] resolved.
struct Staged {
    alpha: f32,
    uploads: Vec<Upload>,
    inputs: Vec<DeviceBuffer<f32>>,
}

impl Staged {
    /// Waits for the uploads.
    async fn ready(&mut self) -> npu::Result<()> {
        let uploads = std::mem::take(&mut self.uploads);
        let uploaded = first_error(join_all(uploads).await)?;
        self.inputs.extend(uploaded.into_iter().map(|(_, x)| x));
        Ok(())
    }
}

/// The first error of `results`, or every value.
fn first_error<T>(results: Vec<Result<T, npu::stream::OpError<T>>>) -> npu::Result<Vec<T>> {
    results
        .into_iter()
        .map(|r| r.map_err(npu::Error::from))
        .collect()
}

/// `whole` in `n` equal parts.
fn split_into(whole: DeviceBuffer<f32>, n: usize) -> npu::Result<Vec<Split<DeviceBuffer<f32>>>> {
    let part = whole.len() / n;
    let (first, mut rest) = whole.into_halves(part).map_err(npu::Error::from)?;
    let mut parts = vec![first];
    for _ in 2..n {
        let (next, tail) = rest.into_halves(part).map_err(npu::Error::from)?;
        parts.push(next);
        rest = tail;
    }
    parts.push(rest);
    Ok(parts)
}

/// A column shard of a row-major `K × N` matrix, packed `K × NC`.
fn column_shard() -> Copy2d {
    Copy2d {
        width: NC,
        height: K,
        src_pitch: N,
        dst_pitch: NC,
    }
}

impl Cluster {
    /// Opens the devices, enables peer access both ways between every pair, and uploads the
    /// weights' column shards.
    async fn new(runtime: &Runtime, weights: &[f32]) -> npu::Result<Cluster> {
        assert_eq!(weights.len(), K * N);
        let devices = (0..DEVICES as u32)
            .map(|id| runtime.device(id))
            .collect::<npu::Result<Vec<_>>>()?;
        let mut peers = Vec::new();
        for a in &devices {
            for b in &devices {
                if a.id() != b.id() {
                    assert!(a.can_access_peer(b)?);
                    peers.push(a.enable_peer_access(b)?);
                }
            }
        }
        let host = Arc::new(PinnedBuffer::from_slice(
            devices[0].primary_context(),
            weights,
        )?);
        let mut uploads = Vec::new();
        let mut parts = Vec::new();
        for (d, device) in devices.iter().enumerate() {
            let ctx = device.primary_context();
            let transfer = Stream::new(ctx)?;
            let src = host.clone().view(d * NC..).map_err(npu::Error::from)?;
            uploads.push(transfer.copy_2d_h2d(src, DeviceBuffer::new(ctx, SHARD)?, column_shard()));
            // SAFETY: npu-sim's in-process kernels, reached through a registry image.
            let module =
                unsafe { Module::from_data(ctx, &sim::kernel::registry_image(&[KERNEL])) }?;
            parts.push((
                device.clone(),
                transfer,
                Stream::new(ctx)?,
                module.function(KERNEL)?,
            ));
        }
        let mut shards = Vec::new();
        for ((device, transfer, compute, kernel), upload) in parts.into_iter().zip(uploads) {
            let (_, weights) = upload.await?;
            let computed = Event::new(device.primary_context())?;
            shards.push(Shard {
                device,
                transfer,
                compute,
                kernel,
                weights: Arc::new(weights),
                computed,
            });
        }
        Ok(Cluster {
            shards,
            _peers: peers,
            phase: watch::channel(Phase::Idle).0,
        })
    }

    /// Queues the uploads of a step's activation (`K × N`, row-major, pinned) on the transfer
    /// streams, at once: they run while earlier steps compute.
    fn stage(&self, x: &Arc<PinnedBuffer<f32>>, alpha: f32) -> npu::Result<Staged> {
        let mut uploads = Vec::new();
        for (d, shard) in self.shards.iter().enumerate() {
            let ctx = shard.device.primary_context();
            let src = x.clone().view(d * NC..).map_err(npu::Error::from)?;
            let dst = DeviceBuffer::new(ctx, SHARD)?;
            uploads.push(shard.transfer.copy_2d_h2d(src, dst, column_shard()));
        }
        Ok(Staged {
            alpha,
            uploads,
            inputs: Vec::new(),
        })
    }

    /// One step: the kernels on each device's shard, then the all-gather. Resolves to each
    /// device's copy of the whole output, shard-major.
    async fn step(&self, mut staged: Staged) -> npu::Result<Vec<DeviceBuffer<f32>>> {
        self.phase.send_replace(Phase::Uploading);
        staged.ready().await?;

        let mut kernels = Vec::new();
        let mut outputs = Vec::new();
        for (shard, x) in self.shards.iter().zip(staged.inputs) {
            let ctx = shard.device.primary_context();
            let y = Arc::new(DeviceBuffer::<f32>::new(ctx, SHARD)?);
            let args = (
                x,
                shard.weights.clone(),
                y.clone(),
                SHARD as u64,
                staged.alpha,
            );
            // SAFETY: the shard kernel takes `ShardArgs`: x, w and y hold SHARD elements each.
            kernels.push(unsafe { shard.compute.launch(&shard.kernel, BLOCKS, args) });
            shard.computed.record(&shard.compute)?;
            outputs.push(y);
        }

        // Every device's output buffer in one part per source device, listed by source.
        let mut by_source: Vec<Vec<(usize, Split<DeviceBuffer<f32>>)>> =
            (0..DEVICES).map(|_| Vec::new()).collect();
        for (e, shard) in self.shards.iter().enumerate() {
            let whole = DeviceBuffer::<f32>::new(shard.device.primary_context(), SHARD * DEVICES)?;
            for (d, part) in split_into(whole, DEVICES)?.into_iter().enumerate() {
                by_source[d].push((e, part));
            }
        }
        let mut pushes = Vec::new();
        let mut places = Vec::new();
        for ((shard, y), parts) in self.shards.iter().zip(&outputs).zip(by_source) {
            // The pushes start once this device's kernel is done, without the host waiting.
            shard.transfer.wait_event(&shard.computed)?;
            for (e, part) in parts {
                places.push(e);
                pushes.push(shard.transfer.copy_d2d(y.clone(), part));
            }
        }

        self.phase.send_replace(Phase::Computing);
        first_error(join_all(kernels).await)?;

        self.phase.send_replace(Phase::Gathering);
        let pushed = first_error(join_all(pushes).await)?;
        let mut gathered: Vec<Vec<Split<DeviceBuffer<f32>>>> =
            (0..DEVICES).map(|_| Vec::new()).collect();
        // Pushes were listed by source, so each device's parts arrive in source order.
        for (e, (_, part)) in places.into_iter().zip(pushed) {
            gathered[e].push(part);
        }
        let mut wholes = Vec::new();
        for parts in gathered {
            let mut parts = parts.into_iter();
            let first = parts.next().expect("one part per device");
            let joined = parts.try_fold(first, |a, b| a.join(b).map_err(npu::Error::from))?;
            wholes.push(joined.into_whole().map_err(npu::Error::from)?);
        }
        self.phase.send_replace(Phase::Done);
        Ok(wholes)
    }

    /// Waits until a step is at `phase` (which a test keeps it at: the next phase may follow
    /// before this looks).
    async fn reached(&self, phase: Phase) {
        let mut rx = self.phase.subscribe();
        rx.wait_for(|p| *p == phase).await.unwrap();
    }
}

/// A seeded generator (SplitMix64): the soak's choices and the matrices' values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A `K × N` matrix of values with fractional parts, so that rounding shows.
    fn matrix(&mut self) -> Vec<f32> {
        (0..K * N)
            .map(|_| (self.below(1 << 20) as f32 - (1 << 19) as f32) / 1024.0 + 1.0 / 3.0)
            .collect()
    }
}

/// The host's computation of a step, shard-major as the devices hold it.
fn expected(weights: &[f32], x: &[f32], alpha: f32) -> Vec<u32> {
    let mut out = Vec::with_capacity(K * N);
    for j in 0..DEVICES {
        for r in 0..K {
            for c in j * NC..(j + 1) * NC {
                out.push(((x[r * N + c] + weights[r * N + c]) * alpha).to_bits());
            }
        }
    }
    out
}

/// The job and the data a test runs it on.
struct Job {
    cluster: Cluster,
    weights: Vec<f32>,
    rng: Rng,
}

/// A step's input: the activation and its pinned copy, and the scale.
struct Input {
    x: Vec<f32>,
    alpha: f32,
}

impl Job {
    async fn new(seed: u64) -> npu::Result<Job> {
        let mut rng = Rng(seed);
        let weights = rng.matrix();
        let cluster = Cluster::new(&simulator(), &weights).await?;
        Ok(Job {
            cluster,
            weights,
            rng,
        })
    }

    /// A fresh input, staged on the devices at once.
    fn stage(&mut self) -> npu::Result<(Input, Staged)> {
        let x = self.rng.matrix();
        let alpha = 0.5 + self.rng.below(8) as f32 * 0.375;
        let ctx = self.cluster.shards[0].device.primary_context();
        let pinned = Arc::new(PinnedBuffer::from_slice(ctx, &x)?);
        let staged = self.cluster.stage(&pinned, alpha)?;
        Ok((Input { x, alpha }, staged))
    }

    /// Checks every device's copy of a step's output against the host's, bit for bit.
    async fn verify(&self, input: &Input, outputs: Vec<DeviceBuffer<f32>>) {
        let want = expected(&self.weights, &input.x, input.alpha);
        assert_eq!(outputs.len(), DEVICES);
        for (shard, output) in self.cluster.shards.iter().zip(outputs) {
            let got = shard.compute.download(output).await.unwrap();
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert!(
                got == want,
                "device {}'s all-gathered output differs",
                shard.device.id()
            );
        }
    }

    /// Runs a step to completion and checks it.
    async fn checked_step(&mut self) {
        let (input, staged) = self.stage().unwrap();
        let outputs = bounded(self.cluster.step(staged)).await.unwrap();
        self.verify(&input, outputs).await;
    }
}

/// `future`, failing the test if it hangs.
async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(HANG, future)
        .await
        .expect("hung: the future did not finish")
}

/// Runs `f`, a drop made while the devices are held or their kernels wait at the gate, and
/// aborts the test binary if it has not returned within [`HANG`]: a drop that waited for the
/// held work (what these tests check never happens) would otherwise hang the suite, since the
/// test releases the work only after the drop.
fn must_return<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (returned, watched) = std::sync::mpsc::channel::<()>();
    let what = what.to_owned();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watched.recv_timeout(HANG) {
            eprintln!("{what} did not return within {HANG:?}: it waited for held device work");
            std::process::abort();
        }
    });
    let out = f();
    drop(returned);
    watchdog.join().unwrap();
    out
}

/// Polls `step` until the cluster reports `phase`; the step must not finish first.
async fn drive_to<F: Future + Unpin>(cluster: &Cluster, step: &mut F, phase: Phase)
where
    F::Output: std::fmt::Debug,
{
    bounded(async {
        tokio::select! {
            biased;
            _ = cluster.reached(phase) => {}
            done = step => panic!("the step finished before {phase:?}: {done:?}"),
        }
    })
    .await
}

/// What the simulator counts as live, per device (allocations, streams, events, contexts),
/// and pinned host allocations.
#[derive(Debug, PartialEq, Eq)]
struct Live {
    devices: Vec<(u64, u64, u64, u64)>,
    pinned: u64,
}

/// Waits for npu-rs's teardowns and deferred frees, then reads what is live.
async fn live() -> Live {
    tokio::task::spawn_blocking(|| wait_for_teardowns(HANG))
        .await
        .unwrap()
        .unwrap();
    sim::flush_releases();
    // The raw control, by id: `npu::sim::device_stats` takes a `Device`, whose context would
    // count as live while it is open.
    simulator();
    let devices = (0..DEVICES as u32)
        .map(|id| {
            let s = sim::raw_control::device_stats(id as i32).unwrap();
            (
                s.live_allocations,
                s.live_streams,
                s.live_events,
                s.live_contexts,
            )
        })
        .collect();
    Live {
        devices,
        pinned: sim::host_stats().unwrap().pinned_allocations,
    }
}

/// Drops the job and checks that it left nothing behind: no peer access enabled between the
/// devices not `lost` (a lost device cannot be opened), and memory, streams, events and
/// contexts back to `before`.
async fn assert_clean(job: Job, before: &Live, lost: &[u32]) {
    drop(job);
    let runtime = simulator();
    {
        let mut devices = Vec::new();
        for id in 0..DEVICES as u32 {
            match runtime.device(id) {
                Err(err) if lost.contains(&id) => assert!(err.is_device_lost(), "{err}"),
                opened => devices.push(opened.unwrap()),
            }
        }
        for a in &devices {
            for b in &devices {
                if a.id() != b.id() {
                    assert!(
                        a.peer_access_to(b).is_none(),
                        "{} -> {} left enabled",
                        a.id(),
                        b.id()
                    );
                }
            }
        }
    }
    assert_eq!(&live().await, before, "the job left something behind");
    assert_eq!(
        npu::stream::reactor_stats().pending(),
        0,
        "operations left pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_are_bit_exact_and_the_next_upload_overlaps_the_kernels() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(1).await.unwrap();

    // The pipeline: step s+1's upload is queued before step s is awaited.
    let (mut input, mut staged) = job.stage().unwrap();
    for _ in 0..6 {
        let (next_input, next) = job.stage().unwrap();
        let outputs = bounded(job.cluster.step(staged)).await.unwrap();
        job.verify(&input, outputs).await;
        (input, staged) = (next_input, next);
    }
    drop(staged);

    // The overlap, shown without a clock: with every kernel of step s held in the gate, the
    // upload of step s+1 completes.
    let (input, staged) = job.stage().unwrap();
    let (next_input, mut next) = job.stage().unwrap();
    let gate = Closed::new();
    let mut step = Box::pin(job.cluster.step(staged));
    drive_to(&job.cluster, &mut step, Phase::Computing).await;
    GATE.reached_by(DEVICES).await;
    bounded(next.ready()).await.unwrap();
    assert!(
        std::future::poll_fn(|cx| std::task::Poll::Ready(step.as_mut().poll(cx).is_pending()))
            .await,
        "step s is still held at its kernels while step s+1's upload completed"
    );
    drop(gate);
    let outputs = bounded(step).await.unwrap();
    job.verify(&input, outputs).await;
    let outputs = bounded(job.cluster.step(next)).await.unwrap();
    job.verify(&next_input, outputs).await;

    assert_clean(job, &before, &[]).await;
}

/// A step in flight, borrowed from its cluster.
type StepFuture<'a> =
    Pin<Box<dyn Future<Output = npu::Result<Vec<DeviceBuffer<f32>>>> + Send + 'a>>;

/// What keeps a step at the phase a test stopped it at; dropping it lets the step go on (the
/// gate opens first, then the devices are released).
struct Stopped {
    _gate: Option<Closed>,
    _holds: Vec<sim::Hold>,
}

/// Every device of the cluster held.
fn hold_all(cluster: &Cluster) -> Vec<sim::Hold> {
    let holds = cluster.shards.iter().map(|s| sim::hold(&s.device));
    holds.collect::<npu::Result<_>>().unwrap()
}

/// Sets the devices up, before a step is staged, so that it stops at `phase`.
fn before_staging(cluster: &Cluster, phase: Phase) -> Stopped {
    match phase {
        Phase::Uploading => Stopped {
            _gate: None,
            _holds: hold_all(cluster),
        },
        Phase::Computing => Stopped {
            _gate: Some(Closed::new()),
            _holds: Vec::new(),
        },
        _ => unreachable!("a step is stopped at one of its await points"),
    }
}

/// Drives `step` (set up by [`before_staging`]) to `phase`, where it stays until `stopped` is
/// dropped.
///
/// Not [`Phase::Gathering`]: the kernels' operations complete only once the device has run the
/// event npu-rs records after each, and a hold of the device holds that record too, so no hold
/// keeps the pushes waiting once the kernels' operations have completed.
async fn stop_at(cluster: &Cluster, step: &mut StepFuture<'_>, phase: Phase) {
    drive_to(cluster, step, phase).await;
    if phase == Phase::Computing {
        GATE.reached_by(DEVICES).await;
    }
}

/// The await points of a step.
const AWAIT_POINTS: [Phase; 2] = [Phase::Uploading, Phase::Computing];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_dropped_at_each_await_point_leaves_nothing_behind() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(2).await.unwrap();
    for phase in AWAIT_POINTS {
        let stopped = before_staging(&job.cluster, phase);
        let (_, staged) = job.stage().unwrap();
        let mut step: StepFuture<'_> = Box::pin(job.cluster.step(staged));
        stop_at(&job.cluster, &mut step, phase).await;
        must_return("dropping the stopped step", || drop(step));
        drop(stopped);
        job.checked_step().await;
    }
    // Staged and never stepped: the uploads are dropped in flight.
    let held = hold_all(&job.cluster);
    drop(job.stage().unwrap());
    drop(held);
    job.checked_step().await;
    assert_clean(job, &before, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_cancels_a_step_and_a_deadline_bounds_one() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(3).await.unwrap();

    // Cancelled by another branch of a `select!` once the kernels run.
    let stopped = before_staging(&job.cluster, Phase::Computing);
    let (_, staged) = job.stage().unwrap();
    let cancel = async {
        job.cluster.reached(Phase::Computing).await;
        GATE.reached_by(DEVICES).await;
    };
    let cancelled = bounded(async {
        tokio::select! {
            done = job.cluster.step(staged) => Err(done),
            () = cancel => Ok(()),
        }
    })
    .await;
    assert!(
        cancelled.is_ok(),
        "the step finished with its kernels held: {cancelled:?}"
    );
    drop(stopped);
    job.checked_step().await;

    // A deadline passes while the devices are held: the step is dropped at its uploads.
    let stopped = before_staging(&job.cluster, Phase::Uploading);
    let (_, staged) = job.stage().unwrap();
    let late = tokio::time::timeout(Duration::from_millis(20), job.cluster.step(staged)).await;
    assert!(late.is_err(), "the step finished on held devices");
    drop(stopped);
    job.checked_step().await;

    assert_clean(job, &before, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_on_one_device_fails_the_step_and_the_next_step_is_right() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(4).await.unwrap();

    // Device 2's kernel traps.
    let two = job.cluster.shards[2].device.clone();
    sim::fail_kernel(&two, KERNEL, 1, AclCode(507015)).unwrap();
    // A `Device` keeps its context: the leak check below counts one left if this one lives.
    drop(two);
    let (_, staged) = job.stage().unwrap();
    let err = bounded(job.cluster.step(staged)).await.unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(507015)), "{err}");
    let fault = err.fault().expect("the device's fault detail");
    assert_eq!(
        (fault.device_id, fault.stream_id),
        (2, job.cluster.shards[2].compute.id())
    );
    assert!(!err.is_device_lost(), "{err}");
    drop(err);
    job.checked_step().await;

    // Device 1's push into device 1's own output fails (its second device task from now: the
    // upload was queued before).
    let (_, staged) = job.stage().unwrap();
    let transfer = &job.cluster.shards[1].transfer;
    sim::fail_task(transfer, 2, AclCode(507899)).unwrap();
    let err = bounded(job.cluster.step(staged)).await.unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(507899)), "{err}");
    let fault = err.fault().expect("the device's fault detail");
    assert_eq!((fault.device_id, fault.stream_id), (1, transfer.id()));
    drop(err);
    job.checked_step().await;

    assert_clean(job, &before, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_devices_reset_mid_step_and_a_new_job_runs() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(5).await.unwrap();
    job.checked_step().await;
    let stopped = before_staging(&job.cluster, Phase::Computing);
    let (_, staged) = job.stage().unwrap();
    let mut step: StepFuture<'_> = Box::pin(job.cluster.step(staged));
    stop_at(&job.cluster, &mut step, Phase::Computing).await;
    // Every handle of the job goes while its kernels run and its pushes are queued: the
    // devices' contexts are reset once the work is done.
    must_return("dropping the step", || drop(step));
    must_return("dropping the job", || drop(job));
    drop(stopped);
    assert_eq!(live().await, before, "the reset left something behind");

    let mut job = Job::new(6).await.unwrap();
    job.checked_step().await;
    assert_clean(job, &before, &[]).await;
}

/// Set in the child process that [`a_device_lost_mid_step_fails_the_step`] runs itself in.
const LOSING_CHILD: &str = "TENSOR_PARALLEL_LOSING_CHILD";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_lost_mid_step_fails_the_step() {
    // A loss lasts for the process: the test runs in a child, with the simulator to itself.
    if std::env::var_os(LOSING_CHILD).is_none() {
        let name = "a_device_lost_mid_step_fails_the_step";
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(LOSING_CHILD, "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read as they come: a child that writes more than a pipe holds would otherwise block
        // on the write and be taken for hung.
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.unwrap().read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = std::time::Instant::now() + HANG;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                let _ = child.wait();
                panic!("the child hung");
            }
            std::thread::park_timeout(Duration::from_millis(20));
        };
        let out = std::process::Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
        return;
    }
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(7).await.unwrap();
    job.checked_step().await;
    // Lost while the step's uploads wait on the held devices (a loss waits for the device's
    // running task, so not while a kernel is held at the gate).
    let stopped = before_staging(&job.cluster, Phase::Uploading);
    let (_, staged) = job.stage().unwrap();
    let mut step: StepFuture<'_> = Box::pin(job.cluster.step(staged));
    stop_at(&job.cluster, &mut step, Phase::Uploading).await;
    let three = job.cluster.shards[3].device.clone();
    sim::lose(&three).unwrap();
    drop(stopped);
    let err = bounded(step).await.unwrap_err();
    assert!(err.is_device_lost(), "{err}");
    drop(err);

    // A new job cannot use the lost device, and says so.
    let again = Job::new(8).await.err().expect("a job on a lost device");
    assert!(again.is_device_lost(), "{again}");
    drop(three);
    assert_clean(job, &before, &[3]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cancellations_from_a_seed() {
    let _turn = serial().await;
    let before = live().await;
    let mut job = Job::new(9).await.unwrap();
    let mut choices = Rng(0x7e45_0a11);
    let mut seen = [0usize; 6];
    for _ in 0..30 {
        let choice = choices.below(6) as usize;
        seen[choice] += 1;
        match choice {
            // Two pipelined steps, run to the end.
            0 => {
                let (first_input, first) = job.stage().unwrap();
                let (second_input, second) = job.stage().unwrap();
                let outputs = bounded(job.cluster.step(first)).await.unwrap();
                job.verify(&first_input, outputs).await;
                let outputs = bounded(job.cluster.step(second)).await.unwrap();
                job.verify(&second_input, outputs).await;
            }
            // Staged, and dropped before its step was ever polled.
            3 => {
                let held = hold_all(&job.cluster);
                drop(job.stage().unwrap());
                drop(held);
            }
            // Dropped at one of its await points.
            1 | 2 => {
                let phase = AWAIT_POINTS[choice - 1];
                let stopped = before_staging(&job.cluster, phase);
                let (_, staged) = job.stage().unwrap();
                let mut step: StepFuture<'_> = Box::pin(job.cluster.step(staged));
                stop_at(&job.cluster, &mut step, phase).await;
                must_return("dropping the stopped step", || drop(step));
                drop(stopped);
            }
            // A kernel fault on a device chosen by the seed.
            4 => {
                let d = choices.below(DEVICES as u64) as usize;
                let device = job.cluster.shards[d].device.clone();
                sim::fail_kernel(&device, KERNEL, 1, AclCode(507015)).unwrap();
                let (_, staged) = job.stage().unwrap();
                let err = bounded(job.cluster.step(staged)).await.unwrap_err();
                assert_eq!(err.fault().map(|f| f.device_id), Some(d as u32), "{err}");
            }
            // A deadline while the devices are held.
            _ => {
                let stopped = before_staging(&job.cluster, Phase::Uploading);
                let (_, staged) = job.stage().unwrap();
                let step = job.cluster.step(staged);
                let late = tokio::time::timeout(Duration::from_millis(5), step).await;
                assert!(late.is_err(), "the step finished on held devices");
                drop(stopped);
            }
        }
        job.checked_step().await;
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "the seed tried every kind: {seen:?}"
    );
    assert_clean(job, &before, &[]).await;
}

/// What a user tries first for the all-gather's ordering: device 1's stream waiting for an
/// event recorded on device 0's. npu-sim keeps an event to its own device (CANN's reference
/// leaves a wait across devices unspecified), so the wait is refused, with an error that says
/// what is wrong; the step above orders each device's pushes
/// behind its own kernel instead, and the host awaits the pushes before the receivers use them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cannot_wait_for_an_event_of_another_device() {
    let _turn = serial().await;
    let runtime = simulator();
    let (zero, one) = (runtime.device(0).unwrap(), runtime.device(1).unwrap());
    let (on_zero, on_one) = (
        Stream::new(zero.primary_context()).unwrap(),
        Stream::new(one.primary_context()).unwrap(),
    );
    let event = Event::new(zero.primary_context()).unwrap();
    event.record(&on_zero).unwrap();
    let err = on_one.wait_event(&event).unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(107003)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("the event belongs to device 0, the stream to device 1"),
        "{message}"
    );
    bounded(on_zero.synchronize()).await.unwrap();
}
