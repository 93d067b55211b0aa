use super::*;
use crate::config::QuotasConfig;
use crate::telemetry::metrics::Metrics;

fn budget(per_session: u64, per_principal: u64, total: u64) -> (Budget, Owners) {
    let owners = Owners::default();
    let quotas = QuotasConfig {
        queued_bytes: per_principal,
        ..QuotasConfig::default()
    };
    let limits = Limits {
        per_session,
        total,
        quotas: Quotas::new(&quotas, true),
        owners: owners.clone(),
        metrics: Metrics::default(),
    };
    (Budget::new(limits), owners)
}

fn at(idx: usize, segment: u64, offset: u64) -> Position {
    (idx, (segment, offset))
}

#[test]
fn a_session_past_its_bound_drops_its_newest_and_a_delivery_frees_only_what_was_written() {
    let (mut b, owners) = budget(300, 10_000, 10_000);
    owners.set("c", &Arc::from("p"));
    assert!(b.admit("c", at(0, 0, 0), 100));
    assert!(b.admit("c", at(0, 0, 1), 100));
    assert!(b.admit("c", at(0, 0, 2), 100));
    assert!(!b.admit("c", at(0, 0, 3), 100), "past 300");
    assert!(!b.admit("c", at(0, 0, 4), 100));
    assert_eq!(b.total(), 300);
    // Delivered in order: the written ones free theirs, the others nothing.
    b.delivered("c", at(0, 0, 0));
    assert_eq!(b.total(), 200);
    // Room again: the next one is written.
    assert!(b.admit("c", at(0, 0, 5), 100));
    for offset in 1..6 {
        b.delivered("c", at(0, 0, offset));
    }
    assert_eq!(b.total(), 0, "back to nothing, never below");
    b.delivered("c", at(0, 0, 5));
    assert_eq!(b.total(), 0);
}

#[test]
fn a_principal_is_bounded_over_its_sessions_and_another_is_not_affected() {
    let (mut b, owners) = budget(1_000, 250, 10_000);
    owners.set("a1", &Arc::from("alice"));
    owners.set("a2", &Arc::from("alice"));
    owners.set("b1", &Arc::from("bob"));
    assert!(b.admit("a1", at(0, 0, 0), 100));
    assert!(b.admit("a2", at(0, 0, 0), 100));
    assert!(!b.admit("a1", at(0, 0, 1), 100), "alice's 250 reached");
    assert!(b.admit("b1", at(0, 0, 1), 100), "bob has his own");
    // An ended session gives its share back.
    b.ended("a2");
    assert!(b.admit("a1", at(0, 0, 2), 100));
    assert_eq!(b.total(), 300);
}

#[test]
fn all_sessions_together_are_bounded() {
    let (mut b, _) = budget(1_000, 0, 250);
    assert!(b.admit("x", at(0, 0, 0), 100));
    assert!(b.admit("y", at(0, 0, 0), 100));
    assert!(!b.admit("z", at(0, 0, 0), 100));
}

#[test]
fn a_dropped_segment_and_a_released_filter_take_their_bytes() {
    let (mut b, _) = budget(10_000, 0, 10_000);
    assert!(b.admit("c", at(0, 0, 0), 100));
    assert!(b.admit("c", at(0, 1, 0), 50));
    assert!(b.admit("c", at(1, 0, 0), 30));
    assert!(b.admit("d", at(1, 0, 0), 30));
    b.dropped("c", 0, 0);
    assert_eq!(b.total(), 110);
    let mut had = b.released(1);
    had.sort();
    assert_eq!(had, vec![Box::from("c"), Box::from("d")]);
    assert_eq!(b.total(), 50);
    assert!(b.released(1).is_empty(), "nothing left there");
    b.ended("c");
    assert_eq!(b.total(), 0);
}

#[test]
fn restored_entries_count_whatever_the_bounds_on_their_owners_share() {
    let (mut b, owners) = budget(100, 150, 10_000);
    owners.set("old", &Arc::from("p"));
    b.restored("old", at(0, 0, 0), 120);
    assert_eq!(b.total(), 120);
    // Its 120 are p's: p may not take 100 more.
    owners.set("new", &Arc::from("p"));
    assert!(!b.admit("new", at(0, 0, 1), 100));
    b.delivered("old", at(0, 0, 0));
    assert!(b.admit("new", at(0, 0, 2), 100));
}

#[test]
fn after_a_restart_others_publications_among_a_sessions_own_are_its_gaps() {
    use crate::broker::kept::restoring::Restoring;
    use bytes::Bytes;
    use rumqttd::{RestoredPublication, RestoredSession};
    let (mut b, _) = budget(10_000, 0, 10_000);
    let key = |k: &str| Bytes::from(k.to_owned());
    let publication = |k: &str| RestoredPublication {
        key: key(k),
        filter: "f".into(),
        packet: Bytes::from_static(&[0; 7]),
    };
    let session = |id: &str, keys: &[&str]| RestoredSession {
        client_id: id.into(),
        subscriptions: Vec::new(),
        queued: keys.iter().map(|k| key(k)).collect(),
        received: Vec::new(),
        releasing: Vec::new(),
        sent: Vec::new(),
    };
    let sessions = [
        session("a", &["k1", "k3"]),
        session("b", &["k1", "k2", "k3", "k4"]),
    ];
    let publications: Vec<_> = ["k1", "k2", "k3", "k4"].map(publication).into();
    let mut restoring = Restoring::of(&sessions, &publications);
    for (offset, k) in ["k1", "k2", "k3", "k4"].into_iter().enumerate() {
        restoring.placed(&mut b, at(0, 0, offset as u64), &key(k));
    }
    restoring.settle(&mut b);
    // Each entry: client ID, separator, key (2), filter length, filter, packet.
    let cost = 1 + 1 + 2 + (2 + 1 + 7);
    assert_eq!(b.total(), 6 * cost);
    // The router delivers `a` all four; k2 and k4 are b's.
    let mine: Vec<bool> = (0..4).map(|o| b.delivered("a", at(0, 0, o))).collect();
    assert_eq!(mine, [true, false, true, false]);
    assert_eq!(b.total(), 4 * cost);
    for o in 0..4 {
        assert!(b.delivered("b", at(0, 0, o)));
    }
    assert_eq!(b.total(), 0);
}
