//! Fan-out: one MQTT publisher, N consumers of one event stream, against the
//! sidecar's WebSocket gateway, the sidecar's MQTT port and a Mosquitto.
//!
//! `cargo bench --bench fanout`; settings: FANOUT_N consumers (4),
//! FANOUT_MESSAGES per run (20000), FANOUT_PAYLOAD bytes of padding in each
//! event's data (64). The publisher sends at QoS 1 with at most 100 messages
//! in flight and never pauses, so latencies (publish call to receipt) are
//! mostly queueing under saturation. MQTT subscribers use QoS 1.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde::Deserialize;
use serde_json::json;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;

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

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Deserialize)]
struct Tick {
    data: TickData,
}

#[derive(Deserialize)]
struct TickData {
    seq: usize,
    sent: u64,
}

/// What one consumer received.
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
    fn new(m: usize) -> Tally {
        Tally {
            seen: vec![false; m],
            unique: 0,
            dups: 0,
            other: 0,
            latencies: Vec::with_capacity(m),
            last_ns: 0,
            ending: "complete".into(),
        }
    }

    fn record(&mut self, payload: &[u8]) {
        let now = now_ns();
        match serde_json::from_slice::<Tick>(payload) {
            Ok(t) if t.data.seq < self.seen.len() => {
                if std::mem::replace(&mut self.seen[t.data.seq], true) {
                    self.dups += 1;
                } else {
                    self.unique += 1;
                    self.latencies.push(now.saturating_sub(t.data.sent));
                    self.last_ns = now;
                }
            }
            _ => self.other += 1,
        }
    }

    fn done(&self) -> bool {
        self.unique == self.seen.len() as u64
    }
}

