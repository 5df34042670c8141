//! An HTTP model-serving backend on axum whose handlers await the NPU, plus a load generator.
//!
//! The "model" is `y = alpha * x + bias` over a fixed input length, with the bias resident in
//! device memory: each request takes a pinned block from the pool, copies it to the device,
//! runs `scale_f32` and `vector_add_f32`, copies the result back, all awaited on Tokio's
//! workers (none of them blocks), and answers with the result.
//!
//! ```sh
//! cargo run --example serve                      # serves on 127.0.0.1:8080 until Ctrl-C
//! cargo run --example serve -- load 64 10000     # self-hosted load test: connections, requests
//! ```
//!
//! # The wire format
//!
//! `POST /v1/infer` with `Content-Type: application/json`:
//!
//! ```json
//! {"dtype": "f32", "shape": [1024], "data": [0.5, 1.0, ...]}
//! ```
//!
//! `dtype` must be `"f32"`, `shape` must be `[n]` with `n` the model's input length (1024 by
//! default, `GET /v1/model` tells) and `data` must hold `n` numbers. The answer, 200:
//! `{"dtype": "f32", "shape": [n], "data": [...]}`.
//!
//! Errors are JSON, `{"error": {"code": "...", "message": "..."}}`, with these codes:
//!
//! | status | code | when |
//! | --- | --- | --- |
//! | 400 | `bad_json` | the body is not the JSON above (syntax, missing or unknown fields, non-numbers) |
//! | 400 | `bad_body` | the body could not be read |
//! | 413 | `too_large` | the body is over the limit (32 bytes per element of the input plus 1 KiB) |
//! | 422 | `unsupported_dtype` | `dtype` is not `"f32"` |
//! | 422 | `wrong_length` | `data` or `shape` does not have the model's input length |
//! | 503 | `overloaded` | the in-flight limit is reached (with `Retry-After: 1`) |
//! | 500 | `device_error` | the NPU reported a failure |
//!
//! # Backpressure: 503, not a queue
//!
//! At most `max_in_flight` requests (64 by default) are admitted at once; a request beyond
//! that is refused at once with 503 `overloaded`, before its body is parsed, so a client can
//! retry elsewhere instead of waiting in a queue it cannot see. The pinned pool is sized for
//! the admitted requests, so an admitted request never waits for host memory.
//!
//! `GET /stats` returns the request counters, the in-flight count, the pool's statistics and
//! the reactor's counters. Shutdown (Ctrl-C) is graceful: the listener closes, the requests in
//! flight finish and are answered, then the process exits.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use npu::prelude::*;
use percentile::percentile;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

#[path = "support/kernels.rs"]
mod kernels;
#[path = "support/percentile.rs"]
mod percentile;

/// How the server is set up.
#[derive(Debug, Clone)]
struct Config {
    /// The device the model runs on.
    device: u32,
    /// The model's input (and output) length.
    input_len: usize,
    /// Requests admitted at once; more get 503.
    max_in_flight: usize,
    /// Streams the requests are spread over.
    streams: usize,
    /// The model's scale factor.
    alpha: f32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: 0,
            input_len: 1024,
            max_in_flight: 64,
            streams: 4,
            alpha: 2.0,
        }
    }
}

impl Config {
    /// The largest request body accepted, in bytes.
    fn body_limit(&self) -> usize {
        32 * self.input_len + 1024
    }
}

/// The model's bias: small integers, so every output is exact in f32 and in JSON.
fn bias(i: usize) -> f32 {
    (i % 7) as f32
}

