//! Streams (CORE-STREAM-*, STREAM-ORDER-*, STREAM-SUB-*, JSONRPC-SSE-001).

use super::*;

fn send_params(prefix: &str, extra: Value) -> Value {
    json!({"message": message(prefix, extra)})
}

/// The error a streaming call was refused with: a JSON body, or an error
/// as the stream's first event.
async fn refusal(sse: &mut Sse) -> Option<i64> {
    match &sse.body {
        Some(body) => code(body),
        None => sse.next().await.and_then(|e| code(&e)),
    }
}

/// Keys of a stream event's result: exactly one of StreamResponse's.
fn payload(event: &Value) -> Vec<String> {
    event["result"]
        .as_object()
        .into_iter()
        .flat_map(|r| r.keys().cloned())
        .filter(|k| ["task", "message", "statusUpdate", "artifactUpdate"].contains(&k.as_str()))
        .collect()
}

#[tokio::test]
async fn core_stream_001_send_streaming_message_streams_the_updates() {
    let face = Face::start().await;
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            send_params("tck-stream-001", json!({})),
        )
        .await;
    assert_eq!(sse.status, 200);
    assert!(
        sse.content_type().starts_with("text/event-stream"),
        "{:?}",
        sse.body
    );
    let events = sse.rest().await;
    let text = events
        .iter()
        .filter_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect::<Vec<_>>();
    assert!(text.contains(&"Stream hello from TCK"), "{events:#?}");
    face.stop().await;
}

#[tokio::test]
async fn core_stream_002_a_message_answer_is_one_event_then_the_end() {
    let face = Face::start().await;
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            send_params("tck-message-response", json!({})),
        )
        .await;
    let events = sse.rest().await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(payload(&events[0]), ["message"], "{events:#?}");
    assert_eq!(
        events[0]["result"]["message"]["parts"][0]["text"], "Direct message response",
        "{events:#?}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_stream_003_a_task_stream_starts_with_the_task_and_ends_with_it() {
    let face = Face::start().await;
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            send_params("tck-stream-003", json!({})),
        )
        .await;
    let events = sse.rest().await;
    assert_eq!(payload(&events[0]), ["task"], "{events:#?}");
    let last = events.last().unwrap();
    assert!(
        TERMINAL.contains(&event_state(last).unwrap_or_default()),
        "{events:#?}"
    );
    face.stop().await;
}

#[tokio::test]
async fn stream_order_001_events_come_in_the_order_made() {
    let face = Face::start().await;
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            send_params("tck-stream-ordering-001", json!({})),
        )
        .await;
    let events = sse.rest().await;
    let rank = |s: &str| match s {
        "TASK_STATE_SUBMITTED" => 0,
        "TASK_STATE_WORKING" | "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => 1,
        _ => 2,
    };
    let states: Vec<&str> = events.iter().filter_map(event_state).collect();
    assert!(
        states.windows(2).all(|w| rank(w[0]) <= rank(w[1])),
        "{states:?}"
    );
    assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"), "{states:?}");
    // The agent's order: working, then the artifact, then completed.
    let kinds: Vec<String> = events.iter().flat_map(payload).collect();
    let working = events
        .iter()
        .position(|e| event_state(e) == Some("TASK_STATE_WORKING"));
    let artifact = kinds.iter().position(|k| k == "artifactUpdate");
    let done = events
        .iter()
        .position(|e| event_state(e) == Some("TASK_STATE_COMPLETED"));
    assert!(working < artifact && artifact < done, "{events:#?}");
    face.stop().await;
}

/// Two subscribers to a task waiting for input, then a follow-up that
/// streams (working, an artifact, completed) through it.
async fn two_subscribers(face: &Face) -> (Sse, Sse, Value) {
    let waiting = face.task("tck-input-required").await;
    let one = face
        .stream("SubscribeToTask", json!({"id": waiting["id"]}))
        .await;
    let two = face
        .stream("SubscribeToTask", json!({"id": waiting["id"]}))
        .await;
    (one, two, waiting)
}

async fn follow_up(face: &Face, task: &Value) {
    let r = face
        .send("tck-stream-003", json!({"taskId": task["id"]}), None)
        .await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
}

/// An event without its per-call envelope (`id`, `jsonrpc`).
fn content(e: &Value) -> Value {
    e["result"].clone()
}

