//! An A2A task survives a restart of the sidecar process (SIGKILL, same
//! data directory): the face's task store is memory only, but the task's
//! first invocation has the task's id as its correlation ID and the
//! router's invocation records are kept, so `GetTask` still answers with
//! the task's state and output. An id the records do not know is still
//! TaskNotFound.

use std::time::Duration;

use lmos_testkit as common;

use common::process::{on_directory, DataDir, Started};
use common::weather_agent::{self, THING_ID};
use common::{http, lamp_td};
use lmos_testkit::sidecar_command as sidecar;
use serde_json::{json, Value};

fn start(dir: &std::path::Path) -> Started {
    let mut cmd = sidecar!();
    Started::start(on_directory(&mut cmd, dir))
}

/// Serves the WeatherAgent from this test until the sidecar goes, and
/// waits until its TD is in the directory.
async fn agent(sidecar: &Started) {
    let url = format!("ws://{}/lmos", sidecar.http);
    tokio::spawn(async move { weather_agent::serve(&url).await.ok() });
    let path = format!("/things/{}", common::urlencode(THING_ID));
    for _ in 0..100 {
        if http(sidecar.http, "GET", &path, None, b"").await.status == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the WeatherAgent did not register");
}

async fn rpc(sidecar: &Started, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let path = format!("/a2a/{}", common::urlencode(THING_ID));
    let r = http(
        sidecar.http,
        "POST",
        &path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .await;
    serde_json::from_str(&r.body).unwrap_or_else(|_| panic!("not JSON: {r:?}"))
}

/// Returns once what the sidecar queued for its store is on disk: a TD
/// registration is answered only then, and the store commits in order.
async fn on_disk(sidecar: &Started) {
    let mut td = lamp_td();
    td["id"] = json!("urn:test:barrier");
    let path = format!("/things/{}", common::urlencode("urn:test:barrier"));
    let body = td.to_string();
    let put = http(
        sidecar.http,
        "PUT",
        &path,
        Some("application/td+json"),
        body.as_bytes(),
    )
    .await;
    assert!(matches!(put.status, 201 | 204), "{put:?}");
}

fn forecast(task: &Value) -> &str {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn get_task_answers_after_a_sigkill_restart() {
    let dir = DataDir::new("a2a-restart");
    let sidecar = start(&dir.0);
    agent(&sidecar).await;
    let message = json!({"messageId": "m-restart", "role": "ROLE_USER",
        "parts": [{"text": "What is the weather in Oslo?"}]});
    let sent = rpc(&sidecar, "SendMessage", json!({"message": message})).await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert!(forecast(task).contains("Oslo"), "{sent}");
    let id = task["id"].as_str().expect("a task id").to_owned();
    on_disk(&sidecar).await;
    sidecar.kill();

    let sidecar = start(&dir.0);
    agent(&sidecar).await;
    let got = rpc(&sidecar, "GetTask", json!({"id": id})).await;
    let again = &got["result"];
    assert_eq!(again["id"], id.as_str(), "{got}");
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(forecast(again), forecast(task), "{got}");
    let unknown = uuid::Uuid::new_v4().to_string();
    let none = rpc(&sidecar, "GetTask", json!({"id": unknown})).await;
    assert_eq!(none["error"]["code"], -32001, "{none}");
    sidecar.terminate();
}
