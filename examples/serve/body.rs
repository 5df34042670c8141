//! Reading a request's body, the one place where a client can make the server wait for
//! bytes, so its limits (size and time) are kept here together.

use std::error::Error;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::BytesMut;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Frame, Incoming, SizeHint};

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
    let read = tokio::time::timeout(config.body_timeout, collect(Limited::new(body, limit)));
    match read.await {
        Ok(Ok(whole)) => Ok(whole),
        Ok(Err(err)) if err.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "reading a request body failed");
            let message = "the body could not be read";
            let mut refusal = ApiError::new(StatusCode::BAD_REQUEST, "bad_body", message);
            refusal.client_gone = client_gone(&*err);
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

/// The least a body's buffer starts with when its length is declared: one read's worth.
const FIRST_ROOM: usize = 8 << 10;

/// Collects `body` into one buffer, holding it once: each frame is copied in as it comes and
/// dropped, so that a body is never in its frames and a whole copy at once (`BodyExt::collect`
/// keeps every frame until `to_bytes` copies them all). A declared length sizes the buffer at
/// the start, up to a few times the first frame (it is within the limit: [`read_body`] checked
/// it); a body that comes whole in one frame is kept as it is, without a copy.
async fn collect<B>(mut body: B) -> Result<Bytes, B::Error>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    let declared = body.size_hint().exact();
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        // Trailers carry no bytes of the body.
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if whole.is_empty() && body.is_end_stream() {
            return Ok(data);
        }
        if whole.capacity() == 0 {
            // Sized for the declared length, but not beyond a few times what has come: a
            // client that declares the limit and sends a byte at a time holds no more than
            // it sent until the body timeout (the buffer doubles as the body comes).
            let expected = declared.and_then(|n| usize::try_from(n).ok());
            let room = expected
                .unwrap_or(0)
                .min(data.len().saturating_mul(4).max(FIRST_ROOM));
            whole.reserve(room.max(data.len()));
        }
        whole.extend_from_slice(&data);
    }
    Ok(whole.freeze())
}

/// Whether a body failed because its client is gone (it reset the connection) rather than
/// because the body was malformed (a bad chunk size, say) or cut short by an end of stream:
/// hyper reports all of them as a body error, with the I/O error under it.
///
/// The rule that keeps the answer and `GET /stats` in agreement: a request is counted under
/// `requests.cancelled` only when the server knows its client gone before answering, and a
/// request it answers is counted by that answer. A reset is the kernel's word that the client
/// is gone: its 400 goes nowhere, and the request is cancelled. An end of stream mid-body (a
/// FIN) says only that the client sends nothing more. A client that half-closed still reads,
/// and takes its 400 `bad_body`; one that closed is told from it only by the reset its
/// socket answers bytes with, so not before the answer is written. Both are answered 400 and
/// counted under `requests.rejected`, as a malformed body is: no request was made whole, and
/// the server said so.
fn client_gone(err: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            );
        }
        cause = err.source();
    }
    false
}

/// A request's body as the handlers get it, which records whether it was read to its end: an
/// answer given before that (refused on its headers, its path or its method, or its body too
/// large, too slow, malformed or cut short) is the connection's last, since the rest of the
/// body stands between it and the next request. hyper closes the connection after such an
/// answer (unless the rest of the body happens to be in its buffer already, which it then
/// drops), silently: a keep-alive client would send its next request into the close, and a
/// POST is not retried for it. [`BodyRead::close_unless_read`] makes the answer the last one
/// always, and say so (`Connection: close`).
pub(crate) struct WatchedBody {
    body: Incoming,
    read: Arc<AtomicBool>,
}

/// Whether a [`WatchedBody`] was read to its end, kept by the connection for its answer.
pub(crate) struct BodyRead(Arc<AtomicBool>);

impl WatchedBody {
    pub(crate) fn new(body: Incoming) -> (WatchedBody, BodyRead) {
        // A request without a body (none declared, or a zero length) has nothing unread.
        let read = Arc::new(AtomicBool::new(body.is_end_stream()));
        let watched = WatchedBody {
            body,
            read: read.clone(),
        };
        (watched, BodyRead(read))
    }
}

