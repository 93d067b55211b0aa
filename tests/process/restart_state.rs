//! What the gateway and the directory hold survives a restart of a real
//! sidecar process on the same data directory, graceful (SIGTERM) or not
//! (SIGKILL) (issue 31): a consumer resumes by the last event ID it saw,
//! `queryAction` finds an invocation by its correlation ID (one that was
//! running comes back failed, saying why), TDs registered over HTTP are
//! served again on their owners' quotas. With `store.memory_only`, nothing
//! is kept.
//!
//! Writes of the history and of invocation records are not waited for (no
//! one acknowledges them); before a SIGKILL the tests wait for a TD
//! registration's answer, which comes once it and everything queued before
//! it is on disk.

use lmos_testkit as common;

use common::process::{on_directory, DataDir, Started};
use common::{http, lamp_td, lmos, MqttClient, WsClient};
use lmos_testkit::sidecar_command as sidecar;
use serde_json::{json, Value};

const THING: &str = "urn:uuid:0b1d3a7a-4f97-4e6b-b45f-f3c2e1c84c31";
const TD_JSON: Option<&str> = Some("application/td+json");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Term,
    Kill,
}

/// Starts `cmd` with its store in `dir`.
fn start(mut cmd: std::process::Command, dir: &std::path::Path) -> Started {
    Started::start(on_directory(&mut cmd, dir))
}

fn stop_as(sidecar: Started, how: Stop) {
    match how {
        // It asserts a clean exit.
        Stop::Term => {
            sidecar.terminate();
        }
        Stop::Kill => sidecar.kill(),
    }
}

fn ws_url(sidecar: &Started) -> String {
    format!("ws://{}/lmos", sidecar.http)
}

/// A TD for `id` (the Lamp's, renamed).
fn td(id: &str) -> Value {
    let mut td = lamp_td();
    td["id"] = json!(id);
    td
}

async fn put_td(sidecar: &Started, id: &str, td: &Value) -> u16 {
    let path = format!("/things/{}", common::urlencode(id));
    let put = http(
        sidecar.http,
        "PUT",
        &path,
        TD_JSON,
        td.to_string().as_bytes(),
    )
    .await;
    put.status
}

async fn get_td(sidecar: &Started, id: &str) -> (u16, Value) {
    let path = format!("/things/{}", common::urlencode(id));
    let got = http(sidecar.http, "GET", &path, None, b"").await;
    let body = serde_json::from_str(&got.body).unwrap_or(Value::Null);
    (got.status, body)
}

/// Returns once everything the sidecar queued for its store so far is on
/// disk: a TD registration is answered only then, and the store commits
/// in order.
async fn on_disk(sidecar: &Started) {
    let status = put_td(sidecar, "urn:test:barrier", &td("urn:test:barrier")).await;
    assert!(matches!(status, 201 | 204), "{status}");
}

/// Publishes event `tick` number `i` as an MQTT agent; its messageID.
async fn publish(agent: &mut MqttClient, i: usize) -> String {
    agent.publish_event(THING, "tick", json!({"i": i})).await
}

/// Subscribes to the Thing's events, resuming after `last` when given.
async fn subscribe(sidecar: &Started, last: Option<&str>) -> WsClient {
    let mut consumer = WsClient::connect(&ws_url(sidecar)).await;
    let mut members = json!({"correlationID": "ticks"});
    if let Some(last) = last {
        members["lastMessageID"] = json!(last);
    }
    consumer.subscribe_all_events(THING, members).await;
    consumer
}

/// The next `n` messages, which must be events without a gap before them.
async fn events(consumer: &mut WsClient, n: usize) -> Vec<String> {
    common::message_ids(&consumer.recv_events(n).await)
}

