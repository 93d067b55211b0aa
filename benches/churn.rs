//! Load with churn: steady publishing into an in-process sidecar while
//! stable consumers listen and churners come and go; and a consumer that
//! stops reading.
//!
//! ```sh
//! cargo bench --bench churn                          # scenario "churn", 20 s
//! CHURN_SCENARIO=slow cargo bench --bench churn      # scenario "slow", 3 runs of 20 s
//! CHURN_SECS=60 CHURN_RATE=10000 CHURN_WS=64 cargo bench --bench churn
//! ```
//!
//! Settings (environment): CHURN_SECS seconds of publishing (20),
//! CHURN_RATE events per second (5000), CHURN_WS stable WebSocket consumers
//! (32), CHURN_MQTT stable MQTT subscribers (32), CHURN_CHURNERS (8),
//! CHURN_SCENARIO `churn` or `slow`, CHURN_QUEUE the gateway's
//! `outbound_queue` (its default, a safety cap the byte budget,
//! `outbound_queue_bytes`, comes before).
//!
//! **churn**: one Thing's event `tick`, each event with a sequence number
//! and its send time. A publisher sends CHURN_RATE events per second: nine
//! in ten over MQTT at QoS 1 (up to 200 in flight), one in ten over the
//! WebSocket as an agent would. Stable consumers are subscribed before it
//! starts and stay: CHURN_WS over the WebSocket, CHURN_MQTT over MQTT 3.1.1
//! at QoS 1 with persistent sessions (clean_session = false). Churners loop
//! until publishing stops, alternately (a) a WebSocket consumer that
//! connects, subscribes, receives for 0.2–0.6 s and disconnects, and (b) an
//! MQTT consumer with one persistent session per churner (client ID and
//! subscription kept, clean_session = false, each message acknowledged once
//! recorded) that reconnects, receives for a while and disconnects, cleanly
//! or by dropping the socket; at the end
//! each churner's session reconnects once more and drains. So the MQTT
//! churners must also get everything published while they were away.
//!
//! Loss is counted per subscriber against what it had to get: everything,
//! for stable consumers and the MQTT churners' sessions (from their first
//! SUBACK on); for a WebSocket churner's visit, every event published after
//! its subscription was live up to the last one it received. A stable QoS 1
//! subscriber that lost anything makes the bench exit with status 1.
//! Latency is from the publisher's send to receipt (for MQTT churners it
//! includes time spent offline). Peak and current RSS are the process's
//! (sidecar, clients and bench together).
//!
//! **slow**: CHURN_WS fast WebSocket consumers plus one that subscribes and
//! then never reads its socket, CHURN_RATE events per second over MQTT for
//! CHURN_SECS; three runs on fresh sidecars: without the slow consumer
//! (baseline), with it under `gateway.slow_consumer = "drop"`, and under
//! `"disconnect"`. Prints RSS every second and the fast consumers' latency
//! against the baseline: memory stays bounded by the slow connection's
//! outbound queue (`gateway.outbound_queue_bytes`) plus the socket
//! buffers, and the others do not notice.

use lmos_testkit::bench as support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use lmos_sidecar::config::SlowConsumerPolicy;
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, http::HeaderValue, Message};
use tokio_util::sync::CancellationToken;

const THING: &str = "urn:bench:churn";
const TOPIC: &str = "lmos/urn:bench:churn/events/tick";
const INFLIGHT: u16 = 200;
const SETUP: Duration = Duration::from_secs(10);
/// After publishing stops, how long consumers get to catch up when they
/// make no progress.
const DRAIN_STALL: Duration = Duration::from_secs(5);
/// One in this many events goes through the WebSocket agent.
const WS_SHARE: u64 = 10;
/// How long a leaving WebSocket churner keeps reading what was published
/// before it decided to leave.
const LINGER: Duration = Duration::from_millis(300);

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ns() -> u64 {
    BASE.elapsed().as_nanos() as u64
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// VmHWM (peak) and VmRSS (current) of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

// ----- what consumers receive -----

#[derive(serde::Deserialize)]
struct Tick {
    data: TickData,
}

#[derive(serde::Deserialize)]
struct TickData {
    seq: u64,
    sent: u64,
}

/// Latencies in log-linear buckets, 16 per power of two of nanoseconds:
/// fixed memory (so the bench's own bookkeeping does not grow with the
/// traffic and blur the RSS figures), values within about 6 %.
#[derive(Clone)]
struct Hist(Vec<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist(vec![0; 64 * 16])
    }
}

impl Hist {
    fn bucket(ns: u64) -> usize {
        if ns < 16 {
            return ns as usize;
        }
        let e = 63 - ns.leading_zeros() as usize;
        e * 16 + ((ns >> (e - 4)) & 15) as usize
    }

