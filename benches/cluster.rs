//! Cluster: what crossing between two sidecars through a real 3-node NATS
//! cluster costs, against the same traffic within one sidecar, for events
//! and for invocations, in both cluster modes: bridged to NATS's MQTT
//! listener (path `cross`) and in NATS's own protocol, core NATS only (path
//! `native`, `cluster.jetstream = false`) and with JetStream (path `js`:
//! events through the R3 stream, acknowledged both ways).
//! Each mode runs on a cluster of its own, one after the other (NATS maps
//! MQTT topics to the subjects the native link uses: on one cluster the
//! two pairs of sidecars would hear each other); a summary at the end puts
//! the crossing paths beside the local one.
//!
//! ```sh
//! cargo bench --bench cluster                               # about 4-5 min
//! CLUSTER_MODES=nats cargo bench --bench cluster            # core NATS only
//! CLUSTER_MODES=jetstream cargo bench --bench cluster       # JetStream only
//! CLUSTER_RATE=1000 CLUSTER_EVENTS=20000 cargo bench --bench cluster
//! CLUSTER_SCENARIOS=serial,parallel cargo bench --bench cluster
//! CLUSTER_NODELAY=1 cargo bench --bench cluster             # clients without Nagle
//! ```
//!
//! Needs `nats-server` on PATH (`apt-get install -y nats-server`); the
//! cluster is the tests' harness (`lmos_testkit::nats`): three nodes on
//! 127.0.0.1 with JetStream and their MQTT listeners, the MQTT streams
//! replicated on all three. Everything else runs in this process: sidecar
//! A bridged to node 0 and sidecar B bridged to node 1 (`cluster.url`),
//! each ready (`GET /readyz` says `ready`: its bridge's subscriptions are
//! live in the cluster) before anything is measured.
//!
//! Settings (environment): CLUSTER_MODES (mqtt,nats,jetstream), CLUSTER_RATE events
//! per second in the bridge's paced pass (500), CLUSTER_NATIVE_RATE in the
//! native one (5000), CLUSTER_PACED_SECS its length (10), CLUSTER_EVENTS events in
//! the flood pass (10000), CLUSTER_EVENT_INFLIGHT the event publisher's
//! QoS 1 window (100), CLUSTER_SERIAL invocations in the serial pass (200),
//! CLUSTER_INVOCATIONS in the parallel pass (2000), CLUSTER_INFLIGHT
//! invocations in flight in the parallel pass (32), CLUSTER_NODELAY=1 to
//! have the bench's own clients set TCP_NODELAY (0),
//! CLUSTER_JETSTREAM_STORAGE=memory for `cluster.jetstream_storage =
//! "memory"` in the `js` rows (file), CLUSTER_SCENARIOS a
//! comma list of the passes to run (paced,flood,serial,parallel). The
//! default rate is moderate for this cluster: on two shared cores NATS
//! alone carries roughly 700 to 1600 QoS 1 messages per second from one
//! node to another (the flood's `nats` row), so 1000/s is close to
//! saturation.
//!
//! **Events.** A publisher on A's MQTT port, as an agent would, sends QoS 1
//! `event`s on `lmos/{thing}/events/{name}`, each with its sequence number
//! and send time (nanoseconds since a start shared by the whole process)
//! in `data`. Two consumers receive them: a WebSocket consumer
//! (`subscribeEvent`) and an MQTT 3.1.1 QoS 1 subscriber, both on B (path
//! `cross`) or both on A (path `local`), one path after the other, each
//! with an event name of its own. Both bridges carry every event into the
//! cluster and back out in either path: only where the consumers sit
//! differs. Path `nats` is the cluster alone for reference: the same
//! publisher on node 0's MQTT port, the MQTT subscriber on node 1's, on a
//! topic outside the LMOS ones (which the bridges would carry too). Before
//! a path is measured, warm-up events (ignored by the tally) are sent
//! every 250 ms until each consumer has received one; before each
//! path, a marker event from A must reach B, so the bridges have drained
//! what earlier passes left (reported when that took over a second).
//! - paced: CLUSTER_RATE events per second (latency under moderate load);
//! - flood: as fast as the publisher goes with CLUSTER_EVENT_INFLIGHT
//!   unacknowledged (throughput; latencies are then mostly queueing).
//!
//! **Invocations.** An MQTT agent on A (`mqtt_agent` of the tests: retained
//! presence, subscribed to `lmos/{thing}/agent/requests/+`) answers each
//! `invokeAction` with an `actionStatus` `running`, then `completed` (with
//! the input as output), on `lmos/{thing}/agent/replies` with the
//! request's `correlationID`, without waiting for PUBACKs. B learns of the
//! agent from the bridged presence. A WebSocket consumer on B (`cross`) or
//! on A (`local`) sends `invokeAction`s, keeping K in flight; latency is
//! from sending one to receiving its `completed`. Ten warm-up invocations
//! precede each path.
//! - serial: K = 1 (latency);
//! - parallel: K = CLUSTER_INFLIGHT (throughput).
//!
//! Columns: msgs what arrived (distinct events; invocations completed);
//! msg/s that per second from the first send to the last arrival; p50,
//! p99, max latency in ms; lost what never arrived (for invocations: not
//! completed, answered with an error or nothing); dup events received
//! twice (invocations: `completed` twice, or a request the agent got
//! twice). Under each pass, the ratios cross ÷ local (and cross ÷ nats) of
//! msg/s, p50 and p99. Loss, early ends, unacknowledged publishes and the
//! warnings and errors logged (the broker's muted) are printed under the
//! rows. Any event lost by a consumer, publish left unacknowledged or
//! invocation that did not complete makes the bench exit with status 1.
//!
//! By default the clients keep their TCP defaults, as fanout's do. Neither
//! rumqttd (on the sockets it accepts) nor rumqttc (the bridge's clients,
//! and the tests' `mqtt_agent`) sets TCP_NODELAY, so on loopback a small
//! packet written while an earlier one is unacknowledged can wait for a
//! delayed ACK (about 40 ms): request/reply round trips show it, a steady
//! stream much less. CLUSTER_NODELAY=1 takes the bench's own clients out
//! of it (the agent is then connected as `mqtt_agent` would, with
//! TCP_NODELAY); the sidecars' own sockets stay as they are. The
//! sidecars, the clients and the three NATS servers share this machine's
//! cores.

