//! Invocation records across a restart of the router, on a real store.

use super::*;
use crate::store::{Store, StoreConfig};
use serde_json::json;
use uuid::Uuid;

const T: &str = "urn:t";

fn open(dir: &std::path::Path) -> Store {
    Store::open(&StoreConfig {
        dir: dir.to_path_buf(),
        ..StoreConfig::default()
    })
    .unwrap()
}

fn router(store: &Store) -> Requests {
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10)
        .with_invocation_limits(Duration::from_secs(60), 100)
        .with_store(store)
        .unwrap();
    r.claim(1, &[T.to_owned()]).unwrap();
    r
}

fn message(v: Value) -> Message {
    Message::from_value(v).unwrap()
}

fn invoke(r: &mut Requests, consumer: Consumer, correlation: &str) -> String {
    let invoke = message(
        json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": correlation}),
    );
    let effects = r.request(consumer, invoke, None);
    let Some(Effect::ToAgent(1, text)) = effects.first() else {
        panic!("{effects:?}");
    };
    let v: Value = serde_json::from_str(text).unwrap();
    v["correlationID"].as_str().unwrap().to_owned()
}

fn status(r: &mut Requests, route: &str, status: &str) {
    let v = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": status, "output": status, "correlationID": route});
    let text = v.to_string();
    r.reply(T, &Message::parse(text.as_bytes()).unwrap(), None)
        .unwrap();
}

fn query(r: &mut Requests, consumer: Consumer, correlation: &str) -> Value {
    let q = message(
        json!({"thingID": T, "messageID": "q", "messageType": "queryAction", "action": "a", "correlationID": correlation}),
    );
    match r.request(consumer, q, None).as_slice() {
        [Effect::ToConsumer(_, text)] => serde_json::from_str(text).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn mqtt(topic: &str) -> Consumer {
    Consumer::Mqtt {
        topic: topic.into(),
        correlation_data: Some(Bytes::from_static(b"cd")),
        principal: None,
    }
}

#[tokio::test]
async fn records_come_back_for_their_principal_or_reply_topic_and_running_ones_failed() {
    let dir = std::env::temp_dir().join(format!("lmos-records-{}", Uuid::new_v4()));
    let store = open(&dir);
    let mut r = router(&store);
    r.register(2, "alice");
    let done = invoke(&mut r, Consumer::WebSocket(2), "done");
    status(&mut r, &done, "completed");
    let running = invoke(&mut r, Consumer::WebSocket(2), "running");
    status(&mut r, &running, "running");
    let by_mqtt = invoke(&mut r, mqtt("replies/x"), "m");
    status(&mut r, &by_mqtt, "completed");
    // Forgotten before the restart: not back after it.
    let cancelled = invoke(&mut r, Consumer::WebSocket(2), "gone");
    r.forget(&cancelled);
    store.barrier().durable().await.unwrap();
    store.close();
    drop((r, store));

    let store = open(&dir);
    let mut r = router(&store);
    r.register(7, "alice");
    r.register(8, "bob");
    let got = query(&mut r, Consumer::WebSocket(7), "done");
    assert_eq!(
        (got["status"].as_str(), got["output"].as_str()),
        (Some("completed"), Some("completed")),
        "{got}"
    );
    assert_eq!(got["correlationID"], "done");
    let got = query(&mut r, Consumer::WebSocket(7), "running");
    assert_eq!(got["status"], "failed", "{got}");
    assert!(got["output"]["error"]
        .as_str()
        .unwrap()
        .contains("restarted"));
    assert_eq!(
        query(&mut r, Consumer::WebSocket(8), "done")["status"],
        "404",
        "bob's is not alice's"
    );
    assert_eq!(
        query(&mut r, Consumer::WebSocket(7), "gone")["status"],
        "404"
    );
    assert_eq!(query(&mut r, mqtt("replies/x"), "m")["status"], "completed");
    assert_eq!(r.remembered_count(), 3);
    assert_eq!(r.usage("alice"), (0, 0), "none of them runs");
    // A restored record is no connection's: the numbers start again.
    assert_eq!(r.pending_for(&Consumer::WebSocket(2)), 0);
    assert!(r.connection_gone(2).is_empty());
    store.close();
    drop((r, store));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn retention_counts_across_the_restart_and_forgetting_deletes() {
    let dir = std::env::temp_dir().join(format!("lmos-records-{}", Uuid::new_v4()));
    let store = open(&dir);
    let mut r = router(&store);
    r.register(2, "alice");
    let done = invoke(&mut r, Consumer::WebSocket(2), "done");
    status(&mut r, &done, "completed");
    store.barrier().durable().await.unwrap();
    store.close();
    drop((r, store));

    // 61 s later by the wall clock: past the retention of 60 s.
    let store = open(&dir);
    let table = store.table(records::TABLE);
    let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10)
        .with_invocation_limits(Duration::from_secs(60), 100);
    let later = chrono::Utc::now().timestamp_millis() + 61_000;
    assert_eq!(r.restore(&table, later).unwrap(), (0, 0));
    store.barrier().durable().await.unwrap();
    assert!(table.load().unwrap().is_empty(), "deleted from the store");
    store.close();
    drop((r, table, store));
    std::fs::remove_dir_all(dir).unwrap();
}
