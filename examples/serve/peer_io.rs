//! hyper's I/O over a connection's socket, which the connection's task shares to watch the
//! client ([`crate::peer`]): tokio's `TcpStream` reads and writes only through `&mut`, which
//! hyper's ownership of it would leave to hyper alone. It also bounds how long the client may
//! leave its answers untaken, which hyper does not.

use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::peer::Peer;

/// A connection's socket as hyper reads and writes it.
pub(crate) struct PeerIo {
    peer: Arc<Peer>,
    write_timeout: Duration,
    /// Set by the first write the socket refuses, and cleared only once hyper has handed it
    /// everything it holds (a flush that completes): until then the client has this long to
    /// take it all. A deadline that each write making progress put off (tokio-io-timeout's)
    /// would let a client that takes a few bytes now and then hold its connection, its
    /// answers and the requests pipelined behind them for ever.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl PeerIo {
    /// hyper's I/O over `peer`'s socket, whose client has `write_timeout` to take what hyper
    /// holds for it once the socket stops taking it.
    pub(crate) fn new(peer: Arc<Peer>, write_timeout: Duration) -> PeerIo {
        PeerIo {
            peer,
            write_timeout,
            stalled: None,
        }
    }

    /// Passes on a write (or flush) that is done, and turns one that must wait into the
    /// write timeout's error (`TimedOut`, which `GET /stats` counts) once the stall has lasted
    /// the timeout.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            return polled;
        }
        let timeout = self.write_timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(stalled.as_mut().poll(cx));
        let message = format!("the client did not take its answer within {timeout:?}");
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)))
    }

    /// Writes with `write` once the socket is writable and the probe written, and records
    /// whether hyper is left holding bytes the socket would not take.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let written = self.poll_write_unrecorded(cx, write);
        self.peer
            .output_blocked
            .store(written.is_pending(), Ordering::Relaxed);
        written
    }

    fn poll_write_unrecorded(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        ready!(self.peer.poll_probe(cx))?;
        poll_write_once(&self.peer.tcp, cx, write)
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
        if let Some(read) = self.peer.read_untracked(buf) {
            return Poll::Ready(read);
        }
        loop {
            ready!(self.peer.tcp.poll_read_ready(cx))?;
            // Straight into the unfilled part, initialised or not: hyper-util's `TokioIo` hands
            // each read a fresh `ReadBuf` over hyper's spare capacity that counts none of it
            // initialised, so `initialize_unfilled` would zero all of it (up to the whole
            // buffer) on every read. tokio's `ReadBuf` is a `BufMut` whose unfilled part the
            // read writes as `UninitSlice`, and `try_read_buf` marks only what it read as
            // initialised and filled: no `unsafe` here, and no zeroing.
            match self.peer.tcp.try_read_buf(buf) {
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
        let this = self.get_mut();
        let written = this.poll_write_with(cx, |tcp| tcp.try_write(buf));
        this.bounded(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = this.poll_write_with(cx, |tcp| tcp.try_write_vectored(bufs));
        this.bounded(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The socket buffers nothing of its own; only a probe's rest can be left to write.
        let flushed = this.peer.poll_probe(cx);
        if flushed.is_ready() {
            // hyper flushes once it has written all it holds: the client took everything.
            this.stalled = None;
            return flushed;
        }
        this.bounded(cx, flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let probed = this.peer.poll_probe(cx);
        ready!(this.bounded(cx, probed))?;
        // tokio shuts a `TcpStream` down only through `&mut`, which the shared socket is not.
        match socket2::SockRef::from(&this.peer.tcp).shutdown(Shutdown::Write) {
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
        let mut io = PeerIo::new(Peer::new(server), Duration::from_secs(10));
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

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_its_answer_a_little_at_a_time_still_has_only_the_write_timeout() {
        let timeout = Duration::from_secs(10);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Small buffers on both sides, so that each read of the client's lets more be written.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let client = socket
            .connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        socket2::SockRef::from(&server)
            .set_send_buffer_size(4096)
            .unwrap();
        let mut io = PeerIo::new(Peer::new(server), timeout);
        let start = tokio::time::Instant::now();
        // The client takes all that has come every quarter of the timeout (virtual time).
        let reader = tokio::spawn(async move {
            let mut chunk = vec![0; 1 << 16];
            loop {
                tokio::time::sleep(timeout / 4).await;
                loop {
                    match client.try_read(&mut chunk) {
                        Ok(1..) => {}
                        Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                        // Closed (or reset) by the server.
                        Ok(0) | Err(_) => return,
                    }
                }
            }
        });
        // An answer that never ends, as hyper writes one: it stalls at once, then the socket
        // takes more after each of the client's reads.
        let answer = vec![b'x'; 1 << 16];
        let (mut stalled, mut taken_while_stalled) = (false, 0);
        let err = loop {
            let written = std::future::poll_fn(|cx| {
                let written = Pin::new(&mut io).poll_write(cx, &answer);
                stalled |= written.is_pending();
                written
            });
            match written.await {
                Ok(n) => taken_while_stalled += if stalled { n } else { 0 },
                Err(err) => break err,
            }
            assert!(
                start.elapsed() < 10 * timeout,
                "no timeout after {:?}",
                start.elapsed()
            );
        };
        let elapsed = start.elapsed();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        // The client took bytes during the stall, and that did not put the timeout off.
        assert!(taken_while_stalled > 0);
        assert!(
            elapsed >= timeout && elapsed < timeout + timeout / 4,
            "{elapsed:?}"
        );
        drop(io);
        reader.await.unwrap();
    }
}
