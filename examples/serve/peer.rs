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
//! 15.2) and to which a closed socket answers with a reset. An end of stream behind pipelined
//! requests is seen too: the watcher reads those requests aside (up to the connection's
//! buffer size) for hyper to read first once the answer is written.
//!
//! What only writing the answer can find gone: an HTTP/1.0 client that closes, and one whose
//! end of stream comes behind more pipelined bytes than the read-aside holds. A closed socket
//! and a half-closed one send the same FIN, and tell themselves apart only by answering bytes
//! sent to them (a reset, or an acknowledgement): TCP's keep-alive probes carry no new byte,
//! and a socket that closed acknowledges them as one that half-closed does. The interim answer
//! is the one byte string HTTP lets the server send before its answer, and HTTP/1.0 has no
//! interim answers (RFC 9110, 15.2: none may be sent to an HTTP/1.0 client), so such a client
//! can be asked only with its answer. This is the protocol's limit, not the single task's:
//! any design must send bytes to tell, and HTTP/1.0 allows none but the answer.

use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use axum::http::Version;
use bytes::BufMut;
use tokio::io::{Interest, ReadBuf};
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
    /// Bytes the watcher read off the socket behind a request awaiting its answer (the next
    /// requests, pipelined) to see whether an end of stream follows them: hyper's reads take
    /// them before the socket's.
    read_aside: Mutex<Vec<u8>>,
    /// The most `read_aside` holds: as much as hyper's own read buffer.
    read_aside_limit: usize,
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
    /// A connection's client; at most `read_aside_limit` bytes of pipelined requests are
    /// read aside while a request awaits its answer.
    pub(crate) fn new(tcp: TcpStream, read_aside_limit: usize) -> Arc<Peer> {
        Arc::new(Peer {
            tcp,
            awaiting: watch::Sender::new(None),
            output_blocked: AtomicBool::new(false),
            probe_left: Mutex::new(&[]),
            read_aside: Mutex::new(Vec::new()),
            read_aside_limit,
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
        loop {
            match self.tcp.peek(&mut [0]).await {
                Err(err) => return err,
                // The end of the stream. An HTTP/1.0 client may not be sent an interim answer:
                // only writing its answer will tell whether it is still there.
                Ok(0) => {
                    if version >= Version::HTTP_11
                        && let Err(err) = self.probe().await
                    {
                        return err;
                    }
                    break;
                }
                // The next requests, pipelined: read aside to see what comes behind them. Once
                // the read-aside is full, only a reset says the client went away.
                Ok(_) => match self.read_aside() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(err) => return err,
                },
            }
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

    /// Reads what the socket has (as much as the read-aside has room for) into the read-aside:
    /// `false` once it is full. A read that finds nothing after all (stale readiness) or the
    /// end of the stream reads nothing; the watcher's next peek waits for or sees them.
    fn read_aside(&self) -> io::Result<bool> {
        let mut aside = lock(&self.read_aside);
        let room = self.read_aside_limit.saturating_sub(aside.len());
        if room == 0 {
            return Ok(false);
        }
        aside.reserve(room);
        match self.tcp.try_read_buf(&mut (&mut *aside).limit(room)) {
            Err(err) if err.kind() != io::ErrorKind::WouldBlock => Err(err),
            _ => Ok(true),
        }
    }

    /// Moves what was read aside into `buf`, as much as fits: `false` if nothing was.
    pub(crate) fn take_read_aside(&self, buf: &mut ReadBuf<'_>) -> bool {
        let mut aside = lock(&self.read_aside);
        if aside.is_empty() {
            return false;
        }
        let n = aside.len().min(buf.remaining());
        buf.put_slice(&aside[..n]);
        if n == aside.len() {
            // Its memory goes too: pipelining is rare, and a connection keeps no more than it
            // needs.
            *aside = Vec::new();
        } else {
            aside.drain(..n);
        }
        true
    }

    fn probe_left(&self) -> MutexGuard<'_, &'static [u8]> {
        lock(&self.probe_left)
    }
}

/// Locks one of a `Peer`'s mutexes, poisoned or not: each guards a plain value (a slice, a
/// vector of bytes) that every panic leaves whole, and none is held across a call that could
/// leave it half-changed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