#[tokio::test]
async fn stream_order_002_events_go_to_every_stream_of_the_task() {
    let face = Face::start().await;
    let (mut one, mut two, task) = two_subscribers(&face).await;
    let (first_one, first_two) = (one.next().await, two.next().await);
    assert!(first_one.is_some() && first_two.is_some());
    follow_up(&face, &task).await;
    for events in [one.rest().await, two.rest().await] {
        assert!(
            events.iter().any(|e| payload(e) == ["artifactUpdate"]),
            "{events:#?}"
        );
        assert_eq!(
            events.last().and_then(event_state),
            Some("TASK_STATE_COMPLETED")
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn stream_order_003_every_stream_gets_the_same_events_in_the_same_order() {
    let face = Face::start().await;
    let (mut one, mut two, task) = two_subscribers(&face).await;
    let heads = (one.next().await.unwrap(), two.next().await.unwrap());
    follow_up(&face, &task).await;
    let mut a: Vec<Value> = vec![content(&heads.0)];
    a.extend(one.rest().await.iter().map(content));
    let mut b: Vec<Value> = vec![content(&heads.1)];
    b.extend(two.rest().await.iter().map(content));
    assert_eq!(a, b);
    face.stop().await;
}

#[tokio::test]
async fn stream_order_004_closing_one_stream_leaves_the_others() {
    let face = Face::start().await;
    let (mut one, mut two, task) = two_subscribers(&face).await;
    assert!(one.next().await.is_some());
    drop(one);
    assert!(two.next().await.is_some());
    follow_up(&face, &task).await;
    let rest = two.rest().await;
    assert_ends_completed(&rest);
    face.stop().await;
}

#[tokio::test]
async fn stream_sub_001_subscribe_starts_with_the_task_as_it_stands() {
    let face = Face::start().await;
    let waiting = face.task("tck-input-required").await;
    let mut sse = face
        .stream("SubscribeToTask", json!({"id": waiting["id"]}))
        .await;
    let first = sse.next().await.expect("a first event");
    assert_eq!(payload(&first), ["task"], "{first}");
    assert_eq!(first["result"]["task"]["id"], waiting["id"]);
    assert_eq!(
        state(&first["result"]["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{first}"
    );
    face.stop().await;
}

#[tokio::test]
async fn stream_sub_002_the_subscription_ends_with_the_task() {
    let face = Face::start().await;
    let waiting = face.task("tck-input-required").await;
    let mut sse = face
        .stream("SubscribeToTask", json!({"id": waiting["id"]}))
        .await;
    assert!(sse.next().await.is_some());
    let r = face
        .send("tck-complete-task", json!({"taskId": waiting["id"]}), None)
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let rest = sse.rest().await;
    assert_ends_completed(&rest);
    face.stop().await;
}

/// A running task's stream, left and joined again (the TCK's long-running
/// `test-resubscribe-message-id` scenario): the task as it stands, then
/// its end.
#[tokio::test]
async fn stream_sub_002_a_running_task_can_be_rejoined_until_its_end() {
    let face = Face::start().await;
    let mut first = face
        .stream(
            "SendStreamingMessage",
            send_params("test-resubscribe-message-id", json!({})),
        )
        .await;
    let head = first.next().await.expect("the task");
    let id = head["result"]["task"]["id"].clone();
    drop(first);
    let mut again = face.stream("SubscribeToTask", json!({"id": id})).await;
    let now = again.next().await.expect("the task as it stands");
    assert_eq!(now["result"]["task"]["id"], id);
    assert!(!TERMINAL.contains(&state(&now["result"]["task"])), "{now}");
    let rest = again.rest().await;
    assert_ends_completed(&rest);
    face.stop().await;
}

#[tokio::test]
async fn stream_sub_003_a_terminal_task_cannot_be_subscribed_to() {
    let face = Face::start().await;
    let done = face.task("tck-complete-task").await;
    let mut sse = face
        .stream("SubscribeToTask", json!({"id": done["id"]}))
        .await;
    assert_eq!(refusal(&mut sse).await, Some(-32004));
    face.stop().await;
}

#[tokio::test]
async fn stream_sub_004_an_unknown_task_cannot_be_subscribed_to() {
    let face = Face::start().await;
    let id = format!("tck-nonexistent-sub-004-{}", uuid::Uuid::new_v4());
    let mut sse = face.stream("SubscribeToTask", json!({"id": id})).await;
    assert_eq!(refusal(&mut sse).await, Some(-32001));
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_sse_001_streams_are_sse_of_json_rpc_responses() {
    let face = Face::start().await;
    for prefix in [
        "tck-stream-artifact-text",
        "tck-stream-artifact-chunked",
        "tck-sse-streaming-001",
    ] {
        let mut sse = face
            .stream("SendStreamingMessage", send_params(prefix, json!({})))
            .await;
        assert!(
            sse.content_type().starts_with("text/event-stream"),
            "{prefix}"
        );
        let events = sse.rest().await;
        assert!(!events.is_empty(), "{prefix}");
        for e in &events {
            assert_eq!(e["jsonrpc"], "2.0", "{e}");
            assert_eq!(e["id"], 1, "{e}");
            assert_eq!(payload(e).len(), 1, "{prefix}: {e}");
            assert_schema("Stream Response", &e["result"]);
        }
    }
    face.stop().await;
}
