//! Stream credit through the router: what the consumer and the agent get.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

const T: &str = "urn:t";

fn router(hold: usize) -> Requests {
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10)
        .with_stream_hold_bytes(hold, 64 << 20);
    r.claim(1, &[T.to_owned()]).unwrap();
    r
}

fn send(r: &mut Requests, v: Value) -> Vec<Effect> {
    r.request(
        Consumer::WebSocket(2),
        Message::from_value(v).unwrap(),
        None,
    )
}

/// Invokes `a` as `inv` with `stream`; the route it reaches agent 1 under.
fn invoke(r: &mut Requests, stream: Value) -> String {
    let invoke = json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv", "stream": stream});
    match &send(r, invoke)[..] {
        [Effect::ToAgent(1, text)] => {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(v["stream"], stream, "the agent learns the credit");
            v["correlationID"].as_str().unwrap().to_owned()
        }
        other => panic!("{other:?}"),
    }
}

fn status(route: &str, status: &str, stream: Option<Value>) -> Message {
    let mut v = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": status, "correlationID": route});
    if let Some(s) = stream {
        v["stream"] = s;
    }
    Message::from_value(v).unwrap()
}

fn chunk(route: &str, seq: u64) -> Message {
    status(
        route,
        "running",
        Some(json!({"seq": seq, "data": format!("c{seq}")})),
    )
}

/// What the consumer got: each message's `stream.seq`, or its status
/// (`completed`, an error's `429`).
fn to_consumer(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ToConsumer(Consumer::WebSocket(2), text) => {
                let v: Value = serde_json::from_str(text).unwrap();
                assert_eq!(v["correlationID"], "inv");
                Some(match v["stream"]["seq"].as_u64() {
                    Some(seq) => format!("#{seq}"),
                    None => v["status"].as_str().unwrap_or_default().to_owned(),
                })
            }
            _ => None,
        })
        .collect()
}

fn to_agent(effects: &[Effect]) -> Vec<Value> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ToAgent(1, text) => Some(serde_json::from_str(text).unwrap()),
            _ => None,
        })
        .collect()
}

fn grant(n: Value) -> Value {
    json!({"thingID": T, "messageID": "g", "messageType": "actionInput", "action": "a", "correlationID": "inv", "credit": n})
}

#[tokio::test]
async fn a_consumer_granting_ten_chunks_gets_ten_until_it_grants_more() {
    let mut r = router(1 << 20);
    let route = invoke(&mut r, json!({"credit": 10}));
    let mut got = Vec::new();
    for seq in 0..25 {
        got.extend(to_consumer(&r.reply(T, &chunk(&route, seq), None).unwrap()));
    }
    let end = status(&route, "completed", Some(json!({"seq": 25, "end": true})));
    got.extend(to_consumer(&r.reply(T, &end, None).unwrap()));
    assert_eq!(got, (0..10).map(|s| format!("#{s}")).collect::<Vec<_>>());

    let effects = send(&mut r, grant(json!(10)));
    assert_eq!(
        to_consumer(&effects),
        (10..20).map(|s| format!("#{s}")).collect::<Vec<_>>()
    );
    assert!(to_agent(&effects).is_empty(), "the invocation has ended");
    let effects = send(&mut r, grant(json!(100)));
    let mut rest: Vec<String> = (20..25).map(|s| format!("#{s}")).collect();
    rest.push("#25".into());
    assert_eq!(
        to_consumer(&effects),
        rest,
        "the end marker with `completed`"
    );
}

#[tokio::test]
async fn a_grant_reaches_the_agent_while_the_stream_runs() {
    let mut r = router(1 << 20);
    let route = invoke(&mut r, json!({"credit": 0}));
    assert!(to_consumer(&r.reply(T, &chunk(&route, 0), None).unwrap()).is_empty());
    let effects = send(&mut r, grant(json!(5)));
    assert_eq!(to_consumer(&effects), ["#0"]);
    let forwarded = to_agent(&effects);
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0]["credit"], 5);
    assert_eq!(forwarded[0]["correlationID"], route.as_str());
}

#[tokio::test]
async fn an_agent_past_the_hold_budget_fails_the_stream_and_is_asked_to_cancel() {
    let mut r = router(2_000);
    let route = invoke(&mut r, json!({"credit": 1}));
    let mut got = Vec::new();
    let mut cancels = Vec::new();
    for seq in 0..40 {
        let effects = r.reply(T, &chunk(&route, seq), None).unwrap();
        got.extend(to_consumer(&effects));
        cancels.extend(to_agent(&effects));
    }
    assert_eq!(got, ["#0", "429"], "one chunk, then why the stream failed");
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0]["messageType"], "cancelAction");
    assert_eq!(cancels[0]["correlationID"], route.as_str());
    let cancelled = status(&route, "cancelled", None);
    assert!(to_consumer(&r.reply(T, &cancelled, None).unwrap()).is_empty());
    assert!(to_consumer(&send(&mut r, grant(json!(100)))).is_empty());
}

#[tokio::test]
async fn bad_credit_is_refused_before_anything_is_forwarded() {
    let mut r = router(1 << 20);
    let invoke = json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv", "stream": {"credit": -1}});
    assert_eq!(to_consumer(&send(&mut r, invoke)), ["400"]);
    // Without credit, a grant names nothing to grant.
    let route = invoke_plain(&mut r);
    assert_eq!(to_consumer(&send(&mut r, grant(json!(3)))), ["400"]);
    assert_eq!(
        to_consumer(&r.reply(T, &chunk(&route, 0), None).unwrap()),
        ["#0"],
        "`stream: true` streams as before"
    );
    let both = json!({"thingID": T, "messageID": "g", "messageType": "actionInput", "action": "a", "correlationID": "inv", "credit": 1, "stream": {"seq": 0, "data": "x"}});
    assert_eq!(to_consumer(&send(&mut r, both)), ["400"]);
    assert_eq!(to_consumer(&send(&mut r, grant(json!("many")))), ["400"]);
}

fn invoke_plain(r: &mut Requests) -> String {
    invoke(r, json!(true))
}
