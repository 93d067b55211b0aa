//! A2A at `/a2a/{thingID}` and the Agent Cards, driven by the official A2A
//! Python SDK nobody here wrote (PyPI `a2a-sdk`, `tests/a2a/client.py`)
//! against a real sidecar and the example WeatherAgent.
//!
//! Needs Python 3 with `pip install --user a2a-sdk` (the version `.ci/run`
//! pins; it installs it): the test fails, it does not skip, without it.

use std::time::Duration;

use base64::Engine;

use lmos_testkit::weather_agent::{self, THING_ID};
use lmos_testkit::{self as common, test_config, urlencode, TestSidecar};
use serde_json::{json, Value};

async fn with_weather_agent() -> TestSidecar {
    weather_agent::start_sidecar().await
}

async fn python(args: &[String]) -> Value {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a");
    let run = tokio::process::Command::new("python3")
        .arg("client.py")
        .args(args)
        .current_dir(dir)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the A2A client finished within a minute")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("no report (is a2a-sdk installed? .ci/run installs it): {stdout}\n{stderr}")
        })
}

fn states(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            e["task"]["status"]["state"]
                .as_str()
                .or(e["statusUpdate"]["status"]["state"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn the_a2a_sdk_resolves_the_card_sends_streams_gets_and_cancels() {
    let sidecar = with_weather_agent().await;
    let base = format!("http://{}", sidecar.http);
    let agent = format!("{base}/a2a/{}", urlencode(THING_ID));
    let report = python(&[base.clone(), agent.clone()]).await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    the_text_call_tasks_and_errors_are_as_the_specification_says(&report);

    let card = &report["card"];
    assert_eq!(card["name"], "WeatherAgent", "{report:#}");
    assert_eq!(card["skills"][0]["id"], "getWeather");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert!(card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/a2a/{THING_ID}")));

    // Sent: completed, the forecast as the artifact.
    let sent = &report["sent"].as_array().unwrap().last().unwrap()["task"];
    assert_eq!(
        sent["status"]["state"], "TASK_STATE_COMPLETED",
        "{report:#}"
    );
    let oslo = "The weather in Oslo is sunny with a temperature of 25°C.";
    assert_eq!(sent["artifacts"][0]["parts"][0]["text"], oslo, "{report:#}");
    // Got again by id.
    assert_eq!(report["got"]["id"], sent["id"]);
    assert_eq!(report["got"]["status"]["state"], "TASK_STATE_COMPLETED");

    // Streamed: submitted, working…, completed; the chunks append to one
    // artifact that reads as the forecast.
    let streamed = &report["streamed"];
    let s = states(streamed);
    assert_eq!(
        s.first().map(String::as_str),
        Some("TASK_STATE_SUBMITTED"),
        "{s:?}"
    );
    assert!(s.iter().any(|x| x == "TASK_STATE_WORKING"), "{s:?}");
    assert_eq!(
        s.last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{s:?}"
    );
    let chunks: String = streamed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["artifactUpdate"]["artifact"]["artifactId"] == "stream")
        .filter_map(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(
        chunks,
        "The weather in Rome is sunny with a temperature of 25°C."
    );

    // Cancelled while working.
    assert_eq!(
        report["cancelled"]["status"]["state"], "TASK_STATE_CANCELED",
        "{report:#}"
    );
    let s = states(&report["cancelStream"]);
    assert_eq!(
        s.last().map(String::as_str),
        Some("TASK_STATE_CANCELED"),
        "{s:?}"
    );
    sidecar.stop().await;
}

fn last_task(events: &Value) -> &Value {
    &events.as_array().unwrap().last().unwrap()["task"]
}

/// What the SDK saw of the text messages, ListTasks, SubscribeToTask, the
/// push-config and extended-card errors, task references and history.
fn the_text_call_tasks_and_errors_are_as_the_specification_says(report: &Value) {
    let oslo = "The weather in Oslo is sunny with a temperature of 25°C.";
    // The card offers text for getWeather (interactionMode has a default)
    // and the SDK's text message gets the forecast, sent and streamed.
    let card = &report["card"];
    assert!(card["skills"][0]["inputModes"]
        .as_array()
        .unwrap()
        .contains(&json!("text/plain")));
    // ProtoJSON leaves a false bool out.
    assert_ne!(card["capabilities"]["pushNotifications"], true);
    let text = last_task(&report["text"]);
    assert_eq!(
        text["status"]["state"], "TASK_STATE_COMPLETED",
        "{report:#}"
    );
    assert_eq!(text["artifacts"][0]["parts"][0]["text"], oslo);
    let streamed = &report["textStreamed"];
    assert_eq!(
        states(streamed).last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{report:#}"
    );
    let bergen: String = streamed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["artifactUpdate"]["artifact"]["artifactId"] == "output")
        .filter_map(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(
        bergen,
        "The weather in Bergen is sunny with a temperature of 25°C."
    );

    // GetTask: the real contextId, the history (the client's message
    // first, then the agent's), historyLength honoured.
    let got = &report["got"];
    let sent = last_task(&report["sent"]);
    assert_eq!(got["contextId"], sent["contextId"]);
    assert_ne!(got["contextId"], got["id"]);
    let history = got["history"].as_array().unwrap();
    assert_eq!(history[0]["messageId"], "m-Oslo", "{got:#}");
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert!(history.len() > 1 && history[1..].iter().all(|m| m["role"] == "ROLE_AGENT"));
    let short = report["gotShort"]["history"].as_array().unwrap();
    assert_eq!(short.len(), 1);
    assert_eq!(short[0], *history.last().unwrap());

    // SubscribeToTask: the running task, then its events to the end; a
    // finished task cannot be subscribed to.
    let subscribed = &report["subscribed"];
    let s = states(subscribed);
    assert_ne!(
        s.first().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{s:?}"
    );
    assert_eq!(
        s.last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{s:?}"
    );
    assert_eq!(report["subscribeFinished"], "UnsupportedOperationError");

    // ListTasks: this caller's 6 tasks, newest first, by pages; artifacts
    // only when asked.
    let listed = &report["listed"];
    assert_eq!(listed["totalSize"], 6, "{listed:#}");
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 6);
    assert!(tasks.iter().all(|t| t.get("artifacts").is_none()));
    let stamps: Vec<&str> = tasks
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");
    let page = &report["listedPage"];
    assert_eq!(page["tasks"].as_array().unwrap().len(), 2);
    assert!(!page["nextPageToken"].as_str().unwrap().is_empty());
    assert_eq!(page["tasks"][0]["id"], tasks[0]["id"]);
    assert_eq!(report["listedNext"]["tasks"][0]["id"], tasks[2]["id"]);
    let completed = report["listedCompleted"]["tasks"].as_array().unwrap();
    assert!(completed
        .iter()
        .all(|t| t["status"]["state"] == "TASK_STATE_COMPLETED" && t["artifacts"].is_array()));
    assert_eq!(completed.len(), 5, "{report:#}");

    // Push configs: not supported; no extended card without authentication.
    assert_eq!(
        report["push"],
        json!(vec!["PushNotificationNotSupportedError"; 4])
    );
    // The card says extendedAgentCard: false, so the SDK keeps the public
    // card without asking (the raw test sees the server's -32004).
    assert!(report["extended"]
        .as_str()
        .unwrap()
        .contains("extended_agent_card: false"));
    // A message naming an unknown task, a finished one, or another context.
    assert_eq!(
        report["refs"],
        json!({"unknown": "TaskNotFoundError", "finished": "UnsupportedOperationError",
            "otherContext": "InvalidParamsError"})
    );
}

async fn post_with(
    sidecar: &TestSidecar,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Value {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    common::http_with(
        sidecar.http,
        "POST",
        path,
        &all,
        body.to_string().as_bytes(),
    )
    .await
    .json()
}

/// The ErrorInfo of an error response.
fn reason(answer: &Value) -> &str {
    assert_eq!(
        answer["error"]["data"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
        "{answer}"
    );
    assert_eq!(answer["error"]["data"][0]["domain"], "a2a-protocol.org");
    answer["error"]["data"][0]["reason"].as_str().unwrap()
}

#[tokio::test]
async fn bad_calls_get_a2a_s_error_objects_and_the_agent_is_not_invoked() {
    let sidecar = with_weather_agent().await;
    let path = format!("/a2a/{}", urlencode(THING_ID));
    let v1 = [("A2A-Version", "1.0")];
    let post = |body: Value| {
        let (sidecar, path) = (&sidecar, path.clone());
        async move { post_with(sidecar, &path, &v1, &body).await }
    };
    // 0.3's names and shapes, no A2A-Version (0.3): a text part fills
    // `question`, `interactionMode` takes its default.
    let v03 = json!({"jsonrpc": "2.0", "id": 4, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "m2", "role": "user", "parts": [{"kind": "text", "text": "Weather in Lima?"}]}}});
    let done = post_with(&sidecar, &path, &[], &v03).await;
    assert_eq!(done["result"]["kind"], "task", "{done}");
    assert_eq!(done["result"]["status"]["state"], "completed", "{done}");
    assert_eq!(done["result"]["artifacts"][0]["parts"][0]["kind"], "text");
    assert_eq!(done["result"]["history"][0]["role"], "user");
    // The interface URL plus `/` answers the same.
    let slash = post_with(
        &sidecar,
        &format!("{path}/"),
        &v1,
        &json!({"jsonrpc": "2.0", "id": 5,
        "method": "GetTask", "params": {"id": done["result"]["id"], "historyLength": 0}}),
    )
    .await;
    assert_eq!(slash["result"]["id"], done["result"]["id"], "{slash}");
    assert!(slash["result"].get("history").is_none(), "{slash}");

    let unknown =
        post(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/nope", "params": {}})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    assert_eq!(reason(&unknown), "METHOD_NOT_FOUND");
    let missing =
        post(json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "nope"}}))
            .await;
    assert_eq!(missing["error"]["code"], -32001, "{missing}");
    assert_eq!(reason(&missing), "TASK_NOT_FOUND");
    assert_eq!(missing["error"]["data"][0]["metadata"]["taskId"], "nope");
    let resubscribe = post(json!({"jsonrpc": "2.0", "id": 6, "method": "SubscribeToTask", "params": {"id": done["result"]["id"]}})).await;
    assert_eq!(resubscribe["error"]["code"], -32004, "{resubscribe}");
    for (i, m) in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/set",
    ]
    .iter()
    .enumerate()
    {
        let push =
            post(json!({"jsonrpc": "2.0", "id": 10 + i, "method": m, "params": {"taskId": "x"}}))
                .await;
        assert_eq!(push["error"]["code"], -32003, "{push}");
        assert_eq!(reason(&push), "PUSH_NOTIFICATION_NOT_SUPPORTED");
    }
    let extended =
        post(json!({"jsonrpc": "2.0", "id": 20, "method": "GetExtendedAgentCard"})).await;
    assert_eq!(extended["error"]["code"], -32004, "{extended}");
    let list =
        post(json!({"jsonrpc": "2.0", "id": 21, "method": "ListTasks", "params": {"pageSize": 0}}))
            .await;
    assert_eq!(list["error"]["code"], -32602, "{list}");
    assert_eq!(reason(&list), "INVALID_PARAMS");
    let list = post(json!({"jsonrpc": "2.0", "id": 22, "method": "ListTasks", "params": {}})).await;
    assert_eq!(list["result"]["totalSize"], 1, "{list}");
    assert_eq!(list["result"]["nextPageToken"], "");

    // A version this interface does not speak.
    let send = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "v", "role": "ROLE_USER", "parts": [{"text": "Weather in Oslo?"}]}}});
    let refused = post_with(&sidecar, &path, &[("A2A-Version", "99.0")], &send).await;
    assert_eq!(refused["error"]["code"], -32009, "{refused}");
    assert_eq!(reason(&refused), "VERSION_NOT_SUPPORTED");
    let refused = post_with(
        &sidecar,
        &path,
        &v1,
        &json!({"jsonrpc": "2.0", "id": 8, "method": "SendMessage",
        "params": {"message": {"messageId": "x", "role": "ROLE_USER", "parts": []}}}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let plain = common::http(sidecar.http, "POST", &path, Some("text/plain"), b"{}").await;
    assert_eq!(plain.status, 415);
    assert_eq!(plain.json()["error"]["code"], -32005, "{plain:?}");
    let malformed = common::http(
        sidecar.http,
        "POST",
        &path,
        Some("application/json"),
        b"{nope",
    )
    .await
    .json();
    assert_eq!(malformed["error"]["code"], -32700);
    assert_eq!(reason(&malformed), "JSON_PARSE_ERROR");

    // Other paths under /a2a: a JSON problem, never an empty 404.
    for (method, p) in [
        ("GET", path.clone()),
        ("POST", format!("{path}/nope")),
        ("GET", "/a2a".into()),
    ] {
        let r = common::http(sidecar.http, method, &p, None, b"").await;
        assert!(matches!(r.status, 404 | 405), "{method} {p}: {r:?}");
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{method} {p}"
        );
        assert!(r.json()["detail"].is_string());
    }

    // The card: cacheable, and 304 when unchanged.
    let card_path = format!("{path}/.well-known/agent-card.json");
    let card = common::http(sidecar.http, "GET", &card_path, None, b"").await;
    assert_eq!(card.status, 200);
    assert!(card.header("cache-control").unwrap().contains("max-age="));
    assert!(card.header("last-modified").unwrap().ends_with(" GMT"));
    let etag = card.header("etag").unwrap().to_owned();
    let again = common::http_with(
        sidecar.http,
        "GET",
        &card_path,
        &[("If-None-Match", &etag)],
        b"",
    )
    .await;
    assert_eq!(again.status, 304, "{again:?}");
    assert_eq!(again.header("etag"), Some(etag.as_str()));

    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
        .await
        .body;
    // Only the one message that was answered reached the agent.
    let line =
        r#"lmos_sidecar_messages_received_total{message_type="invokeAction",transport="a2a"} 1"#;
    assert!(metrics.contains(line), "{metrics}");
    sidecar.stop().await;
}