/// What every handler shares.
struct AppState {
    config: Config,
    ctx: Context,
    streams: Vec<Stream>,
    next_stream: AtomicUsize,
    pool: PinnedPool,
    scale: Function,
    add: Function,
    bias: Arc<DeviceBuffer<f32>>,
    admission: Arc<Semaphore>,
    served: AtomicU64,
    overloaded: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

impl AppState {
    async fn new(config: Config) -> npu::Result<AppState> {
        let device = Device::open(config.device)?;
        let ctx = device.primary_context().clone();
        let kernels = kernels::load(&ctx)?;
        let (scale, add) = (
            kernels.function("scale_f32")?,
            kernels.function("vector_add_f32")?,
        );
        let streams = (0..config.streams.max(1))
            .map(|_| Stream::new(&ctx))
            .collect::<npu::Result<Vec<_>>>()?;
        let block = PinnedPool::size_class(config.input_len * size_of::<f32>())
            .unwrap_or(config.input_len * size_of::<f32>());
        let pool = PinnedPool::builder(&ctx)
            .capacity(block * (config.max_in_flight + 1))
            .build()?;
        let mut host = pool.alloc::<f32>(config.input_len).await?;
        for (i, b) in host.iter_mut().enumerate() {
            *b = bias(i);
        }
        let device_bias = DeviceBuffer::new(&ctx, config.input_len)?;
        let (_, device_bias) = streams[0].copy_h2d(host, device_bias).await?;
        Ok(AppState {
            admission: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
            ctx,
            streams,
            next_stream: AtomicUsize::new(0),
            pool,
            scale,
            add,
            bias: Arc::new(device_bias),
            served: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    fn in_flight(&self) -> usize {
        self.config.max_in_flight - self.admission.available_permits()
    }

    /// Runs the model on the NPU: copy in, scale, add the bias, copy out, all awaited.
    async fn infer(&self, data: &[f32]) -> npu::Result<Vec<f32>> {
        let n = data.len();
        let turn = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let stream = &self.streams[turn % self.streams.len()];
        let mut host = self.pool.alloc::<f32>(n).await?;
        host.copy_from_slice(data);
        let x = DeviceBuffer::<f32>::new(&self.ctx, n)?;
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds n.
        let (x, ..) =
            unsafe { stream.launch(&self.scale, 4, (x, n as u64, self.config.alpha)) }.await?;
        let y = DeviceBuffer::<f32>::new(&self.ctx, n)?;
        // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
        // elements of x and the bias and writes n of y; all hold n (the bias has the model's
        // input length, which the handler checked n against). The bias is only ever read.
        let (_, _, y, _) =
            unsafe { stream.launch(&self.add, 4, (x, self.bias.clone(), y, n as u64)) }.await?;
        let (_, host) = stream.copy_d2h(y, host).await?;
        Ok(host.to_vec())
    }

    fn stats(&self) -> serde_json::Value {
        let pool = self.pool.stats();
        let reactor = npu::reactor_stats();
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "requests": {
                "served": count(&self.served),
                "overloaded": count(&self.overloaded),
                "rejected": count(&self.rejected),
                "failed": count(&self.failed),
            },
            "in_flight": self.in_flight(),
            "max_in_flight": self.config.max_in_flight,
            "pool": {
                "allocated_bytes": pool.allocated,
                "reserved_bytes": pool.reserved,
                "cached_bytes": pool.cached,
                "peak_reserved_bytes": pool.peak_reserved,
                "awaiting_blocks": pool.awaiting_blocks,
                "hits": pool.hits,
                "misses": pool.misses,
                "waiters": pool.waiters,
            },
            "reactor": {
                "registered": reactor.registered,
                "completed": reactor.completed,
                "pending": reactor.pending(),
                "event_queries": reactor.queries,
                "parks": reactor.parks,
            },
        })
    }
}

/// A request or response tensor.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tensor {
    dtype: String,
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// A typed error answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": { "code": self.code, "message": self.message } }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            let retry = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        response
    }
}

/// Checks a request against the model; returns its data.
fn validate(body: Result<Bytes, BytesRejection>, config: &Config) -> Result<Vec<f32>, ApiError> {
    let input_len = config.input_len;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the body is over the limit of {} bytes",
                config.body_limit()
            ),
        ),
        status => ApiError::new(status, "bad_body", rejection.body_text()),
    })?;
    let tensor: Tensor = serde_json::from_slice(&body)
        .map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", err.to_string()))?;
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    if tensor.dtype != "f32" {
        let message = format!(
            "dtype {:?} is not supported; the model takes \"f32\"",
            tensor.dtype
        );
        return Err(ApiError::new(unprocessable, "unsupported_dtype", message));
    }
    if tensor.shape != [input_len] {
        let message = format!("shape {:?}: the model takes [{input_len}]", tensor.shape);
        return Err(ApiError::new(unprocessable, "wrong_length", message));
    }
    if tensor.data.len() != input_len {
        let message = format!(
            "data has {} elements: the model takes {input_len}",
            tensor.data.len()
        );
        return Err(ApiError::new(unprocessable, "wrong_length", message));
    }
    Ok(tensor.data)
}

