//! The shapes of what the face answers (DM-*), over every kind of answer
//! the scripted agent gives.

use super::*;

/// What the face said: results of `SendMessage`, `GetTask` and stream
/// events, for every scenario with a different shape.
struct Said {
    tasks: Vec<Value>,
    messages: Vec<Value>,
    artifacts: Vec<Value>,
    events: Vec<Value>,
    /// Every whole response, for the checks on any key or value.
    all: Vec<Value>,
}

async fn said(face: &Face) -> Said {
    let mut s = Said {
        tasks: vec![],
        messages: vec![],
        artifacts: vec![],
        events: vec![],
        all: vec![],
    };
    for prefix in [
        "tck-complete-task",
        "tck-artifact-text",
        "tck-artifact-file",
        "tck-artifact-file-url",
        "tck-artifact-data",
        "tck-input-required",
        "tck-reject-task",
        "tck-message-response",
    ] {
        let r = face.send(prefix, json!({}), None).await;
        if let Some(t) = r["result"].get("task") {
            let got = face.call("GetTask", json!({"id": t["id"]})).await;
            s.tasks.push(got["result"].clone());
            s.all.push(got);
        }
        s.all.push(r);
    }
    for prefix in ["tck-stream-artifact-file", "tck-stream-artifact-chunked"] {
        let mut sse = face
            .stream(
                "SendStreamingMessage",
                json!({"message": message(prefix, json!({}))}),
            )
            .await;
        for e in sse.rest().await {
            s.events.push(e["result"].clone());
            s.all.push(e);
        }
    }
    for r in s.all.iter().map(|r| &r["result"]) {
        if let Some(t) = r.get("task") {
            s.tasks.push(t.clone());
        }
        if let Some(m) = r.get("message") {
            s.messages.push(m.clone());
        }
        if let Some(a) = r["artifactUpdate"].get("artifact") {
            s.artifacts.push(a.clone());
        }
        if let Some(m) = r["statusUpdate"]["status"].get("message") {
            s.messages.push(m.clone());
        }
    }
    for t in s.tasks.clone() {
        s.messages.extend(t["status"].get("message").cloned());
        s.messages
            .extend(t["history"].as_array().cloned().unwrap_or_default());
        s.artifacts
            .extend(t["artifacts"].as_array().cloned().unwrap_or_default());
    }
    s
}

const STATES: [&str; 8] = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

/// Every value of `key` anywhere in `v`.
fn values_of<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    out.push(x);
                }
                values_of(x, key, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| values_of(x, key, out)),
        _ => {}
    }
}

fn keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

