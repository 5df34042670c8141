//! The graceful shutdown: the requests in flight finished, the ones racing it answered or refused.

use std::sync::Arc;

use super::*;
use crate::load::check_answer;
#[cfg(feature = "sim")]
use crate::load::load_case;

/// Connects until the server refuses: its listener is gone, and its drain has begun.
#[cfg(feature = "sim")]
async fn until_refused(addr: SocketAddr) {
    let refused = tokio::time::timeout(PATIENCE, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    });
    refused.await.expect("the listener stayed open");
}

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_during_the_drain_is_answered_once_and_the_connection_closed() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let addr = server.addr;
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    // A keep-alive request, on the held device when the shutdown begins.
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(whole.as_bytes()).await.unwrap();
    until("admitted", || server.state.requests.in_flight() == 1).await;
    let state = server.state.clone();
    let stopped = tokio::spawn(server.stop());
    until_refused(addr).await;
    // A second request on the same connection during the drain: not served.
    tcp.write_all(whole.as_bytes()).await.unwrap();
    held.release().unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0; 4096];
        while let Ok(n @ 1..) = tcp.read(&mut chunk).await {
            received.extend_from_slice(&chunk[..n]);
        }
    });
    read.await
        .expect("the connection stayed open after its answer");
    tokio::time::timeout(PATIENCE, stopped)
        .await
        .expect("the shutdown did not end")
        .unwrap()
        .unwrap();
    let text = String::from_utf8(received).unwrap();
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "one answer: {text}");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    let stats = state.stats();
    assert_eq!(stats["requests"]["served"], 1, "{stats}");
    assert_eq!(stats["requests"]["cancelled"], 0, "{stats}");
    assert_eq!(stats["connections"]["open"], 0, "{stats}");
    // After the shutdown, nothing listens.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_the_shutdown_are_answered_whole_or_refused() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let addr = server.addr;
    let (body, expected) = (Bytes::from(GOOD), Arc::new(vec![2.0, 5.0, 8.0, 11.0]));
    // Clients on keep-alive connections sending requests until the server is gone.
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (body, expected) = (body.clone(), expected.clone());
            tokio::spawn(async move {
                let mut answered = 0;
                let Ok(mut connection) = client::Connection::open(addr).await else {
                    return answered;
                };
                loop {
                    let answer = connection.send(Method::POST, "/v1/infer", body.clone());
                    match tokio::time::timeout(PATIENCE, answer).await {
                        Ok(Ok(answer)) => {
                            check_answer(Ok(Ok(answer)), &expected).unwrap();
                            answered += 1;
                        }
                        // Closed before an answer: refused, or its request left unread.
                        Ok(Err(_)) => return answered,
                        Err(_) => panic!("no answer nor close within {PATIENCE:?}"),
                    }
                }
            })
        })
        .collect();
    until("some requests served", || {
        server.state.requests.snapshot().served >= 16
    })
    .await;
    let state = server.state.clone();
    server.stop().await.unwrap();
    let mut answered = 0;
    for client in clients {
        answered += client.await.unwrap();
    }
    // Every request the server answered reached its client whole, and none was dropped.
    let stats = state.stats();
    assert_eq!(stats["requests"]["served"], answered, "{stats}");
    assert_eq!(stats["requests"]["cancelled"], 0, "{stats}");
    assert_eq!(stats["in_flight"], 0, "{stats}");
    assert_eq!(stats["connections"]["open"], 0, "{stats}");
    until_pools_idle(&state).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_gets_503_and_shutdown_finishes_the_requests_in_flight() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        input_len: 8,
        max_in_flight: 2,
        ..Config::default()
    };
    let (body, expected) = load_case(config.input_len, config.alpha);
    let server = Server::start(config, loopback()).await.unwrap();

    // Hold the device: the two admitted requests stay in flight until it is released.
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    let in_flight: Vec<_> = (0..2)
        .map(|_| {
            let (addr, body) = (server.addr, body.clone());
            tokio::spawn(async move {
                let mut connection = client::Connection::open(addr).await?;
                connection.send(Method::POST, "/v1/infer", body).await
            })
        })
        .collect();
    while server.state.requests.in_flight() < 2 {
        tokio::task::yield_now().await;
    }
    let (status, answer) = post(&server, body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer["error"]["code"], "overloaded");

    // Shut down while both are in flight, then let the device run: both are answered.
    let state = server.state.clone();
    let stopped = tokio::spawn(server.stop());
    held.release().unwrap();
    for request in in_flight {
        let answer = Ok(request.await.unwrap());
        assert_eq!(check_answer(answer, &expected), Ok(()));
    }
    stopped.await.unwrap().unwrap();
    assert_eq!(state.stats()["requests"]["served"], 2);
    assert_eq!(state.stats()["requests"]["overloaded"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_starts_the_graceful_shutdown_as_ctrl_c_does() {
    // Installs the handlers: from here on SIGTERM no longer ends this test process (for the
    // rest of its life, as tokio never uninstalls one), it only wakes the shutdown.
    let stopping = crate::shutdown_signal().unwrap();
    // SAFETY: kill(2) with this process's own id and a signal number; it touches no memory.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGTERM) }, 0);
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("SIGTERM did not start the shutdown");
}
