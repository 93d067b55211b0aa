use super::*;
use crate::telemetry::recent::{AttrText, SpanHead};

fn span(
    operation: &str,
    destination: &str,
    extra: &[(&'static str, &str)],
    kind: u8,
) -> StoredSpan {
    let mut attributes = vec![
        ("messaging.destination.name", AttrText::Str(destination)),
        ("messaging.operation.name", AttrText::Str(operation)),
    ];
    attributes.extend(extra.iter().map(|(k, v)| (*k, AttrText::Str(v))));
    StoredSpan::new(
        SpanHead {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_id: None,
            parent_remote: true,
            kind,
            start_unix_nanos: 0,
            end_unix_nanos: 0,
        },
        (operation, destination),
        attributes.into_iter(),
        None,
    )
}

#[test]
fn roles_say_who_talks_to_whom() {
    let topics = Topics::new("lmos").unwrap();
    let cases = [
        (
            span("publish", "lmos/urn:w/agent/requests/invokeAction", &[], 4),
            "a consumer's request, sent to the agent of urn:w",
        ),
        (
            span("process", "lmos/urn:w/agent/replies", &[], 5),
            "the agent of urn:w answers",
        ),
        (
            span("publish", "lmos/urn:w/events/rain", &[], 4),
            "the agent of urn:w publishes on the bus",
        ),
        (
            span(
                "process",
                "lmos/urn:w/events/rain",
                &[("lmos.recipients", "3")],
                5,
            ),
            "the sidecar hands it to 3 WebSocket consumers",
        ),
        (
            span(
                "process",
                "lmos/urn:w/events/rain",
                &[("lmos.recipients", "1")],
                5,
            ),
            "the sidecar hands it to 1 WebSocket consumer",
        ),
        (
            span(
                "process",
                "tools/call",
                &[("mcp.method.name", "tools/call")],
                2,
            ),
            "an MCP client calls the sidecar",
        ),
        (
            span("process", "x", &[("mcp.method.name", "tools/call")], 3),
            "the sidecar calls an imported MCP server",
        ),
        (
            span("process", "urn:w", &[("rpc.system", "jsonrpc")], 2),
            "an A2A client calls the sidecar",
        ),
    ];
    for (s, expected) in cases {
        assert_eq!(role(&s, &topics), expected, "{}", s.name());
    }
}

#[test]
fn a_trace_is_seen_by_who_may_consume_every_thing_it_names() {
    let only_w = crate::auth::granted(&[], &["urn:w"], &[]);
    let everyone = Principal::unrestricted("ops");
    let w: Vec<Box<str>> = vec!["urn:w".into()];
    let w_and_x: Vec<Box<str>> = vec!["urn:w".into(), "urn:x".into()];
    assert!(may_see(&only_w, false, &w));
    assert!(
        !may_see(&only_w, false, &w_and_x),
        "one foreign Thing hides the trace"
    );
    assert!(
        !may_see(&only_w, false, &[]),
        "a trace naming no Thing is for who may see all"
    );
    assert!(may_see(&everyone, false, &w_and_x));
    assert!(may_see(&everyone, false, &[]));
    assert!(
        may_see(&only_w, true, &w_and_x),
        "administrators see every trace"
    );
}

#[test]
fn trace_ids_are_32_hex_digits_not_all_zero() {
    assert_eq!(
        parse_id("0AF7651916CD43DD8448EB211C80319C"),
        parse_id("0af7651916cd43dd8448eb211c80319c")
    );
    assert_eq!(
        parse_id("0af7651916cd43dd8448eb211c80319c").unwrap()[0],
        0x0a
    );
    for bad in [
        "",
        "0af7",
        "00000000000000000000000000000000",
        "0af7651916cd43dd8448eb211c80319g",
        "0af7651916cd43dd8448eb211c80319c0",
        "é0f7651916cd43dd8448eb211c80319",
    ] {
        assert_eq!(parse_id(bad), None, "{bad}");
    }
}
