//! Fan-out: one MQTT publisher, N consumers of one event stream, against the
//! sidecar's WebSocket gateway, the sidecar's MQTT port, a Mosquitto and a
//! bare rumqttd (the embedded copy, alone, with the sidecar's settings); the
//! sidecar with tracing off, exporting to a collector, and exporting to a
//! collector that is down.
//!
//! `cargo bench --bench fanout`; settings: FANOUT_N consumers (4),
//! FANOUT_MESSAGES (20000), FANOUT_PAYLOAD bytes of padding in each event's
//! data (64), FANOUT_TRACING a comma list of the sidecar's tracing modes
//! (off,recent,collector,down), FANOUT_VALUE_TOPICS 0 to turn the sidecar's
//! value-only topics off (`topics.value_topics`, on by default), FANOUT_QOS
//! the QoS of the publisher and the MQTT subscribers (1, or 0),
//! FANOUT_SCENARIOS a comma list of rows (ws,mqtt,mqttws,mosquitto,bare;
//! mqttws: MQTT 3.1.1 subscribers over the sidecar's `/mqtt`) and
//! FANOUT_RUNS how many times each row runs (1; rows interleaved, ratios
//! from the medians), FANOUT_PUBLISHER_WS=1 to have the sidecar's rows
//! published by an agent on its WebSocket gateway instead of over MQTT
//! (the peers' rows keep the MQTT publisher), FANOUT_WS_READ_BUFFER the
//! gateway's `read_buffer_size` in bytes, FANOUT_AUTH=1 to require
//! authentication on the sidecar (HTTP Basic on the WebSocket handshake,
//! username and password on MQTT; one principal granted everything; every
//! client of every row sends the credentials, which Mosquitto and the bare
//! rumqttd ignore), FANOUT_STARVE a count of busy loops (or `cores`) to
//! run the consumers CPU-starved beside them, at nice 19 (see
//! `fanout/starve.rs`; run `FANOUT_SCENARIOS=ws,mqtt` for the WebSocket and
//! MQTT rows in the same run), FANOUT_WS_QUEUE the gateway's
//! `outbound_queue` (1024 was its default before issue 48). Tracing modes:
//! - off: no OTLP endpoint and no recent spans kept
//!   (`tracing.recent_spans_bytes = 0`): no spans at all;
//! - recent: no OTLP endpoint, the recent spans kept for the console (the
//!   default); the other modes keep them too;
//! - collector: OTLP/gRPC to a receiver in this process (its own thread and
//!   runtime) that counts the spans it gets, reading each request in place;
//! - down: OTLP/gRPC to a port on which nothing listens.
//!
//! Each (scenario, mode) row gets a fresh sidecar, stopped afterwards through
//! its shutdown future, which flushes its spans. Every event carries its own
//! `traceparent`, so with tracing on each event's fan-out to the WebSocket
//! consumers is a span; deliveries to MQTT subscribers are the broker's and
//! not traced.
//! The standard `OTEL_BSP_*` variables tune the exporter's batching; an
//! `OTEL_EXPORTER_OTLP_*ENDPOINT` would override the modes and is refused.
//!
//! The publisher sends at QoS 1 with at most 100 messages in flight and never
//! pauses, so latencies (publish call to receipt) are mostly queueing under
//! saturation. MQTT subscribers use QoS 1. Clients and brokers keep their TCP
//! defaults (no TCP_NODELAY); everything shares this machine.
//!
//! Columns: msg/s is deliveries to all consumers per second from the first
//! publish to the last delivery; msg/s/cons the mean of each consumer's own
//! rate; pub msg/s the publisher's rate; spans what the collector received
//! once the sidecar had stopped; CPU us this process's CPU time (user +
//! system, all threads, the bench's own clients included) per delivery,
//! which a busy machine disturbs much less than msg/s. Loss, duplicates, why a consumer stopped
//! early, spans missing, a slow stop and the warnings and errors logged
//! (by the sidecar or the OpenTelemetry SDK; its broker's are muted) are
//! printed under the row.

use lmos_testkit::bench as support;

#[path = "fanout/starve.rs"]
mod starve;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::SinkExt;
use futures_util::StreamExt;
use lmos_sidecar::config::OtlpProtocol;
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde_json::json;
use support::{env_or, now_ns, receive, secs, subscribed_feed, Feed, BASE};
use tokio::sync::oneshot;
use tokio::time::{timeout, Instant as Deadline};
use tokio_tungstenite::tungstenite::{
    client::IntoClientRequest, http::HeaderValue, protocol::WebSocketConfig, Message as WsMessage,
};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const THING: &str = "urn:bench:thing";
const TOPIC: &str = "lmos/urn:bench:thing/events/tick";
const INFLIGHT: u16 = 100;
/// See [`ws_consumer`].
const CONSUMER_READ_BUFFER: usize = 16 * 1024;
/// Longest any connect, SUBACK or barrier may take.
const SETUP: Duration = Duration::from_secs(10);
/// A consumer that receives nothing for this long stops and reports.
const STALL: Duration = Duration::from_secs(5);
/// Longest a whole scenario may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// Longest a sidecar may take to stop: its 1 s grace for connections, then
/// at most 6 s for flushing spans.
const STOP: Duration = Duration::from_secs(15);
/// A stop taking longer than this is reported.
const SLOW_STOP: Duration = Duration::from_secs(2);

