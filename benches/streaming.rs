//! Streaming throughput: a WebSocket agent streams an invocation's output
//! (docs/requests.md, streams) to a WebSocket consumer and to an MQTT
//! follower of the invocation's status topic, against the same agent
//! publishing plain `event`s of the same payload size to a WebSocket
//! subscriber and an MQTT subscriber of the event topic, in the same run.
//!
//! `cargo bench --bench streaming`; settings: STREAM_CHUNKS per row (20000),
//! STREAM_BYTES payload bytes per chunk (64), STREAM_ROUNDS rows per mode
//! (1), STREAM_MODES a comma list (text,base64,binary,events,across).
//!
//! Modes, each on a fresh sidecar:
//! - `stream text`: `actionStatus` `running` with `stream: {seq, data,
//!   contentType: text/plain}`, ended by `completed` with `stream.end`;
//! - `stream base64`: the same with binary payloads (an audio frame) as
//!   base64 (`contentEncoding`): a third more on the wire;
//! - `stream binary`: the same binary payloads as binary WebSocket frames
//!   (`lmos_sidecar::lmos::binary`) from the agent and to the consumer
//!   (asked with `"stream": {"binary": true}`); the MQTT receiver follows
//!   the raw stream topic (`.../stream/{invocation}`) instead;
//! - `events`: `event` messages whose `data` is the same text;
//! - `stream across`: `stream text` with the agent on sidecar A and both
//!   receivers on sidecar B, the sidecars linked in NATS's own protocol
//!   through a one-node NATS (`nats-server` on PATH): what crossing costs a
//!   stream.
//!
//! The agent writes as fast as its WebSocket takes (flushing every 64
//! messages): the sidecar's bounded command queue pushes back on its reads.
//! The sidecar runs `gateway.slow_consumer = "drop"` with its default
//! outbound queue, so a receiver that falls behind loses messages (counted
//! as `lost`, from `seq` gaps) rather than being disconnected. MQTT receivers
//! use QoS 1. Columns: msgs/s and payload B/s per receiver, from the
//! agent's first write to that receiver's last message; wire B/s counts the
//! whole JSON text received.

use lmos_testkit::bench as support;

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use lmos_sidecar::config::SlowConsumerPolicy;
use lmos_sidecar::lmos::stream::{Chunk, Reassembler};
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use support::{env_or, now_ns, secs, ws_send, Ws};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;

const THING: &str = "urn:bench:streamer";
const STALL: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Text,
    Base64,
    Binary,
    Events,
    /// Text chunks from an agent on one sidecar to receivers on another,
    /// the two linked over NATS.
    Across,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Text => "stream text",
            Mode::Base64 => "stream base64",
            Mode::Binary => "stream binary",
            Mode::Events => "events",
            Mode::Across => "stream across",
        }
    }
}

/// What one receiver got.
#[derive(Default)]
struct Got {
    messages: u64,
    payload: u64,
    wire: u64,
    lost: u64,
    last_ns: u64,
    ending: String,
}

fn main() -> Result<()> {
    let chunks = env_or("STREAM_CHUNKS", 20_000) as u64;
    let bytes = env_or("STREAM_BYTES", 64);
    let rounds = env_or("STREAM_ROUNDS", 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("streaming: {chunks} messages of {bytes} payload bytes per row, agent over WebSocket");
    println!(
        "{:<14} {:<10} {:>8} {:>6} {:>11} {:>12} {:>12}",
        "mode", "receiver", "msgs", "lost", "msgs/s", "payload B/s", "wire B/s"
    );
    let modes = modes()?;
    runtime.block_on(async {
        for _ in 0..rounds {
            for &mode in &modes {
                match row(mode, chunks, bytes).await {
                    Ok(rows) => {
                        for (receiver, start, got) in rows {
                            let s = secs(start, got.last_ns);
                            println!(
                                "{:<14} {:<10} {:>8} {:>6} {:>11.0} {:>12.0} {:>12.0}{}",
                                mode.name(),
                                receiver,
                                got.messages,
                                got.lost,
                                got.messages as f64 / s,
                                got.payload as f64 / s,
                                got.wire as f64 / s,
                                if got.ending == "complete" {
                                    String::new()
                                } else {
                                    format!("  ({})", got.ending)
                                }
                            );
                        }
                    }
                    Err(e) => println!("{:<14} failed: {e:#}", mode.name()),
                }
            }
        }
    });
    Ok(())
}

/// STREAM_MODES, e.g. `text,across`; all when unset.
fn modes() -> Result<Vec<Mode>> {
    let all = [
        Mode::Text,
        Mode::Base64,
        Mode::Binary,
        Mode::Events,
        Mode::Across,
    ];
    let Ok(list) = std::env::var("STREAM_MODES") else {
        return Ok(all.to_vec());
    };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let short = |m: Mode| m.name().rsplit(' ').next().unwrap_or_default().to_owned();
            all.into_iter()
                .find(|m| short(*m) == s || m.name() == s)
                .with_context(|| {
                    format!("STREAM_MODES: unknown `{s}`; use text, base64, binary, events, across")
                })
        })
        .collect()
}

