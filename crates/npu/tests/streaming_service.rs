//! A token-streaming inference service on npu-rs, written as a user of the `npu` crate writes
//! one (axum, Tokio), and the CI tests such a user runs against it on the simulator.
//!
//! The service: `POST /v1/generate` with `{"prompt": [f32...], "max_tokens": n}` uploads the
//! prompt into a decode state on a device (a pinned staging block and a device block split in
//! two halves, from the shard's pools; a stream of its `StreamPool`, or one of the request's
//! own that is aborted when the request ends), then streams one Server-Sent Event per
//! token: each decode step is a `vector_add_f32` launch (`next = state + 1`) and a copy of the
//! new state's first element back to the host. The stream ends with `event: done` or
//! `event: error` (`deadline_exceeded`, `device_error`, `device_lost`, `shutting_down`).
//! Requests are spread round-robin over the shards (one per device) whose device is healthy.
//! `GET /healthz` answers from `Device::status()`, `GET /metrics` from the request counters,
//! `npu::stream::reactor_stats()` and the pools' `stats()` (docs/observability.md).
//!
//! A step is computed only when the response body is polled, so a client that goes away (its
//! body dropped, in-process or by hyper when the connection closes) drops the step in flight:
//! no further device work is queued for it, and npu-rs keeps the dropped step's buffers until
//! the device is done with them (docs/cancellation.md).
//!
//! The tests drive the router in-process (`tower::ServiceExt::oneshot`) under paused Tokio
//! time where deadlines are involved, or over a loopback socket for disconnects and graceful
//! shutdown, inject faults with `npu::sim`, and end each case with a check that no device or
//! pinned memory, stream or event is left over.

use std::convert::Infallible;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::FutureExt;
use http_body_util::BodyExt;
use npu::Stream;
use npu::device::DeviceStatus;
use npu::error::AclCode;
use npu::memory::{PooledBuffer, PooledDeviceBuffer, Split};
use npu::prelude::*;
use npu::runtime::BackendChoice;
use npu::sim::{self, SimConfig};
use npu::stream::{Strategy, StreamPool};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::ServiceExt;

/// Elements of a request's decode state.
const WIDTH: usize = 16;
/// The code the tests' injected faults fail with (`ACL_ERROR_RT_AICORE_EXCEPTION`).
const TRAP: AclCode = AclCode(507015);
/// The device `a_lost_device_is_routed_around` loses; no other test uses it (a loss is final
/// for the process).
const LOST: u32 = 3;
/// The device `a_device_lost_while_held_fails_the_queued_step` loses with the pool's streams.
const LOST_HELD: u32 = 4;
/// The device it loses with a stream per request.
const LOST_HELD_OWN_STREAMS: u32 = 5;

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/// How the service is set up.
#[derive(Clone, Copy)]
struct Setup {
    /// Streams per device.
    streams: usize,
    /// How long a request may take, from its arrival to its last event.
    deadline: Duration,
    strategy: Strategy,
    /// The requests each device has memory for at once (`None`: no limit); a request over it
    /// waits for memory in its handler.
    requests_per_device: Option<usize>,
    /// Each request gets a stream of its own, aborted when the request ends, so that the work
    /// it queued and no longer waits for is discarded rather than run (the pool's streams are
    /// shared, and an abort would discard the other requests' work too).
    stream_per_request: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            streams: 1,
            deadline: Duration::from_secs(3600),
            strategy: Strategy::EventPoll,
            requests_per_device: None,
            stream_per_request: false,
        }
    }
}

/// The device pool's block for a request: its state and next state, halves of one block, so
/// that a request never holds one half while it waits for the other (two requests doing so
/// in a full pool would wait for each other for ever).
fn request_block() -> usize {
    DevicePool::size_class(2 * WIDTH * size_of::<f32>()).unwrap()
}

/// One device's share of the service: its streams, memory pools and kernel.
struct Shard {
    device: Device,
    /// The completion strategy of its streams, the requests' own ones too.
    strategy: Strategy,
    stream_per_request: bool,
    streams: StreamPool,
    memory: DevicePool,
    staging: PinnedPool,
    add: Function,
    /// The `+ 1` of every decode step, shared by every request on the device (only read).
    ones: Arc<DeviceBuffer<f32>>,
}

impl Shard {
    async fn open(device: Device, setup: &Setup) -> npu::Result<Shard> {
        let ctx = device.primary_context().clone();
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }?;
        let add = module.function(sim::kernel::VECTOR_ADD_F32)?;
        let builder = Stream::builder(&ctx).strategy(setup.strategy);
        let streams = StreamPool::with_builder(builder, setup.streams)?;
        let ones = streams.next().upload(&[1.0f32; WIDTH]).await?;
        let mut memory = DevicePool::builder(&ctx);
        if let Some(requests) = setup.requests_per_device {
            memory = memory.capacity(requests * request_block());
        }
        Ok(Shard {
            strategy: setup.strategy,
            stream_per_request: setup.stream_per_request,
            memory: memory.build()?,
            staging: PinnedPool::new(&ctx),
            device,
            streams,
            add,
            ones: Arc::new(ones),
        })
    }

    fn healthy(&self) -> bool {
        matches!(self.device.status(), Ok(DeviceStatus::Normal))
    }
}

/// How a request ended; each ends under exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Completed,
    /// Its client went away before the last event.
    Cancelled,
    DeadlineExceeded,
    Failed,
    ShutDown,
}

/// The request counters `GET /metrics` reports.
#[derive(Default)]
struct Counters {
    received: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    deadline_exceeded: AtomicU64,
    failed: AtomicU64,
    shut_down: AtomicU64,
}

impl Counters {
    fn of(&self, outcome: Outcome) -> &AtomicU64 {
        match outcome {
            Outcome::Completed => &self.completed,
            Outcome::Cancelled => &self.cancelled,
            Outcome::DeadlineExceeded => &self.deadline_exceeded,
            Outcome::Failed => &self.failed,
            Outcome::ShutDown => &self.shut_down,
        }
    }
}

struct Service {
    shards: Vec<Shard>,
    next: AtomicUsize,
    deadline: Duration,
    counters: Counters,
    /// Requests ended so far, for tests that wait for a request the server ends on its own
    /// (a client gone over TCP is seen only by hyper).
    ended: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
}

impl Service {
    async fn start(devices: &[u32], setup: Setup) -> Arc<Service> {
        let mut shards = Vec::new();
        for &id in devices {
            shards.push(Shard::open(device(id), &setup).await.unwrap());
        }
        Arc::new(Service {
            shards,
            next: AtomicUsize::new(0),
            deadline: setup.deadline,
            counters: Counters::default(),
            ended: watch::channel(0).0,
            shutdown: watch::channel(false).0,
        })
    }

    fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/generate", post(generate))
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
    }

    /// The next healthy shard, round-robin.
    fn pick(&self) -> Option<&Shard> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..self.shards.len())
            .map(|i| &self.shards[(start + i) % self.shards.len()])
            .find(|shard| shard.healthy())
    }

    /// Ends every stream at its next step and tells the HTTP server to drain.
    fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    fn active(&self) -> u64 {
        let c = &self.counters;
        let ended = [
            &c.completed,
            &c.cancelled,
            &c.deadline_exceeded,
            &c.failed,
            &c.shut_down,
        ]
        .iter()
        .map(|n| n.load(Ordering::Acquire))
        .sum::<u64>();
        c.received.load(Ordering::Acquire) - ended
    }

    fn metrics(&self) -> Value {
        let c = &self.counters;
        let reactor = npu::stream::reactor_stats();
        let devices: Vec<Value> = self
            .shards
            .iter()
            .map(|shard| {
                let memory = shard.memory.stats().cache;
                let staging = shard.staging.stats();
                json!({
                    "device": shard.device.id(),
                    "healthy": shard.healthy(),
                    "device_memory": {
                        "allocated": memory.allocated,
                        "allocating": memory.allocating,
                        "awaiting_blocks": memory.awaiting_blocks,
                        "reserved": memory.reserved,
                    },
                    "pinned_memory": {
                        "allocated": staging.allocated,
                        "awaiting_blocks": staging.awaiting_blocks,
                    },
                })
            })
            .collect();
        json!({
            "requests": {
                "received": c.received.load(Ordering::Acquire),
                "completed": c.completed.load(Ordering::Acquire),
                "cancelled": c.cancelled.load(Ordering::Acquire),
                "deadline_exceeded": c.deadline_exceeded.load(Ordering::Acquire),
                "failed": c.failed.load(Ordering::Acquire),
                "shut_down": c.shut_down.load(Ordering::Acquire),
                "active": self.active(),
            },
            "reactor": {
                "registered": reactor.registered,
                "completed": reactor.completed,
                "pending": reactor.pending(),
            },
            "devices": devices,
        })
    }
}

/// Counts a request from its admission to its end; a request dropped before it was given an
/// outcome (its client went away) is counted as cancelled.
struct Admission {
    service: Arc<Service>,
    outcome: Option<Outcome>,
}

impl Admission {
    fn new(service: &Arc<Service>) -> Admission {
        service.counters.received.fetch_add(1, Ordering::AcqRel);
        Admission {
            service: service.clone(),
            outcome: None,
        }
    }

    fn end(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or(Outcome::Cancelled);
        self.service
            .counters
            .of(outcome)
            .fetch_add(1, Ordering::AcqRel);
        self.service.ended.send_modify(|n| *n += 1);
    }
}

/// The stream a request's work goes to.
struct Lane {
    stream: Stream,
    /// The request's own stream: aborted when the request goes.
    own: bool,
}

impl Lane {
    fn of(shard: &Shard) -> npu::Result<Lane> {
        Ok(if shard.stream_per_request {
            let ctx = shard.device.primary_context();
            Lane {
                stream: Stream::builder(ctx).strategy(shard.strategy).build()?,
                own: true,
            }
        } else {
            Lane {
                stream: shard.streams.next(),
                own: false,
            }
        })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if self.own {
            // Not awaited: the abort runs on npu-rs's thread, and the operations it discards
            // fail, which hands their memory back to the pools.
            drop(self.stream.abort());
        }
    }
}

/// One request's state on the device.
struct Decode {
    lane: Lane,
    add: Function,
    ones: Arc<DeviceBuffer<f32>>,
    state: Split<PooledDeviceBuffer<f32>>,
    next: Split<PooledDeviceBuffer<f32>>,
    host: PooledBuffer<f32>,
}

impl Decode {
    /// Uploads `prompt` (at most `WIDTH` values, zero-padded) as the decode state.
    async fn start(shard: &Shard, prompt: &[f32]) -> npu::Result<Decode> {
        let lane = Lane::of(shard)?;
        let stream = &lane.stream;
        let mut host = shard.staging.alloc::<f32>(WIDTH).await?;
        host.fill(0.0);
        host[..prompt.len()].copy_from_slice(prompt);
        let block = shard.memory.alloc::<f32>(stream, 2 * WIDTH).await?;
        let (state, next) = block.into_halves(WIDTH)?;
        let (host, state) = stream.copy_h2d(host, state).await?;
        Ok(Decode {
            lane,
            add: shard.add.clone(),
            ones: shard.ones.clone(),
            state,
            next,
            host,
        })
    }

