//! A serving backend written from the `npu` crate's docs, as a new user would: an axum service
//! whose inference handler takes its stream from a `StreamPool` and its memory from a
//! `DevicePool` and a `PinnedPool` without ever waiting for a block (503 when they are
//! exhausted), bounds each request by a deadline, and answers device faults, a lost device and
//! overload with distinct typed errors; a health check that reports the device's state; and the
//! Tokio tests its author writes for it, injecting faults through `npu::sim`.
//!
//! The simulator is configured (three devices; device 2 is the one lost) before anything
//! touches a device; the tests take turns.

use std::sync::Once;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use npu::device::DeviceStatus;
use npu::error::{AclCode, OpError};
use npu::prelude::*;
use npu::sim::{self, SimConfig};
use npu::stream::reactor_stats;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The device lost by [`a_lost_device_is_503_device_lost_and_fails_the_health_check`]; no
/// other test uses it.
const LOST: u32 = 2;

/// The service: `y = alpha * x` for request bodies of `f32`s.
#[derive(Clone)]
struct Backend {
    device: Device,
    streams: StreamPool,
    memory: DevicePool,
    staging: PinnedPool,
    scale: Function,
    deadline: Duration,
}

/// Why a request got no answer, each one its own HTTP error.
#[derive(Debug)]
enum Failure {
    /// No memory block is free: every one is in use by a request (or by the device, for
    /// requests given up on).
    Overloaded(&'static str),
    /// The device failed the request's work, and stays usable.
    DeviceFault(npu::Error),
    /// The device is gone: nothing will run on it again.
    DeviceLost(npu::Error),
    /// The device did not finish within the deadline.
    Timeout(Duration),
    /// Anything else npu-rs returned.
    Other(npu::Error),
}

impl From<npu::Error> for Failure {
    fn from(err: npu::Error) -> Failure {
        if err.is_device_lost() {
            Failure::DeviceLost(err)
        } else if err.fault().is_some() {
            Failure::DeviceFault(err)
        } else {
            Failure::Other(err)
        }
    }
}

impl<T> From<OpError<T>> for Failure {
    fn from(err: OpError<T>) -> Failure {
        err.into_error().into()
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, code, message) = match &self {
            Failure::Overloaded(pool) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!("no {pool} memory is free; retry later"),
            ),
            Failure::DeviceFault(err) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "device_fault",
                err.to_string(),
            ),
            Failure::DeviceLost(err) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "device_lost",
                err.to_string(),
            ),
            Failure::Timeout(deadline) => (
                StatusCode::GATEWAY_TIMEOUT,
                "device_timeout",
                format!("the device did not finish within {deadline:?}"),
            ),
            Failure::Other(err) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                err.to_string(),
            ),
        };
        let mut response = (
            status,
            Json(json!({"error": {"code": code, "message": message}})),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let retry = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        response
    }
}

