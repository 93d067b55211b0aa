//! `A2A-Version` (VER-*).

use super::*;

#[tokio::test]
async fn ver_server_001_the_requested_version_s_semantics_are_used() {
    let face = Face::start().await;
    let v1 = face
        .call_raw(
            "SendMessage",
            json!({"message": message("tck-complete-task", json!({}))}),
            &[("A2A-Version", "1.0")],
        )
        .await
        .json();
    assert_eq!(state(&v1["result"]["task"]), "TASK_STATE_COMPLETED", "{v1}");
    let old = json!({"message": {"kind": "message", "role": "user", "messageId": format!("tck-complete-task-{}", uuid::Uuid::new_v4()),
        "parts": [{"kind": "text", "text": "Hello from 0.3"}]}});
    let v03 = face
        .call_raw("message/send", old, &[("A2A-Version", "0.3")])
        .await
        .json();
    assert_eq!(v03["result"]["kind"], "task", "{v03}");
    assert_eq!(v03["result"]["status"]["state"], "completed", "{v03}");
    face.stop().await;
}

#[tokio::test]
async fn ver_server_002_an_unsupported_version_is_refused() {
    let face = Face::start().await;
    for version in ["99.0", "2.0", "0.1"] {
        let r = face
            .call_raw(
                "SendMessage",
                json!({"message": message("tck-ver-002", json!({}))}),
                &[("A2A-Version", version)],
            )
            .await
            .json();
        assert_eq!(code(&r), Some(-32009), "{version}: {r}");
        assert_eq!(
            error_info(&r).map(|i| i["reason"].clone()),
            Some(json!("VERSION_NOT_SUPPORTED")),
            "{r}"
        );
    }
    face.stop().await;
}

/// No header, or an empty one, is 0.3: its method names and shapes work.
#[tokio::test]
async fn ver_server_003_no_version_means_0_3() {
    let face = Face::start().await;
    for headers in [vec![], vec![("A2A-Version", "")]] {
        let old = json!({"message": {"kind": "message", "role": "user", "messageId": format!("tck-complete-task-{}", uuid::Uuid::new_v4()),
            "parts": [{"kind": "text", "text": "Hello from 0.3"}]}});
        let r = face.call_raw("message/send", old, &headers).await.json();
        assert_eq!(r["result"]["kind"], "task", "{headers:?}: {r}");
    }
    face.stop().await;
}

/// The server half of VER-CLIENT-002: a patch number does not change
/// what version is spoken.
#[tokio::test]
async fn ver_client_002_a_patch_number_does_not_matter() {
    let face = Face::start().await;
    let r = face
        .call_raw(
            "SendMessage",
            json!({"message": message("tck-complete-task", json!({}))}),
            &[("A2A-Version", "1.0.1")],
        )
        .await
        .json();
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r}");
    face.stop().await;
}