    /// One decode step: `next = state + 1` on the device, then the new state's first element
    /// (the token) back to the host.
    async fn step(self) -> npu::Result<(Decode, f32)> {
        let Decode {
            lane,
            add,
            ones,
            state,
            next,
            host,
        } = self;
        let stream = &lane.stream;
        // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
        // elements of a and b and writes n of c; all three hold WIDTH, and `ones` is only read.
        let launch = unsafe { stream.launch(&add, 1, (state, ones, next, WIDTH as u64)) };
        let (state, ones, next, _) = launch.await?;
        let (next, host) = stream.copy_d2h(next, host).await?;
        let token = host[0];
        let decode = Decode {
            lane,
            add,
            ones,
            state: next,
            next: state,
            host,
        };
        Ok((decode, token))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Generate {
    prompt: Vec<f32>,
    max_tokens: u32,
}

fn json_error(status: StatusCode, code: &str, message: impl ToString) -> Response {
    let body = json!({"error": {"code": code, "message": message.to_string()}});
    (status, axum::Json(body)).into_response()
}

/// What a device error is called on the wire.
fn device_error_code(err: &npu::Error) -> &'static str {
    if err.is_device_lost() {
        "device_lost"
    } else {
        "device_error"
    }
}

async fn generate(
    State(service): State<Arc<Service>>,
    axum::Json(request): axum::Json<Generate>,
) -> Response {
    if request.prompt.is_empty() || request.prompt.len() > WIDTH || request.max_tokens == 0 {
        let message = format!("prompt must hold 1 to {WIDTH} values and max_tokens be positive");
        return json_error(StatusCode::UNPROCESSABLE_ENTITY, "bad_request", message);
    }
    if *service.shutdown.borrow() {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "");
    }
    let admission = Admission::new(&service);
    let deadline = Instant::now() + service.deadline;
    let Some(shard) = service.pick() else {
        admission.end(Outcome::Failed);
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_device",
            "no healthy device",
        );
    };
    let decode =
        match tokio::time::timeout_at(deadline, Decode::start(shard, &request.prompt)).await {
            Ok(Ok(decode)) => decode,
            Ok(Err(err)) => {
                admission.end(Outcome::Failed);
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                return json_error(status, device_error_code(&err), err);
            }
            Err(_) => {
                admission.end(Outcome::DeadlineExceeded);
                return json_error(StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded", "");
            }
        };
    let generation = Generation {
        admission,
        decode,
        left: request.max_tokens,
        produced: 0,
        deadline,
        shutdown: service.shutdown.subscribe(),
    };
    let events = futures::stream::unfold(Some(generation), |generation| async move {
        let (event, rest) = generation?.advance().await;
        Some((Ok::<_, Infallible>(Bytes::from(event)), rest))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap()
}

/// A request streaming its tokens.
struct Generation {
    admission: Admission,
    decode: Decode,
    left: u32,
    produced: u32,
    deadline: Instant,
    shutdown: watch::Receiver<bool>,
}

impl Generation {
    /// The next event, and the generation if another follows it.
    async fn advance(self) -> (String, Option<Generation>) {
        let Generation {
            admission,
            decode,
            left,
            produced,
            deadline,
            mut shutdown,
        } = self;
        let end = |admission: Admission, outcome, event| {
            admission.end(outcome);
            (event, None)
        };
        if left == 0 {
            return end(
                admission,
                Outcome::Completed,
                format!("event: done\ndata: {produced}\n\n"),
            );
        }
        if *shutdown.borrow() {
            return end(
                admission,
                Outcome::ShutDown,
                error_event("shutting_down", ""),
            );
        }
        // Checked before the step, not only as its timeout: a timeout polls the step first,
        // and a step the device finished at once would go past the deadline.
        if Instant::now() >= deadline {
            return end(
                admission,
                Outcome::DeadlineExceeded,
                error_event("deadline_exceeded", ""),
            );
        }
        let step = tokio::select! {
            step = tokio::time::timeout_at(deadline, decode.step()) => step,
            _ = shutdown.wait_for(|down| *down) => {
                return end(admission, Outcome::ShutDown, error_event("shutting_down", ""));
            }
        };
        match step {
            Ok(Ok((decode, token))) => {
                let rest = Generation {
                    admission,
                    decode,
                    left: left - 1,
                    produced: produced + 1,
                    deadline,
                    shutdown,
                };
                (format!("data: {token}\n\n"), Some(rest))
            }
            Ok(Err(err)) => end(
                admission,
                Outcome::Failed,
                error_event(device_error_code(&err), &err.to_string()),
            ),
            Err(_) => end(
                admission,
                Outcome::DeadlineExceeded,
                error_event("deadline_exceeded", ""),
            ),
        }
    }
}

fn error_event(code: &str, message: &str) -> String {
    if message.is_empty() {
        format!("event: error\ndata: {code}\n\n")
    } else {
        let message = message.replace('\n', " ");
        format!("event: error\ndata: {code}: {message}\n\n")
    }
}

async fn healthz(State(service): State<Arc<Service>>) -> Response {
    let sick: Vec<u32> = service
        .shards
        .iter()
        .filter(|shard| !shard.healthy())
        .map(|shard| shard.device.id())
        .collect();
    if sick.is_empty() {
        (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
    } else {
        let body = json!({"status": "degraded", "unhealthy_devices": sick});
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

async fn metrics(State(service): State<Arc<Service>>) -> axum::Json<Value> {
    axum::Json(service.metrics())
}

// ---------------------------------------------------------------------------------------------
// Test support
// ---------------------------------------------------------------------------------------------

/// Installs this binary's simulator (six devices) once and returns a runtime on it.
fn simulator() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            SimConfig::default()
                .devices(6)
                .memory_per_device(256 << 20)
                .install()
                .expect("the simulator was already initialised with another configuration");
            Runtime::builder()
                .backend(BackendChoice::Sim)
                .build()
                .unwrap()
        })
        .clone()
}

fn device(id: u32) -> Device {
    simulator().device(id).unwrap()
}

/// The tests compare process-wide counters (the reactor's, the simulator's) and arm faults on
/// shared devices, so they take turns.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Aborts the process with a message if the test is still running after a minute: a hang
/// guard for CI, not a synchronisation (dropping it disarms it). Armed once the test has its
/// turn, so the time it queued behind the others' turns does not count.
struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

fn watchdog(test: &'static str) -> Watchdog {
    let (disarm, armed) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(Duration::from_secs(60)) {
            eprintln!("{test} hung for a minute");
            std::process::abort();
        }
    });
    Watchdog { _disarm: disarm }
}

/// What the devices, the pinned host memory and the reactor hold before a service starts.
struct Baseline {
    devices: Vec<(Device, sim::DeviceStats)>,
    pinned_allocations: u64,
    reactor_pending: u64,
}

fn baseline(ids: &[u32]) -> Baseline {
    sim::flush_releases();
    Baseline {
        devices: ids
            .iter()
            .map(|&id| (device(id), sim::device_stats(&device(id)).unwrap()))
            .collect(),
        pinned_allocations: sim::host_stats().unwrap().pinned_allocations,
        reactor_pending: npu::stream::reactor_stats().pending(),
    }
}

