//! Reading a request's body, the one place where a client can make the server wait for
//! bytes, so its limits (size and time) are kept here together.

use std::error::Error;
use std::io;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::api_error::ApiError;
use crate::config::Config;

/// Reads the whole body within the body timeout and the size limit.
pub(crate) async fn read_body(body: Body, config: &Config) -> Result<Bytes, ApiError> {
    let limit = config.body_limit();
    let too_large = || {
        let message = format!("the body is over the limit of {limit} bytes");
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    };
    // A declared length over the limit is refused before any of the body is read, so that a
    // client cannot make the server wait for a body it would refuse anyway.
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let read = tokio::time::timeout(config.body_timeout, Limited::new(body, limit).collect());
    match read.await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "reading a request body failed");
            let message = "the body could not be read";
            let mut refusal = ApiError::new(StatusCode::BAD_REQUEST, "bad_body", message);
            refusal.client_gone = connection_ended(&*err);
            Err(refusal)
        }
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the body did not arrive within {} ms",
                config.body_timeout.as_millis()
            ),
        )),
    }
}

/// Whether a body failed because its client ended the connection (closed, reset or
/// half-closed it) rather than because it was malformed (a bad chunk size, say): hyper reports
/// both as a body error, with the I/O error under it.
fn connection_ended(err: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            );
        }
        cause = err.source();
    }
    false
}
