use serde_json::{json, Value};

use super::*;

fn steps(tracker: &mut Tracker, results: &[Value]) -> Vec<Step> {
    results
        .iter()
        .map(|r| tracker.on_result(r).unwrap())
        .collect()
}

fn progress(state: &str, message: &str) -> Step {
    Step::Updates(vec![Update::Progress(
        json!({"state": state, "message": message}),
    )])
}

fn text_chunk(text: &str) -> Step {
    Step::Updates(vec![Update::Chunk {
        data: json!(text),
        content_type: Some("text/plain".into()),
        base64: false,
    }])
}

/// The forecast as a2a-sdk 1.3.0 streams it over 1.0 (ids shortened).
fn forecast_v1() -> Vec<Value> {
    let status = |state: &str, text: Option<&str>| {
        let mut s = json!({"state": state, "timestamp": "2026-01-01T00:00:00Z"});
        if let Some(t) = text {
            s["message"] = json!({"messageId": "x", "role": "ROLE_AGENT", "parts": [{"text": t}]});
        }
        json!({"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": s}})
    };
    let artifact = |text: &str, append: bool, last: bool| {
        json!({"artifactUpdate": {"taskId": "t1", "contextId": "c1",
            "artifact": {"artifactId": "forecast", "name": "forecast", "parts": [{"text": text}]},
            "append": append, "lastChunk": last}})
    };
    vec![
        json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"},
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}]}}),
        status("TASK_STATE_WORKING", Some("step 1")),
        status("TASK_STATE_WORKING", Some("step 2")),
        status("TASK_STATE_WORKING", Some("step 3")),
        artifact("The weather ", false, false),
        artifact("in Oslo ", true, false),
        artifact("is sunny.", true, true),
        status("TASK_STATE_COMPLETED", None),
    ]
}