/// Stops the service and checks that it left nothing behind: no request active, every pool
/// block back, and once the service is gone, the devices' allocations, streams and events,
/// the pinned allocations and the reactor's pending operations back to the baseline.
async fn assert_nothing_left(service: Arc<Service>, router: Router, before: Baseline) {
    assert_eq!(service.active(), 0, "{}", service.metrics());
    for shard in service.shards.iter().filter(|shard| shard.healthy()) {
        for stream in shard.streams.streams() {
            // It resolves once the stream's work is done; its error, if any, is a fault a
            // request already reported (the first since the previous synchronize).
            if let Err(err) = stream.synchronize().await {
                assert!(err.error.fault().is_some(), "{err}");
            }
        }
    }
    for shard in &service.shards {
        shard.memory.settled().await;
        shard.staging.settled().await;
        let (memory, staging) = (shard.memory.stats().cache, shard.staging.stats());
        assert_eq!((memory.allocated, memory.awaiting_blocks), (0, 0));
        assert_eq!((staging.allocated, staging.awaiting_blocks), (0, 0));
    }
    drop(router);
    let service = Arc::into_inner(service).expect("the test holds the last handle");
    drop(service);
    tokio::task::spawn_blocking(|| npu::runtime::wait_for_teardowns(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    sim::flush_releases();
    for (device, then) in &before.devices {
        let now = sim::device_stats(device).unwrap();
        let id = device.id();
        assert_eq!(now.live_allocations, then.live_allocations, "device {id}");
        assert_eq!(now.live_streams, then.live_streams, "device {id}");
        assert_eq!(now.live_events, then.live_events, "device {id}");
    }
    let pinned = sim::host_stats().unwrap().pinned_allocations;
    assert_eq!(pinned, before.pinned_allocations, "pinned allocations");
    let pending = npu::stream::reactor_stats().pending();
    assert_eq!(
        pending, before.reactor_pending,
        "reactor operations pending"
    );
}

/// A server-sent event as the client sees it.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    Token(f32),
    Done(u32),
    Error(String),
}

/// Reads server-sent events from a response body, whether its frames are one event each (in
/// process) or whatever the socket delivered (over TCP).
struct Events<B> {
    body: B,
    buffered: Vec<u8>,
    /// The body ended: it is not polled again (an axum body from a stream must not be).
    ended: bool,
}

impl<B> Events<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Debug,
{
    fn new(body: B) -> Self {
        Events {
            body,
            buffered: Vec::new(),
            ended: false,
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffered.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buffered.drain(..end + 2).collect();
                return Some(parse_event(std::str::from_utf8(&raw).unwrap()));
            }
            if self.ended {
                return None;
            }
            match self.body.frame().await {
                None => {
                    assert!(self.buffered.is_empty(), "a partial event at the end");
                    self.ended = true;
                    return None;
                }
                Some(frame) => {
                    if let Ok(data) = frame.unwrap().into_data() {
                        self.buffered.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The events up to the end of the stream.
    async fn rest(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

fn parse_event(raw: &str) -> Event {
    let raw = raw.trim_end();
    if let Some(data) = raw.strip_prefix("data: ") {
        Event::Token(data.parse().unwrap())
    } else if let Some(data) = raw.strip_prefix("event: done\ndata: ") {
        Event::Done(data.parse().unwrap())
    } else if let Some(data) = raw.strip_prefix("event: error\ndata: ") {
        Event::Error(data.to_string())
    } else {
        panic!("not an event of the service: {raw:?}")
    }
}

/// The tokens a prompt starting with `first` streams: `first + 1`, `first + 2`, ...
fn expected_tokens(first: f32, count: u32) -> Vec<Event> {
    (1..=count)
        .map(|k| Event::Token(first + k as f32))
        .collect()
}

fn generate_request(prompt: &[f32], max_tokens: u32) -> Request<Body> {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens}).to_string();
    Request::post("/v1/generate")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// `POST /v1/generate` in process: the response's status and its events.
async fn generate_in_process(
    router: &Router,
    prompt: &[f32],
    max_tokens: u32,
) -> (StatusCode, Events<Body>) {
    let response = router
        .clone()
        .oneshot(generate_request(prompt, max_tokens))
        .await
        .unwrap();
    (response.status(), Events::new(response.into_body()))
}

async fn get_json(router: &Router, path: &str) -> (StatusCode, Value) {
    let request = Request::get(path).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

async fn requests(router: &Router) -> Value {
    get_json(router, "/metrics").await.1["requests"].clone()
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn streams_each_token_and_leaves_nothing_behind() {
    let _turn = turn().await;
    let _watchdog = watchdog("streams_each_token_and_leaves_nothing_behind");
    let before = baseline(&[0, 1]);
    let service = Service::start(
        &[0, 1],
        Setup {
            streams: 2,
            ..Setup::default()
        },
    )
    .await;
    let router = service.router();
    let (healthy, _) = get_json(&router, "/healthz").await;
    assert_eq!(healthy, StatusCode::OK);

    // Two requests at once, one on each device (round-robin), their steps interleaved.
    let (status_a, mut a) = generate_in_process(&router, &[10.0, 3.0], 5).await;
    let (status_b, mut b) = generate_in_process(&router, &[-4.0], 3).await;
    assert_eq!((status_a, status_b), (StatusCode::OK, StatusCode::OK));
    let (events_a, events_b) = tokio::join!(a.rest(), b.rest());
    let mut want_a = expected_tokens(10.0, 5);
    want_a.push(Event::Done(5));
    let mut want_b = expected_tokens(-4.0, 3);
    want_b.push(Event::Done(3));
    assert_eq!((events_a, events_b), (want_a, want_b));

    let metrics = get_json(&router, "/metrics").await.1;
    assert_eq!(
        metrics["requests"],
        json!({"received": 2, "completed": 2, "cancelled": 0, "deadline_exceeded": 0,
               "failed": 0, "shut_down": 0, "active": 0})
    );
    for device in metrics["devices"].as_array().unwrap() {
        assert_eq!(device["device_memory"]["allocated"], 0, "{metrics}");
        assert_eq!(device["pinned_memory"]["allocated"], 0, "{metrics}");
    }
    let (status, _) = router
        .clone()
        .oneshot(generate_request(&[], 1))
        .await
        .map(|response| (response.status(), ()))
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "an empty prompt");
    assert_nothing_left(service, router, before).await;
}

/// The client goes away while its step is on a held device: the step's buffers stay with the
/// device until it is released, and the service queues nothing more for the request.
#[tokio::test(start_paused = true)]
async fn a_client_gone_mid_step_stops_its_device_work() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_client_gone_mid_step_stops_its_device_work");
    let zero = device(0);
    let before = baseline(&[0]);
    let service = Service::start(&[0], Setup::default()).await;
    let router = service.router();
    let (status, mut events) = generate_in_process(&router, &[5.0], 1000).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events.next().await, Some(Event::Token(6.0)));
    assert_eq!(events.next().await, Some(Event::Token(7.0)));

    let held = sim::hold(&zero).unwrap();
    assert!(
        events.next().now_or_never().is_none(),
        "the step waits for the held device"
    );
    drop(events); // the client disconnects
    assert_eq!(
        requests(&router).await,
        json!({"received": 1, "completed": 0, "cancelled": 1, "deadline_exceeded": 0,
               "failed": 0, "shut_down": 0, "active": 0})
    );
    let memory = service.shards[0].memory.stats().cache;
    assert_eq!(
        (memory.allocated, memory.awaiting_blocks),
        (request_block(), 0),
        "the held launch owns both state blocks until the device is done with them"
    );
    // Any further launch of the kernel on the device would use this fault up.
    sim::fail_kernel(&zero, sim::kernel::VECTOR_ADD_F32, 1, TRAP).unwrap();
    held.release().unwrap();
    service.shards[0].memory.settled().await;
    assert_eq!(
        sim::clear_faults(&zero).unwrap(),
        1,
        "nothing was launched for the request after its client left"
    );
    assert_nothing_left(service, router, before).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_past_its_deadline_ends_with_an_error_event() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_request_past_its_deadline_ends_with_an_error_event");
    let before = baseline(&[1]);
    let service = Service::start(
        &[1],
        Setup {
            deadline: Duration::from_secs(10),
            ..Setup::default()
        },
    )
    .await;
    let router = service.router();
    let (_, mut events) = generate_in_process(&router, &[0.5], 100).await;
    assert_eq!(events.next().await, Some(Event::Token(1.5)));
    assert_eq!(events.next().await, Some(Event::Token(2.5)));
    // The client is slow to read: the deadline passes between two steps.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(
        events.rest().await,
        [Event::Error("deadline_exceeded".into())]
    );
    assert_eq!(requests(&router).await["deadline_exceeded"], 1);
    assert_nothing_left(service, router, before).await;
}

/// A kernel fault fails the request whose launch it hits, mid-stream, and nothing else: the
/// next request on the same device and stream completes.
#[tokio::test(start_paused = true)]
async fn a_kernel_fault_fails_only_its_request() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_kernel_fault_fails_only_its_request");
    let zero = device(0);
    let before = baseline(&[0]);
    let service = Service::start(&[0], Setup::default()).await;
    let router = service.router();
    sim::fail_kernel(&zero, sim::kernel::VECTOR_ADD_F32, 3, TRAP).unwrap();
    let (_, mut events) = generate_in_process(&router, &[1.0], 5).await;
    let events = events.rest().await;
    assert_eq!(events[..2], expected_tokens(1.0, 2));
    match &events[2..] {
        [Event::Error(message)] => {
            assert!(message.starts_with("device_error: "), "{message}");
            assert!(message.contains("507015"), "{message}");
        }
        other => panic!("expected one error event, got {other:?}"),
    }
    assert_eq!(sim::clear_faults(&zero).unwrap(), 0, "the fault fired");

    let (_, mut events) = generate_in_process(&router, &[1.0], 2).await;
    let mut want = expected_tokens(1.0, 2);
    want.push(Event::Done(2));
    assert_eq!(events.rest().await, want);
    let counts = requests(&router).await;
    assert_eq!(
        (&counts["failed"], &counts["completed"]),
        (&json!(1), &json!(1))
    );
    assert_nothing_left(service, router, before).await;
}

/// A fault on the prompt's upload (the stream's next task) is answered 500 before any token.
#[tokio::test(start_paused = true)]
async fn a_failed_upload_is_a_500() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_failed_upload_is_a_500");
    let before = baseline(&[1]);
    let service = Service::start(&[1], Setup::default()).await;
    let router = service.router();
    // The shard has one stream: the request will be given this one.
    sim::fail_task(&service.shards[0].streams.next(), 1, TRAP).unwrap();
    let response = router
        .clone()
        .oneshot(generate_request(&[2.0], 3))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "device_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("507015"),
        "{body}"
    );
    assert_eq!(sim::clear_faults(&device(1)).unwrap(), 0, "the fault fired");
    let (_, mut events) = generate_in_process(&router, &[2.0], 1).await;
    assert_eq!(events.rest().await, [Event::Token(3.0), Event::Done(1)]);
    assert_nothing_left(service, router, before).await;
}

/// A device lost mid-stream fails the requests on it, the health check names it, and new
/// requests go to the healthy device.
#[tokio::test(start_paused = true)]
async fn a_lost_device_is_routed_around() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_lost_device_is_routed_around");
    let lost = device(LOST);
    let before = baseline(&[2, LOST]);
    let service = Service::start(&[2, LOST], Setup::default()).await;
    let router = service.router();
    let (_, mut on_two) = generate_in_process(&router, &[0.0], 4).await;
    let (_, mut on_lost) = generate_in_process(&router, &[100.0], 4).await;
    assert_eq!(on_two.next().await, Some(Event::Token(1.0)));
    assert_eq!(on_lost.next().await, Some(Event::Token(101.0)));

    // `lose` waits for the device's running tasks: not on the runtime's only worker.
    let to_lose = lost.clone();
    tokio::task::spawn_blocking(move || sim::lose(&to_lose))
        .await
        .unwrap()
        .unwrap();
    match on_lost.rest().await.as_slice() {
        [Event::Error(message)] => assert!(message.starts_with("device_lost: "), "{message}"),
        other => panic!("expected one device_lost event, got {other:?}"),
    }
    let mut want = expected_tokens(0.0, 4)[1..].to_vec();
    want.push(Event::Done(4));
    assert_eq!(on_two.rest().await, want);

    let (status, health) = get_json(&router, "/healthz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health["unhealthy_devices"], json!([LOST]));
    for first in [7.0, 8.0, 9.0] {
        let (_, mut events) = generate_in_process(&router, &[first], 1).await;
        let want = [Event::Token(first + 1.0), Event::Done(1)];
        assert_eq!(events.rest().await, want, "routed to device 2");
    }
    let counts = requests(&router).await;
    assert_eq!(
        (&counts["failed"], &counts["completed"]),
        (&json!(1), &json!(4))
    );
    assert_nothing_left(service, router, before).await;
}

/// xorshift64*: a seeded generator, so that every run makes the same clients.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Runs 40 clients at once, made from `seed`: some read every token, some go away after a
/// few, some while a step is in flight. Returns how many read every token.
async fn random_clients(router: &Router, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut clients = Vec::new();
    let mut complete = 0;
    for i in 0..40u32 {
        let max_tokens = 1 + rng.below(12) as u32;
        let read = rng.below(u64::from(max_tokens) + 4) as u32;
        let mid_step = rng.below(2) == 1;
        complete += u64::from(read >= max_tokens);
        let router = router.clone();
        clients.push(tokio::spawn(async move {
            let first = (i * 100) as f32;
            let (status, mut events) = generate_in_process(&router, &[first], max_tokens).await;
            assert_eq!(status, StatusCode::OK);
            if read >= max_tokens {
                let mut want = expected_tokens(first, max_tokens);
                want.push(Event::Done(max_tokens));
                assert_eq!(events.rest().await, want, "client {i}");
                return;
            }
            for k in 1..=read {
                assert_eq!(events.next().await, Some(Event::Token(first + k as f32)));
            }
            if mid_step {
                // Starts the next step (unless the device finishes it within this poll) and
                // goes away.
                let _ = events.next().now_or_never();
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    complete
}

/// Many clients at once on two devices with two streams each, under each completion
/// strategy, with and without a limit on the requests each device has memory for: every
/// request ends under the outcome its client chose, every token read is right, and nothing
/// is left once they are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_with_random_disconnects() {
    let _turn = turn().await;
    let _watchdog = watchdog("many_clients_with_random_disconnects");
    let setups = [
        (Strategy::EventPoll, None, false),
        (Strategy::EventPoll, Some(3), false),
        (Strategy::CallbackThread, Some(2), false),
        (Strategy::BlockingSync, None, false),
        (Strategy::EventPoll, Some(3), true),
        (Strategy::CallbackThread, None, true),
    ];
    for (strategy, requests_per_device, stream_per_request) in setups {
        let before = baseline(&[0, 1]);
        let setup = Setup {
            streams: 2,
            strategy,
            requests_per_device,
            stream_per_request,
            ..Setup::default()
        };
        let service = Service::start(&[0, 1], setup).await;
        let router = service.router();
        let (mut completed, mut cancelled) = (0, 0);
        for seed in [1, 7, 42] {
            let complete = random_clients(&router, seed).await;
            let counts = requests(&router).await;
            let count = |name: &str| counts[name].as_u64().unwrap();
            let context = format!(
                "{strategy:?}, {requests_per_device:?}, {stream_per_request}, seed {seed}: {counts}"
            );
            assert_eq!((count("active"), count("failed")), (0, 0), "{context}");
            // A client that stopped before the last token never sees its request complete.
            assert_eq!(count("completed") - completed, complete, "{context}");
            assert_eq!(count("cancelled") - cancelled, 40 - complete, "{context}");
            (completed, cancelled) = (count("completed"), count("cancelled"));
        }
        assert_nothing_left(service, router, before).await;
    }
}

/// Serves `router` on a loopback port until the service shuts down: the server task ends once
/// every connection has drained.
async fn serve_tcp(
    service: &Arc<Service>,
    router: Router,
) -> (SocketAddr, JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut shutdown = service.shutdown.subscribe();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|down| *down).await;
            })
            .await
    });
    (address, server)
}

