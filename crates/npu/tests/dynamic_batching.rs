//! A dynamic-batching inference service on npu-rs and the CI tests its author writes for it,
//! written from the README, the `npu` crate's docs, docs/observability.md, docs/cancellation.md
//! and the examples, without hardware.
//!
//! The service answers `y = alpha * x` for requests of [`ELEMS`] `f32`s. Requesters hand their
//! input to a [`Client`], which queues it on a bounded channel (refusing with
//! [`ServeError::Overloaded`] when it is full). One batcher task collects requests for up to
//! `max_batch` of them or until `linger` has passed since the first, takes a pinned staging
//! block and a device block from bounded pools, and runs the batch on a stream of a
//! `StreamPool` in a task of its own: stage, copy in, `scale_f32` from npu-sim's kernel
//! library, copy out, one answer per request through its oneshot. The device pool holds the
//! memory of `in_flight` batches: when every block is out, the batcher waits for one and stops
//! pulling requests, so the queue fills and new requests are refused. A requester that gives up
//! (dropped, timed out) is skipped if its batch has not been staged yet, and its answer dropped
//! otherwise. Shutting down stops new requests, runs the ones queued, waits for every batch in
//! flight and for both pools to get every block back (`settled()`); given a drain deadline, it
//! aborts the streams' work once the deadline passes. Its counters are a `watch`, so a test
//! waits for a state of the service instead of polling it; the metrics add the pools'
//! `stats()`, `reactor_stats()` and the device's health; each batch is a `batch` span.
//!
//! The tests take turns (the hold gate is per device, and the reactor's counters and the
//! recording subscriber are the process's). They synchronise on the service's counters and on
//! the simulator's hold gate, never on a sleep, and bound their waits with [`watchdog`], a
//! hang detector that works under a paused Tokio clock too (except the waits that need the
//! paused clock to move, which it would keep still). docs/cancellation.md ("A new user's
//! batching service") lists what writing them found.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use npu::Stream;
use npu::device::DeviceStatus;
use npu::error::AclCode;
use npu::memory::{DevicePoolStats, PoolStats, PooledBuffer, PooledDeviceBuffer};
use npu::prelude::*;
use npu::runtime::BackendChoice;
use npu::sim::{self, SimConfig};
use npu::stream::{ReactorStats, Strategy, reactor_stats};
use tokio::sync::{MutexGuard, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

#[path = "../../npu-stream/tests/common/field_text.rs"]
mod field_text;

use field_text::{FieldText, Fields};

/// Elements of one request, and of its answer.
const ELEMS: usize = 256;

/// The device [`a_lost_device_fails_its_batch_with_a_typed_error_and_the_service_reports_it`]
/// loses (losing one is final for the process); no other test uses it.
const LOST: u32 = 2;

/// A hang detector, not a synchronisation: everything awaited finishes long before.
const HANG: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------

/// How a [`Service`] batches.
#[derive(Debug, Clone)]
struct Config {
    /// Requests per batch at most.
    max_batch: usize,
    /// How long a batch waits for more requests after its first.
    linger: Duration,
    /// Requests queued for the batcher at most; more are refused.
    queue: usize,
    /// Batches whose memory the pools hold at once: their capacity.
    in_flight: usize,
    /// Streams the batches are spread over.
    streams: usize,
    /// How those streams learn that their work is done.
    strategy: Strategy,
    /// The model: `y = alpha * x`.
    alpha: f32,
    /// Names this service in its spans, so that a test finds its own.
    name: &'static str,
}

impl Config {
    /// Four requests a batch (one 4 KiB block), two batches in flight, one millisecond.
    fn new(name: &'static str) -> Config {
        Config {
            max_batch: 4,
            linger: Duration::from_millis(1),
            queue: 64,
            in_flight: 2,
            streams: 2,
            strategy: Strategy::EventPoll,
            alpha: 0.5,
            name,
        }
    }

    /// Bytes of one batch's staging block and device block.
    fn block_bytes(&self) -> usize {
        self.max_batch * ELEMS * size_of::<f32>()
    }

    /// What the pools count such a block as: its size class, not the bytes asked for.
    fn block_class(&self) -> usize {
        DevicePool::size_class(self.block_bytes()).expect("a representable block")
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone)]
enum ServeError {
    /// The queue is full: the service is at capacity; retry later.
    Overloaded,
    /// The service is shutting down and takes no new requests.
    ShuttingDown,
    /// The requester gave up waiting after this long.
    TimedOut(Duration),
    /// The device failed this request's batch; it goes on serving others.
    DeviceFault(npu::Error),
    /// The device is gone: every later request fails this way too.
    DeviceLost(npu::Error),
    /// Anything else npu-rs returned.
    Failed(npu::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Overloaded => write!(f, "overloaded: the queue is full; retry later"),
            ServeError::ShuttingDown => write!(f, "the service is shutting down"),
            ServeError::TimedOut(limit) => write!(f, "no answer within {limit:?}"),
            ServeError::DeviceFault(err) => write!(f, "the device failed the batch: {err}"),
            ServeError::DeviceLost(err) => write!(f, "the device is lost: {err}"),
            ServeError::Failed(err) => write!(f, "{err}"),
        }
    }
}

impl From<npu::Error> for ServeError {
    fn from(err: npu::Error) -> ServeError {
        // The loss first: an operation the loss ended may carry the device's report as well
        // (npu::error, "Answering a failed request").
        if err.is_device_lost() {
            ServeError::DeviceLost(err)
        } else if err.is_aborted() {
            // The service aborts its streams only when a shutdown's drain runs out.
            ServeError::ShuttingDown
        } else if err.fault().is_some() {
            ServeError::DeviceFault(err)
        } else {
            ServeError::Failed(err)
        }
    }
}

/// One request's answer, and which batch computed it.
#[derive(Debug)]
struct Answer {
    output: Vec<f32>,
    batch: u64,
    batch_size: usize,
}

/// What a requester waits for.
type Reply = Result<Answer, ServeError>;

/// A request on its way to the batcher.
struct Request {
    input: Vec<f32>,
    reply: oneshot::Sender<Reply>,
}

