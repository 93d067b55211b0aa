//! The WebSocket handshake: `lmosprotocol` (offered, or no subprotocol at
//! all) or a clear refusal.

use lmos_testkit as common;

use common::{ws_request, TestSidecar};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};

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
async fn a_handshake_offering_no_subprotocol_speaks_lmosprotocol_unnamed() {
    // As the Kotlin LMOS stack's client (ktor) connects.
    let sidecar = TestSidecar::start().await;
    let request = ws_request(&sidecar.ws_url(), None);
    let (mut socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert!(
        response.headers().get("sec-websocket-protocol").is_none(),
        "no subprotocol the client did not offer"
    );
    socket
        .send(WsMessage::Text(
            r#"{"messageType":"readProperty","thingId":"urn:nobody","messageId":"m1","property":"p"}"#.into(),
        ))
        .await
        .unwrap();
    let reply = loop {
        match socket.next().await.unwrap().unwrap() {
            WsMessage::Text(t) => break serde_json::from_str::<serde_json::Value>(&t).unwrap(),
            _ => continue,
        }
    };
    assert_eq!(
        (
            reply["messageType"].as_str(),
            reply["status"].as_str(),
            reply["correlationId"].as_str()
        ),
        (Some("error"), Some("503"), Some("m1")),
        "an LMOS answer, in the Kotlin dialect it was asked in: {reply}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_handshake_offering_only_other_subprotocols_is_refused_clearly() {
    let sidecar = TestSidecar::start().await;
    for offered in [Some("mqtt"), Some("v1.lmos, graphql-ws")] {
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
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tokio::time::timeout(common::WAIT, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}
