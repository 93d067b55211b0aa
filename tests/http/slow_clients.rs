//! Slow clients on the HTTP port, over real sockets: a body trickled a
//! byte at a time is cut off with 408 (by `http.body_min_rate`, and by
//! `http.body_timeout_ms` when there is no minimum rate), and fifty slow
//! clients on a port with `http.max_connections = 10` keep neither a
//! legitimate request, `/readyz` nor an open WebSocket from being served.

use lmos_testkit as common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{test_config, TestSidecar};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A POST whose head promises `length` bytes of JSON.
fn post_head(length: usize) -> String {
    format!(
        "POST /things HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/td+json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// Everything the server sends until it closes, or what came within `wait`.
async fn read_answer(stream: &mut TcpStream, wait: Duration) -> String {
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut raw)).await;
    String::from_utf8_lossy(&raw).into_owned()
}

/// Sends a byte every `every` until the server stops taking them.
fn trickle(mut stream: TcpStream, every: Duration) -> tokio::task::JoinHandle<(TcpStream, u32)> {
    tokio::spawn(async move {
        let mut sent = 0;
        while stream.write_all(b" ").await.is_ok() {
            sent += 1;
            tokio::time::sleep(every).await;
            // The server answered (and closes): stop.
            let mut peek = [0u8; 1];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(1), stream.peek(&mut peek)).await
            {
                if n > 0 {
                    break;
                }
            }
        }
        (stream, sent)
    })
}

fn problem(answer: &str) -> Value {
    let (_, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[tokio::test]
async fn a_body_trickled_a_byte_a_second_is_cut_off_with_408() {
    // The default minimum rate (500 bytes/s after the first second).
    let sidecar = TestSidecar::start_with(test_config()).await;
    let mut stream = TcpStream::connect(sidecar.http).await.unwrap();
    stream.write_all(post_head(1000).as_bytes()).await.unwrap();
    let started = Instant::now();
    let trickler = trickle(stream, Duration::from_secs(1));
    let (mut stream, sent) = trickler.await.unwrap();
    let answer = read_answer(&mut stream, common::WAIT).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_lowercase().contains("connection: close"),
        "{answer}"
    );
    let detail = problem(&answer)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("http.body_min_rate"), "{detail}");
    // A second of grace: cut long before the 1000 bytes could come.
    assert!(
        sent <= 5,
        "{sent} bytes trickled in {:?}",
        started.elapsed()
    );
    sidecar.stop().await;

    // Without a minimum rate, the deadline still holds.
    let mut config = test_config();
    config.http.body_min_rate = 0;
    config.http.body_timeout_ms = 1_500;
    let sidecar = TestSidecar::start_with(config).await;
    let mut stream = TcpStream::connect(sidecar.http).await.unwrap();
    stream.write_all(post_head(1000).as_bytes()).await.unwrap();
    let (mut stream, _) = trickle(stream, Duration::from_millis(100)).await.unwrap();
    let answer = read_answer(&mut stream, common::WAIT).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let detail = problem(&answer)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("http.body_timeout_ms"), "{detail}");
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"").await;
    assert!(
        metrics.body.contains(
            r#"lmos_sidecar_limit_hits_total{limit="body_timeout_ms",transport="http"} 1"#
        ),
        "{}",
        metrics.body
    );
    // A prompt body of the same size is served as before.
    let td = r#"{"@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}], "@type": "lmos:Agent", "title": "T", "securityDefinitions": {"n": {"scheme": "nosec"}}, "security": "n"}"#;
    let created = common::http(
        sidecar.http,
        "POST",
        "/things",
        Some("application/td+json"),
        td.as_bytes(),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    sidecar.stop().await;
}

/// Opens a connection that sends part of a request and then trickles.
async fn slow_client(
    addr: SocketAddr,
    only_headers: bool,
) -> tokio::task::JoinHandle<(TcpStream, u32)> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = if only_headers {
        "POST /things HTTP/1.1\r\nHost: localhost\r\nX-Slow: a".to_owned()
    } else {
        post_head(100_000)
    };
    let _ = stream.write_all(head.as_bytes()).await;
    trickle(stream, Duration::from_millis(300))
}

#[tokio::test]
async fn fifty_slow_clients_do_not_hold_the_last_places_of_a_full_port() {
    let mut config = test_config();
    config.http.max_connections = 10;
    // Neither timeout cuts them here: making room is what is tested.
    config.http.body_min_rate = 0;
    config.http.body_timeout_ms = 60_000;
    config.http.handshake_timeout_ms = 60_000;
    let sidecar = TestSidecar::start_with(config).await;
    let a = sidecar.http;
    // A WebSocket holds a place and never gives it up.
    let mut ws = sidecar.ws().await;

    let mut slow = Vec::new();
    // Waves of slow clients, each refilling the port after the legitimate
    // requests took places from the previous one.
    for wave in 0..3 {
        let count = if wave == 0 { 50 } else { 10 };
        for i in 0..count {
            slow.push(slow_client(a, i % 5 == 4).await);
        }
        // They have all waited long enough to be chosen.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        for _ in 0..3 {
            let ready = common::http(a, "GET", "/readyz", None, b"").await;
            assert_eq!(ready.status, 200, "wave {wave}: {ready:?}");
            let things = common::http(a, "GET", "/things", None, b"").await;
            assert_eq!(things.status, 200, "wave {wave}: {things:?}");
        }
    }
    // The WebSocket was not chosen.
    ws.barrier().await;

    let metrics = common::http(a, "GET", "/metrics", None, b"").await.body;
    let evicted = metrics
        .lines()
        .find(|l| l.contains(r#"limit="slow_client_evicted""#))
        .unwrap_or_else(|| panic!("no eviction counted: {metrics}"));
    assert!(!evicted.ends_with(" 0"), "{evicted}");
    // Those chosen mid-body were told why.
    let mut told = 0;
    let mut refused = 0;
    for client in slow {
        if !client.is_finished() {
            client.abort();
            continue;
        }
        let (mut stream, _) = client.await.unwrap();
        let answer = read_answer(&mut stream, Duration::from_millis(50)).await;
        told += usize::from(answer.starts_with("HTTP/1.1 408"));
        refused += usize::from(answer.starts_with("HTTP/1.1 503"));
    }
    assert!(told >= 1, "no slow body was told why it was closed");
    println!("slow clients: {told} answered 408 to make room, {refused} refused with 503 while the port was full");
    sidecar.stop().await;
}
