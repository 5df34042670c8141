//! The twenty-sixth session's attacks on the serving path: device faults and shutdowns with
//! requests in flight, pipelining, and what the server logs on its happy path.

#[cfg(feature = "sim")]
use std::sync::{Arc, Mutex};

#[cfg(feature = "sim")]
#[path = "../../../crates/npu/tests/common/every_callsite.rs"]
mod every_callsite;
#[cfg(feature = "sim")]
#[path = "../../../crates/npu-stream/tests/common/field_text.rs"]
mod field_text;
#[cfg(feature = "sim")]
use field_text::{FieldText, Fields};

use super::*;

/// The answer `GOOD` gets from every test's model (`2 * x + bias`).
const GOOD_ANSWER: [f32; 4] = [2.0, 5.0, 8.0, 11.0];

/// A request body for the 4-element model whose answer is unique to `k`.
fn body_for(k: usize) -> (String, serde_json::Value) {
    let x: Vec<f32> = (0..4).map(|i| (10 * k + i) as f32).collect();
    let y: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, v)| 2.0 * v + crate::model::bias(i))
        .collect();
    let body = serde_json::json!({"dtype": "f32", "shape": [4], "data": x}).to_string();
    (body, serde_json::json!(y))
}

/// Writes a whole `POST /v1/infer` of `body` on a new raw connection.
#[cfg(feature = "sim")]
async fn send_raw(addr: SocketAddr, body: &str) -> tokio::net::TcpStream {
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{body}", body.len());
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(whole.as_bytes()).await.unwrap();
    tcp
}

/// The five request outcomes add up to `received` and no slot is held: the stats at rest.
fn assert_at_rest(stats: &serde_json::Value) {
    let count = |field: &str| stats["requests"][field].as_u64().unwrap();
    let answered: u64 = ["served", "overloaded", "rejected", "failed", "cancelled"]
        .into_iter()
        .map(count)
        .sum();
    assert_eq!(answered, count("received"), "{stats}");
    assert_eq!(stats["in_flight"], 0, "{stats}");
}

// Promise: "no request allocates memory synchronously" (the pinned pool is sized for the
// admitted requests): requests in flight at once take blocks made before they arrived.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_at_once_allocate_no_pinned_memory() {
    let _device = DEVICE_ONE.lock().await;
    let config = on_device_one(3);
    let server = Server::start(config, loopback()).await.unwrap();
    let pool = |field: &str| server.state.stats()["pool"][field].as_u64().unwrap();
    let made_at_start = pool("misses");
    let taken_at_start = pool("hits") + made_at_start;
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let mut clients = Vec::new();
    for admitted in 1..=3 {
        clients.push(send_raw(server.addr, GOOD).await);
        until("admitted", || server.state.requests.in_flight() == admitted).await;
    }
    // Each admitted request holds its pinned block while the device is held.
    until("three pinned blocks taken", || {
        pool("hits") + pool("misses") >= taken_at_start + 3
    })
    .await;
    let made = pool("misses");
    drop(held);
    for mut tcp in clients {
        let reply = read_reply_keep_alive(&mut tcp).await;
        assert_eq!(reply.0, StatusCode::OK, "{}", reply.1);
    }
    assert_eq!(
        made, made_at_start,
        "a request made a pinned block (aclrtMallocHost) on its way to the device"
    );
    until_pools_idle(&server.state).await;
    server.stop().await.unwrap();
}

/// Reads one answer off a keep-alive connection (up to the end of its JSON body).
#[cfg(feature = "sim")]
async fn read_reply_keep_alive(tcp: &mut tokio::net::TcpStream) -> (StatusCode, String) {
    read_next_reply(tcp, &mut Vec::new()).await
}

/// Reads the next answer off a keep-alive connection, `buffered` holding what was read past
/// the previous one (interim answers skipped).
async fn read_next_reply(
    tcp: &mut tokio::net::TcpStream,
    buffered: &mut Vec<u8>,
) -> (StatusCode, String) {
    let read = tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0; 4096];
        loop {
            if let Some(end) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(buffered[..end].to_vec()).unwrap();
                if head.starts_with("HTTP/1.1 1") {
                    buffered.drain(..end + 4);
                    continue;
                }
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if buffered.len() >= end + 4 + length {
                    let body = buffered[end + 4..end + 4 + length].to_vec();
                    buffered.drain(..end + 4 + length);
                    return (head, String::from_utf8(body).unwrap());
                }
            }
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before a whole answer: {buffered:?}");
            buffered.extend_from_slice(&chunk[..n]);
        }
    });
    let (head, body) = read.await.expect("no answer");
    let status = head.split(' ').nth(1).unwrap();
    (StatusCode::from_bytes(status.as_bytes()).unwrap(), body)
}

