//! What the benches share: one clock for the process, settings from the
//! environment, the tally of numbered events a consumer received, sending
//! LMOS messages over a WebSocket, and a QoS 1 publisher's PUBACK count.

use std::pin::Pin;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use futures_util::{SinkExt, Stream, StreamExt};
use serde_json::Value;
use tokio::time::{timeout_at, Instant as Deadline};
use tokio_tungstenite::tungstenite::Message;

pub static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

pub fn now_ns() -> u64 {
    BASE.elapsed().as_nanos() as u64
}

/// Seconds between two `now_ns` readings (at least a nanosecond).
pub fn secs(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns).max(1) as f64 / 1e9
}

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// What a consumer reads of an event: its `data`'s numbering.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    data: ProbeData,
}

#[derive(serde::Deserialize, Default)]
struct ProbeData {
    warm: Option<serde::de::IgnoredAny>,
    seq: Option<u64>,
    sent: Option<u64>,
}

/// What one consumer received.
#[derive(Default)]
pub struct Tally {
    pub seen: Vec<bool>,
    pub unique: u64,
    pub dups: u64,
    pub other: u64,
    pub latencies: Vec<u64>,
    pub last_ns: u64,
    pub ending: String,
}

impl Tally {
    pub fn record(&mut self, payload: &[u8]) {
        let now = now_ns();
        // Only the fields the tally needs, the rest skipped unparsed: the
        // consumers share the machine with the server under test, and a
        // whole `Value` tree per delivery (an `IndexMap` per object) cost
        // them more than most servers spend on it, more for the larger
        // WebSocket messages than for MQTT payloads.
        let data = serde_json::from_slice::<Probe>(payload)
            .map(|p| p.data)
            .unwrap_or_default();
        if data.warm.is_some() {
            return;
        }
        let (seq, sent) = (data.seq, data.sent);
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

    pub fn done(&self) -> bool {
        self.unique == self.seen.len() as u64
    }

    /// The first few runs of sequence numbers it did not get.
    pub fn gaps(&self) -> String {
        let missing = self.seen.iter().enumerate().filter(|(_, seen)| !**seen);
        runs_of(missing.map(|(s, _)| s as u64))
    }
}

/// Ascending sequence numbers as their first eight runs: `3, 7-9, …`.
pub fn runs_of(missing: impl IntoIterator<Item = u64>) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for s in missing {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == s => *end = s,
            _ => runs.push((s, s)),
        }
    }
    let shown: Vec<String> = runs
        .iter()
        .take(8)
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let more = if runs.len() > 8 { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// A consumer's messages: a payload, something else (`None`), or the end.
pub type Feed = Pin<Box<dyn Stream<Item = Result<Option<Bytes>, String>> + Send>>;

/// Reads `feed` until all `m` events arrived, it ends, `stall` passes without
/// news, or `deadline` passes.
pub async fn receive(m: usize, deadline: Deadline, stall: Duration, mut feed: Feed) -> Tally {
    let mut t = Tally {
        seen: vec![false; m],
        ..Tally::default()
    };
    t.ending = loop {
        if t.done() {
            break "complete".into();
        }
        match timeout_at(deadline.min(Deadline::now() + stall), feed.next()).await {
            Ok(Some(Ok(Some(payload)))) => t.record(&payload),
            Ok(Some(Ok(None))) => {}
            Ok(Some(Err(ending))) => break ending,
            Ok(None) => break "connection ended".into(),
            Err(_) => break format!("stalled: nothing for {stall:?} or past the deadline"),
        }
    };
    t
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn ws_send(ws: &mut Ws, mut message: Value) -> Result<()> {
    if message["messageID"].is_null() {
        message["messageID"] = uuid::Uuid::new_v4().to_string().into();
    }
    Ok(ws.send(Message::Text(message.to_string().into())).await?)
}

/// Sends `subscribe`, then waits until it is live: a retained reading on a
/// fresh Thing, observed over the same connection, comes back only after the
/// commands sent before it took effect. Then the connection as a [`Feed`].
pub async fn subscribed_feed(mut ws: Ws, subscribe: Value, setup: Duration) -> Result<Feed> {
    ws_send(&mut ws, subscribe).await?;
    let barrier = format!("urn:barrier:{}", uuid::Uuid::new_v4());
    let reading = serde_json::json!({"thingID": barrier, "messageType": "propertyReading", "name": "barrier", "value": true, "timestamp": "2025-01-01T00:00:00Z"});
    ws_send(&mut ws, reading).await?;
    let observe = serde_json::json!({"thingID": barrier, "messageType": "observeProperty", "name": "barrier"});
    ws_send(&mut ws, observe).await?;
    let arrived = tokio::time::timeout(setup, async {
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
        Ok(false) => anyhow::bail!("connection closed before the barrier came back"),
        Err(_) => anyhow::bail!("the barrier did not come back within {setup:?}"),
    }
}

/// A data directory for a bench's in-process sidecar: the store on, as by
/// default, but not in the working directory (where a second bench would
/// find it locked).
pub fn store_dir(bench: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "lmos-bench-{bench}-{}-{}",
        std::process::id(),
        now_ns()
    ))
}

/// A publisher's connection polled in a task of its own: the PUBACKs it
/// counted, and the error that ended it.
pub struct AckPump {
    pub acked: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub failed: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl AckPump {
    pub fn spawn(mut eventloop: rumqttc::EventLoop) -> AckPump {
        use std::sync::atomic::Ordering::Relaxed;
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let task = {
            let (acked, failed) = (acked.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) => {
                            acked.fetch_add(1, Relaxed);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            *failed.lock().unwrap() = Some(e.to_string());
                            return;
                        }
                    }
                }
            })
        };
        AckPump {
            acked,
            failed,
            task,
        }
    }
}
