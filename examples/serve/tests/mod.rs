//! The example's tests, through its sockets as a client would, by topic; here, the helpers
//! they share.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client;
use crate::config::Config;
use crate::connections::Connections;
use crate::server::Server;
use crate::state::AppState;

mod attack_session26;
mod attack_session28b;
#[cfg(feature = "sim")]
mod attack_session30;
mod bodies;
mod clients_gone;
mod connection_limit;
mod dripping;
mod errors;
mod heads;
mod http_versions;
mod shutdown;
mod slow_readers;
mod stats;
mod under_load;

// These hold the device, or inject its fault, through the simulator's controls.
#[cfg(feature = "sim")]
mod device;

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

/// A small model on device 1, the one the device tests hold, with one stream, admitting
/// `max_in_flight` requests at once.
#[cfg(feature = "sim")]
fn on_device_one(max_in_flight: usize) -> Config {
    Config {
        device: 1,
        max_in_flight,
        streams: 1,
        ..small()
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
    read_reply(&mut tcp).await
}

/// Reads until the server closes `tcp` (within [`PATIENCE`]): `None` if it closed without
/// answering.
async fn read_reply(tcp: &mut tokio::net::TcpStream) -> Option<Reply> {
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
    let mut text = text.as_str();
    // Interim answers come before the answer (the server asks a client that half-closed with
    // one whether it is still there); a client must take and may ignore them.
    while text.starts_with("HTTP/1.1 1") {
        text = text.split_once("\r\n\r\n").unwrap().1;
    }
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

/// Waits (within [`PATIENCE`]) until the server's connections satisfy `done`.
async fn connections_until(server: &Server, done: impl FnMut(&Connections) -> bool) {
    let mut connections = server.state.connections.subscribe();
    tokio::time::timeout(PATIENCE, connections.wait_for(done))
        .await
        .expect("the connections never got there")
        .unwrap();
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
        let idle =
            |pool: &str| stats[pool]["allocated_bytes"] == 0 && stats[pool]["awaiting_blocks"] == 0;
        idle("pool") && idle("device_pool")
    })
    .await;
}