impl HttpBody for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        // The end comes as `None`, or as `is_end_stream` right after the last frame; an error
        // is no end: the connection cannot carry another request after it.
        if matches!(frame, Poll::Ready(None)) || self.body.is_end_stream() {
            self.read.store(true, Ordering::Relaxed);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl BodyRead {
    /// Marks `answer` as the connection's last (`Connection: close`) unless its request's body
    /// was read to its end.
    pub(crate) fn close_unless_read(&self, answer: &mut Response) {
        if !self.0.load(Ordering::Relaxed) {
            let close = HeaderValue::from_static("close");
            answer.headers_mut().insert(header::CONNECTION, close);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A frame's bytes, counted alive until the last `Bytes` of them is dropped.
    struct Counted(Vec<u8>, Arc<AtomicUsize>);

    impl AsRef<[u8]> for Counted {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A body of declared length handed out in frames, recording the most frames still alive
    /// when the next one is handed out.
    struct Frames {
        left: VecDeque<Vec<u8>>,
        alive: Arc<AtomicUsize>,
        most_alive_before_next: Arc<AtomicUsize>,
        declared: u64,
    }

    impl Frames {
        fn new(frames: &[&[u8]]) -> (Frames, Arc<AtomicUsize>, Arc<AtomicUsize>) {
            let (alive, most) = (Arc::default(), Arc::<AtomicUsize>::default());
            let body = Frames {
                left: frames.iter().map(|f| f.to_vec()).collect(),
                alive: Arc::clone(&alive),
                most_alive_before_next: Arc::clone(&most),
                declared: frames.iter().map(|f| f.len() as u64).sum(),
            };
            (body, alive, most)
        }
    }

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let Some(bytes) = self.left.pop_front() else {
                return Poll::Ready(None);
            };
            let before = self.alive.fetch_add(1, Ordering::Relaxed);
            self.most_alive_before_next
                .fetch_max(before, Ordering::Relaxed);
            let counted = Counted(bytes, Arc::clone(&self.alive));
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_owner(counted)))))
        }

        fn is_end_stream(&self) -> bool {
            self.left.is_empty()
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(self.declared)
        }
    }

    #[tokio::test]
    async fn a_body_is_held_once_while_it_is_collected() {
        let parts: [&[u8]; 4] = [
            b"{\"dtype\":",
            b"\"f32\",",
            b"\"shape\":[1],",
            b"\"data\":[1]}",
        ];
        let (body, alive, most_alive) = Frames::new(&parts);
        let Ok(whole) = collect(body).await;
        assert_eq!(whole, parts.concat());
        // Each frame was dropped once copied, before the next came: never two at once, nor a
        // frame and the whole copy of the ones before it.
        assert_eq!(most_alive.load(Ordering::Relaxed), 0);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
        // A body in one frame is that frame, not a copy of it.
        let (body, alive, _) = Frames::new(&[b"[1]"]);
        let Ok(whole) = collect(body).await;
        assert_eq!(alive.load(Ordering::Relaxed), 1, "the frame itself");
        drop(whole);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
    }

    /// The room a collected body's buffer was given, read back from the unique `Bytes`.
    fn room_of(whole: Bytes) -> usize {
        whole.try_into_mut().expect("the only handle").capacity()
    }

    #[tokio::test]
    async fn a_declared_length_sizes_the_buffer_only_up_to_a_few_times_what_came_first() {
        // Declared within a few times the first frame: reserved whole at the start, so the
        // buffer never grows while the body comes.
        let frame = [7; 10_000];
        let (body, ..) = Frames::new(&[&frame, &frame]);
        let Ok(whole) = collect(body).await;
        assert_eq!(whole.len(), 20_000);
        assert_eq!(room_of(whole), 20_000);
        // A client that declares a gigabyte and sends a byte: one read's worth of room, not
        // the declared length.
        let (mut body, ..) = Frames::new(&[b"a", b"b"]);
        body.declared = 1 << 30;
        let Ok(whole) = collect(body).await;
        assert_eq!(whole, &b"ab"[..]);
        assert_eq!(room_of(whole), FIRST_ROOM);
        // Four times the first frame when that is more than one read's worth.
        let (mut body, ..) = Frames::new(&[&frame, b"b"]);
        body.declared = 1 << 30;
        let Ok(whole) = collect(body).await;
        assert_eq!(room_of(whole), 40_000);
    }
}
