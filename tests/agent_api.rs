//! The agent's HTTP API with a real agent (simulated executor) on loopback: submissions accepted,
//! listed and refused with the field named; the bearer token guarding every route but the
//! dashboard's; a half-sent request cut off after the header timeout; bodies past the limit
//! refused with 413, announced or not (chunked), after what the client sends is read.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use tapfinger_agent::daemon::Agent;
use tapfinger_tests::{Exec, Local, wait};

async fn agent(name: &str, rate: f64) -> Agent {
    Local::new(name, Exec::Simulated(rate)).start().await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_accepts_lists_refuses_and_guards() {
    use tapfinger_agent::api::router;
    use tapfinger_agent::client::http;
    let a = agent("a", 0.2).await;
    let serve = |token: Option<String>| {
        let app = router(tapfinger_tests::api_state(&a, token, None));
        async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            tokio::spawn(tapfinger_agent::api::serve_with(
                l,
                app,
                Duration::from_millis(300),
            ));
            addr
        }
    };
    let api = serve(None).await;
    wait(&[&a], Duration::from_secs(10), "first heartbeat", |s| {
        s[0].capacity.is_some()
    })
    .await;
    let good = r#"{"command": ["train"], "min_demand": {"cpu": 1}, "priority": 3}"#;
    let (code, body) = http(&api, "POST", "/v1/tasks", Some(good.into()), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let id: serde_json::Value = serde_json::from_str(&body).unwrap();
    // Its class is shown once the loop has taken it in (the status is published each step).
    let path = format!("/v1/tasks/{}", id["id"]);
    let (_, shown) = tapfinger_tests::poll_get(&api, &path, 50, |code, _| code == 200).await;
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["priority"], 3, "{shown}");
    for (spec, field) in [
        (r#"{"min_demand": {"cpu": 1}}"#, "command"),
        (
            r#"{"command": ["x"], "min_demand": {"cpu": 0}}"#,
            "min_demand",
        ),
        (
            r#"{"command": ["x"], "min_demand": {"cpu": -1}}"#,
            "min_demand.cpu",
        ),
        (
            r#"{"command": ["x"], "min_demand": {"cpu": 99}}"#,
            "min_demand",
        ),
        (
            r#"{"command": ["x"], "min_demand": {"cpu": 1}, "gpus": 2}"#,
            "gpus",
        ),
        ("not json", "spec"),
        (
            r#"{"command": ["x"], "min_demand": {"cpu": 1}, "priority": 10}"#,
            "priority",
        ),
        // More arguments than the wire carries: refused here, not lost on the way to peers.
        (
            &format!(
                r#"{{"command": [{}], "min_demand": {{"cpu": 1}}}}"#,
                vec!["\"x\""; 257].join(",")
            ),
            "command",
        ),
    ] {
        let (code, body) = http(&api, "POST", "/v1/tasks", Some(spec.into()), None)
            .await
            .unwrap();
        assert_eq!(code, 400, "{spec}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["field"], field, "{spec}: {body}");
    }
    let (code, body) = http(&api, "GET", "/v1/tasks", None, None).await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains(&id["id"].to_string()), "{body}");
    let (code, body) = http(&api, "GET", "/metrics", None, None).await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("tapfinger_tasks{state="), "{body}");
    let (code, _) = http(&api, "GET", "/v1/tasks/12345", None, None)
        .await
        .unwrap();
    assert_eq!(code, 404);
    // Cancel: the task ends (wherever it was), a second cancel finds nothing to cancel.
    let (code, body) = http(&api, "DELETE", &path, None, None).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let (_, body) = http(&api, "GET", &path, None, None).await.unwrap();
    assert!(body.contains("\"cancelled\""), "{body}");
    let (code, _) = http(&api, "DELETE", &path, None, None).await.unwrap();
    assert_eq!(code, 404);
    let (code, _) = http(&api, "GET", &format!("{path}/logs"), None, None)
        .await
        .unwrap();
    assert_eq!(code, 404, "this agent keeps no logs");
    // With a token configured, requests without it are refused.
    let guarded = serve(Some("s3cret".into())).await;
    let (code, _) = http(&guarded, "GET", "/v1/node", None, None).await.unwrap();
    assert_eq!(code, 401);
    let (code, _) = http(&guarded, "GET", "/v1/node", None, Some("s3cret"))
        .await
        .unwrap();
    assert_eq!(code, 200);
    // The token comes first: without it, a bad spec, a huge body or a bad path say nothing more.
    let huge = "x".repeat(tapfinger_agent::api::MAX_BODY + 1);
    for (method, path, body) in [
        ("POST", "/v1/tasks", Some("not json".to_string())),
        ("POST", "/v1/tasks", Some(huge)),
        ("GET", "/v1/tasks/not-a-number", None),
    ] {
        let (code, _) = http(&guarded, method, path, body, None).await.unwrap();
        assert_eq!(code, 401, "{method} {path}");
    }
    // A client that sends half a request is cut off after the header timeout.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut half = tokio::net::TcpStream::connect(&guarded).await.unwrap();
    half.write_all(b"GET /v1/node HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), half.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "the half-sent request still holds its connection"
    );
    // A body announced larger than any request is refused at once, before it is sent.
    let mut big = tokio::net::TcpStream::connect(&guarded).await.unwrap();
    big.write_all(
        b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\
          Content-Length: 1000000000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), big.read_exact(&mut head))
        .await
        .expect("no answer before the body")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 413", "{}", String::from_utf8_lossy(&head));
    // A client that sends a body far larger than its socket's buffers reads the 413 too (the
    // agent reads and drops what it sends rather than close under it: the client saw "broken
    // pipe").
    let body = "x".repeat(30 << 20);
    let (code, said) = http(&guarded, "POST", "/v1/tasks", Some(body), Some("s3cret"))
        .await
        .unwrap();
    assert_eq!(code, 413, "{said}");
    assert!(said.contains("at most 65536 bytes"), "{said}");
    a_chunked_body_past_the_limit_gets_its_413(&guarded).await;
}

/// A body of unannounced length (chunked, 8 MiB) gets its 413 too, after it was sent (it was
/// cut without an answer).
async fn a_chunked_body_past_the_limit_gets_its_413(guarded: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut chunked = tokio::net::TcpStream::connect(guarded).await.unwrap();
    chunked
        .write_all(
            b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\
              Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
    for _ in 0..128 {
        chunked.write_all(chunk.as_bytes()).await.unwrap();
    }
    chunked.write_all(b"0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), chunked.read_to_end(&mut answer))
        .await
        .expect("an answer to the chunked body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("at most 65536 bytes"),
        "{answer}"
    );
}