/// The request counters, one consistent value (a `watch`, so tests and a health endpoint can
/// wait for a state instead of polling it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    /// Requests queued for the batcher.
    accepted: u64,
    /// Requests the batcher took from the queue into a batch.
    collected: u64,
    /// Requests refused because the queue was full.
    overloaded: u64,
    /// Batches started on the device.
    batches: u64,
    /// Batches started and not yet answered.
    in_flight: u64,
    /// Requests answered with a result.
    answered: u64,
    /// Requests answered with an error.
    failed: u64,
    /// Requests whose requester had gone: skipped before staging, or answer dropped.
    cancelled: u64,
}

impl Counters {
    /// Accepted requests not yet answered, failed or found cancelled.
    fn unsettled(&self) -> u64 {
        self.accepted - self.answered - self.failed - self.cancelled
    }
}

/// A snapshot of what a metrics endpoint exports.
#[derive(Debug)]
struct Metrics {
    requests: Counters,
    staging: PoolStats,
    memory: DevicePoolStats,
    reactor: ReactorStats,
    health: Health,
}

/// The service's health check.
#[derive(Debug, Clone, PartialEq)]
enum Health {
    Serving,
    /// The device was lost (what the device reports, or what its work failed with).
    DeviceLost(String),
}

/// The requesters' side: cheap to clone, one per connection or handler.
#[derive(Clone)]
struct Client {
    /// Weak, so that only the [`Service`] keeps the queue open and shutting down closes it.
    requests: mpsc::WeakSender<Request>,
    counters: Arc<watch::Sender<Counters>>,
}

impl Client {
    /// Queues `input` (exactly [`ELEMS`] values) without waiting; the receiver gets its
    /// answer.
    fn submit(&self, input: Vec<f32>) -> Result<oneshot::Receiver<Reply>, ServeError> {
        assert_eq!(input.len(), ELEMS, "a request is {ELEMS} values");
        let requests = self.requests.upgrade().ok_or(ServeError::ShuttingDown)?;
        let (reply, answer) = oneshot::channel();
        match requests.try_send(Request { input, reply }) {
            Ok(()) => {
                self.counters.send_modify(|c| c.accepted += 1);
                Ok(answer)
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.send_modify(|c| c.overloaded += 1);
                Err(ServeError::Overloaded)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ServeError::ShuttingDown),
        }
    }

    /// Submits `input` and waits for its answer.
    async fn infer(&self, input: Vec<f32>) -> Reply {
        let answer = self.submit(input)?;
        // A batcher that ends drops what it holds only by shutting down.
        answer.await.unwrap_or(Err(ServeError::ShuttingDown))
    }

    /// [`infer`](Client::infer), giving up after `limit` (the request is then cancelled: its
    /// answer, if computed, is dropped).
    async fn infer_within(&self, input: Vec<f32>, limit: Duration) -> Reply {
        let answer = self.submit(input)?;
        match tokio::time::timeout(limit, answer).await {
            Ok(answer) => answer.unwrap_or(Err(ServeError::ShuttingDown)),
            Err(_) => Err(ServeError::TimedOut(limit)),
        }
    }
}

/// The running service: its batcher task, its device resources and its counters.
struct Service {
    client: Client,
    /// The only strong sender: dropping it closes the queue.
    requests: Option<mpsc::Sender<Request>>,
    batcher: tokio::task::JoinHandle<()>,
    device: Device,
    streams: StreamPool,
    memory: DevicePool,
    staging: PinnedPool,
    lost: Arc<OnceLock<npu::Error>>,
    /// Set when a shutdown's drain ran out: the batcher starts nothing more.
    abandon: Arc<AtomicBool>,
}

impl Service {
    /// Starts a service on `device`, its pools prewarmed so that no request allocates.
    async fn start(device: &Device, config: Config) -> npu::Result<Service> {
        let ctx = device.primary_context();
        let builder = Stream::builder(ctx).strategy(config.strategy);
        let streams = StreamPool::with_builder(builder, config.streams)?;
        let block = config.block_bytes();
        let capacity = config.in_flight * config.block_class();
        let memory = DevicePool::builder(ctx).capacity(capacity).build()?;
        memory
            .reserve(&streams.next(), config.in_flight, block)
            .await?;
        let staging = PinnedPool::builder(ctx).capacity(capacity).build()?;
        staging.reserve(config.in_flight, block)?;
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }?;
        let scale = module.function("scale_f32")?;