/// Connects and subscribes to THING's events, then waits until that is live:
/// a retained reading on a fresh Thing, observed over the same connection,
/// comes back only after the commands sent before it took effect.
///
/// It reads with a 16 KiB buffer. tungstenite zeroes its whole read buffer
/// (128 KiB by default) before every read: in this process, beside the
/// sidecar, that cost the WebSocket consumers 4 % of all CPU samples, a
/// cost of the bench's client charged to the WebSocket rows alone (a
/// browser pays nothing like it).
async fn ws_consumer(url: &str) -> Result<Feed> {
    let config = WebSocketConfig::default().read_buffer_size(CONSUMER_READ_BUFFER);
    let connect =
        tokio_tungstenite::connect_async_with_config(lmos_request(url)?, Some(config), false);
    let (ws, _) = timeout(SETUP, connect).await??;
    let subscribe = json!({"thingID": THING, "messageType": "subscribeAllEvents"});
    subscribed_feed(ws, subscribe, SETUP).await
}

/// An MQTT 3.1.1 subscriber to every LMOS event over the sidecar's
/// MQTT over WebSocket (`/mqtt`), as a browser's MQTT.js would be: the
/// packets written and read here (the test kit's raw codec), acknowledged
/// at `qos`; live once this returns.
async fn mqtt_ws_consumer(url: &str, id: &str, qos: QoS) -> Result<Feed> {
    use lmos_testkit::raw_mqtt::{connect_login, connect_with, published, subscribe, whole_packet};
    let config = WebSocketConfig::default().read_buffer_size(CONSUMER_READ_BUFFER);
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mqtt"));
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), false);
    let (mut ws, _) = timeout(SETUP, connect).await??;
    let hello = match *AUTH {
        true => connect_login(4, id, AUTH_USER, AUTH_PASSWORD),
        false => connect_with(4, id, true, 60),
    };
    ws.send(WsMessage::Binary(hello.into())).await?;
    let filter = [("lmos/+/events/+", qos as u8)];
    ws.send(WsMessage::Binary(subscribe(4, 1, &filter).into()))
        .await?;
    let mut buf = Vec::new();
    // The CONNACK, then the SUBACK.
    let mut acks = 0;
    timeout(SETUP, async {
        while acks < 2 {
            match ws.next().await {
                Some(Ok(WsMessage::Binary(b))) => buf.extend_from_slice(&b),
                Some(Ok(_)) => continue,
                _ => bail!("closed before the SUBACK"),
            }
            while let Some(len) = whole_packet(&buf) {
                buf.drain(..len);
                acks += 1;
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("no CONNACK/SUBACK from /mqtt")??;
    let events = futures_util::stream::unfold((ws, buf), |(mut ws, mut buf)| async move {
        loop {
            if let Some(len) = whole_packet(&buf) {
                let packet: Vec<u8> = buf.drain(..len).collect();
                if packet[0] & 0xF0 != 0x30 {
                    return Some((Ok(None), (ws, buf)));
                }
                if packet[0] & 0x06 != 0 {
                    // QoS 1: PUBACK with the packet identifier after the topic.
                    // After the fixed header (its remaining length is a varint).
                    let body = 1 + packet[1..].iter().position(|b| b & 0x80 == 0)? + 1;
                    let topic = u16::from_be_bytes([packet[body], packet[body + 1]]);
                    let at = body + 2 + usize::from(topic);
                    let puback = vec![0x40, 2, packet[at], packet[at + 1]];
                    if let Err(e) = ws.send(WsMessage::Binary(puback.into())).await {
                        return Some((Err(format!("error: {e}")), (ws, buf)));
                    }
                }
                let payload = published(4, &packet).1;
                return Some((Ok(Some(payload.into())), (ws, buf)));
            }
            match ws.next().await {
                Some(Ok(WsMessage::Binary(b))) => buf.extend_from_slice(&b),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Some((Err(format!("error: {e}")), (ws, buf))),
                None => return None,
            }
        }
    });
    Ok(Box::pin(events))
}

type Mqtt = (AsyncClient, EventLoop);

/// An MQTT client that has seen its CONNACK and, with a filter, its SUBACK.
async fn mqtt_client(addr: SocketAddr, id: &str, filter: Option<&str>, qos: QoS) -> Result<Mqtt> {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_max_packet_size(4 << 20, 4 << 20);
    options.set_inflight(INFLIGHT);
    if *AUTH {
        options.set_credentials(AUTH_USER, AUTH_PASSWORD);
    }
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    if let Some(f) = filter {
        client.subscribe(f, qos).await?;
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
async fn mqtt_consumer(addr: SocketAddr, id: &str, qos: QoS) -> Result<Feed> {
    let state = mqtt_client(addr, id, Some("lmos/+/events/+"), qos).await?;
    let events = futures_util::stream::unfold(state, |(client, mut el)| async {
        Some((el.poll().await, (client, el)))
    });
    Ok(Box::pin(events.map(|event| match event {
        Ok(Event::Incoming(Packet::Publish(p))) => Ok(Some(p.payload)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("error: {e}")),
    })))
}

/// Who publishes the events: an MQTT client, or an agent on the sidecar's
/// WebSocket gateway (FANOUT_PUBLISHER=ws).
enum Publisher {
    Mqtt(AsyncClient),
    Ws(Box<support::Ws>),
}

/// A WebSocket handshake request for the `lmosprotocol` subprotocol.
fn lmos_request(url: &str) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request> {
    let mut request = url.into_client_request()?;
    let protocol = HeaderValue::from_static("lmosprotocol");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol);
    if *AUTH {
        use base64::Engine;
        let credentials = format!("{AUTH_USER}:{AUTH_PASSWORD}");
        let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
        request.headers_mut().insert(
            "Authorization",
            HeaderValue::from_str(&format!("Basic {basic}"))?,
        );
    }
    Ok(request)
}

/// FANOUT_AUTH: the sidecar requires credentials, these.
static AUTH: LazyLock<bool> = LazyLock::new(|| env_or("FANOUT_AUTH", 0) != 0);
const AUTH_USER: &str = "bench";
const AUTH_PASSWORD: &str = "bench-password";

/// What to send: to how many consumers, how many messages, what padding.
struct Load {
    qos: QoS,
    n: usize,
    m: usize,
    pad: String,
}

/// One scenario's results: a table row and the notes under it.
struct Measured {
    delivered: u64,
    expected: u64,
    /// Deliveries per second.
    rate: f64,
    per_consumer: f64,
    p50: f64,
    p99: f64,
    max: f64,
    publish_rate: String,
    /// This process's CPU time (user + system, every thread: broker,
    /// sidecar and the bench's clients) per delivery, in microseconds.
    cpu_us: f64,
    notes: Vec<String>,
}

impl Measured {
    fn print(&self, name: &str, tracing: &str, spans: &str) {
        let Measured {
            delivered,
            expected,
            rate,
            per_consumer,
            p50,
            p99,
            max,
            ref publish_rate,
            cpu_us,
            ..
        } = *self;
        let pct = 100.0 * delivered as f64 / expected as f64;
        println!("{name:<15} {tracing:<9} {delivered:>9}/{expected:<9} {pct:>5.1}% {rate:>11.0} {per_consumer:>11.0} {p50:>8.2} {p99:>8.2} {max:>8.2} {publish_rate:>10} {cpu_us:>7.2} {spans:>9}");
        for note in &self.notes {
            println!("    {note}");
        }
    }
}

fn print_header() {
    println!(
        "{:<15} {:<9} {:>26} {:>11} {:>11} {:>8} {:>8} {:>8} {:>10} {:>7} {:>9}",
        "scenario",
        "tracing",
        "delivered/expected",
        "msg/s",
        "msg/s/cons",
        "p50 ms",
        "p99 ms",
        "max ms",
        "pub msg/s",
        "CPU us",
        "spans"
    );
}

/// Runs one scenario; consumers use WebSocket at `ws` when given, else MQTT
/// at `broker`.
async fn scenario(
    name: &str,
    via: Via<'_>,
    publisher_ws: Option<&str>,
    broker: SocketAddr,
    load: &Load,
) -> Result<Measured> {
    let Load { qos, n, m, ref pad } = *load;
    // Client IDs: the embedded broker refuses one with a `/` (CONNACK 3).
    let tag = name.replace([' ', '/'], "-");
    let mut feeds = Vec::new();
    for i in 0..n {
        let id = format!("{tag}-sub-{i}");
        // Connected where they will read (FANOUT_STARVE).
        let feed = match via {
            Via::Lmos(url) => {
                let url = url.to_owned();
                starve::on_consumers(async move { ws_consumer(&url).await }).await?
            }
            Via::MqttWs(url) => {
                let url = url.to_owned();
                starve::on_consumers(async move { mqtt_ws_consumer(&url, &id, qos).await }).await?
            }
            Via::Mqtt => {
                starve::on_consumers(async move { mqtt_consumer(broker, &id, qos).await }).await?
            }
        };
        feeds.push(feed.with_context(|| format!("consumer {i}"))?);
    }
    let (mut publisher, mut pub_task) = match publisher_ws {
        Some(url) => {
            let connect = tokio_tungstenite::connect_async(lmos_request(url)?);
            let (ws, _) = timeout(SETUP, connect).await??;
            (Publisher::Ws(Box::new(ws)), None)
        }
        None => {
            let (client, mut pub_loop) =
                mqtt_client(broker, &format!("{tag}-pub"), None, qos).await?;
            let task = tokio::spawn(async move {
                loop {
                    if let Err(e) = pub_loop.poll().await {
                        break e;
                    }
                }
            });
            (Publisher::Mqtt(client), Some(task))
        }
    };
    let (start_ns, deadline) = (now_ns(), Deadline::now() + DEADLINE);
    let cpu_start = cpu_seconds();
    let spawn = |feed| starve::spawn_consumer(receive(m, deadline, STALL, feed));
    let readers: Vec<_> = feeds.into_iter().map(spawn).collect();
    let published = timeout(DEADLINE, async {
        for seq in 0..m {
            let (id, sent) = (uuid::Uuid::new_v4(), now_ns());
            // Every event starts a trace of its own.
            let traceparent = format!("00-{}-{:016x}-01", id.simple(), seq + 1);
            let payload = format!(
                r#"{{"thingID":"{THING}","messageID":"{id}","messageType":"event","event":"tick","traceparent":"{traceparent}","data":{{"seq":{seq},"sent":{sent},"pad":"{pad}"}},"timestamp":"2025-01-20T19:00:00Z"}}"#
            );
            match &mut publisher {
                Publisher::Mqtt(client) => client.publish(TOPIC, qos, false, payload).await?,
                // Written as an agent in a hurry writes: a flush every
                // INFLIGHT messages, so the sidecar reads them in bulk.
                Publisher::Ws(ws) => {
                    ws.feed(WsMessage::Text(payload.into())).await?;
                    if (seq + 1) % INFLIGHT as usize == 0 {
                        ws.flush().await?;
                    }
                }
            }
        }
        if let Publisher::Ws(ws) = &mut publisher {
            ws.flush().await?;
        }
        anyhow::Ok(m as f64 / secs(start_ns, now_ns()))
    });
    let publish_rate = match published.await {
        Ok(Ok(rate)) => format!("{rate:.0}"),
        Ok(Err(_)) if pub_task.as_ref().is_some_and(|t| t.is_finished()) => match pub_task.take() {
            Some(task) => format!("failed: {}", task.await?),
            None => unreachable!("checked just above"),
        },
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => format!("unfinished after {DEADLINE:?}"),
    };
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    let cpu = cpu_seconds() - cpu_start;
    match publisher {
        Publisher::Mqtt(client) => {
            let _ = client.try_disconnect();
        }
        Publisher::Ws(mut ws) => {
            let _ = SinkExt::close(&mut ws).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Some(task) = pub_task {
        task.abort();
    }

    let delivered: u64 = tallies.iter().map(|t| t.unique).sum();
    let last_ns = tallies.iter().map(|t| t.last_ns).max().unwrap_or(0);
    let rates = tallies
        .iter()
        .map(|t| t.unique as f64 / secs(start_ns, t.last_ns));
    let mut lat: Vec<u64> = tallies.iter().flat_map(|t| t.latencies.clone()).collect();
    lat.sort_unstable();
    let at = |p: f64| (lat.len() as f64 * p) as usize;
    let ms = |p: f64| {
        lat.get(at(p).min(lat.len().saturating_sub(1)))
            .map_or(f64::NAN, |&v| v as f64 / 1e6)
    };
    let mut notes = Vec::new();
    for (i, t) in tallies.iter().enumerate() {
        let (got, dups, other, ending) = (t.unique, t.dups, t.other, &t.ending);
        if !t.done() || dups > 0 || other > 0 {
            notes.push(format!(
                "consumer {i}: {got} of {m}, {dups} duplicates, {other} other messages, {ending}"
            ));
        }
    }
    Ok(Measured {
        delivered,
        expected: (n * m) as u64,
        rate: delivered as f64 / secs(start_ns, last_ns),
        per_consumer: rates.sum::<f64>() / n as f64,
        p50: ms(0.5),
        p99: ms(0.99),
        max: ms(1.0),
        publish_rate,
        cpu_us: cpu * 1e6 / delivered.max(1) as f64,
        notes,
    })
}

/// CPU seconds (user + system) this process has used so far, all threads.
/// Wall-clock rates swing with whatever else the machine runs; the CPU
/// one delivery costs much less (issue 32). The bench's clients are in
/// this process too and cost every MQTT row the same, so differences
/// between rows are the brokers'.
#[allow(unsafe_code)]
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The sidecar's tracing in one row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Recent,
    Collector,
    Down,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Off, Mode::Recent, Mode::Collector, Mode::Down];

    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Recent => "recent",
            Mode::Collector => "collector",
            Mode::Down => "down",
        }
    }

    /// FANOUT_TRACING, e.g. `off,down`; all modes when unset.
    fn selected() -> Result<Vec<Mode>> {
        let Ok(list) = std::env::var("FANOUT_TRACING") else {
            return Ok(Mode::ALL.to_vec());
        };
        let modes = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match Mode::ALL.into_iter().find(|m| m.name() == s) {
                Some(mode) => Ok(mode),
                None => {
                    bail!("FANOUT_TRACING: unknown mode `{s}`; use off, recent, collector, down")
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if modes.is_empty() {
            bail!("FANOUT_TRACING is empty; use off, recent, collector, down");
        }
        Ok(modes)
    }
}

/// Spans a collector received: all of them, and those of the deliveries of
/// the benchmark's events.
#[derive(Default)]
struct SpanCounts {
    all: AtomicU64,
    events: AtomicU64,
}

/// The collector's `TraceService/Export`, reading no more of each request
/// than it counts: span names and the fan-out spans' `lmos.recipients`,
/// found by walking the protobuf in place. A collector that decoded every
/// span into the generated types took some 7 % of this process's CPU,
/// which on two shared cores came out of the sidecar's throughput and was
/// counted as tracing's cost; a real collector runs elsewhere.
#[derive(Clone)]
struct CountSpans(Arc<SpanCounts>);

impl tonic::server::NamedService for CountSpans {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl<B> tower_service::Service<tonic::codegen::http::Request<B>> for CountSpans
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let counts = self.0.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(Scan);
            Ok(grpc.unary(Tally(counts), request).await)
        })
    }
}

struct Tally(Arc<SpanCounts>);

impl tonic::server::UnaryService<(u64, u64)> for Tally {
    type Response = ();
    type Future = std::future::Ready<Result<tonic::Response<()>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<(u64, u64)>) -> Self::Future {
        let (all, events) = request.into_inner();
        self.0.all.fetch_add(all, Relaxed);
        self.0.events.fetch_add(events, Relaxed);
        std::future::ready(Ok(tonic::Response::new(())))
    }
}

