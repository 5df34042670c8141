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
//! Every error is JSON, `{"error": {"code": "...", "message": "..."}}`, with these codes:
//!
//! | status | code | when |
//! | --- | --- | --- |
//! | 400 | `bad_json` | the body is not the JSON above (syntax, missing or unknown fields, non-numbers, numbers beyond f64) |
//! | 400 | `bad_body` | the body could not be read (the connection failed mid-body) |
//! | 404 | `not_found` | no route has the path |
//! | 405 | `method_not_allowed` | the path's route takes another method (listed in `Allow`) |
//! | 408 | `request_timeout` | the body did not arrive within the body timeout (10 s by default) |
//! | 413 | `too_large` | the body is over the limit (32 bytes per element of the input plus 1 KiB) |
//! | 415 | `unsupported_media_type` | `POST /v1/infer`'s `Content-Type` is not `application/json` (parameters allowed), or its body is content-encoded (`Content-Encoding` other than `identity`; none is decoded) |
//! | 422 | `unsupported_dtype` | `dtype` is not `"f32"` |
//! | 422 | `wrong_length` | `data` or `shape` does not have the model's input length |
//! | 422 | `input_not_finite` | an element of `data` is beyond f32's finite range (e.g. `1e300`) |
//! | 422 | `output_not_finite` | an element of the output overflows f32 (e.g. `3e38` with `alpha = 2`) |
//! | 503 | `overloaded` | the in-flight limit is reached, or no memory block is free for the request (with `Retry-After: 1`) |
//! | 503 | `too_many_connections` | the connection limit is reached (with `Retry-After: 1` and `Connection: close`) |
//! | 500 | `device_error` | the NPU reported a failure (the detail goes to the log, not the client) |
//! | 504 | `device_timeout` | the device did not finish the request's work within the device timeout (30 s by default) |
//!
//! # Hostile clients: timeouts and limits
//!
//! A client has the header timeout (10 s by default) to send a request's head, counted from
//! when the connection is ready for one (accepted, or the previous answer sent): a connection
//! that stalls in its head, or stays idle that long, is closed without an answer. It then has
//! the body timeout to send the whole body, or gets 408. Both bound the whole head or body, so a
//! client that drips it a byte at a time gains nothing. A body declared (`Content-Length`)
//! over the limit is refused with 413 before a byte of it is read; an undeclared (chunked) one
//! when it passes the limit. After a 408 or a 413 the connection is closed (`Connection:
//! close`), since the rest of the body is still unread. The one answer that is not JSON is the
//! one hyper writes itself for a request head it cannot parse (400, 414 or 431 with an empty
//! body), before any of this server's code runs. The server speaks HTTP/1.1 only: an HTTP/2
//! connection with prior knowledge is closed unanswered (hyper recognises its preface), and a
//! request asking for an `Upgrade` (h2c, WebSocket) is answered as a plain HTTP/1.1 one. A
//! client that stops reading its answer has the write timeout (10 s by default, counted from
//! when the answer last made progress) before its connection is closed, so it cannot hold the
//! connection and its unsent answer for ever; `GET /stats` counts those under
//! `connections.write_timeouts`.
//!
//! At most `max_connections` connections (512 by default) are open at once, so that neither
//! memory nor file descriptors run out under a flood of connections (idle, slow or stalled
//! ones): one more has its request's head read (within 1 s), is answered 503
//! `too_many_connections` and closed (HTTP clients take an answer sent before their request
//! for a dead connection), and `GET /stats` counts it under `connections.refused`. At most 64
//! such refusals run at once; past that a connection over the limit is closed unanswered
//! (still counted), so a flood of them costs 64 small tasks at most. Each connection
//! buffers at most `max_buffer` bytes (64 KiB by default) of what it reads or writes, so a
//! request head longer than that gets hyper's 431. A connection thus holds at most that buffer,
//! the body limit and its answer.
//!
//! A client that closes or resets its connection while its request is on the device has it
//! dropped at once (npu-rs keeps what the device may still touch until it is done, then the
//! blocks go back to their pools), its admission slot freed, and `GET /stats` counts it under
//! `requests.cancelled`. So does a client that only half-closes (shuts down its sending side)
//! to wait for its answer: hyper's `half_close` is off, so it cannot be told from one gone.
//!
//! # Backpressure: 503, not a queue
//!
//! At most `max_in_flight` requests (64 by default) are admitted to the device at once; a
//! request beyond that is refused at once with 503 `overloaded`, when its body has arrived and
//! before it is parsed, so a client can retry elsewhere instead of waiting in a queue it
//! cannot see. Admission comes after the body so that slow senders cannot hold the device's
//! slots. Requests are spread over the streams of an `npu::stream::StreamPool`. The pinned
//! pool is sized for the admitted requests, and the device pool holds two prewarmed blocks per
//! admitted request, so no request allocates memory synchronously (a block comes back once the
//! device is done with it). An admitted request waits for the device at most the device
//! timeout (30 s by default), then is answered 504 `device_timeout` and frees its slot, so a
//! stalled device cannot hold every slot for good. A request never waits for a block either:
//! one given up on (timed out, or its client gone) frees its slot at once but its blocks only
//! once the device is done with them, and a request that then finds no block free is refused
//! at once with 503 `overloaded` too.
//!
//! `GET /stats` returns the request counters, the in-flight count, the open connections, the
//! pools' statistics and the reactor's counters. Shutdown (Ctrl-C) is graceful: the listener
//! closes, the requests in flight finish and are answered, then the process exits. The answers
//! get the drain timeout (10 s by default) to reach their clients: a connection still open then
//! (a client that stopped reading its answer, which would otherwise hold the shutdown for ever)
//! is closed, and a request it still has on the device is dropped, which npu-rs makes safe.

use std::net::SocketAddr;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::Listener;
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use npu::memory::PoolStats;
use npu::prelude::*;
use npu::stream::StreamPool;
use percentile::percentile;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio_io_timeout::TimeoutStream;

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
    /// How long a connection may take to send a request's head once it is ready for one.
    header_timeout: Duration,
    /// How long a request may take to send its whole body once the handler reads it.
    body_timeout: Duration,
    /// How long writing an answer may make no progress (a client not reading it) before the
    /// connection is closed.
    write_timeout: Duration,
    /// How long a shutdown waits for the connections to finish their requests before closing
    /// them.
    drain_timeout: Duration,
    /// How long an admitted request may wait for the device (copies and kernels) before it is
    /// answered 504 and its slot freed: a stalled or lost device then costs each request this
    /// much, instead of holding every admission slot for good.
    device_timeout: Duration,
    /// Connections open at once; one more is answered 503 and closed. Keep it below the
    /// process's file-descriptor limit (`ulimit -n`), so that accepting never fails for want of
    /// a descriptor.
    max_connections: usize,
    /// The most a connection buffers of what it reads or writes (hyper's `max_buf_size`, at
    /// least 8192): a request head longer than this is refused with 431.
    max_buffer: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: 0,
            input_len: 1024,
            max_in_flight: 64,
            streams: 4,
            alpha: 2.0,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            device_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_buffer: 64 << 10,
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

