//! Per-principal quotas against a real sidecar with two principals: Bob
//! filling his share (a silent agent of his own, subscriptions, Thing
//! Descriptions) leaves Alice hers, and Bob's refusals name whose quota is
//! full and which key. Also the directory's byte limits.

use lmos_testkit as common;

use common::*;
use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{HttpScheme, PrincipalConfig, QuotaOverrides};
use lmos_sidecar::Config;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::http::HeaderValue;

const BOB: &str = "bob-token-0123456789";
const ALICE: &str = "alice-token-0123456789";

/// Bearer tokens (no Argon2 per check). Bob hosts `urn:bob:*` and consumes
/// and operates everything; Alice hosts, consumes and operates `urn:alice:*`.
fn principal(name: &str, token: &str, host: &str, use_: &str) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        token_sha256: sha256_hex(token.as_bytes()),
        host: vec![host.into()],
        consume: vec![use_.into()],
        operate: vec![use_.into()],
        ..PrincipalConfig::default()
    }
}

fn two_principals() -> Config {
    let mut c = test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.mqtt.authentication = true;
    c.auth.anonymous = Default::default();
    c.auth.principals = vec![
        principal("bob", BOB, "urn:bob:*", "*"),
        principal("alice", ALICE, "urn:alice:*", "urn:alice:*"),
    ];
    c.quotas.running_invocations = 3;
    c.quotas.pending_requests = 2;
    c.quotas.subscriptions = 4;
    c.quotas.things = 2;
    c.discovery.max_td_size = 200_000;
    c.quotas.principals.insert(
        "alice".into(),
        QuotaOverrides {
            td_bytes: Some(100_000),
            ..QuotaOverrides::default()
        },
    );
    c
}

async fn ws_as(sidecar: &TestSidecar, token: &str, host: Option<&str>) -> WsClient {
    let url = match host {
        Some(thing) => format!("{}?host={}", sidecar.ws_url(), urlencode(thing)),
        None => sidecar.ws_url(),
    };
    let mut request = ws_request(&url, Some("lmosprotocol"));
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    request.headers_mut().insert("Authorization", bearer);
    WsClient::connect_request(request).await.expect("connects")
}

async fn http_as(
    sidecar: &TestSidecar,
    token: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> HttpResponse {
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/td+json"),
    ];
    http_with(sidecar.http, method, path, &headers, body).await
}

fn invoke(thing: &str, correlation: &str) -> Value {
    lmos(
        thing,
        "invokeAction",
        json!({"action": "work", "input": {}, "correlationID": correlation}),
    )
}

fn read(thing: &str, correlation: &str) -> Value {
    lmos(
        thing,
        "readProperty",
        json!({"name": "p", "correlationID": correlation}),
    )
}

/// An LMOS `error` with status 429 whose detail names `bob` and `key`.
fn assert_bobs_quota(reply: &Value, key: &str) {
    assert_eq!(reply["messageType"], "error", "{reply}");
    assert_eq!(reply["status"], "429", "{reply}");
    let detail = reply["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("`bob` ") && detail.contains(&format!("({key})")),
        "{detail}"
    );
}

async fn metrics(sidecar: &TestSidecar) -> String {
    http(sidecar.http, "GET", "/metrics", None, b"").await.body
}

