//! Imported upstreams (issue 44): MCP servers and A2A agents nobody here
//! wrote, run from the official SDKs (`tests/imports/`, Python `mcp` and
//! `a2a-sdk`, the MCP TypeScript SDK in `tests/mcp/`), brought onto the bus
//! by `[[imports.mcp]]` and `[[imports.a2a]]`, and used as Things from every
//! transport; hostile ones (`tests/imports/hostile_mcp.py`) hurt no one.
//!
//! The modules: [`mcp_calls`] (each MCP server from the WebSocket, MQTT 5
//! and the HTTP binding), [`a2a_calls`], [`faces`] (our own `/mcp` and
//! `/a2a` in front of imports), [`presence`] (an upstream going away and
//! coming back), [`traces`] (one trace into the upstream, on the OTLP
//! wire), [`hostile`].

mod a2a_calls;
mod faces;
mod hostile;
mod mcp_calls;
mod no_token;
mod presence;
mod traces;

use std::net::SocketAddr;
use std::time::Duration;

use lmos_sidecar::config::ImportConfig;
use lmos_testkit::{self as common, lmos, test_config, MqttClient, TestSidecar, WsClient};
use serde_json::{json, Value};

/// The imported MCP fixture's Thing (`name = "calc"`).
pub const CALC: &str = "urn:lmos:import:calc";
/// The imported A2A fixture's Thing (`name = "travel"`).
pub const TRAVEL: &str = "urn:lmos:import:travel";
/// Longest an import may take to be up: an SDK starting on a loaded machine.
pub const UP: Duration = Duration::from_secs(30);

/// The MCP fixture server's script (Python, FastMCP).
pub const MCP_PY: &str = "tests/imports/mcp_server.py";
/// The MCP fixture server's script (TypeScript SDK).
pub const MCP_TS: &str = "tests/imports/mcp_server.mjs";
/// The A2A fixture agent's script.
pub const A2A_PY: &str = "tests/imports/a2a_agent.py";
/// The Agent Card's path on an A2A agent.
pub const CARD: &str = "/.well-known/agent-card.json";

/// A test sidecar's configuration with these imports.
pub fn config_with(mcp: Vec<ImportConfig>, a2a: Vec<ImportConfig>) -> lmos_sidecar::Config {
    let mut config = test_config();
    config.imports.mcp = mcp;
    config.imports.a2a = a2a;
    config
}

/// A sidecar with these imports, once every imported Thing's TD is served.
pub async fn start(mcp: Vec<ImportConfig>, a2a: Vec<ImportConfig>) -> TestSidecar {
    start_config(config_with(mcp, a2a)).await
}

/// A sidecar on `config`, once every imported Thing is connected.
pub async fn start_config(config: lmos_sidecar::Config) -> TestSidecar {
    let things: Vec<String> = config.imports.all().map(|(i, _)| i.thing_id()).collect();
    let sidecar = TestSidecar::start_with(config).await;
    for thing in things {
        connected(sidecar.http, &thing).await;
    }
    sidecar
}

/// Waits until the Thing's TD has the upstream's actions: the bridge
/// registers one without affordances before it reaches the upstream.
pub async fn connected(http: SocketAddr, thing: &str) -> Value {
    td_when(http, thing, UP, |td| {
        td["actions"].as_object().is_some_and(|a| !a.is_empty())
    })
    .await
}

/// `/things/{thing}`.
pub fn thing_path(thing: &str) -> String {
    format!("/things/{}", common::urlencode(thing))
}

