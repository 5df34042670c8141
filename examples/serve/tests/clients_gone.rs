//! Clients that go away before their answer, and clients that only half-close their connection
//! to wait for it.

use super::*;

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_gone_while_their_requests_are_on_the_device_get_everything_back() {
    let _device = DEVICE_ONE.lock().await;
    let config = on_device_one(3);
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
    let mut clients = Vec::new();
    for admitted in 1..=3 {
        let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(whole.as_bytes()).await.unwrap();
        until("admitted", || server.state.requests.in_flight() == admitted).await;
        clients.push(tcp);
    }
    // Each goes its own way while its request is on the held device: a close and a reset, gone,
    // and a half-close, which waits for its answer.
    let [closed, reset, mut half_closed] = clients.try_into().unwrap();
    drop(closed);
    reset.set_zero_linger().unwrap();
    drop(reset);
    half_closed.shutdown().await.unwrap();
    // The two gone lose their connections and their requests, whose admission slots come back
    // at once, with the device still held.
    connections_until(&server, |c| c.open == 1).await;
    assert_eq!(
        server.state.requests.in_flight(),
        1,
        "two admission slots are back"
    );
    assert_eq!(server.state.stats()["requests"]["cancelled"], 2);
    // The half-closed client has its answer once the device runs, and the dropped requests'
    // blocks come back once it has run what they queued.
    held.release().unwrap();
    let reply = read_reply(&mut half_closed).await.expect("an answer");
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body["data"], serde_json::json!([2.0, 5.0, 8.0, 11.0]));
    until_pools_idle(&server.state).await;
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["cancelled"], 2, "{stats}");
    assert_eq!(stats["requests"]["served"], 2, "{stats}");
    server.stop().await.unwrap();
}

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_of_stream_behind_a_pipelined_request_is_seen_before_the_answer() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        streams: 1,
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
    // Each client sends a request, then (with the first on the held device, so the second
    // waits in the socket) a second one and its end of stream.
    let pipelining = || async {
        let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(whole.as_bytes()).await.unwrap();
        until("admitted", || server.state.requests.in_flight() == 1).await;
        tcp.write_all(whole.as_bytes()).await.unwrap();
        tcp
    };
    // One that closes is found gone while the device is still held: its first request is
    // dropped, and the second never read by hyper.
    drop(pipelining().await);
    connections_until(&server, |c| c.open == 0).await;
    assert_eq!(
        server.state.requests.in_flight(),
        0,
        "the admission slot is back"
    );
    assert_eq!(server.state.stats()["requests"]["cancelled"], 1);
    // One that half-closes is asked, and has both answers, in order, once the device runs:
    // the second request, left in the socket by the watch, comes to hyper from there.
    let mut tcp = pipelining().await;
    tcp.shutdown().await.unwrap();
    let mut probe = [0; 25];
    tcp.read_exact(&mut probe).await.unwrap();
    assert_eq!(&probe, b"HTTP/1.1 100 Continue\r\n\r\n");
    held.release().unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(PATIENCE, tcp.read_to_end(&mut received))
        .await
        .expect("the server neither answered nor closed")
        .unwrap();
    let text = String::from_utf8(received).unwrap();
    let answer = "[2.0,5.0,8.0,11.0]";
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
    assert_eq!(text.matches(answer).count(), 2, "{text}");
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], 2, "{stats}");
    assert_eq!(stats["requests"]["cancelled"], 1, "{stats}");
    until_pools_idle(&server.state).await;
    server.stop().await.unwrap();
}

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_of_stream_behind_more_pipelined_bytes_than_the_buffer_is_seen_without_reading_them()
{
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        streams: 1,
        max_buffer: 8192,
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(whole.as_bytes()).await.unwrap();
    until("admitted", || server.state.requests.in_flight() == 1).await;
    // Behind the request on the held device, a second one three times the connection's
    // buffer (which the kernel's receive buffer holds, unread), then the close.
    let length = 3 * server.state.config.max_buffer;
    let second = format!(
        "{JSON_POST}Content-Length: {length}\r\n\r\n{}",
        "1".repeat(length)
    );
    tcp.write_all(second.as_bytes()).await.unwrap();
    drop(tcp);
    // Seen with the device still held: the first request dropped, its slot back.
    connections_until(&server, |c| c.open == 0).await;
    assert_eq!(
        server.state.requests.in_flight(),
        0,
        "the admission slot is back"
    );
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["cancelled"], 1, "{stats}");
    assert_eq!(stats["requests"]["received"], 1, "{stats}");
    held.release().unwrap();
    until_pools_idle(&server.state).await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_half_close_as_soon_as_their_request_is_sent_get_their_answers() {
    let server = Server::start(small(), loopback()).await.unwrap();
    // The end of stream comes with the request or just after it, before or after the handler
    // has the body: it is never taken for a client gone. HTTP/1.0 clients, which the server
    // may not ask with an interim answer, wait for theirs too.
    let mut rounds = 0;
    for version in ["1.1", "1.0"] {
        for _ in 0..20 {
            let head = JSON_POST.replace("HTTP/1.1", &format!("HTTP/{version}"));
            let whole = format!("{head}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
            let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
            tcp.write_all(whole.as_bytes()).await.unwrap();
            tcp.shutdown().await.unwrap();
            let reply = read_reply(&mut tcp).await.expect("an answer");
            assert_eq!(reply.status, StatusCode::OK, "HTTP/{version}: {reply:?}");
            assert_eq!(reply.body["data"], serde_json::json!([2.0, 5.0, 8.0, 11.0]));
            rounds += 1;
        }
    }
    connections_until(&server, |c| c.open == 0).await;
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], rounds, "{stats}");
    assert_eq!(stats["requests"]["cancelled"], 0, "{stats}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_cut_short_are_counted_by_what_they_were_answered() {
    let server = Server::start(small(), loopback()).await.unwrap();
    // `Expect: 100-continue`: hyper sends the interim answer when the handler starts reading the
    // body, so the client ends its connection with the handler surely reading.
    let head = format!(
        "{JSON_POST}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        GOOD.len()
    );
    let count = |counter: &str| server.state.stats()["requests"][counter].as_u64().unwrap();
    // A reset says the client is gone: cancelled. An end of stream (a close or a half-close,
    // which the server cannot tell apart before writing) is answered 400, and counted so.
    let ends = [("reset", (0, 1)), ("close", (1, 1)), ("half-close", (2, 1))];
    for (end, (rejected, cancelled)) in ends {
        let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut interim = Vec::new();
        while !interim.ends_with(b"\r\n\r\n") {
            interim.push(tcp.read_u8().await.unwrap());
        }
        assert!(interim.starts_with(b"HTTP/1.1 100 "), "{interim:?}");
        tcp.write_all(&GOOD.as_bytes()[..10]).await.unwrap();
        match end {
            "close" => drop(tcp),
            "reset" => {
                tcp.set_zero_linger().unwrap();
                drop(tcp);
            }
            _ => {
                // Still reading: it is told why, and the count says what it was told.
                tcp.shutdown().await.unwrap();
                let reply = read_reply(&mut tcp).await.expect("an answer");
                let got = (reply.status, reply.body["error"]["code"].as_str());
                assert_eq!(
                    got,
                    (StatusCode::BAD_REQUEST, Some("bad_body")),
                    "{reply:?}"
                );
            }
        }
        until(end, || {
            count("rejected") + count("cancelled") == rejected + cancelled
        })
        .await;
        assert_eq!(
            (count("rejected"), count("cancelled")),
            (rejected, cancelled),
            "after the {end}"
        );
    }
    // A body that fails for being malformed (a chunk size that is not hex) is refused, and
    // counted so.
    let malformed = format!("{JSON_POST}Transfer-Encoding: chunked\r\n\r\nzz\r\n{GOOD}\r\n");
    let reply = raw(server.addr, malformed.into_bytes())
        .await
        .expect("an answer");
    let got = (reply.status, reply.body["error"]["code"].as_str());
    assert_eq!(
        got,
        (StatusCode::BAD_REQUEST, Some("bad_body")),
        "{reply:?}"
    );
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["rejected"], 3, "{stats}");
    assert_eq!(stats["requests"]["cancelled"], 1, "{stats}");
    connections_until(&server, |c| c.open == 0).await;
    server.stop().await.unwrap();
}