use lmos_testkit as common;
use lmos_testkit::nats;

use lmos_testkit::bench as support;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::{http, mqtt_agent, test_config, TestSidecar};
use futures_util::StreamExt;
use nats::NatsCluster;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use support::{env_or, now_ns, receive, secs, subscribed_feed, ws_send, Feed, Ws, BASE};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, timeout_at, Instant as Deadline};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, http::HeaderValue, Message};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The Thing whose events are measured.
const THING: &str = "urn:bench:cluster-sensor";
/// The Thing the MQTT agent on A hosts.
const AGENT_THING: &str = "urn:bench:cluster-agent";
/// Longest any connect, SUBACK or barrier may take.
const SETUP: Duration = Duration::from_secs(10);
/// Longest a bridge may take to subscribe in the cluster, and a path to
/// carry its first event or invocation.
const LINK: Duration = Duration::from_secs(60);
/// A consumer that receives nothing for this long stops and reports.
const STALL: Duration = Duration::from_secs(10);
/// Longest a pass may take beyond its publishing time.
const DRAIN: Duration = Duration::from_secs(60);
/// Longest the bridges may take to drain what earlier passes left.
const SETTLE: Duration = Duration::from_secs(120);
const WARM_EVERY: Duration = Duration::from_millis(250);
const WARM_INVOCATIONS: usize = 10;

/// CLUSTER_NODELAY=1: the bench's own clients set TCP_NODELAY.
static NODELAY: LazyLock<bool> = LazyLock::new(|| env_or("CLUSTER_NODELAY", 0) != 0);

// ----- figures -----

/// One row of the table.
#[derive(Clone)]
struct Row {
    scenario: String,
    path: &'static str,
    consumer: &'static str,
    msgs: u64,
    rate: f64,
    /// Latencies in ns, sorted.
    lat: Vec<u64>,
    lost: u64,
    dups: u64,
    notes: Vec<String>,
}

impl Row {
    fn ms(&self, p: f64) -> Option<f64> {
        let i = ((self.lat.len() as f64 * p) as usize).min(self.lat.len().checked_sub(1)?);
        Some(self.lat[i] as f64 / 1e6)
    }

    fn print(&self) {
        let ms = |p| self.ms(p).map_or("-".into(), |v| format!("{v:.2}"));
        println!(
            "{:<18} {:<6} {:<9} {:>8} {:>9.0} {:>8} {:>8} {:>8} {:>6} {:>5}",
            self.scenario,
            self.path,
            self.consumer,
            self.msgs,
            self.rate,
            ms(0.5),
            ms(0.99),
            ms(1.0),
            self.lost,
            self.dups
        );
        for note in &self.notes {
            println!("    {note}");
        }
    }
}

fn print_header() {
    println!(
        "{:<18} {:<6} {:<9} {:>8} {:>9} {:>8} {:>8} {:>8} {:>6} {:>5}",
        "scenario",
        "path",
        "consumer",
        "msgs",
        "msg/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "lost",
        "dup"
    );
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    a.zip(b.filter(|b| *b > 0.0))
        .map_or("n/a".into(), |(a, b)| format!("{:.2}", a / b))
}

/// The ratios of the cross path's figures to the local path's (and to
/// NATS alone's), per consumer.
fn print_ratios(rows: &[Row]) {
    for cross in rows.iter().filter(|r| !matches!(r.path, "local" | "nats")) {
        for base in ["local", "nats"] {
            let other = rows
                .iter()
                .find(|r| r.path == base && r.consumer == cross.consumer);
            let Some(other) = other else { continue };
            println!(
                "  {}/{base:<5} {:<9}  msg/s {}  p50 {}  p99 {}",
                cross.path,
                cross.consumer,
                ratio(Some(cross.rate), Some(other.rate)),
                ratio(cross.ms(0.5), other.ms(0.5)),
                ratio(cross.ms(0.99), other.ms(0.99)),
            );
        }
    }
}

// ----- event consumers -----

async fn ws_connect(url: &str) -> Result<Ws> {
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    let connect = tokio_tungstenite::connect_async_with_config(request, None, *NODELAY);
    let (ws, _) = timeout(SETUP, connect)
        .await
        .with_context(|| format!("no WebSocket handshake with {url} within {SETUP:?}"))??;
    Ok(ws)
}

/// Connects and subscribes to THING's event `name`, then waits until that
/// is live: a retained reading on a fresh Thing, observed over the same
/// connection, comes back only after the commands sent before it.
async fn ws_consumer(url: &str, name: &str) -> Result<Feed> {
    let ws = ws_connect(url).await?;
    let subscribe = json!({"thingID": THING, "messageType": "subscribeEvent", "event": name, "correlationID": "bench"});
    subscribed_feed(ws, subscribe, SETUP).await
}

type Mqtt = (AsyncClient, EventLoop);

fn nodelay(eventloop: &mut EventLoop) {
    if *NODELAY {
        let mut network = rumqttc::NetworkOptions::new();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
    }
}

/// An MQTT client that has seen its CONNACK and, with a filter, its SUBACK.
async fn mqtt_client(
    addr: SocketAddr,
    id: &str,
    filter: Option<&str>,
    inflight: u16,
) -> Result<Mqtt> {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_inflight(inflight);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    nodelay(&mut eventloop);
    if let Some(f) = filter {
        client.subscribe(f, QoS::AtLeastOnce).await?;
    }
    timeout(SETUP, async {
        loop {
            match eventloop.poll().await? {
                Event::Incoming(Packet::ConnAck(_)) if filter.is_none() => return anyhow::Ok(()),
                Event::Incoming(Packet::SubAck(_)) => return Ok(()),
                _ => {}
            }
        }
    })
    .await
    .with_context(|| format!("no CONNACK/SUBACK from {addr} within {SETUP:?}"))??;
    Ok((client, eventloop))
}