fn config() -> Result<Config> {
    let mut c = Config::default();
    c.store.dir = lmos_testkit::bench::store_dir("streaming");
    c.mqtt.listen = "127.0.0.1:0".parse()?;
    c.mqtt.listen_v5 = "127.0.0.1:0".parse()?;
    c.http.listen = "127.0.0.1:0".parse()?;
    c.log.filter = "off".into();
    c.sidecar.shutdown_grace_ms = 1_000;
    c.gateway.slow_consumer = SlowConsumerPolicy::Drop;
    Ok(c)
}

async fn ws(url: &str) -> Result<Ws> {
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

async fn next_json(ws: &mut Ws) -> Result<Value> {
    loop {
        match tokio::time::timeout(STALL, ws.next()).await {
            Ok(Some(Ok(WsMessage::Text(t)))) => return Ok(serde_json::from_str(&t)?),
            Ok(Some(Ok(_))) => continue,
            other => bail!("no message: {other:?}"),
        }
    }
}

/// Where the agent and the receivers are: one sidecar, or (`across`) the
/// agent on sidecar A and the receivers on sidecar B, linked in NATS's own
/// protocol through a one-node NATS (`nats-server` on PATH).
struct Places {
    agent_ws: String,
    receivers_ws: String,
    receivers_mqtt: std::net::SocketAddr,
    /// The receivers' sidecar, to know when it has learnt the agent.
    receivers: lmos_sidecar::gateway::Gateway,
    running: Vec<(
        oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    )>,
    _nats: Option<lmos_testkit::nats::NatsCluster>,
}

impl Places {
    async fn start(across: bool) -> Result<Places> {
        let nats = if across {
            Some(lmos_testkit::nats::NatsCluster::start(1).await)
        } else {
            None
        };
        let mut configs = vec![config()?];
        if let Some(cluster) = &nats {
            configs.push(config()?);
            for (i, c) in configs.iter_mut().enumerate() {
                c.cluster.url = format!("nats://{}", cluster.client_addr(0));
                c.cluster.mode = lmos_sidecar::config::ClusterMode::Nats;
                c.sidecar.thing_id = format!("urn:bench:sidecar-{i}");
            }
        }
        let mut apps = Vec::new();
        for c in configs {
            apps.push(Application::build(c).await?);
        }
        let ws_url = |app: &Application| format!("ws://{}/lmos", app.http_addr());
        let last = apps.len() - 1;
        let (agent_ws, receivers_ws) = (ws_url(&apps[0]), ws_url(&apps[last]));
        let (receivers_mqtt, receivers) = (apps[last].mqtt_addr(), apps[last].gateway());
        let http: Vec<_> = apps.iter().map(Application::http_addr).collect();
        let mut running = Vec::new();
        for app in apps {
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(app.run(async move {
                let _ = stopped.await;
            }));
            running.push((stop, task));
        }
        // A linked sidecar is ready once its link subscribed in NATS.
        for addr in http {
            let deadline = Instant::now() + 3 * STALL;
            while lmos_testkit::http(addr, "GET", "/readyz", None, b"")
                .await
                .body
                != "ready\n"
            {
                if Instant::now() > deadline {
                    bail!("sidecar {addr} not ready");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(Places {
            agent_ws,
            receivers_ws,
            receivers_mqtt,
            receivers,
            running,
            _nats: nats,
        })
    }

    /// Until the receivers' sidecar routes to the agent.
    async fn hosted(&self) -> Result<()> {
        let deadline = Instant::now() + 3 * STALL;
        while self.receivers.stats().await.hosted_things == 0 {
            if Instant::now() > deadline {
                bail!("the receivers' sidecar never learnt the agent");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn stop(self) {
        for (stop, task) in self.running.into_iter().rev() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

/// One mode on fresh sidecars: (receiver, start, what it got).
async fn row(mode: Mode, n: u64, bytes: usize) -> Result<Vec<(&'static str, u64, Got)>> {
    let places = Places::start(mode == Mode::Across).await?;
    let mqtt = places.receivers_mqtt;
    let mut agent = ws(&format!("{}?host={THING}", places.agent_ws)).await?;
    places.hosted().await?;
    let mut consumer = ws(&places.receivers_ws).await?;
    let topic = match mode {
        Mode::Events => format!("lmos/{THING}/events/tok"),
        Mode::Binary => format!("lmos/{THING}/actions/speak/stream/bench"),
        _ => format!("lmos/{THING}/actions/speak/status/bench"),
    };
    let mut options = MqttOptions::new("follower", mqtt.ip().to_string(), mqtt.port());
    options.set_max_packet_size(1 << 20, 1 << 20);
    let (follower, mut follower_loop) = AsyncClient::new(options, 1000);
    follower.subscribe(&topic, QoS::AtLeastOnce).await?;
    loop {
        if let Event::Incoming(Packet::SubAck(_)) = follower_loop.poll().await? {
            break;
        }
    }

    // Route: the invocation (stream), or a live subscription (events).
    let route = match mode {
        Mode::Events => {
            ws_send(
                &mut consumer,
                json!({"thingID": THING, "messageType": "subscribeEvent", "event": "tok"}),
            )
            .await?;
            // Warm-up events until both receivers get one: subscriptions live.
            let (mut ws_ok, mut mqtt_ok) = (false, false);
            let warm = json!({"thingID": THING, "messageType": "event", "event": "tok", "data": "warm", "timestamp": "2025-01-01T00:00:00Z"});
            let deadline = Instant::now() + STALL;
            while !(ws_ok && mqtt_ok) {
                if Instant::now() > deadline {
                    bail!("subscriptions did not become live");
                }
                ws_send(&mut agent, warm.clone()).await?;
                let tick = tokio::time::sleep(Duration::from_millis(50));
                tokio::pin!(tick);
                loop {
                    tokio::select! {
                        m = consumer.next(), if !ws_ok => { if matches!(m, Some(Ok(WsMessage::Text(_)))) { ws_ok = true } }
                        e = follower_loop.poll(), if !mqtt_ok => { if let Ok(Event::Incoming(Packet::Publish(_))) = e { mqtt_ok = true } }
                        _ = &mut tick => break,
                    }
                }
            }
            // Let stray warm-ups drain.
            tokio::time::sleep(Duration::from_millis(200)).await;
            None
        }
        _ => {
            let stream = match mode {
                Mode::Binary => json!({"binary": true}),
                _ => json!(true),
            };
            ws_send(
                &mut consumer,
                json!({"thingID": THING, "messageType": "invokeAction", "action": "speak", "stream": stream, "correlationID": "bench"}),
            )
            .await?;
            let request = next_json(&mut agent).await?;
            Some(request["correlationID"].clone())
        }
    };

    let messages: Vec<WsMessage> = (0..n)
        .map(|i| frame(mode, route.as_ref(), i, bytes))
        .chain(std::iter::once(WsMessage::Text(
            last(mode, route.as_ref(), n).into(),
        )))
        .collect();
    let start = now_ns();
    let ws_receiver = tokio::spawn(async move {
        let mut got = read_ws(&mut consumer, mode).await;
        got.ending = got.ending.clone();
        got
    });
    let mqtt_receiver = tokio::spawn(async move {
        let mut got = Got::default();
        let mut r = Reassembler::default();
        let mut seen = 0;
        loop {
            match tokio::time::timeout(STALL, follower_loop.poll()).await {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) if mode == Mode::Binary => {
                    if count_raw(&mut got, n, &p.payload) {
                        break;
                    }
                }
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                    let v: Value = serde_json::from_slice(&p.payload).unwrap_or_default();
                    if count(&mut got, &mut r, &mut seen, mode, &v, p.payload.len()) {
                        break;
                    }
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    got.ending = format!("MQTT: {e}");
                    break;
                }
                Err(_) => {
                    got.ending = "stalled".into();
                    break;
                }
            }
        }
        got
    });
    let mut batch = 0;
    for m in messages {
        agent.feed(m).await?;
        batch += 1;
        if batch == 64 {
            agent.flush().await?;
            batch = 0;
        }
    }
    agent.flush().await?;
    let ws_got = ws_receiver.await.context("WebSocket receiver")?;
    let mqtt_got = mqtt_receiver.await.context("MQTT receiver")?;
    drop(follower);
    places.stop().await;
    Ok(vec![
        ("websocket", start, ws_got),
        ("mqtt", start, mqtt_got),
    ])
}

fn payload(i: u64, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|b| b'a' + ((b as u64 + i) % 26) as u8)
        .collect()
}

/// What the agent sends for chunk `i`: a binary frame in `binary` mode.
fn frame(mode: Mode, route: Option<&Value>, i: u64, bytes: usize) -> WsMessage {
    let text = message(mode, route, i, bytes);
    if mode != Mode::Binary {
        return WsMessage::Text(text.into());
    }
    let bytes = lmos_sidecar::lmos::binary::encode(&text).expect("a binary chunk");
    WsMessage::Binary(bytes.into())
}

/// Counts one raw chunk from the MQTT stream topic; true at the end
/// marker (no bytes).
fn count_raw(got: &mut Got, n: u64, payload: &[u8]) -> bool {
    got.last_ns = now_ns();
    got.wire += payload.len() as u64;
    if payload.is_empty() {
        got.lost = n - got.messages;
        got.ending = "complete".into();
        return true;
    }
    got.messages += 1;
    got.payload += payload.len() as u64;
    false
}

fn message(mode: Mode, route: Option<&Value>, i: u64, bytes: usize) -> String {
    let data = payload(i, bytes);
    match mode {
        Mode::Events => json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "event", "event": "tok", "data": {"seq": i, "text": String::from_utf8(data).unwrap()}, "timestamp": "2025-01-01T00:00:00Z"}),
        _ => {
            let chunk = if !matches!(mode, Mode::Base64 | Mode::Binary) {
                Chunk::text(i, String::from_utf8(data).unwrap())
            } else {
                Chunk::binary(i, "audio/L16;rate=8000", &data)
            };
            json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "actionStatus", "action": "speak", "status": "running", "correlationID": route, "stream": chunk.to_value()})
        }
    }
    .to_string()
}

fn last(mode: Mode, route: Option<&Value>, n: u64) -> String {
    match mode {
        Mode::Events => json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "event", "event": "tok", "data": {"end": n}, "timestamp": "2025-01-01T00:00:00Z"}),
        _ => json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "actionStatus", "action": "speak", "status": "completed", "correlationID": route, "stream": Chunk::end(n).to_value()}),
    }
    .to_string()
}