        let (requests, queue) = mpsc::channel(config.queue);
        let counters = Arc::new(watch::Sender::new(Counters::default()));
        let lost = Arc::new(OnceLock::new());
        let abandon = Arc::new(AtomicBool::new(false));
        let batcher = Batcher {
            queue,
            config,
            streams: streams.clone(),
            memory: memory.clone(),
            staging: staging.clone(),
            scale,
            counters: counters.clone(),
            lost: lost.clone(),
            abandon: abandon.clone(),
            next_batch: 0,
        };
        Ok(Service {
            client: Client {
                requests: requests.downgrade(),
                counters,
            },
            requests: Some(requests),
            batcher: tokio::spawn(batcher.run()),
            device: device.clone(),
            streams,
            memory,
            staging,
            lost,
            abandon,
        })
    }

    /// A handle for requesters.
    fn client(&self) -> Client {
        self.client.clone()
    }

    /// Waits until the request counters satisfy `ready`, and returns them (bounded by the
    /// [`watchdog`], so under a paused clock it must not need the clock to move).
    async fn until(&self, ready: impl FnMut(&Counters) -> bool) -> Counters {
        let mut counters = self.client.counters.subscribe();
        let seen = watchdog("the counters", counters.wait_for(ready)).await;
        *seen.expect("the service keeps its counters")
    }

    /// The device's health, as a health endpoint reports it.
    fn health(&self) -> Health {
        if let Some(err) = self.lost.get() {
            return Health::DeviceLost(err.to_string());
        }
        match self.device.status() {
            Ok(DeviceStatus::Normal) => Health::Serving,
            Ok(status) => Health::DeviceLost(format!("the device reports {status:?}")),
            Err(err) => Health::DeviceLost(err.to_string()),
        }
    }

    /// The counters a metrics endpoint exports.
    fn metrics(&self) -> Metrics {
        Metrics {
            requests: *self.client.counters.borrow(),
            staging: self.staging.stats(),
            memory: self.memory.stats(),
            reactor: reactor_stats(),
            health: self.health(),
        }
    }

    /// Stops taking requests at once (when called, as npu-rs's operations start when
    /// called); the future answers the queued ones, waits for every batch in flight and for
    /// both pools to have every block back, and reports the final metrics.
    fn shutdown(self) -> impl Future<Output = Metrics> + Send {
        self.stop(None)
    }

    /// [`shutdown`](Service::shutdown), giving the work `drain` to finish: past it, what is
    /// still on the device is aborted and what is still queued is not started, and their
    /// requests fail with `ShuttingDown`.
    fn shutdown_within(self, drain: Duration) -> impl Future<Output = Metrics> + Send {
        self.stop(Some(drain))
    }

    /// Closes the queue now; the future drains, within `drain` if given.
    fn stop(mut self, drain: Option<Duration>) -> impl Future<Output = Metrics> + Send {
        drop(self.requests.take());
        async move {
            let drained = match drain {
                Some(drain) => tokio::time::timeout(drain, &mut self.batcher).await,
                None => Ok((&mut self.batcher).await),
            };
            let finished = match drained {
                Ok(finished) => finished,
                Err(_) => {
                    self.abandon.store(true, Ordering::Relaxed);
                    for stream in self.streams.streams() {
                        // Discards the stream's queued work: its operations fail with
                        // `Error::Aborted`, handing their blocks back. An abort that fails
                        // leaves the work to finish by itself, still waited for below.
                        let _ = stream.abort().await;
                    }
                    (&mut self.batcher).await
                }
            };
            finished.expect("the batcher panicked");
            self.staging.settled().await;
            self.memory.settled().await;
            self.metrics()
        }
    }
}

/// The batcher task's state.
struct Batcher {
    queue: mpsc::Receiver<Request>,
    config: Config,
    streams: StreamPool,
    memory: DevicePool,
    staging: PinnedPool,
    scale: Function,
    counters: Arc<watch::Sender<Counters>>,
    lost: Arc<OnceLock<npu::Error>>,
    abandon: Arc<AtomicBool>,
    next_batch: u64,
}

impl Batcher {
    /// Collects and starts batches until the queue is closed and empty, then waits for the
    /// batches in flight.
    async fn run(mut self) {
        let mut running = JoinSet::new();
        while let Some(batch) = self.collect().await {
            while let Some(done) = running.try_join_next() {
                done.expect("a batch task panicked");
            }
            let collected = batch.len() as u64;
            self.counters.send_modify(|c| c.collected += collected);
            let batch = self.without_cancelled(batch);
            if batch.is_empty() {
                continue;
            }
            if let Some(lost) = self.lost.get() {
                fail_all(&self.counters, batch, ServeError::DeviceLost(lost.clone()));
                continue;
            }
            let stream = self.streams.next();
            // Memory first, here rather than in the batch's task: while the pools are out of
            // blocks the batcher pulls no request, so the queue fills and `submit` refuses.
            let (staging, device) = match self.blocks(&stream).await {
                Ok(_) if self.abandon.load(Ordering::Relaxed) => {
                    fail_all(&self.counters, batch, ServeError::ShuttingDown);
                    continue;
                }
                Ok(blocks) => blocks,
                Err(err) => {
                    fail_all(&self.counters, batch, noticed(&self.lost, err));
                    continue;
                }
            };
            self.next_batch += 1;
            self.counters.send_modify(|c| {
                c.batches += 1;
                c.in_flight += 1;
            });
            let span = tracing::info_span!(
                "batch",
                service = self.config.name,
                id = self.next_batch,
                size = batch.len(),
                stream = stream.id(),
                error = tracing::field::Empty,
            );
            let run = InFlight {
                id: self.next_batch,
                requests: batch,
                stream,
                scale: self.scale.clone(),
                alpha: self.config.alpha,
                counters: self.counters.clone(),
                lost: self.lost.clone(),
            };
            running.spawn(run.run(staging, device).instrument(span));
        }
        while let Some(done) = running.join_next().await {
            done.expect("a batch task panicked");
        }
    }