/// The Thing's TD from the directory, once it is there.
pub async fn td_within(http: SocketAddr, thing: &str, wait: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let got = common::http(http, "GET", &thing_path(thing), None, b"").await;
        if got.status == 200 {
            return got.json();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TD of {thing} was not served within {wait:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The TD from the directory once `check` holds for it, within `wait`.
pub async fn td_when(
    http: SocketAddr,
    thing: &str,
    wait: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let td = td_within(http, thing, wait).await;
        if check(&td) {
            return td;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TD of {thing} never changed as expected: {td:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An MQTT subscriber of a Thing's retained `agent/status`.
pub struct Presence(MqttClient);

impl Presence {
    pub async fn of(mqtt: SocketAddr, thing: &str) -> Presence {
        let id = format!("presence-{}", uuid::Uuid::new_v4());
        let mut client = MqttClient::connect(mqtt, &id).await;
        client
            .subscribe(&format!("lmos/{thing}/agent/status"))
            .await;
        Presence(client)
    }

    /// The first presence (retained or live) saying `status`, within `wait`.
    pub async fn until(&mut self, status: &str, wait: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + wait;
        let mut seen = Vec::new();
        loop {
            let publish = tokio::time::timeout_at(deadline, self.0.publishes.recv())
                .await
                .unwrap_or_else(|_| panic!("no `{status}` presence within {wait:?}; saw {seen:?}"))
                .expect("the subscriber is connected");
            let v: Value = serde_json::from_slice(&publish.payload).unwrap_or(Value::Null);
            if v["status"] == status {
                return v;
            }
            seen.push(v);
        }
    }
}

/// The messages a consumer gets for one request, the last one final.
pub fn is_final(m: &Value) -> bool {
    m["messageType"] == "error"
        || m["messageType"] == "propertyReading"
        || matches!(
            m["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
}

/// Sends `invokeAction` of `action` with `input` (and `extra` members) and
/// reads everything answered under its correlation ID until the end.
pub async fn invoke(
    ws: &mut WsClient,
    thing: &str,
    action: &str,
    input: Value,
    extra: Value,
) -> Vec<Value> {
    let correlation = uuid::Uuid::new_v4().to_string();
    let mut request = lmos(
        thing,
        "invokeAction",
        json!({"action": action, "correlationID": correlation}),
    );
    if !input.is_null() {
        request["input"] = input;
    }
    for (k, v) in extra.as_object().expect("extra is an object") {
        request[k] = v.clone();
    }
    ws.send(request).await;
    answers(ws, &correlation).await
}

/// What `ws` receives for `correlation`, until a final message.
pub async fn answers(ws: &mut WsClient, correlation: &str) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let m = ws.recv().await;
        if m["correlationID"] != correlation {
            continue;
        }
        let done = is_final(&m);
        got.push(m);
        if done {
            return got;
        }
    }
}

/// The last of an invocation's messages.
pub fn last(messages: &[Value]) -> &Value {
    messages.last().expect("at least one message")
}

/// The `running` statuses among an invocation's messages.
pub fn running(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["status"] == "running")
        .collect()
}

/// Reads property `name` of `thing` over the WebSocket: the reading or error.
pub async fn read_property(ws: &mut WsClient, thing: &str, name: &str) -> Value {
    let correlation = uuid::Uuid::new_v4().to_string();
    ws.send(lmos(
        thing,
        "readProperty",
        json!({"name": name, "correlationID": correlation}),
    ))
    .await;
    last(&answers(ws, &correlation).await).clone()
}

/// `add` {a: 2, b: 3} on the calc Thing answers {"sum": 5}.
pub async fn assert_adds(ws: &mut WsClient) {
    let got = invoke(ws, CALC, "add", json!({"a": 2, "b": 3}), json!({})).await;
    let done = last(&got);
    assert_eq!(done["status"], "completed", "{got:#?}");
    assert!(is_sum(&done["output"], 5.0), "{got:#?}");
}

/// `{"sum": n}`, whether the server wrote `5` or `5.0` (FastMCP's `float`).
pub fn is_sum(v: &Value, n: f64) -> bool {
    v.as_object().is_some_and(|o| o.len() == 1) && v["sum"].as_f64() == Some(n)
}

/// A fixture's traceparent's trace ID (`00-{trace}-{span}-{flags}`).
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let parts: Vec<&str> = traceparent.split('-').collect();
    (parts.len() == 4 && parts[0] == "00").then(|| parts[1])
}

/// Invokes `action` by the request topic as an MQTT 5 client with a
/// response topic and correlation data; the final reply there.
pub async fn mqtt5_invoke(sidecar: &TestSidecar, thing: &str, action: &str, input: Value) -> Value {
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    use rumqttc::v5::mqttbytes::QoS;
    let id = format!("consumer5-{}", uuid::Uuid::new_v4());
    let inbox = format!("{id}/replies");
    let (client, mut rx) = common::mqtt5_client(sidecar.mqtt5, &id, &inbox).await;
    let properties = PublishProperties {
        response_topic: Some(inbox.clone()),
        correlation_data: Some(bytes::Bytes::from(id.clone())),
        ..Default::default()
    };
    let request = lmos(
        thing,
        "invokeAction",
        json!({"action": action, "input": input}),
    );
    client
        .publish_with_properties(
            format!("lmos/{thing}/requests/invokeAction"),
            QoS::AtLeastOnce,
            false,
            request.to_string(),
            properties,
        )
        .await
        .unwrap();
    loop {
        let publish = common::mqtt5_next_publish(&mut rx).await;
        assert_eq!(publish.topic, inbox);
        let data = publish.properties.and_then(|p| p.correlation_data);
        assert_eq!(data.as_deref(), Some(id.as_bytes()), "its correlation data");
        let reply: Value = serde_json::from_slice(&publish.payload).unwrap();
        if is_final(&reply) {
            return reply;
        }
    }
}

/// `POST /things/{thing}/actions/{action}` with `input`: the output, at
/// once (200) or from the status resource (201) once completed.
pub async fn http_invoke(sidecar: &TestSidecar, thing: &str, action: &str, input: Value) -> Value {
    let path = format!("{}/actions/{action}", thing_path(thing));
    let body = input.to_string();
    let json = Some("application/json");
    let posted = common::http(sidecar.http, "POST", &path, json, body.as_bytes()).await;
    match posted.status {
        200 => posted.json(),
        201 => {
            let location = posted
                .header("location")
                .expect("a status resource")
                .to_owned();
            let deadline = tokio::time::Instant::now() + common::WAIT;
            loop {
                let v = common::http(sidecar.http, "GET", &location, None, b"")
                    .await
                    .json();
                match v["status"].as_str() {
                    Some("completed") => return v["output"].clone(),
                    Some("failed" | "cancelled") => panic!("POST {path}: {v}"),
                    _ => {}
                }
                assert!(tokio::time::Instant::now() < deadline, "{v}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        _ => panic!("POST {path}: {posted:?}"),
    }
}
