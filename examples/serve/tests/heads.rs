//! Request heads that stall, never come, or outgrow the connection's buffer.

use super::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_longer_than_the_connection_buffer_gets_431() {
    // The default buffer, and one below hyper's smallest (8192 bytes), which the server serves
    // with and reports as its buffer instead.
    for max_buffer in [small().max_buffer, 1000] {
        let config = Config {
            max_buffer,
            ..small()
        };
        let server = Server::start(config, loopback()).await.unwrap();
        assert_eq!(server.state.config.max_buffer, max_buffer.max(8192));
        // Exactly the buffer's worth of a head that never ends, so that the server reads all
        // of it before refusing (nothing of ours unread when it closes).
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
}

/// The answer to a `GET`, read off `tcp` up to its declared length.
async fn read_answer(tcp: &mut tokio::net::TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer");
        received.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&received);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map(|n| n.parse::<usize>().unwrap());
            if length.is_some_and(|length| body.len() >= length) {
                return text.into_owned();
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_header_timeout_after_its_answer() {
    let config = small();
    let header_timeout = config.header_timeout;
    let server = Server::start(config, loopback()).await.unwrap();
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // Two requests, each sent three quarters of the header timeout after the connection was
    // ready for it (virtual time): together longer than the timeout, so neither wait counts
    // against the next. The quarter left is room for the server to see the request before
    // the paused clock moves on to its timer.
    for _ in 0..2 {
        tokio::time::sleep(header_timeout * 3 / 4).await;
        tcp.write_all(b"GET /v1/model HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }
    connections_until(&server, |c| c.open == 1).await;
    // Then the client sends nothing more, nor closes: the connection is closed unanswered at
    // the header timeout, counted from the last answer, and no longer counts.
    let answered = tokio::time::Instant::now();
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest).await.unwrap();
    let idle = answered.elapsed();
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert!(
        idle >= header_timeout && idle < header_timeout + Duration::from_secs(1),
        "{idle:?}"
    );
    connections_until(&server, |c| c.open == 0).await;
    server.stop().await.unwrap();
}
