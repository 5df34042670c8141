//! The thirtieth session's helper's attack on the serving path: a device memory error that
//! retires one of the model's device blocks.

use std::sync::Arc;

use super::*;

// Promise (the example's "an admitted request finds its blocks free unless requests given up
// on still have the device using theirs", and docs/architecture.md: a quarantined block
// "leaves `reserved` and the capacity, so the pool serves new requests in its place"): a
// request whose copy in fails with an HBM multi-bit ECC error (507054, which the pool
// quarantines at once) is answered 500, and the next requests, one at a time on a server
// admitting one, are served, not refused 503 `overloaded` for want of a block nobody holds.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_block_quarantined_after_a_memory_error_does_not_shrink_the_server_for_good() {
    let _device = DEVICE_ONE.lock().await;
    let server = Server::start(on_device_one(1), loopback()).await.unwrap();
    let stream = &server.state.model.streams.streams()[0];
    // The request's first task, its copy into its first device block.
    npu::sim::fail_task(stream, 1, npu::error::AclCode(507054)).unwrap();
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["error"]["code"], "device_error", "{body}");
    until("the failed block settled", || {
        let stats = server.state.model.device_pool.stats().cache;
        stats.quarantined == 1 && stats.awaiting_blocks == 0
    })
    .await;
    for i in 0..3 {
        let (status, body) = post(&server, GOOD).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "request {i} after the fault: {body}"
        );
        assert_eq!(
            body["data"],
            serde_json::json!([2.0, 5.0, 8.0, 11.0]),
            "{body}"
        );
    }
    until_pools_idle(&server.state).await;
    server.stop().await.unwrap();
}

// The same with requests at once: a server admitting four, the third task of its stream (a
// request's kernel, which reads and writes its first device block) failing with 507054 while
// four requests run, then five rounds of four requests at once: after the faulted request,
// every request is served (each of the four finds its two blocks), none refused 503.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_at_once_after_a_quarantined_block_are_all_served() {
    let _device = DEVICE_ONE.lock().await;
    let server = Arc::new(Server::start(on_device_one(4), loopback()).await.unwrap());
    let stream = &server.state.model.streams.streams()[0];
    npu::sim::fail_task(stream, 3, npu::error::AclCode(507054)).unwrap();
    let wave = |server: Arc<Server>| async move {
        let posts: Vec<_> = (0..4)
            .map(|_| {
                let server = server.clone();
                tokio::spawn(async move { post(&server, GOOD).await })
            })
            .collect();
        let mut statuses = Vec::new();
        for answer in futures::future::join_all(posts).await {
            let (status, body) = answer.unwrap();
            statuses.push((status, body["error"]["code"].clone()));
        }
        statuses
    };
    let first = wave(server.clone()).await;
    let failed = first
        .iter()
        .filter(|(s, _)| *s == StatusCode::INTERNAL_SERVER_ERROR)
        .count();
    assert_eq!(failed, 1, "the faulted request: {first:?}");
    until("the failed block settled", || {
        let stats = server.state.model.device_pool.stats().cache;
        stats.quarantined >= 1 && stats.awaiting_blocks == 0
    })
    .await;
    for round in 0..5 {
        let statuses = wave(server.clone()).await;
        assert!(
            statuses.iter().all(|(s, _)| *s == StatusCode::OK),
            "round {round}: {statuses:?}"
        );
    }
    until_pools_idle(&server.state).await;
    Arc::into_inner(server).unwrap().stop().await.unwrap();
}
