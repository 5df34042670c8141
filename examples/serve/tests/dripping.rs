//! Clients that drip a head or a body a byte at a time.

use super::*;

/// Sends `prefix`, then drips `drop` every 20 ms (the attack's pace, on the test's paused
/// clock) for as long as the server takes it, and returns what the server answered before
/// closing (within [`PATIENCE`]) and how long after the prefix it closed.
async fn drip(addr: SocketAddr, prefix: String, drop: &'static [u8]) -> (Option<Reply>, Duration) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = tcp.into_split();
    writer.write_all(prefix.as_bytes()).await.unwrap();
    let sent = tokio::time::Instant::now();
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
    let open_for = sent.elapsed();
    dripping.abort();
    assert!(closed.is_ok(), "a dripping client kept its connection");
    (parse_reply(received), open_for)
}

/// Asserts that a connection dripped since its prefix was closed at `timeout` (virtual time,
/// so exactly, give or take the paused clock's steps), not kept open by the drips.
fn assert_closed_at(open_for: Duration, timeout: Duration) {
    assert!(
        open_for >= timeout && open_for < timeout + Duration::from_millis(100),
        "closed after {open_for:?}, the timeout is {timeout:?}"
    );
}

// The paused clock makes the drips and the timeouts virtual time: the outcome does not
// depend on how fast the host runs.
#[tokio::test(start_paused = true)]
async fn dripping_clients_are_bounded_by_the_whole_head_and_body_timeouts() {
    let config = Config {
        header_timeout: Duration::from_millis(200),
        body_timeout: Duration::from_millis(200),
        ..small()
    };
    let server = Server::start(config.clone(), loopback()).await.unwrap();
    // A head that never ends, a byte at a time: closed unanswered.
    let head = format!("{JSON_POST}X-Drip: ");
    let (reply, open_for) = drip(server.addr, head, b"a").await;
    assert!(reply.is_none(), "{reply:?}");
    assert_closed_at(open_for, config.header_timeout);
    // A declared body under the limit, and a chunked one of one-byte chunks, dripped: 408.
    let declared = format!("{JSON_POST}Content-Length: 1000\r\n\r\n");
    let chunked = format!("{JSON_POST}Transfer-Encoding: chunked\r\n\r\n");
    for (prefix, drop) in [(declared, &b"1"[..]), (chunked, b"1\r\n1\r\n")] {
        let (reply, open_for) = drip(server.addr, prefix, drop).await;
        assert_closed_at(open_for, config.body_timeout);
        reply
            .expect("an answer")
            .assert_refused_and_closed(StatusCode::REQUEST_TIMEOUT, "request_timeout");
    }
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["rejected"], 2, "{stats}");
    // hyper closes the socket before the connection's task counts it closed.
    connections_until(&server, |c| c.open == 0).await;
    server.stop().await.unwrap();
}