/// `POST /v1/generate` over a connection of its own: the status, the events, and the
/// connection's task (aborting it closes the socket).
async fn generate_over_tcp(
    address: SocketAddr,
    prompt: &[f32],
    max_tokens: u32,
) -> (StatusCode, Events<hyper::body::Incoming>, JoinHandle<()>) {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let body = json!({"prompt": prompt, "max_tokens": max_tokens}).to_string();
    let request = Request::post("/v1/generate")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    (
        response.status(),
        Events::new(response.into_body()),
        connection,
    )
}

/// Over a real socket: a client that closes its connection mid-stream has its request
/// dropped (hyper drops the body, which ends the request), and a graceful shutdown ends the
/// streams still running with an event and lets the server drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_a_closed_connection_cancels_and_shutdown_drains() {
    let _turn = turn().await;
    let _watchdog = watchdog("over_tcp_a_closed_connection_cancels_and_shutdown_drains");
    let before = baseline(&[0, 1]);
    let service = Service::start(
        &[0, 1],
        Setup {
            streams: 2,
            ..Setup::default()
        },
    )
    .await;
    let router = service.router();
    let (address, server) = serve_tcp(&service, router.clone()).await;
    let mut ended = service.ended.subscribe();

    let (status, mut gone, connection) = generate_over_tcp(address, &[1.0], u32::MAX).await;
    assert_eq!(status, StatusCode::OK);
    for k in 1..=3 {
        assert_eq!(gone.next().await, Some(Event::Token(1.0 + k as f32)));
    }
    drop(gone);
    connection.abort();
    let _ = connection.await;
    ended.wait_for(|ended| *ended == 1).await.unwrap();
    assert_eq!(requests(&router).await["cancelled"], 1);

    let (_, mut staying, connection) = generate_over_tcp(address, &[50.0], u32::MAX).await;
    assert_eq!(staying.next().await, Some(Event::Token(51.0)));
    service.shut_down();
    let rest = staying.rest().await;
    let (last, tokens) = rest.split_last().unwrap();
    assert_eq!(last, &Event::Error("shutting_down".into()));
    assert_eq!(tokens, expected_tokens(51.0, tokens.len() as u32));
    server.await.unwrap().unwrap();
    connection.await.unwrap();
    assert_eq!(
        requests(&router).await,
        json!({"received": 2, "completed": 0, "cancelled": 1, "deadline_exceeded": 0,
               "failed": 0, "shut_down": 1, "active": 0})
    );
    assert_nothing_left(service, router, before).await;
}