/// Why the model did not run a request.
enum RunError {
    /// The named pool (`"pinned"` or `"device"`) had no free block: requests given up on still
    /// have the device using theirs.
    NoRoom(&'static str),
    /// The NPU reported a failure.
    Device(npu::Error),
}

impl<E: Into<npu::Error>> From<E> for RunError {
    fn from(err: E) -> Self {
        RunError::Device(err.into())
    }
}

/// The model on the device: everything here touches the NPU, and nothing else does.
struct Model {
    streams: StreamPool,
    pool: PinnedPool,
    /// Two device blocks per admitted request (input and output), prewarmed at load, so no
    /// request allocates device memory synchronously.
    device_pool: DevicePool,
    scale: Function,
    add: Function,
    bias: Arc<DeviceBuffer<f32>>,
    alpha: f32,
}

impl Model {
    /// Loads the kernels, creates the streams, a pinned pool with a block for each request
    /// `config` admits (and one for the bias) and a device pool with two, and uploads the bias.
    async fn load(config: &Config) -> npu::Result<Model> {
        let device = Device::open(config.device)?;
        let ctx = device.primary_context().clone();
        let kernels = kernels::load(&ctx)?;
        let (scale, add) = (
            kernels.function("scale_f32")?,
            kernels.function("vector_add_f32")?,
        );
        let streams = StreamPool::new(&ctx, config.streams.max(1))?;
        let block = PinnedPool::size_class(config.input_len * size_of::<f32>())
            .unwrap_or(config.input_len * size_of::<f32>());
        let pool = PinnedPool::builder(&ctx)
            .capacity(block * (config.max_in_flight + 1))
            .build()?;
        let mut host = pool.alloc::<f32>(config.input_len).await?;
        for (i, b) in host.iter_mut().enumerate() {
            *b = bias(i);
        }
        let bytes = config.input_len * size_of::<f32>();
        let blocks = 2 * config.max_in_flight;
        let device_block = DevicePool::size_class(bytes).unwrap_or(bytes);
        let device_pool = DevicePool::builder(&ctx)
            .capacity(device_block * blocks)
            .build()?;
        let first = streams.next();
        device_pool.reserve(&first, blocks, bytes).await?;
        let device_bias = DeviceBuffer::new(&ctx, config.input_len)?;
        let (_, device_bias) = first.copy_h2d(host, device_bias).await?;
        Ok(Model {
            streams,
            pool,
            device_pool,
            scale,
            add,
            bias: Arc::new(device_bias),
            alpha: config.alpha,
        })
    }

    /// Runs the model on `data` (of the model's input length): copy in, scale, add the bias,
    /// copy out, all awaited.
    async fn run(&self, data: &[f32]) -> Result<Vec<f32>, RunError> {
        let n = data.len();
        let stream = self.streams.next();
        // Blocks are taken, never waited for: an admitted request finds its blocks free unless
        // requests given up on (timed out, or their client gone) still have the device using
        // theirs; then it is refused at once, as a request over the admission limit is.
        let mut host = self
            .pool
            .try_alloc::<f32>(n)?
            .ok_or(RunError::NoRoom("pinned"))?;
        host.copy_from_slice(data);
        let x =
            (self.device_pool.try_alloc::<f32>(&stream, n)?).ok_or(RunError::NoRoom("device"))?;
        let (host, x) = stream.copy_h2d(host, x).await?;
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in
        // place; x holds n.
        let (x, ..) = unsafe { stream.launch(&self.scale, 4, (x, n as u64, self.alpha)) }.await?;
        let y =
            (self.device_pool.try_alloc::<f32>(&stream, n)?).ok_or(RunError::NoRoom("device"))?;
        // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
        // elements of x and the bias and writes n of y; all hold n (the bias has the model's
        // input length, which the handler checked n against). The bias is only ever read.
        let (_, _, y, _) =
            unsafe { stream.launch(&self.add, 4, (x, self.bias.clone(), y, n as u64)) }.await?;
        let (_, host) = stream.copy_d2h(y, host).await?;
        Ok(host.to_vec())
    }

