//! hyper's I/O over a connection's socket, which the connection's task shares to watch the
//! client ([`crate::peer`]): tokio's `TcpStream` reads and writes only through `&mut`, which
//! hyper's ownership of it would leave to hyper alone.

use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::peer::Peer;

/// A connection's socket as hyper reads and writes it.
pub(crate) struct PeerIo(pub(crate) Arc<Peer>);

impl PeerIo {
    /// Writes with `write` once the socket is writable and the probe written, and records
    /// whether hyper is left holding bytes the socket would not take.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let written = self.poll_write_unrecorded(cx, write);
        self.0
            .output_blocked
            .store(written.is_pending(), Ordering::Relaxed);
        written
    }

    fn poll_write_unrecorded(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        ready!(self.0.poll_probe(cx))?;
        poll_write_once(&self.0.tcp, cx, write)
    }
}

/// Writes with `write` once the socket is writable, waiting again when readiness was stale:
/// the shared socket is written through `&TcpStream`, which tokio lets do only this way.
pub(crate) fn poll_write_once(
    tcp: &tokio::net::TcpStream,
    cx: &mut Context<'_>,
    write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        match write(tcp) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            written => return Poll::Ready(written),
        }
    }
}

impl AsyncRead for PeerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.tcp.poll_read_ready(cx))?;
            match self.0.tcp.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for PeerIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket buffers nothing of its own; only a probe's rest can be left to write.
        self.0.poll_probe(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.0.poll_probe(cx))?;
        // tokio shuts a `TcpStream` down only through `&mut`, which the shared socket is not.
        match socket2::SockRef::from(&self.0.tcp).shutdown(Shutdown::Write) {
            // The peer reset the connection first: nothing is left to shut down (as tokio's own
            // shutdown has it).
            Err(err) if err.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            shut => Poll::Ready(shut),
        }
    }
}
