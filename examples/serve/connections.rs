//! The server's count of its connections: what `GET /stats` reports of them, and what the
//! connection limit and the tests read.

use tokio::sync::watch;

/// The server's connections, for `GET /stats` (and watched by the tests).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Connections {
    /// Accepted and not yet closed.
    pub(crate) open: usize,
    /// Closed because the client did not take its answers within the write timeout.
    pub(crate) write_timeouts: u64,
    /// Refused with 503 because `max_connections` were open.
    pub(crate) refused: u64,
}

/// Counts a connection as open for as long as it lives, also when its task is aborted.
pub(crate) struct OpenConnection(pub(crate) watch::Sender<Connections>);

impl OpenConnection {
    pub(crate) fn new(connections: &watch::Sender<Connections>) -> OpenConnection {
        connections.send_modify(|c| c.open += 1);
        OpenConnection(connections.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.send_modify(|c| c.open -= 1);
    }
}

/// Whether a connection ended because its write timeout ran out (an I/O error of
/// kind `TimedOut`; hyper's header timeout is an error of hyper's own). The kernel's own
/// `ETIMEDOUT`, a peer gone without a word while an answer was being sent, counts too: the
/// answer was not delivered either way.
pub(crate) fn timed_out(err: &hyper::Error) -> bool {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}
