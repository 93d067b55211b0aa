//! The `ws` scenario: idle WebSocket consumers in stages, the sidecar's RSS
//! settled at each stage and at its peak while they connect.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use rumqttc::{AsyncClient, MqttOptions, QoS};
use serde_json::{json, Value};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, http::HeaderValue, Message};

use super::{env_or, rss_of, start, status_kib};

pub(crate) const THING: &str = "urn:bench:capacity";
pub(crate) const TOPIC: &str = "lmos/urn:bench:capacity/events/tick";
const CONNECT_BATCH: usize = 200;
/// How often the peak RSS is sampled while consumers connect.
const PEAK_EVERY: Duration = Duration::from_millis(50);

/// A consumer: connects, subscribes, says it is `ready`, then reads until
/// `stop`; `seen` is the newest sequence number it got.
async fn consumer(
    url: String,
    seen: Arc<AtomicU64>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<()> {
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
    let subscribe = json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "subscribeEvent", "event": "tick"});
    ws.send(Message::Text(subscribe.to_string().into())).await?;
    let _ = ready.send(());
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t)?;
                    if let Some(seq) = v["data"]["seq"].as_u64() {
                        seen.store(seq, Relaxed);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => bail!("the sidecar closed a consumer"),
            }
        }
    }
    let _ = ws.close(None).await;
    Ok(())
}

/// The agent: one event a second on [`TOPIC`], numbered; the newest
/// number published.
fn agent(mqtt: &str) -> Result<Arc<AtomicU64>> {
    let (host, port) = mqtt.rsplit_once(':').context("mqtt address")?;
    let mut options = MqttOptions::new("capacity-agent", host, port.parse()?);
    options.set_keep_alive(Duration::from_secs(30));
    let (agent, mut agent_loop) = AsyncClient::new(options, 100);
    tokio::spawn(async move { while agent_loop.poll().await.is_ok() {} });
    let published = Arc::new(AtomicU64::new(0));
    let counter = published.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        for seq in 1.. {
            tick.tick().await;
            let event = json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "event", "event": "tick", "data": {"seq": seq}, "timestamp": chrono::Utc::now().to_rfc3339()});
            if agent
                .publish(TOPIC, QoS::AtMostOnce, false, event.to_string())
                .await
                .is_err()
            {
                return;
            }
            counter.store(seq, Relaxed);
        }
    });
    Ok(published)
}

/// The highest VmRSS of `pid` seen since the last [`Peak::take`], sampled
/// every [`PEAK_EVERY`] (the settled figure hides what connecting costs).
struct Peak(Arc<AtomicU64>);

impl Peak {
    fn sample(pid: u32) -> Peak {
        let max = Arc::new(AtomicU64::new(0));
        let seen = max.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PEAK_EVERY);
            while Arc::strong_count(&seen) > 1 {
                tick.tick().await;
                seen.fetch_max(rss_of(pid), Relaxed);
            }
        });
        Peak(max)
    }

    /// The peak since the last take, in KiB; the next one starts afresh.
    fn take(&self, pid: u32) -> u64 {
        self.0.swap(0, Relaxed).max(rss_of(pid))
    }
}

