//! Clients that go away while their request is on the device.

use super::*;

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