#[tokio::test]
async fn bob_filling_his_invocations_and_requests_leaves_alice_hers() {
    let sidecar = TestSidecar::start_with(two_principals()).await;
    // Bob's agent never answers; Alice's does.
    let mut bob_agent = ws_as(&sidecar, BOB, Some("urn:bob:silent")).await;
    let mut alice_agent = ws_as(&sidecar, ALICE, Some("urn:alice:agent")).await;
    let mut bob = [
        ws_as(&sidecar, BOB, None).await,
        ws_as(&sidecar, BOB, None).await,
    ];

    // Three invocations over two connections and MQTT fill Bob's quota.
    let mut bob_mqtt = MqttClient::connect_as(sidecar.mqtt, "bob-mqtt", "bob", BOB, None).await;
    bob_mqtt.subscribe("lmos/urn:bob:silent/replies/+").await;
    let by_mqtt = "lmos/urn:bob:silent/requests/invokeAction";
    for (i, conn) in [0, 1].into_iter().enumerate() {
        bob[conn]
            .send(invoke("urn:bob:silent", &format!("i{i}")))
            .await;
        assert_eq!(bob_agent.recv().await["messageType"], "invokeAction");
    }
    bob_mqtt
        .publish(by_mqtt, &invoke("urn:bob:silent", "m2"), false)
        .await;
    assert_eq!(bob_agent.recv().await["messageType"], "invokeAction");
    bob_mqtt
        .publish(by_mqtt, &invoke("urn:bob:silent", "m3"), false)
        .await;
    let (topic, refused, _) = bob_mqtt.recv_json().await;
    assert_eq!(topic, "lmos/urn:bob:silent/replies/m3");
    assert_bobs_quota(&refused, "quotas.running_invocations");
    bob[1].send(invoke("urn:bob:silent", "i3")).await;
    let refused = bob[1].recv().await;
    assert_bobs_quota(&refused, "quotas.running_invocations");
    assert!(refused["detail"]
        .as_str()
        .unwrap()
        .contains("has 3 invocations running"));
    // Over HTTP, Bob's quota is the same.
    let bearer = format!("Bearer {BOB}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let over_http = http_with(
        sidecar.http,
        "POST",
        "/things/urn:bob:silent/actions/work",
        &headers,
        b"{}",
    )
    .await;
    assert_eq!(over_http.status, 429, "{}", over_http.body);
    assert_eq!(
        over_http.header("content-type"),
        Some("application/problem+json")
    );
    assert!(
        over_http.body.contains("quotas.running_invocations"),
        "{}",
        over_http.body
    );

    // His property requests waiting for the silent agent have their own.
    for (i, conn) in bob.iter_mut().enumerate() {
        conn.send(read("urn:bob:silent", &format!("r{i}"))).await;
        assert_eq!(bob_agent.recv().await["messageType"], "readProperty");
    }
    bob[0].send(read("urn:bob:silent", "r2")).await;
    assert_bobs_quota(&bob[0].recv().await, "quotas.pending_requests");

    // Alice invokes on her own Thing as if Bob were not there.
    let mut alice = ws_as(&sidecar, ALICE, None).await;
    alice.send(invoke("urn:alice:agent", "mine")).await;
    let request = alice_agent.recv().await;
    assert_eq!(request["messageType"], "invokeAction");
    let status = lmos(
        "urn:alice:agent",
        "actionStatus",
        json!({"action": "work", "status": "completed", "output": 42, "correlationID": request["correlationID"]}),
    );
    alice_agent.send(status).await;
    let done = alice.recv().await;
    assert_eq!(
        (done["status"].as_str(), done["correlationID"].as_str()),
        (Some("completed"), Some("mine")),
        "{done}"
    );

    let text = metrics(&sidecar).await;
    for key in ["quotas.running_invocations", "quotas.pending_requests"] {
        assert!(text.contains(&format!("limit=\"{key}\"")), "{text}");
    }
    assert!(
        text.contains(r#"lmos_sidecar_quota_largest_usage{quota="quotas.running_invocations"} 3"#),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn bob_s_subscriptions_are_counted_over_all_his_connections() {
    let sidecar = TestSidecar::start_with(two_principals()).await;
    let mut bob = [
        ws_as(&sidecar, BOB, None).await,
        ws_as(&sidecar, BOB, None).await,
    ];
    let subscribe = |event: &str| {
        lmos(
            "urn:alice:agent",
            "subscribeEvent",
            json!({"event": event, "correlationID": event}),
        )
    };
    for (i, conn) in [0, 1, 0, 1].into_iter().enumerate() {
        bob[conn].send(subscribe(&format!("e{i}"))).await;
    }
    wait_for_stats(&sidecar, |s| s.subscriptions == 4).await;
    bob[0].send(subscribe("e4")).await;
    let refused = bob[0].recv().await;
    assert_bobs_quota(&refused, "quotas.subscriptions");
    assert_eq!(refused["correlationID"], "e4");

    let mut alice = ws_as(&sidecar, ALICE, None).await;
    alice.send(subscribe("mine")).await;
    wait_for_stats(&sidecar, |s| s.subscriptions == 5).await;

    // One of Bob's connections gone, he has room again.
    drop(bob);
    wait_for_stats(&sidecar, |s| s.subscriptions == 1).await;
    let mut bob = ws_as(&sidecar, BOB, None).await;
    for i in 0..4 {
        bob.send(subscribe(&format!("again{i}"))).await;
    }
    wait_for_stats(&sidecar, |s| s.subscriptions == 5).await;
    assert!(metrics(&sidecar)
        .await
        .contains(r#"limit="quotas.subscriptions""#));
    sidecar.stop().await;
}

/// The weather agent's TD under `id`, with `padding` bytes of description.
fn td(id: &str, padding: usize) -> Vec<u8> {
    let text = include_str!("../fixtures/weather-agent-td.json");
    let mut td: Value = serde_json::from_str(text).unwrap();
    td["id"] = id.into();
    td["description"] = "x".repeat(padding).into();
    td.to_string().into_bytes()
}

#[tokio::test]
async fn bob_s_thing_descriptions_are_counted_and_alice_registers_hers() {
    let sidecar = TestSidecar::start_with(two_principals()).await;
    for i in 1..=2 {
        let path = format!("/things/urn:bob:td:{i}");
        assert_eq!(
            http_as(&sidecar, BOB, "PUT", &path, &td(&path[8..], 0))
                .await
                .status,
            201
        );
    }
    // Replacing one of his own is no new registration.
    let again = http_as(
        &sidecar,
        BOB,
        "PUT",
        "/things/urn:bob:td:1",
        &td("urn:bob:td:1", 10),
    )
    .await;
    assert_eq!(again.status, 204);
    let third = http_as(
        &sidecar,
        BOB,
        "PUT",
        "/things/urn:bob:td:3",
        &td("urn:bob:td:3", 0),
    )
    .await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(
        third.header("content-type"),
        Some("application/problem+json")
    );
    let problem = third.json();
    assert_eq!(problem["title"], "Quota exceeded");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("`bob` has 2 Thing Descriptions registered (quotas.things)"),
        "{problem}"
    );

    // The same quota for the TD one of Bob's agents sends over WebSocket.
    let mut agent = ws_as(&sidecar, BOB, Some("urn:bob:td:9")).await;
    let text: Value = serde_json::from_slice(&td("urn:bob:td:9", 0)).unwrap();
    agent.send(text).await;
    let error = agent.recv().await;
    assert_eq!(error["messageType"], "error", "{error}");
    assert_eq!(error["status"], "429", "{error}");
    assert!(
        error["detail"]
            .as_str()
            .unwrap()
            .contains("(quotas.things)"),
        "{error}"
    );

    // Alice has her own share, and her own byte quota: one large TD fits,
    // a second does not.
    let large = |id: &str| td(id, 60_000);
    let first = http_as(
        &sidecar,
        ALICE,
        "PUT",
        "/things/urn:alice:big:1",
        &large("urn:alice:big:1"),
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let second = http_as(
        &sidecar,
        ALICE,
        "PUT",
        "/things/urn:alice:big:2",
        &large("urn:alice:big:2"),
    )
    .await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert!(
        second.body.contains("quotas.principals.alice.td_bytes"),
        "{}",
        second.body
    );

    // Deleting makes room.
    assert_eq!(
        http_as(&sidecar, BOB, "DELETE", "/things/urn:bob:td:2", b"")
            .await
            .status,
        204
    );
    assert_eq!(
        http_as(
            &sidecar,
            BOB,
            "PUT",
            "/things/urn:bob:td:3",
            &td("urn:bob:td:3", 0)
        )
        .await
        .status,
        201
    );
    let text = metrics(&sidecar).await;
    for key in ["quotas.things", "quotas.td_bytes"] {
        assert!(text.contains(&format!("limit=\"{key}\"")), "{text}");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn the_directory_has_a_largest_td_and_a_total() {
    // Authentication off: one anonymous bucket; the global limits hold.
    let mut c = test_config();
    c.discovery.max_td_size = 100_000;
    c.discovery.max_total_td_bytes = 150_000;
    c.quotas.things = 1;
    let sidecar = TestSidecar::start_with(c).await;
    let put = |id: &'static str, padding| {
        let addr = sidecar.http;
        async move {
            let path = format!("/things/{id}");
            http(
                addr,
                "PUT",
                &path,
                Some("application/td+json"),
                &td(id, padding),
            )
            .await
        }
    };
    let too_large = put("urn:big", 120_000).await;
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    assert!(too_large.json()["detail"]
        .as_str()
        .unwrap()
        .contains("discovery.max_td_size"));
    assert_eq!(put("urn:a", 60_000).await.status, 201);
    assert_eq!(put("urn:b", 60_000).await.status, 201);
    let full = put("urn:c", 60_000).await;
    assert_eq!(full.status, 507, "{}", full.body);
    assert!(full.json()["detail"]
        .as_str()
        .unwrap()
        .contains("discovery.max_total_td_bytes"));
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert_eq!(ready.status, 200);
    assert!(
        ready
            .body
            .contains("directory full (discovery.max_total_td_bytes)"),
        "{}",
        ready.body
    );
    // Shrinking one is allowed, and then there is room.
    assert_eq!(put("urn:a", 0).await.status, 204);
    assert_eq!(put("urn:c", 60_000).await.status, 201);
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert!(!ready.body.contains("directory full"), "{}", ready.body);
    let listed = http(sidecar.http, "GET", "/things", None, b"").await.json();
    assert_eq!(listed.as_array().unwrap().len(), 3);
    // With no principals, `anonymous` is everyone: `quotas.things` (1)
    // does not apply to it.
    let text = metrics(&sidecar).await;
    assert!(text.contains(r#"limit="max_total_td_bytes""#), "{text}");
    let bytes = text
        .lines()
        .find_map(|l| l.strip_prefix("lmos_sidecar_directory_bytes "))
        .and_then(|n| n.parse::<u64>().ok())
        .expect("the directory's bytes");
    assert!(bytes > 120_000 && bytes <= 150_000, "{bytes}");
    sidecar.stop().await;
}
