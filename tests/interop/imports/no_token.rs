//! No consumer's credentials reach an imported upstream: a consumer calls
//! an imported MCP server's tool with `Authorization: Bearer …` over the
//! HTTP binding and over the WebSocket, and every byte the sidecar sent the
//! upstream (recorded by a relay in between) carries the call but neither
//! the consumer's token nor any `Authorization` header (the import has no
//! credentials of its own). The MCP specification forbids passing a token
//! through to an upstream ("token passthrough").

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{HttpScheme, PrincipalConfig};
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::{self as common, ws_request, TestSidecar, WsClient};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::*;

const TOKEN: &str = "consumer-secret-token-7f3a9c";

/// Relays 127.0.0.1:{ephemeral} to `target`, keeping every byte sent
/// towards `target`.
struct Recorder {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    async fn to(target: SocketAddr) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent: Arc<Mutex<Vec<u8>>> = Arc::default();
        let keep = sent.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(record_one(inbound, target, keep.clone()));
            }
        });
        Recorder { addr, sent }
    }

    fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned()
    }
}

async fn record_one(inbound: TcpStream, target: SocketAddr, sent: Arc<Mutex<Vec<u8>>>) {
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let (mut in_rx, mut in_tx) = inbound.into_split();
    let (mut out_rx, mut out_tx) = outbound.into_split();
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = in_rx.read(&mut buf).await {
            sent.lock().unwrap().extend_from_slice(&buf[..n]);
            if out_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = out_tx.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut out_rx, &mut in_tx).await;
        let _ = in_tx.shutdown().await;
    };
    tokio::join!(up, down);
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// The imported Thing's TD, fetched with the consumer's token.
async fn connected_as(sidecar: &TestSidecar) {
    let deadline = tokio::time::Instant::now() + UP;
    loop {
        let got = common::http_with(
            sidecar.http,
            "GET",
            &thing_path(CALC),
            &[("Authorization", &bearer())],
            b"",
        )
        .await;
        if got.status == 200 && got.json()["actions"]["add"].is_object() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_consumer_s_token_never_reaches_an_imported_upstream() {
    let fixture = Fixture::python(MCP_PY, &["http"]).await;
    let recorder = Recorder::to(fixture.addr()).await;
    let mut config = config_with(
        vec![upstreams::mcp_url(
            "calc",
            &format!("http://{}/mcp", recorder.addr),
        )],
        vec![],
    );
    config.http.authentication = vec![HttpScheme::Bearer];
    config.auth.anonymous = Default::default();
    config.auth.principals = vec![PrincipalConfig {
        name: "alice".into(),
        token_sha256: sha256_hex(TOKEN.as_bytes()),
        consume: vec!["*".into()],
        operate: vec!["*".into()],
        ..PrincipalConfig::default()
    }];
    let sidecar = TestSidecar::start_with(config).await;
    connected_as(&sidecar).await;

    // The HTTP binding.
    let path = format!("{}/actions/add", thing_path(CALC));
    let headers = [
        ("Authorization", bearer()),
        ("Content-Type", "application/json".into()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let body = json!({"a": 20, "b": 22}).to_string();
    let posted = common::http_with(sidecar.http, "POST", &path, &headers, body.as_bytes()).await;
    assert_eq!(posted.status, 200, "{posted:?}");
    assert!(is_sum(&posted.json(), 42.0), "{posted:?}");

    // The WebSocket, with the token in the handshake.
    let mut request = ws_request(&sidecar.ws_url(), Some("lmosprotocol"));
    let value = HeaderValue::from_str(&bearer()).unwrap();
    request.headers_mut().insert("Authorization", value);
    let mut ws = WsClient::connect_request(request).await.expect("connects");
    let got = invoke(&mut ws, CALC, "add", json!({"a": 1, "b": 2}), json!({})).await;
    assert_eq!(last(&got)["status"], "completed", "{got:#?}");

    let sent = recorder.sent();
    assert!(
        sent.contains("tools/call"),
        "the calls went through the relay: {sent}"
    );
    assert!(
        !sent.contains(TOKEN),
        "the consumer's token reached the upstream: {sent}"
    );
    assert!(
        !sent.to_ascii_lowercase().contains("authorization:"),
        "an Authorization header reached the upstream: {sent}"
    );
    sidecar.stop().await;
}