    /// The next batch: up to `max_batch` requests, waiting at most `linger` after the first.
    /// `None` once the queue is closed and empty.
    async fn collect(&mut self) -> Option<Vec<Request>> {
        let first = self.queue.recv().await?;
        let deadline = Instant::now() + self.config.linger;
        let mut batch = vec![first];
        while batch.len() < self.config.max_batch {
            tokio::select! {
                next = self.queue.recv() => match next {
                    Some(request) => batch.push(request),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        Some(batch)
    }

    /// The requests whose requester still waits; the others are counted cancelled.
    fn without_cancelled(&self, mut batch: Vec<Request>) -> Vec<Request> {
        let before = batch.len();
        batch.retain(|request| !request.reply.is_closed());
        let gone = (before - batch.len()) as u64;
        self.counters.send_modify(|c| c.cancelled += gone);
        batch
    }

    /// A staging block and a device block for one batch, waiting (in FIFO order) while the
    /// pools have none free.
    async fn blocks(
        &self,
        stream: &Stream,
    ) -> npu::Result<(PooledBuffer<f32>, PooledDeviceBuffer<f32>)> {
        let len = self.config.max_batch * ELEMS;
        let staging = self.staging.alloc::<f32>(len).await?;
        let device = self.memory.alloc::<f32>(stream, len).await?;
        Ok((staging, device))
    }
}

/// Classifies `err`, remembering it if it says the device is lost.
fn noticed(lost: &OnceLock<npu::Error>, err: npu::Error) -> ServeError {
    let err = ServeError::from(err);
    if let ServeError::DeviceLost(cause) = &err {
        let _ = lost.set(cause.clone());
    }
    err
}

/// Answers every request of `batch` with `err`.
fn fail_all(counters: &watch::Sender<Counters>, batch: Vec<Request>, err: ServeError) {
    for request in batch {
        answer(counters, request, Err(err.clone()));
    }
}

/// Sends `reply` to `request`'s requester and counts the outcome.
fn answer(counters: &watch::Sender<Counters>, request: Request, reply: Reply) {
    let failed = reply.is_err();
    let delivered = request.reply.send(reply).is_ok();
    counters.send_modify(|c| match (delivered, failed) {
        (false, _) => c.cancelled += 1,
        (true, false) => c.answered += 1,
        (true, true) => c.failed += 1,
    });
}

/// A batch on the device.
struct InFlight {
    id: u64,
    requests: Vec<Request>,
    stream: Stream,
    scale: Function,
    alpha: f32,
    counters: Arc<watch::Sender<Counters>>,
    lost: Arc<OnceLock<npu::Error>>,
}

impl InFlight {
    /// Runs the batch and answers each request: its slice of the output, or the batch's error.
    async fn run(self, staging: PooledBuffer<f32>, device: PooledDeviceBuffer<f32>) {
        let size = self.requests.len();
        match self.compute(staging, device).await {
            Ok(output) => {
                for (request, output) in self.requests.into_iter().zip(output.chunks(ELEMS)) {
                    let output = output.to_vec();
                    let (batch, batch_size) = (self.id, size);
                    let reply = Ok(Answer {
                        output,
                        batch,
                        batch_size,
                    });
                    answer(&self.counters, request, reply);
                }
            }
            Err(err) => {
                tracing::Span::current().record("error", tracing::field::display(&err));
                fail_all(&self.counters, self.requests, noticed(&self.lost, err));
            }
        }
        self.counters.send_modify(|c| c.in_flight -= 1);
    }

    /// Stages the inputs, copies them in, scales them on the device, copies them out.
    async fn compute(
        &self,
        mut staging: PooledBuffer<f32>,
        device: PooledDeviceBuffer<f32>,
    ) -> npu::Result<PooledBuffer<f32>> {
        let n = self.requests.len() * ELEMS;
        for (request, slot) in self.requests.iter().zip(staging.chunks_mut(ELEMS)) {
            slot.copy_from_slice(&request.input);
        }
        let (staging, device) = (staging.view(..n)?, device.view(..n)?);
        let (staging, device) = self.stream.copy_h2d(staging, device).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; the view holds n.
        let launch = unsafe {
            self.stream
                .launch(&self.scale, 4, (device, n as u64, self.alpha))
        };
        let (device, _, _) = launch.await?;
        let (_device, staging) = self.stream.copy_d2h(device, staging).await?;
        Ok(staging.into_inner())
    }
}

// ---------------------------------------------------------------------------------------
// Test support
// ---------------------------------------------------------------------------------------

/// The simulator these tests run on: three devices, configured (and the recording subscriber
/// installed) before anything touches a device.
fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            record_spans();
            SimConfig::default()
                .devices(3)
                .install()
                .expect("the simulator was initialised with another configuration");
            Runtime::builder()
                .backend(BackendChoice::Sim)
                .build()
                .unwrap()
        })
        .clone()
}

/// Device `id` of the simulator.
fn device(id: u32) -> Device {
    runtime().device(id).unwrap()
}

/// One test at a time: the hold gate, the reactor's counters and the recorded spans are
/// shared by the whole process.
async fn turn() -> MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Request `i`'s input: every value `i`, so that each answer shows whose it is.
fn input(i: usize) -> Vec<f32> {
    vec![i as f32; ELEMS]
}

/// Checks that `answer` is request `i`'s result under `alpha`.
fn check(answer: &Answer, i: usize, alpha: f32) {
    assert!(
        answer.output.iter().all(|&y| y == i as f32 * alpha),
        "request {i} got another request's answer (batch {})",
        answer.batch
    );
}

/// Awaits `work`, failing the test if it has not finished within [`HANG`] of real time.
///
/// Not `tokio::time::timeout`: under a paused clock (`start_paused`) that fires as soon as the
/// runtime is idle, and `settled()` keeps the clock from nothing (its docs). The watchdog
/// waits on a blocking thread, which also keeps the paused clock where it is meanwhile: do not
/// wrap a wait that needs the clock to move in it.
async fn watchdog<F: Future>(what: &str, work: F) -> F::Output {
    let (finished, wait) = std::sync::mpsc::channel::<()>();
    let mut dog = tokio::task::spawn_blocking(move || wait.recv_timeout(HANG));
    tokio::select! {
        output = work => {
            drop(finished);
            output
        }
        _ = &mut dog => panic!("{what} did not finish within {HANG:?}"),
    }
}

/// Asserts the service gave every block back and its device is healthy, after `shutdown`.
fn assert_at_rest(metrics: &Metrics) {
    let (staging, memory) = (&metrics.staging, &metrics.memory.cache);
    assert_eq!(
        (staging.allocated, staging.awaiting_blocks),
        (0, 0),
        "{staging:?}"
    );
    assert_eq!(
        (memory.allocated, memory.awaiting_blocks),
        (0, 0),
        "{memory:?}"
    );
    assert_eq!(metrics.requests.unsettled(), 0, "{:?}", metrics.requests);
    assert_eq!(metrics.requests.in_flight, 0);
}

/// Live device allocations of `device` once every release and every teardown has run (a
/// dropped `DevicePool`'s among them: it gives its memory back to the device on a thread of
/// its own, which `wait_for_teardowns` waits for and `flush_releases` does not): the leak
/// check's baseline, taken after the tests before this one gave their memory back, and its
/// result.
fn live_allocations(device: &Device) -> u64 {
    npu::runtime::wait_for_teardowns(HANG).expect("npu-rs's teardowns ended");
    sim::flush_releases();
    sim::device_stats(device).unwrap().live_allocations
}

/// Checks that `device` holds as many allocations as it did `before` the service started.
fn assert_no_leak(device: &Device, before: u64) {
    let after = live_allocations(device);
    assert_eq!(after, before, "the service leaked device memory");
}

// ---------------------------------------------------------------------------------------
// The recording subscriber
// ---------------------------------------------------------------------------------------

