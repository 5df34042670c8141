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
