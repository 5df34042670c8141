//! Clients that never read their answer: the drain and write timeouts.

use super::*;

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