// Promise: a device fault fails the request whose work it struck (500 `device_error`), and
// only that one: the others on the same stream are answered with their own data, and the
// stream, the slots and the blocks serve on. Each fault lands on a different stage (copy in,
// scale, add, copy out) of whichever request submitted that task.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_in_a_stream_shared_by_requests_fails_exactly_one_of_them() {
    let _device = DEVICE_ONE.lock().await;
    let config = on_device_one(4);
    let server = Server::start(config, loopback()).await.unwrap();
    let device = npu::Device::open(1).unwrap();
    let stream = server.state.model.streams.streams()[0].clone();
    // Four requests run four tasks each; one failing at its first leaves 13 in all.
    for (round, nth) in [1u64, 5, 9, 13].into_iter().enumerate() {
        let held = npu::sim::hold(&device).unwrap();
        // Armed before the round's first task: admission comes before a request submits
        // its copy in, so counting from a later point would be a race.
        npu::sim::fail_task(&stream, nth, npu::error::AclCode(507015)).unwrap();
        let mut clients = Vec::new();
        for k in 0..4 {
            let (body, expected) = body_for(round * 4 + k);
            clients.push((send_raw(server.addr, &body).await, expected));
            until("admitted", || server.state.requests.in_flight() == k + 1).await;
        }
        drop(held);
        let mut failed = 0;
        for (mut tcp, expected) in clients {
            let (status, body) = read_reply_keep_alive(&mut tcp).await;
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            match status {
                StatusCode::OK => assert_eq!(body["data"], expected, "task {nth}"),
                StatusCode::INTERNAL_SERVER_ERROR => {
                    assert_eq!(body["error"]["code"], "device_error", "{body}");
                    failed += 1;
                }
                other => panic!("task {nth}: {other} {body}"),
            }
        }
        assert_eq!(failed, 1, "the fault at task {nth} failed one request");
        until_pools_idle(&server.state).await;
    }
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(
        (status, body["data"].clone()),
        (StatusCode::OK, GOOD_ANSWER.into())
    );
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["failed"], 4, "{stats}");
    assert_eq!(stats["requests"]["served"], 13, "{stats}");
    assert_at_rest(&stats);
    server.stop().await.unwrap();
}

// Promise: a client that resets its connection is dropped at once, also during a graceful
// shutdown: the shutdown then ends without waiting for the held device or the drain timeout.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_during_the_drain_ends_the_shutdown_with_the_device_still_held() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        drain_timeout: Duration::from_secs(3600),
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let tcp = send_raw(server.addr, GOOD).await;
    until("admitted", || server.state.requests.in_flight() == 1).await;
    let (state, addr) = (server.state.clone(), server.addr);
    let stopped = tokio::spawn(server.stop());
    // The drain has begun once the listener refuses.
    tokio::time::timeout(PATIENCE, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener stayed open");
    tcp.set_zero_linger().unwrap();
    drop(tcp);
    tokio::time::timeout(PATIENCE, stopped)
        .await
        .expect("the shutdown waited for the held device")
        .unwrap()
        .unwrap();
    let stats = state.stats();
    assert_eq!(stats["requests"]["cancelled"], 1, "{stats}");
    assert_eq!(stats["connections"]["open"], 0, "{stats}");
    assert_at_rest(&stats);
    drop(held);
    until_pools_idle(&state).await;
}

// Promise: at the drain timeout a connection still open is closed and the request it has on
// the device dropped (counted under `requests.cancelled`, its slot back); its blocks come
// back once the device has run what it queued.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_timeout_drops_a_request_on_the_held_device_and_counts_it_cancelled() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        drain_timeout: Duration::from_millis(50),
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let mut tcp = send_raw(server.addr, GOOD).await;
    until("admitted", || server.state.requests.in_flight() == 1).await;
    let state = server.state.clone();
    tokio::time::timeout(PATIENCE, server.stop())
        .await
        .expect("the drain timeout did not end the shutdown")
        .unwrap();
    let stats = state.stats();
    assert_eq!(stats["requests"]["cancelled"], 1, "{stats}");
    assert_eq!(stats["connections"]["open"], 0, "{stats}");
    assert_at_rest(&stats);
    // The client's connection is closed unanswered.
    assert!(read_reply(&mut tcp).await.is_none());
    drop(held);
    until_pools_idle(&state).await;
}

