//! Errors and the JSON-RPC binding (CORE-ERR-*, JSONRPC-*).

use super::*;

/// Each A2A error the face can be made to answer: (ErrorInfo reason,
/// JSON-RPC code, the response).
async fn a2a_errors(face: &Face) -> Vec<(&'static str, i64, Value)> {
    let done = face.task("tck-complete-task").await;
    let unknown = format!("tck-nonexistent-{}", uuid::Uuid::new_v4());
    let raw_part = json!({"message": {"role": "ROLE_USER", "messageId": format!("tck-ct-{}", uuid::Uuid::new_v4()),
        "parts": [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}]}});
    let old = face
        .call_raw(
            "SendMessage",
            json!({"message": message("tck-ver", json!({}))}),
            &[("A2A-Version", "99.0")],
        )
        .await
        .json();
    vec![
        (
            "TASK_NOT_FOUND",
            -32001,
            face.call("GetTask", json!({"id": unknown})).await,
        ),
        (
            "TASK_NOT_CANCELABLE",
            -32002,
            face.call("CancelTask", json!({"id": done["id"]})).await,
        ),
        (
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            -32003,
            face.call(
                "ListTaskPushNotificationConfigs",
                json!({"taskId": done["id"]}),
            )
            .await,
        ),
        (
            "UNSUPPORTED_OPERATION",
            -32004,
            face.send("tck-terminal", json!({"taskId": done["id"]}), None)
                .await,
        ),
        (
            "CONTENT_TYPE_NOT_SUPPORTED",
            -32005,
            face.call("SendMessage", raw_part).await,
        ),
        ("VERSION_NOT_SUPPORTED", -32009, old),
    ]
}

#[tokio::test]
async fn core_err_001_errors_say_what_and_why() {
    let face = Face::start().await;
    let r = face.call("NonExistentMethod", json!({})).await;
    assert_eq!(code(&r), Some(-32601), "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{r}"
    );
    face.stop().await;
}

#[tokio::test]
async fn core_err_002_parameters_are_checked_before_anything_is_done() {
    let face = Face::start().await;
    for (method, params) in [
        ("SendMessage", json!({})),
        ("SendMessage", json!({"message": "text"})),
        (
            "SendMessage",
            json!({"message": {"role": "ROLE_USER", "parts": [{"text": "no messageId"}]}}),
        ),
        (
            "SendMessage",
            json!({"message": {"role": "ROLE_USER", "messageId": "m", "parts": []}}),
        ),
        ("GetTask", json!({})),
        ("CancelTask", json!({"id": 42})),
        ("ListTasks", json!({"pageSize": "many"})),
    ] {
        let r = face.call(method, params.clone()).await;
        assert_eq!(code(&r), Some(-32602), "{method} {params}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_fmt_001_answers_are_json_rpc_2_0_for_the_request_s_id() {
    let face = Face::start().await;
    for id in [json!(7), json!("req-1")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage",
            "params": {"message": message("tck-complete-task", json!({}))}});
        let r = face
            .post(
                &face.path,
                &[("Content-Type", "application/json"), ("A2A-Version", "1.0")],
                body.to_string().as_bytes(),
            )
            .await
            .json();
        assert_eq!(r["jsonrpc"], "2.0", "{r}");
        assert_eq!(r["id"], id, "{r}");
        assert!(r.get("result").is_some() != r.get("error").is_some(), "{r}");
    }
    let not_rpc = json!({"id": 3, "method": "GetTask", "params": {"id": "x"}});
    let r = face
        .post(
            &face.path,
            &[("Content-Type", "application/json")],
            not_rpc.to_string().as_bytes(),
        )
        .await
        .json();
    assert_eq!(code(&r), Some(-32600), "{r}");
    face.stop().await;
}

/// The TCK sends a wrong Content-Type and takes HTTP 415 or
/// ContentTypeNotSupportedError (-32005) as the answer.
#[tokio::test]
async fn jsonrpc_fmt_002_json_in_and_out() {
    let face = Face::start().await;
    let r = face
        .call_raw("GetTask", json!({"id": "x"}), &[("A2A-Version", "1.0")])
        .await;
    assert!(
        r.header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "{r:?}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("tck-complete-task", json!({}))}});
    let r = face
        .post(
            &face.path,
            &[("Content-Type", "text/plain"), ("A2A-Version", "1.0")],
            body.to_string().as_bytes(),
        )
        .await;
    let refused = r.status == 415
        || serde_json::from_str::<Value>(&r.body).is_ok_and(|v| code(&v) == Some(-32005));
    assert!(refused, "{r:?}");
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_svc_001_the_pascal_case_methods_are_all_answered() {
    let face = Face::start().await;
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    ] {
        // Bad params on purpose: a known method says so, not "not found".
        let r = face
            .call_raw(method, json!({"id": 42}), &[("A2A-Version", "1.0")])
            .await;
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        assert_ne!(code(&v), Some(-32601), "{method}: {r:?}");
    }
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_svc_002_service_parameters_come_as_headers() {
    let face = Face::start().await;
    let r = face
        .call_raw(
            "SendMessage",
            json!({"message": message("tck-complete-task", json!({}))}),
            &[
                ("a2a-version", "1.0"),
                (
                    "A2A-Extensions",
                    "https://example.com/ext/v1,https://example.com/ext/v2",
                ),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        state(&r.json()["result"]["task"]),
        "TASK_STATE_COMPLETED",
        "{r:?}"
    );
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_err_001_error_objects_are_json_rpc_s() {
    let face = Face::start().await;
    let mut responses: Vec<Value> = a2a_errors(&face)
        .await
        .into_iter()
        .map(|(_, _, r)| r)
        .collect();
    responses.push(face.call("NonExistentMethod", json!({})).await);
    responses.push(face.call("GetTask", json!({})).await);
    for r in responses {
        let error = r["error"]
            .as_object()
            .unwrap_or_else(|| panic!("no error: {r}"));
        assert!(error["code"].is_i64(), "{r}");
        assert!(error["message"].is_string(), "{r}");
        assert!(
            error
                .keys()
                .all(|k| ["code", "message", "data"].contains(&k.as_str())),
            "{r}"
        );
        if let Some(data) = error.get("data") {
            assert!(data.is_array(), "data is an array of Any: {r}");
        }
    }
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_err_002_a2a_errors_use_codes_32001_to_32099() {
    let face = Face::start().await;
    for (reason, _, r) in a2a_errors(&face).await {
        let c = code(&r).unwrap_or_else(|| panic!("{reason}: no error: {r}"));
        assert!((-32099..=-32001).contains(&c), "{reason}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_err_003_a2a_errors_carry_an_error_info() {
    let face = Face::start().await;
    for (reason, _, r) in a2a_errors(&face).await {
        let info = error_info(&r).unwrap_or_else(|| panic!("{reason}: no ErrorInfo: {r}"));
        assert_eq!(info["reason"], reason, "{r}");
        assert_eq!(info["domain"], "a2a-protocol.org", "{r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn jsonrpc_sse_002_each_a2a_error_has_its_code() {
    let face = Face::start().await;
    for (reason, expected, r) in a2a_errors(&face).await {
        assert_eq!(code(&r), Some(expected), "{reason}: {r}");
    }
    face.stop().await;
}
