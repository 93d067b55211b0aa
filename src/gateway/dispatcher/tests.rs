//! The dispatcher's state machine driven by hand, without sockets or a
//! broker: commands and deliveries in, what each connection's queue and the
//! bus get out.

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::broker::Bus;
use crate::config::SlowConsumerPolicy;
use crate::directory::{test_endpoints, Directory};
use crate::gateway::outbound::{channel, Inbox, QueueLimits};
use crate::telemetry::metrics::Metrics;

const THING: &str = "urn:t";

struct Rig {
    dispatcher: Dispatcher,
    /// What the dispatcher hands the bus.
    bus: mpsc::Receiver<BusCommand>,
    /// Deliveries waiting for a turn.
    waiting: mpsc::Sender<Delivery>,
}

/// The dispatcher's parts, as the gateway builds them; its bus handle.
fn parts() -> (Bus, Topics, Requests, Services, mpsc::Receiver<BusCommand>) {
    let topics = Topics::new("lmos").unwrap();
    let (bus_tx, bus) = mpsc::channel(64);
    let bus_handle = Bus::new(bus_tx);
    let endpoints = test_endpoints(topics.clone());
    let directory = DirectoryService::new(
        Directory::new(endpoints),
        bus_handle.clone(),
        topics.clone(),
        "urn:sidecar".into(),
        "http://h:8080",
    );
    let services = Services {
        tracer: MessageTracer::default(),
        directory,
        metrics: Metrics::default(),
        limits: Limits {
            max_subscriptions: 2,
            max_pending_requests: 10,
        },
        validate_agent_data: false,
        history: HistoryLimits {
            events_per_thing: 0,
            max_age: Duration::ZERO,
            max_bytes_per_thing: usize::MAX,
            max_bytes: usize::MAX,
        },
        budgets: crate::gateway::budget::Budgets::new(
            &Metrics::default(),
            &Default::default(),
            &Default::default(),
        ),
        kept_history: None,
    };
    let requests = Requests::new(topics.clone(), Duration::from_secs(5), 10);
    (bus_handle, topics, requests, services, bus)
}

fn rig() -> Rig {
    let (bus_handle, topics, requests, services, bus) = parts();
    // The loop is not run: the test applies commands and deliveries itself.
    let (_, commands) = mpsc::channel(1);
    let (waiting, deliveries) = mpsc::channel(64);
    let dispatcher = Dispatcher::new(bus_handle, topics, requests, services, commands, deliveries);
    Rig {
        dispatcher,
        bus,
        waiting,
    }
}

impl Rig {
    /// A registered connection and its queue.
    fn connect(&mut self, conn: ConnId) -> Inbox {
        self.connect_with(conn, 16, SlowConsumerPolicy::Disconnect)
    }

    fn connect_with(&mut self, conn: ConnId, queue: usize, policy: SlowConsumerPolicy) -> Inbox {
        let (outbound, inbox) = channel(&QueueLimits::messages_only(queue, policy));
        self.dispatcher.command(Command::Register {
            conn,
            outbound,
            principal: "anonymous".into(),
        });
        inbox
    }

    fn subscribe(&mut self, conn: ConnId, event: &str, correlation: &str) {
        self.dispatcher
            .command(subscription(conn, event, correlation, false));
    }

    /// What is queued for the bus, handed over as the loop would.
    fn bus_commands(&mut self) -> Vec<BusCommand> {
        // Its own handle, as in `Dispatcher::run`.
        let bus = self.dispatcher.bus.clone();
        while !self.dispatcher.core.out.to_bus.is_empty() {
            match bus.try_reserve() {
                Ok(Some(permit)) => self.dispatcher.feed_bus(permit),
                _ => break,
            }
        }
        std::iter::from_fn(|| self.bus.try_recv().ok()).collect()
    }

    fn event(&mut self, event: &str, data: i64) {
        self.dispatcher.delivery(event_delivery(event, data));
    }
}

fn event_delivery(event: &str, data: i64) -> Delivery {
    let payload = serde_json::json!({"thingID": THING, "messageID": format!("m{data}"), "messageType": "event", "event": event, "data": data, "timestamp": "2025-01-20T19:00:00Z"});
    Delivery {
        topic: format!("lmos/{THING}/events/{event}").into(),
        payload: payload.to_string().into(),
        response: None,
        trace: None,
        publisher: None,
    }
}

