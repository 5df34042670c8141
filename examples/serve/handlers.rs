//! The HTTP routes and their handlers: the path from a request to the model and back, and
//! the answers for the paths and methods no route takes.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures::FutureExt;
use serde_json::json;

use crate::api_error::ApiError;
use crate::body::read_body;
use crate::model::RunError;
use crate::peer::Peer;
use crate::requests::{Outcome, Request};
use crate::state::AppState;
use crate::tensor::Tensor;
use crate::validation::{finite_output, require_identity, require_json, validate};

/// `POST /v1/infer`: answers and counts the answer. A request dropped unanswered is counted
/// too, by [`Request`]'s drop: under `requests.cancelled` when the handler goes with its
/// connection, which ends when its client is gone (seen by hyper, or by the watch of
/// [`crate::peer`] while the request awaits its answer) or at the drain timeout; under
/// `requests.failed` when it goes with a panic of its own, a bug that [`answer_panics`]
/// answers 500.
async fn infer(
    State(state): State<Arc<AppState>>,
    Extension(client): Extension<Arc<Peer>>,
    version: Version,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Tensor<f32>>, ApiError> {
    let mut request = state.requests.receive();
    let answer = answer_infer(&state, &mut request, (&client, version), &headers, body).await;
    request.finish(Outcome::of(&answer));
    answer.map(Json)
}

/// Answers a request whose handler panicked (a bug) with 500 `internal_error`, which axum does
/// not: the panic would unwind out of the connection's task, closing the connection unanswered
/// (with any requests pipelined behind), and the request would be counted as if its client had
/// gone. The detail goes to the log, not the client.
///
/// `AssertUnwindSafe` holds: the panicked handler's future is dropped, never polled again, and
/// what it shares with other requests stays whole across a panic (the counters and the
/// admission slots are atomics, a slot and the memory blocks go back in their guards' drops, and the example's own
/// mutexes are taken poisoned or not).
pub(crate) async fn answer_panics<E>(
    handler: impl Future<Output = Result<Response, E>>,
) -> Result<Response, E> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(answer) => answer,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(not a string)");
            tracing::error!(panic = detail, "a handler panicked");
            let message = "the server failed to answer the request";
            let error = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message);
            Ok(error.into_response())
        }
    }
}

/// The answer to `POST /v1/infer`: the checks, cheapest first, then the device. `client`'s
/// end of stream is taken for a half-close once the whole body is read.
async fn answer_infer(
    state: &AppState,
    request: &mut Request<'_>,
    (client, version): (&Arc<Peer>, Version),
    headers: &HeaderMap,
    body: Body,
) -> Result<Tensor<f32>, ApiError> {
    require_json(headers)?;
    require_identity(headers)?;
    let body = read_body(body, &state.config).await?;
    let _awaiting = client.awaiting(version);
    // The slot is held until the request has its outcome (in `infer`).
    if !request.admit() {
        let message = format!(
            "{} requests are in flight, the limit; retry later",
            state.config.max_in_flight
        );
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            message,
        ));
    }
    let data = validate(&body, state.config.input_len)?;
    // The JSON takes up to 8 times the bytes of the data parsed from it: it is not kept
    // while the request waits for the device.
    drop(body);
    let timeout = state.config.device_timeout;
    // Dropping the model's future on timeout is what frees the slot: npu-rs keeps the memory
    // the device may still touch until it is done, and hands the blocks back to the pools then.
    let output = tokio::time::timeout(timeout, state.model.run(&data))
        .await
        .map_err(|_| {
            tracing::error!(?timeout, "the device did not finish a request in time");
            let message = format!("the device did not finish within {timeout:?}");
            ApiError::new(StatusCode::GATEWAY_TIMEOUT, "device_timeout", message)
        })?
        .map_err(|err| match err {
            RunError::NoRoom(pool) => {
                let message = format!(
                    "no {pool} memory is free for another request (requests given up on still \
                     have the device using theirs); retry later"
                );
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
            }
            RunError::Device(err) => {
                // The client gets no ACL function names or codes: the detail is for the
                // operator.
                tracing::error!(error = %err, "the model failed on the device");
                let message = "the device failed to run the model";
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "device_error", message)
            }
        })?;
    let data = finite_output(output)?;
    Ok(Tensor {
        dtype: "f32".into(),
        shape: vec![data.len()],
        data,
    })
}

/// `GET /v1/model`: what the model takes and computes.
async fn model(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let config = &state.config;
    Json(json!({
        "dtype": "f32",
        "shape": [config.input_len],
        "computes": format!("{} * x + bias", config.alpha),
        "max_body_bytes": config.body_limit(),
    }))
}

/// `GET /stats`: the counters (see [`AppState::stats`]).
async fn stats(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(state.stats())
}

/// The answer for a path no route has.
async fn not_found(uri: Uri) -> ApiError {
    let message = format!(
        "no route for {}; the routes are POST /v1/infer, GET /v1/model and GET /stats",
        uri.path()
    );
    ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
}

/// The answer for a route's path with a method it does not take; axum adds `Allow`.
async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    let message = format!(
        "{method} is not allowed on {}; the Allow header lists the methods that are",
        uri.path()
    );
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        message,
    )
}

/// The routes; every answer that is not a success is an [`ApiError`].
///
/// `POST /v1/infer` needs the connection's [`Peer`](crate::peer::Peer) in the request's
/// extensions, which `serve_http` inserts for each connection: served any other way (axum's
/// own `serve`, a test calling the router directly), every inference answers 500.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/infer", post(infer))
        .route("/v1/model", get(model))
        .route("/stats", get(stats))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_handler_that_panics_is_answered_500_and_counted_failed() {
        let requests = crate::requests::Requests::new(1);
        let handler = async {
            let mut request = requests.receive();
            assert!(request.admit());
            if requests.in_flight() == 1 {
                panic!("a bug in the handler");
            }
            request.finish(Outcome::Served);
            Ok::<_, Infallible>(StatusCode::OK.into_response())
        };
        let Ok(answer) = answer_panics(handler).await;
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "internal_error", "{body}");
        let counts = requests.snapshot();
        assert_eq!(
            (counts.failed, counts.cancelled),
            (1, 0),
            "failed, not cancelled"
        );
        assert_eq!(counts.in_flight, 0, "the slot is back");
        // An answer passes through untouched.
        let answered = answer_panics(async { Ok::<_, Infallible>(StatusCode::OK.into_response()) });
        let Ok(answer) = answered.await;
        assert_eq!(answer.status(), StatusCode::OK);
    }
}
