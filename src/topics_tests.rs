//! Tests of `topics.rs`.

#[test]
fn filters_overlap_when_one_topic_could_match_both() {
    let values = "lmos/+/values/+/+";
    for f in [
        "#",
        "lmos/#",
        "+/+/values/events/e",
        "lmos/urn:a/values/#",
        "lmos/+/+/+/+",
    ] {
        assert!(filters_overlap(f, values), "{f}");
    }
    for f in [
        "lmos/+/events/+",
        "lmos/+/+/+",
        "lmos/a/values",
        "other/#",
        "$SYS/#",
    ] {
        assert!(!filters_overlap(f, values), "{f}");
    }
    assert!(!filters_overlap("#", "$SYS/a"));
    assert!(filters_overlap("$SYS/#", "$SYS/a"));
    assert!(filters_overlap("a/+", "a/b") && !filters_overlap("a/b/c", "a/b"));
}
use super::*;
use proptest::prelude::*;

fn topics() -> Topics {
    Topics::new("lmos").unwrap()
}

#[test]
fn urn_uuid_thing_ids_stay_readable() {
    let t = "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77";
    assert_eq!(
        topics().event(t, "userFeedbackReceived"),
        "lmos/urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77/events/userFeedbackReceived"
    );
}

#[test]
fn special_characters_are_escaped() {
    assert_eq!(
        escape("https://x.org/a+b#c%d"),
        "https:%2F%2Fx%2Eorg%2Fa%2Bb%23c%25d"
    );
    assert_eq!(escape("$SYS"), "%24SYS");
    assert_eq!(escape("a$b"), "a$b");
    assert_eq!(escape("nul\0"), "nul%00");
}

#[test]
fn what_nats_cannot_carry_is_escaped() {
    assert_eq!(escape("a b"), "a%20b");
    assert_eq!(escape("v1.2"), "v1%2E2");
    assert_eq!(escape("mailto:lamp@example"), "mailto:lamp%40example");
    assert_eq!(
        escape("tab\tcr\rlf\nff\x0cdel\x7f"),
        "tab%09cr%0Dlf%0Aff%0Cdel%7F"
    );
    assert_eq!(escape("\x01\x1f"), "%01%1F");
    // `*` and `>` are NATS wildcards only as a whole level.
    assert_eq!(escape("*"), "%2A");
    assert_eq!(escape(">"), "%3E");
    assert_eq!(escape("a*"), "a*");
    assert_eq!(escape("**"), "**");
    assert_eq!(escape("->"), "->");
    assert_eq!(escape("%2A"), "%252A");
    // Non-ASCII, `:`, `-`, `_`, `~`, `!`, ... stay as they are.
    for s in [
        "über",
        "😀",
        "a\u{a0}b",
        "\u{2028}",
        "urn:x:a-b_c~d!e(f)g'h,i;j=k&l",
    ] {
        assert_eq!(escape(s), s);
    }
}

#[test]
fn ids_without_the_new_characters_map_as_before() {
    for s in [
        "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77",
        "getWeather",
        "temp",
        "c1",
        "a$b",
        "",
    ] {
        assert!(matches!(escape(s), Cow::Borrowed(_)), "{s:?}");
    }
    assert_eq!(escape("lamp+1#main/x"), "lamp%2B1%23main%2Fx");
}

#[test]
fn unescape_refuses_what_escape_never_writes() {
    for bad in [
        "a b", "a.b", "a@b", "a\tb", "*", ">", "%2a", "%2A*", "*%2A", "a%2A", "%3Ea", "%2e", "%41",
        "%7E", "%80", "%C3%BC", "%+1", "%-1", "%2", "a%24",
    ] {
        assert!(unescape(bad).is_err(), "{bad:?}");
    }
    assert_eq!(unescape("%2A").unwrap(), "*");
    assert_eq!(unescape("%3E").unwrap(), ">");
    assert_eq!(unescape("a%2Eb%20c%40d%09%7F").unwrap(), "a.b c@d\t\x7f");
    assert_eq!(unescape("**").unwrap(), "**");
}

#[test]
fn the_layout_of_each_route() {
    let t = topics();
    assert_eq!(t.property("urn:a", "temp"), "lmos/urn:a/properties/temp");
    assert_eq!(
        t.action_status("urn:a", "getWeather", "c1"),
        "lmos/urn:a/actions/getWeather/status/c1"
    );
    assert_eq!(t.thing_events_filter("urn:a"), "lmos/urn:a/events/+");
    assert_eq!(t.event_of_all_things_filter("alarm"), "lmos/+/events/alarm");
    assert_eq!(
        t.action_invocations_filter("urn:a", "go"),
        "lmos/urn:a/actions/go/status/+"
    );
    assert_eq!(t.thing_filter("a/b"), "lmos/a%2Fb/#");
}