/// A span the subscriber saw: its name, its fields (at creation and recorded later), and the
/// index of its parent in the record.
#[derive(Debug, Clone)]
struct SeenSpan {
    name: &'static str,
    fields: Fields,
    parent: Option<usize>,
}

/// Every `batch` span and every span made inside one, in the order they were made.
fn spans() -> std::sync::MutexGuard<'static, Vec<SeenSpan>> {
    static SPANS: Mutex<Vec<SeenSpan>> = Mutex::new(Vec::new());
    SPANS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs the recorder as the process's global subscriber, before any device is touched
/// (docs/observability.md: a scoped one can miss callsites other threads hit first).
fn record_spans() {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(Recorder);
    tracing::subscriber::set_global_default(subscriber).unwrap();
}

/// A span's index in [`spans`], kept in its extensions.
struct Index(usize);

/// Records `batch` spans and their descendants.
struct Recorder;

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).expect("a new span");
        let parent = span
            .parent()
            .and_then(|parent| parent.extensions().get::<Index>().map(|i| i.0));
        if span.name() != "batch" && parent.is_none() {
            return;
        }
        let mut fields = Fields::new();
        attrs.record(&mut FieldText(&mut fields));
        let mut seen = spans();
        seen.push(SeenSpan {
            name: span.name(),
            fields,
            parent,
        });
        span.extensions_mut().insert(Index(seen.len() - 1));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).expect("a recorded span");
        if let Some(&Index(index)) = span.extensions().get::<Index>() {
            values.record(&mut FieldText(&mut spans()[index].fields));
        }
    }
}