// Promise: the requests in flight when the shutdown begins finish and are answered; one whose
// body is still arriving is in flight too: it is answered whole, with `Connection: close`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_mid_body_when_the_shutdown_begins_is_answered_and_its_connection_closed() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let head = format!(
        "{JSON_POST}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        GOOD.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    // The interim answer: the handler is reading the body.
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        interim.push(tcp.read_u8().await.unwrap());
    }
    assert!(interim.starts_with(b"HTTP/1.1 100 "), "{interim:?}");
    tcp.write_all(&GOOD.as_bytes()[..10]).await.unwrap();
    until("received", || {
        server.state.requests.snapshot().received == 1
    })
    .await;
    let state = server.state.clone();
    let addr = server.addr;
    let stopped = tokio::spawn(server.stop());
    tokio::time::timeout(PATIENCE, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener stayed open");
    tcp.write_all(&GOOD.as_bytes()[10..]).await.unwrap();
    let reply = read_reply(&mut tcp).await.expect("an answer");
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body["data"], serde_json::json!(GOOD_ANSWER));
    assert_eq!(reply.header("connection"), Some("close"), "{reply:?}");
    tokio::time::timeout(PATIENCE, stopped)
        .await
        .expect("the shutdown did not end")
        .unwrap()
        .unwrap();
    let stats = state.stats();
    assert_eq!(stats["requests"]["served"], 1, "{stats}");
    assert_at_rest(&stats);
}

// Promise: HTTP/1.1 pipelining: requests sent in one write, of every kind (stats, model,
// served, rejected, a 404 without a body), are answered in order on the one connection,
// each counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_of_every_kind_are_answered_in_order() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let post = |body: &str| format!("{JSON_POST}Content-Length: {}\r\n\r\n{body}", body.len());
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (bodies, answers): (Vec<_>, Vec<_>) = (0..3).map(body_for).unzip();
    let pipeline = [
        post(&bodies[0]),
        get("/stats"),
        post("{"),
        get("/v1/model"),
        post(&bodies[1]),
        get("/nowhere"),
        post(r#"{"dtype":"f16","shape":[4],"data":[1,2,3,4]}"#),
        post(&bodies[2]),
    ];
    let expected = [200, 200, 400, 200, 200, 404, 422, 200];
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(pipeline.concat().as_bytes()).await.unwrap();
    let (mut served, mut buffered) = (0, Vec::new());
    for (i, status) in expected.into_iter().enumerate() {
        let (got, body) = read_next_reply(&mut tcp, &mut buffered).await;
        assert_eq!(got.as_u16(), status, "answer {i}: {body}");
        if i == 0 || i == 4 || i == 7 {
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["data"], answers[served], "answer {i}");
            served += 1;
        }
    }
    drop(tcp);
    connections_until(&server, |c| c.open == 0).await;
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["received"], 5, "{stats}");
    assert_eq!(stats["requests"]["served"], 3, "{stats}");
    assert_eq!(stats["requests"]["rejected"], 2, "{stats}");
    assert_at_rest(&stats);
    server.stop().await.unwrap();
}

/// What a scoped subscriber saw: every event's level, target, message and fields, and the
/// fields of the `npu_op` span it was in (if any); every `npu_op` span closed, with its fields.
#[cfg(feature = "sim")]
#[derive(Default)]
struct Seen {
    events: Vec<(tracing::Level, String, Fields, Option<Fields>)>,
    spans: Vec<(tracing::Level, String, Fields)>,
}

#[cfg(feature = "sim")]
struct Recorder(Arc<Mutex<Seen>>);

#[cfg(feature = "sim")]
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
        let mut fields = Fields::new();
        attrs.record(&mut FieldText(&mut fields));
        ctx.span(id).unwrap().extensions_mut().insert(fields);
    }
    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        if span.name() == "npu_op" {
            let meta = span.metadata();
            let fields = span.extensions().get::<Fields>().unwrap().clone();
            let seen = (*meta.level(), meta.target().to_owned(), fields);
            self.0.lock().unwrap().spans.push(seen);
        }
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).unwrap();
        let mut ext = span.extensions_mut();
        values.record(&mut FieldText(ext.get_mut::<Fields>().unwrap()));
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut FieldText(&mut fields));
        let span = ctx
            .event_span(event)
            .and_then(|span| span.scope().find(|s| s.name() == "npu_op"))
            .map(|span| span.extensions().get::<Fields>().unwrap().clone());
        let meta = event.metadata();
        let seen = (*meta.level(), meta.target().to_owned(), fields, span);
        self.0.lock().unwrap().events.push(seen);
    }
}

