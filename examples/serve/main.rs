//! An HTTP model-serving backend on axum whose handlers await the NPU, plus a load generator.
//!
//! The "model" is `y = alpha * x + bias` over a fixed input length, with the bias resident in
//! device memory: each request takes a pinned block from the pool, copies it to the device,
//! runs `scale_f32` and `vector_add_f32`, copies the result back, all awaited on Tokio's
//! workers (none of them blocks), and answers with the result.
//!
//! ```sh
//! cargo run --example serve                      # serves on 127.0.0.1:8080 until Ctrl-C (or SIGTERM)
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
//! | 400 | `bad_body` | the body could not be read: malformed (a chunk size that is not hex), or cut short by its client closing or half-closing the connection (a reset instead: counted under `requests.cancelled`, below) |
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
//! | 500 | `internal_error` | a handler panicked, a bug (the detail goes to the log; the connection stays open) |
//! | 504 | `device_timeout` | the device did not finish the request's work within the device timeout (30 s by default) |
//!
//! # Hostile clients: timeouts and limits
//!
//! A client has the header timeout (10 s by default) to send a request's head, counted from
//! when the connection is ready for one (accepted, or the previous answer sent): a connection
//! that stalls in its head, or stays idle that long (it is the keep-alive idle timeout too),
//! is closed without an answer. It then has
//! the body timeout to send the whole body, or gets 408. Both bound the whole head or body, so a
//! client that drips it a byte at a time gains nothing. A body declared (`Content-Length`)
//! over the limit is refused with 413 before a byte of it is read; an undeclared (chunked) one
//! when it passes the limit. After any answer given before its request's body was read to
//! its end (a 408 or a 413, a 415, a 404 or 405 with a body, a 400 `bad_body`), the connection
//! is closed and the answer says so (`Connection: close`), since the rest of the body stands
//! between it and the next request. The one answer that is not JSON is the
//! one hyper writes itself for a request head it cannot parse (400, 414 or 431 with an empty
//! body), before any of this server's code runs. The server speaks HTTP/1.1 only: an HTTP/2
//! connection with prior knowledge is closed unanswered (hyper recognises its preface), and a
//! request asking for an `Upgrade` (h2c, WebSocket) is answered as a plain HTTP/1.1 one. Once
//! the socket stops taking a client's answer, the client has the write timeout (10 s by
//! default) to take all that the server holds for it (the answer, and those of requests
//! pipelined behind it), or its connection is closed; taking a few bytes now and then does not
//! put that off, so a client that stops reading, or reads a trickle, cannot hold the
//! connection and its unsent answers for ever. `GET /stats` counts those under
//! `connections.write_timeouts`. So every state a connection can be in is bounded: its head
//! and the idle time before it by the header timeout, its body by the body timeout, the
//! device's work by the device timeout, its answers by the write timeout, and a shutdown by
//! the drain timeout; a client that vanishes without a FIN or a reset is closed by the first
//! of these it meets.
//!
//! At most `max_connections` connections (512 by default) are open at once, so that neither
//! memory nor file descriptors run out under a flood of connections (idle, slow or stalled
//! ones). At start-up the process's open-file limit (`ulimit -n`) is fitted to it: the soft
//! limit is raised toward the hard one to cover the connections and a margin for the process's
//! other descriptors (the 64 refusals below among them), and where the hard limit cannot,
//! `max_connections` is lowered to what it leaves room for (with a warning; `GET /stats`
//! reports the limit in force as `max_connections`), so that accepting never fails with EMFILE
//! before the limit is reached. One more has its request's head read (within 1 s), is
//! answered 503 `too_many_connections` and closed (HTTP clients take an answer sent before
//! their request for a dead connection), and `GET /stats` counts it under
//! `connections.refused`. At most 64 such refusals run at once; past that a connection over the
//! limit is closed unanswered (still counted), so a flood of them costs 64 small tasks at most.
//! Each connection buffers at most `max_buffer` bytes (64 KiB by default) of what it reads or
//! writes, so a request head longer than that gets hyper's 431. A connection thus holds at most
//! that buffer, its request's body once (collected frame by frame into one buffer, and dropped
//! once parsed, before the request waits for the device) and its answer; pipelined requests
//! wait in the kernel's receive buffer, where TCP's flow control holds the client back.
//!
//! A client that closes or resets its connection while its request is on the device has it
//! dropped at once (npu-rs keeps what the device may still touch until it is done, then the
//! blocks go back to their pools), its admission slot freed, and `GET /stats` counts it under
//! `requests.cancelled`. A client that only half-closes (shuts down its sending side) to wait
//! for its answer gets it. Both send the same end of stream, which hyper takes either for a
//! client gone (its `half_close` off) or for one waiting (on, when it also stops reading, so
//! that even a reset is seen only when the answer is written). So `half_close` is on, and the
//! server tells the two apart itself while a request whose whole body it has awaits its answer:
//! a reset ends the connection at once, and an end of stream is answered with an interim
//! `HTTP/1.1 100 Continue`, which an HTTP/1.1 client must take and may ignore (RFC 9110, 15.2)
//! and a closed socket answers with a reset. What that leaves found only when the answer is
//! written, or by the device and write timeouts: an HTTP/1.0 client that closes (HTTP/1.0 has
//! no interim answers, and nothing else tells a closed socket from a half-closed one but
//! bytes sent to it), and one that vanishes without a FIN or a reset (unplugged, or its host
//! gone). An end of stream behind pipelined requests is seen at once, however many bytes
//! they are, without reading them (the socket's readiness says "read closed" behind them).
//! A client that resets
//! its connection mid-body is counted under `requests.cancelled` too. One that closes or
//! half-closes it mid-body sends an end of stream, which cannot tell the two apart before
//! something is written to it: it is answered 400 `bad_body` (which one that half-closed
//! reads) and counted under `requests.rejected`, by what it was answered.
//!
//! # Backpressure: 503, not a queue
//!
//! At most `max_in_flight` requests (64 by default) are admitted to the device at once; a
//! request beyond that is refused at once with 503 `overloaded`, when its body has arrived and
//! before it is parsed, so a client can retry elsewhere instead of waiting in a queue it
//! cannot see. Admission comes after the body so that slow senders cannot hold the device's
//! slots. Requests are spread over the streams of an `npu::stream::StreamPool`. The pinned
//! pool holds a block pinned at start-up for each admitted request (and one more), and the
//! device pool two prewarmed blocks per admitted request, so no request allocates memory
//! synchronously (a block comes back once the device is done with it). An admitted request
//! waits for the device at most the device timeout (30 s by default), then is answered 504
//! `device_timeout` and frees its slot, so a stalled device cannot hold every slot for good.
//! A request never waits for a block either: one given up on (timed out, or its client gone)
//! frees its slot at once but its blocks only once the device is done with them, and a
//! request that then finds no block free is refused at once with 503 `overloaded` too.
//!
//! `GET /stats` returns the request counters, the in-flight count, the open connections, the
//! pools' statistics and the reactor's counters. The request counters and the in-flight count
//! are read as one consistent snapshot without a lock on the request path (never more answers
//! than requests received, never a slot held by an answered request; `requests.rs` states the
//! invariants). Shutdown (Ctrl-C, or the SIGTERM a service
//! manager stops a process with) is graceful: the listener
//! closes, the requests in flight finish and are answered, then the process exits. The answers
//! get the drain timeout (10 s by default) to reach their clients: a connection still open then
//! (a client that stopped reading its answer, which would otherwise hold the shutdown for ever)
//! is closed, and a request it still has on the device is dropped, which npu-rs makes safe.

