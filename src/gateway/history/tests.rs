use super::*;
use serde_json::{json, Value};

const T: &str = "urn:t";

fn limits(events: usize, age_s: u64) -> HistoryLimits {
    HistoryLimits {
        events_per_thing: events,
        max_age: Duration::from_secs(age_s),
        max_bytes_per_thing: usize::MAX,
        max_bytes: usize::MAX,
    }
}

/// An event `id` named `name` stamped `second` seconds after 2025-01-20T19:00:00Z.
fn event(name: &str, id: &str, second: u32) -> Arc<Prepared> {
    let v = json!({"thingID": T, "messageID": id, "messageType": "event", "event": name, "data": 1, "timestamp": format!("2025-01-20T19:00:{second:02}Z")});
    Arc::new(Prepared::from_payload(v.to_string().as_bytes(), T).unwrap())
}

const BASE: i64 = 1_737_399_600_000_000;

fn ids(r: &Replay) -> Vec<String> {
    r.events
        .iter()
        .map(|(_, p)| p.message_id.clone().unwrap())
        .collect()
}

fn filled(h: &mut History, now: Instant, n: u32) {
    for i in 0..n {
        h.record(T, "e", event("e", &format!("m{i}"), i), now, 0);
    }
}

#[test]
fn resumes_after_the_last_seen_message_id() {
    let now = Instant::now();
    let mut h = History::new(limits(10, 60));
    assert!(h.follow(T));
    filled(&mut h, now, 5);
    let r = h.replay(
        T,
        &Anchor::MessageId("m1".into()),
        &Selector::AllEvents,
        now,
    );
    assert!(!r.gap);
    assert_eq!(ids(&r), ["m2", "m3", "m4"]);
    let r = h.replay(
        T,
        &Anchor::MessageId("m4".into()),
        &Selector::AllEvents,
        now,
    );
    assert!(!r.gap && r.events.is_empty());
}

#[test]
fn an_unknown_or_trimmed_id_is_a_gap_followed_by_all_that_is_kept() {
    let now = Instant::now();
    let mut h = History::new(limits(3, 60));
    h.follow(T);
    filled(&mut h, now, 5);
    let r = h.replay(
        T,
        &Anchor::MessageId("m0".into()),
        &Selector::AllEvents,
        now,
    );
    assert!(r.gap);
    assert_eq!(ids(&r), ["m2", "m3", "m4"]);
    let r = h.replay(
        "urn:never",
        &Anchor::MessageId("m0".into()),
        &Selector::AllEvents,
        now,
    );
    assert!(r.gap && r.events.is_empty());
}

#[test]
fn a_named_subscription_gets_only_its_event() {
    let now = Instant::now();
    let mut h = History::new(limits(10, 60));
    h.follow(T);
    h.record(T, "a", event("a", "m0", 0), now, 0);
    h.record(T, "b", event("b", "m1", 1), now, 0);
    h.record(T, "a", event("a", "m2", 2), now, 0);
    let r = h.replay(
        T,
        &Anchor::MessageId("m0".into()),
        &Selector::Event("a".into()),
        now,
    );
    assert_eq!(ids(&r), ["m2"]);
    assert_eq!(&*r.events[0].0, "a");
}

#[test]
fn resumes_by_time_and_says_when_the_time_is_before_what_is_covered() {
    let now = Instant::now();
    let mut h = History::new(limits(3, 60));
    h.follow(T);
    filled(&mut h, now, 3);
    let r = h.replay(T, &Anchor::Time(BASE), &Selector::AllEvents, now);
    assert!(!r.gap);
    assert_eq!(ids(&r), ["m1", "m2"]);
    // Before the history began: all it has, and no gap claimed.
    let r = h.replay(T, &Anchor::Time(BASE - 5), &Selector::AllEvents, now);
    assert!(!r.gap);
    assert_eq!(ids(&r), ["m0", "m1", "m2"]);
    // m0 and m1 trimmed: from m0's time on there is a hole.
    h.record(T, "e", event("e", "m3", 3), now, 0);
    h.record(T, "e", event("e", "m4", 4), now, 0);
    let r = h.replay(T, &Anchor::Time(BASE), &Selector::AllEvents, now);
    assert!(r.gap);
    assert_eq!(ids(&r), ["m2", "m3", "m4"]);
    let r = h.replay(
        T,
        &Anchor::Time(BASE + 1_000_000),
        &Selector::AllEvents,
        now,
    );
    assert!(!r.gap);
    assert_eq!(ids(&r), ["m2", "m3", "m4"]);
}