    /// The device-side statistics for `GET /stats`: the two pools' and the reactor's.
    fn stats(&self) -> serde_json::Value {
        let device_pool = self.device_pool.stats();
        let reactor = npu::reactor_stats();
        let mut device_json = pool_json(&device_pool.cache);
        device_json["backend"] = json!(format!("{:?}", device_pool.backend));
        json!({
            "pool": pool_json(&self.pool.stats()),
            "device_pool": device_json,
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

/// A pool's counters for `GET /stats`.
fn pool_json(pool: &PoolStats) -> serde_json::Value {
    json!({
        "allocated_bytes": pool.allocated,
        "reserved_bytes": pool.reserved,
        "cached_bytes": pool.cached,
        "peak_reserved_bytes": pool.peak_reserved,
        "awaiting_blocks": pool.awaiting_blocks,
        "hits": pool.hits,
        "misses": pool.misses,
        "waiters": pool.waiters,
    })
}

/// What every handler shares.
struct AppState {
    config: Config,
    model: Model,
    admission: Arc<Semaphore>,
    served: AtomicU64,
    overloaded: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    connections: watch::Sender<Connections>,
}

/// The server's connections, for `GET /stats` (and watched by the tests).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Connections {
    /// Accepted and not yet closed.
    open: usize,
    /// Closed because an answer made no progress for the write timeout.
    write_timeouts: u64,
    /// Refused with 503 because `max_connections` were open.
    refused: u64,
}

impl AppState {
    /// Loads the model onto the device; no request is admitted yet.
    async fn new(config: Config) -> npu::Result<AppState> {
        Ok(AppState {
            model: Model::load(&config).await?,
            admission: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
            served: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            connections: watch::Sender::new(Connections::default()),
        })
    }

    /// Requests admitted to the device and not yet answered.
    fn in_flight(&self) -> usize {
        self.config.max_in_flight - self.admission.available_permits()
    }

    /// Counts an answer under the counter its outcome belongs to.
    fn count<T>(&self, answer: &Result<T, ApiError>) {
        let counter = match answer {
            Ok(_) => &self.served,
            Err(err) if err.status == StatusCode::SERVICE_UNAVAILABLE => &self.overloaded,
            Err(err) if err.status.is_client_error() => &self.rejected,
            Err(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The request counters, the in-flight count and the device's statistics.
    fn stats(&self) -> serde_json::Value {
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut stats = self.model.stats();
        stats["requests"] = json!({
            "served": count(&self.served),
            "overloaded": count(&self.overloaded),
            "rejected": count(&self.rejected),
            "failed": count(&self.failed),
            "cancelled": count(&self.cancelled),
        });
        let connections = *self.connections.borrow();
        stats["connections"] = json!({
            "open": connections.open,
            "write_timeouts": connections.write_timeouts,
            "refused": connections.refused,
        });
        stats["in_flight"] = json!(self.in_flight());
        stats["max_in_flight"] = json!(self.config.max_in_flight);
        stats
    }
}

/// A request or response tensor: requests carry f64 so that an element beyond f32's range is
/// seen and refused instead of silently becoming infinite.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tensor<T> {
    dtype: String,
    shape: Vec<usize>,
    data: Vec<T>,
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

    /// The answer's JSON body.
    fn body(&self) -> serde_json::Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        match self.status {
            StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            // The rest of the body is still on the wire: the connection cannot carry another
            // request.
            StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

/// Refuses a request whose `Content-Type` is not `application/json` (parameters such as
/// `charset` allowed).
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE);
    let essence = content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    let got = content_type.map_or("none".to_owned(), |value| format!("{value:?}"));
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the body must be Content-Type: application/json; got {got}"),
    ))
}

/// Refuses a request whose body is content-encoded (`Content-Encoding` other than `identity`):
/// the server decodes none, and reading a compressed body as JSON would only give a puzzling
/// `bad_json`.
fn require_identity(headers: &HeaderMap) -> Result<(), ApiError> {
    let encodings = headers.get_all(header::CONTENT_ENCODING);
    let Some(encoding) = encodings.iter().find(|value| {
        let value = value.to_str().unwrap_or("?");
        // Empty list elements are allowed (RFC 9110, 5.6.1) and name no coding.
        value
            .split(',')
            .map(str::trim)
            .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"))
    }) else {
        return Ok(());
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the body must not be content-encoded; got Content-Encoding: {encoding:?}"),
    ))
}

/// Reads the whole body within the body timeout and the size limit.
async fn read_body(body: Body, config: &Config) -> Result<Bytes, ApiError> {
    let limit = config.body_limit();
    let too_large = || {
        let message = format!("the body is over the limit of {limit} bytes");
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    };
    // A declared length over the limit is refused before any of the body is read, so that a
    // client cannot make the server wait for a body it would refuse anyway.
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let read = tokio::time::timeout(config.body_timeout, Limited::new(body, limit).collect());
    match read.await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "reading a request body failed");
            let message = "the body could not be read";
            Err(ApiError::new(StatusCode::BAD_REQUEST, "bad_body", message))
        }
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the body did not arrive within {} ms",
                config.body_timeout.as_millis()
            ),
        )),
    }
}

/// Checks a request body against the model; returns its data.
fn validate(body: &[u8], input_len: usize) -> Result<Vec<f32>, ApiError> {
    let tensor: Tensor<f64> = serde_json::from_slice(body)
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
    let finite = |(i, x): (usize, f64)| {
        let narrowed = x as f32;
        if narrowed.is_finite() {
            return Ok(narrowed);
        }
        let message = format!(
            "data[{i}] = {x:e} is beyond f32's finite range (±{:e})",
            f32::MAX
        );
        Err(ApiError::new(unprocessable, "input_not_finite", message))
    };
    tensor.data.into_iter().enumerate().map(finite).collect()
}

/// Refuses an output that overflowed f32, which JSON could only carry as `null`.
fn finite_output(output: Vec<f32>) -> Result<Vec<f32>, ApiError> {
    match output.iter().position(|y| !y.is_finite()) {
        None => Ok(output),
        Some(i) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "output_not_finite",
            format!("output[{i}] overflows f32: the input is too large for the model"),
        )),
    }
}

/// `POST /v1/infer`: answers and counts the answer.
async fn infer(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Tensor<f32>>, ApiError> {
    let mut unanswered = Unanswered(Some(&state.cancelled));
    let answer = answer_infer(&state, &headers, body).await;
    unanswered.0 = None;
    state.count(&answer);
    answer.map(Json)
}

/// Counts a request under `requests.cancelled` if it is dropped unanswered: hyper drops the
/// handler of a connection that closed (a client gone, or one closed at the drain timeout).
struct Unanswered<'a>(Option<&'a AtomicU64>);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(cancelled) = self.0 {
            cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The answer to `POST /v1/infer`: the checks, cheapest first, then the device.
async fn answer_infer(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Tensor<f32>, ApiError> {
    require_json(headers)?;
    require_identity(headers)?;
    let body = read_body(body, &state.config).await?;
    let _permit = state.admission.clone().try_acquire_owned().map_err(|_| {
        let message = format!(
            "{} requests are in flight, the limit; retry later",
            state.config.max_in_flight
        );
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
    })?;
    let data = validate(&body, state.config.input_len)?;
    let timeout = state.config.device_timeout;
    // Dropping the model's future on timeout is what frees the slot: npu-rs keeps the memory
    // the device may still touch until it is done, and hands the blocks back to the pools then.
    let output = tokio::time::timeout(timeout, state.model.run(&data))
        .await
        .map_err(|_| {
            tracing::error!(?timeout, "the device did not finish a request in time");
            let message = format!("the device did not finish within {timeout:?}");
            ApiError::new(StatusCode::GATEWAY_TIMEOUT, "device_timeout", message)
        })?
        .map_err(|err| match err {
            RunError::NoRoom(pool) => {
                let message = format!(
                    "no {pool} memory is free for another request (requests given up on still \
                     have the device using theirs); retry later"
                );
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
            }
            RunError::Device(err) => {
                // The client gets no ACL function names or codes: the detail is for the
                // operator.
                tracing::error!(error = %err, "the model failed on the device");
                let message = "the device failed to run the model";
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "device_error", message)
            }
        })?;
    let data = finite_output(output)?;
    Ok(Tensor {
        dtype: "f32".into(),
        shape: vec![data.len()],
        data,
    })
}

/// `GET /v1/model`: what the model takes and computes.
async fn model(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let config = &state.config;
    Json(json!({
        "dtype": "f32",
        "shape": [config.input_len],
        "computes": format!("{} * x + bias", config.alpha),
        "max_body_bytes": config.body_limit(),
    }))
}

/// `GET /stats`: the counters (see [`AppState::stats`]).
async fn stats(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(state.stats())
}

/// The answer for a path no route has.
async fn not_found(uri: Uri) -> ApiError {
    let message = format!(
        "no route for {}; the routes are POST /v1/infer, GET /v1/model and GET /stats",
        uri.path()
    );
    ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
}

/// The answer for a route's path with a method it does not take; axum adds `Allow`.
async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    let message = format!(
        "{method} is not allowed on {}; the Allow header lists the methods that are",
        uri.path()
    );
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        message,
    )
}

