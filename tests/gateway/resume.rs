//! Resume after a reconnect: a WebSocket consumer that subscribes with the
//! last message ID it saw (`lastMessageID`) or, in the Kotlin dialect, the
//! last event's time (`lastEvent`) first gets what it missed from the
//! gateway's history, in order, then the live stream, with no duplicates;
//! a history that does not reach back far enough says so (`history-gap`).

use lmos_testkit as common;

use common::{event, lmos, message_ids, test_config, wait_for_stats, TestSidecar};
use serde_json::{json, Value};

const THING: &str = "urn:uuid:7a1d3a7a-4f97-4e6b-b45f-f3c2e1c84c77";
const GAP: &str = "https://eclipse.dev/lmos/protocol/v1/errors#history-gap";

/// Waits until no WebSocket connection is left and the history holds
/// `events` events.
async fn gone_and_held(sidecar: &TestSidecar, events: usize) {
    wait_for_stats(sidecar, |s| {
        s.connections == 0 && s.subscriptions == 0 && s.history.events == events
    })
    .await;
}

#[tokio::test]
async fn a_consumer_resumes_after_missing_100_events_and_gets_exactly_those() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.mqtt("resume-agent").await;

    let mut consumer = sidecar.ws().await;
    let subscribe = json!({"event": "tick", "correlationID": "ticks"});
    consumer
        .send(lmos(THING, "subscribeEvent", subscribe.clone()))
        .await;
    consumer.barrier().await;
    let mut seen = Vec::new();
    for i in 0..3 {
        seen.push(agent.publish_event(THING, "tick", json!({"i": i})).await);
    }
    assert_eq!(message_ids(&consumer.recv_events(3).await), seen);
    drop(consumer);
    gone_and_held(&sidecar, 3).await;

    // Away: the gateway keeps following the Thing for history.max_age_ms.
    let mut missed = Vec::new();
    for i in 3..103 {
        missed.push(agent.publish_event(THING, "tick", json!({"i": i})).await);
    }
    // Another event of the Thing, which the named subscription does not want.
    agent.publish_event(THING, "other", json!({"i": 0})).await;
    wait_for_stats(&sidecar, |s| s.history.events == 104).await;
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"").await;
    assert!(
        metrics
            .body
            .contains(r#"lmos_sidecar_resume_history{of="events"} 104"#),
        "{}",
        metrics.body
    );

    let mut consumer = sidecar.ws().await;
    let mut resume = subscribe.clone();
    resume["lastMessageID"] = json!(seen[2]);
    consumer.send(lmos(THING, "subscribeEvent", resume)).await;
    let replayed = consumer.recv_events(100).await;
    assert_eq!(message_ids(&replayed), missed);
    assert!(replayed
        .iter()
        .all(|e| e["correlationID"] == "ticks" && e["event"] == "tick"));
    assert_eq!(replayed[99]["data"], json!({"i": 102}));

    // Then the live stream, nothing twice.
    let live = agent.publish_event(THING, "tick", json!({"i": 103})).await;
    assert_eq!(message_ids(&consumer.recv_events(1).await), [live]);
    consumer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_history_that_does_not_reach_back_says_so_then_sends_what_it_holds() {
    let mut config = test_config();
    config.history.events_per_thing = 10;
    let sidecar = TestSidecar::start_with(config).await;
    let mut agent = sidecar.mqtt("resume-agent").await;

    let mut consumer = sidecar.ws().await;
    consumer.subscribe_all_events(THING, json!({})).await;
    let first = agent.publish_event(THING, "tick", json!({"i": 0})).await;
    consumer.recv_events(1).await;
    drop(consumer);
    gone_and_held(&sidecar, 1).await;

    let mut published = Vec::new();
    for i in 1..=20 {
        published.push(agent.publish_event(THING, "tick", json!({"i": i})).await);
    }
    wait_for_stats(&sidecar, |s| s.history.events == 10).await;

    let mut consumer = sidecar.ws().await;
    let resume = lmos(
        THING,
        "subscribeAllEvents",
        json!({"correlationID": "all", "lastMessageID": first}),
    );
    consumer.send(resume).await;
    let gap = consumer.recv().await;
    assert_eq!(gap["messageType"], "error", "{gap}");
    assert_eq!(gap["type"], GAP);
    assert_eq!(gap["status"].to_string().trim_matches('"'), "410");
    assert_eq!(gap["correlationID"], "all");
    assert_eq!(gap["thingID"], THING);
    // The ten it holds, then live.
    assert_eq!(
        message_ids(&consumer.recv_events(10).await),
        published[10..]
    );
    let live = agent.publish_event(THING, "tick", json!({"i": 21})).await;
    assert_eq!(message_ids(&consumer.recv_events(1).await), [live]);

    // An ID it never saw, on a Thing it never followed: a gap, nothing else.
    let other = "urn:uuid:never-followed";
    consumer
        .send(lmos(
            other,
            "subscribeEvent",
            json!({"event": "e", "correlationID": "o", "lastMessageID": "unknown"}),
        ))
        .await;
    let gap = consumer.recv().await;
    assert_eq!(
        (&gap["type"], &gap["thingID"]),
        (&json!(GAP), &json!(other))
    );
    consumer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn subscribe_all_events_resumes_every_event_of_the_thing_in_order() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.mqtt("resume-agent").await;
    let mut consumer = sidecar.ws().await;
    consumer.subscribe_all_events(THING, json!({})).await;
    let last = agent.publish_event(THING, "a", json!({"i": 0})).await;
    consumer.recv_events(1).await;
    drop(consumer);
    gone_and_held(&sidecar, 1).await;

    let mut missed = Vec::new();
    for i in 1..=6 {
        let name = if i % 2 == 0 { "a" } else { "b" };
        missed.push(agent.publish_event(THING, name, json!({"i": i})).await);
    }
    wait_for_stats(&sidecar, |s| s.history.events == 7).await;

    let mut consumer = sidecar.ws().await;
    let resume = lmos(THING, "subscribeAllEvents", json!({"lastMessageID": last}));
    let correlation = resume["messageID"].clone();
    consumer.send(resume).await;
    let replayed = consumer.recv_events(6).await;
    assert_eq!(message_ids(&replayed), missed);
    assert!(replayed.iter().all(|e| e["correlationID"] == correlation));
    consumer.assert_nothing_pending().await;

    // A resume member of the wrong type is refused, and nothing changes.
    consumer
        .send(lmos(
            THING,
            "subscribeAllEvents",
            json!({"correlationID": "bad", "lastMessageID": 7}),
        ))
        .await;
    let refused = consumer.recv().await;
    assert_eq!(
        (&refused["messageType"], &refused["correlationID"]),
        (&json!("error"), &json!("bad"))
    );
    assert!(refused["type"]
        .as_str()
        .unwrap()
        .ends_with("invalid-member"));
    sidecar.stop().await;
}

/// An `Instant` as Jackson writes it: decimal seconds.
fn seconds(rfc3339: &str) -> f64 {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).unwrap();
    t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9
}