/// The consumers of one deployment, connected in stages.
struct Consumers {
    url: String,
    seen: Vec<Arc<AtomicU64>>,
    tasks: JoinSet<Result<()>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Consumers {
    fn new(url: String) -> Consumers {
        let (stop, _) = tokio::sync::watch::channel(false);
        Consumers {
            url,
            seen: Vec::new(),
            tasks: JoinSet::new(),
            stop,
        }
    }

    /// Connects (and subscribes) consumers, `CONNECT_BATCH` at a time,
    /// until there are `stage`.
    async fn grow_to(&mut self, stage: usize) -> Result<()> {
        while self.seen.len() < stage {
            let batch = CONNECT_BATCH.min(stage - self.seen.len());
            let mut ready = Vec::with_capacity(batch);
            for _ in 0..batch {
                let s = Arc::new(AtomicU64::new(0));
                self.seen.push(s.clone());
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
                let stop = self.stop.subscribe();
                self.tasks
                    .spawn(consumer(self.url.clone(), s, stop, ready_tx));
                ready.push(ready_rx);
            }
            // Connected and subscribed; then each reads on its own.
            for r in ready {
                if r.await.is_err() {
                    let failed = self.tasks.join_next().await;
                    bail!("a consumer failed to connect: {failed:?}");
                }
            }
        }
        Ok(())
    }

    /// Until every consumer got an event published after now.
    async fn all_delivered(&self, published: &AtomicU64) -> Result<()> {
        let mark = published.load(Relaxed) + 1;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.seen.iter().any(|s| s.load(Relaxed) < mark) {
            if Instant::now() > deadline {
                let behind = self.seen.iter().filter(|s| s.load(Relaxed) < mark).count();
                bail!(
                    "{behind} of {} consumers got no event in 60 s",
                    self.seen.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    async fn leave(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        while let Some(done) = self.tasks.join_next().await {
            done??;
        }
        Ok(())
    }
}

/// `CAPACITY_WS_AT=<http address>`: the largest stage's consumers at a
/// sidecar run by hand (under a heap profiler), its agent's events from
/// `CAPACITY_WS_MQTT` (127.0.0.1:1883); held connected and idle for
/// CAPACITY_HOLD_S (20) seconds once each got an event.
async fn profiled(http: &str, most: usize) -> Result<()> {
    let hold: u64 = env_or("CAPACITY_HOLD_S", "20").parse()?;
    let published = agent(&env_or("CAPACITY_WS_MQTT", "127.0.0.1:1883"))?;
    let mut consumers = Consumers::new(format!("ws://{http}/lmos"));
    let started = Instant::now();
    consumers.grow_to(most).await?;
    consumers.all_delivered(&published).await?;
    println!(
        "{most} consumers connected and served in {:.1} s; holding {hold} s",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(hold)).await;
    consumers.leave().await
}

pub async fn scenario() -> Result<()> {
    let stages: Vec<usize> = env_or("CAPACITY_STAGES", "1000,5000,10000")
        .split(',')
        .map(|s| s.trim().parse().context("CAPACITY_STAGES"))
        .collect::<Result<_>>()?;
    let settle = Duration::from_secs(env_or("CAPACITY_SETTLE_S", "60").parse()?);
    let most = stages.iter().copied().max().unwrap_or(0);
    if let Ok(at) = std::env::var("CAPACITY_WS_AT") {
        return profiled(&at, most).await;
    }
    let (sidecar, http, mqtt) = start(most)?;
    let pid = sidecar.0 .0.id();
    let published = agent(&mqtt)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = rss_of(pid);
    println!(
        "sidecar RSS with no consumer: {:.1} MiB",
        baseline as f64 / 1024.0
    );
    println!();
    println!("| consumers | sidecar RSS | per consumer above baseline | peak RSS while connecting | per consumer at peak | connect time |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let peak = Peak::sample(pid);
    let mut consumers = Consumers::new(format!("ws://{http}/lmos"));
    for &stage in &stages {
        let started = Instant::now();
        consumers.grow_to(stage).await?;
        // Every consumer has an event published once all were there.
        consumers.all_delivered(&published).await?;
        let connect_time = started.elapsed();
        let rss = rss_of(pid);
        let top = peak.take(pid);
        let each = |kib: u64| kib.saturating_sub(baseline) as f64 / stage as f64;
        println!(
            "| {stage} | {:.1} MiB | {:.1} KiB | {:.1} MiB | {:.1} KiB | {:.1} s |",
            rss as f64 / 1024.0,
            each(rss),
            top as f64 / 1024.0,
            each(top),
            connect_time.as_secs_f64()
        );
    }
    drop(peak);
    consumers.leave().await?;
    tokio::time::sleep(settle).await;
    let after = rss_of(pid);
    println!();
    println!(
        "sidecar RSS {} s after every consumer left: {:.1} MiB ({:+.1} MiB from the baseline); its high-water mark (VmHWM) {:.1} MiB",
        settle.as_secs(),
        after as f64 / 1024.0,
        (after as f64 - baseline as f64) / 1024.0,
        status_kib(pid, "VmHWM") as f64 / 1024.0
    );
    Ok(())
}
