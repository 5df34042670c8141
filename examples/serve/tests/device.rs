//! A device that fails or stalls under requests.

use super::*;

// Injects its fault through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_error_reaches_the_client_without_internals() {
    // One stream, so that the failure injected into it is the request's first task.
    let config = Config {
        streams: 1,
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let stream = &server.state.model.streams.streams()[0];
    npu::sim::fail_task(stream, 1, npu::error::AclCode(507015)).unwrap();
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("device_error"))
    );
    // No ACL function name, no code: only this sentence.
    assert_eq!(
        body["error"]["message"],
        "the device failed to run the model"
    );
    assert_eq!(server.state.stats()["requests"]["failed"], 1);
    server.stop().await.unwrap();
}

// Holds the device through the simulator's controls.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_device_answers_504_and_frees_the_slots_and_blocks() {
    let _device = DEVICE_ONE.lock().await;
    let config = Config {
        device: 1,
        max_in_flight: 1,
        streams: 1,
        device_timeout: Duration::from_millis(100),
        ..small()
    };
    let server = Server::start(config, loopback()).await.unwrap();
    let held = npu::sim::hold(&npu::Device::open(1).unwrap()).unwrap();
    // Each request in turn takes the only slot, times out on the held device and frees it;
    // the memory it gave up stays with the device. The pinned pool has a block for each
    // admitted request and one more, so the third request finds none free and is refused
    // at once rather than left waiting for memory the held device keeps.
    for _ in 0..2 {
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
        assert_eq!(body["error"]["code"], "device_timeout", "{body}");
        assert_eq!(
            server.state.requests.in_flight(),
            0,
            "the admission slot is back"
        );
    }
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    assert_eq!(server.state.stats()["pool"]["waiters"], 0);
    held.release().unwrap();
    until_pools_idle(&server.state).await;
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["failed"], 2, "{stats}");
    assert_eq!(stats["requests"]["overloaded"], 1, "{stats}");
    assert_eq!(stats["requests"]["served"], 1, "{stats}");
    server.stop().await.unwrap();
}