async fn infer(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Tensor>, ApiError> {
    let _permit: OwnedSemaphorePermit = match state.admission.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            state.overloaded.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "{} requests are in flight, the limit; retry later",
                state.config.max_in_flight
            );
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                message,
            ));
        }
    };
    let data = validate(body, &state.config).inspect_err(|_| {
        state.rejected.fetch_add(1, Ordering::Relaxed);
    })?;
    match state.infer(&data).await {
        Ok(data) => {
            state.served.fetch_add(1, Ordering::Relaxed);
            Ok(Json(Tensor {
                dtype: "f32".into(),
                shape: vec![data.len()],
                data,
            }))
        }
        Err(err) => {
            state.failed.fetch_add(1, Ordering::Relaxed);
            let status = StatusCode::INTERNAL_SERVER_ERROR;
            Err(ApiError::new(status, "device_error", err.to_string()))
        }
    }
}

async fn model(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let config = &state.config;
    Json(json!({
        "dtype": "f32",
        "shape": [config.input_len],
        "computes": format!("{} * x + bias", config.alpha),
        "max_body_bytes": config.body_limit(),
    }))
}

async fn stats(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(state.stats())
}

fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.body_limit();
    Router::new()
        .route("/v1/infer", post(infer))
        .route("/v1/model", get(model))
        .route("/stats", get(stats))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// A running server.
struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Sets up the model and serves on `addr` until [`Server::stop`].
    async fn start(config: Config, addr: SocketAddr) -> Result<Server, Box<dyn std::error::Error>> {
        let state = Arc::new(AppState::new(config).await?);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let app = router(state.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stop.await;
                })
                .await
        });
        Ok(Server {
            addr,
            state,
            shutdown,
            task,
        })
    }

    /// Graceful shutdown: stops accepting, lets the requests in flight finish, then returns.
    async fn stop(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(());
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// A minimal HTTP/1.1 client over one keep-alive connection (hyper's client connection).
mod client {
    use std::net::SocketAddr;

    use axum::body::Bytes;
    use axum::http::{Method, Request, StatusCode, header};
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http1::{SendRequest, handshake};
    use hyper_util::rt::TokioIo;

    pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

    pub(crate) struct Connection {
        sender: SendRequest<Full<Bytes>>,
    }

    impl Connection {
        pub(crate) async fn open(addr: SocketAddr) -> Result<Connection, Error> {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let (sender, connection) = handshake(TokioIo::new(tcp)).await?;
            tokio::spawn(connection);
            Ok(Connection { sender })
        }

        /// Sends one request and reads the whole answer.
        pub(crate) async fn send(
            &mut self,
            method: Method,
            path: &str,
            body: Bytes,
        ) -> Result<(StatusCode, Bytes), Error> {
            self.sender.ready().await?;
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(body))?;
            let response = self.sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok((status, body))
        }
    }
}