mod api_error;
mod body;
mod client;
mod config;
mod connections;
mod handlers;
#[path = "../support/kernels.rs"]
mod kernels;
mod load;
mod model;
mod open_files;
mod peer;
mod peer_io;
#[path = "../support/percentile.rs"]
mod percentile;
mod refusal;
mod requests;
mod server;
mod state;
mod stats;
mod tensor;
#[cfg(test)]
mod tests;
mod validation;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use config::Config;
use load::load;
use server::Server;

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM. A service manager (systemd, Kubernetes,
/// `docker stop`) stops a process with SIGTERM, whose default action would end it at once with
/// its requests in flight unanswered. Both handlers are installed before this returns, so a
/// signal that comes while the server starts is not lost (nor kills the process).
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Serves until Ctrl-C or SIGTERM.
async fn serve(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let stopping = shutdown_signal()?;
    let server = Server::start(Config::default(), addr).await?;
    println!(
        "backend: {}",
        server.state.model.device_pool.context().runtime().backend()
    );
    println!(
        "serving y = {} * x + bias (f32[{}]) on http://{}  (POST /v1/infer, GET /v1/model, GET /stats; Ctrl-C or SIGTERM stops)",
        server.state.config.alpha, server.state.config.input_len, server.addr
    );
    stopping.await;
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
