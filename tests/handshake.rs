//! The WebSocket handshake: `lmosprotocol` or a clear refusal.

mod common;

use common::{ws_request, TestSidecar};
use tokio_tungstenite::tungstenite::Error as WsError;

#[tokio::test]
async fn a_handshake_offering_lmosprotocol_is_answered_with_it() {
    let sidecar = TestSidecar::start().await;
    let request = ws_request(&sidecar.ws_url(), Some("v1.lmos, lmosprotocol"));
    let (_, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["sec-websocket-protocol"], "lmosprotocol");
    sidecar.stop().await;
}

#[tokio::test]
async fn a_handshake_without_lmosprotocol_is_refused_clearly() {
    let sidecar = TestSidecar::start().await;
    for offered in [None, Some("mqtt")] {
        let err = tokio_tungstenite::connect_async(ws_request(&sidecar.ws_url(), offered))
            .await
            .unwrap_err();
        let WsError::Http(response) = err else {
            panic!("{err:?}")
        };
        assert_eq!(response.status(), 400);
        let body = String::from_utf8(response.body().clone().unwrap_or_default()).unwrap();
        assert!(body.contains("lmosprotocol"), "{body}");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn plain_http_on_the_websocket_path_explains_itself() {
    let sidecar = TestSidecar::start().await;
    let response = http_get(sidecar.http, "/lmos").await;
    assert!(response.starts_with("HTTP/1.1 426"), "{response}");
    assert!(response.contains("lmosprotocol"));
    assert!(http_get(sidecar.http, "/healthz")
        .await
        .starts_with("HTTP/1.1 200"));
    sidecar.stop().await;
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(common::WAIT, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}
