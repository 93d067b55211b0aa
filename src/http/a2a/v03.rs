//! A2A 1.0's JSON in 0.3's spelling, for a client that called with 0.3's
//! method names: `kind` members, lower-case states and roles, file parts,
//! `final` on status updates. No I/O.

use serde_json::{json, Value};

fn state(v1: &str) -> &'static str {
    match v1 {
        "TASK_STATE_SUBMITTED" => "submitted",
        "TASK_STATE_WORKING" => "working",
        "TASK_STATE_COMPLETED" => "completed",
        "TASK_STATE_FAILED" => "failed",
        "TASK_STATE_CANCELED" => "canceled",
        "TASK_STATE_INPUT_REQUIRED" => "input-required",
        "TASK_STATE_REJECTED" => "rejected",
        "TASK_STATE_AUTH_REQUIRED" => "auth-required",
        _ => "unknown",
    }
}

pub fn part(p: &Value) -> Value {
    let mut out = json!({});
    if let Some(t) = p.get("text") {
        out = json!({"kind": "text", "text": t});
    } else if let Some(d) = p.get("data") {
        out = json!({"kind": "data", "data": d});
    } else {
        let mut file = json!({});
        if let Some(raw) = p.get("raw") {
            file["bytes"] = raw.clone();
        }
        if let Some(url) = p.get("url") {
            file["uri"] = url.clone();
        }
        if let Some(m) = p.get("mediaType") {
            file["mimeType"] = m.clone();
        }
        if let Some(n) = p.get("filename") {
            file["name"] = n.clone();
        }
        out["kind"] = "file".into();
        out["file"] = file;
    }
    if let Some(m) = p.get("metadata") {
        out["metadata"] = m.clone();
    }
    out
}

fn parts(v: &mut Value) {
    if let Some(ps) = v["parts"].as_array() {
        v["parts"] = ps.iter().map(part).collect();
    }
}

pub fn message(m: &Value) -> Value {
    let mut m = m.clone();
    m["kind"] = "message".into();
    m["role"] = if m["role"] == "ROLE_AGENT" {
        "agent"
    } else {
        "user"
    }
    .into();
    parts(&mut m);
    m
}

fn status(s: &Value) -> Value {
    let mut s = s.clone();
    s["state"] = state(s["state"].as_str().unwrap_or_default()).into();
    if s.get("message").is_some() {
        s["message"] = message(&s["message"]);
    }
    s
}

fn artifact(a: &Value) -> Value {
    let mut a = a.clone();
    parts(&mut a);
    a
}

pub fn task(t: &Value) -> Value {
    let mut t = t.clone();
    t["kind"] = "task".into();
    t["status"] = status(&t["status"]);
    if let Some(h) = t["history"].as_array() {
        t["history"] = h.iter().map(message).collect();
    }
    if let Some(a) = t["artifacts"].as_array() {
        t["artifacts"] = a.iter().map(artifact).collect();
    }
    t
}

/// A 1.0 `StreamResponse` as 0.3's event.
pub fn event(e: &Value) -> Value {
    if let Some(u) = e.get("statusUpdate") {
        let mut u = u.clone();
        u["status"] = status(&u["status"]);
        u["kind"] = "status-update".into();
        u["final"] = super::tasks::ends_stream(e).into();
        return u;
    }
    if let Some(u) = e.get("artifactUpdate") {
        let mut u = u.clone();
        u["artifact"] = artifact(&u["artifact"]);
        u["kind"] = "artifact-update".into();
        return u;
    }
    if let Some(t) = e.get("task") {
        return task(t);
    }
    if let Some(m) = e.get("message") {
        return message(m);
    }
    e.clone()
}

fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        match (c, upper) {
            ('_', _) => upper = true,
            (c, true) => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

/// Params with proto field names (`history_length`) in ProtoJSON's
/// camelCase (`historyLength`), as ProtoJSON parsers accept both; free
/// JSON (`metadata`, a part's `data`) is left as sent.
pub fn camel_keys(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let free = k == "metadata" || k == "data";
                    (camel(k), if free { v.clone() } else { camel_keys(v) })
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(camel_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_field_names_read_as_camel_case() {
        let p = json!({"id": "t", "history_length": 1, "message": {"message_id": "m",
            "parts": [{"data": {"a_b": 1}}], "metadata": {"x_y": 2}}});
        assert_eq!(
            camel_keys(&p),
            json!({"id": "t", "historyLength": 1, "message": {"messageId": "m",
                "parts": [{"data": {"a_b": 1}}], "metadata": {"x_y": 2}}})
        );
    }

    #[test]
    fn tasks_and_events_read_as_0_3() {
        let t = json!({"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"url": "http://x/f.png", "mediaType": "image/png"}]}]});
        let old = task(&t);
        assert_eq!(old["kind"], "task");
        assert_eq!(old["status"]["state"], "input-required");
        assert_eq!(old["status"]["message"]["role"], "agent");
        assert_eq!(old["status"]["message"]["parts"][0]["kind"], "text");
        assert_eq!(
            old["artifacts"][0]["parts"][0]["file"]["uri"],
            "http://x/f.png"
        );
        let e = event(
            &json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"}}}),
        );
        assert_eq!(
            (e["kind"].clone(), e["final"].clone()),
            (json!("status-update"), json!(true))
        );
    }
}
