use super::*;

fn head(trace: u8, n: u8) -> SpanHead {
    SpanHead {
        trace_id: [trace; 16],
        span_id: [n; 8],
        parent_id: None,
        parent_remote: false,
        kind: 5,
        start_unix_nanos: u64::from(n),
        end_unix_nanos: u64::from(n) + 1,
    }
}

fn span(trace: u8, n: u8, name_len: usize) -> StoredSpan {
    let name = "x".repeat(name_len);
    StoredSpan::new(
        head(trace, n),
        ("process", &name),
        [("lmos.thing_id", AttrText::Str("weather"))].into_iter(),
        None,
    )
}

/// What a new trace of one span naming one Thing costs.
fn first_cost(name_len: usize) -> usize {
    let mut store = RecentSpans::new(DEFAULT_BUDGET);
    store.push(span(1, 1, name_len));
    store.used()
}

#[test]
fn a_span_gives_back_its_name_and_attributes() {
    let s = StoredSpan::new(
        head(1, 1),
        ("publish", "lmos/urn:w/events/e"),
        [
            ("lmos.thing_id", AttrText::Str("urn:w")),
            ("lmos.recipients", AttrText::Int(12)),
            ("empty", AttrText::Str("")),
            ("lmos.affordance", AttrText::Str("température")),
        ]
        .into_iter(),
        Some("agent failed"),
    );
    assert_eq!(s.name(), "publish lmos/urn:w/events/e");
    let all: Vec<_> = s.attributes().collect();
    assert_eq!(
        all,
        [
            ("lmos.thing_id", "urn:w"),
            ("lmos.recipients", "12"),
            ("empty", ""),
            ("lmos.affordance", "température")
        ]
    );
    assert_eq!(s.attribute("lmos.recipients"), Some("12"));
    assert_eq!(s.error.as_deref(), Some("agent failed"));
}

#[test]
fn spans_of_a_trace_are_kept_together_with_the_things_they_name() {
    let mut store = RecentSpans::new(DEFAULT_BUDGET);
    store.push(span(1, 1, 10));
    store.push(span(2, 1, 10));
    store.push(span(1, 2, 10));
    let one = store.trace(&[1; 16]).unwrap();
    assert_eq!(one.spans.len(), 2);
    assert_eq!(one.summary.things, vec![Box::from("weather")]);
    assert_eq!(one.summary.start_unix_nanos, 1);
    assert_eq!(one.summary.end_unix_nanos, 3);
    let newest: Vec<_> = store
        .newest(10, |_, _| true)
        .iter()
        .map(|s| s.trace_id)
        .collect();
    assert_eq!(newest, vec![[2; 16], [1; 16]]);
}

#[test]
fn the_budget_is_never_exceeded_and_the_oldest_trace_goes_first() {
    let one = first_cost(100);
    let mut store = RecentSpans::new(one * 5);
    for trace in 1..=10 {
        store.push(span(trace, 1, 100));
        assert!(store.used() <= one * 5);
    }
    assert!(store.trace(&[1; 16]).is_none(), "oldest evicted");
    assert!(store.trace(&[5; 16]).is_none());
    assert!(store.trace(&[6; 16]).is_some());
    assert!(store.trace(&[10; 16]).is_some());
}

#[test]
fn a_whole_trace_is_evicted_not_half_of_it() {
    let one = first_cost(100);
    let mut store = RecentSpans::new(one * 3);
    store.push(span(1, 1, 100));
    store.push(span(1, 2, 100));
    store.push(span(2, 1, 100));
    store.push(span(3, 1, 100));
    assert!(store.trace(&[1; 16]).is_none());
    assert_eq!(store.used(), one * 2);
}

#[test]
fn a_trace_evicted_to_make_room_for_its_own_span_is_charged_anew() {
    let one = first_cost(100);
    let mut store = RecentSpans::new(one + one / 2);
    store.push(span(1, 1, 100));
    store.push(span(1, 2, 100));
    assert_eq!(store.trace(&[1; 16]).unwrap().spans.len(), 1);
    assert_eq!(store.used(), one);
}

#[test]
fn long_attributes_cost_their_bytes() {
    let mut store = RecentSpans::new(64 * 1024);
    let long = "v".repeat(100 * 1024);
    let big = StoredSpan::new(
        head(1, 1),
        ("process", "t"),
        [("k", AttrText::Str(&long))].into_iter(),
        None,
    );
    store.push(big);
    assert_eq!(store.used(), 0, "a span larger than the budget is not kept");
    assert!(store.trace(&[1; 16]).is_none());
}

#[test]
fn one_trace_keeps_a_bounded_number_of_spans() {
    let mut store = RecentSpans::new(DEFAULT_BUDGET);
    for n in 0..MAX_SPANS_PER_TRACE + 5 {
        store.push(span(1, (n % 250) as u8, 4));
    }
    store.push(span(2, 1, 4));
    let one = store.trace(&[1; 16]).unwrap();
    assert_eq!(one.spans.len(), MAX_SPANS_PER_TRACE);
    assert_eq!(one.summary.not_kept, 5);
    assert!(
        store.trace(&[2; 16]).is_some(),
        "other traces still come in"
    );
}

#[test]
fn a_zero_budget_keeps_nothing() {
    let mut store = RecentSpans::new(0);
    store.push(span(1, 1, 1));
    assert!(store.newest(10, |_, _| true).is_empty());
    assert_eq!(store.used(), 0);
}