/// An MQTT QoS 1 subscriber to `topic`, live once this returns.
async fn mqtt_consumer(addr: SocketAddr, id: &str, topic: &str) -> Result<Feed> {
    let state = mqtt_client(addr, id, Some(topic), 100).await?;
    let events = futures_util::stream::unfold(state, |(client, mut el)| async {
        Some((el.poll().await, (client, el)))
    });
    Ok(Box::pin(events.map(|event| match event {
        Ok(Event::Incoming(Packet::Publish(p))) => Ok(Some(p.payload)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("error: {e}")),
    })))
}

// ----- event passes -----

fn event_payload(name: &str, data: String) -> String {
    let id = uuid::Uuid::new_v4();
    format!(
        r#"{{"thingID":"{THING}","messageID":"{id}","messageType":"event","event":"{name}","data":{data},"timestamp":"2025-01-20T19:00:00Z"}}"#
    )
}

/// A publisher on A: the client, and a task polling its connection that
/// counts PUBACKs and keeps the error that ended it.
struct Publisher {
    client: AsyncClient,
    sent: AtomicU64,
    acked: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    pump: JoinHandle<()>,
}

impl Publisher {
    async fn connect(addr: SocketAddr, id: &str, inflight: u16) -> Result<Publisher> {
        let (client, eventloop) = mqtt_client(addr, id, None, inflight).await?;
        let support::AckPump {
            acked,
            failed,
            task: pump,
        } = support::AckPump::spawn(eventloop);
        Ok(Publisher {
            client,
            sent: AtomicU64::new(0),
            acked,
            failed,
            pump,
        })
    }

    async fn publish(&self, topic: &str, payload: String) -> Result<()> {
        if let Some(e) = self.failed.lock().unwrap().clone() {
            bail!("the publisher's connection failed: {e}");
        }
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload)
            .await?;
        self.sent.fetch_add(1, Relaxed);
        Ok(())
    }

    async fn close(self) {
        let _ = self.client.try_disconnect();
        sleep(Duration::from_millis(50)).await;
        self.pump.abort();
    }
}