    /// The smallest value of a bucket.
    fn value(i: usize) -> u64 {
        let (e, sub) = (i / 16, (i % 16) as u64);
        if e < 4 {
            i as u64
        } else {
            (16 + sub) << (e - 4)
        }
    }

    fn add(&mut self, ns: u64) {
        self.0[Hist::bucket(ns)] += 1;
    }

    fn merge(&mut self, other: &Hist) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += b;
        }
    }

    fn percentile(&self, p: f64) -> Option<u64> {
        let total: u64 = self.0.iter().sum();
        if total == 0 {
            return None;
        }
        let target = ((total as f64 * p).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in self.0.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Some(Hist::value(i));
            }
        }
        None
    }
}

/// What one subscription received.
#[derive(Default, Clone)]
struct Tally {
    seen: Vec<bool>,
    unique: u64,
    dups: u64,
    other: u64,
    latencies: Hist,
    max_seq: Option<u64>,
}

impl Tally {
    fn record(&mut self, payload: &[u8]) {
        let Ok(Tick {
            data: TickData { seq, sent },
        }) = serde_json::from_slice::<Tick>(payload)
        else {
            self.other += 1;
            return;
        };
        let i = seq as usize;
        if i >= self.seen.len() {
            self.seen.resize((i + 1).max(self.seen.len() * 2), false);
        }
        if self.seen[i] {
            self.dups += 1;
            return;
        }
        self.seen[i] = true;
        self.unique += 1;
        self.latencies.add(now_ns().saturating_sub(sent));
        self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq)));
    }

    /// The first few runs of sequence numbers in `from..to` it did not get.
    fn gaps(&self, from: u64, to: u64) -> String {
        support::runs_of(
            (from..to).filter(|&s| !self.seen.get(s as usize).copied().unwrap_or(false)),
        )
    }

    /// Sequence numbers in `from..to` it did not get.
    fn missing(&self, from: u64, to: u64) -> u64 {
        (from..to)
            .filter(|&s| !self.seen.get(s as usize).copied().unwrap_or(false))
            .count() as u64
    }
}

/// A class of consumers in the table.
#[derive(Default)]
struct Class {
    clients: usize,
    expected: u64,
    received: u64,
    lost: u64,
    dups: u64,
    latencies: Hist,
    cycles: u64,
    notes: Vec<String>,
}

impl Class {
    /// `expected` events it had to get, `lost` of them missing; events it
    /// got beyond those (a visit's first, before its subscription was known
    /// to be live) count for latency and duplicates only.
    fn add(&mut self, t: &Tally, expected: u64, lost: u64) {
        self.expected += expected;
        self.received += expected - lost;
        self.lost += lost;
        self.dups += t.dups;
        self.latencies.merge(&t.latencies);
    }

    fn percentile(&mut self, p: f64) -> String {
        self.latencies
            .percentile(p)
            .map_or("-".into(), |ns| format!("{:.2}", ns as f64 / 1e6))
    }

    fn print(&mut self, name: &str) {
        let (p50, p99, max) = (
            self.percentile(0.5),
            self.percentile(0.99),
            self.percentile(1.0),
        );
        let cycles = if self.cycles > 0 {
            self.cycles.to_string()
        } else {
            "-".into()
        };
        println!(
            "{name:<24} {:>7} {:>10} {:>10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>7}",
            self.clients, self.expected, self.received, self.lost, self.dups, p50, p99, max, cycles
        );
        for note in &self.notes {
            println!("    {note}");
        }
    }
}

fn print_header() {
    println!(
        "{:<24} {:>7} {:>10} {:>10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>7}",
        "class",
        "clients",
        "sent",
        "received",
        "lost",
        "dups",
        "p50 ms",
        "p99 ms",
        "max ms",
        "cycles"
    );
}

// ----- clients -----

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_send(ws: &mut Ws, mut message: Value) -> Result<()> {
    message["messageID"] = uuid::Uuid::new_v4().to_string().into();
    Ok(ws.send(Message::Text(message.to_string().into())).await?)
}

async fn ws_connect(url: &str) -> Result<Ws> {
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    let (ws, _) = timeout(SETUP, tokio_tungstenite::connect_async(request)).await??;
    Ok(ws)
}

