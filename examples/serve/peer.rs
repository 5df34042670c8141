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
//! requests is seen too, however many bytes they are, without reading them: the socket's
//! readiness says "read closed" once the FIN is in, whatever is queued before it, and the
//! bytes stay in the kernel's receive buffer (where TCP's flow control holds the client back)
//! for hyper to read once the answer is written, so a connection holds no second buffer of
//! them.
//!
//! What only writing the answer can find gone: an HTTP/1.0 client that closes (and one that
//! vanishes without a FIN or a reset, which nothing but the connection's timeouts can find:
//! it sends nothing at all). A closed socket
//! and a half-closed one send the same FIN, and tell themselves apart only by answering bytes
//! sent to them (a reset, or an acknowledgement): TCP's keep-alive probes carry no new byte,
//! and a socket that closed acknowledges them as one that half-closed does. The interim answer
//! is the one byte string HTTP lets the server send before its answer, and HTTP/1.0 has no
//! interim answers (RFC 9110, 15.2: none may be sent to an HTTP/1.0 client), so such a client
//! can be asked only with its answer. This is the protocol's limit, not the single task's:
//! any design must send bytes to tell, and HTTP/1.0 allows none but the answer.

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use axum::http::Version;
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
    /// Whether the watcher took the socket's read readiness with bytes unread in it (pipelined
    /// requests), to wait for what comes after them: tokio would then not wake hyper's next
    /// read for those bytes, so hyper's reads ask the socket itself until it has nothing.
    readiness_taken: AtomicBool,
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
    /// A connection's client.
    pub(crate) fn new(tcp: TcpStream) -> Arc<Peer> {
        Arc::new(Peer {
            tcp,
            awaiting: watch::Sender::new(None),
            output_blocked: AtomicBool::new(false),
            probe_left: Mutex::new(&[]),
            readiness_taken: AtomicBool::new(false),
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
        // tokio keeps "read closed" once the FIN (or a reset) is in, and clears it never, so
        // it shows behind any pipelined bytes still unread.
        loop {
            match self.tcp.ready(Interest::READABLE).await {
                Err(err) => return err,
                Ok(ready) if ready.is_read_closed() => break,
                // Only bytes (the next requests, pipelined), left in the socket for hyper.
                // Taking the readiness makes the next wait end on what comes after them: more
                // bytes, an end of stream or a reset.
                Ok(_) => self.take_read_readiness(),
            }
        }
        // A reset reads as closed too, and sets the socket's error.
        match self.tcp.take_error() {
            Ok(Some(err)) | Err(err) => return err,
            Ok(None) => {}
        }
        // The end of the stream. An HTTP/1.0 client may not be sent an interim answer: only
        // writing its answer will tell whether it is still there.
        if version >= Version::HTTP_11
            && let Err(err) = self.probe().await
        {
            return err;
        }
        // A reset sets the socket's error, which the readiness already read closed does not
        // tell.
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

    /// Clears the socket's read readiness (and says so for hyper's reads), leaving the bytes
    /// in it: the watcher's next wait then ends only on a new event.
    fn take_read_readiness(&self) {
        self.readiness_taken.store(true, Ordering::Relaxed);
        // A `WouldBlock` from `try_io` is tokio's one way to clear readiness; an event that
        // came since the readiness was read is kept.
        let _ = self.tcp.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }

    /// For hyper's read: once the watcher took the read readiness, reads straight from the
    /// socket into `buf`, bypassing tokio's readiness, until the socket has nothing left
    /// (`WouldBlock`, and the readiness is tokio's again); `None` when the readiness was not
    /// taken. Like the watcher, hyper's reads run in the connection's one task, so the flag
    /// needs no ordering.
    pub(crate) fn read_untracked(&self, buf: &mut ReadBuf<'_>) -> Option<io::Result<()>> {
        if !self.readiness_taken.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: `recv` only writes bytes into the slice (socket2 takes it as
        // `MaybeUninit<u8>` for that reason), so nothing initialised is de-initialised.
        let unfilled: &mut [MaybeUninit<u8>] = unsafe { buf.unfilled_mut() };
        match socket2::SockRef::from(&self.tcp).recv(unfilled) {
            Ok(n) => {
                // SAFETY: `recv` wrote the first `n` bytes of the unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                Some(Ok(()))
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                self.readiness_taken.store(false, Ordering::Relaxed);
                None
            }
            Err(err) => Some(Err(err)),
        }
    }

    fn probe_left(&self) -> MutexGuard<'_, &'static [u8]> {
        lock(&self.probe_left)
    }
}

/// Locks a `Peer`'s mutex, poisoned or not: it guards a plain value (a slice) that every
/// panic leaves whole, and is held across no call that could leave it half-changed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
