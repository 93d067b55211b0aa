use serde_json::json;

use super::*;

fn endpoint(dialect: Dialect) -> Endpoint {
    Endpoint {
        url: "http://127.0.0.1:1/".into(),
        dialect,
        tenant: None,
        streaming: true,
    }
}

#[test]
fn method_names_per_dialect() {
    assert_eq!(
        method_name(Dialect::V1, Method::Stream),
        "SendStreamingMessage"
    );
    assert_eq!(method_name(Dialect::V1, Method::Cancel), "CancelTask");
    assert_eq!(method_name(Dialect::V1, Method::Get), "GetTask");
    assert_eq!(method_name(Dialect::V03, Method::Stream), "message/stream");
    assert_eq!(method_name(Dialect::V03, Method::Cancel), "tasks/cancel");
    let req = request(
        7,
        &endpoint(Dialect::V1),
        Method::Get,
        task_params(&endpoint(Dialect::V1), "t1"),
    );
    assert_eq!(
        req,
        json!({"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "t1"}})
    );
}

#[test]
fn a_string_is_one_text_part() {
    let p = send_params(
        &endpoint(Dialect::V1),
        "forecast",
        Some(&json!("Oslo")),
        "m1",
    );
    assert_eq!(
        p,
        json!({"message": {"messageId": "m1", "parts": [{"text": "Oslo"}], "metadata": {"skill": "forecast"},
            "role": "ROLE_USER"}})
    );
    let p = send_params(
        &endpoint(Dialect::V03),
        "forecast",
        Some(&json!("Oslo")),
        "m1",
    );
    assert_eq!(
        p,
        json!({"configuration": {"blocking": true}, "message": {"messageId": "m1",
            "parts": [{"kind": "text", "text": "Oslo"}], "metadata": {"skill": "forecast"},
            "role": "user", "kind": "message"}})
    );
    let none = send_params(&endpoint(Dialect::V1), "x", None, "m");
    assert_eq!(none["message"]["parts"], json!([{"text": ""}]));
}

#[test]
fn an_object_or_array_is_one_data_part() {
    let p = send_params(
        &endpoint(Dialect::V1),
        "a",
        Some(&json!({"city": "Oslo"})),
        "m",
    );
    assert_eq!(p["message"]["parts"], json!([{"data": {"city": "Oslo"}}]));
    let p = send_params(&endpoint(Dialect::V1), "a", Some(&json!([1, 2])), "m");
    assert_eq!(p["message"]["parts"], json!([{"data": [1, 2]}]));
    // 0.3 data parts are objects.
    let p = send_params(&endpoint(Dialect::V03), "a", Some(&json!([1, 2])), "m");
    assert_eq!(
        p["message"]["parts"],
        json!([{"kind": "data", "data": {"value": [1, 2]}}])
    );
    let p = send_params(&endpoint(Dialect::V03), "a", Some(&json!({"k": 1})), "m");
    assert_eq!(
        p["message"]["parts"],
        json!([{"kind": "data", "data": {"k": 1}}])
    );
}

#[test]
fn task_and_context_ids_continue_a_task() {
    let input = json!({"taskId": "t1", "contextId": "c1", "input": "Oslo"});
    let p = send_params(&endpoint(Dialect::V1), "ask", Some(&input), "m");
    assert_eq!(p["message"]["taskId"], "t1");
    assert_eq!(p["message"]["contextId"], "c1");
    assert_eq!(p["message"]["parts"], json!([{"text": "Oslo"}]));
    // Other members stay the data; only the context is fine too.
    let input = json!({"contextId": "c1", "city": "Oslo"});
    let p = send_params(&endpoint(Dialect::V1), "ask", Some(&input), "m");
    assert_eq!(p["message"].get("taskId"), None);
    assert_eq!(p["message"]["parts"], json!([{"data": {"city": "Oslo"}}]));
    let input = json!({"taskId": "t1", "input": "x", "more": 1});
    let p = send_params(&endpoint(Dialect::V1), "ask", Some(&input), "m");
    assert_eq!(
        p["message"]["parts"],
        json!([{"data": {"input": "x", "more": 1}}])
    );
    // Without ids, an `input` member is just data; non-string ids are data.
    let input = json!({"input": "x", "taskId": 5});
    let p = send_params(&endpoint(Dialect::V1), "ask", Some(&input), "m");
    assert_eq!(
        p["message"]["parts"],
        json!([{"data": {"input": "x", "taskId": 5}}])
    );
}

#[test]
fn a_tenant_goes_in_1_0_params() {
    let mut e = endpoint(Dialect::V1);
    e.tenant = Some("acme".into());
    assert_eq!(send_params(&e, "a", None, "m")["tenant"], "acme");
    assert_eq!(task_params(&e, "t"), json!({"id": "t", "tenant": "acme"}));
}

#[test]
fn json_rpc_errors_map_to_statuses() {
    let ok = rpc_result(json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}));
    assert_eq!(ok, Ok(json!({"a": 1})));
    let err = rpc_result(
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}),
    );
    assert_eq!(
        err,
        Err(UpstreamError::Refused {
            status: 404,
            message: "the agent refused (-32001): Task not found".into()
        })
    );
    let version = rpc_result(
        json!({"error": {"code": -32009, "message": "A2A version '0.3' is not supported"}}),
    );
    assert!(matches!(
        version,
        Err(UpstreamError::Refused { status: 502, .. })
    ));
    assert!(matches!(
        rpc_result(json!({"id": 1})),
        Err(UpstreamError::Malformed(_))
    ));
    assert!(matches!(
        rpc_result(json!("x")),
        Err(UpstreamError::Malformed(_))
    ));
}