/// Waits for the next item for at most STALL, and never past `deadline`.
async fn next<F: std::future::Future>(deadline: tokio::time::Instant, f: F) -> Option<F::Output> {
    let until = deadline.min(tokio::time::Instant::now() + STALL);
    tokio::time::timeout_at(until, f).await.ok()
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_send(ws: &mut Ws, thing: &str, kind: &str, extra: serde_json::Value) -> Result<()> {
    let mut v = json!({"thingID": thing, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": kind});
    for (k, x) in extra.as_object().expect("an object") {
        v[k] = x.clone();
    }
    Ok(ws.send(WsMessage::Text(v.to_string().into())).await?)
}

/// Connects, subscribes to all events of THING, and waits until the
/// subscription is live: a retained reading on a fresh Thing, observed over
/// the same connection, comes back only after the earlier commands applied.
async fn ws_consumer(url: &str) -> Result<Ws> {
    let mut request = url.into_client_request()?;
    let protocol = HeaderValue::from_static("lmosprotocol");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol);
    let (mut ws, _) = timeout(SETUP, tokio_tungstenite::connect_async(request)).await??;
    ws_send(&mut ws, THING, "subscribeAllEvents", json!({})).await?;
    let barrier = format!("urn:barrier:{}", uuid::Uuid::new_v4());
    let reading = json!({"name": "barrier", "value": true, "timestamp": "2025-01-01T00:00:00Z"});
    ws_send(&mut ws, &barrier, "propertyReading", reading).await?;
    ws_send(
        &mut ws,
        &barrier,
        "observeProperty",
        json!({"name": "barrier"}),
    )
    .await?;
    timeout(SETUP, async {
        while let Some(frame) = ws.next().await {
            if let WsMessage::Text(t) = frame? {
                let v: serde_json::Value = serde_json::from_str(&t)?;
                if v["thingID"] == barrier.as_str() && v["name"] == "barrier" {
                    return Ok(());
                }
            }
        }
        bail!("connection closed during the barrier")
    })
    .await
    .context("barrier timed out")??;
    Ok(ws)
}

async fn ws_receive(mut ws: Ws, m: usize, deadline: tokio::time::Instant) -> Tally {
    let mut tally = Tally::new(m);
    while !tally.done() {
        match next(deadline, ws.next()).await {
            None => tally.ending = "stalled".into(),
            Some(Some(Ok(WsMessage::Text(t)))) => {
                tally.record(t.as_bytes());
                continue;
            }
            Some(Some(Ok(WsMessage::Close(f)))) => tally.ending = format!("closed: {f:?}"),
            Some(Some(Ok(_))) => continue,
            Some(Some(Err(e))) => tally.ending = format!("error: {e}"),
            Some(None) => tally.ending = "connection ended".into(),
        }
        break;
    }
    let _ = timeout(Duration::from_secs(1), ws.close(None)).await;
    tally
}

/// An MQTT client whose event loop has seen CONNACK and, when `filter` is
/// given, the SUBACK for it.
async fn mqtt_client(
    addr: SocketAddr,
    id: &str,
    filter: Option<&str>,
) -> Result<(AsyncClient, EventLoop)> {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_inflight(INFLIGHT);
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    if let Some(f) = filter {
        client.subscribe(f, QoS::AtLeastOnce).await?;
    }
    timeout(SETUP, async {
        loop {
            match eventloop.poll().await? {
                Event::Incoming(Packet::ConnAck(_)) if filter.is_none() => return Ok(()),
                Event::Incoming(Packet::SubAck(_)) => return Ok(()),
                _ => {}
            }
        }
    })
    .await
    .with_context(|| format!("{id}: no CONNACK/SUBACK from {addr}"))?
    .map_err(|e: rumqttc::ConnectionError| anyhow::anyhow!("{id}: {e}"))?;
    Ok((client, eventloop))
}

async fn mqtt_receive(
    client: AsyncClient,
    mut eventloop: EventLoop,
    m: usize,
    deadline: tokio::time::Instant,
) -> Tally {
    let mut tally = Tally::new(m);
    while !tally.done() {
        match next(deadline, eventloop.poll()).await {
            None => tally.ending = "stalled".into(),
            Some(Ok(Event::Incoming(Packet::Publish(p)))) => {
                tally.record(&p.payload);
                continue;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => tally.ending = format!("error: {e}"),
        }
        break;
    }
    let _ = client.try_disconnect();
    let _ = timeout(Duration::from_millis(200), eventloop.poll()).await;
    tally
}

enum Consumers {
    Ws(String),
    Mqtt(SocketAddr),
}

enum Ready {
    Ws(Ws),
    Mqtt(AsyncClient, EventLoop),
}

struct Outcome {
    tallies: Vec<Tally>,
    start_ns: u64,
    publish_secs: Option<f64>,
}

async fn scenario(
    name: &str,
    consumers: Consumers,
    broker: SocketAddr,
    n: usize,
    m: usize,
    pad: &str,
) -> Result<Outcome> {
    let tag = name.replace(' ', "-");
    let mut ready = Vec::new();
    for i in 0..n {
        ready.push(match &consumers {
            Consumers::Ws(url) => Ready::Ws(
                ws_consumer(url)
                    .await
                    .with_context(|| format!("WS consumer {i}"))?,
            ),
            Consumers::Mqtt(addr) => {
                let (client, el) =
                    mqtt_client(*addr, &format!("{tag}-sub-{i}"), Some("lmos/+/events/+")).await?;
                Ready::Mqtt(client, el)
            }
        });
    }
    let (publisher, mut pub_loop) = mqtt_client(broker, &format!("{tag}-pub"), None).await?;
    let pub_task = tokio::spawn(async move { while pub_loop.poll().await.is_ok() {} });

    let deadline = tokio::time::Instant::now() + DEADLINE;
    let readers: Vec<_> = ready
        .into_iter()
        .map(|c| match c {
            Ready::Ws(ws) => tokio::spawn(ws_receive(ws, m, deadline)),
            Ready::Mqtt(client, el) => tokio::spawn(mqtt_receive(client, el, m, deadline)),
        })
        .collect();
    let start_ns = now_ns();
    let sender = publisher.clone();
    let publishing = tokio::spawn(timeout(DEADLINE, async move {
        for seq in 0..m {
            let payload = format!(
                r#"{{"thingID":"{THING}","messageID":"{}","messageType":"event","event":"tick","data":{{"seq":{seq},"sent":{},"pad":"{pad}"}},"timestamp":"2025-01-20T19:00:00Z"}}"#,
                uuid::Uuid::new_v4(),
                now_ns()
            );
            sender
                .publish(TOPIC, QoS::AtLeastOnce, false, payload)
                .await?;
        }
        anyhow::Ok((now_ns() - start_ns) as f64 / 1e9)
    }));
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    let publish_secs = match publishing.await? {
        Ok(Ok(secs)) => Some(secs),
        Ok(Err(e)) => {
            println!("  {name}: publisher failed: {e}");
            None
        }
        Err(_) => None,
    };
    let _ = publisher.try_disconnect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    pub_task.abort();
    Ok(Outcome {
        tallies,
        start_ns,
        publish_secs,
    })
}

/// One table row; returns total deliveries per second.
fn report(name: &str, o: &Outcome, n: usize, m: usize) -> f64 {
    let delivered: u64 = o.tallies.iter().map(|t| t.unique).sum();
    let expected = (n * m) as u64;
    let end = o
        .tallies
        .iter()
        .map(|t| t.last_ns)
        .max()
        .unwrap_or(0)
        .max(o.start_ns + 1);
    let secs = (end - o.start_ns) as f64 / 1e9;
    let rate = delivered as f64 / secs;
    let per: Vec<f64> = o
        .tallies
        .iter()
        .filter(|t| t.unique > 0)
        .map(|t| t.unique as f64 / ((t.last_ns - o.start_ns) as f64 / 1e9))
        .collect();
    let per_mean = per.iter().sum::<f64>() / per.len().max(1) as f64;
    let mut lat: Vec<u64> = o
        .tallies
        .iter()
        .flat_map(|t| t.latencies.iter().copied())
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(f64::NAN, |&v| v as f64 / 1e6)
    };
    let publish = o
        .publish_secs
        .map_or("-".into(), |s| format!("{:.0}", m as f64 / s));
    println!(
        "{name:<15} {:>9}/{:<9} {:>6.1}% {secs:>7.2} {rate:>11.0} {per_mean:>11.0} {:>8.2} {:>8.2} {:>8.2} {publish:>10}",
        delivered, expected, 100.0 * delivered as f64 / expected as f64, pct(0.5), pct(0.99), pct(1.0)
    );
    for (i, t) in o.tallies.iter().enumerate() {
        if !t.done() || t.dups > 0 || t.other > 0 {
            println!(
                "    consumer {i}: {} of {m}, {} duplicates, {} other messages, {}",
                t.unique, t.dups, t.other, t.ending
            );
        }
    }
    rate
}

struct Mosquitto {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts Mosquitto on a free port; `None` if it is not installed.
async fn mosquitto() -> Result<Option<(Mosquitto, SocketAddr)>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = std::env::temp_dir().join(format!(
        "fanout-mosquitto-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("mosquitto.conf");
    std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\nmax_inflight_messages {INFLIGHT}\n"))?;
    let spawned = Command::new("mosquitto")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut broker = match spawned {
        Ok(child) => Mosquitto { child, dir },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if let Some(status) = broker.child.try_wait()? {
            bail!("mosquitto exited: {status}");
        }
        if started.elapsed() > SETUP {
            bail!("mosquitto is not listening on {addr}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Some((broker, addr)))
}

async fn bench() -> Result<()> {
    let (n, m, pad) = (
        env_or("FANOUT_N", 4),
        env_or("FANOUT_MESSAGES", 20_000),
        "x".repeat(env_or("FANOUT_PAYLOAD", 64)),
    );
    LazyLock::force(&BASE);
    let mut config = Config::default();
    config.mqtt.listen = "127.0.0.1:0".parse()?;
    config.mqtt.listen_v5 = "127.0.0.1:0".parse()?;
    config.http.listen = "127.0.0.1:0".parse()?;
    config.log.filter = "off".into();
    config.sidecar.shutdown_grace_ms = 1_000;
    let app = Application::build(config).await?;
    let (http, mqtt) = (app.http_addr(), app.mqtt_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sidecar = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));

    println!("fan-out: {n} consumers x {m} messages, {} bytes of padding; publisher QoS 1, {INFLIGHT} in flight", pad.len());
    println!(
        "{:<15} {:>26} {:>7} {:>11} {:>11} {:>8} {:>8} {:>8} {:>10}",
        "scenario",
        "delivered/expected",
        "secs",
        "msg/s",
        "msg/s/cons",
        "p50 ms",
        "p99 ms",
        "max ms",
        "pub msg/s"
    );
    let mut rates = [None; 3];
    let ws = Consumers::Ws(format!("ws://{http}/lmos"));
    match scenario("sidecar WS", ws, mqtt, n, m, &pad).await {
        Ok(o) => rates[0] = Some(report("sidecar WS", &o, n, m)),
        Err(e) => println!("sidecar WS      failed: {e:#}"),
    }
    match scenario("sidecar MQTT", Consumers::Mqtt(mqtt), mqtt, n, m, &pad).await {
        Ok(o) => rates[1] = Some(report("sidecar MQTT", &o, n, m)),
        Err(e) => println!("sidecar MQTT    failed: {e:#}"),
    }
    match mosquitto().await {
        Ok(Some((_broker, addr))) => {
            match scenario("mosquitto MQTT", Consumers::Mqtt(addr), addr, n, m, &pad).await {
                Ok(o) => rates[2] = Some(report("mosquitto MQTT", &o, n, m)),
                Err(e) => println!("mosquitto MQTT  failed: {e:#}"),
            }
        }
        Ok(None) => println!("mosquitto MQTT  skipped: `mosquitto` is not on PATH"),
        Err(e) => println!("mosquitto MQTT  skipped: {e:#}"),
    }
    if let [_, Some(side), Some(mosq)] = rates {
        println!("sidecar MQTT / mosquitto MQTT: {:.2}x", side / mosq);
    }
    if let [Some(ws), Some(side), _] = rates {
        println!("sidecar WS / sidecar MQTT:     {:.2}x", ws / side);
    }
    let _ = stop.send(());
    let _ = timeout(SETUP, sidecar).await;
    Ok(())
}

fn main() -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench())
}
