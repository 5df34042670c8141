//! HTTP/2 and upgrade requests to a server that speaks HTTP/1.1 only.

use serde_json::json;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_closed_unanswered_and_upgrades_are_answered_as_http1() {
    let server = Server::start(small(), loopback()).await.unwrap();
    // HTTP/2 with prior knowledge: its preface, then a SETTINGS frame.
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let reply = raw(server.addr, preface).await;
    assert!(reply.is_none(), "{reply:?}");
    let upgrades = [
        "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    ];
    for headers in upgrades {
        // `request` asks for Connection: close too; hyper reads both.
        let reply = raw(server.addr, request("GET", "/v1/model", headers, ""))
            .await
            .expect("an answer");
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.body["shape"], json!([4]), "{reply:?}");
        assert_eq!(reply.header("upgrade"), None, "{reply:?}");
    }
    server.stop().await.unwrap();
}