fn basic(name: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:pw"));
    format!("Basic {encoded}")
}

#[tokio::test]
async fn a_principal_without_rights_gets_no_card_and_a2a_s_error() {
    use lmos_sidecar::auth::credentials::hash_password;
    use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
    let mut config = test_config();
    config.http.authentication = vec![HttpScheme::Basic, HttpScheme::Bearer];
    config.auth.anonymous = Grants::default();
    let principal = |name: &str, rights: &[&str], host: &[&str]| PrincipalConfig {
        name: name.into(),
        password_hash: hash_password("pw"),
        host: host.iter().map(|s| s.to_string()).collect(),
        consume: rights.iter().map(|s| s.to_string()).collect(),
        operate: rights.iter().map(|s| s.to_string()).collect(),
        ..PrincipalConfig::default()
    };
    let mut agent = principal("agent", &[THING_ID], &[THING_ID]);
    agent.token_sha256 = lmos_sidecar::auth::credentials::sha256_hex(b"agent-token");
    config.auth.principals = vec![
        agent,
        principal("operator", &[THING_ID], &[]),
        principal("colleague", &[THING_ID], &[]),
        principal("stranger", &[], &[]),
    ];
    let sidecar = TestSidecar::start_with(config).await;
    // The agent connects with its token and registers its TD.
    weather_agent::start_with_token(&sidecar, "agent-token", &basic("operator")).await;
    let card = |who: &'static str| {
        let addr = sidecar.http;
        async move {
            let auth = basic(who);
            common::http_with(
                addr,
                "GET",
                "/.well-known/agent-card.json",
                &[("Authorization", &auth)],
                b"",
            )
            .await
        }
    };
    let seen = card("operator").await;
    assert_eq!(seen.status, 200, "{seen:?}");
    let seen = seen.json();
    assert_eq!(
        seen["securitySchemes"]["basic"]["httpAuthSecurityScheme"]["scheme"],
        "Basic"
    );
    assert_eq!(
        seen["securityRequirements"][0]["schemes"]["basic"],
        json!({"list": []})
    );
    assert_eq!(card("stranger").await.status, 404);
    let anonymous = common::http(
        sidecar.http,
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await;
    assert_eq!(anonymous.status, 401);

    let send = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"question": "in Oslo", "interactionMode": "text"}}]}}});
    let path = format!("/a2a/{}", urlencode(THING_ID));
    let auth = basic("stranger");
    let refused = common::http_with(
        sidecar.http,
        "POST",
        &path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        send.to_string().as_bytes(),
    )
    .await
    .json();
    assert_eq!(
        (refused["id"].clone(), refused["error"]["code"].clone()),
        (json!(7), json!(-32602)),
        "{refused}"
    );

    // With authentication on: the SDK gets the extended card; a task is
    // its principal's alone.
    let base = format!("http://{}", sidecar.http);
    let agent = format!("{base}/a2a/{}", urlencode(THING_ID));
    let owner = python(&[
        base.clone(),
        agent.clone(),
        "owner".into(),
        basic("operator"),
    ])
    .await;
    assert_eq!(owner["errors"], json!([]), "{owner:#}");
    assert_eq!(owner["extended"]["name"], "WeatherAgent");
    assert_eq!(owner["extended"]["capabilities"]["extendedAgentCard"], true);
    assert_eq!(
        owner["sent"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{owner:#}"
    );
    assert_eq!(owner["listed"]["totalSize"], 1);
    let task = owner["sent"]["id"].as_str().unwrap().to_owned();
    let other = python(&[
        base,
        agent,
        "stranger".into(),
        basic("colleague"),
        task.clone(),
    ])
    .await;
    assert_eq!(other["errors"], json!([]), "{other:#}");
    assert_eq!(other["listed"].get("tasks"), None, "{other:#}");
    for what in ["get", "cancel", "subscribe", "continue"] {
        assert_eq!(other[what], "TaskNotFoundError", "{what}: {other:#}");
    }
    // Without rights on the Thing: nothing of it, tasks included.
    let ask =
        |method: &str| json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": {"id": task}});
    let headers = [("Authorization", auth.as_str()), ("A2A-Version", "1.0")];
    let got = post_with(&sidecar, &path, &headers, &ask("GetTask")).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    let listed = post_with(&sidecar, &path, &headers, &ask("ListTasks")).await;
    assert!(listed.get("result").is_none(), "{listed}");
    sidecar.stop().await;
}

#[tokio::test]
async fn a_message_is_a_server_span_parent_of_the_invocation() {
    use lmos_sidecar::telemetry::Tracing;
    use opentelemetry_sdk::trace::InMemorySpanExporter;
    let exporter = InMemorySpanExporter::default();
    let tracing = Tracing::with_exporter(exporter.clone(), false);
    let sidecar = TestSidecar::start_traced(test_config(), tracing).await;
    let url = sidecar.ws_url();
    tokio::spawn(async move { weather_agent::serve(&url).await.map_err(|e| e.to_string()) });
    common::wait_for_td(&sidecar, THING_ID).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let send = json!({"jsonrpc": "2.0", "id": "s1", "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"question": "in Oslo", "interactionMode": "text"}}]}}});
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let done = common::http_with(
        sidecar.http,
        "POST",
        &format!("/a2a/{}", urlencode(THING_ID)),
        &[
            ("Content-Type", "application/json"),
            ("traceparent", &traceparent),
        ],
        send.to_string().as_bytes(),
    )
    .await
    .json();
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let spans = exporter.get_finished_spans().unwrap();
    let name = format!("SendMessage {THING_ID}");
    let call = spans
        .iter()
        .find(|s| s.name == name)
        .expect("the A2A call's span");
    assert_eq!(call.span_context.trace_id().to_string(), trace_id);
    assert_eq!(call.parent_span_id.to_string(), "00f067aa0ba902b7");
    let id = call.span_context.span_id();
    assert!(
        spans.iter().any(|s| s.parent_span_id == id),
        "no span under the A2A call"
    );
    sidecar.stop().await;
}

const ASKER: &str = "urn:test:a2a-asker";

/// An agent of our own: it asks back, and reads the `a2a` member.
async fn next_invocation(agent: &mut common::WsClient) -> Value {
    loop {
        let m = agent.recv().await;
        if m["messageType"] == "invokeAction" {
            return m;
        }
    }
}

fn status(invocation: &Value, members: Value) -> Value {
    let mut m = common::lmos(
        ASKER,
        "actionStatus",
        json!({"action": "ask", "correlationID": invocation["correlationID"]}),
    );
    for (k, v) in members.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

#[tokio::test]
async fn the_message_reaches_the_agent_and_its_a2a_member_asks_back_and_rejects() {
    let sidecar = TestSidecar::start_with(test_config()).await;
    let mut agent = sidecar.ws_agent(ASKER).await;
    agent
        .send(json!({"@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
            "id": ASKER, "title": "Asker", "@type": "lmos:Agent",
            "securityDefinitions": {"nosec": {"scheme": "nosec"}}, "security": "nosec",
            "actions": {"ask": {"input": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                "forms": [{"href": "https://asker.example.com/ask", "op": "invokeaction"}]}}}))
        .await;
    common::wait_for_td(&sidecar, ASKER).await;
    let path = format!("/a2a/{}", urlencode(ASKER));
    let send = |message: Value| {
        let (addr, path) = (sidecar.http, path.clone());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}});
        tokio::spawn(async move {
            common::http_with(
                addr,
                "POST",
                &path,
                &[("Content-Type", "application/json"), ("A2A-Version", "1.0")],
                body.to_string().as_bytes(),
            )
            .await
            .json()
        })
    };
    // The message's own id and parts reach the agent; it asks back.
    let asked = send(
        json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Weather?"}],
        "metadata": {"k": "v"}}),
    );
    let first = next_invocation(&mut agent).await;
    assert_eq!(first["input"], json!({"q": "Weather?"}));
    assert_eq!(first["a2a"]["messageId"], "m-1", "{first}");
    assert_eq!(first["a2a"]["parts"], json!([{"text": "Weather?"}]));
    assert_eq!(first["a2a"]["metadata"], json!({"k": "v"}));
    agent
        .send(status(
            &first,
            json!({"status": "completed", "a2a": {"state": "input-required",
            "message": {"messageId": "a-1", "parts": [{"text": "Which city?"}]}}}),
        ))
        .await;
    let asked = asked.await.unwrap();
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "Which city?");
    assert_eq!(first["a2a"]["taskId"], task["id"]);
    assert_eq!(first["a2a"]["contextId"], task["contextId"]);

    // The answer continues the same task, as a new invocation.
    let answered = send(
        json!({"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "Oslo"}],
        "taskId": task["id"]}),
    );
    let second = next_invocation(&mut agent).await;
    assert_eq!(second["a2a"]["taskId"], task["id"]);
    assert_eq!(second["a2a"]["messageId"], "m-2");
    assert_ne!(second["correlationID"], first["correlationID"]);
    agent
        .send(status(&second, json!({"status": "completed", "output": "Sunny in Oslo.",
            "a2a": {"artifacts": [{"artifactId": "forecast", "parts": [{"text": "Sunny in Oslo."}]}]}})))
        .await;
    let answered = answered.await.unwrap();
    let done = &answered["result"]["task"];
    assert_eq!(done["id"], task["id"]);
    assert_eq!(
        done["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered}"
    );
    assert_eq!(
        done["artifacts"],
        json!([{"artifactId": "forecast", "parts": [{"text": "Sunny in Oslo."}]}])
    );
    let ids: Vec<&Value> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["messageId"])
        .collect();
    assert_eq!(
        ids,
        [&json!("m-1"), &json!("a-1"), &json!("m-2")],
        "{done:#}"
    );

    // Rejected.
    let rejected =
        send(json!({"messageId": "m-3", "role": "ROLE_USER", "parts": [{"text": "No."}]}));
    let third = next_invocation(&mut agent).await;
    agent
        .send(status(
            &third,
            json!({"status": "failed", "a2a": {"state": "rejected",
            "message": {"parts": [{"text": "I only do weather."}]}}}),
        ))
        .await;
    let rejected = rejected.await.unwrap();
    assert_eq!(
        rejected["result"]["task"]["status"]["state"], "TASK_STATE_REJECTED",
        "{rejected}"
    );

    // Answered with a Message, not a task.
    let direct = send(json!({"messageId": "m-4", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}));
    let fourth = next_invocation(&mut agent).await;
    agent
        .send(status(&fourth, json!({"status": "pending"})))
        .await;
    agent
        .send(status(
            &fourth,
            json!({"status": "completed", "a2a": {"state": "message",
            "message": {"messageId": "a-4", "parts": [{"text": "Hello."}]}}}),
        ))
        .await;
    let direct = direct.await.unwrap();
    let message = &direct["result"]["message"];
    assert_eq!(message["parts"][0]["text"], "Hello.", "{direct}");
    assert_eq!(message["role"], "ROLE_AGENT");
    assert!(direct["result"].get("task").is_none());
    sidecar.stop().await;
}

