//! The HTTP binding (`/things/{id}/properties/...`, `/things/{id}/actions/...`)
//! and the value-only MQTT topics, as a WoT consumer that speaks neither
//! `lmosprotocol` nor MQTT envelopes sees them, against a real sidecar and
//! real agents (the example agent, or a scripted one on the WebSocket).

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use base64::Engine;
use common::*;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use serde_json::{json, Value};
use weather_agent::THING_ID;

const JSON: Option<&str> = Some("application/json");

fn weather(path: &str) -> String {
    format!("/things/{}{path}", urlencode(THING_ID))
}

async fn with_weather_agent(config: lmos_sidecar::Config) -> TestSidecar {
    start_with_agent(config, THING_ID, |url| async move {
        weather_agent::serve(&url).await.map_err(|e| e.to_string())
    })
    .await
}

#[tokio::test]
async fn properties_are_read_written_and_read_all_over_http() {
    let sidecar = with_weather_agent(test_config()).await;
    let a = sidecar.http;
    let mut observer = sidecar.ws().await;
    observer
        .send(lmos(
            THING_ID,
            "observeProperty",
            json!({"name": "modelConfiguration", "correlationID": "o"}),
        ))
        .await;
    observer.barrier().await;

    let read = http(
        a,
        "GET",
        &weather("/properties/modelConfiguration"),
        None,
        b"",
    )
    .await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.header("content-type"), Some("application/json"));
    assert_eq!(read.json()["modelName"], "gpt-4o");

    let value = json!({"modelName": "http", "temperature": 0.1, "maxTokens": 7});
    let written = http(
        a,
        "PUT",
        &weather("/properties/modelConfiguration"),
        JSON,
        value.to_string().as_bytes(),
    )
    .await;
    assert_eq!(written.status, 204, "{written:?}");
    // The agent's confirmation reaches observers as a reading.
    loop {
        let m = observer.recv().await;
        if m["value"] == value {
            break;
        }
    }
    let all = http(a, "GET", &weather("/properties"), None, b"").await;
    assert_eq!(all.status, 200, "{all:?}");
    assert_eq!(all.json(), json!({"modelConfiguration": value}));

    // The value-only topic keeps it retained for late MQTT subscribers.
    let mut late = sidecar.mqtt("late").await;
    late.subscribe(&format!(
        "lmos/{THING_ID}/values/properties/modelConfiguration"
    ))
    .await;
    let (_, retained, retain) = late.recv_json().await;
    assert_eq!((retained, retain), (value, true));
    sidecar.stop().await;
}

#[tokio::test]
async fn a_synchronous_action_answers_with_its_output_and_keeps_its_status() {
    let sidecar = with_weather_agent(test_config()).await;
    let a = sidecar.http;
    let input = json!({"question": "What is the weather in Oslo?", "interactionMode": "text"});
    let done = http(
        a,
        "POST",
        &weather("/actions/getWeather"),
        JSON,
        input.to_string().as_bytes(),
    )
    .await;
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(
        done.json(),
        "The weather in Oslo is sunny with a temperature of 25°C."
    );
    // The caller's latest invocation, by the action's own resource.
    let latest = http(a, "GET", &weather("/actions/getWeather"), None, b"").await;
    assert_eq!(latest.status, 200, "{latest:?}");
    assert_eq!(latest.json()["status"], "completed");
    assert_eq!(
        latest.json()["output"],
        "The weather in Oslo is sunny with a temperature of 25°C."
    );
    sidecar.stop().await;
}

const ASYNC_THING: &str = "urn:test:slow";

/// A Thing whose action `plan` is not synchronous, and `think`, which is.
fn slow_td() -> Value {
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": ASYNC_THING,
        "title": "Slow",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "actions": {
            "plan": {"synchronous": false, "forms": [{"href": "https://slow.example/plan"}]},
            "think": {"synchronous": true, "forms": [{"href": "https://slow.example/think"}]}
        }
    })
}