/// Decodes an `ExportTraceServiceRequest` into (spans, deliveries they
/// stand for); encodes the empty `ExportTraceServiceResponse`.
#[derive(Clone, Copy)]
struct Scan;

impl tonic::codec::Codec for Scan {
    type Encode = ();
    type Decode = (u64, u64);
    type Encoder = Scan;
    type Decoder = Scan;
    fn encoder(&mut self) -> Scan {
        Scan
    }
    fn decoder(&mut self) -> Scan {
        Scan
    }
}

impl tonic::codec::Encoder for Scan {
    type Item = ();
    type Error = tonic::Status;
    fn encode(&mut self, _: (), _: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        Ok(())
    }
}

impl tonic::codec::Decoder for Scan {
    type Item = (u64, u64);
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<(u64, u64)>, tonic::Status> {
        use bytes::Buf;
        let bytes = src.copy_to_bytes(src.remaining());
        let delivery = format!("process {TOPIC}");
        let (mut all, mut events) = (0, 0);
        let bad = || tonic::Status::invalid_argument("not an ExportTraceServiceRequest");
        for resource_spans in proto::fields(&bytes, 1).map_err(|_| bad())? {
            for scope_spans in proto::fields(resource_spans, 2).map_err(|_| bad())? {
                for span in proto::fields(scope_spans, 2).map_err(|_| bad())? {
                    all += 1;
                    let name = proto::fields(span, 5).map_err(|_| bad())?;
                    if name.first().copied() != Some(delivery.as_bytes()) {
                        continue;
                    }
                    // One span per fan-out, saying to how many consumers.
                    let mut recipients = 1;
                    for kv in proto::fields(span, 9).map_err(|_| bad())? {
                        let key = proto::fields(kv, 1).map_err(|_| bad())?;
                        if key.first().copied() == Some(b"lmos.recipients".as_slice()) {
                            for value in proto::fields(kv, 2).map_err(|_| bad())? {
                                if let Some(n) = proto::varint_field(value, 3) {
                                    recipients = n;
                                }
                            }
                        }
                    }
                    events += recipients;
                }
            }
        }
        Ok(Some((all, events)))
    }
}