/// What the load generator measured.
#[derive(Debug)]
struct LoadReport {
    ok: usize,
    errors: usize,
    /// The first few errors, for the report.
    first_errors: Vec<String>,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl LoadReport {
    fn requests_per_sec(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q` quantile of the successful requests' latencies (nearest rank).
    fn latency(&mut self, q: f64) -> Duration {
        percentile(&mut self.latencies, q)
    }
}

/// The request the load generator sends, and the answer the model must give.
fn load_case(input_len: usize, alpha: f32) -> (Bytes, Vec<f32>) {
    let data: Vec<f32> = (0..input_len).map(|i| (i % 17) as f32 * 0.5).collect();
    let expected = data
        .iter()
        .enumerate()
        .map(|(i, x)| alpha * x + bias(i))
        .collect();
    let body = json!({ "dtype": "f32", "shape": [input_len], "data": data });
    (Bytes::from(body.to_string()), expected)
}

/// `requests` POSTs over `connections` keep-alive connections to `addr`, stopping early at
/// `deadline`; every answer is checked against the model.
async fn load(
    addr: SocketAddr,
    connections: usize,
    requests: usize,
    deadline: Duration,
    (input_len, alpha): (usize, f32),
) -> LoadReport {
    let (body, expected) = load_case(input_len, alpha);
    let expected = Arc::new(expected);
    let issued = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (body, expected, issued) = (body.clone(), expected.clone(), issued.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut connection = match client::Connection::open(addr).await {
                    Ok(connection) => connection,
                    Err(err) => return vec![Err(format!("connect: {err}"))],
                };
                while issued.fetch_add(1, Ordering::Relaxed) < requests {
                    let Some(left) = deadline.checked_sub(start.elapsed()) else {
                        outcomes.push(Err("deadline reached before sending".to_owned()));
                        continue;
                    };
                    let sent = Instant::now();
                    let answer = tokio::time::timeout(
                        left,
                        connection.send(axum::http::Method::POST, "/v1/infer", body.clone()),
                    )
                    .await;
                    outcomes.push(check_answer(answer, &expected).map(|()| sent.elapsed()));
                }
                outcomes
            })
        })
        .collect();
    let mut report = LoadReport {
        ok: 0,
        errors: 0,
        first_errors: Vec::new(),
        elapsed: Duration::ZERO,
        latencies: Vec::with_capacity(requests),
    };
    for worker in workers {
        let outcomes = worker
            .await
            .unwrap_or_else(|err| vec![Err(format!("client task: {err}"))]);
        for outcome in outcomes {
            match outcome {
                Ok(latency) => {
                    report.ok += 1;
                    report.latencies.push(latency);
                }
                Err(err) => {
                    report.errors += 1;
                    if report.first_errors.len() < 5 {
                        report.first_errors.push(err);
                    }
                }
            }
        }
    }
    report.elapsed = start.elapsed();
    report
}

type Answer = Result<Result<(StatusCode, Bytes), client::Error>, tokio::time::error::Elapsed>;

/// Whether an answer is a 200 carrying exactly the expected output.
fn check_answer(answer: Answer, expected: &[f32]) -> Result<(), String> {
    let (status, body) = answer
        .map_err(|_| "timed out at the deadline".to_owned())?
        .map_err(|err| format!("transport: {err}"))?;
    if status != StatusCode::OK {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    let tensor: Tensor = serde_json::from_slice(&body).map_err(|err| format!("answer: {err}"))?;
    if tensor.data != expected {
        return Err("the answer differs from the model's output".to_owned());
    }
    Ok(())
}

/// Serves until Ctrl-C.
async fn serve(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start(Config::default(), addr).await?;
    println!("backend: {}", server.state.ctx.runtime().backend());
    println!(
        "serving y = {} * x + bias (f32[{}]) on http://{}  (POST /v1/infer, GET /v1/model, GET /stats; Ctrl-C stops)",
        server.state.config.alpha, server.state.config.input_len, server.addr
    );
    tokio::signal::ctrl_c().await?;
    println!("shutting down: finishing the requests in flight");
    let state = server.state.clone();
    server.stop().await?;
    println!("stopped; final stats: {}", state.stats());
    Ok(())
}

/// Starts a server on a loopback port, loads it, stops it gracefully.
async fn self_load(
    connections: usize,
    requests: usize,
) -> Result<bool, Box<dyn std::error::Error>> {
    let config = Config {
        max_in_flight: connections.max(1),
        ..Config::default()
    };
    let shape = (config.input_len, config.alpha);
    let server = Server::start(config, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    println!("backend: {}", server.state.ctx.runtime().backend());
    println!(
        "load: {requests} requests of f32[{}] over {connections} connections to http://{}",
        shape.0, server.addr
    );
    let mut report = load(
        server.addr,
        connections,
        requests,
        Duration::from_secs(120),
        shape,
    )
    .await;
    let state = server.state.clone();
    server.stop().await?;
    let (p50, p99) = (report.latency(0.50), report.latency(0.99));
    println!(
        "{} ok, {} errors in {:.2} s: {:.0} requests/s, latency p50 {:.2} ms, p99 {:.2} ms",
        report.ok,
        report.errors,
        report.elapsed.as_secs_f64(),
        report.requests_per_sec(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
    );
    for err in &report.first_errors {
        println!("  error: {err}");
    }
    println!("server stats: {}", state.stats());
    Ok(report.errors == 0 && report.ok == requests)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| {
        args.get(i)
            .map(|s| s.parse::<usize>().map_err(|_| format!("not a number: {s}")))
            .unwrap_or(Ok(default))
    };
    let outcome = match args.first().map(String::as_str) {
        None => serve(SocketAddr::from(([127, 0, 0, 1], 8080)))
            .await
            .map(|()| true),
        Some("load") => match (number(1, 64), number(2, 10_000)) {
            (Ok(connections), Ok(requests)) => self_load(connections, requests).await,
            (Err(err), _) | (_, Err(err)) => Err(err.into()),
        },
        Some(other) => Err(format!(
            "unknown command {other:?}: use no argument, or `load [connections] [requests]`"
        )
        .into()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("FAILED: some requests failed");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("serve failed: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    async fn post(server: &Server, body: impl Into<Bytes>) -> (StatusCode, serde_json::Value) {
        let mut connection = client::Connection::open(server.addr).await.unwrap();
        let (status, body) = connection
            .send(Method::POST, "/v1/infer", body.into())
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_requests_over_64_connections_without_an_error() {
        let config = Config {
            input_len: 256,
            ..Config::default()
        };
        let shape = (config.input_len, config.alpha);
        let server = Server::start(config, loopback()).await.unwrap();
        let mut report = load(server.addr, 64, 1000, Duration::from_secs(120), shape).await;
        let (p50, p99) = (report.latency(0.5), report.latency(0.99));
        println!(
            "{} requests/s, p50 {p50:?}, p99 {p99:?}",
            report.requests_per_sec() as u64
        );
        assert_eq!(report.errors, 0, "{:?}", report.first_errors);
        assert_eq!(report.ok, 1000);
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 1000);
        assert_eq!(stats["in_flight"], 0);
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_input_gets_typed_json_errors() {
        let config = Config {
            input_len: 4,
            ..Config::default()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        let ok = r#"{"dtype":"f32","shape":[4],"data":[1,2,3,4]}"#;
        let (status, body) = post(&server, ok).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"], json!([2.0, 5.0, 8.0, 11.0]));

        let cases: [(&str, StatusCode, &str); 6] = [
            (
                r#"{"dtype":"f32","shape":[3],"data":[1,2,3]}"#,
                StatusCode::UNPROCESSABLE_ENTITY,
                "wrong_length",
            ),
            (
                r#"{"dtype":"f32","shape":[4],"data":[1,2,3]}"#,
                StatusCode::UNPROCESSABLE_ENTITY,
                "wrong_length",
            ),
            (
                r#"{"dtype":"f16","shape":[4],"data":[1,2,3,4]}"#,
                StatusCode::UNPROCESSABLE_ENTITY,
                "unsupported_dtype",
            ),
            (
                r#"{"dtype":"f32","shape":[4],"data":[1,2,"3",4]}"#,
                StatusCode::BAD_REQUEST,
                "bad_json",
            ),
            (
                r#"{"dtype":"f32","data":[1,2,3,4]}"#,
                StatusCode::BAD_REQUEST,
                "bad_json",
            ),
            ("not json", StatusCode::BAD_REQUEST, "bad_json"),
        ];
        for (request, status, code) in cases {
            let (got_status, body) = post(&server, request).await;
            assert_eq!(
                (got_status, body["error"]["code"].as_str()),
                (status, Some(code)),
                "{request}: {body}"
            );
            assert!(
                body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
        let huge = format!(
            r#"{{"dtype":"f32","shape":[4],"data":[{}1]}}"#,
            "1,".repeat(1000)
        );
        let (status, body) = post(&server, huge).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("too_large"))
        );

        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 1);
        assert_eq!(stats["requests"]["rejected"], 7);
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn overload_gets_503_and_shutdown_finishes_the_requests_in_flight() {
        // Device 1, so holding it does not stall the other tests' device 0.
        let config = Config {
            device: 1,
            input_len: 8,
            max_in_flight: 2,
            ..Config::default()
        };
        let (body, expected) = load_case(config.input_len, config.alpha);
        let server = Server::start(config, loopback()).await.unwrap();

        // Hold the device: the two admitted requests stay in flight until it is released.
        npu::sim::control::hold(1).unwrap();
        let in_flight: Vec<_> = (0..2)
            .map(|_| {
                let (addr, body) = (server.addr, body.clone());
                tokio::spawn(async move {
                    let mut connection = client::Connection::open(addr).await?;
                    connection.send(Method::POST, "/v1/infer", body).await
                })
            })
            .collect();
        while server.state.in_flight() < 2 {
            tokio::task::yield_now().await;
        }
        let (status, answer) = post(&server, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer["error"]["code"], "overloaded");

        // Shut down while both are in flight, then let the device run: both are answered.
        let state = server.state.clone();
        let stopped = tokio::spawn(server.stop());
        npu::sim::control::release(1).unwrap();
        for request in in_flight {
            let answer = Ok(request.await.unwrap());
            assert_eq!(check_answer(answer, &expected), Ok(()));
        }
        stopped.await.unwrap().unwrap();
        assert_eq!(state.stats()["requests"]["served"], 2);
        assert_eq!(state.stats()["requests"]["overloaded"], 1);
    }
}