/// A spoken forecast streams to the SDK as artifact updates whose parts
/// are the audio's bytes with their media type (A2A's file parts): put
/// together, one WAV file.
#[tokio::test]
async fn a_spoken_forecast_streams_to_the_sdk_as_audio_file_parts() {
    let sidecar = with_weather_agent().await;
    let base = format!("http://{}", sidecar.http);
    let agent = format!("{base}/a2a/{}", urlencode(THING_ID));
    let report = python(&[base, agent, "voice".into()]).await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    let events = &report["events"];
    let mut audio = Vec::new();
    for e in events.as_array().unwrap() {
        let Some(parts) = e["artifactUpdate"]["artifact"]["parts"].as_array() else {
            continue;
        };
        for part in parts.iter().filter(|p| p.get("raw").is_some()) {
            assert_eq!(part["mediaType"], "audio/wav", "{part}");
            let raw = base64::engine::general_purpose::STANDARD
                .decode(part["raw"].as_str().unwrap())
                .unwrap();
            audio.extend(raw);
        }
    }
    assert!(
        lmos_sidecar::demo_agent::voice::samples_of(&audio).is_some(),
        "one WAV file from {} bytes: {report:#}",
        audio.len()
    );
    assert_eq!(
        states(events).last().map(String::as_str),
        Some("TASK_STATE_COMPLETED")
    );
    sidecar.stop().await;
}