/// An event stamped `second` seconds after 2030-01-01T00:00:00Z, later than
/// any test's "now".
fn stamped(i: usize) -> Value {
    let mut e = event(THING, "tick", json!({"i": i}));
    e["timestamp"] = json!(format!("2030-01-01T00:00:{i:02}.5Z"));
    e
}

#[tokio::test]
async fn a_kotlin_consumer_resumes_after_its_last_event() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.mqtt("resume-agent").await;
    let topic = format!("lmos/{THING}/events/tick");
    let subscribe = |last_event: f64| json!({"messageType": "subscribeevent", "thingId": THING, "messageId": uuid::Uuid::new_v4().to_string(), "event": "tick", "lastEvent": last_event});

    // As the Kotlin client does: "now" on its first subscription.
    let mut consumer = sidecar.ws().await;
    consumer
        .send(subscribe(chrono::Utc::now().timestamp() as f64))
        .await;
    let ack = consumer.recv().await;
    assert_eq!(ack["messageType"], "acknowledgement", "{ack}");
    for i in 0..3 {
        agent.publish(&topic, &stamped(i), false).await;
    }
    let seen = consumer.recv_events(3).await;
    let last = seen[2]["timestamp"].as_f64().expect("a Kotlin Instant");
    assert_eq!(last, seconds("2030-01-01T00:00:02.5Z"));
    drop(consumer);
    gone_and_held(&sidecar, 3).await;

    let mut missed = Vec::new();
    for i in 3..8 {
        let e = stamped(i);
        agent.publish(&topic, &e, false).await;
        missed.push(e["messageID"].as_str().unwrap().to_owned());
    }
    wait_for_stats(&sidecar, |s| s.history.events == 8).await;

    let mut consumer = sidecar.ws().await;
    let resume = subscribe(last);
    consumer.send(resume.clone()).await;
    // The acknowledgement first (the client listens only after it), then
    // exactly the five it missed, in its dialect, then live.
    let ack = consumer.recv().await;
    assert_eq!(
        (&ack["messageType"], &ack["correlationId"]),
        (&json!("acknowledgement"), &resume["messageId"])
    );
    let replayed = consumer.recv_events(5).await;
    assert_eq!(message_ids(&replayed), missed);
    assert!(replayed
        .iter()
        .all(|e| e["correlationId"] == resume["messageId"] && e["timestamp"].is_number()));
    let live = stamped(8);
    agent.publish(&topic, &live, false).await;
    assert_eq!(
        message_ids(&consumer.recv_events(1).await),
        [live["messageID"].as_str().unwrap()]
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn with_the_history_off_a_resume_is_a_gap_and_the_thing_is_not_followed() {
    let mut config = test_config();
    config.history.events_per_thing = 0;
    let sidecar = TestSidecar::start_with(config).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "tick", "correlationID": "t", "lastMessageID": "x"}),
        ))
        .await;
    let gap = consumer.recv().await;
    assert_eq!(
        (&gap["type"], &gap["correlationID"]),
        (&json!(GAP), &json!("t"))
    );
    drop(consumer);
    gone_and_held(&sidecar, 0).await;
    wait_for_stats(&sidecar, |s| s.history.things == 0).await;
    sidecar.stop().await;
}