#[tokio::test]
async fn a_consumer_resumes_across_a_sigterm_and_a_sigkill_restart() {
    let dir = DataDir::new("restart-history");
    let mut sidecar = start(sidecar!(), &dir.0);
    let mut consumer = subscribe(&sidecar, None).await;
    let mut agent = MqttClient::connect(sidecar.mqtt, "ticker").await;
    let mut published = vec![publish(&mut agent, 0).await];
    assert_eq!(events(&mut consumer, 1).await, published);
    let mut seen = published[0].clone();
    drop(consumer);

    for (round, stop) in [Stop::Term, Stop::Kill].into_iter().enumerate() {
        // Away: the gateway keeps the Thing's events for the consumer.
        for i in 0..3 {
            published.push(publish(&mut agent, 10 * round + i + 1).await);
        }
        // The agent's events reach the history before the barrier's TD.
        let mut witness = subscribe(&sidecar, Some(&seen)).await;
        let missed = published.len() - 1 - published.iter().position(|p| *p == seen).unwrap();
        events(&mut witness, missed).await;
        drop(witness);
        on_disk(&sidecar).await;
        drop(agent);
        stop_as(sidecar, stop);

        sidecar = start(sidecar!(), &dir.0);
        agent = MqttClient::connect(sidecar.mqtt, "ticker").await;
        // Published as soon as the sidecar is ready, before the consumer is
        // back: kept too, as the gateway follows the restored Thing again
        // (subscribed before it says it is ready).
        published.push(publish(&mut agent, 10 * round + 9).await);
        let start = published.iter().position(|p| *p == seen).unwrap() + 1;
        let expected = published[start..].to_vec();
        let mut consumer = subscribe(&sidecar, Some(&seen)).await;
        assert_eq!(
            events(&mut consumer, expected.len()).await,
            expected,
            "after {stop:?}: the events after the last one seen, in order, no gap"
        );
        let live = publish(&mut agent, 100 + round).await;
        published.push(live.clone());
        assert_eq!(events(&mut consumer, 1).await, std::slice::from_ref(&live));
        consumer.assert_nothing_pending().await;
        seen = live;
    }
    stop_as(sidecar, Stop::Term);
}

/// The agent's side of an invocation: the request it got.
async fn invoked(agent: &mut WsClient, consumer: &mut WsClient, correlation: &str) -> Value {
    consumer
        .send(lmos(
            common::LAMP,
            "invokeAction",
            json!({"action": "go", "correlationID": correlation}),
        ))
        .await;
    let request = agent.recv().await;
    assert_eq!(request["messageType"], "invokeAction", "{request}");
    request
}

async fn status(agent: &mut WsClient, request: &Value, status: &str, output: Value) {
    let mut reply = lmos(
        common::LAMP,
        "actionStatus",
        json!({"action": "go", "status": status, "output": output}),
    );
    reply["correlationID"] = request["correlationID"].clone();
    agent.send(reply).await;
}

async fn query(consumer: &mut WsClient, correlation: &str) -> Value {
    consumer
        .send(lmos(
            common::LAMP,
            "queryAction",
            json!({"action": "go", "correlationID": correlation}),
        ))
        .await;
    consumer.recv().await
}

