//! Contexts and task references (CORE-MULTI-*): the face keeps them; the
//! scripted agent shows what reaches an agent.

use super::*;

#[tokio::test]
async fn core_multi_001a_a_generated_context_id_is_in_the_response() {
    let face = Face::start().await;
    let task = face.task("tck-complete-task").await;
    let context = task["contextId"].as_str().unwrap_or_default();
    assert!(!context.is_empty(), "{task}");
    // Its own, not the task's id.
    assert_ne!(task["contextId"], task["id"], "{task}");
    face.stop().await;
}

/// The face accepts any client-given contextId (CORE-MULTI-002, a MAY), so
/// it never has to refuse one: it keeps it, it never makes up another.
#[tokio::test]
async fn core_multi_002a_a_client_context_id_is_kept_not_replaced() {
    let face = Face::start().await;
    let context = format!("tck-client-context-{}", uuid::Uuid::new_v4());
    let r = face
        .send("tck-complete-task", json!({"contextId": context}), None)
        .await;
    assert_eq!(r["result"]["task"]["contextId"], context.as_str(), "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_multi_003_every_new_task_gets_a_new_id() {
    let face = Face::start().await;
    let a = face.task("tck-complete-task").await;
    let b = face.task("tck-complete-task").await;
    assert!(a["id"].as_str().is_some_and(|s| !s.is_empty()), "{a}");
    assert_ne!(a["id"], b["id"]);
    face.stop().await;
}

#[tokio::test]
async fn core_multi_004_a_message_naming_an_unknown_task_is_not_found() {
    let mut face = Face::start().await;
    let id = format!("tck-nonexistent-multi-004-{}", uuid::Uuid::new_v4());
    let r = face
        .send("tck-multi-004", json!({"taskId": id}), None)
        .await;
    assert_eq!(code(&r), Some(-32001), "{r}");
    // Refused before the agent: the next invocation it hears is a later one.
    face.send("tck-complete-task", json!({}), None).await;
    let heard = face.heard().await;
    assert!(
        heard["a2a"]["messageId"]
            .as_str()
            .unwrap_or_default()
            .starts_with("tck-complete-task"),
        "{heard}"
    );
    face.stop().await;
}

/// The follow-up continues the same task with the task's context, and the
/// agent hears it as a new invocation naming that task.
#[tokio::test]
async fn core_multi_005_the_context_is_inferred_from_the_task() {
    let mut face = Face::start().await;
    let waiting = face.task("tck-input-required").await;
    let first = face.heard().await;
    let r = face
        .send("tck-complete-task", json!({"taskId": waiting["id"]}), None)
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["id"], waiting["id"], "{r}");
    assert_eq!(task["contextId"], waiting["contextId"], "{r}");
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{r}");
    let follow_up = face.heard().await;
    assert_eq!(follow_up["action"], first["action"]);
    assert_eq!(follow_up["a2a"]["taskId"], waiting["id"], "{follow_up}");
    assert_eq!(
        follow_up["a2a"]["contextId"], waiting["contextId"],
        "{follow_up}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_multi_006_a_context_that_is_not_the_task_s_is_refused() {
    let face = Face::start().await;
    for prefix in ["tck-input-required", "tck-complete-task"] {
        let task = face.task(prefix).await;
        let wrong = format!("tck-wrong-context-{}", uuid::Uuid::new_v4());
        let r = face
            .send(
                "tck-mismatch",
                json!({"taskId": task["id"], "contextId": wrong}),
                None,
            )
            .await;
        assert!(code(&r).is_some(), "{prefix}: {r}");
        // Not a new task in the wrong context either.
        assert!(r.get("result").is_none(), "{prefix}: {r}");
    }
    face.stop().await;
}

/// What the conventions promise an agent (docs/agent-protocols.md): the
/// message's own id, its parts and its ids in `a2a`, the text in `input`.
#[tokio::test]
async fn the_agent_hears_the_message_s_id_parts_and_ids() {
    let mut face = Face::start().await;
    let m = message("tck-complete-task", json!({"metadata": {"k": "v"}}));
    let r = face.call("SendMessage", json!({"message": m})).await;
    let task = &r["result"]["task"];
    let heard = face.heard().await;
    let a2a = &heard["a2a"];
    assert_eq!(a2a["messageId"], m["messageId"], "{heard}");
    assert_eq!(a2a["parts"], m["parts"], "{heard}");
    assert_eq!(a2a["taskId"], task["id"], "{heard}");
    assert_eq!(a2a["contextId"], task["contextId"], "{heard}");
    assert_eq!(a2a["metadata"], json!({"k": "v"}), "{heard}");
    assert_eq!(heard["input"], "Hello from our TCK tests", "{heard}");
    face.stop().await;
}

/// The scripted agent itself, over LMOS (no face): the `a2a` member of an
/// `invokeAction` reaches it through the router, and the `a2a` member of
/// its `actionStatus` reaches the consumer.
#[tokio::test]
async fn the_scripted_agent_answers_over_lmos_by_the_message_id() {
    let face = Face::start().await;
    let mut consumer = face.sidecar.ws().await;
    let ask = |prefix: &str| {
        common::lmos(
            THING_ID,
            "invokeAction",
            json!({"action": "tck", "input": "hi", "a2a": {"messageId": format!("{prefix}-1"), "taskId": "t1", "contextId": "c1"}}),
        )
    };
    consumer.send(ask("tck-input-required")).await;
    let seen = statuses(&mut consumer).await;
    let last = seen.last().unwrap();
    assert_eq!(last["status"], "completed", "{seen:?}");
    assert_eq!(last["a2a"]["state"], "input-required", "{seen:?}");
    consumer.send(ask("tck-stream-artifact-text")).await;
    let seen = statuses(&mut consumer).await;
    let with_artifact = seen
        .iter()
        .find(|m| m["status"] == "running" && m.get("a2a").is_some());
    let artifact = &with_artifact.unwrap_or_else(|| panic!("{seen:?}"))["a2a"]["artifacts"][0];
    assert_eq!(artifact["parts"][0]["text"], "Streamed text content");
    assert_eq!(seen.last().unwrap()["status"], "completed");
    face.stop().await;
}

/// An invocation's statuses, up to the one that ends it.
async fn statuses(consumer: &mut common::WsClient) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let m = consumer.recv().await;
        assert_eq!(m["messageType"], "actionStatus", "{m}");
        let end = m["status"] != "pending" && m["status"] != "running";
        seen.push(m);
        if end {
            return seen;
        }
    }
}
