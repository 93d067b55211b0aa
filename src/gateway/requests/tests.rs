use super::*;
use crate::telemetry::metrics;
use serde_json::json;

const T: &str = "urn:t";

fn router(limit: usize) -> Requests {
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), limit);
    r.claim(1, &[T.to_owned()]).unwrap();
    r
}

fn message(v: Value) -> Message {
    Message::from_value(v).unwrap()
}

fn read(correlation: &str) -> Message {
    message(
        json!({"thingID": T, "messageID": "m", "messageType": "readProperty", "name": "p", "correlationID": correlation}),
    )
}

/// The forwarded request's route, from the effect that sends it to agent 1.
fn forwarded(effects: &[Effect]) -> String {
    match effects {
        [Effect::ToAgent(1, text)] => {
            let v: Value = serde_json::from_str(text).unwrap();
            v["correlationID"].as_str().unwrap().to_owned()
        }
        other => panic!("{other:?}"),
    }
}

fn reply_to(r: &mut Requests, v: &Value) -> Option<Vec<Effect>> {
    let text = v.to_string();
    r.reply(T, &Message::parse(text.as_bytes()).unwrap(), None)
}

fn to_consumer(effects: &[Effect]) -> Vec<(Consumer, Value)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ToConsumer(c, text) => Some((c.clone(), serde_json::from_str(text).unwrap())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_times_out_after_the_configured_time() {
    let mut r = router(10);
    forwarded(&r.request(Consumer::WebSocket(2), read("c"), None));
    assert!(
        tokio::time::timeout(Duration::from_millis(4_999), r.next_timeout())
            .await
            .is_err()
    );
    let effects = r.next_timeout().await.unwrap();
    let replies = to_consumer(&effects);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0, Consumer::WebSocket(2));
    assert_eq!(
        (
            replies[0].1["status"].as_str(),
            replies[0].1["correlationID"].as_str()
        ),
        (Some("504"), Some("c"))
    );
    assert_eq!(r.remembered_count(), 0);
    assert!(!r.has_timers());
}

#[tokio::test(start_paused = true)]
async fn an_answer_disarms_the_timeout() {
    let mut r = router(10);
    let route = forwarded(&r.request(Consumer::WebSocket(2), read("c"), None));
    let reply = json!({"thingID": T, "messageID": "r", "messageType": "propertyReading", "name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z", "correlationID": route});
    let effects = reply_to(&mut r, &reply).unwrap();
    assert_eq!(to_consumer(&effects)[0].1["correlationID"], "c");
    assert!(!r.has_timers());
    // A second answer to the same request goes nowhere.
    assert!(reply_to(&mut r, &reply).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_cancel_times_out_but_the_invocation_stays() {
    let mut r = router(10);
    let invoke = message(
        json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv"}),
    );
    let route = forwarded(&r.request(Consumer::WebSocket(2), invoke, None));
    let pending = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "pending", "correlationID": route});
    reply_to(&mut r, &pending).unwrap();
    let cancel = message(
        json!({"thingID": T, "messageID": "k", "messageType": "cancelAction", "action": "a", "correlationID": "inv"}),
    );
    assert_eq!(
        forwarded(&r.request(Consumer::WebSocket(2), cancel, None)),
        route
    );
    let effects = r.next_timeout().await.unwrap();
    let replies = to_consumer(&effects);
    assert_eq!(
        (
            replies[0].1["status"].as_str(),
            replies[0].1["correlationID"].as_str()
        ),
        (Some("504"), Some("inv"))
    );
    assert_eq!(
        r.pending_count(),
        1,
        "the invocation itself is still running"
    );
}

fn invoke(r: &mut Requests, correlation: &str) -> String {
    let invoke = message(
        json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": correlation}),
    );
    forwarded(&r.request(Consumer::WebSocket(2), invoke, None))
}

/// Whether the router still waits for the agent on this route.
fn waits(r: &Requests, route: &str) -> bool {
    r.timer_keys.contains_key(&Timer::Reply(route.to_owned()))
}

fn action_status(route: &str, status: &str) -> Value {
    json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": status, "output": status, "correlationID": route})
}