// Promise (docs/observability.md): on the serving path each request's operations are
// `npu_op` spans (debug, targets under `npu_stream`) with `completed` events, a device fault is a
// `failed` event and the handler's error log, and nothing is logged at WARN or ERROR on the
// happy path. The whole server runs on this thread under a subscriber scoped to it.
#[cfg(feature = "sim")]
#[test]
fn the_serving_path_logs_its_operations_and_nothing_above_debug_when_all_goes_well() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let subscriber = tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        Recorder(seen.clone()),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = Config {
        streams: 1,
        ..small()
    };
    every_callsite::see_every_callsite();
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let server = Server::start(config, loopback()).await.unwrap();
            let stream = server.state.model.streams.streams()[0].clone();
            // tracing caches each callsite's interest when it is first hit: one first hit on
            // another test's thread while this subscriber was being made can cache "never"
            // for it (a race in tracing-core between registering a callsite and a scoped
            // dispatcher). The start-up above hit every callsite of the serving path: ask
            // again now that they are all registered.
            tracing::callsite::rebuild_interest_cache();
            let at_start = std::mem::take(&mut *seen.lock().unwrap());
            drop(at_start);
            let mut connection = client::Connection::open(server.addr).await.unwrap();
            for _ in 0..3 {
                let (status, _) = connection
                    .send(Method::POST, "/v1/infer", GOOD.into())
                    .await
                    .unwrap();
                assert_eq!(status, StatusCode::OK);
            }
            let (status, _) = connection
                .send(Method::GET, "/stats", Bytes::new())
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK);
            drop(connection);
            connections_until(&server, |c| c.open == 0).await;
            let happy = std::mem::take(&mut *seen.lock().unwrap());
            let loud: Vec<_> = happy
                .events
                .iter()
                .filter(|(level, ..)| *level <= tracing::Level::WARN)
                .collect();
            assert!(loud.is_empty(), "logged on the happy path: {loud:?}");
            // Four operations per request: copy in, the two kernels, copy out.
            let ops: Vec<_> = happy.spans.iter().map(|(.., f)| f.clone()).collect();
            assert_eq!(ops.len(), 12, "{ops:?}");
            for (level, target, fields) in &happy.spans {
                assert_eq!(*level, tracing::Level::DEBUG, "{fields:?}");
                assert!(target.starts_with("npu_stream"), "{target}");
                assert_eq!(fields["stream"], stream.id().to_string(), "{fields:?}");
                assert_eq!(fields["device"], "0", "{fields:?}");
            }
            let shape: Vec<_> = ops[..4]
                .iter()
                .map(|f| {
                    let what = f.get("direction").or(f.get("kernel")).cloned();
                    (
                        f["op"].clone(),
                        what.unwrap_or_default(),
                        f["bytes"].clone(),
                    )
                })
                .collect();
            let expected = [
                ("aclrtMemcpyAsync", "h2d", "16"),
                ("aclrtLaunchKernelWithHostArgs", "scale_f32", "0"),
                ("aclrtLaunchKernelWithHostArgs", "vector_add_f32", "0"),
                ("aclrtMemcpyAsync", "d2h", "16"),
            ]
            .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
            assert_eq!(shape, expected);
            let completed: Vec<_> = happy
                .events
                .iter()
                .filter(|(_, _, fields, _)| {
                    fields.get("message").map(String::as_str) == Some("completed")
                })
                .collect();
            assert_eq!(completed.len(), 12, "one completed event per operation");
            for (level, target, _, span) in &completed {
                assert_eq!(*level, tracing::Level::DEBUG);
                assert!(target.starts_with("npu_stream"), "{target}");
                assert!(span.is_some(), "a completed event outside its npu_op span");
            }

            // A device fault: the failed operation's span has its error, a `failed` event
            // says so, and the handler logs the detail at ERROR for the operator.
            npu::sim::fail_task(&stream, 2, npu::error::AclCode(507015)).unwrap();
            let (status, body) = post(&server, GOOD).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
            let faulted = std::mem::take(&mut *seen.lock().unwrap());
            let failed: Vec<_> = faulted
                .events
                .iter()
                .filter(|(_, _, fields, _)| {
                    fields.get("message").map(String::as_str) == Some("failed")
                })
                .collect();
            assert_eq!(failed.len(), 1, "{:?}", faulted.events);
            let (level, _, fields, span) = failed[0];
            assert_eq!(*level, tracing::Level::DEBUG);
            assert!(fields["error"].contains("507015"), "{fields:?}");
            let span = span.as_ref().expect("in its span");
            assert_eq!(span["kernel"], "scale_f32", "{span:?}");
            assert!(
                span.contains_key("error"),
                "the span records the error: {span:?}"
            );
            let errors: Vec<_> = faulted
                .events
                .iter()
                .filter(|(level, ..)| *level == tracing::Level::ERROR)
                .collect();
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].2["error"].contains("507015"), "{errors:?}");
            server.stop().await.unwrap();
        });
    });
}
