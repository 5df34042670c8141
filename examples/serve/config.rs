//! The server's settings, apart from the code that reads them, so that the tests and the
//! self-load mode can build a server of their own size.

use std::time::Duration;

/// How the server is set up.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The device the model runs on.
    pub(crate) device: u32,
    /// The model's input (and output) length.
    pub(crate) input_len: usize,
    /// Requests admitted at once; more get 503.
    pub(crate) max_in_flight: usize,
    /// Streams the requests are spread over.
    pub(crate) streams: usize,
    /// The model's scale factor.
    pub(crate) alpha: f32,
    /// How long a connection may take to send a request's head once it is ready for one
    /// (accepted, or its last answer written): the whole head, however slowly it drips, and
    /// the keep-alive idle time before it too.
    pub(crate) header_timeout: Duration,
    /// How long a request may take to send its whole body once the handler reads it.
    pub(crate) body_timeout: Duration,
    /// How long a client may take, once the socket stops taking its answer, to take all that
    /// the server holds for it (the answer and those of pipelined requests) before the
    /// connection is closed. Counted from the first write the socket refused, not from the last
    /// one it took, so a client that reads a trickle gains nothing. An answer larger than the
    /// socket's buffers must therefore be taken whole within it, however steadily the client
    /// reads: this server's answers are small, and one with large answers would size it so.
    pub(crate) write_timeout: Duration,
    /// How long a shutdown waits for the connections to finish their requests before closing
    /// them.
    pub(crate) drain_timeout: Duration,
    /// How long an admitted request may wait for the device (copies and kernels) before it is
    /// answered 504 and its slot freed: a stalled or lost device then costs each request this
    /// much, instead of holding every admission slot for good.
    pub(crate) device_timeout: Duration,
    /// Connections open at once; one more is answered 503 and closed. The server raises the
    /// process's open-file limit (`ulimit -n`) to cover it where the hard limit allows, and
    /// serves with a lower one where it does not, so that accepting never fails for want of a
    /// descriptor.
    pub(crate) max_connections: usize,
    /// The most a connection buffers of what it reads or writes (hyper's `max_buf_size`, at
    /// least 8192: `Server::start` raises a smaller one): a request head longer than this is
    /// refused with 431.
    pub(crate) max_buffer: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: 0,
            input_len: 1024,
            max_in_flight: 64,
            streams: 4,
            alpha: 2.0,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            device_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_buffer: 64 << 10,
        }
    }
}

impl Config {
    /// The largest request body accepted, in bytes.
    pub(crate) fn body_limit(&self) -> usize {
        32 * self.input_len + 1024
    }
}