fn query(r: &mut Requests, correlation: &str) -> Value {
    let q = message(
        json!({"thingID": T, "messageID": "q", "messageType": "queryAction", "action": "a", "correlationID": correlation}),
    );
    to_consumer(&r.request(Consumer::WebSocket(2), q, None))
        .remove(0)
        .1
}

#[tokio::test(start_paused = true)]
async fn an_invocation_refused_with_an_error_gets_that_error_once() {
    let mut r = router(10);
    let route = invoke(&mut r, "inv");
    let refusal = json!({"thingID": T, "messageID": "e", "messageType": "error", "type": "about:blank", "title": "Busy", "status": "409", "detail": "busy", "instance": "urn:x", "correlationID": route});
    let effects = reply_to(&mut r, &refusal).unwrap();
    assert_eq!(to_consumer(&effects)[0].1["status"], "409");
    assert!(!waits(&r, &route), "no 504 later");
    assert_eq!(query(&mut r, "inv")["status"], "409", "queried, the error");
}

#[tokio::test(start_paused = true)]
async fn each_status_gives_a_long_action_as_long_again() {
    let mut r = router(10).with_action_liveness(Duration::from_secs(60));
    let route = invoke(&mut r, "inv");
    for status in ["pending", "running", "running"] {
        assert!(
            tokio::time::timeout(Duration::from_secs(59), r.next_timeout())
                .await
                .is_err(),
            "no timeout before {status}"
        );
        reply_to(&mut r, &action_status(&route, status)).unwrap();
    }
    tokio::time::advance(Duration::from_secs(59)).await;
    let done = reply_to(&mut r, &action_status(&route, "completed")).unwrap();
    assert_eq!(to_consumer(&done)[0].1["status"], "completed");
    assert!(!waits(&r, &route));
}

#[tokio::test(start_paused = true)]
async fn a_silent_agent_gets_a_504_and_its_late_answer_still_arrives() {
    let mut r = router(10).with_action_liveness(Duration::from_secs(60));
    let route = invoke(&mut r, "inv");
    let timeout = to_consumer(&r.next_timeout().await.unwrap());
    assert_eq!(timeout[0].1["status"], "504");
    assert!(timeout[0].1["detail"]
        .as_str()
        .unwrap()
        .contains("action_liveness_ms"));
    assert_eq!(r.pending_count(), 0, "no longer counted as waiting");
    let late = reply_to(&mut r, &action_status(&route, "completed")).unwrap();
    assert_eq!(to_consumer(&late)[0].1["correlationID"], "inv");
    assert!(late
        .iter()
        .any(|e| matches!(e, Effect::Publish(p) if p.topic == "lmos/urn:t/actions/a/status/inv")));
    assert_eq!(query(&mut r, "inv")["status"], "completed");
    assert!(!waits(&r, &route));
}