/// The `batch` spans of service `name`, each with the spans made inside it.
fn batch_spans(name: &str) -> Vec<(SeenSpan, Vec<SeenSpan>)> {
    let seen = spans();
    let ours = |span: &SeenSpan| span.fields.get("service").map(String::as_str) == Some(name);
    (0..seen.len())
        .filter(|&i| seen[i].name == "batch" && ours(&seen[i]))
        .map(|i| {
            let inside = seen.iter().filter(|s| s.parent == Some(i)).cloned();
            (seen[i].clone(), inside.collect())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

/// The deadline logic, in paused time: a full batch leaves at once, without waiting for its
/// linger; a partial one leaves exactly `linger` after its first request, with every request
/// queued meanwhile; and each answer is its own request's result.
#[tokio::test(start_paused = true)]
async fn a_full_batch_leaves_at_once_and_a_partial_one_at_its_deadline() {
    let _turn = turn().await;
    let config = Config {
        linger: Duration::from_millis(10),
        ..Config::new("deadline")
    };
    let service = Service::start(&device(0), config.clone()).await.unwrap();
    let client = service.client();

    let start = Instant::now();
    let partial: Vec<_> = (0..3).map(|i| client.submit(input(i)).unwrap()).collect();
    for (i, answer) in partial.into_iter().enumerate() {
        let answer = answer.await.unwrap().unwrap();
        assert_eq!(answer.batch_size, 3, "the three queued before the deadline");
        check(&answer, i, config.alpha);
    }
    assert_eq!(
        start.elapsed(),
        config.linger,
        "left at its deadline, not before"
    );

    let start = Instant::now();
    let full: Vec<_> = (10..14).map(|i| client.submit(input(i)).unwrap()).collect();
    for (i, answer) in (10..).zip(full) {
        let answer = answer.await.unwrap().unwrap();
        assert_eq!(answer.batch_size, config.max_batch);
        check(&answer, i, config.alpha);
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "a full batch does not linger"
    );

    let metrics = watchdog("the shutdown", service.shutdown()).await;
    assert_eq!(
        (metrics.requests.batches, metrics.requests.answered),
        (2, 7)
    );
    assert_at_rest(&metrics);
}

/// A kernel that traps fails its own batch only, with a typed device fault that says where it
/// happened; the device stays healthy and the next batch is served. The service runs with its
/// usual streams: the fault is on the kernel, whichever stream the pool gives the batch.
#[tokio::test]
async fn a_failed_kernel_fails_only_its_batch_and_the_service_keeps_serving() {
    let _turn = turn().await;
    let config = Config::new("kernel-fault");
    let reactor_before = reactor_stats().pending();
    let device = device(0);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let client = service.client();
    sim::fail_kernel(
        &device,
        sim::kernel::SCALE_F32,
        1,
        AclCode::AICORE_EXCEPTION,
    )
    .unwrap();
    let streams: Vec<u64> = service.streams.streams().iter().map(Stream::id).collect();

    let batch: Vec<_> = (0..4).map(|i| client.submit(input(i)).unwrap()).collect();
    let mut faulted = None;
    for answer in batch {
        match watchdog("the faulted batch", answer).await.unwrap() {
            Err(ServeError::DeviceFault(err)) => {
                assert_eq!(err.acl_code(), Some(AclCode::AICORE_EXCEPTION), "{err}");
                assert!(!err.is_device_lost(), "{err}");
                let fault = err.fault().expect("where the device failed");
                assert!(streams.contains(&fault.stream_id), "{fault:?}");
                faulted.get_or_insert(fault.stream_id);
                assert_eq!(faulted, Some(fault.stream_id), "one batch, on one stream");
            }
            other => panic!("expected a device fault, got {other:?}"),
        }
    }
    let faulted = faulted.expect("the batch failed");
    assert_eq!(
        service.health(),
        Health::Serving,
        "a trap fails a batch, not the device"
    );

    let next = watchdog("the next batch", client.infer(input(7)))
        .await
        .unwrap();
    check(&next, 7, config.alpha);

    let spans = batch_spans(config.name);
    let failed: Vec<_> = spans
        .iter()
        .filter(|(b, _)| b.fields.contains_key("error"))
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "only the first batch's span records an error: {spans:#?}"
    );
    let error = &failed[0].0.fields["error"];
    assert!(error.contains("507015"), "{error}");
    let place = format!("of stream {faulted} on device 0");
    assert!(
        error.contains(&place),
        "the span says where it failed: {error}"
    );

    let metrics = watchdog("the shutdown", service.shutdown()).await;
    assert_eq!((metrics.requests.failed, metrics.requests.answered), (4, 1));
    assert_at_rest(&metrics);
    assert_eq!(
        metrics.reactor.pending(),
        reactor_before,
        "{:?}",
        metrics.reactor
    );
    assert_eq!(sim::clear_faults(&device).unwrap(), 0, "the fault fired");
}

/// Backpressure: with the device held, the batches in flight hold every device block; the
/// batcher then waits for memory (the pool counts it as a waiter) and pulls no more requests,
/// so the queue fills and the next request is refused at once with `Overloaded`. Released,
/// every accepted request is answered.
#[tokio::test]
async fn a_full_device_pool_stops_the_batcher_and_a_full_queue_refuses() {
    let _turn = turn().await;
    let config = Config {
        max_batch: 2,
        queue: 2,
        in_flight: 1,
        ..Config::new("backpressure")
    };
    let device = device(1);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let client = service.client();
    let held = sim::hold(&device).unwrap();

    let mut answers = Vec::new();
    for i in 0..2 {
        answers.push((i, client.submit(input(i)).unwrap()));
    }
    service.until(|c| c.in_flight == 1).await;
    // The next batch is pulled from the queue, then waits for the pool's only blocks.
    for i in 2..4 {
        answers.push((i, client.submit(input(i)).unwrap()));
    }
    service.until(|c| c.collected == 4).await;
    assert_eq!(
        service.staging.stats().waiters,
        1,
        "the batcher waits for a staging block"
    );
    for i in 4..6 {
        answers.push((i, client.submit(input(i)).unwrap()));
    }
    assert!(matches!(
        client.submit(input(6)),
        Err(ServeError::Overloaded)
    ));
    assert_eq!(service.metrics().requests.overloaded, 1);

    drop(held);
    for (i, answer) in answers {
        check(
            &watchdog("an answer", answer).await.unwrap().unwrap(),
            i,
            config.alpha,
        );
    }
    let metrics = watchdog("the shutdown", service.shutdown()).await;
    assert_eq!(
        (metrics.requests.accepted, metrics.requests.answered),
        (6, 6)
    );
    assert_at_rest(&metrics);
}

/// A requester's timeout, in paused time: with its batch held on the device, advancing the
/// clock past the requester's limit makes it give up with `TimedOut`, while the batch keeps
/// its memory until the device is done; released, the answer is dropped and counted cancelled,
/// and the service goes on serving.
#[tokio::test(start_paused = true)]
async fn a_requester_that_times_out_gives_up_and_its_batch_still_returns_its_memory() {
    let _turn = turn().await;
    // Batches of one leave at once: no linger for the paused clock to pass while the test
    // waits for the batch, bounded by a watchdog that keeps the clock where it is.
    let config = Config {
        max_batch: 1,
        ..Config::new("timeout")
    };
    let device = device(1);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let held = sim::hold(&device).unwrap();

    let limit = Duration::from_millis(100);
    let client = service.client();
    let requester = tokio::spawn(async move { client.infer_within(input(3), limit).await });
    service.until(|c| c.in_flight == 1).await;
    // The batch's operation keeps the paused clock while it is pending: move it by hand.
    tokio::time::advance(limit).await;
    let gave_up = requester.await.unwrap();
    assert!(
        matches!(gave_up, Err(ServeError::TimedOut(l)) if l == limit),
        "{gave_up:?}"
    );
    assert_eq!(
        service.memory.stats().cache.allocated,
        config.block_class(),
        "still in use"
    );

    drop(held);
    service
        .until(|c| c.cancelled == 1 && c.in_flight == 0)
        .await;
    let next = service.client().infer(input(4)).await.unwrap();
    check(&next, 4, config.alpha);

    let metrics = watchdog("the shutdown", service.shutdown()).await;
    assert_eq!(
        (metrics.requests.cancelled, metrics.requests.answered),
        (1, 1)
    );
    assert_at_rest(&metrics);
}

/// Many requesters at once on a multi-threaded runtime, a quarter of them cancelled (their
/// tasks aborted, as a server drops a handler whose client went away) while their requests are
/// queued or in flight: every other requester gets its own answer, every cancelled request is
/// counted once, and every block comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_requesters_some_cancelled_each_get_their_own_answer() {
    let _turn = turn().await;
    let config = Config {
        queue: 128,
        ..Config::new("concurrency")
    };
    let device = device(1);
    let before = live_allocations(&device);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let held = sim::hold(&device).unwrap();

    const REQUESTERS: usize = 64;
    let requesters: Vec<_> = (0..REQUESTERS)
        .map(|i| {
            let client = service.client();
            tokio::spawn(async move { client.infer(input(i)).await })
        })
        .collect();
    service.until(|c| c.accepted == REQUESTERS as u64).await;
    let mut kept = Vec::new();
    for (i, requester) in requesters.into_iter().enumerate() {
        if i % 4 == 0 {
            requester.abort();
            // Awaited, so that its receiver is gone before the device is released.
            assert!(requester.await.unwrap_err().is_cancelled());
        } else {
            kept.push((i, requester));
        }
    }

    drop(held);
    for (i, requester) in kept {
        let answer = watchdog("a requester", requester).await.unwrap().unwrap();
        check(&answer, i, config.alpha);
    }
    let metrics = watchdog("the shutdown", service.shutdown()).await;
    let requests = metrics.requests;
    assert_eq!(
        (requests.answered, requests.cancelled, requests.failed),
        (48, 16, 0)
    );
    assert_at_rest(&metrics);
    assert_no_leak(&device, before);
}

/// Many requesters giving up at whatever moment their short timeouts pass, on a
/// multi-threaded runtime with nothing held, under each completion strategy: whichever step
/// each request is at when its requester goes (queued, batched, staged, on the device,
/// answered), every answer that arrives is its own request's, every accepted request is
/// counted exactly once, and every block comes back. The moments vary from run to run; what
/// is checked holds in every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requesters_giving_up_at_any_moment_leave_the_counts_whole_and_lose_no_block() {
    let _turn = turn().await;
    let device = device(1);
    let before = live_allocations(&device);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let config = Config {
            queue: 1024,
            strategy,
            ..Config::new("giving-up")
        };
        let service = Service::start(&device, config.clone()).await.unwrap();
        let requesters: Vec<_> = (0..600)
            .map(|i| {
                let client = service.client();
                let limit = Duration::from_millis(i as u64 % 20 * 5);
                tokio::spawn(async move { (i, client.infer_within(input(i), limit).await) })
            })
            .collect();
        let mut timed_out = 0;
        for requester in requesters {
            match watchdog("a requester", requester).await.unwrap() {
                (i, Ok(answer)) => check(&answer, i, config.alpha),
                (_, Err(ServeError::TimedOut(_))) => timed_out += 1,
                (_, Err(other)) => panic!("{strategy:?}: {other:?}"),
            }
        }
        let metrics = watchdog("the shutdown", service.shutdown()).await;
        let requests = metrics.requests;
        assert_eq!(requests.accepted, 600, "{strategy:?}");
        let counted = requests.answered + requests.cancelled;
        assert_eq!(counted, 600, "{strategy:?}: {requests:?}");
        // A requester can time out just after its answer was sent: answered, yet gone.
        let note = format!("{strategy:?}: {requests:?}, {timed_out} timed out");
        assert!(requests.cancelled <= timed_out, "{note}");
        assert_at_rest(&metrics);
    }
    assert_no_leak(&device, before);
}