fn received(inbox: &mut Inbox) -> Vec<Value> {
    std::iter::from_fn(|| inbox.try_recv())
        .map(|f| serde_json::from_str(&f.into_text()).unwrap())
        .collect()
}

/// `subscribeEvent` of `event` on the test Thing; `acknowledge` as for a
/// Kotlin-dialect connection.
fn subscription(conn: ConnId, event: &str, correlation: &str, acknowledge: bool) -> Command {
    Command::Subscribe {
        conn,
        thing: THING.into(),
        selector: Selector::Event(event.into()),
        correlation_id: correlation.into(),
        acknowledge,
        resume: None,
    }
}

fn filters(commands: &[BusCommand]) -> Vec<String> {
    commands
        .iter()
        .map(|c| match c {
            BusCommand::Subscribe(f) => format!("+{f}"),
            BusCommand::Unsubscribe(f) => format!("-{f}"),
            BusCommand::Publish(p) => format!("publish {}", p.topic),
        })
        .collect()
}

#[test]
fn the_first_subscriber_subscribes_the_bus_and_the_last_one_leaving_unsubscribes_it() {
    let mut r = rig();
    let _a = r.connect(1);
    let _b = r.connect(2);
    r.subscribe(1, "e", "s1");
    r.subscribe(2, "e", "s2");
    assert_eq!(filters(&r.bus_commands()), ["+lmos/urn:t/events/+"]);
    r.dispatcher.command(Command::Deregister { conn: 1 });
    assert!(r.bus_commands().is_empty(), "one subscriber is left");
    r.dispatcher.command(Command::Deregister { conn: 2 });
    assert_eq!(filters(&r.bus_commands()), ["-lmos/urn:t/events/+"]);
}

#[test]
fn an_event_reaches_each_subscriber_under_its_own_correlation_id_and_no_one_else() {
    let mut r = rig();
    let mut a = r.connect(1);
    let mut b = r.connect(2);
    let mut other = r.connect(3);
    r.subscribe(1, "e", "s1");
    r.subscribe(2, "e", "s2");
    r.subscribe(3, "f", "s3");
    r.event("e", 7);
    let (a, b) = (received(&mut a), received(&mut b));
    assert_eq!((a.len(), b.len()), (1, 1), "{a:?} {b:?}");
    assert_eq!(
        (a[0]["correlationID"].as_str(), a[0]["data"].as_i64()),
        (Some("s1"), Some(7))
    );
    assert_eq!(b[0]["correlationID"], "s2");
    assert!(received(&mut other).is_empty());
}

#[test]
fn a_turn_hands_each_connection_its_copies_in_order_within_its_queue() {
    let mut r = rig();
    let mut a = r.connect(1);
    let mut b = r.connect(2);
    let mut small = r.connect_with(3, 4, SlowConsumerPolicy::Drop);
    r.subscribe(1, "e", "s1");
    r.subscribe(2, "e", "s2");
    r.subscribe(3, "e", "s3");
    for data in 1..10 {
        r.waiting.try_send(event_delivery("e", data)).unwrap();
    }
    r.dispatcher.turn(event_delivery("e", 0));
    let data = |inbox: &mut Inbox, correlation: &str| -> Vec<i64> {
        let got = received(inbox);
        assert!(got.iter().all(|m| m["correlationID"] == correlation));
        got.iter().map(|m| m["data"].as_i64().unwrap()).collect()
    };
    let all: Vec<i64> = (0..10).collect();
    assert_eq!(data(&mut a, "s1"), all);
    assert_eq!(data(&mut b, "s2"), all);
    assert_eq!(data(&mut small, "s3"), [0, 1, 2, 3], "the rest dropped");
    assert_eq!(small.dropped.load(std::sync::atomic::Ordering::Relaxed), 6);
}

#[test]
fn past_its_subscription_limit_a_connection_is_refused_and_nothing_changes() {
    let mut r = rig();
    let mut a = r.connect(1);
    r.subscribe(1, "e", "s1");
    r.subscribe(1, "f", "s2");
    r.bus_commands();
    r.subscribe(1, "g", "s3");
    let got = received(&mut a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (
            got[0]["messageType"].as_str(),
            got[0]["correlationID"].as_str()
        ),
        (Some("error"), Some("s3"))
    );
    r.event("g", 1);
    assert!(received(&mut a).is_empty(), "not subscribed");
}