/// Sends warm-up events every WARM_EVERY until each feed has received one;
/// how long that took.
async fn warm_up(
    publisher: &Publisher,
    topic: &str,
    name: &str,
    feeds: &mut [Feed],
) -> Result<f64> {
    let start = Instant::now();
    let mut warmed = vec![false; feeds.len()];
    let mut k = 0u64;
    while warmed.contains(&false) {
        if start.elapsed() > LINK {
            bail!("no warm-up event reached every consumer within {LINK:?} ({warmed:?})");
        }
        let payload = event_payload(name, format!(r#"{{"warm":{k}}}"#));
        publisher.publish(topic, payload).await?;
        k += 1;
        let until = Deadline::now() + WARM_EVERY;
        for (i, feed) in feeds.iter_mut().enumerate() {
            while !warmed[i] {
                match timeout_at(until, feed.next()).await {
                    Ok(Some(Ok(Some(p)))) => {
                        let v: Value = serde_json::from_slice(&p).unwrap_or_default();
                        warmed[i] = !v["data"]["warm"].is_null();
                    }
                    Ok(Some(Ok(None))) => {}
                    Ok(Some(Err(e))) => bail!("consumer {i} ended while warming up: {e}"),
                    Ok(None) => bail!("consumer {i} ended while warming up"),
                    Err(_) => break,
                }
            }
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

#[derive(Clone, Copy)]
enum Pace {
    /// Events per second.
    Rate(f64),
    Flood,
}

/// Where an event path's publisher and consumers connect.
struct Ends {
    path: &'static str,
    /// The publisher's MQTT port.
    publish: SocketAddr,
    /// The WebSocket consumer's sidecar, if any.
    ws: Option<String>,
    /// The MQTT subscriber's port.
    subscribe: SocketAddr,
    /// The topic's first levels: `lmos/{thing}/events` on the sidecars;
    /// outside the LMOS topics directly on NATS, where the bridges would
    /// otherwise carry the events too.
    topic_base: String,
}

/// One path of an event pass: a row per consumer, and whether nothing was
/// lost.
async fn event_path(
    scenario: &str,
    ends: &Ends,
    m: usize,
    pace: Pace,
    inflight: u16,
) -> Result<(Vec<Row>, bool)> {
    let path = ends.path;
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let tag = format!("{}-{path}", scenario.split(' ').next().unwrap_or("events"));
    let name = format!("{tag}-{}", &unique[..8]);
    let topic = format!("{}/{name}", ends.topic_base);
    let mut feeds = Vec::new();
    let mut consumers = Vec::new();
    if let Some(url) = &ends.ws {
        let feed = ws_consumer(url, &name).await;
        feeds.push(feed.context("the WebSocket consumer")?);
        consumers.push("WebSocket");
    }
    let feed = mqtt_consumer(ends.subscribe, &format!("{name}-sub"), &topic).await;
    feeds.push(feed.context("the MQTT subscriber")?);
    consumers.push("MQTT QoS1");
    let publisher = Publisher::connect(ends.publish, &format!("{name}-pub"), inflight).await?;
    let warm = warm_up(&publisher, &topic, &name, &mut feeds).await?;

    let publishing = match pace {
        Pace::Rate(r) => Duration::from_secs_f64(m as f64 / r),
        // Allow for a cluster carrying no more than 200 a second.
        Pace::Flood => Duration::from_secs_f64(m as f64 / 200.0),
    };
    let deadline = Deadline::now() + publishing + DRAIN;
    let start_ns = now_ns();
    let readers: Vec<_> = feeds
        .into_iter()
        .map(|feed| tokio::spawn(receive(m, deadline, STALL, feed)))
        .collect();
    let mut notes = vec![format!(
        "warm-up: the first event reached every consumer after {warm:.2} s"
    )];
    let published = timeout_at(deadline, async {
        let start = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut seq = 0;
        while seq < m {
            let target = match pace {
                Pace::Rate(r) => {
                    tick.tick().await;
                    ((start.elapsed().as_secs_f64() * r) as usize).min(m)
                }
                Pace::Flood => m,
            };
            while seq < target {
                let data = format!(r#"{{"seq":{seq},"sent":{}}}"#, now_ns());
                publisher
                    .publish(&topic, event_payload(&name, data))
                    .await?;
                seq += 1;
            }
        }
        anyhow::Ok(m as f64 / start.elapsed().as_secs_f64())
    })
    .await;
    let mut ok = true;
    match published {
        Ok(Ok(rate)) => notes.push(format!("publisher: {m} events at {rate:.0}/s")),
        Ok(Err(e)) => {
            ok = false;
            notes.push(format!("FAIL publisher: {e:#}"));
        }
        Err(_) => {
            ok = false;
            notes.push("FAIL publisher: unfinished at the deadline".into());
        }
    }
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    // Every publish (warm-up ones included) has its PUBACK by now, or
    // never will.
    let sent = publisher.sent.load(Relaxed);
    let ack_wait = Deadline::now() + Duration::from_secs(5);
    while publisher.acked.load(Relaxed) < sent && Deadline::now() < ack_wait {
        sleep(Duration::from_millis(10)).await;
    }
    let acked = publisher.acked.load(Relaxed);
    if acked < sent {
        ok = false;
        notes.push(format!(
            "FAIL: {} of {sent} publishes never acknowledged",
            sent - acked
        ));
    }
    publisher.close().await;

    let mut rows = Vec::new();
    for (consumer, mut t) in consumers.into_iter().zip(tallies) {
        let lost = m as u64 - t.unique;
        let mut row_notes = std::mem::take(&mut notes);
        if lost > 0 {
            ok = false;
            row_notes.push(format!("FAIL: lost {lost}: {} ({})", t.gaps(), t.ending));
        } else if t.ending != "complete" {
            row_notes.push(t.ending.clone());
        }
        if t.other > 0 {
            row_notes.push(format!(
                "{} messages that were not the bench's events",
                t.other
            ));
        }
        t.latencies.sort_unstable();
        rows.push(Row {
            scenario: scenario.to_owned(),
            path,
            consumer,
            msgs: t.unique,
            rate: t.unique as f64 / secs(start_ns, t.last_ns),
            lat: t.latencies,
            lost,
            dups: t.dups,
            notes: row_notes,
        });
    }
    Ok((rows, ok))
}

// ----- invocations -----

/// What the agent saw: requests, and requests it had seen before (by the
/// consumer's messageID, which the router keeps).
#[derive(Default)]
struct AgentSeen {
    requests: u64,
    repeated: u64,
    ids: HashSet<String>,
    /// The `input.n` of the measured invocations it got (the warm-up ones
    /// carry `input.warm`); cleared at the start of each pass.
    inputs: HashSet<u64>,
}

/// Serves `invokeAction`s: `running`, then `completed` with the input as
/// output, until the connection ends.
fn serve(
    client: AsyncClient,
    mut requests: mpsc::UnboundedReceiver<rumqttc::Publish>,
    seen: Arc<Mutex<AgentSeen>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let replies = format!("lmos/{AGENT_THING}/agent/replies");
        while let Some(p) = requests.recv().await {
            let v: Value = serde_json::from_slice(&p.payload).unwrap_or_default();
            if v["messageType"] != "invokeAction" {
                continue;
            }
            {
                let mut seen = seen.lock().unwrap();
                seen.requests += 1;
                let id = v["messageID"].as_str().unwrap_or_default().to_owned();
                if !seen.ids.insert(id) {
                    seen.repeated += 1;
                }
                if let Some(n) = v["input"]["n"].as_u64() {
                    seen.inputs.insert(n);
                }
            }
            for status in ["running", "completed"] {
                let mut reply = json!({"thingID": AGENT_THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "actionStatus", "action": v["action"], "status": status, "correlationID": v["correlationID"]});
                if status == "completed" {
                    reply["output"] = v["input"].clone();
                }
                let publish = client.publish(&replies, QoS::AtLeastOnce, false, reply.to_string());
                if publish.await.is_err() {
                    return;
                }
            }
        }
    })
}

/// What `mqtt_agent` of the tests does (a last will saying offline on its
/// retained presence topic, a subscription to its requests, then online),
/// with TCP_NODELAY set.
async fn nodelay_agent(
    addr: SocketAddr,
    id: &str,
    thing: &str,
) -> Result<(AsyncClient, mpsc::UnboundedReceiver<rumqttc::Publish>)> {
    let presence = format!("lmos/{thing}/agent/status");
    let offline = json!({"thingID": thing, "status": "offline"}).to_string();
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_last_will(rumqttc::LastWill::new(
        &presence,
        offline,
        QoS::AtLeastOnce,
        true,
    ));
    let (client, mut eventloop) = AsyncClient::new(options, 1000);
    nodelay(&mut eventloop);
    client
        .subscribe(format!("lmos/{thing}/agent/requests/+"), QoS::AtLeastOnce)
        .await?;
    let online = json!({"thingID": thing, "status": "online"}).to_string();
    client
        .publish(&presence, QoS::AtLeastOnce, true, online)
        .await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = tx.send(p);
                }
                // Subscribed, then online: in order on one connection.
                Ok(Event::Incoming(Packet::PubAck(_))) => {
                    if let Some(r) = ready_tx.take() {
                        let _ = r.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    timeout(SETUP, ready)
        .await
        .with_context(|| format!("the agent was not online on {addr} within {SETUP:?}"))??;
    Ok((client, rx))
}

fn invoke(correlation: &str, input: Value) -> Value {
    json!({"thingID": AGENT_THING, "messageType": "invokeAction", "action": "echo", "input": input, "correlationID": correlation})
}

/// Invokes until WARM_INVOCATIONS have completed (retrying while the
/// sidecar does not know the agent yet); how long the first took.
async fn warm_invocations(ws: &mut Ws) -> Result<f64> {
    let start = Instant::now();
    let mut first = None;
    let mut done = 0;
    let mut k = 0u64;
    while done < WARM_INVOCATIONS {
        if start.elapsed() > LINK {
            bail!("{done} warm-up invocations completed within {LINK:?}");
        }
        k += 1;
        let correlation = format!("warm-{k}");
        ws_send(ws, invoke(&correlation, json!({ "warm": k }))).await?;
        let answered = timeout(SETUP + SETUP, async {
            while let Some(frame) = ws.next().await {
                let Message::Text(text) = frame? else {
                    continue;
                };
                let v: Value = serde_json::from_str(&text).unwrap_or_default();
                if v["correlationID"] != correlation.as_str() {
                    continue;
                }
                if v["messageType"] == "actionStatus" && v["status"] == "running" {
                    continue;
                }
                return anyhow::Ok(v);
            }
            bail!("the connection ended")
        })
        .await
        .context("a warm-up invocation went unanswered")??;
        if answered["status"] == "completed" {
            done += 1;
            first.get_or_insert(start.elapsed().as_secs_f64());
        } else {
            sleep(WARM_EVERY).await;
        }
    }
    Ok(first.unwrap_or_default())
}

/// One path of an invocation pass: `n` invocations from a WebSocket
/// consumer on `sidecar`, `k` in flight.
async fn invocation_path(
    scenario: &str,
    path: &'static str,
    sidecar: &TestSidecar,
    agent: &Mutex<AgentSeen>,
    n: usize,
    k: usize,
) -> Result<(Row, bool)> {
    let mut ws = ws_connect(&sidecar.ws_url()).await?;
    let warm = warm_invocations(&mut ws).await?;
    let agent_before = {
        let mut seen = agent.lock().unwrap();
        seen.inputs.clear();
        (seen.requests, seen.repeated)
    };
    // Per invocation: when it was sent, and 0 (waiting), 1 (running) or
    // 2 (completed).
    let mut sent = vec![0u64; n];
    let mut state = vec![0u8; n];
    let (mut next, mut outstanding, mut completed, mut failed, mut dups) = (0, 0, 0u64, 0u64, 0);
    let mut latencies = Vec::with_capacity(n);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    // Failed invocations: index, state before, the answer.
    let mut unanswered: Vec<(usize, u8, String)> = Vec::new();
    let (start_ns, mut last_ns) = (now_ns(), now_ns());
    let deadline = Deadline::now() + DRAIN + Duration::from_secs(n as u64 / 100);
    let ending = loop {
        while outstanding < k && next < n {
            sent[next] = now_ns();
            let input = json!({ "n": next });
            ws_send(&mut ws, invoke(&format!("inv-{next}"), input)).await?;
            next += 1;
            outstanding += 1;
        }
        if outstanding == 0 {
            break "complete".to_owned();
        }
        // A request that the agent's answer never followed is failed by the
        // sidecar after `requests.timeout_ms`; wait beyond that.
        let stall = STALL.max(Duration::from_millis(test_config().requests.timeout_ms) + SETUP / 2);
        let frame = match timeout_at(deadline.min(Deadline::now() + stall), ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => text,
            Ok(Some(Ok(Message::Close(f)))) => break format!("closed by the sidecar: {f:?}"),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => break format!("error: {e}"),
            Ok(None) => break "connection ended".into(),
            Err(_) => break format!("stalled: nothing for {stall:?} or past the deadline"),
        };
        let now = now_ns();
        let v: Value = serde_json::from_str(&frame).unwrap_or_default();
        let i = v["correlationID"]
            .as_str()
            .and_then(|c| c.strip_prefix("inv-"))
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|&i| i < n);
        let Some(i) = i else { continue };
        match (v["messageType"].as_str(), v["status"].as_str()) {
            (Some("actionStatus"), Some("running")) => state[i] = state[i].max(1),
            (Some("actionStatus"), Some("completed")) if state[i] == 2 => dups += 1,
            (Some("actionStatus"), Some("completed")) => {
                state[i] = 2;
                completed += 1;
                outstanding -= 1;
                latencies.push(now.saturating_sub(sent[i]));
                last_ns = now;
            }
            _ if state[i] == 2 => dups += 1,
            _ => {
                // An error, or a status other than completed: it failed.
                unanswered.push((i, state[i], v.to_string()));
                state[i] = 2;
                failed += 1;
                outstanding -= 1;
                let what = format!(
                    "{} {}",
                    v["messageType"].as_str().unwrap_or("?"),
                    v["status"].as_str().or(v["title"].as_str()).unwrap_or("")
                );
                *errors.entry(what).or_default() += 1;
            }
        }
    };
    let _ = ws.close(None).await;
    // Late duplicates reach the agent after the last completion, if at all.
    sleep(Duration::from_millis(200)).await;
    let (agent_requests, agent_repeated) = {
        let seen = agent.lock().unwrap();
        (
            seen.requests - agent_before.0,
            seen.repeated - agent_before.1,
        )
    };
    let lost = n as u64 - completed;
    let mut notes = vec![format!(
        "warm-up: the first invocation completed after {warm:.2} s"
    )];
    if agent_requests != completed + failed || agent_repeated > 0 {
        notes.push(format!(
            "the agent got {agent_requests} requests ({agent_repeated} it had seen before) for {n} invocations"
        ));
    }
    for (what, count) in &errors {
        notes.push(format!("{count}x answered {what}"));
    }
    // What became of the invocations that did not complete, and whether
    // their request reached the agent.
    let pending = (0..next)
        .filter(|&i| state[i] < 2)
        .map(|i| (i, state[i], String::new()));
    let troubled: Vec<_> = unanswered.into_iter().chain(pending).collect();
    {
        let seen = agent.lock().unwrap();
        for (i, before, answer) in troubled.iter().take(5) {
            let got = if seen.inputs.contains(&(*i as u64)) {
                "got"
            } else {
                "never got"
            };
            let running = if *before == 1 {
                "`running` arrived"
            } else {
                "no `running`"
            };
            let answer = if answer.is_empty() {
                "no answer".into()
            } else {
                format!("then {answer}")
            };
            notes.push(format!(
                "inv-{i}: the agent {got} the request; {running}, {answer}"
            ));
        }
    }
    let ok = lost == 0;
    if !ok {
        notes.push(format!(
            "FAIL: {lost} of {n} invocations did not complete ({failed} failed, {} never sent); {ending}",
            n - next
        ));
    } else if ending != "complete" {
        notes.push(ending);
    }
    latencies.sort_unstable();
    Ok((
        Row {
            scenario: scenario.to_owned(),
            path,
            consumer: "WebSocket",
            msgs: completed,
            rate: completed as f64 / secs(start_ns, last_ns),
            lat: latencies,
            lost,
            dups: dups + agent_repeated,
            notes,
        },
        ok,
    ))
}

// ----- set-up -----

/// Waits until A's bridge has carried to B everything published on A so
/// far: a marker event published on A after it reaches an MQTT subscriber
/// on B (the bridge keeps the order). How long that took, in seconds.
async fn settle(a: &TestSidecar, b: &TestSidecar) -> Result<f64> {
    let start = Instant::now();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("lmos/{THING}/events/settle");
    let mut feed = mqtt_consumer(b.mqtt, &format!("settle-{id}"), &topic).await?;
    let publisher = Publisher::connect(a.mqtt, &format!("settle-pub-{id}"), 10).await?;
    let deadline = Deadline::now() + SETTLE;
    let mut again = Deadline::now();
    loop {
        if Deadline::now() >= again {
            let marker = event_payload("settle", format!(r#"{{"marker":"{id}"}}"#));
            publisher.publish(&topic, marker).await?;
            again += Duration::from_secs(5);
        }
        match timeout_at(again.min(deadline), feed.next()).await {
            Ok(Some(Ok(Some(p)))) if p.windows(id.len()).any(|w| w == id.as_bytes()) => break,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => bail!("settling: the subscriber on B failed: {e}"),
            Ok(None) => bail!("settling: the subscriber on B ended"),
            Err(_) if Deadline::now() >= deadline => {
                bail!("a marker from A did not reach B within {SETTLE:?}")
            }
            Err(_) => {}
        }
    }
    publisher.close().await;
    Ok(start.elapsed().as_secs_f64())
}

/// The MQTT streams NATS keeps (as node 0 sees them): how much they hold.
fn mqtt_streams(cluster: &NatsCluster) -> Vec<String> {
    let Some(jsz) = cluster.monitor(0, "/jsz?streams=true&config=true") else {
        return vec!["NATS: no /jsz from node 0".into()];
    };
    let accounts = jsz["account_details"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let streams = accounts
        .iter()
        .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default());
    streams
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("$MQTT")))
        .map(|s| {
            format!(
                "NATS stream {}: leader {}, {} messages, {:.1} MiB (retention {}, storage {}, replicas {})",
                s["name"].as_str().unwrap_or("?"),
                s["cluster"]["leader"].as_str().unwrap_or("?"),
                s["state"]["messages"],
                s["state"]["bytes"].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0),
                s["config"]["retention"],
                s["config"]["storage"],
                s["config"]["num_replicas"],
            )
        })
        .collect()
}

/// How the sidecars reach each other in a pass of the bench.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `cluster.mode = "mqtt"`, through NATS's MQTT listener.
    Bridge,
    /// `cluster.mode = "nats"`, NATS's own protocol, core NATS only
    /// (`cluster.jetstream = false`).
    Native,
    /// `cluster.mode = "nats"` with `cluster.jetstream = true`: events
    /// through the R3 stream, state in the buckets.
    JetStream,
}

impl Mode {
    /// The crossing path's name in the table.
    fn cross(self) -> &'static str {
        match self {
            Mode::Bridge => "cross",
            Mode::Native => "native",
            Mode::JetStream => "js",
        }
    }
}

/// A sidecar linked to node `node`, ready: its link subscribed in the
/// cluster.
async fn bridged(
    cluster: &NatsCluster,
    node: usize,
    name: &str,
    mode: Mode,
) -> Result<TestSidecar> {
    let mut c = test_config();
    c.sidecar.thing_id = format!("urn:lmos:sidecar-{name}");
    c.sidecar.shutdown_grace_ms = 1_000;
    c.cluster.url = match mode {
        Mode::Bridge => format!("mqtt://{}", cluster.mqtt_addr(node)),
        Mode::Native | Mode::JetStream => {
            c.cluster.mode = lmos_sidecar::config::ClusterMode::Nats;
            c.cluster.jetstream = mode == Mode::JetStream;
            if std::env::var("CLUSTER_JETSTREAM_STORAGE").as_deref() == Ok("memory") {
                c.cluster.jetstream_storage = lmos_sidecar::config::StreamStorage::Memory;
            }
            format!("nats://{}", cluster.client_addr(node))
        }
    };
    c.cluster.keep_alive_s = 60;
    c.log.filter = "off".into();
    let sidecar = TestSidecar::start_with(c).await;
    let linked = async {
        while http(sidecar.http, "GET", "/readyz", None, b"").await.body != "ready\n" {
            sleep(Duration::from_millis(100)).await;
        }
    };
    timeout(LINK, linked)
        .await
        .with_context(|| format!("sidecar {name} not ready within {LINK:?}"))?;
    Ok(sidecar)
}

/// Waits until `sidecar` knows of the agent on A.
async fn wait_hosted(sidecar: &TestSidecar) -> Result<()> {
    let deadline = Deadline::now() + LINK;
    while sidecar.gateway.stats().await.hosted_things < 1 {
        if Deadline::now() > deadline {
            bail!("the agent's presence did not reach the sidecar within {LINK:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Warnings and errors logged in this process, counted by level, target
/// and message.
static LOGGED: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

struct CountLogged;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountLogged {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Msg(String);
        impl tracing::field::Visit for Msg {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut msg = Msg(String::new());
        event.record(&mut msg);
        let meta = event.metadata();
        let key = format!("{} {}: {}", meta.level(), meta.target(), msg.0);
        *LOGGED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }
}

/// What was logged since the last call, one line per kind.
fn take_logged() -> Vec<String> {
    let logged = std::mem::take(&mut *LOGGED.lock().unwrap_or_else(|e| e.into_inner()));
    logged
        .into_iter()
        .map(|(what, count)| format!("logged {count}x {what}"))
        .collect()
}

const SCENARIOS: [&str; 4] = ["paced", "flood", "serial", "parallel"];

fn selected() -> Result<Vec<&'static str>> {
    let Ok(list) = std::env::var("CLUSTER_SCENARIOS") else {
        return Ok(SCENARIOS.to_vec());
    };
    let chosen = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match SCENARIOS.iter().find(|n| **n == s) {
            Some(n) => Ok(*n),
            None => bail!(
                "CLUSTER_SCENARIOS: unknown `{s}`; use {}",
                SCENARIOS.join(",")
            ),
        })
        .collect::<Result<Vec<_>>>()?;
    if chosen.is_empty() {
        bail!("CLUSTER_SCENARIOS is empty; use {}", SCENARIOS.join(","));
    }
    Ok(chosen)
}

/// The bench's settings, from the environment.
struct Settings {
    m: usize,
    /// Events per second in the paced pass, per mode.
    rate: usize,
    native_rate: usize,
    paced_secs: usize,
    serial: usize,
    event_inflight: u16,
    n: usize,
    k: usize,
    scenarios: Vec<&'static str>,
}

fn modes() -> Result<Vec<Mode>> {
    let list = std::env::var("CLUSTER_MODES").unwrap_or_else(|_| "mqtt,nats,jetstream".into());
    let chosen = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "mqtt" => Ok(Mode::Bridge),
            "nats" => Ok(Mode::Native),
            "jetstream" => Ok(Mode::JetStream),
            other => bail!("CLUSTER_MODES: unknown `{other}`; use mqtt,nats,jetstream"),
        })
        .collect::<Result<Vec<_>>>()?;
    if chosen.is_empty() {
        bail!("CLUSTER_MODES is empty; use mqtt,nats,jetstream");
    }
    Ok(chosen)
}

async fn bench() -> Result<bool> {
    let settings = Settings {
        m: env_or("CLUSTER_EVENTS", 10_000),
        rate: env_or("CLUSTER_RATE", 500),
        native_rate: env_or("CLUSTER_NATIVE_RATE", 5_000),
        paced_secs: env_or("CLUSTER_PACED_SECS", 10),
        serial: env_or("CLUSTER_SERIAL", 200),
        event_inflight: env_or("CLUSTER_EVENT_INFLIGHT", 100).clamp(1, u16::MAX as usize) as u16,
        n: env_or("CLUSTER_INVOCATIONS", 2_000),
        k: env_or("CLUSTER_INFLIGHT", 32).max(1),
        scenarios: selected()?,
    };
    let s = &settings;
    if s.m == 0 || s.n == 0 || s.paced_secs * s.rate.min(s.native_rate) == 0 || s.serial == 0 {
        bail!("CLUSTER_EVENTS, CLUSTER_RATE, CLUSTER_NATIVE_RATE, CLUSTER_PACED_SECS, CLUSTER_SERIAL and CLUSTER_INVOCATIONS must be positive");
    }
    let modes = modes()?;
    tracing_subscriber::registry()
        .with(
            // rumqttd logs every client that goes without DISCONNECT as an
            // error, as the benchmark's clients do.
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing::Level::WARN)
                .with_target("rumqttd", tracing::level_filters::LevelFilter::OFF),
        )
        .with(CountLogged)
        .try_init()?;
    let started = Instant::now();
    let mut ok = true;
    let mut all = Vec::new();
    // One mode after the other, each on a fresh cluster: NATS maps MQTT
    // topics to the very subjects the native link uses, so sidecars of both
    // modes on one cluster would hear each other.
    for mode in modes {
        let (mode_ok, rows) = run_mode(mode, &settings).await?;
        ok &= mode_ok;
        all.extend(rows);
    }
    print_summary(&all);
    println!();
    println!("whole run {:.0} s", started.elapsed().as_secs_f64());
    if !ok {
        println!("FAIL: see the notes above");
    }
    Ok(ok)
}