/// The routes; every answer that is not a success is an [`ApiError`].
fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/infer", post(infer))
        .route("/v1/model", get(model))
        .route("/stats", get(stats))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `app` over HTTP/1.1 on `listener` until `stop`, then lets the connections finish the
/// requests they are in (within `drain_timeout`, after which the ones still open are closed)
/// and returns. hyper's connection builder is used directly (not `axum::serve`) for its header
/// read timeout, which needs a timer `axum::serve` does not give; hyper has no write timeout,
/// so each connection's socket gets one of its own.
async fn serve_http(
    mut listener: TcpListener,
    app: Router,
    state: Arc<AppState>,
    stop: oneshot::Receiver<()>,
) {
    let config = &state.config;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        // hyper panics below 8192 bytes, its smallest buffer.
        .max_buf_size(config.max_buffer.max(8192));
    let connections = GracefulShutdown::new();
    // The connections' tasks, so that the ones a graceful shutdown cannot finish (a client that
    // stopped reading its answer) can be closed.
    let mut tasks = tokio::task::JoinSet::new();
    let refusals = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut stop = pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            _ = &mut stop => break,
        };
        while tasks.try_join_next().is_some() {}
        if state.connections.borrow().open >= config.max_connections {
            // Counted first: the client may have its answer as soon as `refuse` writes it.
            state.connections.send_modify(|c| c.refused += 1);
            if let Ok(refusing) = refusals.clone().try_acquire_owned() {
                let max_connections = config.max_connections;
                tasks.spawn(async move {
                    refuse(tcp, max_connections).await;
                    drop(refusing);
                });
            }
            continue;
        }
        let mut tcp = TimeoutStream::new(tcp);
        tcp.set_write_timeout(Some(config.write_timeout));
        let service = TowerToHyperService::new(app.clone());
        let connection =
            connections.watch(http.serve_connection(TokioIo::new(Box::pin(tcp)), service));
        let open = OpenConnection::new(&state.connections);
        tasks.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, error = %err, "connection closed on an error");
                if timed_out(&err) {
                    open.0.send_modify(|c| c.write_timeouts += 1);
                }
            }
            drop(open);
        });
    }
    drop(listener);
    if tokio::time::timeout(config.drain_timeout, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = tasks.len(),
            "closing the connections still open after the drain timeout"
        );
    }
    // Aborting a connection drops its request's future: npu-rs keeps whatever the device may
    // still touch until it is done.
    tasks.shutdown().await;
}

/// Refusals answered at once at most: past this many, a connection over the limit is closed
/// unanswered, so that a flood of them costs no more than this many small tasks.
const MAX_REFUSING: usize = 64;

/// How long a refusal waits for the request's head, and then for the client to take the
/// answer and close.
const REFUSAL_PATIENCE: Duration = Duration::from_secs(1);