/// The same over 0.3.
fn forecast_v03() -> Vec<Value> {
    let status = |state: &str, text: Option<&str>, last: bool| {
        let mut s = json!({"state": state});
        if let Some(t) = text {
            s["message"] = json!({"kind": "message", "messageId": "x", "role": "agent",
                "parts": [{"kind": "text", "text": t}]});
        }
        json!({"kind": "status-update", "taskId": "t1", "contextId": "c1", "status": s, "final": last})
    };
    let artifact = |text: &str, append: bool, last: bool| {
        json!({"kind": "artifact-update", "taskId": "t1", "contextId": "c1", "append": append, "lastChunk": last,
            "artifact": {"artifactId": "forecast", "parts": [{"kind": "text", "text": text}]}})
    };
    vec![
        json!({"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "submitted"}}),
        status("working", Some("step 1"), false),
        status("working", Some("step 2"), false),
        status("working", Some("step 3"), false),
        artifact("The weather ", false, false),
        artifact("in Oslo ", true, false),
        artifact("is sunny.", true, true),
        status("completed", None, true),
    ]
}

#[test]
fn a_streamed_forecast_in_both_dialects() {
    for events in [forecast_v1(), forecast_v03()] {
        let mut tracker = Tracker::new(1 << 20);
        let got = steps(&mut tracker, &events);
        assert_eq!(tracker.task_id(), Some("t1"));
        let expected = vec![
            Step::Updates(vec![]),
            progress("working", "step 1"),
            progress("working", "step 2"),
            progress("working", "step 3"),
            text_chunk("The weather "),
            text_chunk("in Oslo "),
            text_chunk("is sunny."),
            Step::Done(Outcome::Completed(json!("The weather in Oslo is sunny."))),
        ];
        assert_eq!(got, expected);
    }
}

#[test]
fn a_blocking_answer_holds_the_whole_task() {
    // SendMessage as a2a-sdk answers it: the artifact's chunks as parts.
    let result = json!({"task": {"id": "t9", "contextId": "c9",
        "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "forecast", "parts": [{"text": "The weather "}, {"text": "in Oslo "}, {"text": "is sunny."}]}]}});
    let mut tracker = Tracker::new(1 << 20);
    assert_eq!(
        tracker.on_result(&result).unwrap(),
        Step::Done(Outcome::Completed(json!("The weather in Oslo is sunny.")))
    );
    // GetTask answers a bare task; while it runs, that is no news.
    let bare = json!({"id": "t9", "status": {"state": "TASK_STATE_WORKING"}});
    let mut tracker = Tracker::new(100);
    assert_eq!(tracker.on_result(&bare).unwrap(), Step::Updates(vec![]));
    assert_eq!(tracker.task_id(), Some("t9"));
}

#[test]
fn outputs_data_and_mixed_artifacts() {
    let data = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a", "parts": [{"data": {"temp": 21}}]}]}});
    assert_eq!(
        Tracker::new(1000).on_result(&data).unwrap(),
        Step::Done(Outcome::Completed(json!({"temp": 21})))
    );
    let mixed = json!({"kind": "task", "id": "t", "status": {"state": "completed"},
    "artifacts": [
        {"artifactId": "a", "name": "text", "parts": [{"kind": "text", "text": "hi"}]},
        {"artifactId": "b", "parts": [{"kind": "file", "file": {"bytes": "AAE=", "mimeType": "image/png"}}]}
    ]});
    let expected = json!({"artifacts": [
        {"artifactId": "a", "name": "text", "parts": [{"text": "hi"}]},
        {"artifactId": "b", "name": null, "parts": [{"raw": "AAE=", "mediaType": "image/png"}]}
    ]});
    assert_eq!(
        Tracker::new(1000).on_result(&mixed).unwrap(),
        Step::Done(Outcome::Completed(expected))
    );
    // Two text artifacts: a line each.
    let two = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [
        {"artifactId": "a", "parts": [{"text": "one"}]}, {"artifactId": "b", "parts": [{"text": "two"}]}]}});
    assert_eq!(
        Tracker::new(1000).on_result(&two).unwrap(),
        Step::Done(Outcome::Completed(json!("one\ntwo")))
    );
    // No artifacts: the status message is the answer.
    let said = json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED",
        "message": {"parts": [{"text": "Forecast for Oslo: sunny."}]}}}});
    assert_eq!(
        Tracker::new(1000).on_result(&said).unwrap(),
        Step::Done(Outcome::Completed(json!("Forecast for Oslo: sunny.")))
    );
}

#[test]
fn an_artifact_without_append_replaces_the_earlier_one() {
    let mut tracker = Tracker::new(1000);
    let art = |t: &str, append: bool| json!({"artifactUpdate": {"taskId": "t", "append": append, "artifact": {"artifactId": "a", "parts": [{"text": t}]}}});
    steps(
        &mut tracker,
        &[art("old", false), art("new", false), art("er", true)],
    );
    let done = tracker.on_result(
        &json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    );
    assert_eq!(
        done.unwrap(),
        Step::Done(Outcome::Completed(json!("newer")))
    );
}

#[test]
fn kept_artifacts_are_bounded() {
    // Each part is 21 bytes of JSON: two fit in 50, three do not.
    let mut tracker = Tracker::new(50);
    let art = json!({"artifactUpdate": {"taskId": "t", "append": true, "artifact": {"artifactId": "a", "parts": [{"text": "0123456789"}]}}});
    assert!(tracker.on_result(&art).is_ok());
    assert!(tracker.on_result(&art).is_ok());
    assert_eq!(tracker.on_result(&art), Err(UpstreamError::TooLarge(50)));
}