#[tokio::test]
async fn query_action_finds_invocations_after_a_restart_and_running_ones_failed() {
    for stop in [Stop::Term, Stop::Kill] {
        let dir = DataDir::new("restart-invocations");
        let sidecar = start(sidecar!(), &dir.0);
        assert_eq!(put_td(&sidecar, common::LAMP, &lamp_td()).await, 201);
        let host = format!(
            "{}?host={}",
            ws_url(&sidecar),
            common::urlencode(common::LAMP)
        );
        let mut agent = WsClient::connect(&host).await;
        // Hosting once its connection's commands are applied.
        agent.barrier().await;
        let mut consumer = WsClient::connect(&ws_url(&sidecar)).await;

        let done = invoked(&mut agent, &mut consumer, "done-1").await;
        status(&mut agent, &done, "completed", json!("lit")).await;
        assert_eq!(consumer.recv().await["status"], "completed");
        let running = invoked(&mut agent, &mut consumer, "running-1").await;
        status(&mut agent, &running, "running", json!("warming up")).await;
        assert_eq!(consumer.recv().await["status"], "running");
        on_disk(&sidecar).await;
        stop_as(sidecar, stop);

        let sidecar = start(sidecar!(), &dir.0);
        let mut consumer = WsClient::connect(&ws_url(&sidecar)).await;
        let got = query(&mut consumer, "done-1").await;
        assert_eq!(
            (got["status"].as_str(), got["correlationID"].as_str()),
            (Some("completed"), Some("done-1")),
            "after {stop:?}: {got}"
        );
        assert_eq!(got["output"], "lit");
        let got = query(&mut consumer, "running-1").await;
        assert_eq!(got["status"], "failed", "after {stop:?}: {got}");
        let why = got["output"]["error"].as_str().unwrap_or_default();
        assert!(
            why.contains("restarted while this invocation was running"),
            "{got}"
        );
        let got = query(&mut consumer, "never").await;
        assert_eq!(
            (got["messageType"].as_str(), got["status"].as_str()),
            (Some("error"), Some("404")),
            "{got}"
        );
        // Over HTTP too: the invocation's status resource.
        let path = format!(
            "/things/{}/actions/go/done-1",
            common::urlencode(common::LAMP)
        );
        let over_http = http(sidecar.http, "GET", &path, None, b"").await;
        assert_eq!(over_http.status, 200, "{over_http:?}");
        assert_eq!(over_http.json()["status"], "completed");
        stop_as(sidecar, Stop::Term);
    }
}

#[tokio::test]
async fn a_finished_invocation_s_retention_counts_across_the_restart() {
    const RETENTION_MS: u64 = 4_000;
    let dir = DataDir::new("restart-retention");
    let start = || {
        let mut cmd = sidecar!();
        cmd.env(
            "LMOS_SIDECAR_REQUESTS__INVOCATION_RETENTION_MS",
            RETENTION_MS.to_string(),
        );
        start(cmd, &dir.0)
    };
    let sidecar = start();
    assert_eq!(put_td(&sidecar, common::LAMP, &lamp_td()).await, 201);
    let host = format!(
        "{}?host={}",
        ws_url(&sidecar),
        common::urlencode(common::LAMP)
    );
    let mut agent = WsClient::connect(&host).await;
    agent.barrier().await;
    let mut consumer = WsClient::connect(&ws_url(&sidecar)).await;
    let done = invoked(&mut agent, &mut consumer, "done-1").await;
    status(&mut agent, &done, "completed", json!("lit")).await;
    assert_eq!(consumer.recv().await["status"], "completed");
    let finished = std::time::Instant::now();
    on_disk(&sidecar).await;
    stop_as(sidecar, Stop::Kill);

    // Back within the retention: still there.
    let sidecar = start();
    let mut consumer = WsClient::connect(&ws_url(&sidecar)).await;
    let got = query(&mut consumer, "done-1").await;
    if finished.elapsed().as_millis() < u128::from(RETENTION_MS) {
        assert_eq!(got["status"], "completed", "{got}");
    }
    stop_as(sidecar, Stop::Kill);

    // Down until past the retention: gone.
    let left =
        std::time::Duration::from_millis(RETENTION_MS + 100).saturating_sub(finished.elapsed());
    std::thread::sleep(left);
    let sidecar = start();
    let mut consumer = WsClient::connect(&ws_url(&sidecar)).await;
    let got = query(&mut consumer, "done-1").await;
    assert_eq!(got["status"], "404", "{got}");
    stop_as(sidecar, Stop::Term);
}

