//! The checks of a request's headers and body against the wire format and the model, and of
//! the model's output against what JSON can carry: pure functions, apart from the I/O.

use axum::http::{HeaderMap, StatusCode, header};

use crate::api_error::ApiError;
use crate::tensor::Tensor;

/// Refuses a request whose `Content-Type` is not `application/json` (parameters such as
/// `charset` allowed).
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE);
    let essence = content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    let got = content_type.map_or("none".to_owned(), |value| format!("{value:?}"));
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the body must be Content-Type: application/json; got {got}"),
    ))
}

/// Refuses a request whose body is content-encoded (`Content-Encoding` other than `identity`):
/// the server decodes none, and reading a compressed body as JSON would only give a puzzling
/// `bad_json`.
pub(crate) fn require_identity(headers: &HeaderMap) -> Result<(), ApiError> {
    let encodings = headers.get_all(header::CONTENT_ENCODING);
    let Some(encoding) = encodings.iter().find(|value| {
        let value = value.to_str().unwrap_or("?");
        // Empty list elements are allowed (RFC 9110, 5.6.1) and name no coding.
        value
            .split(',')
            .map(str::trim)
            .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"))
    }) else {
        return Ok(());
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the body must not be content-encoded; got Content-Encoding: {encoding:?}"),
    ))
}

/// Checks a request body against the model; returns its data.
pub(crate) fn validate(body: &[u8], input_len: usize) -> Result<Vec<f32>, ApiError> {
    let tensor: Tensor<f64> = serde_json::from_slice(body)
        .map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", err.to_string()))?;
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    if tensor.dtype != "f32" {
        let message = format!(
            "dtype {:?} is not supported; the model takes \"f32\"",
            tensor.dtype
        );
        return Err(ApiError::new(unprocessable, "unsupported_dtype", message));
    }
    if tensor.shape != [input_len] {
        let message = format!("shape {:?}: the model takes [{input_len}]", tensor.shape);
        return Err(ApiError::new(unprocessable, "wrong_length", message));
    }
    if tensor.data.len() != input_len {
        let message = format!(
            "data has {} elements: the model takes {input_len}",
            tensor.data.len()
        );
        return Err(ApiError::new(unprocessable, "wrong_length", message));
    }
    let finite = |(i, x): (usize, f64)| {
        let narrowed = x as f32;
        if narrowed.is_finite() {
            return Ok(narrowed);
        }
        let message = format!(
            "data[{i}] = {x:e} is beyond f32's finite range (±{:e})",
            f32::MAX
        );
        Err(ApiError::new(unprocessable, "input_not_finite", message))
    };
    tensor.data.into_iter().enumerate().map(finite).collect()
}

/// Refuses an output that overflowed f32, which JSON could only carry as `null`.
pub(crate) fn finite_output(output: Vec<f32>) -> Result<Vec<f32>, ApiError> {
    match output.iter().position(|y| !y.is_finite()) {
        None => Ok(output),
        Some(i) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "output_not_finite",
            format!("output[{i}] overflows f32: the input is too large for the model"),
        )),
    }
}