/// Connects and subscribes to the tick event; returns once that is live (a
/// retained reading on a fresh Thing, observed on the same connection, comes
/// back only after the commands sent before it took effect).
async fn ws_subscriber(url: &str, correlation: &str) -> Result<Ws> {
    let mut ws = ws_connect(url).await?;
    let subscribe = json!({"thingID": THING, "messageType": "subscribeEvent", "event": "tick", "correlationID": correlation});
    ws_send(&mut ws, subscribe).await?;
    let barrier = format!("urn:barrier:{}", uuid::Uuid::new_v4());
    let reading = json!({"thingID": barrier, "messageType": "propertyReading", "name": "barrier", "value": true, "timestamp": "2025-01-01T00:00:00Z"});
    ws_send(&mut ws, reading).await?;
    let observe = json!({"thingID": barrier, "messageType": "observeProperty", "name": "barrier"});
    ws_send(&mut ws, observe).await?;
    let arrived = timeout(SETUP, async {
        while let Some(Ok(frame)) = ws.next().await {
            let v: Value = serde_json::from_slice(&frame.into_data()).unwrap_or_default();
            if v["thingID"] == barrier.as_str() {
                return true;
            }
        }
        false
    });
    match arrived.await {
        Ok(true) => Ok(ws),
        Ok(false) => bail!("connection closed before the barrier came back"),
        Err(_) => bail!("the barrier did not come back within {SETUP:?}"),
    }
}

/// Reads ticks until `stop`; returns the tally and how the connection ended
/// if it ended first.
async fn ws_receive(
    mut ws: Ws,
    tally: &mut Tally,
    progress: &AtomicU64,
    stop: CancellationToken,
) -> (Ws, Option<String>) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return (ws, None),
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    tally.record(text.as_bytes());
                    progress.store(tally.unique, Relaxed);
                }
                Some(Ok(Message::Close(f))) => return (ws, Some(format!("closed by the sidecar: {f:?}"))),
                Some(Ok(_)) => {}
                Some(Err(e)) => return (ws, Some(format!("error: {e}"))),
                None => return (ws, Some("connection ended".into())),
            }
        }
    }
}

fn mqtt_options(addr: SocketAddr, id: &str, clean: bool) -> MqttOptions {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_inflight(INFLIGHT);
    options.set_clean_session(clean);
    options.set_keep_alive(Duration::from_secs(30));
    options
}

/// A churner's persistent session. It acknowledges each message once it
/// has recorded it: with rumqttc's automatic acks, messages read from the
/// socket (and acknowledged) but not yet handed out are lost when the
/// client drops its connection, which would be counted against the broker.
fn session_options(addr: SocketAddr, id: &str) -> MqttOptions {
    let mut options = mqtt_options(addr, id, false);
    options.set_manual_acks(true);
    options
}

/// Connects; with a filter, subscribes at QoS 1 too. Returns once the
/// CONNACK (and SUBACK) arrived, with the CONNACK's session-present flag.
async fn mqtt_connect(
    options: MqttOptions,
    filter: Option<&str>,
) -> Result<(AsyncClient, EventLoop, bool)> {
    let (client, mut eventloop) = AsyncClient::new(options, 1000);
    if let Some(f) = filter {
        client.subscribe(f, QoS::AtLeastOnce).await?;
    }
    let mut present = false;
    let mut early = Vec::new();
    timeout(SETUP, async {
        loop {
            match eventloop.poll().await? {
                Event::Incoming(Packet::ConnAck(c)) => {
                    present = c.session_present;
                    if filter.is_none() {
                        return anyhow::Ok(());
                    }
                }
                Event::Incoming(Packet::SubAck(_)) => return Ok(()),
                // A persistent session may deliver before the SUBACK.
                Event::Incoming(Packet::Publish(p)) => early.push(p.payload),
                _ => {}
            }
        }
    })
    .await
    .context("no CONNACK/SUBACK in time")??;
    // Nothing arrives before the SUBACK without a filter; with one, the
    // caller's tally must see what did.
    if !early.is_empty() {
        bail!("{} publishes before the SUBACK", early.len());
    }
    Ok((client, eventloop, present))
}

/// Polls until `stop` or an error; records every publish, and with `acks`
/// (a client with manual acks) acknowledges it once recorded.
async fn mqtt_receive(
    eventloop: &mut EventLoop,
    acks: Option<&AsyncClient>,
    tally: &mut Tally,
    progress: &AtomicU64,
    stop: CancellationToken,
) -> Option<String> {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            event = eventloop.poll() => match event {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    tally.record(&p.payload);
                    progress.store(tally.unique, Relaxed);
                    if let Some(client) = acks {
                        let _ = client.try_ack(&p);
                    }
                }
                Ok(_) => {}
                Err(e) => return Some(format!("error: {e}")),
            }
        }
    }
}

/// After a DISCONNECT, what still arrives is recorded until the connection
/// ends (unacknowledged: the session redelivers it).
async fn close_mqtt(eventloop: &mut EventLoop, tally: &mut Tally, progress: &AtomicU64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Ok(event)) = tokio::time::timeout_at(deadline, eventloop.poll()).await {
        if let Event::Incoming(Packet::Publish(p)) = event {
            tally.record(&p.payload);
            progress.store(tally.unique, Relaxed);
        }
    }
}

