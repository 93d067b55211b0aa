//! Task history and `historyLength` (CORE-HIST-*).

use super::*;

/// A task asked for input, then completed by a follow-up (the TCK's
/// `create_multiturn_task`).
async fn multiturn(face: &Face) -> Value {
    let waiting = face.task("tck-input-required").await;
    let done = face
        .send("tck-complete-task", json!({"taskId": waiting["id"]}), None)
        .await;
    assert_eq!(
        state(&done["result"]["task"]),
        "TASK_STATE_COMPLETED",
        "{done}"
    );
    waiting
}

const HISTORY: [&str; 2] = ["TCK history message 1", "TCK history message 2"];

/// As the TCK's `create_multiturn_task_with_history`: two follow-ups with
/// known texts while the task waits for input, then one that completes it.
/// The messages sent, in order.
async fn with_history(face: &Face) -> (Value, Vec<Value>) {
    let first = message("tck-input-required", json!({}));
    let r = face.call("SendMessage", json!({"message": first})).await;
    let task = r["result"]["task"].clone();
    let mut sent = vec![first];
    for text in HISTORY {
        let m = message(
            "tck-input-required",
            json!({"taskId": task["id"], "parts": [{"text": text}]}),
        );
        let r = face.call("SendMessage", json!({"message": m})).await;
        assert_eq!(
            state(&r["result"]["task"]),
            "TASK_STATE_INPUT_REQUIRED",
            "{r}"
        );
        sent.push(m);
    }
    let last = message("tck-complete-task", json!({"taskId": task["id"]}));
    let r = face.call("SendMessage", json!({"message": last})).await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    sent.push(last);
    (task, sent)
}

fn history(result: &Value) -> Vec<Value> {
    result["history"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn core_hist_001_history_length_0_leaves_history_out_of_get_task() {
    let face = Face::start().await;
    let task = multiturn(&face).await;
    for params in [
        json!({"id": task["id"], "historyLength": 0}),
        json!({"id": task["id"], "history_length": 0}),
    ] {
        let r = face.call("GetTask", params.clone()).await;
        assert!(r["result"].is_object(), "{params}: {r}");
        assert!(r["result"].get("history").is_none(), "{params}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn core_hist_002_no_more_history_than_history_length() {
    let face = Face::start().await;
    let task = multiturn(&face).await;
    let all = face.call("GetTask", json!({"id": task["id"]})).await;
    assert!(history(&all["result"]).len() >= 2, "{all}");
    for params in [
        json!({"id": task["id"], "historyLength": 1}),
        json!({"id": task["id"], "history_length": 1}),
    ] {
        let r = face.call("GetTask", params.clone()).await;
        assert_eq!(r["result"]["id"], task["id"], "{params}: {r}");
        assert!(history(&r["result"]).len() <= 1, "{params}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn core_hist_003_history_length_0_leaves_history_out_of_send_message() {
    let face = Face::start().await;
    let waiting = face.task("tck-input-required").await;
    let r = face
        .send(
            "tck-complete-task",
            json!({"taskId": waiting["id"]}),
            Some(json!({"historyLength": 0})),
        )
        .await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    assert!(r["result"]["task"].get("history").is_none(), "{r}");
    face.stop().await;
}

fn texts(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn core_hist_005_history_is_in_the_order_exchanged() {
    let face = Face::start().await;
    let (task, sent) = with_history(&face).await;
    let r = face
        .call("GetTask", json!({"id": task["id"], "historyLength": 10}))
        .await;
    let found: Vec<String> = texts(&history(&r["result"]))
        .into_iter()
        .filter(|t| HISTORY.contains(&t.as_str()))
        .collect();
    assert_eq!(found, HISTORY, "{r}");
    // The user's messages, in the order sent.
    let users: Vec<Value> = history(&r["result"])
        .into_iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .map(|m| m["messageId"].clone())
        .collect();
    let sent_ids: Vec<Value> = sent.iter().map(|m| m["messageId"].clone()).collect();
    assert_eq!(users, sent_ids, "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_hist_006_history_holds_the_messages_as_exchanged() {
    let face = Face::start().await;
    let (task, sent) = with_history(&face).await;
    let r = face.call("GetTask", json!({"id": task["id"]})).await;
    let history = history(&r["result"]);
    for m in &sent {
        let kept = history
            .iter()
            .find(|h| h["messageId"] == m["messageId"])
            .unwrap_or_else(|| panic!("{} not in the history: {r}", m["messageId"]));
        assert_eq!(kept["role"], "ROLE_USER", "{kept}");
        assert_eq!(kept["parts"], m["parts"], "{kept}");
    }
    face.stop().await;
}
