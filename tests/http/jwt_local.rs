//! `[auth.jwt]` on the HTTP port with a locally signed token (the real
//! provider's tests are tests/oidc): the directory with a bearer JWT, the
//! WebSocket handshake, and the connection closed at the token's `exp`.

use lmos_testkit as common;

use common::jwt::LocalIssuer;
use common::*;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

async fn sidecar(issuer: &LocalIssuer) -> TestSidecar {
    let mut c = test_config();
    issuer.configure(&mut c);
    TestSidecar::start_with(c).await
}

#[tokio::test]
async fn a_bearer_jwt_reads_the_directory_and_a_bad_one_is_refused() {
    let issuer = LocalIssuer::new();
    let sidecar = sidecar(&issuer).await;
    let get = |token: String| async move {
        let bearer = format!("Bearer {token}");
        http_with(
            sidecar.http,
            "GET",
            "/things",
            &[("Authorization", &bearer)],
            b"",
        )
        .await
    };
    assert_eq!(get(issuer.token("alice", "things", 300)).await.status, 200);
    let forged = issuer.token("alice", "things", 300).replace(".", ".x");
    assert_eq!(get(forged).await.status, 401);
    assert_eq!(
        get(LocalIssuer::new().token("alice", "things", 300))
            .await
            .status,
        401
    );
    assert_eq!(get(issuer.token("alice", "things", -120)).await.status, 401);
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    assert!(
        metrics
            .contains(r#"lmos_sidecar_auth_failures_total{reason="expired",transport="http"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("lmos_sidecar_auth_jwks_keys 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_websocket_opened_with_a_jwt_is_closed_at_its_exp() {
    let issuer = LocalIssuer::new();
    let sidecar = sidecar(&issuer).await;
    let mut request = ws_request(&sidecar.ws_url(), Some("lmosprotocol"));
    let bearer = format!("Bearer {}", issuer.token("alice", "things", 2));
    request
        .headers_mut()
        .insert("Authorization", HeaderValue::from_str(&bearer).unwrap());
    let mut ws = WsClient::connect_request(request)
        .await
        .expect("the token is taken");
    let close = loop {
        match tokio::time::timeout(WAIT, ws.stream.next())
            .await
            .expect("closed in time")
        {
            Some(Ok(Message::Close(frame))) => break frame.expect("a close code"),
            Some(Ok(_)) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Policy);
    assert!(close.reason.contains("expired"), "{}", close.reason);
}
