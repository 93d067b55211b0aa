//! What a clustered NATS (2.9, Debian's `nats-server`) does with the
//! sidecar's MQTT topics, established against a real 3-node cluster with
//! MQTT 3.1.1 clients (rumqttc) on different nodes.
//!
//! NATS maps an MQTT topic to a subject (`server/mqtt.go`,
//! `mqttToNATSSubjectConversion`): `/` becomes `.`, empty levels become `/`
//! tokens, `+` and `#` become `*` and `>`; a space or a `.` is an error. The
//! facts the sidecar's escaping relies on are in
//! `what_nats_does_with_unescaped_levels`; that every thingID and name
//! round-trips with the escaping is in `every_character_class_round_trips`.
//! Persistent sessions survive a reconnection to another node, and the
//! death (SIGKILL) of their node: `a_persistent_session_gets_what_was_published_while_away`,
//! `a_subscriber_of_a_killed_node_resumes_on_another`.
//!
//! Needs `nats-server` (`apt-get install -y nats-server`): without it these
//! tests fail, telling so.

use lmos_testkit::nats;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lmos_sidecar::topics::{Route, Topics};
use nats::{Mqtt, NatsCluster};
use rumqttc::QoS;

fn topics() -> Topics {
    Topics::new("lmos").unwrap()
}