/// A device that makes no progress (held) under real time: the request's deadline bounds the
/// upload (a 504) or the step in flight (an error event), and the abandoned work's memory comes
/// back once the device runs again. (Under paused time a pending operation keeps the clock
/// still, so no deadline can fire while the device is held: this needs real time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_bounds_work_on_a_stuck_device() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_deadline_bounds_work_on_a_stuck_device");
    let one = device(1);
    let before = baseline(&[1]);
    let service = Service::start(
        &[1],
        Setup {
            // Bounds the held parts; the free parts (an upload and a step) take milliseconds,
            // and the margin keeps a loaded machine from making them miss it.
            deadline: Duration::from_secs(5),
            ..Setup::default()
        },
    )
    .await;
    let router = service.router();

    let held = sim::hold(&one).unwrap();
    let response = router
        .clone()
        .oneshot(generate_request(&[3.0], 1000))
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::GATEWAY_TIMEOUT,
        "the upload never ran"
    );
    held.release().unwrap();

    let (status, mut events) = generate_in_process(&router, &[3.0], 1000).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events.next().await, Some(Event::Token(4.0)));
    let held = sim::hold(&one).unwrap();
    let events = events.rest().await;
    let (last, tokens) = events.split_last().unwrap();
    assert_eq!(last, &Event::Error("deadline_exceeded".into()));
    assert_eq!(tokens, expected_tokens(4.0, tokens.len() as u32));
    assert_eq!(requests(&router).await["deadline_exceeded"], 2);
    held.release().unwrap();
    assert_nothing_left(service, router, before).await;
}

/// A graceful shutdown while a step waits for a held device: the stream ends with
/// `shutting_down` at once (the step is dropped, not waited for), and its memory comes back
/// once the device runs.
#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_stream_stuck_on_a_held_device() {
    let _turn = turn().await;
    let _watchdog = watchdog("shutdown_ends_a_stream_stuck_on_a_held_device");
    let zero = device(0);
    let before = baseline(&[0]);
    let service = Service::start(&[0], Setup::default()).await;
    let router = service.router();
    let (_, mut events) = generate_in_process(&router, &[8.0], 1000).await;
    assert_eq!(events.next().await, Some(Event::Token(9.0)));
    let held = sim::hold(&zero).unwrap();
    assert!(events.next().now_or_never().is_none(), "held");
    service.shut_down();
    assert_eq!(events.rest().await, [Event::Error("shutting_down".into())]);
    let refused = router
        .clone()
        .oneshot(generate_request(&[1.0], 1))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(requests(&router).await["shut_down"], 1);
    held.release().unwrap();
    assert_nothing_left(service, router, before).await;
}