/// Just enough protobuf reading for [`Scan`].
mod proto {
    pub struct Malformed;

    fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first().ok_or(Malformed)?;
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(Malformed)
    }

    /// Walks a message's fields: (field number, varint value or the
    /// length-delimited bytes).
    fn walk<'a>(mut buf: &'a [u8], mut f: impl FnMut(u64, u64, &'a [u8])) -> Result<(), Malformed> {
        while !buf.is_empty() {
            let tag = varint(&mut buf)?;
            match tag & 7 {
                0 => {
                    let v = varint(&mut buf)?;
                    f(tag >> 3, v, &[]);
                }
                1 => buf = buf.get(8..).ok_or(Malformed)?,
                2 => {
                    let len = usize::try_from(varint(&mut buf)?).map_err(|_| Malformed)?;
                    let (value, rest) = (buf.get(..len).ok_or(Malformed)?, &buf[len..]);
                    f(tag >> 3, 0, value);
                    buf = rest;
                }
                5 => buf = buf.get(4..).ok_or(Malformed)?,
                _ => return Err(Malformed),
            }
        }
        Ok(())
    }

    /// The length-delimited fields numbered `field`.
    pub fn fields(buf: &[u8], field: u64) -> Result<Vec<&[u8]>, Malformed> {
        let mut out = Vec::new();
        walk(buf, |n, _, value| {
            if n == field {
                out.push(value)
            }
        })?;
        Ok(out)
    }

    /// The varint field numbered `field`, if present.
    pub fn varint_field(buf: &[u8], field: u64) -> Option<u64> {
        let mut found = None;
        walk(buf, |n, v, _| {
            if n == field {
                found = Some(v)
            }
        })
        .ok()?;
        found
    }
}