impl Backend {
    /// A backend on `device` with one stream, and room in its pools for `requests` requests of
    /// `len` elements at once, prewarmed so that no request allocates.
    async fn new(device: Device, requests: usize, len: usize) -> npu::Result<Backend> {
        let ctx = device.primary_context().clone();
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let module = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }?;
        let bytes = len * size_of::<f32>();
        let streams = StreamPool::new(&ctx, 1)?;
        let memory = DevicePool::builder(&ctx)
            .capacity(requests * DevicePool::size_class(bytes).unwrap())
            .build()?;
        memory.reserve(&streams.next(), requests, bytes).await?;
        let staging = PinnedPool::builder(&ctx)
            .capacity(requests * PinnedPool::size_class(bytes).unwrap())
            .build()?;
        staging.reserve(requests, bytes)?;
        Ok(Backend {
            device,
            streams,
            memory,
            staging,
            scale: module.function("scale_f32")?,
            deadline: Duration::from_secs(5),
        })
    }

    /// One request, bounded by the deadline.
    async fn infer(&self, input: &[f32], alpha: f32) -> Result<Vec<f32>, Failure> {
        tokio::time::timeout(self.deadline, self.run(input, alpha))
            .await
            .map_err(|_| Failure::Timeout(self.deadline))?
    }

    /// Copy in, the kernel, copy out, on the next stream; blocks are taken, never waited for.
    async fn run(&self, input: &[f32], alpha: f32) -> Result<Vec<f32>, Failure> {
        let stream = self.streams.next();
        let n = input.len();
        let x = self
            .memory
            .try_alloc::<f32>(&stream, n)?
            .ok_or(Failure::Overloaded("device"))?;
        let mut host = self
            .staging
            .try_alloc::<f32>(n)?
            .ok_or(Failure::Overloaded("pinned"))?;
        host.copy_from_slice(input);
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds n.
        let (x, _, _) = unsafe { stream.launch(&self.scale, 4, (x, n as u64, alpha)) }.await?;
        let (_, host) = stream.copy_d2h(x, host).await?;
        Ok(host.to_vec())
    }

    /// The health check's answer: the device's state and what the pools and reactor hold.
    fn health(&self) -> (StatusCode, Value) {
        let (status, state) = match self.device.status() {
            Ok(DeviceStatus::Normal) => (StatusCode::OK, "normal".to_string()),
            Ok(other) => (StatusCode::SERVICE_UNAVAILABLE, format!("{other:?}")),
            Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
        };
        let memory = self.memory.stats().cache;
        let body = json!({
            "device": self.device.id(),
            "state": state,
            "device_pool": {"allocated": memory.allocated, "awaiting": memory.awaiting_blocks},
            "pinned_pool": {"allocated": self.staging.stats().allocated},
            "reactor_pending": reactor_stats().pending(),
        });
        (status, body)
    }

    /// Whether neither pool has a block out or in the device's hands.
    fn at_rest(&self) -> bool {
        let (device, host) = (self.memory.stats().cache, self.staging.stats());
        (device.allocated, device.awaiting_blocks, host.allocated) == (0, 0, 0)
    }
}

async fn infer(
    State(backend): State<Backend>,
    Json(input): Json<Vec<f32>>,
) -> Result<Json<Vec<f32>>, Failure> {
    Ok(Json(backend.infer(&input, 2.0).await?))
}

async fn health(State(backend): State<Backend>) -> (StatusCode, Json<Value>) {
    let (status, body) = backend.health();
    (status, Json(body))
}

fn router(backend: Backend) -> Router {
    Router::new()
        .route("/v1/infer", post(infer))
        .route("/healthz", get(health))
        .with_state(backend)
}

/// Serves `backend` on a loopback port until the returned sender is used (or dropped), then
/// shuts down gracefully: the server task ends once the requests in flight are answered.
async fn serve(
    backend: Backend,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router(backend)).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    (addr, stop, tokio::spawn(server.into_future()))
}

/// One HTTP/1.1 request on a connection of its own; its status and JSON body.
async fn request(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body.as_bytes()).await.unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(body).unwrap())
}

/// The simulator configured, once, before any device is touched; then this test's turn.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        SimConfig::default().devices(3).install().unwrap();
    });
    TURN.lock().await
}

fn device(id: u32) -> Device {
    Device::open(id).unwrap()
}

/// How long a test waits, in real time, for what must happen before it fails instead of
/// hanging.
const HANG: Duration = Duration::from_secs(60);

/// Until `request`, in flight, has taken its blocks (and so waits for the device); fails if it
/// ended first, or never does.
async fn until_in_flight<T>(backend: &Backend, request: &tokio::task::JoinHandle<T>) {
    let start = std::time::Instant::now();
    while backend.staging.stats().allocated == 0 {
        assert!(
            !request.is_finished(),
            "the request ended before taking its blocks"
        );
        assert!(start.elapsed() < HANG, "the request never took its blocks");
        tokio::task::yield_now().await;
    }
}