#[tokio::test(start_paused = true)]
async fn a_finished_invocation_is_kept_for_its_retention() {
    let mut r = router(10).with_invocation_limits(Duration::from_secs(600), 10);
    let route = invoke(&mut r, "inv");
    reply_to(&mut r, &action_status(&route, "completed")).unwrap();
    tokio::time::advance(Duration::from_secs(599)).await;
    assert_eq!(query(&mut r, "inv")["status"], "completed");
    let forgotten = r.next_timeout().await.unwrap();
    assert!(forgotten.is_empty(), "forgotten quietly: {forgotten:?}");
    assert_eq!(query(&mut r, "inv")["status"], "404");
    assert_eq!(r.remembered_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn past_the_running_cap_an_invocation_is_refused_until_one_ends() {
    let mut r = router(10).with_invocation_limits(Duration::from_secs(600), 2);
    let first = invoke(&mut r, "a");
    invoke(&mut r, "b");
    let third = message(
        json!({"thingID": T, "messageID": "c", "messageType": "invokeAction", "action": "a"}),
    );
    let refused = to_consumer(&r.request(Consumer::WebSocket(2), third.clone(), None));
    assert_eq!(refused[0].1["status"], "429");
    assert!(refused[0].1["detail"]
        .as_str()
        .unwrap()
        .contains("max_running_invocations"));
    reply_to(&mut r, &action_status(&first, "completed")).unwrap();
    forwarded(&r.request(Consumer::WebSocket(2), third, None));
}

#[tokio::test(start_paused = true)]
async fn an_action_may_have_a_liveness_of_its_own() {
    let overrides = HashMap::from([(format!("{T}#a"), Duration::from_secs(1200))]);
    let mut r = router(10)
        .with_action_liveness(Duration::from_secs(60))
        .with_liveness_overrides(overrides);
    let route = invoke(&mut r, "inv");
    assert!(
        tokio::time::timeout(Duration::from_secs(1199), r.next_timeout())
            .await
            .is_err(),
        "configured per action"
    );
    reply_to(&mut r, &action_status(&route, "running")).unwrap();
    tokio::time::advance(Duration::from_secs(1199)).await;
    assert!(waits(&r, &route), "each status gives it as long again");
    // From its TD, when configuration says nothing of it.
    let mut r = router(10).with_action_liveness(Duration::from_secs(60));
    let invoke = message(
        json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a"}),
    );
    forwarded(&r.request(
        Consumer::WebSocket(2),
        invoke,
        Some(Duration::from_secs(300)),
    ));
    let timeout = tokio::time::timeout(Duration::from_secs(299), r.next_timeout()).await;
    assert!(timeout.is_err());
}

#[tokio::test(start_paused = true)]
async fn statuses_name_where_the_invocation_is_kept() {
    let mut r = router(10);
    let route = invoke(&mut r, "inv 1");
    let status = reply_to(&mut r, &action_status(&route, "running")).unwrap();
    assert_eq!(
        to_consumer(&status)[0].1["href"],
        "/things/urn:t/actions/a/inv%201"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_cancel_is_relayed_and_the_invocation_goes_on() {
    let mut r = router(10);
    let route = invoke(&mut r, "inv");
    reply_to(&mut r, &action_status(&route, "running")).unwrap();
    let cancel = message(
        json!({"thingID": T, "messageID": "k", "messageType": "cancelAction", "action": "a", "correlationID": "inv"}),
    );
    assert_eq!(
        forwarded(&r.request(Consumer::WebSocket(2), cancel, None)),
        route
    );
    let refusal = json!({"thingID": T, "messageID": "e", "messageType": "error", "type": "about:blank", "title": "Conflict", "status": "409", "detail": "cannot stop now", "instance": "urn:x", "correlationID": route});
    let answer = to_consumer(&reply_to(&mut r, &refusal).unwrap());
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(
        (
            answer[0].1["status"].as_str(),
            answer[0].1["correlationID"].as_str()
        ),
        (Some("409"), Some("inv"))
    );
    assert_eq!(r.pending_count(), 1, "still running");
    let done = to_consumer(&reply_to(&mut r, &action_status(&route, "completed")).unwrap());
    assert_eq!(done[0].1["status"], "completed");
}

// DelayQueue needs a runtime even when no timer fires.
#[tokio::test]
async fn colliding_correlation_ids_of_two_consumers_stay_apart() {
    let mut r = router(10);
    let a = forwarded(&r.request(Consumer::WebSocket(2), read("same"), None));
    let b = forwarded(&r.request(Consumer::WebSocket(3), read("same"), None));
    assert_ne!(a, b);
    let answer = |route: &str| {
        json!({"thingID": T, "messageID": "r", "messageType": "propertyReading", "name": "p", "value": route, "timestamp": "2025-01-20T19:00:00Z", "correlationID": route}).to_string()
    };
    let to_b = to_consumer(&reply_to(&mut r, &serde_json::from_str(&answer(&b)).unwrap()).unwrap());
    assert_eq!(to_b[0].0, Consumer::WebSocket(3));
    let to_a = to_consumer(&reply_to(&mut r, &serde_json::from_str(&answer(&a)).unwrap()).unwrap());
    assert_eq!(to_a[0].0, Consumer::WebSocket(2));
}

#[tokio::test]
async fn finished_invocations_are_remembered_up_to_the_limit() {
    let mut r = router(2);
    for i in 0..3 {
        let c = format!("inv-{i}");
        let invoke = message(
            json!({"thingID": T, "messageID": c, "messageType": "invokeAction", "action": "a", "correlationID": c}),
        );
        let route = forwarded(&r.request(Consumer::WebSocket(2), invoke, None));
        let done = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "completed", "correlationID": route});
        reply_to(&mut r, &done).unwrap();
    }
    assert_eq!(r.remembered_count(), 2);
    let query = |c: &str| {
        message(
            json!({"thingID": T, "messageID": "q", "messageType": "queryAction", "action": "a", "correlationID": c}),
        )
    };
    let oldest = to_consumer(&r.request(Consumer::WebSocket(2), query("inv-0"), None));
    assert_eq!(oldest[0].1["status"], "404");
    let newest = to_consumer(&r.request(Consumer::WebSocket(2), query("inv-2"), None));
    assert_eq!(newest[0].1["status"], "completed");
}

#[tokio::test]
async fn a_thing_can_have_one_agent() {
    let mut r = router(10);
    let refused = r.claim(9, &["urn:other".into(), T.into()]);
    assert!(matches!(refused, Err(ClaimError::AlreadyHosted(t)) if t == T));
    assert!(!r.is_hosted_by("urn:other", 9), "all or nothing");
    assert!(r.mqtt_presence(T, br#"{"status":"online"}"#).is_empty());
    assert!(
        r.is_hosted_by(T, 1),
        "a connected WebSocket agent keeps its Thing"
    );
}

#[tokio::test(start_paused = true)]
async fn when_its_agent_leaves_waiting_requests_get_503_and_running_invocations_fail() {
    let mut r = router(10);
    forwarded(&r.request(Consumer::WebSocket(2), read("r1"), None));
    let route = invoke(&mut r, "inv");
    let effects = r.connection_gone(1);
    assert!(effects.iter().any(
        |e| matches!(e, Effect::Unsubscribe(f) if *f == Topics::new("lmos").unwrap().agent_requests_filter(T))
    ));
    let offline = effects.iter().find_map(|e| match e {
        Effect::Publish(p) if p.topic == "lmos/urn:t/agent/status" => Some(p),
        _ => None,
    });
    let offline = offline.expect("the agent's presence goes offline");
    assert!(offline.retain);
    let presence: Value = serde_json::from_slice(&offline.payload).unwrap();
    assert_eq!(presence["status"], "offline");
    let told = to_consumer(&effects);
    let answer = |c: &str| {
        told.iter()
            .find(|(_, v)| v["correlationID"] == c)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{c} answered: {told:?}"))
    };
    assert_eq!(answer("r1")["status"], "503");
    assert_eq!(answer("inv")["messageType"], "actionStatus");
    assert_eq!(answer("inv")["status"], "failed");
    assert_eq!(query(&mut r, "inv")["status"], "failed");
    assert!(!r.has_host(T) && !waits(&r, &route));
}

#[tokio::test(start_paused = true)]
async fn an_mqtt_agent_hosts_its_thing_from_online_until_offline() {
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10);
    assert!(!r.has_host(T));
    assert!(r.mqtt_presence(T, br#"{"status":"online"}"#).is_empty());
    assert_eq!(r.hosts().collect::<Vec<_>>(), [(T, metrics::MQTT)]);
    let sent = r.request(Consumer::WebSocket(2), read("r1"), None);
    match sent.as_slice() {
        [Effect::Publish(p)] => assert_eq!(p.topic, "lmos/urn:t/agent/requests/readProperty"),
        other => panic!("{other:?}"),
    }
    let gone = to_consumer(&r.mqtt_presence(T, br#"{"status":"offline"}"#));
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(
        (
            gone[0].1["correlationID"].as_str(),
            gone[0].1["status"].as_str()
        ),
        (Some("r1"), Some("503"))
    );
    assert!(!r.has_host(T));
    assert!(
        r.mqtt_presence(T, b"not json").is_empty(),
        "nothing to fail"
    );
}
