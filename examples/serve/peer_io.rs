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
        // Bytes the watcher left in the socket after taking its readiness are not announced.
        if let Some(read) = self.0.read_untracked(buf) {
            return Poll::Ready(read);
        }
        loop {
            ready!(self.0.tcp.poll_read_ready(cx))?;
            // Straight into the unfilled part, initialised or not: hyper-util's `TokioIo` hands
            // each read a fresh `ReadBuf` over hyper's spare capacity that counts none of it
            // initialised, so `initialize_unfilled` would zero all of it (up to the whole
            // buffer) on every read. tokio's `ReadBuf` is a `BufMut` whose unfilled part the
            // read writes as `UninitSlice`, and `try_read_buf` marks only what it read as
            // initialised and filled: no `unsafe` here, and no zeroing.
            match self.0.tcp.try_read_buf(buf) {
                Ok(_) => return Poll::Ready(Ok(())),
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

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_read_initialises_only_what_it_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(b"abc").await.unwrap();
        let mut io = PeerIo(Peer::new(server));
        // As hyper-util's `TokioIo` hands it over: spare capacity, none of it initialised.
        let mut spare = [MaybeUninit::<u8>::uninit(); 8192];
        let mut buf = ReadBuf::uninit(&mut spare);
        let mut read = 0;
        while read < 3 {
            std::future::poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut buf))
                .await
                .unwrap();
            assert!(
                buf.filled().len() > read,
                "an end of stream before the bytes"
            );
            read = buf.filled().len();
        }
        assert_eq!(buf.filled(), b"abc");
        // What a zero-fill would have initialised: the whole unfilled part.
        assert_eq!(
            buf.initialized().len(),
            3,
            "only the bytes read are initialised"
        );
        drop(client);
        let mut rest = Vec::new();
        io.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}