#[tokio::test]
async fn tds_registered_over_http_come_back_on_their_owners_quota() {
    let dir = DataDir::new("restart-tds");
    let config = dir.0.join("sidecar.toml");
    std::fs::write(&config, "[quotas.principals.anonymous]\nthings = 3\n").unwrap();
    let start = || {
        let mut cmd = sidecar!();
        cmd.arg("--config").arg(&config);
        start(cmd, &dir.0.join("data"))
    };
    let sidecar = start();
    assert_eq!(put_td(&sidecar, "urn:test:a", &td("urn:test:a")).await, 201);
    assert_eq!(put_td(&sidecar, "urn:test:b", &td("urn:test:b")).await, 201);
    let deleted = http(sidecar.http, "DELETE", "/things/urn:test:b", None, b"").await;
    assert_eq!(deleted.status, 204);
    let patch = http(
        sidecar.http,
        "PATCH",
        "/things/urn:test:a",
        Some("application/merge-patch+json"),
        br#"{"title": "Lamp A"}"#,
    )
    .await;
    assert_eq!(patch.status, 204, "{patch:?}");
    let mut anonymous = td("x");
    anonymous.as_object_mut().unwrap().remove("id");
    let posted = http(
        sidecar.http,
        "POST",
        "/things",
        TD_JSON,
        anonymous.to_string().as_bytes(),
    )
    .await;
    assert_eq!(posted.status, 201, "{posted:?}");
    let posted = posted.header("location").unwrap().to_owned();
    // An agent's TD, registered over its WebSocket: not kept in `tds`.
    let host = format!("{}?host={}", ws_url(&sidecar), common::urlencode(THING));
    let mut agent = WsClient::connect(&host).await;
    agent.send(td(THING)).await;
    let deadline = std::time::Instant::now() + common::WAIT;
    while get_td(&sidecar, THING).await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's TD is registered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let old_port = sidecar.http.port();
    stop_as(sidecar, Stop::Kill);

    let sidecar = start();
    let (status, a) = get_td(&sidecar, "urn:test:a").await;
    assert_eq!((status, a["title"].as_str()), (200, Some("Lamp A")), "{a}");
    let forms = a.to_string();
    assert!(
        forms.contains(&format!(":{}/", sidecar.http.port()))
            && !forms.contains(&format!(":{old_port}/")),
        "forms for this run's port: {forms}"
    );
    assert_eq!(
        get_td(&sidecar, "urn:test:b").await.0,
        404,
        "deleted stays deleted"
    );
    let posted = http(sidecar.http, "GET", &posted, None, b"").await;
    assert_eq!(posted.status, 200, "{posted:?}");
    // The agent's TD may be served again from its retained TD topic (kept
    // with the retained messages), learnt as another sidecar's: on no
    // one's quota. a, the POSTed one and the barrier's use anonymous's 3.
    on_disk(&sidecar).await;
    assert_eq!(put_td(&sidecar, "urn:test:c", &td("urn:test:c")).await, 429);
    let deleted = http(sidecar.http, "DELETE", "/things/urn:test:a", None, b"").await;
    assert_eq!(deleted.status, 204);
    assert_eq!(put_td(&sidecar, "urn:test:c", &td("urn:test:c")).await, 201);
    stop_as(sidecar, Stop::Term);
}

#[tokio::test]
async fn memory_only_keeps_nothing() {
    let dir = DataDir::new("restart-memory");
    let memory = || {
        let mut cmd = sidecar!();
        cmd.current_dir(&dir.0);
        Started::start(&mut cmd)
    };
    let sidecar = memory();
    assert_eq!(put_td(&sidecar, "urn:test:a", &td("urn:test:a")).await, 201);
    let mut consumer = subscribe(&sidecar, None).await;
    let mut agent = MqttClient::connect(sidecar.mqtt, "ticker").await;
    let first = publish(&mut agent, 0).await;
    events(&mut consumer, 1).await;
    stop_as(sidecar, Stop::Term);

    let sidecar = memory();
    assert_eq!(get_td(&sidecar, "urn:test:a").await.0, 404);
    let mut consumer = subscribe(&sidecar, Some(&first)).await;
    let gap = consumer.recv().await;
    assert_eq!(gap["messageType"], "error", "{gap}");
    assert_eq!(gap["status"], "410", "a gap: nothing kept {gap}");
    assert_eq!(
        std::fs::read_dir(&dir.0).unwrap().count(),
        0,
        "nothing written"
    );
    stop_as(sidecar, Stop::Term);
}