// ----- the publisher -----

#[derive(Default)]
struct Published {
    mqtt: u64,
    ws: u64,
    acked: u64,
    secs: f64,
    notes: Vec<String>,
}

impl Published {
    fn total(&self) -> u64 {
        self.mqtt + self.ws
    }
}

fn tick(seq: u64) -> String {
    let id = uuid::Uuid::new_v4();
    let sent = now_ns();
    format!(
        r#"{{"thingID":"{THING}","messageID":"{id}","messageType":"event","event":"tick","data":{{"seq":{seq},"sent":{sent}}},"timestamp":"2025-01-20T19:00:00Z"}}"#
    )
}

/// Publishes `rate` events per second for `secs`, numbered from `next`;
/// one in WS_SHARE through a WebSocket agent when `ws_url` is given.
/// Returns once every MQTT publish is acknowledged (or 10 s passed).
async fn publish(
    broker: SocketAddr,
    ws_url: Option<&str>,
    rate: f64,
    secs: f64,
    next: Arc<AtomicU64>,
) -> Result<Published> {
    let (client, eventloop, _) =
        mqtt_connect(mqtt_options(broker, "churn-publisher", true), None).await?;
    let support::AckPump {
        acked,
        failed,
        task: pump,
    } = support::AckPump::spawn(eventloop);
    let mut agent = match ws_url {
        Some(url) => Some(ws_connect(url).await?),
        None => None,
    };
    let mut out = Published::default();
    let start = Instant::now();
    let mut interval = tokio::time::interval(Duration::from_millis(1));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        interval.tick().await;
        let target = (start.elapsed().as_secs_f64() * rate) as u64;
        while sent < target {
            let seq = next.fetch_add(1, Relaxed);
            let payload = tick(seq);
            match agent.as_mut() {
                Some(ws) if seq % WS_SHARE == WS_SHARE - 1 => {
                    ws.send(Message::Text(payload.into())).await?;
                    out.ws += 1;
                }
                _ => {
                    client
                        .publish(TOPIC, QoS::AtLeastOnce, false, payload)
                        .await?;
                    out.mqtt += 1;
                }
            }
            sent += 1;
        }
    }
    out.secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked.load(Relaxed) < out.mqtt && Instant::now() < deadline {
        sleep(Duration::from_millis(10)).await;
    }
    out.acked = acked.load(Relaxed);
    if let Some(e) = failed.lock().unwrap().take() {
        out.notes.push(format!("publisher connection failed: {e}"));
    }
    let _ = client.try_disconnect();
    sleep(Duration::from_millis(50)).await;
    pump.abort();
    if let Some(mut ws) = agent {
        let _ = ws.close(None).await;
    }
    Ok(out)
}

// ----- the sidecar -----

struct Running {
    ws_url: String,
    mqtt: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
    config: Config,
}

async fn start_sidecar(configure: impl FnOnce(&mut Config)) -> Result<Running> {
    let mut config = Config::default();
    config.store.dir = lmos_testkit::bench::store_dir("churn");
    config.mqtt.listen = "127.0.0.1:0".parse()?;
    config.mqtt.listen_v5 = "127.0.0.1:0".parse()?;
    config.http.listen = "127.0.0.1:0".parse()?;
    config.log.filter = "off".into();
    config.sidecar.shutdown_grace_ms = 1_000;
    config.gateway.outbound_queue = env_or("CHURN_QUEUE", config.gateway.outbound_queue);
    configure(&mut config);
    let app = Application::build(config.clone()).await?;
    let (ws_url, mqtt) = (format!("ws://{}/lmos", app.http_addr()), app.mqtt_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));
    Ok(Running {
        ws_url,
        mqtt,
        stop,
        task,
        config,
    })
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = timeout(Duration::from_secs(15), self.task).await;
    }
}

fn print_config(config: &Config) {
    let g = &config.gateway;
    let m = &config.mqtt;
    println!(
        "config: gateway.outbound_queue={} gateway.slow_consumer={:?} gateway.max_message_size={} mqtt.max_inflight_count={} mqtt.segment_size={} mqtt.segment_count={} mqtt.max_outgoing_packet_count={}",
        g.outbound_queue, g.slow_consumer, g.max_message_size, m.max_inflight_count, m.segment_size, m.segment_count, m.max_outgoing_packet_count
    );
}

