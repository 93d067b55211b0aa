use super::*;

impl Credit {
    /// As [`Credit::offer`], with room to spare sidecar-wide.
    fn offer_all(&mut self, copy: String, chunk: bool) -> Offer {
        self.offer(copy, chunk, usize::MAX)
    }
}

#[test]
fn the_sidecar_wide_room_fails_a_stream_within_its_own_budget() {
    let mut c = Credit::new(0, 1 << 20);
    assert_eq!(c.offer(chunk(0), true, 1_000), Offer::Held);
    assert_eq!(c.offer(chunk(1), true, 10), Offer::Overflow);
}

fn chunk(n: u32) -> String {
    format!("chunk {n}")
}

#[test]
fn a_consumer_granting_ten_gets_ten_until_it_grants_more() {
    let mut c = Credit::new(10, 1 << 20);
    let mut got = Vec::new();
    for n in 0..25 {
        if let Offer::Send(copies) = c.offer_all(chunk(n), true) {
            got.extend(copies);
        }
    }
    assert_eq!(got.len(), 10);
    assert_eq!(got[9], "chunk 9");
    let more = c.grant(10);
    assert_eq!(more.first().map(String::as_str), Some("chunk 10"));
    assert_eq!(more.len(), 10);
    assert_eq!(c.grant(100).len(), 5);
    assert!(c.is_drained());
    assert_eq!(c.held_bytes(), 0);
}

#[test]
fn statuses_wait_behind_held_chunks_and_pass_when_none_are_held() {
    let mut c = Credit::new(1, 1 << 20);
    assert_eq!(
        c.offer_all("progress".into(), false),
        Offer::Send(vec!["progress".into()])
    );
    assert_eq!(c.offer_all(chunk(0), true), Offer::Send(vec![chunk(0)]));
    assert_eq!(c.offer_all(chunk(1), true), Offer::Held);
    assert_eq!(c.offer_all("completed".into(), false), Offer::Held);
    assert_eq!(c.grant(1), vec![chunk(1), "completed".to_owned()]);
    assert!(c.is_drained());
}

#[test]
fn a_zero_grant_releases_only_what_is_not_a_chunk() {
    let mut c = Credit::new(0, 1 << 20);
    assert_eq!(c.offer_all(chunk(0), true), Offer::Held);
    assert_eq!(c.grant(0), Vec::<String>::new());
    assert_eq!(c.grant(1), vec![chunk(0)]);
}

#[test]
fn a_full_budget_fails_the_stream_once_and_drops_the_rest() {
    let one = chunk(0).len() + 64;
    let mut c = Credit::new(0, one * 3);
    for n in 0..3 {
        assert_eq!(c.offer_all(chunk(n), true), Offer::Held);
    }
    assert_eq!(c.offer_all(chunk(3), true), Offer::Overflow);
    assert_eq!(c.held_bytes(), 0, "what was held is let go");
    assert_eq!(c.offer_all(chunk(4), true), Offer::Dropped);
    assert_eq!(c.offer_all("completed".into(), false), Offer::Dropped);
    assert_eq!(c.grant(10), Vec::<String>::new());
}

#[test]
fn grants_are_integers_in_range() {
    use serde_json::json;
    assert_eq!(granted(None), Ok(None));
    assert_eq!(granted(Some(&json!(10))), Ok(Some(10)));
    assert_eq!(granted(Some(&json!(0))), Ok(Some(0)));
    for bad in [
        json!(-1),
        json!(1.5),
        json!("10"),
        json!(null),
        json!(u64::MAX),
    ] {
        assert!(granted(Some(&bad)).is_err(), "{bad}");
    }
}