async fn slow_sidecar(timeout_ms: u64) -> (TestSidecar, WsClient) {
    let mut config = test_config();
    config.requests.timeout_ms = timeout_ms;
    let sidecar = TestSidecar::start_with(config).await;
    let put = http(
        sidecar.http,
        "PUT",
        &format!("/things/{ASYNC_THING}"),
        Some("application/td+json"),
        slow_td().to_string().as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201, "{put:?}");
    let agent = sidecar.ws_agent(ASYNC_THING).await;
    (sidecar, agent)
}

/// A POST on the slow Thing's action, answered while the test plays the
/// agent.
fn invoke(
    a: std::net::SocketAddr,
    action: &'static str,
    body: &'static [u8],
) -> tokio::task::JoinHandle<HttpResponse> {
    tokio::spawn(async move {
        let path = format!("/things/{ASYNC_THING}/actions/{action}");
        http(a, "POST", &path, JSON, body).await
    })
}

fn status(agent_request: &Value, status: &str, output: Option<Value>) -> Value {
    let mut m = lmos(
        ASYNC_THING,
        "actionStatus",
        json!({"action": agent_request["action"], "status": status, "correlationID": agent_request["correlationID"]}),
    );
    if let Some(o) = output {
        m["output"] = o;
    }
    m
}