/// Waits until every counter reaches `target`, or none moved for DRAIN_STALL.
async fn drain(progress: &[Arc<AtomicU64>], target: u64) {
    let mut last = (0u64, Instant::now());
    loop {
        let sum: u64 = progress.iter().map(|p| p.load(Relaxed).min(target)).sum();
        if sum == target * progress.len() as u64 {
            return;
        }
        if sum != last.0 {
            last = (sum, Instant::now());
        } else if last.1.elapsed() > DRAIN_STALL {
            return;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

// ----- scenario "churn" -----

/// What one churner did.
#[derive(Default)]
struct Churned {
    ws: Class,
    mqtt: Class,
}

/// Alternates WebSocket visits and MQTT reconnections of one persistent
/// session until `until` is cancelled; then drains its session once more.
async fn churner(
    i: usize,
    ws_url: String,
    broker: SocketAddr,
    next: Arc<AtomicU64>,
    until: CancellationToken,
    published: Arc<AtomicU64>,
) -> Churned {
    let mut out = Churned::default();
    let id = format!("churner-{i}");
    let mut session = Tally::default();
    let mut first: Option<u64> = None;
    // Where in the sequence the session went away, and how.
    let mut leaves: Vec<String> = Vec::new();
    let progress = AtomicU64::new(0);
    let mut k = i; // odd churners start with MQTT
    let dwell = |k: usize| Duration::from_millis(200 + ((i * 7919 + k * 104_729) % 400) as u64);
    while !until.is_cancelled() {
        let stay = CancellationToken::new();
        let timer = {
            let (stay, until) = (stay.clone(), until.clone());
            let d = dwell(k);
            tokio::spawn(async move {
                tokio::select! { _ = sleep(d) => {}, _ = until.cancelled() => {} }
                stay.cancel();
            })
        };
        if k.is_multiple_of(2) {
            match ws_subscriber(&ws_url, &format!("{id}-{k}")).await {
                Ok(ws) => {
                    let from = next.load(Relaxed);
                    let mut t = Tally::default();
                    let (ws, mut ending) = ws_receive(ws, &mut t, &progress, stay).await;
                    // It owes everything published until it decides to
                    // leave, and gets LINGER to receive the last of it.
                    let to = next.load(Relaxed);
                    let linger = CancellationToken::new();
                    let l = linger.clone();
                    let timer = tokio::spawn(async move {
                        sleep(LINGER).await;
                        l.cancel();
                    });
                    let mut ws = ws;
                    if ending.is_none() {
                        let (back, e) = ws_receive(ws, &mut t, &progress, linger).await;
                        (ws, ending) = (back, e);
                    }
                    timer.abort();
                    let lost = t.missing(from, to);
                    if lost > 0 {
                        out.ws.notes.push(format!(
                            "{id}: visit {k} ({from}..{to}) missed {}",
                            t.gaps(from, to)
                        ));
                    }
                    out.ws.add(&t, to - from, lost);
                    out.ws.cycles += 1;
                    if let Some(e) = ending {
                        out.ws
                            .notes
                            .push(format!("{id}: visit {k} ended early: {e}"));
                    }
                    if k.is_multiple_of(4) {
                        let _ = timeout(Duration::from_secs(1), ws.close(None)).await;
                    } // else: dropped without a close frame
                }
                Err(e) => out.ws.notes.push(format!("{id}: connect failed: {e:#}")),
            }
        } else {
            match mqtt_connect(
                session_options(broker, &id),
                first.is_none().then_some(TOPIC),
            )
            .await
            {
                Ok((client, mut eventloop, present)) => {
                    if first.is_none() {
                        first = Some(next.load(Relaxed));
                    } else if !present {
                        out.mqtt
                            .notes
                            .push(format!("{id}: session not present on reconnect {k}"));
                    }
                    if let Some(e) =
                        mqtt_receive(&mut eventloop, Some(&client), &mut session, &progress, stay)
                            .await
                    {
                        out.mqtt.notes.push(format!("{id}: cycle {k}: {e}"));
                    }
                    if k % 4 == 1 {
                        let _ = client.disconnect().await;
                        close_mqtt(&mut eventloop, &mut session, &progress).await;
                        leaves.push(format!("{}:clean", next.load(Relaxed)));
                    } else {
                        // The socket is dropped without DISCONNECT.
                        leaves.push(format!("{}:drop", next.load(Relaxed)));
                    }
                    out.mqtt.cycles += 1;
                }
                Err(e) => out.mqtt.notes.push(format!("{id}: connect failed: {e:#}")),
            }
        }
        timer.abort();
        k += 1;
    }
    // The session gets what was published while it was away.
    if let Some(from) = first {
        let total = published.load(Relaxed);
        match mqtt_connect(session_options(broker, &id), None).await {
            Ok((client, mut eventloop, _)) => {
                let deadline = Instant::now() + DRAIN_STALL * 2;
                loop {
                    let before = session.unique;
                    let window = CancellationToken::new();
                    let w = window.clone();
                    let t = tokio::spawn(async move {
                        sleep(Duration::from_millis(500)).await;
                        w.cancel();
                    });
                    mqtt_receive(
                        &mut eventloop,
                        Some(&client),
                        &mut session,
                        &progress,
                        window,
                    )
                    .await;
                    t.abort();
                    let complete = session.missing(from, total) == 0;
                    if complete || session.unique == before || Instant::now() > deadline {
                        break;
                    }
                }
                let _ = client.disconnect().await;
                close_mqtt(&mut eventloop, &mut session, &progress).await;
            }
            Err(e) => out
                .mqtt
                .notes
                .push(format!("{id}: final drain failed: {e:#}")),
        }
        let lost = session.missing(from, total);
        if lost > 0 {
            out.mqtt.notes.push(format!(
                "{id}: session ({from}..{total}) missed {}; it left at {}",
                session.gaps(from, total),
                leaves.join(" ")
            ));
        }
        out.mqtt.add(&session, total - from, lost);
    }
    out
}

async fn churn_scenario() -> Result<bool> {
    let secs = env_or("CHURN_SECS", 20) as f64;
    let rate = env_or("CHURN_RATE", 5000) as f64;
    let (n_ws, n_mqtt, n_churn) = (
        env_or("CHURN_WS", 32),
        env_or("CHURN_MQTT", 32),
        env_or("CHURN_CHURNERS", 8),
    );
    let sidecar = start_sidecar(|_| {}).await?;
    println!("scenario churn: {secs} s at {rate} events/s (1 in {WS_SHARE} via a WebSocket agent, the rest MQTT QoS 1); {n_ws} stable WebSocket consumers, {n_mqtt} stable MQTT QoS 1 subscribers (persistent sessions), {n_churn} churners");
    print_config(&sidecar.config);

    let stop = CancellationToken::new();
    let mut ws_tasks = Vec::new();
    let mut mqtt_tasks = Vec::new();
    let mut progress = Vec::new();
    for i in 0..n_ws {
        let ws = ws_subscriber(&sidecar.ws_url, &format!("stable-{i}"))
            .await
            .with_context(|| format!("stable WebSocket consumer {i}"))?;
        let (p, stop) = (Arc::new(AtomicU64::new(0)), stop.clone());
        progress.push(p.clone());
        ws_tasks.push(tokio::spawn(async move {
            let mut t = Tally::default();
            let (_ws, ending) = ws_receive(ws, &mut t, &p, stop).await;
            (t, ending)
        }));
    }
    for i in 0..n_mqtt {
        let options = mqtt_options(sidecar.mqtt, &format!("stable-mqtt-{i}"), false);
        let (client, mut eventloop, _) = mqtt_connect(options, Some(TOPIC))
            .await
            .with_context(|| format!("stable MQTT subscriber {i}"))?;
        let (p, stop) = (Arc::new(AtomicU64::new(0)), stop.clone());
        progress.push(p.clone());
        mqtt_tasks.push(tokio::spawn(async move {
            let mut t = Tally::default();
            let ending = mqtt_receive(&mut eventloop, None, &mut t, &p, stop).await;
            drop(client);
            (t, ending)
        }));
    }

    let next = Arc::new(AtomicU64::new(0));
    let published_total = Arc::new(AtomicU64::new(0));
    let churning = CancellationToken::new();
    let churners: Vec<_> = (0..n_churn)
        .map(|i| {
            tokio::spawn(churner(
                i,
                sidecar.ws_url.clone(),
                sidecar.mqtt,
                next.clone(),
                churning.clone(),
                published_total.clone(),
            ))
        })
        .collect();

    let started = Instant::now();
    let published = publish(
        sidecar.mqtt,
        Some(&sidecar.ws_url),
        rate,
        secs,
        next.clone(),
    )
    .await?;
    let total = published.total();
    published_total.store(total, Relaxed);
    churning.cancel();
    drain(&progress, total).await;
    let drained = started.elapsed().as_secs_f64() - published.secs;
    stop.cancel();

    let mut stable_ws = Class {
        clients: n_ws,
        ..Class::default()
    };
    for (i, task) in ws_tasks.into_iter().enumerate() {
        let (t, ending) = task.await?;
        let lost = t.missing(0, total);
        stable_ws.add(&t, total, lost);
        if lost > 0 || ending.is_some() {
            let why = ending.unwrap_or_else(|| "still connected".into());
            stable_ws
                .notes
                .push(format!("consumer {i}: {lost} lost; {why}"));
        }
    }
    let mut stable_mqtt = Class {
        clients: n_mqtt,
        ..Class::default()
    };
    for (i, task) in mqtt_tasks.into_iter().enumerate() {
        let (t, ending) = task.await?;
        let lost = t.missing(0, total);
        stable_mqtt.add(&t, total, lost);
        if lost > 0 || ending.is_some() {
            let why = ending.unwrap_or_else(|| "still connected".into());
            stable_mqtt
                .notes
                .push(format!("subscriber {i}: {lost} lost; {why}"));
        }
    }
    let mut churn_ws = Class::default();
    let mut churn_mqtt = Class::default();
    for task in churners {
        let c = task.await?;
        for (class, part) in [(&mut churn_ws, c.ws), (&mut churn_mqtt, c.mqtt)] {
            class.clients += 1;
            class.expected += part.expected;
            class.received += part.received;
            class.lost += part.lost;
            class.dups += part.dups;
            class.latencies.merge(&part.latencies);
            class.cycles += part.cycles;
            class.notes.extend(part.notes);
        }
    }
    let (peak, current) = memory();
    sidecar.stop().await;

    println!(
        "published {total} events in {:.1} s ({:.0}/s): {} over MQTT ({} acknowledged), {} over the WebSocket; consumers drained {:.1} s after the last",
        published.secs,
        total as f64 / published.secs,
        published.mqtt,
        published.acked,
        published.ws,
        drained
    );
    for note in &published.notes {
        println!("    {note}");
    }
    print_header();
    stable_ws.print("stable WebSocket");
    stable_mqtt.print("stable MQTT QoS 1");
    churn_ws.print("churn WebSocket visits");
    churn_mqtt.print("churn MQTT sessions");
    println!(
        "process RSS: peak (VmHWM) {}, now (VmRSS) {}",
        mib(peak),
        mib(current)
    );
    let ok = stable_mqtt.lost == 0 && published.acked == published.mqtt;
    if stable_mqtt.lost > 0 {
        println!(
            "FAIL: stable MQTT QoS 1 subscribers lost {} events",
            stable_mqtt.lost
        );
    }
    if published.acked < published.mqtt {
        println!(
            "FAIL: {} MQTT publishes were never acknowledged",
            published.mqtt - published.acked
        );
    }
    Ok(ok)
}

// ----- scenario "slow" -----

struct SlowRun {
    name: String,
    fast: Class,
    rss: Vec<u64>,
    slow: String,
}

async fn slow_run(name: &str, policy: Option<SlowConsumerPolicy>) -> Result<SlowRun> {
    let secs = env_or("CHURN_SECS", 20) as f64;
    let rate = env_or("CHURN_RATE", 5000) as f64;
    let n = env_or("CHURN_WS", 32);
    let sidecar = start_sidecar(|c| {
        if let Some(p) = policy {
            c.gateway.slow_consumer = p;
        }
    })
    .await?;
    let name = name.to_owned();
    print!("{name}: ");
    print_config(&sidecar.config);

    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    let mut progress = Vec::new();
    for i in 0..n {
        let ws = ws_subscriber(&sidecar.ws_url, &format!("fast-{i}")).await?;
        let (p, stop) = (Arc::new(AtomicU64::new(0)), stop.clone());
        progress.push(p.clone());
        tasks.push(tokio::spawn(async move {
            let mut t = Tally::default();
            let (_ws, ending) = ws_receive(ws, &mut t, &p, stop).await;
            (t, ending)
        }));
    }
    // Subscribed, then never read again until the end.
    let slow = match policy {
        Some(_) => Some(ws_subscriber(&sidecar.ws_url, "slow").await?),
        None => None,
    };

    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut rss = vec![memory().1];
            while sampling.load(Relaxed) {
                sleep(Duration::from_secs(1)).await;
                rss.push(memory().1);
            }
            rss
        })
    };
    let next = Arc::new(AtomicU64::new(0));
    let published = publish(sidecar.mqtt, None, rate, secs, next).await?;
    let total = published.total();
    drain(&progress, total).await;
    sampling.store(false, Relaxed);
    stop.cancel();
    let rss = sampler.await?;

    let mut fast = Class {
        clients: n,
        ..Class::default()
    };
    for (i, task) in tasks.into_iter().enumerate() {
        let (t, ending) = task.await?;
        let lost = t.missing(0, total);
        fast.add(&t, total, lost);
        if let Some(e) = ending {
            fast.notes.push(format!("fast consumer {i}: {e}"));
        }
    }
    fast.notes.extend(published.notes);
    // What the slow consumer finds once it reads again.
    let slow = match slow {
        None => "-".to_owned(),
        Some(mut ws) => {
            let (mut texts, mut ending) = (0u64, "still open".to_owned());
            loop {
                match timeout(Duration::from_millis(500), ws.next()).await {
                    Ok(Some(Ok(Message::Text(_)))) => texts += 1,
                    Ok(Some(Ok(Message::Close(Some(f))))) => {
                        let code = u16::from(f.code);
                        let what = if f.code == CloseCode::Again {
                            "closed 1013"
                        } else {
                            "closed"
                        };
                        ending = format!("{what} (code {code}: {})", f.reason);
                        break;
                    }
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err(e))) => {
                        ending = format!("error: {e}");
                        break;
                    }
                    Ok(None) => {
                        ending = "ended".into();
                        break;
                    }
                    Err(_) => break,
                }
            }
            format!("got {texts} of {total} events, then {ending}")
        }
    };
    sidecar.stop().await;
    Ok(SlowRun {
        name,
        fast,
        rss,
        slow,
    })
}