#[test]
fn failed_rejected_and_canceled() {
    let update = |state: &str, text: Option<&str>| {
        let mut s = json!({"state": state});
        if let Some(t) = text {
            s["message"] = json!({"parts": [{"text": t}]});
        }
        json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": s}})
    };
    let mut t = Tracker::new(100);
    assert_eq!(
        t.on_result(&update(
            "TASK_STATE_FAILED",
            Some("the agent failed on purpose")
        ))
        .unwrap(),
        Step::Done(Outcome::Failed(
            json!({"error": "the agent failed on purpose", "state": "failed"})
        ))
    );
    assert_eq!(
        t.on_result(&update("rejected", None)).unwrap(),
        Step::Done(Outcome::Failed(
            json!({"error": "the agent's task ended rejected", "state": "rejected"})
        ))
    );
    assert_eq!(
        t.on_result(&update("TASK_STATE_CANCELED", None)).unwrap(),
        Step::Done(Outcome::Cancelled)
    );
    assert_eq!(
        t.on_result(&update("canceled", None)).unwrap(),
        Step::Done(Outcome::Cancelled)
    );
}

#[test]
fn input_required_completes_with_how_to_continue() {
    for (task, update) in [
        (
            json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                "message": {"role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]}}}}),
        ),
        (
            json!({"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "submitted"}}),
            json!({"kind": "status-update", "taskId": "t1", "contextId": "c1", "final": true,
                "status": {"state": "input-required", "message": {"kind": "message", "parts": [{"kind": "text", "text": "Which city?"}]}}}),
        ),
    ] {
        let mut t = Tracker::new(1000);
        t.on_result(&task).unwrap();
        assert_eq!(
            t.on_result(&update).unwrap(),
            Step::Done(Outcome::Completed(
                json!({"state": "input-required", "message": "Which city?",
                "taskId": "t1", "contextId": "c1"})
            ))
        );
    }
    let auth =
        json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_AUTH_REQUIRED"}}});
    match Tracker::new(100).on_result(&auth).unwrap() {
        Step::Done(Outcome::Completed(v)) => assert_eq!(v["state"], "auth-required"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_message_answer_completes() {
    let m = json!({"message": {"messageId": "a", "role": "ROLE_AGENT", "parts": [{"text": "00-abc-01"}]}});
    assert_eq!(
        Tracker::new(100).on_result(&m).unwrap(),
        Step::Done(Outcome::Completed(json!("00-abc-01")))
    );
    let m03 = json!({"kind": "message", "messageId": "a", "role": "agent", "parts": [{"kind": "data", "data": {"x": 1}}]});
    assert_eq!(
        Tracker::new(100).on_result(&m03).unwrap(),
        Step::Done(Outcome::Completed(json!({"x": 1})))
    );
    // Within a task, a message is news.
    let mut t = Tracker::new(100);
    t.on_result(&json!({"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}}}))
        .unwrap();
    assert_eq!(t.on_result(&m).unwrap(), progress("working", "00-abc-01"));
}

#[test]
fn hostile_results_are_errors_not_panics() {
    let mut t = Tracker::new(100);
    for bad in [
        json!(null),
        json!([]),
        json!({}),
        json!({"kind": "nonsense"}),
        json!({"task": {"id": "t"}}),
        json!({"statusUpdate": {"taskId": "t"}}),
        json!({"statusUpdate": "x"}),
    ] {
        assert!(
            matches!(t.on_result(&bad), Err(UpstreamError::Malformed(_))),
            "{bad}"
        );
    }
    // Odd but readable: unknown states are progress, odd parts skipped.
    let odd = json!({"statusUpdate": {"taskId": 5, "status": {"state": 7, "message": {"parts": [1, {"text": 2}]}}}});
    assert_eq!(
        t.on_result(&odd).unwrap(),
        Step::Updates(vec![Update::Progress(json!({"state": "unknown"}))])
    );
    let art = json!({"artifactUpdate": {"artifact": {"parts": [{"bogus": 1}]}}});
    assert_eq!(t.on_result(&art).unwrap(), Step::Updates(vec![]));
}

#[test]
fn state_names() {
    assert_eq!(state_name("TASK_STATE_INPUT_REQUIRED"), "input-required");
    assert_eq!(state_name("input-required"), "input-required");
    assert_eq!(state_name("TASK_STATE_CANCELED"), "canceled");
    assert_eq!(state_name("working"), "working");
}
