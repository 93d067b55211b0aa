//! Tests of `gateway/decide.rs`.

use super::*;
use crate::auth::granted as principal;
use crate::broker::Bus;
use crate::directory::{test_endpoints, Directory};
use serde_json::json;

const THING: &str = "urn:t";

/// A gateway's worth of context, no sockets.
struct Gateway {
    topics: Topics,
    directory: DirectoryService,
    metrics: Metrics,
}

impl Gateway {
    fn new() -> Gateway {
        let topics = Topics::new("lmos").unwrap();
        let endpoints = test_endpoints(topics.clone());
        // The bus is never used: deciding publishes nothing.
        let (bus, _) = tokio::sync::mpsc::channel(1);
        let directory = DirectoryService::new(
            Directory::new(endpoints),
            Bus::new(bus),
            topics.clone(),
            "urn:sidecar".into(),
            "http://h:8080",
        );
        Gateway {
            topics,
            directory,
            metrics: Metrics::default(),
        }
    }

    fn context(&self) -> Context<'_> {
        Context {
            topics: &self.topics,
            max_message_size: 1024,
            validate_agent_data: false,
            directory: &self.directory,
            metrics: &self.metrics,
        }
    }
}

/// What a connection hosting THING with `principal` decides about `v`.
fn decide(principal: &Principal, v: Value) -> Vec<Effect> {
    decide_frame(principal, Frame::Text(v.to_string()))
}

enum Frame {
    Text(String),
    Binary(Vec<u8>),
}

fn decide_frame(principal: &Principal, frame: Frame) -> Vec<Effect> {
    let g = Gateway::new();
    let hosts = [THING.to_owned()];
    let (mut dialect, mut gatherer) = (None, Gatherer::default());
    let mut peer = Peer {
        id: 7,
        principal,
        hosts: &hosts,
        dialect: &mut dialect,
        gatherer: &mut gatherer,
    };
    match frame {
        Frame::Text(t) => text(&mut peer, &g.context(), t.into()),
        Frame::Binary(b) => binary(&mut peer, &g.context(), &b),
    }
}

fn everyone() -> Principal {
    principal(&["*"], &["*"], &["*"])
}

fn refused(effects: &[Effect]) -> (ProblemKind, Option<&str>) {
    match effects {
        [Effect::Refuse {
            problem,
            correlation,
            ..
        }] => (problem.kind, correlation.as_deref()),
        other => panic!("not one refusal: {other:?}"),
    }
}

#[test]
fn binary_and_oversized_frames_are_refused_with_an_lmos_error() {
    let not_a_chunk = Frame::Binary(vec![0, 1]);
    assert_eq!(
        refused(&decide_frame(&everyone(), not_a_chunk)).0,
        ProblemKind::BinaryFrame
    );
    let header = json!({"thingID": THING, "messageType": "actionStatus", "stream": {"seq": 0}});
    let big = crate::lmos::binary::frame(&header, &[7; 1100]);
    assert_eq!(
        refused(&decide_frame(&everyone(), Frame::Binary(big))).0,
        ProblemKind::MessageTooLarge
    );
    let big = json!({"thingID": THING, "messageType": "event", "data": "x".repeat(2000)});
    assert_eq!(
        refused(&decide(&everyone(), big)).0,
        ProblemKind::MessageTooLarge
    );
}

/// A binary chunk is taken as the JSON message it stands for, even when
/// its base64 form is larger than the frame limit.
#[test]
fn a_binary_chunk_is_the_message_it_stands_for() {
    let input = json!({"thingID": THING, "messageID": "m", "messageType": "actionInput",
        "action": "a", "correlationID": "c", "stream": {"seq": 0, "contentType": "audio/wav"}});
    let frame = crate::lmos::binary::frame(&input, &[1; 700]);
    let as_text = crate::lmos::binary::decode(&frame).unwrap();
    assert!(as_text.len() > 1024, "its base64 form is over the limit");
    match decide_frame(&everyone(), Frame::Binary(frame)).as_slice() {
        [Effect::Command(_)] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_agents_event_is_published_and_a_subscription_goes_to_the_dispatcher() {
    let event = json!({"thingID": THING, "messageID": "m", "messageType": "event", "event": "e", "data": 1, "timestamp": "2025-01-20T19:00:00Z"});
    match decide(&everyone(), event).as_slice() {
        [Effect::Publish { publications, .. }] => {
            assert_eq!(publications[0].topic, "lmos/urn:t/events/e")
        }
        other => panic!("{other:?}"),
    }
    let subscribe =
        json!({"thingID": THING, "messageID": "s", "messageType": "subscribeEvent", "event": "e"});
    match decide(&everyone(), subscribe).as_slice() {
        [Effect::Command(Command::Subscribe {
            conn: 7,
            acknowledge: false,
            ..
        })] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_the_host_sends_with_a_correlation_id_may_answer_a_request() {
    let reading = json!({"thingID": THING, "messageID": "m", "messageType": "propertyReading", "name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z", "correlationID": "route"});
    match decide(&everyone(), reading).as_slice() {
        [Effect::Command(Command::AgentMessage {
            conn: 7,
            thing,
            fallback,
            ..
        })] => {
            assert_eq!(thing, THING);
            assert_eq!(fallback[0].topic, "lmos/urn:t/properties/p");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_denied_message_is_refused_under_its_correlation_id() {
    let consumer_only = principal(&[], &["*"], &[]);
    let invoke = json!({"thingID": THING, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "c"});
    assert_eq!(
        refused(&decide(&consumer_only, invoke)),
        (ProblemKind::Forbidden, Some("c"))
    );
}

#[test]
fn a_td_is_taken_only_for_a_thing_the_connection_hosts() {
    let td = |id: &str| json!({"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": id, "title": "t"});
    match decide(&everyone(), td(THING)).as_slice() {
        [Effect::RegisterTd { id, .. }] => assert_eq!(id, THING),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        refused(&decide(&everyone(), td("urn:other"))).0,
        ProblemKind::Forbidden
    );
}

#[test]
fn unreadable_text_is_refused_saying_why() {
    let g = Gateway::new();
    let principal = everyone();
    let (mut dialect, mut gatherer) = (None, Gatherer::default());
    let mut peer = Peer {
        id: 7,
        principal: &principal,
        hosts: &[],
        dialect: &mut dialect,
        gatherer: &mut gatherer,
    };
    let effects = text(&mut peer, &g.context(), "{\"thingID\": ".into());
    assert_eq!(refused(&effects).0, ProblemKind::InvalidJson);
}
