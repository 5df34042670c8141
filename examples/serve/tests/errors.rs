//! Bad input, routes and content types: every error a typed JSON answer.

use serde_json::json;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_typed_json_errors() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let (status, body) = post(&server, GOOD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], json!([2.0, 5.0, 8.0, 11.0]));

    let (bad_request, unprocessable) = (StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY);
    let data = |data: &str| format!(r#"{{"dtype":"f32","shape":[4],"data":[{data}]}}"#);
    let cases = [
        (
            r#"{"dtype":"f32","shape":[3],"data":[1,2,3]}"#.to_owned(),
            unprocessable,
            "wrong_length",
        ),
        (data("1,2,3"), unprocessable, "wrong_length"),
        (
            GOOD.replace("f32", "f16"),
            unprocessable,
            "unsupported_dtype",
        ),
        (data(r#"1,2,"3",4"#), bad_request, "bad_json"),
        (
            r#"{"dtype":"f32","data":[1,2,3,4]}"#.to_owned(),
            bad_request,
            "bad_json",
        ),
        ("not json".to_owned(), bad_request, "bad_json"),
        // Finite in f64, infinite in f32: refused, not answered with `null`.
        (data("1,1e300,3,4"), unprocessable, "input_not_finite"),
        // Just past f32::MAX (3.4028235e38), negative.
        (data("1,2,-3.5e38,4"), unprocessable, "input_not_finite"),
        // Beyond f64 too: serde_json refuses the number itself.
        (data("1,2,3,1e400"), bad_request, "bad_json"),
        // A finite f32 input whose output (2 * 3e38) overflows.
        (data("3e38,2,3,4"), unprocessable, "output_not_finite"),
        // JSON has no NaN nor infinity.
        (data("1,NaN,3,Infinity"), bad_request, "bad_json"),
        // Nested a thousand deep, within the size limit.
        (data(&"[".repeat(1000)), bad_request, "bad_json"),
    ];
    for (request, status, code) in cases {
        let (got_status, body) = post(&server, request.clone()).await;
        assert_eq!(
            (got_status, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{request}: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let huge = data(&format!("{}1", "1,".repeat(1000)));
    let (status, body) = post(&server, huge).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("too_large"))
    );

    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], 1);
    assert_eq!(stats["requests"]["rejected"], 13);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_and_content_type_errors_are_json_too() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let json = "Content-Type: application/json\r\n";
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";
    let cases = [
        (request("GET", "/v2/infer", "", ""), "not_found", None),
        (
            request("DELETE", "/v1/infer", "", ""),
            "method_not_allowed",
            Some("POST"),
        ),
        (
            request("POST", "/v1/model", json, GOOD),
            "method_not_allowed",
            Some("GET,HEAD"),
        ),
        (
            request("POST", "/v1/infer", "Content-Type: text/plain\r\n", GOOD),
            "unsupported_media_type",
            None,
        ),
        (
            request("POST", "/v1/infer", form, "dtype=f32"),
            "unsupported_media_type",
            None,
        ),
        (
            request("POST", "/v1/infer", "", GOOD),
            "unsupported_media_type",
            None,
        ),
        // Declared compressed: refused, not read as if it were plain JSON.
        (
            request(
                "POST",
                "/v1/infer",
                &format!("{json}Content-Encoding: gzip\r\n"),
                GOOD,
            ),
            "unsupported_media_type",
            None,
        ),
    ];
    for (bytes, code, allow) in cases {
        let reply = raw(server.addr, bytes).await.expect("an answer");
        assert_eq!(
            reply.body["error"]["code"].as_str(),
            Some(code),
            "{reply:?}"
        );
        assert!(reply.status.is_client_error(), "{reply:?}");
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(reply.header("allow"), allow, "{reply:?}");
    }
    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        let headers = format!("Content-Type: {content_type}\r\n");
        let reply = raw(server.addr, request("POST", "/v1/infer", &headers, GOOD)).await;
        assert_eq!(reply.unwrap().status, StatusCode::OK, "{content_type}");
    }
    let stats = server.state.stats();
    assert_eq!(stats["requests"]["served"], 2);
    assert_eq!(stats["requests"]["rejected"], 4, "the four 415s");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_given_before_their_body_is_read_say_the_connection_closes() {
    let server = Server::start(small(), loopback()).await.unwrap();
    let keep_alive = |method: &str, path: &str, content_type: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n\
             Content-Length: 1000\r\n\r\n{}",
            "1".repeat(10)
        )
    };
    // Keep-alive requests answered with most of their body still to come: hyper closes the
    // connection after the answer (the rest of the body is in the way of the next request),
    // and the answer says so, or a client would send its next request into the close.
    let cases = [
        (
            keep_alive("POST", "/v1/infer", "text/plain"),
            "unsupported_media_type",
        ),
        (
            keep_alive("POST", "/v2/infer", "application/json"),
            "not_found",
        ),
        (
            keep_alive("PUT", "/v1/infer", "application/json"),
            "method_not_allowed",
        ),
    ];
    for (bytes, code) in cases {
        let reply = raw(server.addr, bytes.into_bytes())
            .await
            .expect("an answer");
        assert_eq!(
            reply.body["error"]["code"].as_str(),
            Some(code),
            "{reply:?}"
        );
        assert_eq!(reply.header("connection"), Some("close"), "{reply:?}");
    }
    // A keep-alive request whose body was read is answered on a connection that stays open,
    // even when the answer is an error.
    let mut connection = client::Connection::open(server.addr).await.unwrap();
    for (body, status) in [
        ("not json", StatusCode::BAD_REQUEST),
        (GOOD, StatusCode::OK),
    ] {
        let (got, answer) = connection
            .send(Method::POST, "/v1/infer", body.into())
            .await
            .expect("an answer on the same connection");
        assert_eq!(got, status, "{answer:?}");
    }
    server.stop().await.unwrap();
}