/// A device lost while it is held, with a step queued on it: the step fails as the loss
/// fails queued work, the only device is unhealthy so new requests are refused, and nothing
/// is left once the hold is dropped; with the pool's streams (device 4) or a stream per
/// request, which the request's end aborts on the lost device (device 5).
#[tokio::test(start_paused = true)]
async fn a_device_lost_while_held_fails_the_queued_step() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_device_lost_while_held_fails_the_queued_step");
    for (id, stream_per_request) in [(LOST_HELD, false), (LOST_HELD_OWN_STREAMS, true)] {
        let lost = device(id);
        let before = baseline(&[id]);
        let setup = Setup {
            stream_per_request,
            ..Setup::default()
        };
        let service = Service::start(&[id], setup).await;
        let router = service.router();
        let (_, mut events) = generate_in_process(&router, &[20.0], 1000).await;
        assert_eq!(events.next().await, Some(Event::Token(21.0)));
        let held = sim::hold(&lost).unwrap();
        assert!(events.next().now_or_never().is_none(), "held");
        let to_lose = lost.clone();
        tokio::task::spawn_blocking(move || sim::lose(&to_lose))
            .await
            .unwrap()
            .unwrap();
        match events.rest().await.as_slice() {
            [Event::Error(message)] => assert!(message.starts_with("device_lost: "), "{message}"),
            other => panic!("expected one device_lost event, got {other:?}"),
        }
        let refused = router
            .clone()
            .oneshot(generate_request(&[1.0], 1))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        assert_nothing_left(service, router, before).await;
    }
}

/// Every client goes away while its step waits for a held device, under each completion
/// strategy: each dropped step keeps its block until the device has run it, and all come
/// back.
#[tokio::test(start_paused = true)]
async fn many_clients_gone_while_the_device_is_held() {
    let _turn = turn().await;
    let _watchdog = watchdog("many_clients_gone_while_the_device_is_held");
    let zero = device(0);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let before = baseline(&[0]);
        let setup = Setup {
            streams: 3,
            strategy,
            ..Setup::default()
        };
        let service = Service::start(&[0], setup).await;
        let router = service.router();
        let mut clients = Vec::new();
        for i in 0..24 {
            let (_, mut events) = generate_in_process(&router, &[i as f32], 50).await;
            assert_eq!(events.next().await, Some(Event::Token(i as f32 + 1.0)));
            clients.push(events);
        }
        let held = sim::hold(&zero).unwrap();
        for events in &mut clients {
            assert!(events.next().now_or_never().is_none(), "held, {strategy:?}");
        }
        drop(clients);
        let allocated = service.shards[0].memory.stats().cache.allocated;
        assert_eq!(allocated, 24 * request_block(), "{strategy:?}");
        assert_eq!(requests(&router).await["cancelled"], 24, "{strategy:?}");
        held.release().unwrap();
        assert_nothing_left(service, router, before).await;
    }
}

/// A request waiting for device memory (the device's one request's worth taken by a client
/// that reads slowly) whose client goes away leaves the pool's queue, and the next request
/// gets the memory once the first is done.
#[tokio::test(start_paused = true)]
async fn a_client_gone_while_waiting_for_memory_leaves_the_queue() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_client_gone_while_waiting_for_memory_leaves_the_queue");
    let before = baseline(&[1]);
    let setup = Setup {
        requests_per_device: Some(1),
        ..Setup::default()
    };
    let service = Service::start(&[1], setup).await;
    let router = service.router();
    let (_, mut first) = generate_in_process(&router, &[1.0], 3).await;
    assert_eq!(first.next().await, Some(Event::Token(2.0)));

    let mut waiting = Box::pin(router.clone().oneshot(generate_request(&[5.0], 1)));
    assert!((&mut waiting).now_or_never().is_none(), "no memory for it");
    assert_eq!(service.shards[0].memory.stats().cache.waiters, 1);
    drop(waiting); // its client goes away
    assert_eq!(service.shards[0].memory.stats().cache.waiters, 0);
    assert_eq!(requests(&router).await["cancelled"], 1);

    let mut rest = first.rest().await;
    assert_eq!(rest.pop(), Some(Event::Done(3)));
    let (_, mut next) = generate_in_process(&router, &[5.0], 1).await;
    assert_eq!(next.rest().await, [Event::Token(6.0), Event::Done(1)]);
    assert_nothing_left(service, router, before).await;
}

/// Under paused time, a step waiting for a held device keeps the clock still under every
/// completion strategy, so the request's deadline (an hour) does not fire however long the
/// device takes in real time; a thread of the test's releases the device once the step is
/// queued.
#[tokio::test(start_paused = true)]
async fn paused_time_waits_for_a_held_step_under_every_strategy() {
    let _turn = turn().await;
    let _watchdog = watchdog("paused_time_waits_for_a_held_step_under_every_strategy");
    let zero = device(0);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let before = baseline(&[0]);
        let setup = Setup {
            strategy,
            ..Setup::default()
        };
        let service = Service::start(&[0], setup).await;
        let router = service.router();
        let (_, mut events) = generate_in_process(&router, &[30.0], 2).await;
        let held = sim::hold(&zero).unwrap();
        let mut next = Box::pin(events.next());
        assert!((&mut next).now_or_never().is_none(), "held, {strategy:?}");
        let (queued, release) = mpsc::channel::<()>();
        let releaser = std::thread::spawn(move || {
            release.recv().unwrap();
            held.release().unwrap();
        });
        queued.send(()).unwrap();
        assert_eq!(next.await, Some(Event::Token(31.0)), "{strategy:?}");
        releaser.join().unwrap();
        let want = [Event::Token(32.0), Event::Done(2)];
        assert_eq!(events.rest().await, want, "{strategy:?}");
        assert_nothing_left(service, router, before).await;
    }
}

/// How a client saw its request end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Done,
    Error,
    Left,
}