#[test]
fn old_events_are_trimmed_by_age() {
    let t0 = Instant::now();
    let mut h = History::new(limits(10, 60));
    h.follow(T);
    filled(&mut h, t0, 2);
    h.record(T, "e", event("e", "m2", 2), t0 + Duration::from_secs(30), 0);
    let later = t0 + Duration::from_secs(61);
    let r = h.replay(
        T,
        &Anchor::MessageId("m1".into()),
        &Selector::AllEvents,
        later,
    );
    assert!(r.gap);
    assert_eq!(ids(&r), ["m2"]);
    assert_eq!(h.stats().events, 1);
}

#[test]
fn a_thing_lingers_for_max_age_after_its_last_subscriber() {
    let t0 = Instant::now();
    let mut h = History::new(limits(10, 60));
    assert!(h.follow(T));
    assert!(!h.leave(T, t0));
    assert!(h.holds(T));
    assert_eq!(h.next_expiry(), Some(t0 + Duration::from_secs(60)));
    // Back within the minute: no new bus subscription, and the old
    // expiry no longer counts.
    assert!(!h.follow(T));
    assert!(h.expire(t0 + Duration::from_secs(61)).is_empty());
    assert!(h.holds(T));
    assert!(!h.leave(T, t0 + Duration::from_secs(70)));
    assert!(h.expire(t0 + Duration::from_secs(129)).is_empty());
    assert_eq!(h.expire(t0 + Duration::from_secs(130)), [T]);
    assert!(!h.holds(T));
    assert_eq!(h.next_expiry(), None);
}

#[test]
fn off_means_no_history_and_no_lingering() {
    let mut h = History::new(limits(0, 60));
    assert!(!h.is_on());
    assert!(h.follow(T));
    assert!(!h.holds(T));
    assert!(h.leave(T, Instant::now()));
}

#[test]
fn memory_is_counted_and_given_back() {
    let now = Instant::now();
    let mut h = History::new(limits(2, 60));
    h.follow(T);
    filled(&mut h, now, 1);
    let one = h.stats().bytes;
    assert!(one > 200, "{one}");
    filled(&mut h, now, 5);
    assert_eq!(h.stats().events, 2);
    assert!(h.stats().bytes < 3 * one);
}

#[test]
fn bytes_bound_each_thing_and_all_things() {
    let now = Instant::now();
    let one = {
        let mut h = History::new(limits(100, 60));
        h.follow(T);
        filled(&mut h, now, 1);
        h.stats().bytes
    };
    // Three events per Thing, five over all.
    let mut l = limits(100, 60);
    l.max_bytes_per_thing = 3 * one + one / 2;
    l.max_bytes = 5 * one + one / 2;
    let metrics = crate::telemetry::metrics::Metrics::new();
    let budget = Arc::new(Budget::new(&metrics, "history", "k", "e", l.max_bytes));
    let per_thing = metrics.budget_hit_counter("history_per_thing");
    let mut h = History::new(l).with_budget(budget.clone(), per_thing.clone());
    h.follow(T);
    filled(&mut h, now, 5);
    assert_eq!(h.stats().events, 3);
    assert_eq!(per_thing.get(), 2);
    let r = h.replay(
        T,
        &Anchor::MessageId("m0".into()),
        &Selector::AllEvents,
        now,
    );
    assert!(r.gap);
    assert_eq!(ids(&r), ["m2", "m3", "m4"]);
    // A second Thing's events push out the oldest of all: T's.
    h.follow("urn:u");
    for i in 0..3 {
        let v = json!({"thingID": "urn:u", "messageID": format!("u{i}"), "messageType": "event", "event": "e", "data": 1, "timestamp": "2025-01-20T19:00:00Z"});
        let p = Arc::new(Prepared::from_payload(v.to_string().as_bytes(), "urn:u").unwrap());
        h.record("urn:u", "e", p, now, 0);
    }
    assert_eq!(h.stats().events, 5);
    assert!(h.stats().bytes <= l.max_bytes);
    assert_eq!(budget.used(), h.stats().bytes);
    assert!(budget.recently_full());
    let r = h.replay(
        T,
        &Anchor::MessageId("m0".into()),
        &Selector::AllEvents,
        now,
    );
    assert_eq!(ids(&r), ["m3", "m4"]);
    // Gone with its Thing.
    h.leave(T, now);
    h.expire(now + Duration::from_secs(61));
    assert_eq!(budget.used(), h.stats().bytes);
    assert_eq!(h.stats().events, 3);
}

#[test]
fn times_convert_to_the_microsecond() {
    assert_eq!(micros_of_rfc3339("2025-01-20T19:00:00Z"), Some(BASE));
    assert_eq!(
        micros_of_rfc3339("2025-01-20T20:00:00.0000015+01:00[Europe/Paris]"),
        Some(BASE + 2)
    );
    let v: Value = serde_json::from_str("1737399600.123456789").unwrap();
    assert_eq!(micros_of_seconds(v.as_f64().unwrap()), Some(BASE + 123_457));
    assert_eq!(micros_of_seconds(f64::NAN), None);
}