/// An OTLP/gRPC collector that counts spans, on a thread and runtime of its
/// own as if it were another process; it stops when dropped.
struct Collector {
    addr: SocketAddr,
    spans: Arc<SpanCounts>,
    _stop: oneshot::Sender<()>,
}

impl Collector {
    fn start() -> Result<Collector> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let addr = listener.local_addr()?;
        let spans = Arc::new(SpanCounts::default());
        let server = tonic::transport::Server::builder()
            .add_service(CountSpans(spans.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("otlp-collector".into())
            .spawn(move || {
                runtime.block_on(async {
                    tokio::select! {
                        _ = server => {}
                        _ = stopped => {}
                    }
                })
            })?;
        Ok(Collector {
            addr,
            spans,
            _stop: stop,
        })
    }
}

/// Warnings and errors logged in this process (by the sidecar and the
/// OpenTelemetry SDK), counted by level, target and message; the fields of
/// the first of each kind are kept.
static LOGGED: Mutex<BTreeMap<String, (u64, String)>> = Mutex::new(BTreeMap::new());

struct CountLogged;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountLogged {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        // OpenTelemetry's own events have a short `name` and a long message.
        let what = fields.name.or(fields.message).unwrap_or_default();
        let key = format!("{} {}: {what}", meta.level(), meta.target());
        let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
        let (count, first) = logged.entry(key).or_default();
        if *count == 0 {
            *first = fields.rest.join(", ");
        }
        *count += 1;
    }
}