/// Answers a connection beyond `max_connections` with 503 `too_many_connections` and closes it.
/// The request's head is read first (within [`REFUSAL_PATIENCE`]), because HTTP clients take an
/// answer that comes before their request for a dead connection; then the answer is written,
/// the sending side shut down, and what the client still sends drained briefly, so that closing
/// does not reset the connection under the answer.
async fn refuse(mut tcp: tokio::net::TcpStream, max_connections: usize) {
    let message =
        format!("the server has {max_connections} connections open, its limit; retry later");
    let refusal = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        message,
    );
    let body = refusal.body().to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut chunk = [0; 4096];
    let mut head = Vec::new();
    let _ = tokio::time::timeout(REFUSAL_PATIENCE, async {
        while head.len() < 64 << 10 {
            let Ok(n @ 1..) = tcp.read(&mut chunk).await else {
                break;
            };
            // Only the bytes read now can complete the blank line that ends the head.
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(&chunk[..n]);
            if head[from..].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let _ = tokio::time::timeout(REFUSAL_PATIENCE, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        while tcp.read(&mut chunk).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}

/// Counts a connection as open for as long as it lives, also when its task is aborted.
struct OpenConnection(watch::Sender<Connections>);

impl OpenConnection {
    fn new(connections: &watch::Sender<Connections>) -> OpenConnection {
        connections.send_modify(|c| c.open += 1);
        OpenConnection(connections.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.send_modify(|c| c.open -= 1);
    }
}

/// Whether a connection ended because its socket's write timeout ran out (an I/O error of
/// kind `TimedOut`; hyper's header timeout is an error of hyper's own). The kernel's own
/// `ETIMEDOUT`, a peer gone without a word while an answer was being sent, counts too: the
/// answer was not delivered either way.
fn timed_out(err: &hyper::Error) -> bool {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// A running server.
struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Sets up the model and serves on `addr` until [`Server::stop`].
    async fn start(config: Config, addr: SocketAddr) -> Result<Server, Box<dyn std::error::Error>> {
        let state = Arc::new(AppState::new(config).await?);
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let app = router(state.clone());
        let task = tokio::spawn(serve_http(listener, app, state.clone(), stop));
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
        self.task.await.map_err(std::io::Error::other)
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
                        connection.send(Method::POST, "/v1/infer", body.clone()),
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
    let tensor: Tensor<f32> =
        serde_json::from_slice(&body).map_err(|err| format!("answer: {err}"))?;
    if tensor.data != expected {
        return Err("the answer differs from the model's output".to_owned());
    }
    Ok(())
}

/// Serves until Ctrl-C.
async fn serve(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start(Config::default(), addr).await?;
    println!(
        "backend: {}",
        server.state.model.device_pool.context().runtime().backend()
    );
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
        max_connections: connections.max(Config::default().max_connections),
        ..Config::default()
    };
    let shape = (config.input_len, config.alpha);
    let server = Server::start(config, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    println!(
        "backend: {}",
        server.state.model.device_pool.context().runtime().backend()
    );
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
    // Warnings and device errors by default; `RUST_LOG=debug` adds the connections' errors.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The longest a test waits for the server to answer or close a connection: a bound on a
    /// hang, never a timing assertion.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// The one request every test's model (input length 4) answers.
    const GOOD: &str = r#"{"dtype":"f32","shape":[4],"data":[1,2,3,4]}"#;

    /// The head of a JSON `POST /v1/infer` up to its length header, which the tests choose.
    const JSON_POST: &str =
        "POST /v1/infer HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    /// A model of input length 4, as the tests' requests expect.
    fn small() -> Config {
        Config {
            input_len: 4,
            ..Config::default()
        }
    }

    /// A whole HTTP/1.1 request asking the server to close the connection after answering.
    fn request(method: &str, path: &str, headers: &str, body: &str) -> Vec<u8> {
        let length = body.len();
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\
             Content-Length: {length}\r\n\r\n{body}"
        )
        .into_bytes()
    }

    /// An answer read off a raw connection.
    #[derive(Debug)]
    struct Reply {
        status: StatusCode,
        /// The header lines, names in lower case.
        headers: Vec<(String, String)>,
        body: serde_json::Value,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            let mut found = self.headers.iter().filter(|(n, _)| n == name);
            found.next().map(|(_, value)| value.as_str())
        }

        /// Checks an answer that leaves part of the body unread: the error, then the close.
        fn assert_refused_and_closed(&self, status: StatusCode, code: &str) {
            let got = (self.status, self.body["error"]["code"].as_str());
            assert_eq!(got, (status, Some(code)), "{self:?}");
            assert_eq!(self.header("connection"), Some("close"));
        }
    }

    /// Writes `bytes` as they are on a new connection, then reads until the server closes it
    /// (within [`PATIENCE`]): `None` if it closed without answering.
    async fn raw(addr: SocketAddr, bytes: Vec<u8>) -> Option<Reply> {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&bytes).await.unwrap();
        let mut received = Vec::new();
        let read = tokio::time::timeout(PATIENCE, async {
            let mut chunk = [0; 4096];
            // A reset counts as a close: the server may close with bytes of ours unread.
            while let Ok(n @ 1..) = tcp.read(&mut chunk).await {
                received.extend_from_slice(&chunk[..n]);
            }
        });
        assert!(
            read.await.is_ok(),
            "the server neither answered nor closed within {PATIENCE:?}"
        );
        parse_reply(received)
    }

    /// The answer in what a raw connection received: `None` if nothing.
    fn parse_reply(received: Vec<u8>) -> Option<Reply> {
        if received.is_empty() {
            return None;
        }
        let text = String::from_utf8(received).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let headers = lines
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        Some(Reply {
            status: StatusCode::from_bytes(status.as_bytes()).unwrap(),
            headers,
            body: serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        })
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
        let server = Server::start(small(), loopback()).await.unwrap();
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"], json!([2.0, 5.0, 8.0, 11.0]));

        let (bad_request, unprocessable) =
            (StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY);
        let data = |data: &str| format!(r#"{{"dtype":"f32","shape":[4],"data":[{data}]}}"#);
        let cases = [
            (
                r#"{"dtype":"f32","shape":[3],"data":[1,2,3]}"#.to_owned(),
                unprocessable,
                "wrong_length",
            ),
            (data("1,2,3"), unprocessable, "wrong_length"),
            (
                GOOD.replace("f32", "f16"),
                unprocessable,
                "unsupported_dtype",
            ),
            (data(r#"1,2,"3",4"#), bad_request, "bad_json"),
            (
                r#"{"dtype":"f32","data":[1,2,3,4]}"#.to_owned(),
                bad_request,
                "bad_json",
            ),
            ("not json".to_owned(), bad_request, "bad_json"),
            // Finite in f64, infinite in f32: refused, not answered with `null`.
            (data("1,1e300,3,4"), unprocessable, "input_not_finite"),
            // Just past f32::MAX (3.4028235e38), negative.
            (data("1,2,-3.5e38,4"), unprocessable, "input_not_finite"),
            // Beyond f64 too: serde_json refuses the number itself.
            (data("1,2,3,1e400"), bad_request, "bad_json"),
            // A finite f32 input whose output (2 * 3e38) overflows.
            (data("3e38,2,3,4"), unprocessable, "output_not_finite"),
            // JSON has no NaN nor infinity.
            (data("1,NaN,3,Infinity"), bad_request, "bad_json"),
            // Nested a thousand deep, within the size limit.
            (data(&"[".repeat(1000)), bad_request, "bad_json"),
        ];
        for (request, status, code) in cases {
            let (got_status, body) = post(&server, request.clone()).await;
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
        let huge = data(&format!("{}1", "1,".repeat(1000)));
        let (status, body) = post(&server, huge).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("too_large"))
        );

        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 1);
        assert_eq!(stats["requests"]["rejected"], 13);
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn routing_and_content_type_errors_are_json_too() {
        let server = Server::start(small(), loopback()).await.unwrap();
        let json = "Content-Type: application/json\r\n";
        let form = "Content-Type: application/x-www-form-urlencoded\r\n";
        let cases = [
            (request("GET", "/v2/infer", "", ""), "not_found", None),
            (
                request("DELETE", "/v1/infer", "", ""),
                "method_not_allowed",
                Some("POST"),
            ),
            (
                request("POST", "/v1/model", json, GOOD),
                "method_not_allowed",
                Some("GET,HEAD"),
            ),
            (
                request("POST", "/v1/infer", "Content-Type: text/plain\r\n", GOOD),
                "unsupported_media_type",
                None,
            ),
            (
                request("POST", "/v1/infer", form, "dtype=f32"),
                "unsupported_media_type",
                None,
            ),
            (
                request("POST", "/v1/infer", "", GOOD),
                "unsupported_media_type",
                None,
            ),
            // Declared compressed: refused, not read as if it were plain JSON.
            (
                request(
                    "POST",
                    "/v1/infer",
                    &format!("{json}Content-Encoding: gzip\r\n"),
                    GOOD,
                ),
                "unsupported_media_type",
                None,
            ),
        ];
        for (bytes, code, allow) in cases {
            let reply = raw(server.addr, bytes).await.expect("an answer");
            assert_eq!(
                reply.body["error"]["code"].as_str(),
                Some(code),
                "{reply:?}"
            );
            assert!(reply.status.is_client_error(), "{reply:?}");
            assert_eq!(reply.header("content-type"), Some("application/json"));
            assert_eq!(reply.header("allow"), allow, "{reply:?}");
        }
        for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
            let headers = format!("Content-Type: {content_type}\r\n");
            let reply = raw(server.addr, request("POST", "/v1/infer", &headers, GOOD)).await;
            assert_eq!(reply.unwrap().status, StatusCode::OK, "{content_type}");
        }
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 2);
        assert_eq!(stats["requests"]["rejected"], 4, "the four 415s");
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_over_the_limit_gets_413_without_waiting_for_it() {
        // The default 10 s body timeout: a 408 here would mean the server waited for the body.
        let server = Server::start(small(), loopback()).await.unwrap();
        // Declares a terabyte, sends less than the limit and waits: refused on the declared
        // length alone.
        let declared = format!(
            "{JSON_POST}Content-Length: 1000000000000\r\n\r\n{}",
            "1".repeat(500)
        );
        // Declares nothing and sends one chunk past the 1152-byte limit, unterminated.
        let chunked = format!(
            "{JSON_POST}Transfer-Encoding: chunked\r\n\r\n7d0\r\n{}\r\n",
            "1".repeat(2000)
        );
        for bytes in [declared, chunked] {
            let reply = raw(server.addr, bytes.into_bytes())
                .await
                .expect("an answer");
            reply.assert_refused_and_closed(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
        }
        assert_eq!(server.state.stats()["requests"]["rejected"], 2);
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_bodies_get_408_while_whole_requests_are_served() {
        let mut config = small();
        // Short for the stalled clients, yet ample for the whole request, whose body arrives
        // with its head.
        config.body_timeout = Duration::from_secs(1);
        let server = Server::start(config, loopback()).await.unwrap();
        let declared = GOOD.len();
        let stall = format!(
            "{JSON_POST}Content-Length: {declared}\r\n\r\n{}",
            &GOOD[..10]
        );
        let stalled: Vec<_> = (0..4)
            .map(|_| tokio::spawn(raw(server.addr, stall.clone().into_bytes())))
            .collect();
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for client in stalled {
            let reply = client.await.unwrap().expect("an answer");
            reply.assert_refused_and_closed(StatusCode::REQUEST_TIMEOUT, "request_timeout");
        }
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 1);
        assert_eq!(stats["requests"]["rejected"], 4);
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_heads_and_idle_connections_are_closed_unanswered() {
        let mut config = small();
        config.header_timeout = Duration::from_millis(100);
        let server = Server::start(config, loopback()).await.unwrap();
        let partial_head = b"POST /v1/infer HTTP/1.1\r\nHost: localhost\r\nContent-Ty".to_vec();
        let clients: Vec<_> = (0..6)
            .map(|i| {
                let bytes = if i % 2 == 0 {
                    partial_head.clone()
                } else {
                    Vec::new()
                };
                tokio::spawn(raw(server.addr, bytes))
            })
            .collect();
        for client in clients {
            let reply = client.await.unwrap();
            assert!(reply.is_none(), "closed without an answer: {reply:?}");
        }
        let stats = server.state.stats();
        assert_eq!(
            stats["requests"]["rejected"], 0,
            "no request reached the handler"
        );
        server.stop().await.unwrap();
    }

    /// Sends `prefix`, then drips `drop` every 20 ms (the attack's pace, not a synchronisation)
    /// for as long as the server takes it, and returns what the server answered before closing
    /// (within [`PATIENCE`]).
    async fn drip(addr: SocketAddr, prefix: String, drop: &'static [u8]) -> Option<Reply> {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut reader, mut writer) = tcp.into_split();
        writer.write_all(prefix.as_bytes()).await.unwrap();
        let dripping = tokio::spawn(async move {
            while writer.write_all(drop).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let mut received = Vec::new();
        let read = tokio::time::timeout(PATIENCE, async {
            let mut chunk = [0; 4096];
            while let Ok(n @ 1..) = reader.read(&mut chunk).await {
                received.extend_from_slice(&chunk[..n]);
            }
        });
        let closed = read.await;
        dripping.abort();
        assert!(closed.is_ok(), "a dripping client kept its connection");
        parse_reply(received)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dripping_clients_are_bounded_by_the_whole_head_and_body_timeouts() {
        let config = Config {
            header_timeout: Duration::from_millis(200),
            body_timeout: Duration::from_millis(200),
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        // A head that never ends, a byte at a time: closed unanswered.
        let head = format!("{JSON_POST}X-Drip: ");
        let reply = drip(server.addr, head, b"a").await;
        assert!(reply.is_none(), "{reply:?}");
        // A declared body under the limit, and a chunked one of one-byte chunks, dripped: 408.
        let declared = format!("{JSON_POST}Content-Length: 1000\r\n\r\n");
        let chunked = format!("{JSON_POST}Transfer-Encoding: chunked\r\n\r\n");
        for (prefix, drop) in [(declared, &b"1"[..]), (chunked, b"1\r\n1\r\n")] {
            let reply = drip(server.addr, prefix, drop).await.expect("an answer");
            reply.assert_refused_and_closed(StatusCode::REQUEST_TIMEOUT, "request_timeout");
        }
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["rejected"], 2, "{stats}");
        // hyper closes the socket before the connection's task counts it closed.
        connections_until(&server, |c| c.open == 0).await;
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http2_is_closed_unanswered_and_upgrades_are_answered_as_http1() {
        let server = Server::start(small(), loopback()).await.unwrap();
        // HTTP/2 with prior knowledge: its preface, then a SETTINGS frame.
        let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let reply = raw(server.addr, preface).await;
        assert!(reply.is_none(), "{reply:?}");
        let upgrades = [
            "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        ];
        for headers in upgrades {
            // `request` asks for Connection: close too; hyper reads both.
            let reply = raw(server.addr, request("GET", "/v1/model", headers, ""))
                .await
                .expect("an answer");
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            assert_eq!(reply.body["shape"], json!([4]), "{reply:?}");
            assert_eq!(reply.header("upgrade"), None, "{reply:?}");
        }
        server.stop().await.unwrap();
    }

    /// The largest send buffer the kernel grows a TCP socket's to (`tcp_wmem`'s maximum),
    /// 4 MiB if it cannot be read.
    fn largest_send_buffer() -> usize {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
            .ok()
            .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
            .unwrap_or(4 << 20)
    }

    /// A client that sends a request whose answer can never be written whole to it (longer
    /// than the server's largest send buffer plus the client's small, fixed receive buffer;
    /// each output element is at least 9 characters and a comma, "0.6666667,"), reads the
    /// answer's first byte (so the server is writing it, and cannot finish), and stops
    /// reading.
    async fn never_reading_client(server: &Server, input_len: usize) -> tokio::net::TcpStream {
        let data = vec!["0.33333334"; input_len].join(",");
        let body = format!(r#"{{"dtype":"f32","shape":[{input_len}],"data":[{data}]}}"#);
        let head = format!("{JSON_POST}Content-Length: {}\r\n\r\n", body.len());
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut tcp = socket.connect(server.addr).await.unwrap();
        tokio::time::timeout(PATIENCE, async {
            tcp.write_all(head.as_bytes()).await.unwrap();
            tcp.write_all(body.as_bytes()).await.unwrap();
            tcp.read_exact(&mut [0; 1]).await.unwrap();
        })
        .await
        .expect("the server did not start answering");
        tcp
    }

    /// Reads what the server sent (after the first byte) until it closes the connection (the
    /// end, or a reset), and returns the bytes received, the first one included.
    async fn read_to_close(tcp: &mut tokio::net::TcpStream) -> usize {
        let mut received = 1;
        let read = tokio::time::timeout(PATIENCE, async {
            let mut chunk = vec![0; 1 << 16];
            while let Ok(n @ 1..) = tcp.read(&mut chunk).await {
                received += n;
            }
        });
        read.await.expect("the connection stayed open");
        received
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_never_reads_its_answer_does_not_hold_the_shutdown_for_ever() {
        let input_len = (2 * largest_send_buffer() + (1 << 20)) / 10;
        let config = Config {
            input_len,
            max_in_flight: 1,
            streams: 1,
            drain_timeout: Duration::from_millis(200),
            ..Config::default()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        let mut tcp = never_reading_client(&server, input_len).await;
        let state = server.state.clone();
        tokio::time::timeout(PATIENCE, server.stop())
            .await
            .expect("a client that stops reading held the shutdown")
            .unwrap();
        // The connection was closed: the client reads the part of the answer that was sent,
        // never the whole answer.
        let received = read_to_close(&mut tcp).await;
        assert!(
            received < 9 * input_len,
            "{received} bytes: the whole answer"
        );
        // The request itself was served, and gave back what it held.
        let stats = state.stats();
        assert_eq!(stats["requests"]["served"], 1);
        assert_eq!(stats["in_flight"], 0);
        assert_eq!(stats["connections"]["open"], 0);
        assert_eq!(stats["pool"]["allocated_bytes"], 0, "{stats}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_never_reads_its_answer_loses_its_connection_after_the_write_timeout() {
        let input_len = (2 * largest_send_buffer() + (1 << 20)) / 10;
        let config = Config {
            input_len,
            max_in_flight: 1,
            streams: 1,
            write_timeout: Duration::from_millis(200),
            ..Config::default()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        let mut tcp = never_reading_client(&server, input_len).await;
        // No shutdown: the write timeout alone closes the connection.
        let mut connections = server.state.connections.subscribe();
        tokio::time::timeout(
            PATIENCE,
            connections.wait_for(|c| c.open == 0 && c.write_timeouts == 1),
        )
        .await
        .expect("a client that stops reading kept its connection")
        .unwrap();
        let received = read_to_close(&mut tcp).await;
        assert!(
            received < 9 * input_len,
            "{received} bytes: the whole answer"
        );
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["served"], 1);
        assert_eq!(stats["in_flight"], 0);
        assert_eq!(stats["connections"]["write_timeouts"], 1, "{stats}");
        assert_eq!(stats["pool"]["allocated_bytes"], 0, "{stats}");
        // The server goes on serving.
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body["error"]["code"], "wrong_length");
        server.stop().await.unwrap();
    }

    /// Waits (within [`PATIENCE`]) until the server's connections satisfy `done`.
    async fn connections_until(server: &Server, done: impl FnMut(&Connections) -> bool) {
        let mut connections = server.state.connections.subscribe();
        tokio::time::timeout(PATIENCE, connections.wait_for(done))
            .await
            .expect("the connections never got there")
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_beyond_the_limit_get_503_and_the_server_recovers() {
        let config = Config {
            max_connections: 2,
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        // Two idle connections, which the default 10 s header timeout leaves open: the limit.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(tokio::net::TcpStream::connect(server.addr).await.unwrap());
        }
        connections_until(&server, |c| c.open == 2).await;
        // Each one more has its request answered 503 and is closed: a raw request, and one of an
        // HTTP client, which takes an answer that comes before its request for a dead
        // connection.
        for _ in 0..3 {
            let request = request(
                "POST",
                "/v1/infer",
                "Content-Type: application/json\r\n",
                GOOD,
            );
            let reply = raw(server.addr, request).await.expect("an answer");
            reply
                .assert_refused_and_closed(StatusCode::SERVICE_UNAVAILABLE, "too_many_connections");
            assert_eq!(reply.header("retry-after"), Some("1"));
        }
        for _ in 0..3 {
            let mut client = client::Connection::open(server.addr).await.unwrap();
            let (status, body) = client
                .send(Method::POST, "/v1/infer", GOOD.into())
                .await
                .expect("an answer, not a dead connection");
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"]["code"], "too_many_connections", "{body}");
        }
        let stats = server.state.stats();
        assert_eq!(stats["connections"]["open"], 2, "{stats}");
        assert_eq!(stats["connections"]["refused"], 6, "{stats}");
        // One closes: a new connection is served.
        drop(idle.pop());
        connections_until(&server, |c| c.open == 1).await;
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        drop(idle);
        connections_until(&server, |c| c.open == 0).await;
        server.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_longer_than_the_connection_buffer_gets_431() {
        let server = Server::start(small(), loopback()).await.unwrap();
        // Exactly the buffer's worth of a head that never ends, so that the server reads all of
        // it before refusing (nothing of ours unread when it closes).
        let mut head = format!("{JSON_POST}X-Padding: ").into_bytes();
        head.resize(server.state.config.max_buffer, b'a');
        let reply = raw(server.addr, head).await.expect("an answer");
        assert_eq!(
            reply.status,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "{reply:?}"
        );
        // hyper closes the socket before the connection's task counts it closed.
        connections_until(&server, |c| c.open == 0).await;
        server.stop().await.unwrap();
    }

    // Injects its fault through the simulator's controls.
    #[cfg(feature = "sim")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_device_error_reaches_the_client_without_internals() {
        // One stream, so that the failure injected into it is the request's first task.
        let config = Config {
            streams: 1,
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        let stream = server.state.model.streams.streams()[0].as_raw();
        npu::sim::control::fail_task(stream, 1, 507015).unwrap();
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some("device_error"))
        );
        // No ACL function name, no code: only this sentence.
        assert_eq!(
            body["error"]["message"],
            "the device failed to run the model"
        );
        assert_eq!(server.state.stats()["requests"]["failed"], 1);
        server.stop().await.unwrap();
    }

    /// Device 1, which the tests that hold a device take in turn (a hold is the whole device's,
    /// and one test's release would end another's), so that the other tests' device 0 never
    /// stalls.
    #[cfg(feature = "sim")]
    static DEVICE_ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Yields until `done` holds (within [`PATIENCE`]), for the counters nothing announces.
    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let waited = tokio::time::timeout(PATIENCE, async {
            while !done() {
                tokio::task::yield_now().await;
            }
        });
        waited
            .await
            .unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}"));
    }

    /// Yields until both pools hold no block and have no waiter: the blocks of dropped
    /// requests come back once the device has run what those requests queued.
    async fn until_pools_idle(state: &AppState) {
        until("both pools idle", || {
            let stats = state.stats();
            let idle = |pool: &str| {
                stats[pool]["allocated_bytes"] == 0 && stats[pool]["awaiting_blocks"] == 0
            };
            idle("pool") && idle("device_pool")
        })
        .await;
    }

    // Holds the device through the simulator's controls.
    #[cfg(feature = "sim")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_gone_while_their_requests_are_on_the_device_get_everything_back() {
        let _device = DEVICE_ONE.lock().await;
        let config = Config {
            device: 1,
            max_in_flight: 3,
            streams: 1,
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        npu::sim::control::hold(1).unwrap();
        let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
        let mut clients = Vec::new();
        for admitted in 1..=3 {
            let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
            tcp.write_all(whole.as_bytes()).await.unwrap();
            until("admitted", || server.state.in_flight() == admitted).await;
            clients.push(tcp);
        }
        // Each goes its own way while its request is on the held device: a close, a reset, and
        // a half-close, which hyper takes for a client gone too (its `half_close` is off).
        let [closed, reset, mut half_closed] = clients.try_into().unwrap();
        drop(closed);
        reset.set_zero_linger().unwrap();
        drop(reset);
        half_closed.shutdown().await.unwrap();
        connections_until(&server, |c| c.open == 0).await;
        assert_eq!(server.state.in_flight(), 0, "the admission slots are back");
        let mut unanswered = Vec::new();
        let _ = half_closed.read_to_end(&mut unanswered).await;
        assert!(unanswered.is_empty(), "{unanswered:?}");
        // The device's blocks come back once it has run what the dropped requests queued.
        npu::sim::control::release(1).unwrap();
        until_pools_idle(&server.state).await;
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["cancelled"], 3, "{stats}");
        assert_eq!(stats["requests"]["served"], 1, "{stats}");
        server.stop().await.unwrap();
    }

    // Holds the device through the simulator's controls.
    #[cfg(feature = "sim")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_device_answers_504_and_frees_the_slots_and_blocks() {
        let _device = DEVICE_ONE.lock().await;
        let config = Config {
            device: 1,
            max_in_flight: 1,
            streams: 1,
            device_timeout: Duration::from_millis(100),
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        npu::sim::control::hold(1).unwrap();
        // Each request in turn takes the only slot, times out on the held device and frees it;
        // the memory it gave up stays with the device. The pinned pool has a block for each
        // admitted request and one more, so the third request finds none free and is refused
        // at once rather than left waiting for memory the held device keeps.
        for _ in 0..2 {
            let (status, body) = post(&server, GOOD).await;
            assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
            assert_eq!(body["error"]["code"], "device_timeout", "{body}");
            assert_eq!(server.state.in_flight(), 0, "the admission slot is back");
        }
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "overloaded", "{body}");
        assert_eq!(server.state.stats()["pool"]["waiters"], 0);
        npu::sim::control::release(1).unwrap();
        until_pools_idle(&server.state).await;
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let stats = server.state.stats();
        assert_eq!(stats["requests"]["failed"], 2, "{stats}");
        assert_eq!(stats["requests"]["overloaded"], 1, "{stats}");
        assert_eq!(stats["requests"]["served"], 1, "{stats}");
        server.stop().await.unwrap();
    }

    /// Connects until the server refuses: its listener is gone, and its drain has begun.
    #[cfg(feature = "sim")]
    async fn until_refused(addr: SocketAddr) {
        let refused = tokio::time::timeout(PATIENCE, async {
            while tokio::net::TcpStream::connect(addr).await.is_ok() {
                tokio::task::yield_now().await;
            }
        });
        refused.await.expect("the listener stayed open");
    }

    // Holds the device through the simulator's controls.
    #[cfg(feature = "sim")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_during_the_drain_is_answered_once_and_the_connection_closed() {
        let _device = DEVICE_ONE.lock().await;
        let config = Config {
            device: 1,
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        let addr = server.addr;
        npu::sim::control::hold(1).unwrap();
        // A keep-alive request, on the held device when the shutdown begins.
        let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(whole.as_bytes()).await.unwrap();
        until("admitted", || server.state.in_flight() == 1).await;
        let state = server.state.clone();
        let stopped = tokio::spawn(server.stop());
        until_refused(addr).await;
        // A second request on the same connection during the drain: not served.
        tcp.write_all(whole.as_bytes()).await.unwrap();
        npu::sim::control::release(1).unwrap();
        let mut received = Vec::new();
        let read = tokio::time::timeout(PATIENCE, async {
            let mut chunk = [0; 4096];
            while let Ok(n @ 1..) = tcp.read(&mut chunk).await {
                received.extend_from_slice(&chunk[..n]);
            }
        });
        read.await
            .expect("the connection stayed open after its answer");
        tokio::time::timeout(PATIENCE, stopped)
            .await
            .expect("the shutdown did not end")
            .unwrap()
            .unwrap();
        let text = String::from_utf8(received).unwrap();
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "one answer: {text}");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        let stats = state.stats();
        assert_eq!(stats["requests"]["served"], 1, "{stats}");
        assert_eq!(stats["requests"]["cancelled"], 0, "{stats}");
        assert_eq!(stats["connections"]["open"], 0, "{stats}");
        // After the shutdown, nothing listens.
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_racing_the_shutdown_are_answered_whole_or_refused() {
        let server = Server::start(small(), loopback()).await.unwrap();
        let addr = server.addr;
        let (body, expected) = (Bytes::from(GOOD), Arc::new(vec![2.0, 5.0, 8.0, 11.0]));
        // Clients on keep-alive connections sending requests until the server is gone.
        let clients: Vec<_> = (0..16)
            .map(|_| {
                let (body, expected) = (body.clone(), expected.clone());
                tokio::spawn(async move {
                    let mut answered = 0;
                    let Ok(mut connection) = client::Connection::open(addr).await else {
                        return answered;
                    };
                    loop {
                        let answer = connection.send(Method::POST, "/v1/infer", body.clone());
                        match tokio::time::timeout(PATIENCE, answer).await {
                            Ok(Ok(answer)) => {
                                check_answer(Ok(Ok(answer)), &expected).unwrap();
                                answered += 1;
                            }
                            // Closed before an answer: refused, or its request left unread.
                            Ok(Err(_)) => return answered,
                            Err(_) => panic!("no answer nor close within {PATIENCE:?}"),
                        }
                    }
                })
            })
            .collect();
        until("some requests served", || {
            server.state.served.load(Ordering::Relaxed) >= 16
        })
        .await;
        let state = server.state.clone();
        server.stop().await.unwrap();
        let mut answered = 0;
        for client in clients {
            answered += client.await.unwrap();
        }
        // Every request the server answered reached its client whole, and none was dropped.
        let stats = state.stats();
        assert_eq!(stats["requests"]["served"], answered, "{stats}");
        assert_eq!(stats["requests"]["cancelled"], 0, "{stats}");
        assert_eq!(stats["in_flight"], 0, "{stats}");
        assert_eq!(stats["connections"]["open"], 0, "{stats}");
        until_pools_idle(&state).await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    // Holds the device through the simulator's controls.
    #[cfg(feature = "sim")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn overload_gets_503_and_shutdown_finishes_the_requests_in_flight() {
        let _device = DEVICE_ONE.lock().await;
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