/// Counts one received message; true at the end of the stream.
fn count(
    got: &mut Got,
    r: &mut Reassembler,
    seen: &mut u64,
    mode: Mode,
    v: &Value,
    wire: usize,
) -> bool {
    got.last_ns = now_ns();
    got.wire += wire as u64;
    match mode {
        Mode::Events => {
            if let Some(end) = v["data"]["end"].as_u64() {
                got.lost = end - *seen;
                got.ending = "complete".into();
                return true;
            }
            if let Some(text) = v["data"]["text"].as_str() {
                got.messages += 1;
                got.payload += text.len() as u64;
                *seen += 1;
            }
            false
        }
        _ => {
            if let Ok(Some(bytes)) = r.feed(v) {
                got.messages += 1;
                got.payload += bytes.len() as u64;
            }
            if r.ended() {
                got.lost = r.gaps.iter().map(|(a, b)| b - a).sum();
                got.ending = "complete".into();
            }
            r.ended()
        }
    }
}

async fn read_ws(ws: &mut Ws, mode: Mode) -> Got {
    let mut got = Got::default();
    let mut r = Reassembler::default();
    let mut seen = 0;
    loop {
        match tokio::time::timeout(STALL, ws.next()).await {
            Ok(Some(Ok(WsMessage::Binary(frame)))) => {
                // A binary chunk: its header's seq, its raw payload.
                got.last_ns = now_ns();
                got.wire += frame.len() as u64;
                if let Ok((header, payload)) = lmos_sidecar::lmos::binary::split(&frame) {
                    let seq = header["stream"]["seq"].as_u64().unwrap_or(seen);
                    got.lost += seq.saturating_sub(seen);
                    seen = seq + 1;
                    got.messages += 1;
                    got.payload += payload.len() as u64;
                }
            }
            Ok(Some(Ok(WsMessage::Text(t)))) if mode == Mode::Binary => {
                let v: Value = serde_json::from_str(&t).unwrap_or_default();
                if v["status"] == "completed" {
                    got.last_ns = now_ns();
                    got.wire += t.len() as u64;
                    got.lost += v["stream"]["seq"]
                        .as_u64()
                        .unwrap_or(seen)
                        .saturating_sub(seen);
                    got.ending = "complete".into();
                    return got;
                }
            }
            Ok(Some(Ok(WsMessage::Text(t)))) => {
                let v: Value = serde_json::from_str(&t).unwrap_or_default();
                if v["data"] == "warm" {
                    continue;
                }
                if count(&mut got, &mut r, &mut seen, mode, &v, t.len()) {
                    return got;
                }
            }
            Ok(Some(Ok(_))) => {}
            other => {
                got.ending = format!("ended: {other:?}");
                return got;
            }
        }
    }
}
