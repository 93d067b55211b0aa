use super::*;

fn span(trace: u8, n: u8, name_len: usize) -> StoredSpan {
    StoredSpan {
        trace_id: [trace; 16],
        span_id: [n; 8],
        parent_id: None,
        name: "x".repeat(name_len),
        kind: 5,
        start_unix_nanos: 1,
        end_unix_nanos: 2,
        ok: true,
        attributes: vec![("lmos.thing".into(), "weather".into())],
    }
}

#[test]
fn spans_of_a_trace_are_kept_together() {
    let mut store = RecentSpans::new(DEFAULT_BUDGET);
    store.push(span(1, 1, 10));
    store.push(span(2, 1, 10));
    store.push(span(1, 2, 10));
    assert_eq!(store.trace(&[1; 16]).map(<[_]>::len), Some(2));
    let newest: Vec<_> = store.newest(10).copied().collect();
    assert_eq!(newest, vec![[2; 16], [1; 16]]);
}

#[test]
fn the_budget_is_never_exceeded_and_the_oldest_trace_goes_first() {
    let one = span(0, 0, 100).cost();
    let mut store = RecentSpans::new(one * 5);
    for trace in 1..=10 {
        store.push(span(trace, 1, 100));
        assert!(store.used() <= one * 5);
    }
    assert_eq!(store.trace(&[1; 16]), None, "oldest evicted");
    assert_eq!(store.trace(&[5; 16]), None);
    assert!(store.trace(&[6; 16]).is_some());
    assert!(store.trace(&[10; 16]).is_some());
}

#[test]
fn a_whole_trace_is_evicted_not_half_of_it() {
    let one = span(0, 0, 100).cost();
    let mut store = RecentSpans::new(one * 3);
    store.push(span(1, 1, 100));
    store.push(span(1, 2, 100));
    store.push(span(2, 1, 100));
    store.push(span(3, 1, 100));
    assert_eq!(store.trace(&[1; 16]), None);
    assert_eq!(store.used(), one * 2);
}

#[test]
fn long_attributes_cost_their_bytes() {
    let mut store = RecentSpans::new(64 * 1024);
    let mut big = span(1, 1, 10);
    big.attributes.push(("k".into(), "v".repeat(100 * 1024)));
    store.push(big);
    assert_eq!(store.used(), 0, "a span larger than the budget is not kept");
    assert_eq!(store.trace(&[1; 16]), None);
}

#[test]
fn a_zero_budget_keeps_nothing() {
    let mut store = RecentSpans::new(0);
    store.push(span(1, 1, 1));
    assert_eq!(store.newest(10).count(), 0);
}
