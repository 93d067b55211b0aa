use super::*;

fn fresh() -> Value {
    let m = user_message(
        &json!({"messageId": "m1"}),
        vec![json!({"text": "q"})],
        "t",
        "c",
    );
    new_task("t", "c", m)
}

#[test]
fn statuses_become_task_states_events_and_history() {
    let mut t = fresh();
    assert_eq!(state_of(&t), "TASK_STATE_SUBMITTED");
    assert!(apply(&mut t, &json!({"status": "pending"}), "getWeather").is_empty());
    let working = json!({"status": "running", "output": {"progress": "..."}});
    let e = apply(&mut t, &working, "getWeather");
    assert_eq!(
        e[0]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(
        e[0]["statusUpdate"]["status"]["message"]["parts"][0]["data"]["progress"],
        "..."
    );
    let chunk = json!({"status": "running", "stream": {"seq": 1, "data": "Sun"}});
    let e = apply(&mut t, &chunk, "getWeather");
    assert_eq!(e[0]["artifactUpdate"]["append"], true);
    assert_eq!(
        e[0]["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "Sun"
    );
    // A binary chunk (audio) is a file part of its bytes and media type.
    let audio = json!({"status": "running", "stream": {"seq": 2, "data": "UklGRg==",
        "contentType": "audio/wav", "contentEncoding": "base64"}});
    let e = apply(&mut t, &audio, "getWeather");
    assert_eq!(
        e[0]["artifactUpdate"]["artifact"]["parts"][0],
        json!({"raw": "UklGRg==", "mediaType": "audio/wav"})
    );
    let done = json!({"status": "completed", "output": "Sunny."});
    let e = apply(&mut t, &done, "getWeather");
    assert_eq!(
        e[0]["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "Sunny."
    );
    assert!(ends_stream(&e[1]));
    assert_eq!(t["artifacts"][0]["artifactId"], "output");
    // The client's message and the agent's status message.
    assert_eq!(t["history"].as_array().unwrap().len(), 2);
    assert_eq!(t["history"][0]["messageId"], "m1");
    // Final: nothing changes it.
    assert!(apply(&mut t, &working, "getWeather").is_empty());
    let v = view(&t, Some(0), false);
    assert!(v.get("history").is_none() && v.get("artifacts").is_none());
    assert_eq!(
        view(&t, Some(1), true)["history"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn the_agent_s_a2a_member_is_honoured() {
    let mut t = fresh();
    let ask = json!({"status": "completed", "output": "x", "a2a": {"state": "input-required",
        "message": {"messageId": "a1", "parts": [{"text": "Which city?"}]}}});
    let e = apply(&mut t, &ask, "getWeather");
    assert_eq!(state_of(&t), "TASK_STATE_INPUT_REQUIRED");
    assert!(ends_stream(e.last().unwrap()));
    assert_eq!(t["status"]["message"]["messageId"], "a1");
    // Waiting for authentication answers a blocking send but keeps a stream.
    let mut w = fresh();
    let auth = json!({"status": "completed", "a2a": {"state": "auth-required"}});
    let e = apply(&mut w, &auth, "getWeather");
    assert_eq!(state_of(&w), "TASK_STATE_AUTH_REQUIRED");
    assert!(settles(e.last().unwrap()) && !ends_stream(e.last().unwrap()));
    assert_eq!(t["status"]["message"]["role"], "ROLE_AGENT");
    assert!(t.get("artifacts").is_none());
    continued(&mut t, json!({"messageId": "m2", "parts": []}));
    assert_eq!(state_of(&t), "TASK_STATE_SUBMITTED");
    let done = json!({"status": "completed", "a2a": {"artifacts": [
        {"artifactId": "a", "parts": [{"text": "1"}]}, {"parts": "nope"}]}});
    apply(&mut t, &done, "getWeather");
    assert_eq!(
        t["artifacts"],
        json!([{"artifactId": "a", "parts": [{"text": "1"}]}])
    );
    let direct = json!({"status": "completed", "a2a": {"state": "message",
        "message": {"parts": [{"text": "Hi"}]}}});
    let m = direct_message(&direct, "c").unwrap();
    assert_eq!(
        (m["role"].clone(), m["contextId"].clone()),
        (json!("ROLE_AGENT"), json!("c"))
    );
    assert!(m.get("taskId").is_none());
    assert_eq!(direct_message(&json!({"status": "completed"}), "c"), None);
    let mut w = fresh();
    let part_way = json!({"status": "running", "a2a": {"artifacts": [{"artifactId": "p", "parts": [{"text": "1"}]}]}});
    let e = apply(&mut w, &part_way, "x");
    assert_eq!(e[0]["artifactUpdate"]["artifact"]["artifactId"], "p");
    assert_eq!(state_of(&w), "TASK_STATE_WORKING");
    assert_eq!(w["artifacts"][0]["artifactId"], "p");
    let mut r = fresh();
    apply(
        &mut r,
        &json!({"status": "failed", "a2a": {"state": "rejected"}}),
        "x",
    );
    assert_eq!(state_of(&r), "TASK_STATE_REJECTED");
    assert_eq!(
        method("tasks/resubscribe"),
        Some((Method::Subscribe, Dialect::V03))
    );
    assert_eq!(
        part_v1(&json!({"kind": "file", "file": {"uri": "http://f", "mimeType": "a/b"}})),
        Some(json!({"url": "http://f", "mediaType": "a/b"}))
    );
}