#[test]
fn foreign_topics_and_bad_escapes_do_not_parse() {
    let t = topics();
    assert_eq!(t.parse("other/urn:a/events/e"), None);
    assert_eq!(t.parse("lmosx/urn:a/events/e"), None);
    assert_eq!(t.parse("lmos/urn:a/events"), None);
    assert_eq!(t.parse("lmos/urn:a/events/e/extra"), None);
    assert_eq!(t.parse("lmos/urn%41/events/e"), None);
    assert_eq!(t.parse("lmos/urn%2/events/e"), None);
    assert_eq!(t.parse("lmos/a$%24/events/e"), None);
    assert_eq!(t.parse("lmos/example.com/events/e"), None);
    assert_eq!(t.parse("lmos/*/events/e"), None);
}

#[test]
fn multi_level_prefixes_work_and_bad_ones_are_refused() {
    let t = Topics::new("org/lmos").unwrap();
    assert_eq!(
        t.parse(&t.event("x", "y")),
        Some(Route::Event {
            thing: "x".into(),
            event: "y".into()
        })
    );
    for bad in ["", "/lmos", "lmos/", "a//b", "lm+os", "#", "$lmos"] {
        assert!(Topics::new(bad).is_err(), "{bad:?}");
    }
}

proptest! {
    #[test]
    fn any_string_round_trips(s in any::<String>()) {
        let e = escape(&s);
        prop_assert!(!e.contains(['/', '+', '#', '\0', ' ', '.', '@']));
        prop_assert!(!e.contains(|c: char| c.is_ascii_control()));
        prop_assert!(!e.starts_with('$'));
        prop_assert!(e != "*" && e != ">");
        prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
    }

    #[test]
    fn nats_special_strings_round_trip(s in "[*>.@ %$/a\t\r\n\x0c\x7f\x01]{0,6}") {
        let e = escape(&s);
        prop_assert!(!e.contains(['.', ' ', '@', '\t', '\r', '\n']));
        prop_assert!(e != "*" && e != ">");
        prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
    }

    #[test]
    fn nats_special_strings_escape_injectively(a in "[*>%2AE3]{0,4}", b in "[*>%2AE3]{0,4}") {
        prop_assume!(a != b);
        prop_assert_ne!(escape(&a), escape(&b));
    }

    #[test]
    fn unescape_accepts_only_what_escape_writes(l in "[*>%2AE34.@ a]{0,6}") {
        // Strictness: a level that unescapes is the escape of what it unescapes to.
        if let Ok(u) = unescape(&l) {
            prop_assert_eq!(escape(&u).into_owned(), l.clone());
        }
    }

    #[test]
    fn uri_like_strings_round_trip(s in "[a-z]{1,6}:[/+#%$@ a-zA-Z0-9:._~*>-]{0,40}") {
        let e = escape(&s);
        prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
    }

    #[test]
    fn every_route_round_trips(thing in any::<String>(), name in any::<String>(), inv in any::<String>()) {
        let t = topics();
        prop_assert_eq!(t.parse(&t.event(&thing, &name)), Some(Route::Event { thing: thing.clone(), event: name.clone() }));
        prop_assert_eq!(t.parse(&t.property(&thing, &name)), Some(Route::Property { thing: thing.clone(), name: name.clone() }));
        prop_assert_eq!(
            t.parse(&t.action_status(&thing, &name, &inv)),
            Some(Route::ActionStatus { thing: thing.clone(), action: name.clone(), invocation: inv.clone() })
        );
        prop_assert_eq!(t.parse(&t.request(&thing, &name)), Some(Route::Request { thing: thing.clone(), message_type: name.clone() }));
        prop_assert_eq!(t.parse(&t.reply(&thing, &inv)), Some(Route::Reply { thing: thing.clone(), correlation: inv.clone() }));
        prop_assert_eq!(t.parse(&t.agent_request(&thing, &name)), Some(Route::AgentRequest { thing: thing.clone(), message_type: name }));
        prop_assert_eq!(t.parse(&t.agent_replies(&thing)), Some(Route::AgentReplies { thing: thing.clone() }));
        prop_assert_eq!(t.parse(&t.agent_status(&thing)), Some(Route::AgentStatus { thing }));
    }

    #[test]
    fn escaping_is_injective(a in any::<String>(), b in any::<String>()) {
        prop_assume!(a != b);
        prop_assert_ne!(escape(&a), escape(&b));
    }
}
