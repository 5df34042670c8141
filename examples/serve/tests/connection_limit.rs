//! Connections over `max_connections`: refused with 503, and the server recovers.

use super::*;

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
        reply.assert_refused_and_closed(StatusCode::SERVICE_UNAVAILABLE, "too_many_connections");
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
