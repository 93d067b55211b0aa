//! The operations (CORE-SEND, CORE-GET, CORE-LIST, CORE-CANCEL,
//! CORE-EXECUTION-MODE, CORE-CAP).

use super::*;

#[tokio::test]
async fn core_send_001_send_message_returns_a_task_or_a_message() {
    let face = Face::start().await;
    let r = face.send("tck-complete-task", json!({}), None).await;
    let result = r["result"]
        .as_object()
        .unwrap_or_else(|| panic!("no result: {r}"));
    let kinds: Vec<&String> = result
        .keys()
        .filter(|k| *k == "task" || *k == "message")
        .collect();
    assert_eq!(kinds.len(), 1, "exactly one of task, message: {r}");
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_send_002_a_message_to_a_terminal_task_is_unsupported() {
    let face = Face::start().await;
    let done = face.task("tck-complete-task").await;
    let again = face
        .send("tck-terminal", json!({"taskId": done["id"]}), None)
        .await;
    assert_eq!(code(&again), Some(-32004), "{again}");
    face.stop().await;
}

/// The TCK's generic runner (1.0-dev) wants this message to SUCCEED (it
/// sets no expected error: a2aproject/a2a-tck#202); the specification
/// (§3.1.1) says the error, which is what we test.
#[tokio::test]
async fn core_send_003_a_media_type_the_agent_does_not_take_is_refused() {
    let face = Face::start().await;
    let params = json!({"message": {
        "role": "ROLE_USER",
        "parts": [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}],
        "messageId": format!("tck-send-003-{}", uuid::Uuid::new_v4()),
    }});
    let r = face.call("SendMessage", params).await;
    assert_eq!(code(&r), Some(-32005), "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_get_001_get_task_returns_the_task_as_it_stands() {
    let face = Face::start().await;
    let sent = face.task("tck-artifact-text").await;
    let got = face.call("GetTask", json!({"id": sent["id"]})).await;
    let task = &got["result"];
    assert_eq!(task["id"], sent["id"], "{got}");
    assert_eq!(task["contextId"], sent["contextId"], "{got}");
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"], "Generated text content",
        "{got}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_get_002_an_unknown_task_is_not_found() {
    let face = Face::start().await;
    for id in [
        format!("tck-nonexistent-get-002-{}", uuid::Uuid::new_v4()),
        format!("tck~{}", uuid::Uuid::new_v4()),
    ] {
        let r = face.call("GetTask", json!({"id": id})).await;
        assert_eq!(code(&r), Some(-32001), "{id}: {r}");
    }
    face.stop().await;
}

/// Three tasks in one (client-given) context, newest last.
async fn three_in_a_context(face: &Face, prefix: &str) -> (String, Vec<Value>) {
    let context = format!("tck-list-{}", uuid::Uuid::new_v4());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let r = face.send(prefix, json!({"contextId": context}), None).await;
        tasks.push(r["result"]["task"].clone());
    }
    (context, tasks)
}

fn ids(list: &Value) -> Vec<String> {
    list["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks: {list}"))
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn core_list_002_list_tasks_pages_with_a_cursor() {
    let face = Face::start().await;
    let (context, tasks) = three_in_a_context(&face, "tck-complete-task").await;
    let first = face
        .call("ListTasks", json!({"contextId": context, "pageSize": 2}))
        .await;
    assert_eq!(ids(&first).len(), 2, "{first}");
    let token = first["result"]["nextPageToken"]
        .as_str()
        .unwrap_or_default();
    assert!(!token.is_empty(), "a next page: {first}");
    let second = face
        .call(
            "ListTasks",
            json!({"contextId": context, "pageSize": 2, "pageToken": token}),
        )
        .await;
    assert_eq!(ids(&second).len(), 1, "{second}");
    assert_eq!(second["result"]["nextPageToken"], "", "{second}");
    let mut all: Vec<String> = ids(&first).into_iter().chain(ids(&second)).collect();
    all.sort();
    let mut sent: Vec<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    sent.sort();
    assert_eq!(all, sent);
    face.stop().await;
}

