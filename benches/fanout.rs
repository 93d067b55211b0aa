//! Fan-out: one MQTT publisher, N consumers of one event stream, against the
//! sidecar's WebSocket gateway, the sidecar's MQTT port and a Mosquitto.
//!
//! `cargo bench --bench fanout`; settings: FANOUT_N consumers (4),
//! FANOUT_MESSAGES (20000), FANOUT_PAYLOAD bytes of padding in each event's
//! data (64). The publisher sends at QoS 1 with at most 100 messages in flight
//! and never pauses, so latencies (publish call to receipt) are mostly
//! queueing under saturation. MQTT subscribers use QoS 1. Clients and brokers
//! keep their TCP defaults (no TCP_NODELAY); everything shares this machine.
//!
//! Columns: msg/s is deliveries to all consumers per second from the first
//! publish to the last delivery; msg/s/cons the mean of each consumer's own
//! rate; pub msg/s the publisher's rate. Loss, duplicates and why a consumer
//! stopped early are printed under the row.

use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Child, Command};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures_util::{SinkExt, Stream, StreamExt};
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use tokio::time::{timeout, timeout_at, Instant as Deadline};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, http::HeaderValue, Message};

const THING: &str = "urn:bench:thing";
const TOPIC: &str = "lmos/urn:bench:thing/events/tick";
const INFLIGHT: u16 = 100;
/// Longest any connect, SUBACK or barrier may take.
const SETUP: Duration = Duration::from_secs(10);
/// A consumer that receives nothing for this long stops and reports.
const STALL: Duration = Duration::from_secs(5);
/// Longest a whole scenario may take.
const DEADLINE: Duration = Duration::from_secs(60);

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ns() -> u64 {
    BASE.elapsed().as_nanos() as u64
}

/// Seconds between two `now_ns` readings (at least a nanosecond).
fn secs(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns).max(1) as f64 / 1e9
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// What one consumer received.
#[derive(Default)]
struct Tally {
    seen: Vec<bool>,
    unique: u64,
    dups: u64,
    other: u64,
    latencies: Vec<u64>,
    last_ns: u64,
    ending: String,
}

impl Tally {
    fn record(&mut self, payload: &[u8]) {
        let now = now_ns();
        let v: Value = serde_json::from_slice(payload).unwrap_or_default();
        let (seq, sent) = (v["data"]["seq"].as_u64(), v["data"]["sent"].as_u64());
        match (seq.and_then(|s| self.seen.get_mut(s as usize)), sent) {
            (Some(seen), _) if *seen => self.dups += 1,
            (Some(seen), Some(sent)) => {
                *seen = true;
                self.unique += 1;
                self.latencies.push(now.saturating_sub(sent));
                self.last_ns = now;
            }
            _ => self.other += 1,
        }
    }

    fn done(&self) -> bool {
        self.unique == self.seen.len() as u64
    }
}

/// A consumer's messages: a payload, something else (`None`), or the end.
type Feed = Pin<Box<dyn Stream<Item = Result<Option<Bytes>, String>> + Send>>;

/// Reads `feed` until all `m` messages arrived, it ends, STALL passes without
/// news, or `deadline` passes.
async fn receive(m: usize, deadline: Deadline, mut feed: Feed) -> Tally {
    let mut t = Tally {
        seen: vec![false; m],
        ..Tally::default()
    };
    t.ending = loop {
        if t.done() {
            break "complete".into();
        }
        match timeout_at(deadline.min(Deadline::now() + STALL), feed.next()).await {
            Ok(Some(Ok(Some(payload)))) => t.record(&payload),
            Ok(Some(Ok(None))) => {}
            Ok(Some(Err(ending))) => break ending,
            Ok(None) => break "connection ended".into(),
            Err(_) => break format!("stalled: nothing for {STALL:?} or past the deadline"),
        }
    };
    t
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_send(ws: &mut Ws, mut message: Value) -> Result<()> {
    message["messageID"] = uuid::Uuid::new_v4().to_string().into();
    Ok(ws.send(Message::Text(message.to_string().into())).await?)
}

/// Connects and subscribes to THING's events, then waits until that is live:
/// a retained reading on a fresh Thing, observed over the same connection,
/// comes back only after the commands sent before it took effect.
async fn ws_consumer(url: &str) -> Result<Feed> {
    let mut request = url.into_client_request()?;
    let protocol = HeaderValue::from_static("lmosprotocol");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol);
    let connect = tokio_tungstenite::connect_async(request);
    let (mut ws, _) = timeout(SETUP, connect).await??;
    let subscribe = json!({"thingID": THING, "messageType": "subscribeAllEvents"});
    ws_send(&mut ws, subscribe).await?;
    let barrier = format!("urn:barrier:{}", uuid::Uuid::new_v4());
    let reading = json!({"thingID": barrier, "messageType": "propertyReading", "name": "barrier", "value": true, "timestamp": "2025-01-01T00:00:00Z"});
    ws_send(&mut ws, reading).await?;
    let observe = json!({"thingID": barrier, "messageType": "observeProperty", "name": "barrier"});
    ws_send(&mut ws, observe).await?;
    let arrived = timeout(SETUP, async {
        while let Some(Ok(frame)) = ws.next().await {
            let v: Value = serde_json::from_slice(&frame.into_data()).unwrap_or_default();
            if v["thingID"] == barrier.as_str() && v["name"] == "barrier" {
                return true;
            }
        }
        false
    });
    match arrived.await {
        Ok(true) => Ok(Box::pin(ws.map(|frame| match frame {
            Ok(Message::Text(text)) => Ok(Some(text.into())),
            Ok(Message::Close(f)) => Err(format!("closed by the sidecar: {f:?}")),
            Ok(_) => Ok(None),
            Err(e) => Err(format!("error: {e}")),
        }))),
        Ok(false) => bail!("connection closed before the barrier came back"),
        Err(_) => bail!("the barrier did not come back within {SETUP:?}"),
    }
}