/// Clients with random disconnects while random kernel and task faults fire on both devices:
/// each request ends under the outcome its client saw (a fault is an error event or a 500,
/// a client that left before its last event is cancelled), and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_faults_and_disconnects_are_each_accounted_once() {
    let _turn = turn().await;
    let _watchdog = watchdog("random_faults_and_disconnects_are_each_accounted_once");
    let ids = [0, 1];
    let before = baseline(&ids);
    let setup = Setup {
        streams: 2,
        ..Setup::default()
    };
    let service = Service::start(&ids, setup).await;
    let router = service.router();
    let mut seen = Vec::new();
    for seed in [3, 5, 11, 13] {
        let mut rng = Rng(seed);
        for shard in &service.shards {
            let nth = 1 + rng.below(40);
            sim::fail_kernel(&shard.device, sim::kernel::VECTOR_ADD_F32, nth, TRAP).unwrap();
            let stream = &shard.streams.streams()[rng.below(2) as usize];
            sim::fail_task(stream, 1 + rng.below(60), TRAP).unwrap();
        }
        let mut clients = Vec::new();
        for i in 0..32u32 {
            let max_tokens = 1 + rng.below(10) as u32;
            let read = rng.below(u64::from(max_tokens) + 4) as u32;
            let router = router.clone();
            clients.push(tokio::spawn(async move {
                let first = (i * 50) as f32;
                let (status, mut events) = generate_in_process(&router, &[first], max_tokens).await;
                if status != StatusCode::OK {
                    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
                    return Seen::Error;
                }
                for k in 1..=max_tokens + 1 {
                    if k > read {
                        return Seen::Left;
                    }
                    match events.next().await {
                        Some(Event::Token(token)) => assert_eq!(token, first + k as f32),
                        Some(Event::Done(n)) => {
                            assert_eq!(n, max_tokens);
                            assert_eq!(events.next().await, None);
                            return Seen::Done;
                        }
                        Some(Event::Error(message)) => {
                            assert!(message.starts_with("device_error: "), "{message}");
                            assert_eq!(events.next().await, None);
                            return Seen::Error;
                        }
                        None => panic!("the stream ended without a last event"),
                    }
                }
                unreachable!("max_tokens tokens and a last event at most")
            }));
        }
        for client in clients {
            seen.push(client.await.unwrap());
        }
        for shard in &service.shards {
            sim::clear_faults(&shard.device).unwrap();
        }
        let counts = requests(&router).await;
        let count = |name: &str| counts[name].as_u64().unwrap();
        let saw = |what| seen.iter().filter(|s| **s == what).count() as u64;
        let context = format!("seed {seed}: {counts}");
        assert_eq!(count("completed"), saw(Seen::Done), "{context}");
        assert_eq!(count("failed"), saw(Seen::Error), "{context}");
        assert_eq!(count("cancelled"), saw(Seen::Left), "{context}");
        assert_eq!(count("active"), 0, "{context}");
    }
    assert!(seen.contains(&Seen::Error), "some fault fired");
    assert_nothing_left(service, router, before).await;
}

/// With a stream per request, a client gone while its step waits for a held device has the
/// step discarded (its stream aborted): its memory comes back while the device is still held,
/// and the device serves the next request once released.
#[tokio::test(start_paused = true)]
async fn a_client_gone_has_its_queued_work_discarded_on_its_own_stream() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_client_gone_has_its_queued_work_discarded_on_its_own_stream");
    let zero = device(0);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let before = baseline(&[0]);
        let setup = Setup {
            strategy,
            stream_per_request: true,
            ..Setup::default()
        };
        let service = Service::start(&[0], setup).await;
        let router = service.router();
        let (_, mut events) = generate_in_process(&router, &[5.0], 1000).await;
        assert_eq!(events.next().await, Some(Event::Token(6.0)));
        let held = sim::hold(&zero).unwrap();
        assert!(events.next().now_or_never().is_none(), "held, {strategy:?}");
        drop(events); // the client disconnects
        service.shards[0].memory.settled().await;
        service.shards[0].staging.settled().await;
        let memory = service.shards[0].memory.stats().cache;
        assert_eq!(
            (memory.allocated, memory.awaiting_blocks),
            (0, 0),
            "the discarded step gave its block back, {strategy:?}"
        );
        held.release().unwrap();
        let (_, mut next) = generate_in_process(&router, &[1.0], 1).await;
        assert_eq!(next.rest().await, [Event::Token(2.0), Event::Done(1)]);
        assert_nothing_left(service, router, before).await;
    }
}

/// Over a real socket, a client that closes its connection while its request's step waits
/// for a held device: hyper sees the close while the body is pending and drops it, which
/// ends the request at once; with a stream per request its step is discarded and its memory
/// back before the device runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_a_connection_closed_while_the_device_is_held_ends_its_request() {
    let _watchdog =
        watchdog("over_tcp_a_connection_closed_while_the_device_is_held_ends_its_request");
    let _turn = turn().await;
    let zero = device(0);
    for stream_per_request in [false, true] {
        let before = baseline(&[0]);
        let setup = Setup {
            stream_per_request,
            ..Setup::default()
        };
        let service = Service::start(&[0], setup).await;
        let router = service.router();
        let (address, server) = serve_tcp(&service, router.clone()).await;
        let mut ended = service.ended.subscribe();
        let (_, mut gone, connection) = generate_over_tcp(address, &[1.0], u32::MAX).await;
        assert_eq!(gone.next().await, Some(Event::Token(2.0)));
        let held = sim::hold(&zero).unwrap();
        drop(gone);
        connection.abort();
        let _ = connection.await;
        ended.wait_for(|ended| *ended == 1).await.unwrap();
        assert_eq!(requests(&router).await["cancelled"], 1);
        if stream_per_request {
            service.shards[0].memory.settled().await;
            assert_eq!(service.shards[0].memory.stats().cache.allocated, 0);
        }
        held.release().unwrap();
        service.shut_down();
        server.await.unwrap().unwrap();
        assert_nothing_left(service, router, before).await;
    }
}

/// A client gone while its request is still in the handler, its device memory being made on
/// a held device (a new block of the runtime's pool, stream-ordered) and its upload not yet
/// queued: with the pool's streams the allocation completes once the device runs and the
/// block goes to the pool's cache; with a stream per request the abort discards the
/// allocation, and the pool is at rest again while the device is still held.
#[tokio::test(start_paused = true)]
async fn a_client_gone_while_its_memory_is_made_on_a_held_device() {
    let _turn = turn().await;
    let _watchdog = watchdog("a_client_gone_while_its_memory_is_made_on_a_held_device");
    let one = device(1);
    for stream_per_request in [false, true] {
        let before = baseline(&[1]);
        let setup = Setup {
            stream_per_request,
            ..Setup::default()
        };
        let service = Service::start(&[1], setup).await;
        let router = service.router();
        let held = sim::hold(&one).unwrap();
        let pending = npu::stream::reactor_stats().pending();
        let mut handler = Box::pin(router.clone().oneshot(generate_request(&[5.0], 1)));
        assert!((&mut handler).now_or_never().is_none(), "held");
        // The new block's stream-ordered allocation is on the device.
        let making = npu::stream::reactor_stats().pending();
        assert_eq!(making, pending + 1, "the allocation is on its way");
        let memory = service.shards[0].memory.stats().cache;
        assert_eq!((memory.allocating, memory.reserved), (request_block(), 0));
        drop(handler); // the client goes away before the answer's head
        assert_eq!(requests(&router).await["cancelled"], 1);
        if stream_per_request {
            service.shards[0].memory.settled().await;
            service.shards[0].staging.settled().await;
            let memory = service.shards[0].memory.stats().cache;
            let at_rest = (memory.allocated, memory.awaiting_blocks, memory.allocating);
            assert_eq!(
                at_rest,
                (0, 0, 0),
                "the discarded allocation gave its room back"
            );
        }
        held.release().unwrap();
        let (_, mut next) = generate_in_process(&router, &[1.0], 1).await;
        assert_eq!(next.rest().await, [Event::Token(2.0), Event::Done(1)]);
        assert_nothing_left(service, router, before).await;
    }
}
