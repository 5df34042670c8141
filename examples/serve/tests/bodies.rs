//! Bodies over the size limit or late: refused without the server waiting for them.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_413_without_waiting_for_it() {
    // The default 10 s body timeout: a 408 here would mean the server waited for the body.
    let server = Server::start(small(), loopback()).await.unwrap();
    // Declares a terabyte, sends less than the limit and waits: refused on the declared
    // length alone.
    let declared = format!(
        "{JSON_POST}Content-Length: 1000000000000\r\n\r\n{}",
        "1".repeat(500)
    );
    // Declares nothing and sends one chunk past the 1152-byte limit, unterminated.
    let chunked = format!(
        "{JSON_POST}Transfer-Encoding: chunked\r\n\r\n7d0\r\n{}\r\n",
        "1".repeat(2000)
    );
    for bytes in [declared, chunked] {
        let reply = raw(server.addr, bytes.into_bytes())
            .await
            .expect("an answer");
        reply.assert_refused_and_closed(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    }
    assert_eq!(server.state.stats()["requests"]["rejected"], 2);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_get_408_while_whole_requests_are_served() {
    let mut config = small();
    // Short for the stalled clients, yet ample for the whole request, whose body arrives
    // with its head.
    config.body_timeout = Duration::from_secs(1);
    let server = Server::start(config, loopback()).await.unwrap();
    let declared = GOOD.len();
    let stall = format!(
        "{JSON_POST}Content-Length: {declared}\r\n\r\n{}",
        &GOOD[..10]
    );
    let stalled: Vec<_> = (0..4)
        .map(|_| tokio::spawn(raw(server.addr, stall.clone().into_bytes())))
        .collect();
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for client in stalled {
        let reply = client.await.unwrap().expect("an answer");
        reply.assert_refused_and_closed(StatusCode::REQUEST_TIMEOUT, "request_timeout");
    }
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], 1);
    assert_eq!(stats["requests"]["rejected"], 4);
    server.stop().await.unwrap();
}
