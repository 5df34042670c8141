//! The load generator against the server: every answer whole and correct.

use super::*;
use crate::load::load;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_over_64_connections_without_an_error() {
    let config = Config {
        input_len: 256,
        ..Config::default()
    };
    let shape = (config.input_len, config.alpha);
    let server = Server::start(config, loopback()).await.unwrap();
    let mut report = load(server.addr, 64, 1000, Duration::from_secs(120), shape).await;
    let (p50, p99) = (report.latency(0.5), report.latency(0.99));
    println!(
        "{} requests/s, p50 {p50:?}, p99 {p99:?}",
        report.requests_per_sec() as u64
    );
    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    assert_eq!(report.ok, 1000);
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], 1000);
    assert_eq!(stats["in_flight"], 0);
    server.stop().await.unwrap();
}
