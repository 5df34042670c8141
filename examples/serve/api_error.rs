//! The one shape of every error answer, so that the handlers, the fallbacks and the
//! connection refusal cannot spell the error JSON two ways.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A typed error answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    code: &'static str,
    message: String,
    /// The client reset its connection before the request was whole, so the answer goes
    /// nowhere: `GET /stats` counts the request with those dropped for a client gone, not with
    /// the requests refused (the rule is [`crate::body`]'s).
    pub(crate) client_gone: bool,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            client_gone: false,
        }
    }

    /// The answer's JSON body.
    pub(crate) fn body(&self) -> serde_json::Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        // `Connection: close` is not decided here but by whether the request's body was read
        // ([`crate::body::WatchedBody`]), whatever the answer.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
