//! The twenty-eighth session's second helper's attacks on the serving path: the model's run
//! dropped at every one of its await points, and a request given up on whose device work then
//! faults.

#[cfg(feature = "sim")]
use std::sync::Arc;
use std::task::Poll;

use super::*;

/// The answer `GOOD` gets from every test's model (`2 * x + bias`).
const GOOD_ANSWER: [f32; 4] = [2.0, 5.0, 8.0, 11.0];

/// Polls the model's run of `GOOD` at most `limit` times, each poll after the previous one's
/// wake-up (a lost wake-up fails the test at [`PATIENCE`]), and drops it: its output if it
/// resolved, and the polls it took.
async fn run_for(state: &AppState, limit: usize) -> (usize, Option<Vec<f32>>) {
    let data = [1.0, 2.0, 3.0, 4.0];
    let mut run = tokio_test::task::spawn(state.model.run(&data));
    for polls in 1..=limit {
        if let Poll::Ready(output) = run.poll() {
            let output = output.unwrap_or_else(|_| panic!("the model failed"));
            return (polls, Some(output));
        }
        if polls < limit {
            until("the run woken", || run.is_woken()).await;
        }
    }
    (limit, None)
}

// Promise (docs/cancellation.md, rules 2 and 3, and the example's "dropping the model's future
// is safe"): the model's run (copy in, scale, add, copy out), its future dropped after every
// one of its polls as a request's is when its client goes or its device timeout passes, gives
// both pools' blocks back once the device is done with them, and the next run is served whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_run_dropped_after_every_poll_gives_every_block_back() {
    let state = AppState::new(small()).await.unwrap();
    let (polls, output) = run_for(&state, usize::MAX).await;
    assert_eq!(output.unwrap(), GOOD_ANSWER);
    assert!(polls > 1, "the run awaits the device");
    for stop in 1..polls {
        let (_, output) = run_for(&state, stop).await;
        // The device's timing decides how many polls a run takes: one may resolve sooner.
        if let Some(output) = output {
            assert_eq!(output, GOOD_ANSWER);
        }
        until_pools_idle(&state).await;
    }
    let (_, output) = run_for(&state, usize::MAX).await;
    assert_eq!(output.unwrap(), GOOD_ANSWER);
    let stats = state.stats();
    assert_eq!(stats["pool"]["waiters"], 0, "{stats}");
}

// Promise (docs/observability.md's `GET /stats`, and a fault fails only its own request): a
// request whose client goes away while its work is queued on the held device, that work then
// faulting on the device, is counted `cancelled` once, gives its slot back at once and its
// blocks once the device has failed the work, and the next request on the same stream, the
// only one admitted, is served whole.
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_given_up_on_whose_work_faults_is_cancelled_once_and_the_next_is_served() {
    let _device = DEVICE_ONE.lock().await;
    let server = Server::start(on_device_one(1), loopback()).await.unwrap();
    let stream = &server.state.model.streams.streams()[0];
    let device = npu::Device::open(1).unwrap();
    let held = npu::sim::hold(&device).unwrap();
    // The copy in of the next request faults.
    npu::sim::fail_task(stream, 1, npu::error::AclCode(507015)).unwrap();
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let whole = format!("{JSON_POST}Content-Length: {}\r\n\r\n{GOOD}", GOOD.len());
    tcp.write_all(whole.as_bytes()).await.unwrap();
    until("admitted", || server.state.requests.in_flight() == 1).await;
    drop(tcp);
    until("cancelled", || {
        server.state.stats()["requests"]["cancelled"] == 1
    })
    .await;
    assert_eq!(
        server.state.requests.in_flight(),
        0,
        "the slot is back at once"
    );
    held.release().unwrap();
    until_pools_idle(&server.state).await;
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: Vec<f32> = serde_json::from_value(body["data"].clone()).unwrap();
    assert_eq!(answer, GOOD_ANSWER);
    let stats = server.state.stats();
    let requests = &stats["requests"];
    assert_eq!(requests["received"], 2, "{stats}");
    assert_eq!(requests["cancelled"], 1, "{stats}");
    assert_eq!(requests["served"], 1, "{stats}");
    assert_eq!(
        requests["failed"], 0,
        "the fault struck no answered request: {stats}"
    );
    server.stop().await.unwrap();
}

/// Device 1's live allocations once every deferred release has run.
#[cfg(feature = "sim")]
fn live_on_device_one() -> u64 {
    npu::sim::flush_releases();
    let device = npu::Device::open(1).unwrap();
    npu::sim::device_stats(&device).unwrap().live_allocations
}

// Promise (docs/cancellation.md, rule 5, and "a dropped Tokio runtime with work in flight
// neither hangs nor leaks device memory"), for the serving path's state: a model loaded on
// one current-thread runtime, that runtime dropped, serves on a multi-thread one; runs left
// pending on the held device by a third runtime shut down in the background, the model then
// dropped (its pools and streams with them) with the device still held, never wait for the
// device; once it is released, every allocation of the model is gone.
#[cfg(feature = "sim")]
#[test]
fn a_model_outlives_its_loading_runtime_and_drops_with_runs_in_flight_leaking_nothing() {
    let _device = DEVICE_ONE.blocking_lock();
    let before = live_on_device_one();
    let loading = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let state = Arc::new(loading.block_on(AppState::new(on_device_one(2))).unwrap());
    drop(loading);
    let serving = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_, output) = serving.block_on(run_for(&state, usize::MAX));
    assert_eq!(output.unwrap(), GOOD_ANSWER);
    let device = npu::Device::open(1).unwrap();
    let held = npu::sim::hold(&device).unwrap();
    let abandoning = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    abandoning.block_on(async {
        for _ in 0..2 {
            let state = state.clone();
            tokio::spawn(async move { state.model.run(&[1.0, 2.0, 3.0, 4.0]).await.is_ok() });
        }
        until("both runs on the held device", || {
            let stats = state.stats();
            stats["device_pool"]["allocated_bytes"] != 0 && stats["pool"]["allocated_bytes"] != 0
        })
        .await;
    });
    abandoning.shutdown_background();
    // Dropped off this thread, bounded: the model's drop must not wait for the held device.
    let (dropped, gone) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(state);
        dropped.send(()).unwrap();
    });
    gone.recv_timeout(PATIENCE)
        .expect("dropping the model waited for the held device");
    held.release().unwrap();
    serving.block_on(until("the model's memory freed", || {
        live_on_device_one() <= before
    }));
}
