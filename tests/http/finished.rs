//! Finished invocations per principal (issue 43, finding 5): Bob's flood of
//! instant invocations does not push Alice's finished results (an HTTP
//! status resource, an A2A task) out of the sidecar's memory; his own
//! oldest go instead.

use lmos_testkit as common;

use common::*;
use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{HttpScheme, PrincipalConfig};
use lmos_sidecar::Config;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::http::HeaderValue;

const BOB: &str = "bob-token-0123456789";
const ALICE: &str = "alice-token-0123456789";
const THING: &str = "urn:alice:agent";
/// The sidecar-wide cap, small so that Bob fills it quickly; the
/// per-principal share stays its default (100), above it.
const FINISHED: usize = 40;

/// Alice hosts and uses her Thing; Bob may use it too.
fn config() -> Config {
    let principal = |name: &str, token: &str, consume: &str| PrincipalConfig {
        name: name.into(),
        token_sha256: sha256_hex(token.as_bytes()),
        host: vec!["urn:alice:*".into()],
        consume: vec![consume.into()],
        operate: vec![consume.into()],
        ..PrincipalConfig::default()
    };
    let mut c = test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.auth.anonymous = Default::default();
    c.auth.principals = vec![
        principal("alice", ALICE, "urn:alice:*"),
        principal("bob", BOB, "*"),
    ];
    c.requests.finished_invocations = FINISHED;
    c
}

/// Its action `plan` is not synchronous: each invocation gets a status
/// resource (201 with `Location`).
fn td() -> Value {
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": THING,
        "title": "Alice's",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "actions": {"plan": {"synchronous": false, "forms": [{"href": "https://alice.example/plan"}]}}
    })
}

async fn http_as(sidecar: &TestSidecar, token: &str, method: &str, path: &str) -> HttpResponse {
    let bearer = format!("Bearer {token}");
    let (content_type, body): (&str, &[u8]) = match method {
        "PUT" => ("application/td+json", &[]),
        _ => ("application/json", b"{}"),
    };
    let td = td().to_string();
    let body = if method == "PUT" { td.as_bytes() } else { body };
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", content_type),
    ];
    http_with(sidecar.http, method, path, &headers, body).await
}

/// Alice's agent: every invocation completes at once.
async fn serve_instantly(sidecar: &TestSidecar) -> tokio::task::JoinHandle<()> {
    let url = format!("{}?host={}", sidecar.ws_url(), urlencode(THING));
    let mut request = ws_request(&url, Some("lmosprotocol"));
    let bearer = HeaderValue::from_str(&format!("Bearer {ALICE}")).unwrap();
    request.headers_mut().insert("Authorization", bearer);
    let mut agent = WsClient::connect_request(request).await.expect("connects");
    tokio::spawn(async move {
        loop {
            let request = agent.recv().await;
            if request["messageType"] != "invokeAction" {
                continue;
            }
            let done = lmos(
                THING,
                "actionStatus",
                json!({"action": request["action"], "status": "completed", "output": 1, "correlationID": request["correlationID"]}),
            );
            agent.send(done).await;
        }
    })
}

/// A2A JSON-RPC on Alice's agent as `token`; the call's `result`.
async fn a2a(sidecar: &TestSidecar, token: &str, method: &str, params: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let path = format!("/a2a/{}", urlencode(THING));
    let answer = http_with(
        sidecar.http,
        "POST",
        &path,
        &headers,
        call.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer = answer.json();
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

/// Invokes `plan` as `token`; the invocation's status resource.
async fn invoke(sidecar: &TestSidecar, token: &str) -> String {
    let path = format!("/things/{THING}/actions/plan");
    let created = http_as(sidecar, token, "POST", &path).await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["status"], "completed", "{created:?}");
    created.header("location").unwrap().to_owned()
}

#[tokio::test]
async fn bob_s_flood_of_invocations_leaves_alice_s_finished_one() {
    let sidecar = TestSidecar::start_with(config()).await;
    let put = http_as(&sidecar, ALICE, "PUT", &format!("/things/{THING}")).await;
    assert_eq!(put.status, 201, "{put:?}");
    let agent = serve_instantly(&sidecar).await;

    let alice_s = invoke(&sidecar, ALICE).await;
    let message =
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {}}]}});
    let sent = a2a(&sidecar, ALICE, "SendMessage", message).await;
    let task = sent["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned();
    let mut bob_s = Vec::new();
    for _ in 0..FINISHED + 20 {
        bob_s.push(invoke(&sidecar, BOB).await);
    }

    // Alice's result is still there; Bob, holding the most, lost his oldest.
    let alice_query = http_as(&sidecar, ALICE, "GET", &alice_s).await;
    assert_eq!(alice_query.status, 200, "{alice_query:?}");
    assert_eq!(alice_query.json()["status"], "completed");
    let got = a2a(&sidecar, ALICE, "GetTask", json!({"id": task})).await;
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    let oldest = http_as(&sidecar, BOB, "GET", &bob_s[0]).await;
    assert_eq!(oldest.status, 404, "{oldest:?}");
    // Alice holds two (the HTTP call and the A2A task), Bob the rest.
    let kept = bob_s.len() - (FINISHED - 2);
    let first_kept = http_as(&sidecar, BOB, "GET", &bob_s[kept]).await;
    assert_eq!(first_kept.status, 200, "{first_kept:?}");
    let last_gone = http_as(&sidecar, BOB, "GET", &bob_s[kept - 1]).await;
    assert_eq!(last_gone.status, 404, "{last_gone:?}");
    agent.abort();
    sidecar.stop().await;
}
