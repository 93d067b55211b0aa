//! [`super`]'s unit tests.
use super::*;
use serde_json::json;

const T: &str = "urn:t";

fn relay() -> Relay {
    Relay::new(Topics::new("lmos").unwrap(), "_INBOX.me".into())
}

fn bytes(v: Value) -> Bytes {
    Bytes::from(v.to_string())
}

/// What the relay does with an empty event of `T`'s.
fn event_out(r: &mut Relay) -> Vec<ToNats> {
    let t = Topics::new("lmos").unwrap();
    r.from_local(&t.event(T, "e"), Bytes::from_static(b"{}"))
}

const EVENT_SUBJECT: &str = "lmos.urn:t.events.e";

#[test]
fn events_go_to_everyone_on_their_subject() {
    assert_eq!(
        event_out(&mut relay()),
        [ToNats::Publish {
            subject: EVENT_SUBJECT.into(),
            payload: Bytes::from_static(b"{}")
        }]
    );
}

#[test]
fn presence_decides_which_requests_this_sidecar_takes() {
    let mut r = relay();
    let t = Topics::new("lmos").unwrap();
    let online = bytes(json!({"status": "online"}));
    let out = r.from_local(&t.agent_status(T), online.clone());
    assert_eq!(out[0], ToNats::Host(T.into()));
    assert!(r.from_local(&t.agent_status(T), online).len() == 1, "once");
    assert_eq!(r.requests_subject(T), "lmos.urn:t.agent.requests.*");
    // A request for a Thing hosted here stays here.
    let request = bytes(json!({"thingID": T, "correlationID": "r"}));
    assert!(r
        .from_local(&t.agent_request(T, "readProperty"), request)
        .is_empty());
    let out = r.from_local(&t.agent_status(T), bytes(json!({"status": "offline"})));
    assert_eq!(out[0], ToNats::Unhost(T.into()));
    // State kept for sidecars that ask.
    let state = r.state_for("_INBOX.you");
    assert_eq!(state[0].0, "_INBOX.you._state.lmos.urn:t.agent.status");
}

#[test]
fn a_request_crosses_as_a_nats_request_and_its_answers_come_back_to_the_asker_only() {
    let t = Topics::new("lmos").unwrap();
    let mut b = relay();
    let mut a = Relay::new(t.clone(), "_INBOX.a".into());
    a.from_local(&t.agent_status(T), bytes(json!({"status": "online"})));
    let invoke = bytes(
        json!({"thingID": T, "messageID": "m", "messageType": "invokeAction", "action": "x", "correlationID": "r.1"}),
    );
    let out = b.from_local(&t.agent_request(T, "invokeAction"), invoke.clone());
    let [ToNats::Request {
        subject,
        reply,
        payload,
    }] = &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(subject, "lmos.urn:t.agent.requests.invokeAction");
    assert_eq!(reply, "_INBOX.me.r%2E1.lmos.urn:t.agent.replies");
    let local = a
        .request_from_nats(subject, Some(reply), payload.clone())
        .unwrap();
    assert_eq!(local.topic, t.agent_request(T, "invokeAction"));
    let status = |s: &str| {
        bytes(
            json!({"thingID": T, "messageID": s, "messageType": "actionStatus", "action": "x", "status": s, "correlationID": "r.1"}),
        )
    };
    for (seq, s, pending) in [(1, "running", 1), (2, "completed", 0)] {
        let out = a.from_local(&t.agent_replies(T), status(s));
        assert_eq!(
            out,
            vec![ToNats::Answer {
                subject: reply.clone(),
                route: "r.1".into(),
                seq,
                payload: status(s)
            }]
        );
        assert_eq!(a.pending_len(), pending);
    }
    assert!(
        a.from_local(&t.agent_replies(T), status("completed"))
            .is_empty(),
        "a local agent's answers to local requests stay local"
    );
    let back = b.from_inbox(reply, status("completed"), false).unwrap();
    assert_eq!(
        (back.topic.as_str(), back.retain),
        (t.agent_replies(T).as_str(), false)
    );
    // Numbered answers: each taken once, a repeat (its acknowledgement
    // lost) dropped, the next one taken.
    let now = std::time::Instant::now();
    let taken = |b: &mut Relay, seq| {
        b.answer_from_inbox(reply, status("running"), seq, now)
            .unwrap()
            .len()
    };
    assert_eq!(taken(&mut b, 1), 1);
    assert_eq!(taken(&mut b, 1), 0, "a repeat");
    assert_eq!(taken(&mut b, 3), 0, "3 waits for 2");
    assert_eq!(taken(&mut b, 2), 2, "2 repeated after a loss, then 3");
    assert!(taken(&mut b, 2) == 0 && taken(&mut b, 3) == 0);
    // A gap that does not fill is given up after the wait.
    assert_eq!(taken(&mut b, 5), 0);
    assert!(b.overdue_answers(now).is_empty());
    let later = now + super::super::ordered::HOLD_WAIT;
    assert_eq!(b.overdue_answers(later).len(), 1, "5, without 4");
    // No one took it: the asker's router hears 503.
    let back = b.from_inbox(reply, Bytes::new(), true).unwrap();
    let problem: Value = serde_json::from_slice(&back.payload).unwrap();
    assert_eq!(
        (
            problem["correlationID"].as_str(),
            problem["thingID"].as_str()
        ),
        (Some("r.1"), Some(T)),
        "{problem}"
    );
    assert_eq!(problem["status"], "503", "{problem}");
}

#[test]
fn with_jetstream_events_are_stored_and_state_kept_in_buckets() {
    let t = Topics::new("lmos").unwrap();
    let mut r = relay().with_jetstream();
    assert_eq!(
        event_out(&mut r),
        [ToNats::Store {
            subject: EVENT_SUBJECT.into(),
            payload: Bytes::from_static(b"{}")
        }]
    );
    let online = bytes(json!({"status": "online"}));
    let out = r.from_local(&t.agent_status(T), online.clone());
    assert_eq!(
        out[0],
        ToNats::Keep {
            topic: t.agent_status(T),
            payload: Some(online.clone())
        }
    );
    assert_eq!(r.hosted_presence(), vec![(t.agent_status(T), online)]);
    let out = r.from_local(&t.agent_status(T), bytes(json!({"status": "offline"})));
    assert_eq!(
        out[0],
        ToNats::Keep {
            topic: t.agent_status(T),
            payload: None
        },
        "an agent gone leaves no entry"
    );
    let out = r.from_local(&t.property(T, "p"), Bytes::new());
    assert!(matches!(&out[0], ToNats::Keep { payload: None, .. }));
}

#[test]
fn state_from_another_sidecar_is_retained_here() {
    let t = Topics::new("lmos").unwrap();
    let r = relay();
    let got = r
        .from_inbox(
            "_INBOX.me._state.lmos.urn:t.td",
            Bytes::from_static(b"{}"),
            false,
        )
        .unwrap();
    assert_eq!((got.topic, got.retain), (t.td(T), true));
    assert!(r.from_inbox("_INBOX.other.x", Bytes::new(), false).is_err());
}