#[test]
fn a_malformed_event_is_dropped_and_the_next_one_still_goes_out() {
    let mut r = rig();
    let mut a = r.connect(1);
    r.subscribe(1, "e", "s1");
    r.dispatcher.delivery(Delivery {
        topic: format!("lmos/{THING}/events/e").into(),
        payload: "not json".into(),
        response: None,
        trace: None,
        publisher: None,
    });
    r.event("e", 2);
    let got = received(&mut a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["data"], 2);
}

/// The core alone, with decisions kept to be read: a step's decisions are
/// all it produces.
#[test]
fn the_core_returns_each_steps_decisions() {
    let (_, topics, requests, services, _) = parts();
    let mut core = Core::new(topics, requests, services, Out::default());
    core.register(1, "anonymous");
    core.on_command(subscription(1, "e", "s1", false));
    let subscribed = core.take();
    assert!(subscribed.sends.is_empty());
    assert_eq!(filters(&subscribed.bus), ["+lmos/urn:t/events/+"]);

    let payload = serde_json::json!({"thingID": THING, "messageID": "m1", "messageType": "event", "event": "e", "data": 1, "timestamp": "2025-01-20T19:00:00Z"});
    core.on_delivery(Delivery {
        topic: format!("lmos/{THING}/events/e").into(),
        payload: payload.to_string().into(),
        response: None,
        trace: None,
        publisher: None,
    });
    let delivered = core.take();
    assert!(delivered.bus.is_empty());
    let [(conn, text)] = &delivered.sends[..] else {
        panic!("one message for the subscriber: {delivered:?}");
    };
    let sent: Value = serde_json::from_str(text).unwrap();
    assert_eq!((*conn, sent["correlationID"].as_str()), (1, Some("s1")));

    // Each decision is handed on once.
    core.on_command(Command::Deregister { conn: 1 });
    let left = core.take();
    assert!(left.sends.is_empty());
    assert_eq!(filters(&left.bus), ["-lmos/urn:t/events/+"]);
}

/// A Kotlin client may publish the moment it reads its `acknowledgement`:
/// the acknowledgement waits until the bus's barrier, queued after the
/// subscription, comes back from the broker.
#[test]
fn a_kotlin_acknowledgement_waits_for_the_bus_barrier_behind_its_subscription() {
    let (_, topics, requests, services, _) = parts();
    let mut core = Core::new(topics, requests, services, Out::default())
        .with_barrier(Some("lmos-sidecar/probe/x".into()));
    core.register(1, "anonymous");
    core.on_command(subscription(1, "e", "s1", true));
    let subscribed = core.take();
    assert!(subscribed.sends.is_empty(), "not yet: {subscribed:?}");
    let [BusCommand::Subscribe(filter), BusCommand::Publish(barrier)] = &subscribed.bus[..] else {
        panic!("the subscription, then the barrier: {subscribed:?}");
    };
    assert_eq!(filter, "lmos/urn:t/events/+");
    assert_eq!(barrier.topic, "lmos-sidecar/probe/x");

    let back = |payload: &bytes::Bytes| Delivery {
        topic: "lmos-sidecar/probe/x".into(),
        payload: payload.clone(),
        response: None,
        trace: None,
        publisher: None,
    };
    // Another token (the readiness probe's) releases nothing.
    core.on_delivery(back(&"probe-token".into()));
    assert!(core.take().sends.is_empty());
    // An event that arrives meanwhile waits behind the acknowledgement.
    let event = || {
        Delivery {
        topic: format!("lmos/{THING}/events/e").into(),
        payload: serde_json::json!({"thingID": THING, "messageID": "m1", "messageType": "event", "event": "e", "data": 1, "timestamp": "2025-01-20T19:00:00Z"}).to_string().into(),
        response: None,
        trace: None,
        publisher: None,
    }
    };
    core.on_delivery(event());
    assert!(core.take().sends.is_empty(), "held");
    core.on_delivery(back(&barrier.payload));
    let passed = core.take();
    let types: Vec<(ConnId, String)> = passed
        .sends
        .iter()
        .map(|(conn, text)| {
            let v: Value = serde_json::from_str(text).unwrap();
            (
                *conn,
                v["messageType"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [(1, "acknowledgement".to_owned()), (1, "event".to_owned())]
    );
    assert!(passed.bus.is_empty());
    // Nothing waits any more: the next event goes at once.
    core.on_delivery(event());
    assert_eq!(core.take().sends.len(), 1);
}
