//! The connection loop and the running server: accepting, the limits and timeouts each
//! connection gets, and the graceful shutdown.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;

use axum::Router;
use axum::http::Request;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};

use crate::body::WatchedBody;
use crate::config::Config;
use crate::connections::{OpenConnection, timed_out};
use crate::handlers::{answer_panics, router};
use crate::open_files::fit_max_connections;
use crate::peer::Peer;
use crate::peer_io::PeerIo;
use crate::refusal::{MAX_REFUSING, refuse};
use crate::state::AppState;

/// Serves `app` over HTTP/1.1 on `listener` until `stop`, then lets the connections finish the
/// requests they are in (within `drain_timeout`, after which the ones still open are closed)
/// and returns. hyper's connection builder is used directly (not `axum::serve`) for its header
/// read timeout, which needs a timer `axum::serve` does not give (it bounds the idle time
/// between requests too: hyper starts it whenever it waits for a head); hyper has no write
/// timeout, so each connection's I/O ([`PeerIo`]) bounds how long its client may leave its
/// answers untaken. hyper's `half_close` is on, so that a
/// client that shuts down its sending side to wait for its answer gets it, and the connection's
/// task tells a client gone from it instead ([`crate::peer`]).
pub(crate) async fn serve_http(
    mut listener: TcpListener,
    app: Router,
    state: Arc<AppState>,
    stop: oneshot::Receiver<()>,
) {
    let config = &state.config;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_buf_size(config.max_buffer)
        .half_close(true);
    let connections = GracefulShutdown::new();
    // The connections' tasks, so that the ones a graceful shutdown cannot finish (a client that
    // stopped reading its answer) can be closed.
    let mut tasks = tokio::task::JoinSet::new();
    let refusals = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut stop = pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            _ = &mut stop => break,
        };
        while tasks.try_join_next().is_some() {}
        if state.connections.borrow().open >= config.max_connections {
            // Counted first: the client may have its answer as soon as `refuse` writes it.
            state.connections.send_modify(|c| c.refused += 1);
            if let Ok(refusing) = refusals.clone().try_acquire_owned() {
                let max_connections = config.max_connections;
                tasks.spawn(async move {
                    refuse(tcp, max_connections).await;
                    drop(refusing);
                });
            }
            continue;
        }
        let client = Peer::new(tcp);
        let io = PeerIo::new(client.clone(), config.write_timeout);
        let service = TowerToHyperService::new(app.clone());
        let for_handler = client.clone();
        // The handler says through the connection's `Peer` when a request awaits its answer.
        let service = service_fn(move |request: Request<Incoming>| {
            let (mut head, body) = request.into_parts();
            head.extensions.insert(for_handler.clone());
            let (body, read) = WatchedBody::new(body);
            let answer = answer_panics(service.call(Request::from_parts(head, body)));
            async move {
                let mut answer = answer.await?;
                read.close_unless_read(&mut answer);
                Ok::<_, std::convert::Infallible>(answer)
            }
        });
        let connection =
            connections.watch(http.serve_connection(TokioIo::new(Box::pin(io)), service));
        let open = OpenConnection::new(&state.connections);
        tasks.spawn(async move {
            tokio::select! {
                served = connection => if let Err(err) = served {
                    tracing::debug!(%peer, error = %err, "connection closed on an error");
                    if timed_out(&err) {
                        open.0.send_modify(|c| c.write_timeouts += 1);
                    }
                },
                // Dropping the connection drops the request that awaits its answer.
                err = client.until_gone() => {
                    tracing::debug!(%peer, error = %err, "the client went away before its answer");
                }
            }
            drop(open);
        });
    }
    drop(listener);
    if tokio::time::timeout(config.drain_timeout, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = tasks.len(),
            "closing the connections still open after the drain timeout"
        );
    }
    // Aborting a connection drops its request's future: npu-rs keeps whatever the device may
    // still touch until it is done.
    tasks.shutdown().await;
}

/// A running server.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<AppState>,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Sets up the model and serves on `addr` until [`Server::stop`], with `max_connections`
    /// fitted to the open-file limit and `max_buffer` to hyper's smallest, so that the state's
    /// config holds the limits in force.
    pub(crate) async fn start(
        mut config: Config,
        addr: SocketAddr,
    ) -> Result<Server, Box<dyn std::error::Error>> {
        config.max_connections = fit_max_connections(config.max_connections);
        // hyper panics below 8192 bytes, its smallest buffer.
        config.max_buffer = config.max_buffer.max(8192);
        let state = Arc::new(AppState::new(config).await?);
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let app = router(state.clone());
        let task = tokio::spawn(serve_http(listener, app, state.clone(), stop));
        Ok(Server {
            addr,
            state,
            shutdown,
            task,
        })
    }

    /// Graceful shutdown: stops accepting, lets the requests in flight finish, then returns.
    pub(crate) async fn stop(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(());
        self.task.await.map_err(std::io::Error::other)
    }
}
