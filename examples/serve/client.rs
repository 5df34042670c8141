//! A minimal HTTP/1.1 client over one keep-alive connection (hyper's client connection),
//! for the load generator and the tests.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

pub(crate) struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    pub(crate) async fn open(addr: SocketAddr) -> Result<Connection, Error> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (sender, connection) = handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(connection);
        Ok(Connection { sender })
    }

    /// Sends one request and reads the whole answer.
    pub(crate) async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), Error> {
        self.sender.ready().await?;
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}