#[tokio::test]
async fn a_long_action_gets_201_and_a_status_resource_to_query_and_cancel() {
    let (sidecar, mut agent) = slow_sidecar(10_000).await;
    let a = sidecar.http;
    let call = invoke(a, "plan", b"{\"goal\":\"x\"}");
    let request = agent.recv().await;
    assert_eq!(request["messageType"], "invokeAction");
    assert_eq!(request["input"], json!({"goal": "x"}));
    agent.send(status(&request, "pending", None)).await;
    let created = call.await.unwrap();
    assert_eq!(created.status, 201, "{created:?}");
    let location = created.header("location").unwrap().to_owned();
    assert!(location.starts_with(&format!("/things/{ASYNC_THING}/actions/plan/")));
    assert_eq!(created.json()["status"], "pending");
    assert_eq!(created.json()["href"], location);

    agent
        .send(status(&request, "running", Some(json!({"step": 1}))))
        .await;
    agent.barrier().await;
    let running = http(a, "GET", &location, None, b"").await;
    assert_eq!(running.status, 200, "{running:?}");
    assert_eq!(
        running.json(),
        json!({"status": "running", "output": {"step": 1}, "href": location})
    );

    // DELETE cancels at the agent, which confirms.
    let cancel = tokio::spawn(async move { http(a, "DELETE", &location, None, b"").await });
    let cancel_request = agent.recv().await;
    assert_eq!(cancel_request["messageType"], "cancelAction");
    assert_eq!(cancel_request["correlationID"], request["correlationID"]);
    agent.send(status(&request, "cancelled", None)).await;
    assert_eq!(cancel.await.unwrap().status, 204);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_synchronous_action_that_outlasts_the_request_timeout_gets_a_status_resource() {
    let (sidecar, mut agent) = slow_sidecar(300).await;
    let a = sidecar.http;
    let call = invoke(a, "think", b"");
    let request = agent.recv().await;
    assert_eq!(request.get("input"), None, "an empty body is no input");
    agent.send(status(&request, "running", None)).await;
    let created = call.await.unwrap();
    assert_eq!(created.status, 201, "{created:?}");
    let location = created.header("location").unwrap().to_owned();
    // The result, when it comes, is kept for the caller.
    agent
        .send(status(&request, "completed", Some(json!("thought"))))
        .await;
    agent.barrier().await;
    let done = http(a, "GET", &location, None, b"").await;
    assert_eq!(
        done.json(),
        json!({"status": "completed", "output": "thought", "href": location})
    );
    // Too late to cancel: the answer says how it ended.
    let late = http(a, "DELETE", &location, None, b"").await;
    assert_eq!(late.status, 409, "{late:?}");
    assert_eq!(late.json()["status"], "completed");
    sidecar.stop().await;
}

#[tokio::test]
async fn failures_are_problem_details_with_the_lmos_status() {
    let (sidecar, mut agent) = slow_sidecar(10_000).await;
    let a = sidecar.http;

    // The agent's own error, with its status.
    let call = invoke(a, "think", b"1");
    let request = agent.recv().await;
    let mut refusal = lmos(
        ASYNC_THING,
        "error",
        json!({"type": "https://example/busy", "title": "Busy", "status": "409", "detail": "Thinking already.", "instance": "urn:x", "correlationID": request["correlationID"]}),
    );
    refusal["correlationID"] = request["correlationID"].clone();
    agent.send(refusal).await;
    let refused = call.await.unwrap();
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(refused.json()["detail"], "Thinking already.");
    assert_eq!(refused.json()["status"], 409);

    // A failed action.
    let call = invoke(a, "think", b"");
    let request = agent.recv().await;
    agent
        .send(status(&request, "failed", Some(json!({"why": "no idea"}))))
        .await;
    let failed = call.await.unwrap();
    assert_eq!(failed.status, 500, "{failed:?}");
    assert_eq!(failed.json()["output"], json!({"why": "no idea"}));

    // Checked against the TD, the sidecar's own errors.
    let unknown = http(
        a,
        "POST",
        &format!("/things/{ASYNC_THING}/actions/nap"),
        None,
        b"",
    )
    .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(unknown.json()["detail"].as_str().unwrap().contains("plan"));
    let bad = http(
        a,
        "POST",
        &format!("/things/{ASYNC_THING}/actions/plan"),
        JSON,
        b"{oops",
    )
    .await;
    assert_eq!(bad.status, 400, "{bad:?}");
    let no_such = http(
        a,
        "GET",
        &format!("/things/{ASYNC_THING}/actions/plan/nope"),
        None,
        b"",
    )
    .await;
    assert_eq!(no_such.status, 404, "{no_such:?}");

    // No agent connected: 503, and the sidecar keeps serving.
    drop(agent);
    wait_for_stats(&sidecar, |s| s.hosted_things == 0).await;
    let gone = http(
        a,
        "POST",
        &format!("/things/{ASYNC_THING}/actions/plan"),
        None,
        b"",
    )
    .await;
    assert_eq!(gone.status, 503, "{gone:?}");
    let td = http(a, "GET", &format!("/things/{ASYNC_THING}"), None, b"").await;
    assert_eq!(td.status, 200);
    sidecar.stop().await;
}

fn basic(name: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
    format!("Basic {encoded}")
}

#[tokio::test]
async fn http_requests_take_the_rights_a_websocket_message_would() {
    let mut config = test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    config.auth.anonymous = Grants::default();
    let principal = |name: &str, consume: &[&str], operate: &[&str], host: &[&str]| {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        PrincipalConfig {
            name: name.into(),
            password_hash: hash_password("pw"),
            host: v(host),
            consume: v(consume),
            operate: v(operate),
            ..PrincipalConfig::default()
        }
    };
    config.auth.principals = vec![
        principal("agent", &[ASYNC_THING], &[], &[ASYNC_THING]),
        principal("reader", &[ASYNC_THING], &[], &[]),
        principal("operator", &[ASYNC_THING], &[ASYNC_THING], &[]),
    ];
    let sidecar = TestSidecar::start_with(config).await;
    let a = sidecar.http;
    let (agent_auth, reader, operator) = (
        basic("agent", "pw"),
        basic("reader", "pw"),
        basic("operator", "pw"),
    );
    let put = http_with(
        a,
        "PUT",
        &format!("/things/{ASYNC_THING}"),
        &[
            ("Authorization", &agent_auth),
            ("Content-Type", "application/td+json"),
        ],
        slow_td().to_string().as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201, "{put:?}");
    let url = format!("{}?host={}", sidecar.ws_url(), urlencode(ASYNC_THING));
    let mut request = ws_request(&url, Some("lmosprotocol"));
    request
        .headers_mut()
        .insert("Authorization", agent_auth.parse().unwrap());
    let mut agent = WsClient::connect_request(request).await.unwrap();
    wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;

    let path = format!("/things/{ASYNC_THING}/actions/think");
    let anonymous = http(a, "POST", &path, None, b"").await;
    assert_eq!(anonymous.status, 401);
    let denied = http_with(
        a,
        "POST",
        &path,
        &[
            ("Authorization", &reader),
            ("Content-Type", "application/json"),
        ],
        b"\"reader\"",
    )
    .await;
    assert_eq!(denied.status, 403, "{denied:?}");
    assert!(denied.json()["detail"]
        .as_str()
        .unwrap()
        .contains("operate"));

    let invoked = tokio::spawn(async move {
        http_with(
            a,
            "POST",
            &path,
            &[
                ("Authorization", &operator),
                ("Content-Type", "application/json"),
            ],
            b"\"operator\"",
        )
        .await
    });
    let request = agent.recv().await;
    assert_eq!(request["input"], "operator", "the reader's never came");
    agent
        .send(status(&request, "completed", Some(json!("ok"))))
        .await;
    let allowed = invoked.await.unwrap();
    assert_eq!((allowed.status, allowed.json()), (200, json!("ok")));
    sidecar.stop().await;
}

#[tokio::test]
async fn value_topics_follow_what_mqtt_agents_publish() {
    let sidecar = TestSidecar::start().await;
    let thing = "urn:test:sensor";
    let mut agent = mqtt_agent(sidecar.mqtt, "sensor", thing, None).await;
    let mut wot = sidecar.mqtt("wot").await;
    wot.subscribe(&format!("lmos/{thing}/values/#")).await;

    agent
        .publish_event(thing, "alarm", json!({"level": 3}))
        .await;
    let (topic, data, retain) = wot.recv_json().await;
    assert_eq!(topic, format!("lmos/{thing}/values/events/alarm"));
    assert_eq!((data, retain), (json!({"level": 3}), false));

    agent
        .publish(
            &format!("lmos/{thing}/properties/temp"),
            &reading(thing, "temp", json!(21.5)),
            true,
        )
        .await;
    let (topic, value, _) = wot.recv_json().await;
    assert_eq!(
        (topic.as_str(), value),
        (
            format!("lmos/{thing}/values/properties/temp").as_str(),
            json!(21.5)
        )
    );

    // Retained for a late subscriber.
    let mut consumer = sidecar.mqtt("consumer").await;
    consumer
        .subscribe(&format!("lmos/{thing}/values/properties/temp"))
        .await;
    let (_, retained, retain) = consumer.recv_json().await;
    assert_eq!((retained, retain), (json!(21.5), true));
    sidecar.stop().await;
}

/// The mirror starts with the first subscription that could read a value
/// topic: that subscription finds the value of a reading retained before
/// it, and every event published after its SUBACK.
#[tokio::test]
async fn the_first_value_subscription_finds_earlier_readings_and_every_later_event() {
    let sidecar = TestSidecar::start().await;
    let thing = "urn:test:late";
    let mut agent = mqtt_agent(sidecar.mqtt, "late", thing, None).await;
    agent
        .publish(
            &format!("lmos/{thing}/properties/temp"),
            &reading(thing, "temp", json!(19)),
            true,
        )
        .await;
    // The reading is in the broker once a subscriber of its own topic has it.
    let mut envelope = sidecar.mqtt("envelope").await;
    envelope
        .subscribe(&format!("lmos/{thing}/properties/temp"))
        .await;
    let (_, retained, _) = envelope.recv_json().await;
    assert_eq!(retained["value"], json!(19));

    let mut wot = sidecar.mqtt("wot").await;
    wot.subscribe(&format!("+/{thing}/values/+/+")).await;
    agent.publish_event(thing, "alarm", json!(1)).await;
    let mut got = Vec::new();
    for _ in 0..2 {
        let (topic, value, _) = wot.recv_json().await;
        got.push((topic, value));
    }
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (format!("lmos/{thing}/values/events/alarm"), json!(1)),
            (format!("lmos/{thing}/values/properties/temp"), json!(19)),
        ]
    );
    sidecar.stop().await;
}