#[tokio::test]
async fn core_list_003_list_tasks_puts_the_latest_update_first() {
    let face = Face::start().await;
    let (context, tasks) = three_in_a_context(&face, "tck-complete-task").await;
    let list = face.call("ListTasks", json!({"contextId": context})).await;
    let stamps: Vec<&str> = list["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(stamps.len(), 3, "{list}");
    // ISO 8601 in UTC with the same precision: text order is time order.
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");
    // Stamps of the same millisecond leave the order open; otherwise the
    // last one created was updated last.
    if stamps[0] > stamps[1] {
        assert_eq!(ids(&list)[0], tasks[2]["id"].as_str().unwrap());
    }
    face.stop().await;
}

#[tokio::test]
async fn core_list_004_next_page_token_is_always_there_and_empty_at_the_end() {
    let face = Face::start().await;
    let (context, _) = three_in_a_context(&face, "tck-complete-task").await;
    // As the TCK sends it: ProtoJSON's proto field names.
    for params in [
        json!({"context_id": context, "page_size": 100}),
        json!({"contextId": context}),
        json!({"contextId": format!("tck-empty-{}", uuid::Uuid::new_v4())}),
    ] {
        let r = face.call("ListTasks", params.clone()).await;
        assert_eq!(r["result"]["nextPageToken"], "", "{params}: {r}");
        assert_schema("List Tasks Response", &r["result"]);
    }
    face.stop().await;
}

#[tokio::test]
async fn core_list_005_artifacts_are_left_out_unless_asked_for() {
    let face = Face::start().await;
    let (context, _) = three_in_a_context(&face, "tck-artifact-text").await;
    for params in [
        json!({"contextId": context}),
        json!({"contextId": context, "includeArtifacts": false}),
        json!({"context_id": context, "include_artifacts": false}),
    ] {
        let r = face.call("ListTasks", params.clone()).await;
        for t in r["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
        {
            assert!(t.get("artifacts").is_none(), "{params}: {t}");
        }
    }
    let r = face
        .call(
            "ListTasks",
            json!({"contextId": context, "includeArtifacts": true}),
        )
        .await;
    for t in r["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
    {
        assert_eq!(
            t["artifacts"][0]["parts"][0]["text"], "Generated text content",
            "{t}"
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn core_cancel_001_cancel_task_returns_the_canceled_task() {
    let face = Face::start().await;
    let waiting = face.task("tck-input-required").await;
    assert_eq!(state(&waiting), "TASK_STATE_INPUT_REQUIRED", "{waiting}");
    let r = face.call("CancelTask", json!({"id": waiting["id"]})).await;
    assert_eq!(r["result"]["id"], waiting["id"], "{r}");
    assert_eq!(state(&r["result"]), "TASK_STATE_CANCELED", "{r}");
    let got = face.call("GetTask", json!({"id": waiting["id"]})).await;
    assert_eq!(state(&got["result"]), "TASK_STATE_CANCELED", "{got}");
    face.stop().await;
}

#[tokio::test]
async fn core_cancel_002_a_terminal_task_is_not_cancelable() {
    let face = Face::start().await;
    let done = face.task("tck-complete-task").await;
    let r = face.call("CancelTask", json!({"id": done["id"]})).await;
    assert_eq!(code(&r), Some(-32002), "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_cancel_003_an_unknown_task_is_not_found() {
    let face = Face::start().await;
    let id = format!("tck-nonexistent-cancel-003-{}", uuid::Uuid::new_v4());
    let r = face.call("CancelTask", json!({"id": id})).await;
    assert_eq!(code(&r), Some(-32001), "{r}");
    face.stop().await;
}

#[tokio::test]
async fn core_execution_mode_001_blocking_waits_for_a_terminal_or_interrupted_state() {
    let face = Face::start().await;
    let asks = face
        .send(
            "tck-input-required",
            json!({}),
            Some(json!({"returnImmediately": false})),
        )
        .await;
    assert_eq!(
        state(&asks["result"]["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{asks}"
    );
    // Runs 2 × TCK_STREAMING_TIMEOUT before it completes.
    let long = face
        .send("test-resubscribe-message-id", json!({}), None)
        .await;
    assert_eq!(
        state(&long["result"]["task"]),
        "TASK_STATE_COMPLETED",
        "{long}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_execution_mode_002_return_immediately_answers_before_the_end() {
    let face = Face::start().await;
    let r = face
        .send(
            "test-resubscribe-message-id",
            json!({}),
            Some(json!({"returnImmediately": true})),
        )
        .await;
    let s = state(&r["result"]["task"]);
    assert!(
        matches!(s, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
        "{r}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_cap_001_push_notification_methods_are_not_supported() {
    let face = Face::start().await;
    let card = common::http(
        face.addr(),
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await
    .json();
    assert_ne!(card["capabilities"]["pushNotifications"], true, "{card}");
    let task = face.task("tck-input-required").await;
    let id = task["id"].clone();
    for (method, params) in [
        (
            "CreateTaskPushNotificationConfig",
            json!({"task_id": id, "url": "https://example.com"}),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "pushNotificationConfig": {"url": "https://example.com"}}),
        ),
        (
            "GetTaskPushNotificationConfig",
            json!({"task_id": id, "id": "c"}),
        ),
        ("ListTaskPushNotificationConfigs", json!({"task_id": id})),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"task_id": id, "id": "c"}),
        ),
    ] {
        let r = face.call(method, params).await;
        assert_eq!(code(&r), Some(-32003), "{method}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn core_cap_002_streaming_is_declared_and_served() {
    let face = Face::start().await;
    let card = common::http(
        face.addr(),
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await
    .json();
    assert_eq!(card["capabilities"]["streaming"], true, "{card}");
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            json!({"message": message("tck-stream-002", json!({}))}),
        )
        .await;
    assert!(
        sse.content_type().starts_with("text/event-stream"),
        "{:?}",
        sse.body
    );
    assert!(!sse.rest().await.is_empty());
    face.stop().await;
}

#[tokio::test]
async fn core_cap_003_no_extended_card_declared_means_unsupported() {
    let face = Face::start().await;
    let card = common::http(
        face.addr(),
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await
    .json();
    assert_ne!(card["capabilities"]["extendedAgentCard"], true, "{card}");
    let r = face.call("GetExtendedAgentCard", json!({})).await;
    assert_eq!(code(&r), Some(-32004), "{r}");
    face.stop().await;
}

/// The face declares no extension, so none is required: a client that
/// names extensions (or none) is served.
#[tokio::test]
async fn core_cap_004_no_required_extension_is_declared() {
    let face = Face::start().await;
    let card = common::http(
        face.addr(),
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await
    .json();
    let required = card["capabilities"]["extensions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["required"] == true)
        .count();
    assert_eq!(required, 0, "{card}");
    let r = face.send("tck-complete-task", json!({}), None).await;
    assert_ne!(code(&r), Some(-32008), "{r}");
    face.stop().await;
}