/// Each scenario's crossing rows (both modes) beside the local ones, and
/// the issue's targets as ratios.
fn print_summary(rows: &[(&'static str, Row)]) {
    println!();
    println!("summary: crossing by the MQTT bridge (cross) and natively (native), against one sidecar (local)");
    print_header();
    for scenario in SCENARIOS {
        let of = |path: &str| -> Vec<&Row> {
            rows.iter()
                .filter(|(s, r)| *s == scenario && r.path == path)
                .map(|(_, r)| r)
                .collect()
        };
        // Local rows come from each mode's run; the last run's are shown
        // (the native one's, when both ran), as the ratios use them.
        let mut locals: Vec<&Row> = Vec::new();
        for row in of("local").into_iter().rev() {
            if !locals.iter().any(|l| l.consumer == row.consumer) {
                locals.insert(0, row);
            }
        }
        let shown = of("cross")
            .into_iter()
            .chain(of("native"))
            .chain(of("js"))
            .chain(locals);
        {
            for row in shown {
                let mut row = Row {
                    scenario: row.scenario.clone(),
                    path: row.path,
                    consumer: row.consumer,
                    msgs: row.msgs,
                    rate: row.rate,
                    lat: row.lat.clone(),
                    lost: row.lost,
                    dups: row.dups,
                    notes: Vec::new(),
                };
                row.notes.clear();
                row.print();
            }
        }
        for native in of("native").into_iter().chain(of("js")) {
            // The local rows of the native pass: the same sidecars, just
            // before or after.
            let local = rows.iter().rev().find(|(s, r)| {
                *s == scenario && r.path == "local" && r.consumer == native.consumer
            });
            if let Some((_, local)) = local {
                println!(
                    "  {:>6}/local {:<9}  msg/s {}  p50 {}  p99 {}",
                    native.path,
                    native.consumer,
                    ratio(Some(native.rate), Some(local.rate)),
                    ratio(native.ms(0.5), local.ms(0.5)),
                    ratio(native.ms(0.99), local.ms(0.99)),
                );
            }
        }
    }
}

/// The bench's passes with the sidecars in `mode`, on a cluster of their
/// own; the rows, by scenario.
async fn run_mode(mode: Mode, s: &Settings) -> Result<(bool, Vec<(&'static str, Row)>)> {
    let (m, serial, event_inflight, n, k) = (s.m, s.serial, s.event_inflight, s.n, s.k);
    let rate = match mode {
        Mode::Bridge => s.rate,
        Mode::Native | Mode::JetStream => s.native_rate,
    };
    let paced = s.paced_secs * rate;
    let started = Instant::now();
    let cluster = NatsCluster::start(3).await;
    let cluster_up = started.elapsed().as_secs_f64();
    let a = bridged(&cluster, 0, "a", mode).await?;
    let b = bridged(&cluster, 1, "b", mode).await?;
    let ready = started.elapsed().as_secs_f64() - cluster_up;
    let seen = Arc::new(Mutex::new(AgentSeen::default()));
    let (client, requests) = if *NODELAY {
        nodelay_agent(a.mqtt, "bench-agent", AGENT_THING).await?
    } else {
        let agent = mqtt_agent(a.mqtt, "bench-agent", AGENT_THING, None).await;
        (agent.client, agent.publishes)
    };
    let agent = serve(client, requests, seen.clone());
    wait_hosted(&a).await?;
    wait_hosted(&b).await?;
    let how = match mode {
        Mode::Bridge => "cluster.mode = mqtt: bridged to the nodes' MQTT listeners",
        Mode::Native => "cluster.mode = nats, jetstream = false: core NATS",
        Mode::JetStream => "cluster.mode = nats, jetstream = true: events through the R3 stream",
    };
    println!();
    println!("===== {how} =====");
    println!(
        "cluster: 3 NATS nodes ({}) up in {cluster_up:.1} s; sidecar A on node 0, B on node 1, both ready {ready:.1} s later",
        nats::nats_server_version()
    );
    println!("events: {paced} paced at {rate}/s, {m} in the flood, QoS 1 from A's MQTT port with {event_inflight} in flight; consumers: one WebSocket + one MQTT QoS 1 subscriber, on B ({}) or A (local); nats: publisher on node 0 and subscriber on node 1, no sidecar", mode.cross());
    println!("invocations: from a WebSocket consumer on B ({}) or A (local) to an MQTT agent on A; serial: {serial}, 1 in flight; parallel: {n}, {k} in flight", mode.cross());
    let nodelay = if *NODELAY {
        "set"
    } else {
        "not set (TCP defaults)"
    };
    println!("the bench's clients: TCP_NODELAY {nodelay}");
    // Where the streams' leaders sit matters: every QoS 1 message is
    // stored in `$MQTT_msgs` through its leader.
    if mode == Mode::Bridge {
        for line in mqtt_streams(&cluster) {
            println!("{line}");
        }
    }
    println!();
    print_header();

    let mut ok = true;
    let mut all = Vec::new();
    let events_base = format!("lmos/{THING}/events");
    let event_ends = [
        Ends {
            path: mode.cross(),
            publish: a.mqtt,
            ws: Some(b.ws_url()),
            subscribe: b.mqtt,
            topic_base: events_base.clone(),
        },
        Ends {
            path: "local",
            publish: a.mqtt,
            ws: Some(a.ws_url()),
            subscribe: a.mqtt,
            topic_base: events_base,
        },
        // NATS's MQTT alone: the bridge's reference.
        Ends {
            path: "nats",
            publish: cluster.mqtt_addr(0),
            ws: None,
            subscribe: cluster.mqtt_addr(1),
            topic_base: "bench/nats".into(),
        },
    ];
    for &scenario in &s.scenarios {
        let mut rows = Vec::new();
        let paths = match (scenario, mode) {
            ("paced" | "flood", Mode::Bridge) => 3,
            _ => 2,
        };
        for ends in &event_ends[..paths] {
            let path = ends.path;
            // What earlier paths left in the bridges and the cluster
            // would slow this one down.
            match settle(&a, &b).await {
                Ok(s) if s > 1.0 => {
                    println!("  (the bridges' backlog from A to B drained in {s:.1} s)")
                }
                Ok(_) => {}
                Err(e) => {
                    ok = false;
                    println!("FAIL: {e:#}");
                }
            }
            let consumers = if path == "local" { &a } else { &b };
            let result = match scenario {
                "paced" => {
                    let name = format!("events {rate}/s");
                    let pace = Pace::Rate(rate as f64);
                    event_path(&name, ends, paced, pace, event_inflight).await
                }
                "flood" => event_path("events flood", ends, m, Pace::Flood, event_inflight).await,
                "serial" => invocation_path("invocations K=1", path, consumers, &seen, serial, 1)
                    .await
                    .map(|(row, ok)| (vec![row], ok)),
                _ => {
                    let name = format!("invocations K={k}");
                    invocation_path(&name, path, consumers, &seen, n, k)
                        .await
                        .map(|(row, ok)| (vec![row], ok))
                }
            };
            match result {
                Ok((new, path_ok)) => {
                    ok &= path_ok;
                    for row in &new {
                        row.print();
                    }
                    all.extend(new.iter().map(|r| (scenario, r.clone())));
                    rows.extend(new);
                }
                Err(e) => {
                    ok = false;
                    println!("{scenario:<18} {path:<6} FAIL: {e:#}");
                }
            }
            for line in take_logged() {
                println!("    {line}");
            }
        }
        print_ratios(&rows);
    }

    if mode == Mode::Bridge {
        println!("at the end:");
        for line in mqtt_streams(&cluster) {
            println!("  {line}");
        }
    }
    agent.abort();
    let stopping = Instant::now();
    timeout(Duration::from_secs(30), async {
        a.stop().await;
        b.stop().await;
    })
    .await
    .context("the sidecars did not stop within 30 s")?;
    drop(cluster);
    println!(
        "this mode {:.0} s (sidecars stopped in {:.1} s)",
        started.elapsed().as_secs_f64(),
        stopping.elapsed().as_secs_f64()
    );
    for line in take_logged() {
        println!("    {line}");
    }
    Ok((ok, all))
}

fn main() -> Result<()> {
    LazyLock::force(&BASE);
    let runtime = tokio::runtime::Runtime::new()?;
    let ok = runtime.block_on(bench())?;
    // Leftover client tasks must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