/// A device lost with a batch in flight (held): the batch's requests fail with
/// `DeviceLost`, the health check reports the loss (the device says `Abnormal`), later
/// requests fail the same way without touching the device, and shutting down still gets every
/// block back.
#[tokio::test]
async fn a_lost_device_fails_its_batch_with_a_typed_error_and_the_service_reports_it() {
    let _turn = turn().await;
    let lost = device(LOST);
    let before = live_allocations(&lost);
    let service = Service::start(&lost, Config::new("lost")).await.unwrap();
    let client = service.client();
    let held = sim::hold(&lost).unwrap();

    let batch: Vec<_> = (0..4).map(|i| client.submit(input(i)).unwrap()).collect();
    service.until(|c| c.in_flight == 1).await;
    // `lose` waits for the device's running tasks: not on an async worker.
    let losing = lost.clone();
    tokio::task::spawn_blocking(move || sim::lose(&losing))
        .await
        .unwrap()
        .unwrap();
    held.release().unwrap();

    for answer in batch {
        match watchdog("a lost batch", answer).await.unwrap() {
            Err(lost @ ServeError::DeviceLost(_)) => {
                assert!(
                    lost.to_string().contains("507010"),
                    "the loss's code: {lost}"
                );
            }
            other => panic!("expected the device lost, got {other:?}"),
        }
    }
    assert!(matches!(service.health(), Health::DeviceLost(_)));
    assert_eq!(lost.status().unwrap(), DeviceStatus::Abnormal);
    let later = watchdog("a later request", client.infer(input(9))).await;
    assert!(matches!(later, Err(ServeError::DeviceLost(_))), "{later:?}");

    let metrics = watchdog("the shutdown", service.shutdown()).await;
    assert_eq!((metrics.requests.failed, metrics.requests.answered), (5, 0));
    assert_at_rest(&metrics);
    assert_no_leak(&lost, before);
}

/// A graceful shutdown with batches held in flight and a request still queued: new requests
/// are refused with `ShuttingDown` at once, the shutdown waits for the device, and then every
/// accepted request has its answer, every block is back in its pool, the reactor has nothing
/// pending, and npu-rs has no teardown left once the service is dropped.
#[tokio::test]
async fn a_shutdown_drains_the_batches_in_flight_and_returns_every_block() {
    let _turn = turn().await;
    let config = Config::new("shutdown");
    let device = device(0);
    let reactor_before = reactor_stats().pending();
    let before = live_allocations(&device);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let client = service.client();
    let held = sim::hold(&device).unwrap();

    // Two full batches hold both blocks; the ninth request waits in the queue.
    let answers: Vec<_> = (0..9).map(|i| client.submit(input(i)).unwrap()).collect();
    service.until(|c| c.in_flight == 2).await;
    let metrics = service.metrics();
    assert_eq!(metrics.memory.cache.allocated, 2 * config.block_class());
    assert_eq!(metrics.health, Health::Serving);

    let mut shutdown = std::pin::pin!(service.shutdown());
    assert!(matches!(
        client.submit(input(99)),
        Err(ServeError::ShuttingDown)
    ));
    assert!(
        shutdown.as_mut().now_or_never().is_none(),
        "it waits for the device"
    );

    drop(held);
    let metrics = watchdog("the shutdown", shutdown).await;
    for (i, answer) in answers.into_iter().enumerate() {
        check(&answer.await.unwrap().unwrap(), i, config.alpha);
    }
    assert_eq!(
        (metrics.requests.answered, metrics.requests.batches),
        (9, 3)
    );
    assert_at_rest(&metrics);
    assert_eq!(
        metrics.reactor.pending(),
        reactor_before,
        "{:?}",
        metrics.reactor
    );
    assert_eq!(
        metrics.staging.hits, 3,
        "every batch staged in a prewarmed block"
    );
    assert_no_leak(&device, before);
}

/// A shutdown whose drain runs out, in paused time, under each completion strategy: with two
/// batches held on the device and a third waiting for their memory, the shutdown waits
/// `drain`, then aborts the streams; the
/// held batches fail, the waiting one is not started, every request is answered
/// `ShuttingDown`, and every block comes back without the device ever running the work.
///
/// (The third batch waits for memory, not for its `linger`: under a paused clock, time stands
/// still while device work is pending, so no batch deadline passes while the device is held.
/// The drain deadline passes only because the test advances the clock by hand.)
#[tokio::test(start_paused = true)]
async fn a_shutdown_past_its_drain_deadline_aborts_what_the_device_still_holds() {
    let _turn = turn().await;
    let device = device(0);
    let before = live_allocations(&device);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let config = Config {
            strategy,
            ..Config::new("drain")
        };
        let reactor_before = reactor_stats().pending();
        let service = Service::start(&device, config.clone()).await.unwrap();
        let client = service.client();
        let held = sim::hold(&device).unwrap();

        let answers: Vec<_> = (0..9).map(|i| client.submit(input(i)).unwrap()).collect();
        // The ninth request lingers for company until the shutdown closes the queue.
        service
            .until(|c| c.in_flight == 2 && c.collected == 8)
            .await;
        let drain = Duration::from_secs(5);
        let mut shutdown = std::pin::pin!(service.shutdown_within(drain));
        assert!(
            shutdown.as_mut().now_or_never().is_none(),
            "it drains first"
        );
        tokio::time::advance(drain).await;
        let metrics = watchdog("the shutdown", shutdown).await;

        for answer in answers {
            let answer = answer.await.unwrap();
            let refused = matches!(answer, Err(ServeError::ShuttingDown));
            assert!(refused, "{strategy:?}: {answer:?}");
        }
        let requests = metrics.requests;
        assert_eq!((requests.failed, requests.batches), (9, 2), "{strategy:?}");
        assert_at_rest(&metrics);
        let pending = metrics.reactor.pending();
        assert_eq!(
            pending, reactor_before,
            "{strategy:?}: aborted work is done work"
        );
        held.release().unwrap();
    }
    assert_no_leak(&device, before);
}