type Mqtt = (AsyncClient, EventLoop);

/// An MQTT client that has seen its CONNACK and, with a filter, its SUBACK.
async fn mqtt_client(addr: SocketAddr, id: &str, filter: Option<&str>) -> Result<Mqtt> {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_inflight(INFLIGHT);
    let (client, mut eventloop) = AsyncClient::new(options, 64);
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

/// An MQTT subscriber to every LMOS event, live once this returns.
async fn mqtt_consumer(addr: SocketAddr, id: &str) -> Result<Feed> {
    let state = mqtt_client(addr, id, Some("lmos/+/events/+")).await?;
    let events = futures_util::stream::unfold(state, |(client, mut el)| async {
        Some((el.poll().await, (client, el)))
    });
    Ok(Box::pin(events.map(|event| match event {
        Ok(Event::Incoming(Packet::Publish(p))) => Ok(Some(p.payload)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("error: {e}")),
    })))
}

/// What to send: to how many consumers, how many messages, what padding.
struct Load {
    n: usize,
    m: usize,
    pad: String,
}

/// Runs one scenario and prints its row; returns deliveries per second.
/// Consumers use WebSocket at `ws` when given, else MQTT at `broker`.
async fn scenario(name: &str, ws: Option<&str>, broker: SocketAddr, load: &Load) -> Result<f64> {
    let Load { n, m, ref pad } = *load;
    let tag = name.replace(' ', "-");
    let mut feeds = Vec::new();
    for i in 0..n {
        let feed = match ws {
            Some(url) => ws_consumer(url).await,
            None => mqtt_consumer(broker, &format!("{tag}-sub-{i}")).await,
        };
        feeds.push(feed.with_context(|| format!("consumer {i}"))?);
    }
    let (publisher, mut pub_loop) = mqtt_client(broker, &format!("{tag}-pub"), None).await?;
    let mut pub_task = tokio::spawn(async move {
        loop {
            if let Err(e) = pub_loop.poll().await {
                break e;
            }
        }
    });
    let (start_ns, deadline) = (now_ns(), Deadline::now() + DEADLINE);
    let spawn = |feed| tokio::spawn(receive(m, deadline, feed));
    let readers: Vec<_> = feeds.into_iter().map(spawn).collect();
    let published = timeout(DEADLINE, async {
        for seq in 0..m {
            let (id, sent) = (uuid::Uuid::new_v4(), now_ns());
            let payload = format!(
                r#"{{"thingID":"{THING}","messageID":"{id}","messageType":"event","event":"tick","data":{{"seq":{seq},"sent":{sent},"pad":"{pad}"}},"timestamp":"2025-01-20T19:00:00Z"}}"#
            );
            let qos = QoS::AtLeastOnce;
            publisher.publish(TOPIC, qos, false, payload).await?;
        }
        anyhow::Ok(m as f64 / secs(start_ns, now_ns()))
    });
    let publish_rate = match published.await {
        Ok(Ok(rate)) => format!("{rate:.0}"),
        Ok(Err(_)) if pub_task.is_finished() => format!("failed: {}", (&mut pub_task).await?),
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => format!("unfinished after {DEADLINE:?}"),
    };
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    let _ = publisher.try_disconnect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    pub_task.abort();

    let delivered: u64 = tallies.iter().map(|t| t.unique).sum();
    let expected = (n * m) as u64;
    let last_ns = tallies.iter().map(|t| t.last_ns).max().unwrap_or(0);
    let rate = delivered as f64 / secs(start_ns, last_ns);
    let rates = tallies
        .iter()
        .map(|t| t.unique as f64 / secs(start_ns, t.last_ns));
    let per_consumer = rates.sum::<f64>() / n as f64;
    let mut lat: Vec<u64> = tallies.iter().flat_map(|t| t.latencies.clone()).collect();
    lat.sort_unstable();
    let at = |p: f64| (lat.len() as f64 * p) as usize;
    let ms = |p: f64| {
        lat.get(at(p).min(lat.len().saturating_sub(1)))
            .map_or(f64::NAN, |&v| v as f64 / 1e6)
    };
    let pct = 100.0 * delivered as f64 / expected as f64;
    println!("{name:<15} {delivered:>9}/{expected:<9} {pct:>5.1}% {rate:>11.0} {per_consumer:>11.0} {:>8.2} {:>8.2} {:>8.2} {publish_rate:>10}", ms(0.5), ms(0.99), ms(1.0));
    for (i, t) in tallies.iter().enumerate() {
        let (got, dups, other, ending) = (t.unique, t.dups, t.other, &t.ending);
        if !t.done() || dups > 0 || other > 0 {
            println!("    consumer {i}: {got} of {m}, {dups} duplicates, {other} other messages, {ending}");
        }
    }
    Ok(rate)
}

/// Runs a scenario, reporting a failure; deliveries per second.
async fn run(name: &str, ws: Option<&str>, broker: SocketAddr, load: &Load) -> Option<f64> {
    let result = scenario(name, ws, broker, load).await;
    let failed = |e: anyhow::Error| println!("{name:<15} failed: {e:#}");
    result.map_err(failed).ok()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    a.zip(b.filter(|b| *b > 0.0))
        .map_or("n/a".into(), |(a, b)| format!("{:.2}", a / b))
}

/// A Mosquitto child process, killed (and its config removed) on drop.
struct Mosquitto(Child, std::path::PathBuf);

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Starts Mosquitto on a free port.
async fn mosquitto() -> Result<(Mosquitto, SocketAddr)> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|d| d.join("mosquitto").is_file()) {
        bail!("`mosquitto` is not on PATH");
    }
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let dir = std::env::temp_dir().join(format!("fanout-mosquitto-{}", addr.port()));
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("mosquitto.conf");
    let settings = format!("listener {} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\nmax_inflight_messages {INFLIGHT}\nlog_dest none\n", addr.port());
    std::fs::write(&conf, settings)?;
    let broker = Mosquitto(Command::new("mosquitto").arg("-c").arg(&conf).spawn()?, dir);
    for _ in 0..SETUP.as_millis() / 20 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok((broker, addr));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("mosquitto is not listening on {addr} after {SETUP:?}")
}

