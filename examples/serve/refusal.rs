//! The answer to a connection over the limit, written by hand on the raw socket because
//! such a connection is never handed to hyper.

use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api_error::ApiError;

/// Refusals answered at once at most: past this many, a connection over the limit is closed
/// unanswered, so that a flood of them costs no more than this many small tasks.
pub(crate) const MAX_REFUSING: usize = 64;

/// How long a refusal waits for the request's head, and then for the client to take the
/// answer and close.
const REFUSAL_PATIENCE: Duration = Duration::from_secs(1);

/// Answers a connection beyond `max_connections` with 503 `too_many_connections` and closes it.
/// The request's head is read first (within [`REFUSAL_PATIENCE`]), because HTTP clients take an
/// answer that comes before their request for a dead connection; then the answer is written,
/// the sending side shut down, and what the client still sends drained briefly, so that closing
/// does not reset the connection under the answer.
pub(crate) async fn refuse(mut tcp: tokio::net::TcpStream, max_connections: usize) {
    let message =
        format!("the server has {max_connections} connections open, its limit; retry later");
    let refusal = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        message,
    );
    let body = refusal.body().to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut chunk = [0; 4096];
    let mut head = Vec::new();
    let _ = tokio::time::timeout(REFUSAL_PATIENCE, async {
        while head.len() < 64 << 10 {
            let Ok(n @ 1..) = tcp.read(&mut chunk).await else {
                break;
            };
            // Only the bytes read now can complete the blank line that ends the head.
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(&chunk[..n]);
            if head[from..].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let _ = tokio::time::timeout(REFUSAL_PATIENCE, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        while tcp.read(&mut chunk).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}
