//! Per-principal quotas in the router: one principal's running invocations
//! and waiting requests, over all its consumers, leave the others theirs.

use super::*;
use crate::config::QuotasConfig;
use serde_json::json;

/// Bob's agent (connection 1) hosts `urn:bob`, Alice's (connection 2)
/// `urn:alice`; Bob consumes on connections 3 and 4 and over MQTT, Alice on
/// connection 5. Quotas: 2 invocations running, 3 property requests waiting.
fn router() -> Requests {
    let quotas = QuotasConfig {
        running_invocations: 2,
        pending_requests: 3,
        ..QuotasConfig::default()
    };
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10)
        .with_action_liveness(Duration::from_secs(60))
        .with_quotas(Quotas::new(&quotas, true));
    r.claim(1, &["urn:bob".to_owned()]).unwrap();
    r.claim(2, &["urn:alice".to_owned()]).unwrap();
    for (conn, who) in [(3, "bob"), (4, "bob"), (5, "alice")] {
        r.register(conn, who);
    }
    r
}

fn bob_mqtt() -> Consumer {
    Consumer::Mqtt {
        topic: "bob/replies".into(),
        correlation_data: None,
        principal: Some("bob".into()),
    }
}

fn request(r: &mut Requests, consumer: Consumer, thing: &str, body: Value) -> Vec<Effect> {
    let mut v = json!({"thingID": thing, "messageID": "m", "correlationID": format!("c{}", r.routes.len())});
    v.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    r.request(consumer, Message::from_value(v).unwrap(), None)
}

fn invoke(r: &mut Requests, consumer: Consumer, thing: &str) -> Vec<Effect> {
    request(
        r,
        consumer,
        thing,
        json!({"messageType": "invokeAction", "action": "a"}),
    )
}

fn read(r: &mut Requests, consumer: Consumer, thing: &str) -> Vec<Effect> {
    request(
        r,
        consumer,
        thing,
        json!({"messageType": "readProperty", "name": "p"}),
    )
}

/// The route of a forwarded request, or the refusal's status and detail.
fn outcome(effects: &[Effect]) -> Result<String, (String, String)> {
    match effects {
        [Effect::ToAgent(_, text)] => {
            let v: Value = serde_json::from_str(text).unwrap();
            Ok(v["correlationID"].as_str().unwrap().to_owned())
        }
        [Effect::ToConsumer(_, text)] => {
            let v: Value = serde_json::from_str(text).unwrap();
            Err((
                v["status"].as_str().unwrap().into(),
                v["detail"].as_str().unwrap().into(),
            ))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_principal_full_of_invocations_leaves_the_others_theirs() {
    let mut r = router();
    let first = outcome(&invoke(&mut r, Consumer::WebSocket(3), "urn:bob")).unwrap();
    // Another connection and MQTT count for the same principal.
    outcome(&invoke(&mut r, bob_mqtt(), "urn:bob")).unwrap();
    let (status, detail) = outcome(&invoke(&mut r, Consumer::WebSocket(4), "urn:bob")).unwrap_err();
    assert_eq!(status, "429");
    assert!(
        detail.starts_with("`bob` has 2 invocations running (quotas.running_invocations)"),
        "{detail}"
    );
    // Bob's property requests have their own quota.
    outcome(&read(&mut r, Consumer::WebSocket(3), "urn:bob")).unwrap();
    for _ in 0..2 {
        outcome(&invoke(&mut r, Consumer::WebSocket(5), "urn:alice")).unwrap();
    }
    assert_eq!(r.usage("bob"), (2, 1));
    assert_eq!(r.usage("alice"), (2, 0));
    // One of Bob's ends: he may invoke again.
    let done = json!({"thingID": "urn:bob", "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "completed", "correlationID": first});
    r.reply("urn:bob", &Message::from_value(done).unwrap(), None)
        .unwrap();
    outcome(&invoke(&mut r, Consumer::WebSocket(4), "urn:bob")).unwrap();
}

#[tokio::test(start_paused = true)]
async fn waiting_property_requests_are_counted_until_answered_or_timed_out() {
    let mut r = router();
    for consumer in [Consumer::WebSocket(3), Consumer::WebSocket(4), bob_mqtt()] {
        outcome(&read(&mut r, consumer, "urn:bob")).unwrap();
    }
    let (status, detail) = outcome(&read(&mut r, Consumer::WebSocket(3), "urn:alice")).unwrap_err();
    assert_eq!(status, "429", "Bob's quota, whoever's Thing he asks");
    assert!(detail.contains("(quotas.pending_requests)"), "{detail}");
    outcome(&read(&mut r, Consumer::WebSocket(5), "urn:alice")).unwrap();
    // A timeout frees them (Alice's too), and so does a consumer leaving.
    while r.usage("bob").1 + r.usage("alice").1 > 0 {
        r.next_timeout().await.unwrap();
    }
    outcome(&read(&mut r, Consumer::WebSocket(3), "urn:bob")).unwrap();
    r.connection_gone(3);
    assert_eq!(r.usage("bob"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_silent_agent_frees_the_quota_when_its_invocations_go_quiet() {
    let mut r = router();
    for _ in 0..2 {
        outcome(&invoke(&mut r, Consumer::WebSocket(3), "urn:bob")).unwrap();
    }
    assert!(outcome(&invoke(&mut r, Consumer::WebSocket(3), "urn:bob")).is_err());
    // Past the liveness, they are remembered, no longer running.
    r.next_timeout().await.unwrap();
    r.next_timeout().await.unwrap();
    assert_eq!(r.usage("bob"), (0, 0));
    outcome(&invoke(&mut r, Consumer::WebSocket(3), "urn:bob")).unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_principals_anonymous_is_everyone_and_has_no_quota() {
    let quotas = QuotasConfig {
        running_invocations: 1,
        ..QuotasConfig::default()
    };
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10)
        .with_quotas(Quotas::new(&quotas, false));
    r.claim(1, &["urn:bob".to_owned()]).unwrap();
    let anonymous = || Consumer::Mqtt {
        topic: "r".into(),
        correlation_data: None,
        principal: None,
    };
    for _ in 0..3 {
        outcome(&invoke(&mut r, anonymous(), "urn:bob")).unwrap();
    }
    assert_eq!(r.usage("anonymous"), (3, 0));
}