async fn bench() -> Result<()> {
    let load = Load {
        n: env_or("FANOUT_N", 4),
        m: env_or("FANOUT_MESSAGES", 20_000),
        pad: "x".repeat(env_or("FANOUT_PAYLOAD", 64)),
    };
    LazyLock::force(&BASE);
    let mut config = Config::default();
    config.mqtt.listen = "127.0.0.1:0".parse()?;
    config.mqtt.listen_v5 = "127.0.0.1:0".parse()?;
    config.http.listen = "127.0.0.1:0".parse()?;
    config.log.filter = "off".into();
    config.sidecar.shutdown_grace_ms = 1_000;
    let app = Application::build(config).await?;
    let (ws_url, mqtt) = (format!("ws://{}/lmos", app.http_addr()), app.mqtt_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));

    let Load { n, m, ref pad } = load;
    println!("fan-out: {n} consumers x {m} messages, {} bytes of padding; publisher QoS 1, {INFLIGHT} in flight", pad.len());
    println!("scenario                delivered/expected       msg/s  msg/s/cons   p50 ms   p99 ms   max ms  pub msg/s");
    let ws = run("sidecar WS", Some(&ws_url), mqtt, &load).await;
    let sidecar = run("sidecar MQTT", None, mqtt, &load).await;
    let mosquitto = match mosquitto().await {
        Ok((_broker, addr)) => run("mosquitto MQTT", None, addr, &load).await,
        Err(e) => {
            println!("mosquitto MQTT  skipped: {e:#}");
            None
        }
    };
    println!(
        "msg/s, sidecar MQTT / mosquitto MQTT: {}",
        ratio(sidecar, mosquitto)
    );
    println!(
        "msg/s, sidecar WS / sidecar MQTT:     {}",
        ratio(ws, sidecar)
    );
    let _ = stop.send(());
    let _ = timeout(SETUP, running).await;
    Ok(())
}

fn main() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(bench())
}