#[derive(Default)]
struct Fields {
    name: Option<String>,
    message: Option<String>,
    rest: Vec<String>,
}

impl Fields {
    fn put(&mut self, field: &tracing::field::Field, mut text: String) {
        if text.len() > 200 {
            let cut = (0..=200).rev().find(|&i| text.is_char_boundary(i));
            text.truncate(cut.unwrap_or(0));
            text.push('…');
        }
        match field.name() {
            "name" => self.name = Some(text),
            "message" => self.message = Some(text),
            other => self.rest.push(format!("{other}={text}")),
        }
    }
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

/// What was logged since the last call, one line per kind.
fn take_logged() -> Vec<String> {
    let logged = std::mem::take(&mut *LOGGED.lock().unwrap_or_else(|e| e.into_inner()));
    let line = |(what, (count, first)): (String, (u64, String))| {
        if first.is_empty() {
            format!("logged {count}x {what}")
        } else {
            format!("logged {count}x {what} (first: {first})")
        }
    };
    logged.into_iter().map(line).collect()
}

/// A port on 127.0.0.1 that nothing listens on.
fn closed_port() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A sidecar tracing in `mode`, and the collector it exports to, if any.
async fn start_sidecar(mode: Mode) -> Result<(Application, Option<Collector>)> {
    let (endpoint, collector) = match mode {
        Mode::Off | Mode::Recent => (String::new(), None),
        Mode::Collector => {
            let collector = Collector::start().context("cannot start the collector")?;
            (format!("http://{}", collector.addr), Some(collector))
        }
        Mode::Down => (format!("http://{}", closed_port()?), None),
    };
    let mut config = Config::default();
    config.store.dir = lmos_testkit::bench::store_dir("fanout");
    config.mqtt.listen = "127.0.0.1:0".parse()?;
    config.mqtt.listen_v5 = "127.0.0.1:0".parse()?;
    config.http.listen = "127.0.0.1:0".parse()?;
    config.log.filter = "off".into();
    config.sidecar.shutdown_grace_ms = 1_000;
    config.tracing.endpoint = endpoint;
    config.tracing.protocol = OtlpProtocol::Grpc;
    if mode == Mode::Off {
        config.tracing.recent_spans_bytes = 0;
    }
    config.topics.value_topics = env_or("FANOUT_VALUE_TOPICS", 1) != 0;
    config.gateway.read_buffer_size =
        env_or("FANOUT_WS_READ_BUFFER", config.gateway.read_buffer_size);
    config.gateway.outbound_queue = env_or("FANOUT_WS_QUEUE", config.gateway.outbound_queue);
    if *AUTH {
        use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
        config.http.authentication = vec![HttpScheme::Basic];
        config.mqtt.authentication = true;
        let everything = Grants::everything();
        config.auth.principals = vec![PrincipalConfig {
            name: AUTH_USER.into(),
            password_hash: lmos_sidecar::auth::credentials::hash_password(AUTH_PASSWORD),
            host: everything.host,
            consume: everything.consume,
            operate: everything.operate,
            ..PrincipalConfig::default()
        }];
    }
    Ok((Application::build(config).await?, collector))
}

/// One row: a fresh sidecar tracing in `mode`, one scenario against it
/// (consumers on its WebSocket gateway when `ws`, else on its MQTT port),
/// then the sidecar stopped, which flushes its spans. Prints the row.
async fn sidecar_row(name: &str, kind: Kind, mode: Mode, load: &Load) -> Option<Measured> {
    let report = |failure: String, notes: Vec<String>| {
        println!("{name:<15} {:<9} failed: {failure}", mode.name());
        for note in notes {
            println!("    {note}");
        }
    };
    let (app, collector) = match start_sidecar(mode).await {
        Ok(started) => started,
        Err(e) => {
            report(format!("{e:#}"), take_logged());
            return None;
        }
    };
    let ws_url = format!("ws://{}/lmos", app.http_addr());
    let mqtt_ws_url = format!("ws://{}/mqtt", app.http_addr());
    let mqtt = app.mqtt_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));

    let publisher = (env_or("FANOUT_PUBLISHER_WS", 0) != 0).then_some(ws_url.as_str());
    let via = match kind {
        Kind::Lmos => Via::Lmos(&ws_url),
        Kind::MqttWs => Via::MqttWs(&mqtt_ws_url),
        Kind::Mqtt => Via::Mqtt,
    };
    let result = scenario(name, via, publisher, mqtt, load).await;

    let _ = stop.send(());
    let stopping = Instant::now();
    let mut notes: Vec<String> = match timeout(STOP, running).await {
        Ok(Ok(Ok(()))) if stopping.elapsed() < SLOW_STOP => None,
        Ok(Ok(Ok(()))) => Some(format!(
            "the sidecar took {:.1?} to stop",
            stopping.elapsed()
        )),
        Ok(Ok(Err(e))) => Some(format!("the sidecar failed: {e}")),
        Ok(Err(e)) => Some(format!("the sidecar's task failed: {e}")),
        Err(_) => Some(format!("the sidecar did not stop within {STOP:?}")),
    }
    .into_iter()
    .collect();
    let mut measured = match result {
        Ok(measured) => measured,
        Err(e) => {
            notes.extend(take_logged());
            report(format!("{e:#}"), notes);
            return None;
        }
    };
    let spans = match &collector {
        Some(c) => {
            let (all, events) = (c.spans.all.load(Relaxed), c.spans.events.load(Relaxed));
            if matches!(kind, Kind::Lmos) && events != measured.delivered {
                measured.notes.push(format!(
                    "the collector's spans cover {events} of the {} deliveries ({all} spans in all)",
                    measured.delivered
                ));
            }
            all.to_string()
        }
        None => "-".into(),
    };
    measured.notes.extend(notes);
    measured.notes.extend(take_logged());
    measured.print(name, mode.name(), &spans);
    Some(measured)
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
    let qos = match env_or("FANOUT_QOS", 1) {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        other => bail!("FANOUT_QOS is {other}; 0 or 1"),
    };
    let load = Load {
        qos,
        n: env_or("FANOUT_N", 4),
        m: env_or("FANOUT_MESSAGES", 20_000),
        pad: "x".repeat(env_or("FANOUT_PAYLOAD", 64)),
    };
    let modes = Mode::selected()?;
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            bail!("{var} is set; it would override the benchmark's tracing modes");
        }
    }
    tracing_subscriber::registry()
        .with(
            // rumqttd logs every client that goes without DISCONNECT as an
            // error, as the benchmark's clients do; the sidecar's own default
            // filter mutes it too.
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing::Level::WARN)
                .with_target("rumqttd", tracing::level_filters::LevelFilter::OFF),
        )
        .with(CountLogged)
        .try_init()?;
    LazyLock::force(&BASE);

    let Load { qos, n, m, ref pad } = load;
    let selected = Scenario::selected()?;
    let runs = env_or("FANOUT_RUNS", 1).max(1);
    let starved = starve::start()?;
    if let Some((_, about)) = &starved {
        println!("{about}");
    }
    println!("fan-out: {n} consumers x {m} messages, {} bytes of padding, a traceparent each; publisher and MQTT subscribers at {qos:?}, {INFLIGHT} in flight; {runs} run(s) of each row, interleaved", pad.len());
    // The peers start once and serve every run.
    let mosquitto = if selected.contains(&Scenario::Mosquitto) {
        match mosquitto().await {
            Ok((broker, addr)) => Some((broker, addr)),
            Err(e) => {
                println!("mosquitto MQTT  -         skipped: {e:#}");
                None
            }
        }
    } else {
        None
    };
    // rumqttd alone (the vendored copy the sidecar embeds), with the
    // sidecar's router settings, clients straight on its 3.1.1 listener: no
    // guard, no gateway.
    let bare = if selected.contains(&Scenario::Bare) {
        match bare_rumqttd().await {
            Ok(addr) => Some(addr),
            Err(e) => {
                println!("bare rumqttd    -         skipped: {e:#}");
                None
            }
        }
    } else {
        None
    };
    print_header();
    let mut rows: BTreeMap<(&str, &str), Vec<Measured>> = BTreeMap::new();
    for _ in 0..runs {
        for &scenario in &selected {
            let (name, via) = match scenario {
                Scenario::SidecarWs => ("sidecar WS", Kind::Lmos),
                Scenario::SidecarMqtt => ("sidecar MQTT", Kind::Mqtt),
                Scenario::SidecarMqttWs => ("sidecar MQTT/WS", Kind::MqttWs),
                Scenario::Mosquitto | Scenario::Bare => {
                    let (name, addr) = match scenario {
                        Scenario::Mosquitto => ("mosquitto MQTT", mosquitto.as_ref().map(|m| m.1)),
                        _ => ("bare rumqttd", bare),
                    };
                    let Some(addr) = addr else { continue };
                    match self::scenario(name, Via::Mqtt, None, addr, &load).await {
                        Ok(measured) => {
                            measured.print(name, "-", "-");
                            rows.entry((name, "-")).or_default().push(measured);
                        }
                        Err(e) => println!("{name:<15} -         failed: {e:#}"),
                    }
                    continue;
                }
            };
            for &mode in &modes {
                if let Some(measured) = sidecar_row(name, via, mode, &load).await {
                    rows.entry((name, mode.name())).or_default().push(measured);
                }
            }
        }
    }

    // Medians over the runs (the one run's figure when there is one).
    let median = |name: &str, mode: &str, of: fn(&Measured) -> f64| {
        let mut v: Vec<f64> = rows.get(&(name, mode))?.iter().map(of).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let rate = |name, mode| median(name, mode, |r| r.rate);
    let p99 = |name, mode| median(name, mode, |r| r.p99);
    let cpu = |name, mode| median(name, mode, |r| r.cpu_us);
    if runs > 1 {
        println!();
        println!("medians of {runs} runs                 msg/s    p99 ms  CPU us");
        for (name, mode) in rows.keys() {
            let (r, p, c) = (rate(name, mode), p99(name, mode), cpu(name, mode));
            println!(
                "{name:<15} {mode:<9} {:>12.0} {:>9.2} {:>7.2}",
                r.unwrap_or(f64::NAN),
                p.unwrap_or(f64::NAN),
                c.unwrap_or(f64::NAN)
            );
        }
    }
    println!();
    println!("relative to tracing off          msg/s    p99  CPU us");
    for name in ["sidecar WS", "sidecar MQTT"] {
        for mode in [Mode::Recent, Mode::Collector, Mode::Down] {
            if rows.contains_key(&(name, mode.name())) {
                let rates = ratio(rate(name, mode.name()), rate(name, "off"));
                let p99s = ratio(p99(name, mode.name()), p99(name, "off"));
                let cpus = ratio(cpu(name, mode.name()), cpu(name, "off"));
                println!(
                    "{name:<15} {:<9} {rates:>12} {p99s:>6} {cpus:>7}",
                    mode.name()
                );
            }
        }
    }
    println!();
    let (ws, sidecar) = (rate("sidecar WS", "off"), rate("sidecar MQTT", "off"));
    println!(
        "msg/s, sidecar MQTT / mosquitto MQTT (tracing off): {}",
        ratio(sidecar, rate("mosquitto MQTT", "-"))
    );
    println!(
        "msg/s, sidecar MQTT / bare rumqttd (tracing off):   {}",
        ratio(sidecar, rate("bare rumqttd", "-"))
    );
    println!(
        "msg/s, sidecar WS / sidecar MQTT (tracing off):     {}",
        ratio(ws, sidecar)
    );
    println!(
        "msg/s, sidecar MQTT/WS / sidecar MQTT (tracing off): {}",
        ratio(rate("sidecar MQTT/WS", "off"), sidecar)
    );
    println!(
        "CPU per delivery, sidecar MQTT/WS / sidecar MQTT:  {}",
        ratio(cpu("sidecar MQTT/WS", "off"), cpu("sidecar MQTT", "off"))
    );
    println!(
        "CPU per delivery, sidecar MQTT / bare rumqttd:      {}",
        ratio(cpu("sidecar MQTT", "off"), cpu("bare rumqttd", "-"))
    );
    if starved.is_some() {
        println!("{}", starve::peak_rss());
    }
    Ok(())
}