/// The publishes the connections receive: until `complete` holds for them
/// (and nothing more came for 300 ms, to catch duplicates and wrong
/// deliveries) or nothing came for `quiet`.
async fn gather_until(
    conns: &mut [Mqtt],
    quiet: Duration,
    complete: impl Fn(&[rumqttc::Publish]) -> bool,
) -> Vec<rumqttc::Publish> {
    let mut got = Vec::new();
    let mut last = Instant::now();
    loop {
        for m in conns.iter_mut() {
            while let Ok(p) = m.publishes.try_recv() {
                got.push(p);
                last = Instant::now();
            }
        }
        if (last.elapsed() > Duration::from_millis(300) && complete(&got)) || last.elapsed() > quiet
        {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The publishes the connections receive, until `n` arrived.
async fn gather(conns: &mut [Mqtt], n: usize, quiet: Duration) -> Vec<rumqttc::Publish> {
    gather_until(conns, quiet, |got| got.len() >= n).await
}

async fn collect(m: &mut Mqtt, n: usize, quiet: Duration) -> Vec<rumqttc::Publish> {
    gather(std::slice::from_mut(m), n, quiet).await
}

/// Subscribes `filters` spread over `connections` (connection `k` gets the
/// filters `k`, `k + connections`, ...) concurrently: NATS creates one
/// JetStream consumer per QoS 1 subscription, one after the other per
/// connection, and that is slow.
async fn subscribe_spread(conns: &mut [Mqtt], filters: &[String], qos: QoS) {
    let n = conns.len();
    let jobs = conns.iter_mut().enumerate().map(|(k, c)| {
        let mine: Vec<&str> = filters
            .iter()
            .skip(k)
            .step_by(n)
            .map(String::as_str)
            .collect();
        async move {
            if mine.is_empty() {
                return;
            }
            let granted = c.subscribe_qos(&mine, qos).await.expect("SUBACK");
            for (f, g) in mine.iter().zip(granted) {
                assert!(g, "subscription to {f:?} refused");
            }
        }
    });
    futures_util::future::join_all(jobs).await;
}

/// The node leading the MQTT session consumer with this filter subject.
fn consumer_leader(c: &NatsCluster, filter_subject: &str) -> Option<String> {
    for i in 0..c.len() {
        let Some(v) = c.monitor(i, "/jsz?consumers=true&config=true") else {
            continue;
        };
        for account in v["account_details"].as_array().into_iter().flatten() {
            for stream in account["stream_detail"].as_array().into_iter().flatten() {
                for consumer in stream["consumer_detail"].as_array().into_iter().flatten() {
                    if consumer["config"]["filter_subject"] == filter_subject {
                        if let Some(l) = consumer["cluster"]["leader"].as_str() {
                            return Some(l.to_owned());
                        }
                    }
                }
            }
        }
    }
    None
}

/// [`connect`], retried for up to 30 s: while JetStream elects new leaders
/// after a node's death, NATS cannot load sessions and refuses connections.
async fn connect_retrying(c: &NatsCluster, node: usize, id: &str, clean: bool) -> Mqtt {
    let start = Instant::now();
    loop {
        match Mqtt::connect(c.mqtt_addr(node), id, clean).await {
            Ok(m) => return m,
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                eprintln!("{id} cannot connect to node {node} yet: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{id} cannot connect to node {node}: {e}\n{}", c.logs()),
        }
    }
}

async fn connect(c: &NatsCluster, node: usize, id: &str, clean: bool) -> Mqtt {
    match Mqtt::connect(c.mqtt_addr(node), id, clean).await {
        Ok(m) => m,
        Err(e) => panic!("{id} cannot connect to node {node}: {e}\n{}", c.logs()),
    }
}

/// Thing IDs and names with every character class the brief of the NATS
/// groundwork named, plus every ASCII character alone and inside a level.
fn samples() -> (Vec<String>, Vec<String>) {
    let named: Vec<String> = [
        "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77",
        "https://example.com/things/lamp+1#main",
        ".",
        "a.b",
        " ",
        "a b",
        "*",
        "a*b",
        ">",
        "a>b",
        "$",
        "$SYS",
        "a$b",
        "%",
        "%2E",
        "a:b",
        "über",
        "😀",
        "mailto:lamp@example.org",
        "@",
        "#",
        "+",
        "/",
        "a\tb",
        "\r\n",
        "\u{c}",
        "\u{7f}",
        "\u{a0}\u{2003}",
    ]
    .into_iter()
    .map(String::from)
    .chain(["x".repeat(1000), format!("urn:long:{}", "ü.".repeat(500))])
    .collect();
    let mut sweep = Vec::new();
    for b in 1u8..=127 {
        let c = b as char;
        sweep.push(format!("{c}"));
        sweep.push(format!("s{c}s"));
    }
    sweep.retain(|s| !named.contains(s));
    (named, sweep)
}

/// With the sidecar's escaping, every thingID and name round-trips through
/// the cluster: subscribers on node 0 (exact filters; `+` filters),
/// publisher on node 2, QoS 1. The named classes get QoS 1 exact and `+`
/// subscriptions (JetStream consumers); every ASCII character, alone and
/// inside a level, gets QoS 0 exact subscriptions and the QoS 1
/// `lmos/+/events/+`. Each subscription gets its message exactly once (at
/// most twice for a case NATS missed at first and that was published
/// again), on the exact topic, and the topic parses back to the thing and
/// the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_character_class_round_trips() {
    let started = Instant::now();
    let c = NatsCluster::start(3).await;
    let t = topics();
    let (named, sweep) = samples();
    // Case k: thing = sample, name = sample (so both positions, whole level
    // and inside one, are exercised; things are distinct, so are names).
    let all: Vec<&String> = named.iter().chain(&sweep).collect();
    let topic_of = |s: &str| t.event(s, s);

    // QoS 1 exact, `lmos/{thing}/events/+` and `lmos/+/events/{name}`
    // filters for the named classes, spread over connections.
    let mut exact1 = Vec::new();
    let mut plus1 = Vec::new();
    for k in 0..3 {
        exact1.push(connect(&c, 0, &format!("exact-q1-{k}"), true).await);
        plus1.push(connect(&c, 0, &format!("plus-q1-{k}"), true).await);
    }
    let exact_filters: Vec<String> = named.iter().map(|s| topic_of(s)).collect();
    let mut plus_filters: Vec<String> = named.iter().map(|s| t.thing_events_filter(s)).collect();
    plus_filters.extend(named.iter().map(|s| t.event_of_all_things_filter(s)));
    let (a, b) = (
        subscribe_spread(&mut exact1, &exact_filters, QoS::AtLeastOnce),
        subscribe_spread(&mut plus1, &plus_filters, QoS::AtLeastOnce),
    );
    tokio::join!(a, b);
    // QoS 0 exact filters for everything; one QoS 1 `lmos/+/events/+`.
    let mut exact0 = connect(&c, 0, "exact-q0", true).await;
    let filters0: Vec<String> = all.iter().map(|s| topic_of(s)).collect();
    subscribe_spread(
        std::slice::from_mut(&mut exact0),
        &filters0,
        QoS::AtMostOnce,
    )
    .await;
    let mut any = connect(&c, 0, "any-q1", true).await;
    assert_eq!(any.subscribe(&["lmos/+/events/+"]).await, Ok(vec![true]));
    eprintln!("subscribed after {:?}", started.elapsed());

    let mut publisher = connect(&c, 2, "publisher", true).await;
    for (k, s) in all.iter().enumerate() {
        let topic = topic_of(s);
        if let Err(e) = publisher.publish(&topic, k.to_string().as_bytes()).await {
            panic!("publishing to {topic:?} failed: {e}\n{}", c.logs());
        }
    }
    eprintln!("published after {:?}", started.elapsed());

    // Which payload (case) arrived on which topic, how often, per
    // subscriber: every mismatch is reported.
    let quiet = Duration::from_secs(10);
    let counts = |got: &[rumqttc::Publish]| {
        let mut n = vec![0usize; all.len()];
        for p in got {
            let k: usize = std::str::from_utf8(&p.payload).unwrap().parse().unwrap();
            n[k] += 1;
        }
        n
    };
    let wanted = |cases: &[&String], times: usize| -> Vec<usize> {
        all.iter()
            .map(|s| if cases.contains(s) { times } else { 0 })
            .collect()
    };
    let reached = |want: Vec<usize>| {
        move |got: &[rumqttc::Publish]| counts(got).iter().zip(&want).all(|(n, w)| n >= w)
    };
    // NATS now and then starts delivering to a new QoS 1 subscription
    // (its JetStream consumer) only after its SUBACK, and then misses a
    // case published at once (about one run in three here). Such a case is
    // published once more; it then arrives on every subscription again,
    // so from then on its count may be up to twice what is wanted.
    let mut again: Vec<bool> = vec![false; all.len()];
    let mut verify = async |who: &str, conns: &mut [Mqtt], want: Vec<usize>| {
        let mut got = gather_until(conns, quiet, reached(want.clone())).await;
        let missing: Vec<usize> = counts(&got)
            .iter()
            .zip(&want)
            .enumerate()
            .filter(|(_, (n, w))| n < w)
            .map(|(k, _)| k)
            .collect();
        if !missing.is_empty() {
            eprintln!("{who}: cases {missing:?} missed, published again");
            for &k in &missing {
                again[k] = true;
                let topic = topic_of(all[k]);
                if let Err(e) = publisher.publish(&topic, k.to_string().as_bytes()).await {
                    panic!("publishing to {topic:?} failed: {e}\n{}", c.logs());
                }
            }
            got.extend(gather_until(conns, quiet, reached(want.clone())).await);
        }
        let mut wrong = Vec::new();
        for p in &got {
            let k: usize = std::str::from_utf8(&p.payload).unwrap().parse().unwrap();
            let s = all[k];
            if p.topic != topic_of(s) {
                wrong.push(format!("case {k} ({s:?}) arrived on {:?}", p.topic));
            } else if t.parse(&p.topic)
                != Some(Route::Event {
                    thing: s.to_string(),
                    event: s.to_string(),
                })
            {
                wrong.push(format!("case {k} ({s:?}) does not parse back"));
            }
        }
        for (k, (n, w)) in counts(&got).iter().zip(&want).enumerate() {
            let most = if again[k] { 2 * w } else { *w };
            if n < w || *n > most {
                wrong.push(format!(
                    "case {k} ({:?}) arrived {n} times, not {w}",
                    all[k]
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{who}:\n{}\n{}",
            wrong.join("\n"),
            c.logs()
        );
    };
    let named_refs: Vec<&String> = named.iter().collect();
    verify("QoS 1 exact filters", &mut exact1, wanted(&named_refs, 1)).await;
    // Each named case matches its `lmos/{thing}/events/+` and its
    // `lmos/+/events/{name}`: twice.
    verify("QoS 1 `+` filters", &mut plus1, wanted(&named_refs, 2)).await;
    verify(
        "QoS 0 exact filters",
        std::slice::from_mut(&mut exact0),
        wanted(&all, 1),
    )
    .await;
    verify(
        "QoS 1 lmos/+/events/+",
        std::slice::from_mut(&mut any),
        wanted(&all, 1),
    )
    .await;
    eprintln!("done after {:?}", started.elapsed());
}

/// Why the sidecar escapes `.`, space, `@`, `*` and `>` levels, and control
/// characters: what NATS 2.9 (Debian's) does with them unescaped. (2.10 and
/// later take a `.` in a topic; the escaping stays, for 2.9 clusters and the
/// native mode's subjects.) (Tab, CR and LF break
/// the cluster itself: `a_control_character_in_a_subscription_breaks_the_routes`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_nats_does_with_unescaped_levels() {
    let c = NatsCluster::start_on(3, nats::nats_server_of("v2.9.")).await;
    let raw = |thing: &str, name: &str| format!("lmos/{thing}/events/{name}");

    // `.` and space: the subscription is refused (SUBACK failure) and the
    // publisher is disconnected (a protocol error for NATS).
    for (k, level) in ["a.b", ".", "a b", " "].into_iter().enumerate() {
        // (A client ID that reconnects at once is "flapping" for NATS.)
        let mut sub = connect(&c, 0, &format!("dot-sub-{k}"), true).await;
        assert_eq!(
            sub.subscribe(&[&raw("t", level)]).await,
            Ok(vec![false]),
            "{level:?}"
        );
        let mut publisher = connect(&c, 2, &format!("dot-pub-{k}"), true).await;
        let r = publisher.publish(&raw("t", level), b"x").await;
        assert!(r.is_err(), "publishing to {level:?}: {r:?}");
    }

    // Form feed: the subscription is refused; the message is published.
    let mut sub = connect(&c, 0, "ff-sub", true).await;
    assert_eq!(
        sub.subscribe(&[&raw("t", "a\u{c}b")]).await,
        Ok(vec![false])
    );

    // `*` and `>` as a whole level: the exact filter is a NATS wildcard and
    // gets other things' messages too; `+` does not match a `>` level.
    let mut star = connect(&c, 0, "star-sub", true).await;
    let mut gt = connect(&c, 0, "gt-sub", true).await;
    let mut plus = connect(&c, 1, "plus-sub", true).await;
    assert_eq!(star.subscribe(&[&raw("*", "e")]).await, Ok(vec![true]));
    assert_eq!(gt.subscribe(&[&raw("gt", ">")]).await, Ok(vec![true]));
    assert_eq!(plus.subscribe(&[&raw("gt", "+")]).await, Ok(vec![true]));
    let mut publisher = connect(&c, 2, "wc-pub", true).await;
    for topic in [
        raw("*", "e"),
        raw("other", "e"),
        raw("gt", ">"),
        raw("gt", "x"),
    ] {
        publisher.publish(&topic, b"x").await.unwrap();
    }
    let topics_of = |v: Vec<rumqttc::Publish>| {
        let mut t: Vec<String> = v.into_iter().map(|p| p.topic).collect();
        t.sort();
        t
    };
    let quiet = Duration::from_secs(2);
    assert_eq!(
        topics_of(collect(&mut star, 3, quiet).await),
        [raw("*", "e"), raw("other", "e")],
        "`lmos/*/events/e` is a wildcard in NATS"
    );
    assert_eq!(
        topics_of(collect(&mut gt, 3, quiet).await),
        [raw("gt", ">"), raw("gt", "x")],
        "`lmos/gt/events/>` is a wildcard in NATS"
    );
    assert_eq!(
        topics_of(collect(&mut plus, 3, quiet).await),
        [raw("gt", "x")],
        "`+` does not match a `>` level in NATS"
    );

    // `@` in a QoS 1 message delivered to a QoS 1 subscription by a
    // JetStream consumer whose leader is on another node than the
    // subscriber: the message crosses a route with the original subject
    // appended to its reply after an `@`, and NATS splits there at the last
    // `@`: the message arrives on a wrong topic (`@` last) or is lost (`@`
    // inside). (A consumer led by the subscriber's own node delivers
    // correctly, so a subscription led elsewhere is looked for.)
    let mut found = None;
    for j in 0..20 {
        let mut at = connect(&c, 1, &format!("at-sub-{j}"), true).await;
        assert_eq!(at.subscribe(&[&format!("at{j}/+/+")]).await, Ok(vec![true]));
        match consumer_leader(&c, &format!("$MQTT.msgs.at{j}.*.*")) {
            Some(leader) if leader != c.name(1) => {
                found = Some((j, at));
                break;
            }
            Some(_) => {}
            None => panic!("no leader found for at{j}'s consumer\n{}", c.logs()),
        }
    }
    let (j, mut at) = found.expect("a consumer led by another node than the subscriber's");
    let sent = [
        format!("at{j}/t/x"),
        format!("at{j}/t/@"),
        format!("at{j}/t/a@b"),
        format!("at{j}/t/y"),
    ];
    for (k, topic) in sent.iter().enumerate() {
        publisher
            .publish(topic, k.to_string().as_bytes())
            .await
            .unwrap();
    }
    let got = collect(&mut at, 3, quiet).await;
    let by_payload: HashMap<String, String> = got
        .into_iter()
        .map(|p| (String::from_utf8(p.payload.to_vec()).unwrap(), p.topic))
        .collect();
    assert_eq!(by_payload.get("0"), Some(&sent[0]));
    assert_eq!(by_payload.get("3"), Some(&sent[3]));
    assert!(
        by_payload.get("1").is_some_and(|t| t != &sent[1]),
        "`@` as the last character: misaddressed ({:?})",
        by_payload.get("1")
    );
    assert_eq!(by_payload.get("2"), None, "`@` inside a level: lost");

    // Everything else in a level is carried as it is: `$` (leading too),
    // `%`, `:`, `*`/`>` inside a level, non-ASCII, an empty level, 10,000
    // characters.
    let long = "y".repeat(10_000);
    let fine = [
        "$",
        "$x",
        "%",
        "a:b",
        "a*b",
        "a>b",
        "ü😀",
        "\u{a0}",
        "",
        long.as_str(),
    ];
    let mut sub = connect(&c, 0, "fine-sub", true).await;
    let filters: Vec<String> = fine
        .iter()
        .map(|l| raw(&format!("f{}", l.len()), l))
        .collect();
    let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
    assert!(sub.subscribe(&refs).await.unwrap().iter().all(|g| *g));
    for f in &filters {
        publisher.publish(f, b"x").await.unwrap();
    }
    let got = topics_of(collect(&mut sub, fine.len(), quiet).await);
    let mut want = filters.clone();
    want.sort();
    assert_eq!(got, want);
}

/// On NATS 2.9 (Debian's), a tab (CR, LF likewise) in a subscribed topic
/// reaches the routes' text protocol: the other nodes refuse the subscription (`Invalid
/// Subscription`) and drop the route, again and again, and the cluster
/// (JetStream, then MQTT) stops working. The subscription itself is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_character_in_a_subscription_breaks_the_routes() {
    let c = NatsCluster::start_on(3, nats::nats_server_of("v2.9.")).await;
    let mut sub = connect(&c, 0, "tab-sub", true).await;
    let r = sub.subscribe(&["lmos/t/events/\t"]).await;
    assert!(!matches!(r, Ok(ref g) if g == &[true]), "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.logs().contains("Route Error 'Invalid Subscription'") {
        assert!(
            Instant::now() < deadline,
            "no route error within 10 s\n{}",
            c.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// QoS 1 messages published while a persistent session (clean session =
/// false) is disconnected are delivered when it reconnects, to another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_session_gets_what_was_published_while_away() {
    let c = NatsCluster::start(3).await;
    let t = topics();
    let thing = "urn:uuid:persistent";
    let mut sub = connect(&c, 0, "persistent", false).await;
    assert_eq!(
        sub.subscribe(&[&t.thing_events_filter(thing)]).await,
        Ok(vec![true])
    );
    sub.disconnect().await;

    let mut publisher = connect(&c, 2, "publisher", true).await;
    for k in 0..3 {
        publisher
            .publish(&t.event(thing, &format!("e{k}")), k.to_string().as_bytes())
            .await
            .unwrap();
    }
    let mut sub = connect(&c, 1, "persistent", false).await;
    assert!(sub.session_present, "the session survives on another node");
    let got = collect(&mut sub, 3, Duration::from_secs(20)).await;
    let got: Vec<String> = got.into_iter().map(|p| p.topic).collect();
    assert_eq!(
        got,
        (0..3)
            .map(|k| t.event(thing, &format!("e{k}")))
            .collect::<Vec<_>>()
    );
}

/// A persistent-session subscriber whose node is killed (SIGKILL) connects
/// to another node: its session, subscription and the QoS 1 messages
/// published meanwhile are there. The killed node comes back (same ports
/// and store) and serves MQTT again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_a_killed_node_resumes_on_another() {
    let mut c = NatsCluster::start(3).await;
    let t = topics();
    let thing = "urn:uuid:killed";
    let mut sub = connect(&c, 1, "survivor", false).await;
    assert_eq!(
        sub.subscribe(&[&t.thing_events_filter(thing)]).await,
        Ok(vec![true])
    );
    let mut publisher = connect(&c, 2, "publisher", true).await;
    publisher
        .publish(&t.event(thing, "before"), b"0")
        .await
        .unwrap();
    assert_eq!(
        sub.recv(Duration::from_secs(5)).await.map(|p| p.topic),
        Some(t.event(thing, "before"))
    );

    // With its node gone, JetStream elects new leaders; meanwhile a QoS 1
    // publish gets no PUBACK and NATS closes the publisher's connection
    // after 4 s (its JetStream API timeout). Publishers reconnect and
    // publish again, as the sidecar will.
    c.kill(1);
    let killed = Instant::now();
    for k in 1..=3 {
        let topic = t.event(thing, &format!("e{k}"));
        let mut attempt = 0;
        while let Err(e) = publisher.publish(&topic, k.to_string().as_bytes()).await {
            attempt += 1;
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "publishing with one node down: {e}\n{}",
                c.logs()
            );
            eprintln!(
                "publish {k} failed ({e}) {:?} after the kill",
                killed.elapsed()
            );
            publisher = connect_retrying(&c, 2, &format!("publisher-{k}-{attempt}"), true).await;
        }
    }
    eprintln!(
        "published with one node down {:?} after the kill",
        killed.elapsed()
    );
    sub.vanish();
    let mut sub = connect_retrying(&c, 0, "survivor", false).await;
    assert!(sub.session_present, "the session survives its node");
    let back = Instant::now();
    let expected: Vec<String> = (1..=3).map(|k| t.event(thing, &format!("e{k}"))).collect();
    let mut got: Vec<String> = gather_until(
        std::slice::from_mut(&mut sub),
        Duration::from_secs(20),
        |got| expected.iter().all(|e| got.iter().any(|p| p.topic == *e)),
    )
    .await
    .into_iter()
    .map(|p| p.topic)
    .collect();
    eprintln!(
        "{} delivered {:?} after reconnecting",
        got.len(),
        back.elapsed()
    );
    // A publish that timed out may have been stored nonetheless: QoS 1
    // allows the duplicate. So does "before": the subscriber acknowledged
    // it, but the acknowledgement may have died with its node, and an
    // unacknowledged QoS 1 message is delivered again.
    let before = t.event(thing, "before");
    got.retain(|topic| *topic != before);
    got.dedup();
    assert_eq!(got, expected);

    c.restart(1).await;
    let mut again = connect(&c, 1, "after-restart", true).await;
    assert_eq!(again.subscribe(&["restart/+"]).await, Ok(vec![true]));
    publisher.publish("restart/x", b"x").await.unwrap();
    assert_eq!(
        again.recv(Duration::from_secs(5)).await.map(|p| p.topic),
        Some("restart/x".to_owned())
    );
}