/// Backpressure and graceful shutdown: with room for one request, a second one while the first
/// is on the (held) device is refused at once with 503 `overloaded`; the health check answers
/// meanwhile; a shutdown asked for then waits for the first request, which is answered whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_is_503_and_shutdown_answers_the_request_in_flight() -> npu::Result<()> {
    let _turn = turn().await;
    let backend = Backend::new(device(0), 1, 256).await?;
    let (addr, stop, server) = serve(backend.clone()).await;
    let body = serde_json::to_string(&vec![1.5f32; 256]).unwrap();

    let (status, answer) = request(addr, "POST", "/v1/infer", &body).await;
    assert_eq!((status, answer), (200, json!(vec![3.0f32; 256])));

    let held = sim::hold(&backend.device)?;
    let first = tokio::spawn({
        let body = body.clone();
        async move { request(addr, "POST", "/v1/infer", &body).await }
    });
    until_in_flight(&backend, &first).await;
    let (status, answer) = request(addr, "POST", "/v1/infer", &body).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "overloaded", "{answer}");
    let (status, health) = request(addr, "GET", "/healthz", "").await;
    assert_eq!(
        (status, &health["state"]),
        (200, &json!("normal")),
        "{health}"
    );
    let block = PinnedPool::size_class(256 * size_of::<f32>()).unwrap();
    assert_eq!(health["pinned_pool"]["allocated"], block, "{health}");
    assert!(health["reactor_pending"].as_u64().unwrap() >= 1, "{health}");

    stop.send(()).unwrap();
    // The listener closes while the request is still on the held device.
    let start = std::time::Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(start.elapsed() < HANG, "the listener never closed");
        tokio::task::yield_now().await;
    }
    assert!(
        !server.is_finished(),
        "the shutdown waits for the request in flight"
    );
    drop(held);
    let (status, answer) = first.await.unwrap();
    assert_eq!((status, answer), (200, json!(vec![3.0f32; 256])));
    server.await.unwrap().unwrap();
    assert!(backend.at_rest());
    Ok(())
}

/// A kernel fault injected on the service's stream is a 500 `device_fault` naming the kernel
/// launch; the device stays healthy and serves the next request.
#[tokio::test]
async fn a_kernel_fault_is_500_device_fault_and_the_device_stays_healthy() -> npu::Result<()> {
    let _turn = turn().await;
    let backend = Backend::new(device(1), 1, 64).await?;
    // The request's first device task is its copy in, the second its kernel.
    sim::fail_task(&backend.streams.next(), 2, AclCode::AICORE_EXCEPTION)?;
    let failure = backend.infer(&[1.0; 64], 2.0).await.unwrap_err();
    let Failure::DeviceFault(err) = &failure else {
        panic!("a kernel fault is a device fault: {failure:?}");
    };
    assert_eq!(err.acl_code(), Some(AclCode::AICORE_EXCEPTION));
    assert!(
        err.to_string().contains("aclrtLaunchKernelWithHostArgs"),
        "{err}"
    );
    assert_eq!(failure.into_response().status(), 500);
    assert_eq!(
        backend.health().0,
        StatusCode::OK,
        "a task fault leaves the device normal"
    );
    assert!(backend.at_rest(), "the failed request's blocks came back");
    assert_eq!(backend.infer(&[1.0; 64], 2.0).await.unwrap(), [2.0; 64]);
    Ok(())
}

/// An uncorrectable memory error in the block a request gets is that request's 500
/// `device_fault`; the pool repairs the block when it comes back, and the next request, on the
/// same block, is served.
#[tokio::test]
async fn a_memory_error_in_a_requests_block_fails_only_that_request() -> npu::Result<()> {
    let _turn = turn().await;
    let backend = Backend::new(device(1), 1, 64).await?;
    let block = backend
        .memory
        .try_alloc::<f32>(&backend.streams.next(), 64)?
        .expect("the pool's one block");
    sim::inject_memory_error(&block, 0..16)?;
    drop(block);
    let failure = backend.infer(&[1.0; 64], 2.0).await.unwrap_err();
    let Failure::DeviceFault(err) = &failure else {
        panic!("a memory error is a device fault: {failure:?}");
    };
    assert!(err.is_memory_error(), "{err}");
    assert_eq!(failure.into_response().status(), 500);
    // The pool examines the block on a thread of its own: flush_releases does not wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !backend.at_rest() {
        assert!(
            std::time::Instant::now() < deadline,
            "the repair never ended"
        );
        npu::sim::flush_releases();
        std::thread::yield_now();
    }
    assert_eq!(backend.memory.stats().cache.repaired, 1);
    assert_eq!(backend.health().0, StatusCode::OK);
    assert_eq!(backend.infer(&[1.0; 64], 2.0).await.unwrap(), [2.0; 64]);
    Ok(())
}