/// What one row measures: the sidecar's WebSocket gateway, MQTT port or
/// MQTT over WebSocket (`/mqtt`), or a peer broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    SidecarWs,
    SidecarMqtt,
    SidecarMqttWs,
    Mosquitto,
    Bare,
}

/// How a sidecar row's consumers connect.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lmos,
    Mqtt,
    MqttWs,
}

/// Where a row's consumers connect.
#[derive(Debug, Clone, Copy)]
enum Via<'a> {
    /// The WebSocket gateway (`lmosprotocol`).
    Lmos(&'a str),
    /// MQTT over WebSocket.
    MqttWs(&'a str),
    /// The broker's MQTT port.
    Mqtt,
}

impl Scenario {
    const ALL: [(Scenario, &'static str); 5] = [
        (Scenario::SidecarWs, "ws"),
        (Scenario::SidecarMqtt, "mqtt"),
        (Scenario::SidecarMqttWs, "mqttws"),
        (Scenario::Mosquitto, "mosquitto"),
        (Scenario::Bare, "bare"),
    ];

    /// FANOUT_SCENARIOS, e.g. `mqtt,bare`; all when unset, in this order.
    fn selected() -> Result<Vec<Scenario>> {
        let Ok(list) = std::env::var("FANOUT_SCENARIOS") else {
            return Ok(Self::ALL.iter().map(|(s, _)| *s).collect());
        };
        let chosen = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match Self::ALL.iter().find(|(_, name)| *name == s) {
                Some((scenario, _)) => Ok(*scenario),
                None => {
                    bail!("FANOUT_SCENARIOS: unknown `{s}`; use ws, mqtt, mqttws, mosquitto, bare")
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if chosen.is_empty() {
            bail!("FANOUT_SCENARIOS is empty; use ws, mqtt, mqttws, mosquitto, bare");
        }
        Ok(chosen)
    }
}

/// rumqttd on a free loopback port, in a thread of its own for the rest of
/// the run (it has no way to stop), with the router settings the sidecar
/// gives its embedded broker.
async fn bare_rumqttd() -> Result<SocketAddr> {
    use std::collections::HashMap;
    let mqtt = lmos_sidecar::config::MqttConfig::default();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let server = rumqttd::ServerSettings {
        name: "bare-v4".into(),
        listen: addr,
        tls: None,
        next_connection_delay_ms: 0,
        connections: rumqttd::ConnectionSettings {
            connection_timeout_ms: mqtt.connection_timeout_ms,
            max_payload_size: mqtt.max_payload_size,
            max_inflight_count: mqtt.max_inflight_count,
            auth: None,
            external_auth: None,
            dynamic_filters: true,
        },
    };
    let config = rumqttd::Config {
        id: 0,
        router: rumqttd::RouterConfig {
            max_connections: mqtt.max_connections,
            max_outgoing_packet_count: mqtt.max_outgoing_packet_count,
            max_segment_size: mqtt.segment_size,
            max_segment_count: mqtt.segment_count,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        v4: Some(HashMap::from([("v4".to_owned(), server)])),
        ..Default::default()
    };
    std::thread::spawn(move || {
        let _ = rumqttd::Broker::new(config).start();
    });
    for _ in 0..SETUP.as_millis() / 20 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(addr);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("rumqttd is not listening on {addr} after {SETUP:?}")
}

fn main() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(bench())
}