async fn slow_scenario() -> Result<bool> {
    let secs = env_or("CHURN_SECS", 20);
    let rate = env_or("CHURN_RATE", 5000);
    let n = env_or("CHURN_WS", 32);
    let sample = tick(0).len();
    println!("scenario slow: {n} fast WebSocket consumers, {rate} events/s over MQTT QoS 1 for {secs} s; one more consumer subscribes and never reads; event text about {sample} bytes (+ correlationID) per delivery");
    let mut runs = Vec::new();
    // The baseline twice, first and last, shows how much the figures move
    // from run to run on this machine.
    for (name, policy) in [
        ("baseline", None),
        ("slow one, drop", Some(SlowConsumerPolicy::Drop)),
        ("slow one, disconnect", Some(SlowConsumerPolicy::Disconnect)),
        ("baseline again", None),
    ] {
        runs.push(slow_run(name, policy).await?);
    }
    let queue = env_or("CHURN_QUEUE", Config::default().gateway.outbound_queue);
    let queue_bytes = Config::default().gateway.outbound_queue_bytes;
    // Each message counts its bytes and 64 more in the byte budget.
    let each = sample + 40 + 64;
    println!();
    println!(
        "bound: the slow connection holds at most gateway.outbound_queue_bytes = {queue_bytes} bytes or gateway.outbound_queue = {queue} messages of about {each} bytes, whichever is less = {:.2} MiB (plus one write batch of 64 and the kernel's socket buffers, outside RSS)",
        (queue * each).min(queue_bytes) as f64 / (1024.0 * 1024.0)
    );
    let m = &Config::default().mqtt;
    println!(
        "RSS grows in every run, the baseline included, with rumqttd's per-filter log: it keeps the events it routed, up to mqtt.segment_size x mqtt.segment_count = {} MiB per filter, then reuses the oldest segment; the bench's own bookkeeping is 1 byte per event per consumer. Compare each run's growth with the baseline's.",
        m.segment_size * m.segment_count / (1024 * 1024)
    );
    println!();
    print_header();
    let baseline_p99 = runs[0].fast.percentile(0.99);
    for run in &mut runs {
        run.fast.print(&format!("fast WS, {}", run.name));
    }
    println!();
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>17}  slow consumer",
        "run", "RSS start", "RSS max", "RSS end", "growth", "fast p99 (base)"
    );
    for run in &mut runs {
        let (start, max, end) = (
            run.rss.first().copied().unwrap_or(0),
            run.rss.iter().copied().max().unwrap_or(0),
            run.rss.last().copied().unwrap_or(0),
        );
        let p99 = run.fast.percentile(0.99);
        println!(
            "{:<22} {:>10} {:>10} {:>10} {:>10} {:>17}  {}",
            run.name,
            mib(start),
            mib(max),
            mib(end),
            mib(end.saturating_sub(start)),
            format!("{p99} ({baseline_p99})"),
            run.slow
        );
    }
    println!();
    println!("RSS each second (MiB):");
    for run in &runs {
        let series: Vec<String> = run
            .rss
            .iter()
            .map(|k| format!("{:.0}", *k as f64 / 1024.0))
            .collect();
        println!("  {:<22} {}", run.name, series.join(" "));
    }
    let (peak, current) = memory();
    println!(
        "process RSS: peak (VmHWM) {}, now (VmRSS) {}",
        mib(peak),
        mib(current)
    );
    Ok(true)
}

fn main() -> Result<()> {
    LazyLock::force(&BASE);
    let scenario = std::env::var("CHURN_SCENARIO").unwrap_or_else(|_| "churn".into());
    let runtime = tokio::runtime::Runtime::new()?;
    let ok = runtime.block_on(async {
        match scenario.as_str() {
            "churn" => churn_scenario().await,
            "slow" => slow_scenario().await,
            other => bail!("CHURN_SCENARIO: unknown scenario `{other}`; use churn or slow"),
        }
    })?;
    // Leftover client tasks must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
