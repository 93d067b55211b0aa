//! Authentication, authorization and in-task authorization (AUTH-*,
//! CORE-LIST-001, CARD-EXT-001) with `http.authentication = ["basic"]`.

use super::*;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};

fn basic(name: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:pw"));
    format!("Basic {encoded}")
}

/// `alice` may use the agent, `stranger` nothing, `agent` hosts it.
fn config() -> lmos_sidecar::Config {
    let mut config = test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    config.auth.anonymous = Grants::default();
    let principal = |name: &str, rights: &[&str], host: &[&str]| PrincipalConfig {
        name: name.into(),
        password_hash: hash_password("pw"),
        host: host.iter().map(|s| s.to_string()).collect(),
        consume: rights.iter().map(|s| s.to_string()).collect(),
        operate: rights.iter().map(|s| s.to_string()).collect(),
        ..PrincipalConfig::default()
    };
    config.auth.principals = vec![
        principal("agent", &[THING_ID], &[THING_ID]),
        principal("alice", &[THING_ID], &[]),
        principal("stranger", &[], &[]),
    ];
    config
}

async fn secured() -> Face {
    let mut face = Face::start_with(config(), Some(basic("agent"))).await;
    face.authorization = Some(basic("alice"));
    face
}

#[tokio::test]
async fn auth_server_002_every_call_is_authenticated() {
    let mut face = secured().await;
    face.authorization = None;
    let r = face
        .call_raw(
            "SendMessage",
            json!({"message": message("tck-complete-task", json!({}))}),
            &[("A2A-Version", "1.0")],
        )
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    face.authorization = Some("Basic YWxpY2U6d3Jvbmc=".into()); // alice:wrong
    let r = face.call_raw("GetTask", json!({"id": "x"}), &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    face.stop().await;
}

#[tokio::test]
async fn auth_scope_001_every_operation_checks_the_caller_s_rights() {
    let mut face = secured().await;
    let task = face.task("tck-input-required").await;
    face.authorization = Some(basic("stranger"));
    let send = face.send("tck-complete-task", json!({}), None).await;
    assert!(code(&send).is_some(), "{send}");
    for (method, params) in [
        ("GetTask", json!({"id": task["id"]})),
        ("CancelTask", json!({"id": task["id"]})),
    ] {
        let r = face.call(method, params).await;
        assert_eq!(code(&r), Some(-32001), "{method}: {r}");
    }
    // Not "forbidden" (that would tell the task exists): refused as for
    // an agent or task that is not there.
    let follow_up = json!({"message": message("tck-complete-task", json!({"taskId": task["id"]}))});
    let r = face.call("SendMessage", follow_up).await;
    assert!(code(&r).is_some_and(|c| c != -32600), "{r}");
    let mut sse = face
        .stream("SubscribeToTask", json!({"id": task["id"]}))
        .await;
    let refused = match &sse.body {
        Some(b) => code(b),
        None => sse.next().await.and_then(|e| code(&e)),
    };
    assert_eq!(refused, Some(-32001));
    face.stop().await;
}

/// The authorization model (docs/agent-protocols.md): a principal sees the
/// tasks of the agents it may use; one without rights on the agent sees
/// none of them, listed or named, and cannot tell them from none.
#[tokio::test]
async fn core_list_001_list_tasks_shows_only_what_the_caller_may_see() {
    let mut face = secured().await;
    let context = format!("tck-shared-{}", uuid::Uuid::new_v4());
    let mine = face
        .send("tck-complete-task", json!({"contextId": context}), None)
        .await;
    let id = mine["result"]["task"]["id"].as_str().unwrap().to_owned();
    let listed = face.call("ListTasks", json!({"contextId": context})).await;
    assert!(
        listed["result"]["tasks"].to_string().contains(&id),
        "{listed}"
    );
    face.authorization = Some(basic("stranger"));
    for params in [json!({"contextId": context}), json!({})] {
        let r = face.call("ListTasks", params.clone()).await;
        assert!(!r.to_string().contains(&id), "{params}: {r}");
    }
    face.stop().await;
}

#[tokio::test]
async fn auth_scope_002_results_stay_within_the_caller_s_bounds() {
    let mut face = secured().await;
    let mine = face.task("tck-complete-task").await;
    face.authorization = Some(basic("stranger"));
    let got = face.call("GetTask", json!({"id": mine["id"]})).await;
    assert!(got.get("result").is_none(), "{got}");
    let listed = face
        .call("ListTasks", json!({"contextId": mine["contextId"]}))
        .await;
    let tasks = listed["result"]["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(tasks.is_empty(), "{listed}");
    face.stop().await;
}

/// Another's task and a task that never was read alike.
#[tokio::test]
async fn auth_scope_003_what_the_caller_may_not_see_reads_as_unknown() {
    let mut face = secured().await;
    let mine = face.task("tck-complete-task").await;
    face.authorization = Some(basic("stranger"));
    let other = face.call("GetTask", json!({"id": mine["id"]})).await;
    let never = face
        .call(
            "GetTask",
            json!({"id": format!("tck~{}", uuid::Uuid::new_v4())}),
        )
        .await;
    assert_eq!(code(&other), Some(-32001), "{other}");
    assert_eq!(code(&other), code(&never), "{other} {never}");
    assert_eq!(
        error_info(&other).map(|i| &i["reason"]),
        error_info(&never).map(|i| &i["reason"])
    );
    let card = |path: String| {
        let addr = face.addr();
        async move {
            common::http_with(
                addr,
                "GET",
                &path,
                &[("Authorization", &basic("stranger"))],
                b"",
            )
            .await
            .status
        }
    };
    let theirs = card(format!("{}/.well-known/agent-card.json", face.path)).await;
    let nobody = card("/a2a/urn:lmos:test:nobody/.well-known/agent-card.json".into()).await;
    assert_eq!((theirs, nobody), (404, 404));
    face.stop().await;
}

#[tokio::test]
async fn card_ext_001_the_extended_card_is_for_authenticated_callers() {
    let mut face = secured().await;
    let public = common::http_with(
        face.addr(),
        "GET",
        "/.well-known/agent-card.json",
        &[("Authorization", &basic("alice"))],
        b"",
    )
    .await
    .json();
    assert_eq!(
        public["capabilities"]["extendedAgentCard"], true,
        "{public}"
    );
    let r = face.call("GetExtendedAgentCard", json!({})).await;
    assert_eq!(r["result"]["name"], public["name"], "{r}");
    assert!(r["result"]["supportedInterfaces"].is_array(), "{r}");
    face.authorization = None;
    let anonymous = face.call_raw("GetExtendedAgentCard", json!({}), &[]).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    face.stop().await;
}

/// The scripted agent's `tck-auth-required` (ours: the TCK has no such
/// scenario) asks for authorization in the task.
#[tokio::test]
async fn auth_intask_001_to_003_auth_required_is_a_task_state_with_a_message() {
    let face = Face::start().await;
    let r = face.send("tck-auth-required", json!({}), None).await;
    let task = &r["result"]["task"];
    assert!(task["id"].is_string(), "AUTH-INTASK-001, a task: {r}");
    assert_eq!(
        state(task),
        "TASK_STATE_AUTH_REQUIRED",
        "AUTH-INTASK-002: {r}"
    );
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("Authorization required"),
        "AUTH-INTASK-003: {r}"
    );
    face.stop().await;
}

#[tokio::test]
async fn auth_intask_005_a_stream_stays_open_while_auth_is_required() {
    let face = Face::start().await;
    let mut sse = face
        .stream(
            "SendStreamingMessage",
            json!({"message": message("tck-auth-required", json!({}))}),
        )
        .await;
    let mut task = Value::Null;
    loop {
        let e = sse
            .next()
            .await
            .expect("the stream stays open until AUTH_REQUIRED at least");
        if task.is_null() {
            task = e["result"]["task"].clone();
        }
        if event_state(&e) == Some("TASK_STATE_AUTH_REQUIRED") {
            break;
        }
    }
    // Credentials arrive out of band; the client's follow-up completes it
    // and the same stream carries the end.
    let r = face
        .send("tck-complete-task", json!({"taskId": task["id"]}), None)
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let rest = sse.rest().await;
    assert!(!rest.is_empty(), "the stream ended at AUTH_REQUIRED");
    assert_ends_completed(&rest);
    face.stop().await;
}

#[tokio::test]
async fn auth_intask_006_messages_reach_a_task_waiting_for_auth() {
    let face = Face::start().await;
    let waiting = face.task("tck-auth-required").await;
    let r = face
        .send("tck-complete-task", json!({"taskId": waiting["id"]}), None)
        .await;
    assert_eq!(r["result"]["task"]["id"], waiting["id"], "{r}");
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    face.stop().await;
}