fn parts(s: &Said) -> Vec<Value> {
    s.messages
        .iter()
        .chain(&s.artifacts)
        .flat_map(|x| x["parts"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn dm_task_001_a_task_has_an_id_and_a_status() {
    let face = Face::start().await;
    let s = said(&face).await;
    assert!(s.tasks.len() >= 7);
    for t in &s.tasks {
        assert!(t["id"].as_str().is_some_and(|i| !i.is_empty()), "{t}");
        assert!(t["status"].is_object(), "{t}");
    }
    face.stop().await;
}

#[tokio::test]
async fn dm_task_002_task_states_are_the_enumeration_s() {
    let face = Face::start().await;
    let s = said(&face).await;
    let mut states = Vec::new();
    for r in &s.all {
        values_of(r, "state", &mut states);
    }
    for st in &states {
        assert!(STATES.contains(&st.as_str().unwrap_or_default()), "{st}");
    }
    for expected in [
        "TASK_STATE_COMPLETED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_REJECTED",
    ] {
        assert!(
            states.iter().any(|s| *s == expected),
            "{expected} never seen: {states:?}"
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn dm_msg_001_a_message_has_a_role_parts_and_an_id() {
    let face = Face::start().await;
    let s = said(&face).await;
    assert!(!s.messages.is_empty());
    for m in &s.messages {
        assert!(
            m["messageId"].as_str().is_some_and(|i| !i.is_empty()),
            "{m}"
        );
        assert!(m["role"].is_string(), "{m}");
        assert!(m["parts"].as_array().is_some_and(|p| !p.is_empty()), "{m}");
    }
    // The agent's Message answer (the TCK's tck-message-response).
    let direct = s.all.iter().find_map(|r| r["result"].get("message"));
    let direct = direct.expect("a Message answer for tck-message-response");
    assert_eq!(
        direct["parts"][0]["text"], "Direct message response",
        "{direct}"
    );
    face.stop().await;
}

#[tokio::test]
async fn dm_msg_002_roles_are_user_or_agent() {
    let face = Face::start().await;
    let s = said(&face).await;
    for m in &s.messages {
        assert!(
            ["ROLE_USER", "ROLE_AGENT"].contains(&m["role"].as_str().unwrap_or_default()),
            "{m}"
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn dm_part_001_a_part_is_one_of_text_raw_url_data() {
    let face = Face::start().await;
    let s = said(&face).await;
    let parts = parts(&s);
    for p in &parts {
        let n = ["text", "raw", "url", "data"]
            .iter()
            .filter(|k| p.get(**k).is_some())
            .count();
        assert_eq!(n, 1, "{p}");
    }
    for kind in ["text", "raw", "url", "data"] {
        assert!(
            parts.iter().any(|p| p.get(kind).is_some()),
            "no {kind} part: {parts:?}"
        );
    }
    face.stop().await;
}

/// With the content the TCK's artifact tests look for.
#[tokio::test]
async fn dm_art_001_an_artifact_has_an_id_and_parts() {
    let face = Face::start().await;
    let s = said(&face).await;
    for a in &s.artifacts {
        assert!(
            a["artifactId"].as_str().is_some_and(|i| !i.is_empty()),
            "{a}"
        );
        assert!(a["parts"].as_array().is_some_and(|p| !p.is_empty()), "{a}");
    }
    let first_parts: Vec<&Value> = s.artifacts.iter().map(|a| &a["parts"][0]).collect();
    let has = |f: &dyn Fn(&Value) -> bool| first_parts.iter().any(|p| f(p));
    assert!(
        has(&|p| p["text"] == "Generated text content"),
        "{first_parts:?}"
    );
    assert!(has(&|p| p["raw"].is_string()
        && p["filename"] == "output.txt"
        && p["mediaType"] == "text/plain"));
    assert!(has(
        &|p| p["url"] == "https://example.com/output.txt" && p["filename"] == "output.txt"
    ));
    assert!(has(&|p| p["data"] == json!({"key": "value", "count": 42})));
    face.stop().await;
}

#[tokio::test]
async fn dm_status_001_a_status_has_a_state() {
    let face = Face::start().await;
    let s = said(&face).await;
    let statuses = s.tasks.iter().map(|t| &t["status"]).chain(
        s.events
            .iter()
            .filter_map(|e| e["statusUpdate"].get("status")),
    );
    for st in statuses {
        assert!(
            STATES.contains(&st["state"].as_str().unwrap_or_default()),
            "{st}"
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn dm_serial_001_field_names_are_camel_case() {
    let face = Face::start().await;
    let s = said(&face).await;
    let mut all = Vec::new();
    for r in &s.all {
        keys(r, &mut all);
    }
    let snake: Vec<&String> = all
        .iter()
        .filter(|k| k.contains('_') && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert!(snake.is_empty(), "{snake:?}");
    face.stop().await;
}

#[tokio::test]
async fn dm_serial_002_enums_are_their_proto_names() {
    let face = Face::start().await;
    let s = said(&face).await;
    let (mut states, mut roles) = (Vec::new(), Vec::new());
    for r in &s.all {
        values_of(r, "state", &mut states);
        values_of(r, "role", &mut roles);
    }
    for v in states {
        assert!(
            v.as_str().is_some_and(|s| s.starts_with("TASK_STATE_")),
            "{v}"
        );
    }
    for v in roles {
        assert!(v.as_str().is_some_and(|s| s.starts_with("ROLE_")), "{v}");
    }
    face.stop().await;
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
fn utc_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && s.ends_with('Z')
        && (b.len() == 20 || (b[19] == b'.' && digits(20..b.len() - 1) && b.len() > 21))
}

#[tokio::test]
async fn dm_serial_003_timestamps_are_iso_8601_utc() {
    let face = Face::start().await;
    let s = said(&face).await;
    let mut stamps = Vec::new();
    for r in &s.all {
        values_of(r, "timestamp", &mut stamps);
    }
    assert!(!stamps.is_empty());
    for t in stamps {
        assert!(t.as_str().is_some_and(utc_timestamp), "{t}");
    }
    face.stop().await;
}

/// Every answer valid by A2A's JSON Schema, as the TCK checks them (it
/// files this under DM-TASK-001 … DM-STATUS-001 and DM-SERIAL-004).
#[tokio::test]
async fn dm_serial_004_required_fields_are_there() {
    let face = Face::start().await;
    let s = said(&face).await;
    for r in &s.all {
        let result = &r["result"];
        let definition =
            if result.get("statusUpdate").is_some() || result.get("artifactUpdate").is_some() {
                "Stream Response"
            } else if result.get("id").is_some() {
                "Task"
            } else {
                "Send Message Response"
            };
        assert_schema(definition, result);
    }
    for e in &s.events {
        if let Some(u) = e.get("statusUpdate") {
            assert!(
                u["taskId"].is_string() && u["contextId"].is_string() && u["status"].is_object(),
                "{u}"
            );
        }
        if let Some(u) = e.get("artifactUpdate") {
            assert!(
                u["taskId"].is_string() && u["contextId"].is_string() && u["artifact"].is_object(),
                "{u}"
            );
        }
    }
    for m in &s.messages {
        assert!(m["parts"].as_array().is_some_and(|p| !p.is_empty()), "{m}");
    }
    face.stop().await;
}

#[tokio::test]
async fn dm_serial_005_unknown_fields_are_ignored() {
    let face = Face::start().await;
    let mut m = message("tck-complete-task", json!({}));
    m["tckUnknownField"] = json!("should-be-ignored");
    let r = face
        .call("SendMessage", json!({"message": m, "tckExtraParam": 42}))
        .await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    face.stop().await;
}

/// The schema check above finds what it should (its `$ref`s resolved).
#[test]
fn the_schema_check_refuses_what_the_schema_refuses() {
    // (The schema marks no field required: DM-SERIAL-004's own checks do.)
    assert!(!schema_errors("Task", &json!({"id": "t", "kind": "task"})).is_empty());
    let bad_state = json!({"id": "t", "status": {"state": "done"}});
    assert!(!schema_errors("Task", &bad_state).is_empty());
    let bad_part = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a", "parts": [{"txt": "x"}]}]}});
    assert!(!schema_errors("Send Message Response", &bad_part).is_empty());
    assert!(!schema_errors("Stream Response", &json!({"kind": "task"})).is_empty());
    let good = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}}});
    assert_eq!(
        schema_errors("Send Message Response", &good),
        Vec::<String>::new()
    );
}

/// ProtoJSON (which A2A's JSON is, §5.5) reads a field by its proto name as
/// well as its JSON name, and the TCK's client sends some that way
/// (`context_id`, `page_size`, `include_artifacts`, `history_length`).
#[tokio::test]
async fn protojson_requests_may_use_proto_field_names() {
    let face = Face::start().await;
    let context = format!("tck-proto-names-{}", uuid::Uuid::new_v4());
    for _ in 0..2 {
        face.send("tck-artifact-text", json!({"contextId": context}), None)
            .await;
    }
    let elsewhere = face.task("tck-complete-task").await;
    let listed = face.call("ListTasks", json!({"context_id": context})).await;
    let tasks = listed["result"]["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tasks.len(), 2, "{listed}");
    assert!(
        tasks.iter().all(|t| t["contextId"] == context.as_str()),
        "{listed}"
    );
    let page = face
        .call("ListTasks", json!({"context_id": context, "page_size": 1}))
        .await;
    assert_eq!(
        page["result"]["tasks"].as_array().map(Vec::len),
        Some(1),
        "{page}"
    );
    let with = face
        .call(
            "ListTasks",
            json!({"context_id": context, "include_artifacts": true}),
        )
        .await;
    assert!(with["result"]["tasks"][0]["artifacts"].is_array(), "{with}");
    let waiting = face.task("tck-input-required").await;
    face.send("tck-complete-task", json!({"taskId": waiting["id"]}), None)
        .await;
    let got = face
        .call("GetTask", json!({"id": waiting["id"], "history_length": 1}))
        .await;
    let history = got["result"]["history"].as_array().map_or(0, Vec::len);
    assert!(history <= 1, "{got}");
    assert_ne!(elsewhere["contextId"], context.as_str());
    face.stop().await;
}
