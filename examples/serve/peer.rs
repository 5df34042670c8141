//! Telling a client that half-closed its connection to wait for its answer from one that went
//! away, which hyper cannot do.
//!
//! Both send the same end of stream (a FIN): it says only that the client will send nothing
//! more. hyper takes every such client for gone (`half_close` off: the connection is closed and
//! the request dropped) or every one for waiting (`half_close` on: hyper stops reading until the
//! answer is written, so it does not even see a reset, and a client gone is found only when its
//! answer is written). The server turns `half_close` on and watches the client itself while a
//! request awaits its answer: a reset ends the connection at once; an end of stream is answered
//! with an interim `100 Continue`, which an HTTP/1.1 client must take and may ignore (RFC 9110,
//! 15.2) and to which a closed socket answers with a reset.

use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use axum::http::Version;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// The interim answer that asks a client whose end of stream came while its request awaited
/// its answer whether it is still there: a closed socket answers it with a reset.
const PROBE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A connection's client as the server sees it: shared by hyper's I/O ([`crate::peer_io`]),
/// the request's handler (which says when the request awaits its answer) and the connection's
/// task (which watches the client meanwhile).
pub(crate) struct Peer {
    pub(crate) tcp: TcpStream,
    /// The version of the request that awaits its answer, whose whole body was read (so the
    /// client owes nothing more and its end of stream may be a half-close); `None` otherwise.
    awaiting: watch::Sender<Option<Version>>,
    /// Whether hyper's last write found the socket full: hyper then holds bytes of an answer
    /// that a probe must not overtake.
    pub(crate) output_blocked: AtomicBool,
    /// What the socket has not taken yet of a probe: written before any byte of hyper's.
    probe_left: Mutex<&'static [u8]>,
}

/// Marks a connection's request as awaiting its answer for as long as it lives: dropped when the
/// handler returns (or is dropped), before hyper writes a byte of the answer.
pub(crate) struct AwaitingAnswer(Arc<Peer>);

impl Drop for AwaitingAnswer {
    fn drop(&mut self) {
        self.0.awaiting.send_replace(None);
    }
}

impl Peer {
    pub(crate) fn new(tcp: TcpStream) -> Arc<Peer> {
        Arc::new(Peer {
            tcp,
            awaiting: watch::Sender::new(None),
            output_blocked: AtomicBool::new(false),
            probe_left: Mutex::new(&[]),
        })
    }

    /// Called by the handler once it has the whole body of a request of `version`.
    pub(crate) fn awaiting(self: &Arc<Self>, version: Version) -> AwaitingAnswer {
        self.awaiting.send_replace(Some(version));
        AwaitingAnswer(self.clone())
    }

    /// Resolves, with the reason, once the client is gone while a request awaits its answer; the
    /// connection's task then drops the connection, and with it the request. A client that only
    /// half-closed never resolves it.
    pub(crate) async fn until_gone(&self) -> io::Error {
        let mut awaiting = self.awaiting.subscribe();
        let mut answered = self.awaiting.subscribe();
        loop {
            // `self` holds the sender: the receivers never see it closed.
            let Ok(Some(version)) = awaiting.wait_for(Option::is_some).await.map(|v| *v) else {
                return std::future::pending().await;
            };
            tokio::select! {
                _ = answered.wait_for(Option::is_none) => {}
                gone = self.gone(version) => return gone,
            }
        }
    }

    /// Watches the client of a request of `version` awaiting its answer until it is gone.
    async fn gone(&self, version: Version) -> io::Error {
        match self.tcp.peek(&mut [0]).await {
            Err(err) => return err,
            // The end of the stream. An HTTP/1.0 client may not be sent an interim answer: only
            // writing its answer will tell whether it is still there.
            Ok(0) if version >= Version::HTTP_11 => {
                if let Err(err) = self.probe().await {
                    return err;
                }
            }
            // The next request, pipelined: the client waits for its answers, and only a reset
            // says it went away.
            Ok(_) => {}
        }
        // A reset sets the socket's error, which peeking after an end of stream does not see.
        match self.tcp.ready(Interest::ERROR).await {
            Ok(_) => match self.tcp.take_error() {
                Ok(Some(err)) | Err(err) => err,
                Ok(None) => io::ErrorKind::ConnectionReset.into(),
            },
            Err(err) => err,
        }
    }

    /// Writes the probe, unless the answer is already on its way (the handler returned, or
    /// hyper still holds part of an earlier answer): its bytes then reach the client and a
    /// closed socket answers them with the same reset.
    ///
    /// The check and the start of the write cannot be split by a write of hyper's: the watcher,
    /// hyper's connection and the handler (which hyper polls inside the connection's future)
    /// all run in the connection's one task, so nothing else runs between them. Whatever of
    /// the probe the socket does not take at once is finished by hyper's next write first.
    async fn probe(&self) -> io::Result<()> {
        if self.awaiting.borrow().is_none() || self.output_blocked.load(Ordering::Relaxed) {
            return Ok(());
        }
        *self.probe_left() = PROBE;
        poll_fn(|cx| self.poll_probe(cx)).await
    }

    /// Writes what the socket has not taken yet of a probe, so that no byte of hyper's comes
    /// between its bytes: hyper's writes call this first.
    pub(crate) fn poll_probe(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut left = self.probe_left();
        while !left.is_empty() {
            let rest: &'static [u8] = &left;
            let n = ready!(crate::peer_io::poll_write_once(&self.tcp, cx, |tcp| {
                tcp.try_write(rest)
            }))?;
            *left = &rest[n..];
        }
        Poll::Ready(Ok(()))
    }

    fn probe_left(&self) -> MutexGuard<'_, &'static [u8]> {
        // Only slice assignments run under the lock: a poisoned one holds a whole slice.
        self.probe_left
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
