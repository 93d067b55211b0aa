use super::*;
use bytes::Bytes;

fn delivery(topic: &str, payload: &str) -> Delivery {
    Delivery {
        topic: Bytes::from(topic.to_owned()),
        payload: Bytes::from(payload.to_owned()),
        response: None,
        trace: None,
        publisher: None,
    }
}

fn monitor(tree_bytes: usize, recent_bytes: usize) -> Monitor {
    Monitor::new(MonitorLimits {
        tree_bytes,
        recent_bytes,
    })
}

#[test]
fn the_tree_keeps_the_latest_message_per_topic_and_marks_retained_ones() {
    let topics = Topics::new("lmos").unwrap();
    let m = monitor(10_000, 10_000);
    m.record(&topics, &delivery("lmos/t/properties/p", "1"), 1);
    m.record(&topics, &delivery("lmos/t/properties/p", "2"), 2);
    m.record(&topics, &delivery("lmos/t/actions/a/status/i", "{}"), 3);
    m.record(&topics, &delivery("lmos/t/values/properties/p", "2"), 4);
    let tree = m.tree(|_| true);
    assert_eq!(tree.len(), 3);
    let p = tree
        .iter()
        .find(|s| s.topic == "lmos/t/properties/p")
        .unwrap();
    assert_eq!((p.payload.as_str(), p.at, p.retained), ("2", 2, true));
    let v = tree.iter().find(|s| s.topic.contains("/values/")).unwrap();
    assert!(v.retained);
    let a = tree.iter().find(|s| s.topic.contains("/actions/")).unwrap();
    assert!(!a.retained);
    // An empty payload clears a retained message.
    m.record(&topics, &delivery("lmos/t/properties/p", ""), 5);
    assert_eq!(m.tree(|_| true).len(), 2);
}

#[test]
fn both_views_stay_within_their_bytes_and_drop_the_oldest() {
    let topics = Topics::new("lmos").unwrap();
    // Each message: "lmos/t/events/eN" (16 bytes) and 10 bytes of payload.
    let m = monitor(3 * (OVERHEAD + 26), 2 * (OVERHEAD + 26));
    for i in 0..10 {
        m.record(
            &topics,
            &delivery(&format!("lmos/t/events/e{i}"), "0123456789"),
            i,
        );
    }
    let tree = m.tree(|_| true);
    assert_eq!(tree.len(), 3);
    assert!(tree.iter().all(|s| s.at >= 7), "the oldest went first");
    let recent = m.recent("", 100, |_| true);
    assert_eq!(recent.len(), 2);
    assert_eq!(recent[0].at, 9, "newest first");
    // A message larger than a budget is not kept there.
    m.record(
        &topics,
        &delivery("lmos/t/events/big", &"x".repeat(1000)),
        11,
    );
    assert!(m
        .tree(|_| true)
        .iter()
        .all(|s| s.topic != "lmos/t/events/big"));
}

#[test]
fn search_and_visibility_filter_the_recent_messages() {
    let topics = Topics::new("lmos").unwrap();
    let m = monitor(10_000, 10_000);
    m.record(
        &topics,
        &delivery("lmos/a/events/e", r#"{"city":"Oslo"}"#),
        1,
    );
    m.record(
        &topics,
        &delivery("lmos/b/events/e", r#"{"city":"Oslo"}"#),
        2,
    );
    m.record(
        &topics,
        &delivery("lmos/a/events/e", r#"{"city":"Bergen"}"#),
        3,
    );
    let found = m.recent("oslo", 10, |t| t.starts_with("lmos/a/"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].at, 1);
    assert_eq!(m.recent("", 1, |_| true).len(), 1, "the limit holds");
    assert!(m.tree(|t| t.starts_with("lmos/b/")).len() == 1);
}
