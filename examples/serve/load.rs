//! The load generator of the self-load mode and the tests: many keep-alive clients, every
//! answer checked against the model.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::client;
use crate::model::bias;
use crate::percentile::percentile;
use crate::tensor::Tensor;

/// What the load generator measured.
#[derive(Debug)]
pub(crate) struct LoadReport {
    pub(crate) ok: usize,
    pub(crate) errors: usize,
    /// The first few errors, for the report.
    pub(crate) first_errors: Vec<String>,
    pub(crate) elapsed: Duration,
    pub(crate) latencies: Vec<Duration>,
}

impl LoadReport {
    pub(crate) fn requests_per_sec(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q` quantile of the successful requests' latencies (nearest rank).
    pub(crate) fn latency(&mut self, q: f64) -> Duration {
        percentile(&mut self.latencies, q)
    }
}

/// The request the load generator sends, and the answer the model must give.
pub(crate) fn load_case(input_len: usize, alpha: f32) -> (Bytes, Vec<f32>) {
    let data: Vec<f32> = (0..input_len).map(|i| (i % 17) as f32 * 0.5).collect();
    let expected = data
        .iter()
        .enumerate()
        .map(|(i, x)| alpha * x + bias(i))
        .collect();
    let body = json!({ "dtype": "f32", "shape": [input_len], "data": data });
    (Bytes::from(body.to_string()), expected)
}

/// `requests` POSTs over `connections` keep-alive connections to `addr`, stopping early at
/// `deadline`; every answer is checked against the model.
pub(crate) async fn load(
    addr: SocketAddr,
    connections: usize,
    requests: usize,
    deadline: Duration,
    (input_len, alpha): (usize, f32),
) -> LoadReport {
    if connections == 0 {
        // No worker would send them: every request is an error, said so, not a report of
        // nothing that reads like requests lost without a word.
        return LoadReport {
            ok: 0,
            errors: requests,
            first_errors: vec!["no connection to send the requests over".to_owned()],
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
        };
    }
    let (body, expected) = load_case(input_len, alpha);
    let expected = Arc::new(expected);
    let issued = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (body, expected, issued) = (body.clone(), expected.clone(), issued.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut connection = match client::Connection::open(addr).await {
                    Ok(connection) => connection,
                    Err(err) => return vec![Err(format!("connect: {err}"))],
                };
                while issued.fetch_add(1, Ordering::Relaxed) < requests {
                    let Some(left) = deadline.checked_sub(start.elapsed()) else {
                        outcomes.push(Err("deadline reached before sending".to_owned()));
                        continue;
                    };
                    let sent = Instant::now();
                    let answer = tokio::time::timeout(
                        left,
                        connection.send(Method::POST, "/v1/infer", body.clone()),
                    )
                    .await;
                    outcomes.push(check_answer(answer, &expected).map(|()| sent.elapsed()));
                }
                outcomes
            })
        })
        .collect();
    let mut report = LoadReport {
        ok: 0,
        errors: 0,
        first_errors: Vec::new(),
        elapsed: Duration::ZERO,
        latencies: Vec::with_capacity(requests),
    };
    for worker in workers {
        let outcomes = worker
            .await
            .unwrap_or_else(|err| vec![Err(format!("client task: {err}"))]);
        for outcome in outcomes {
            match outcome {
                Ok(latency) => {
                    report.ok += 1;
                    report.latencies.push(latency);
                }
                Err(err) => {
                    report.errors += 1;
                    if report.first_errors.len() < 5 {
                        report.first_errors.push(err);
                    }
                }
            }
        }
    }
    report.elapsed = start.elapsed();
    report
}

pub(crate) type Answer =
    Result<Result<(StatusCode, Bytes), client::Error>, tokio::time::error::Elapsed>;

/// Whether an answer is a 200 carrying exactly the expected output.
pub(crate) fn check_answer(answer: Answer, expected: &[f32]) -> Result<(), String> {
    let (status, body) = answer
        .map_err(|_| "timed out at the deadline".to_owned())?
        .map_err(|err| format!("transport: {err}"))?;
    if status != StatusCode::OK {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    let tensor: Tensor<f32> =
        serde_json::from_slice(&body).map_err(|err| format!("answer: {err}"))?;
    if tensor.data != expected {
        return Err("the answer differs from the model's output".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_load_over_no_connection_reports_every_request_failed() {
        // Nothing listens there: no connection is tried.
        let addr = SocketAddr::from(([127, 0, 0, 1], 9));
        let report = load(addr, 0, 10, Duration::from_secs(1), (4, 2.0)).await;
        assert_eq!((report.ok, report.errors), (0, 10), "{report:?}");
        assert_eq!(report.first_errors.len(), 1, "{report:?}");
    }
}