/// Under a paused clock a request on a held device waits for it (the pending work keeps the
/// clock: the runtime goes idle with the deadline's timer pending and does not jump to it), and
/// the deadline passes only when the test moves the clock; the request is then a 504 and its
/// blocks come back once the device is done.
#[tokio::test(start_paused = true)]
async fn in_paused_time_the_deadline_passes_only_when_the_test_says() -> npu::Result<()> {
    let _turn = turn().await;
    let backend = Backend::new(device(1), 1, 64).await?;
    let held = sim::hold(&backend.device)?;
    let request = tokio::spawn({
        let backend = backend.clone();
        async move { backend.infer(&[1.0; 64], 2.0).await }
    });
    until_in_flight(&backend, &request).await;
    // Idle for a while of real time, so that the runtime parks with the deadline pending: a
    // paused clock with nothing keeping it would jump to the deadline there. (The window only
    // gives a broken keeper its chance; nothing waits on its length.)
    let paused_at = tokio::time::Instant::now();
    let (wake, idle) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        wake.send(()).unwrap();
    });
    idle.await.unwrap();
    assert_eq!(
        tokio::time::Instant::now(),
        paused_at,
        "the clock waits for the held device"
    );
    assert!(
        !request.is_finished(),
        "the clock waits for the held device"
    );
    tokio::time::advance(backend.deadline).await;
    let failure = request.await.unwrap().unwrap_err();
    assert!(matches!(failure, Failure::Timeout(_)), "{failure:?}");
    assert_eq!(failure.into_response().status(), 504);
    assert!(
        !backend.at_rest(),
        "the device still owns the given-up request's blocks"
    );
    drop(held);
    backend.streams.next().synchronize().await?;
    npu::sim::flush_releases();
    assert!(backend.at_rest());
    assert_eq!(backend.infer(&[1.0; 64], 2.0).await.unwrap(), [2.0; 64]);
    Ok(())
}

/// A lost device is a 503 `device_lost`, and the health check reports it.
#[tokio::test(start_paused = true)]
async fn a_lost_device_is_503_device_lost_and_fails_the_health_check() -> npu::Result<()> {
    let _turn = turn().await;
    let backend = Backend::new(device(LOST), 1, 64).await?;
    assert_eq!(backend.infer(&[1.0; 64], 2.0).await.unwrap(), [2.0; 64]);
    // Lost while a request waits on it: `lose` blocks until the device's running work is done,
    // so it runs on a blocking thread rather than on the test's only worker.
    let held = sim::hold(&backend.device)?;
    let in_flight = tokio::spawn({
        let backend = backend.clone();
        async move { backend.infer(&[1.0; 64], 2.0).await }
    });
    until_in_flight(&backend, &in_flight).await;
    let lost = backend.device.clone();
    tokio::task::spawn_blocking(move || sim::lose(&lost))
        .await
        .unwrap()?;
    let failure = in_flight.await.unwrap().unwrap_err();
    let Failure::DeviceLost(err) = &failure else {
        panic!("a device lost under a request: {failure:?}");
    };
    assert_eq!(err.acl_code(), Some(AclCode::DEVICE_LOST), "{err}");
    drop(held);
    npu::sim::flush_releases();
    assert!(backend.at_rest(), "the lost request's blocks came back");
    // And every request after it.
    let failure = backend.infer(&[1.0; 64], 2.0).await.unwrap_err();
    assert!(matches!(failure, Failure::DeviceLost(_)), "{failure:?}");
    let answer = failure.into_response();
    assert_eq!(answer.status(), 503);
    let (status, health) = backend.health();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{health}");
    assert_eq!(health["state"], "Abnormal", "{health}");
    Ok(())
}