/// A service whose tasks are dropped mid-flight (the batcher aborted, as a runtime shutting
/// down or a supervisor killing it would): the batches' futures go with it while the device
/// holds their work, every requester hears its request is gone, and no block comes back to a
/// pool while the device may still use it; released, every block does (docs/cancellation.md,
/// rule 2).
#[tokio::test]
async fn aborting_the_service_mid_flight_loses_no_block() {
    let _turn = turn().await;
    let config = Config::new("aborted");
    let device = device(1);
    let before = live_allocations(&device);
    let service = Service::start(&device, config.clone()).await.unwrap();
    let client = service.client();
    let held = sim::hold(&device).unwrap();

    let answers: Vec<_> = (0..8).map(|i| client.submit(input(i)).unwrap()).collect();
    service.until(|c| c.in_flight == 2).await;
    service.batcher.abort();
    // A batch task's drop drops its requests (their senders) and its operations' futures
    // together, so once every requester has heard, every batch future is gone.
    for answer in answers {
        assert!(
            watchdog("a requester", answer).await.is_err(),
            "no answer comes"
        );
    }
    let out = |stats: &PoolStats| stats.allocated + stats.awaiting_bytes;
    let memory = service.memory.stats().cache;
    assert_eq!(out(&memory), 2 * config.block_class(), "{memory:?}");
    assert_eq!(out(&service.staging.stats()), 2 * config.block_class());
    let mut settled = service.memory.settled();
    assert!(
        (&mut settled).now_or_never().is_none(),
        "the device still holds them"
    );

    held.release().unwrap();
    watchdog("the blocks' return", settled).await;
    watchdog("the staging blocks' return", service.staging.settled()).await;
    assert_eq!(out(&service.memory.stats().cache), 0);
    drop(service);
    assert_no_leak(&device, before);
}

/// The mistake this service's author made first: sizing a pool for two requests of 3000
/// bytes as `2 * 3000` bytes. Blocks count at their size class (4096 bytes), so such a pool
/// holds one; prewarming it with `reserve` says so at start-up, naming the block size and what
/// the pool holds of its capacity, for the pinned pool and the device pool alike.
#[tokio::test]
async fn a_pool_sized_in_request_bytes_is_refused_at_start_up_naming_the_block_size() {
    let _turn = turn().await;
    let ctx = device(0).primary_context().clone();
    let stream = Stream::new(&ctx).unwrap();
    let expected = "room for 1 of 2 blocks of 3000 bytes: each is a 4096-byte block (its size \
                    class), and the pool holds 4096 bytes of its 6000 bytes";

    let staging = PinnedPool::builder(&ctx)
        .capacity(2 * 3000)
        .build()
        .unwrap();
    let err = staging.reserve(2, 3000).unwrap_err();
    assert!(err.to_string().contains(expected), "{err}");

    let memory = DevicePool::builder(&ctx)
        .capacity(2 * 3000)
        .build()
        .unwrap();
    let err = memory.reserve(&stream, 2, 3000).await.unwrap_err();
    assert!(err.to_string().contains(expected), "{err}");
    assert!(
        matches!(
            err,
            npu::Error::InvalidArgument {
                api: "DevicePool::reserve",
                argument: "count",
                ..
            }
        ),
        "{err}"
    );
}

/// Each batch is a `batch` span (its size and stream) around its three device operations,
/// which npu-rs makes `npu_op` spans inside it: the copy in, the `scale_f32` launch and the
/// copy out, on the batch's stream, each with the bytes it moved.
#[tokio::test]
async fn each_batch_is_a_span_around_its_device_operations() {
    let _turn = turn().await;
    let config = Config::new("spans");
    let service = Service::start(&device(0), config.clone()).await.unwrap();
    let client = service.client();
    let batch: Vec<_> = (0..4).map(|i| client.submit(input(i)).unwrap()).collect();
    for answer in batch {
        watchdog("an answer", answer).await.unwrap().unwrap();
    }
    watchdog("the shutdown", service.shutdown()).await;

    let spans = batch_spans(config.name);
    let [(batch, inside)] = &spans[..] else {
        panic!("one batch span: {spans:#?}");
    };
    assert_eq!(batch.fields["size"], "4");
    let ops: Vec<_> = inside.iter().filter(|s| s.name == "npu_op").collect();
    let described: Vec<_> = ops
        .iter()
        .map(|op| {
            assert_eq!(op.fields["stream"], batch.fields["stream"], "{op:?}");
            let what = op.fields.get("direction").or(op.fields.get("kernel"));
            (
                op.fields["op"].as_str(),
                what.map(String::as_str),
                op.fields["bytes"].as_str(),
            )
        })
        .collect();
    let bytes = (4 * ELEMS * size_of::<f32>()).to_string();
    assert_eq!(
        described,
        [
            ("aclrtMemcpyAsync", Some("h2d"), bytes.as_str()),
            ("aclrtLaunchKernelWithHostArgs", Some("scale_f32"), "0"),
            ("aclrtMemcpyAsync", Some("d2h"), bytes.as_str()),
        ]
    );
}
