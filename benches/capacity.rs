//! Capacity (issue 16): what idle WebSocket consumers cost one sidecar, and
//! an MQTT connection burst against Mosquitto in the same run.
//!
//! ```sh
//! cargo bench --bench capacity
//! CAPACITY_STAGES=1000,5000,10000 CAPACITY_SETTLE_S=60 cargo bench --bench capacity
//! CAPACITY_SCENARIO=mqtt CAPACITY_BURST=5000 cargo bench --bench capacity
//! ```
//!
//! **ws** (the default scenario):
//! The release `lmos-sidecar` binary runs in a process of its own (so its
//! resident set is the sidecar's alone) on ephemeral loopback ports, with
//! `http.max_connections` raised past the largest stage. An MQTT agent
//! publishes one event per second on one Thing. Consumers connect over the
//! WebSocket, 200 at a time, each subscribes to that event and then only
//! reads; at each stage (CAPACITY_STAGES, cumulative) the bench waits until
//! every consumer got an event published after the stage was reached, then
//! reads the sidecar's VmRSS. VmRSS is also sampled every 50 ms while they
//! connect: the peak of each stage is what connecting them cost at most. At
//! the end all consumers leave and, after CAPACITY_SETTLE_S seconds (60),
//! VmRSS is read once more. Prints a table: RSS settled and at its peak at
//! each stage, each per consumer above the baseline.
//!
//! **mqtt**: CAPACITY_BURST (5 000) MQTT 3.1.1 clients open their TCP
//! connection and send CONNECT all at once, each giving up after 5 s (a
//! common client default); against the sidecar and, in the same run, a
//! Mosquitto on PATH. Each client, once its CONNACK is in, SUBSCRIBEs at
//! QoS 1 and waits for its SUBACK (within the same 5 s): by default all to
//! one Thing's event (`lmos/urn:bench:capacity/events/tick`, many consumers
//! of one agent's events); `CAPACITY_MQTT_SUBSCRIBE=own` gives each client a
//! Thing of its own (`lmos/urn:bench:capacity-<i>/events/tick`, a filter
//! each), `=0` only connects (the rows before issue 48). Prints how many
//! got in, how many failed, the time until the last CONNACK (SUBACK), the
//! broker's RSS before the burst, its peak while the burst came (VmRSS
//! sampled every 20 ms and the kernel's high-water mark, VmHWM, reset at
//! the burst's start), its RSS settled (3 s after the last client got in),
//! how much of that is mapped from files (the program's code and data,
//! `RssFile`: clean pages shared with the page cache, which no client
//! changes) and, from the RSS before, what each client costs at the peak
//! and settled.
//!
//! To see where an idle client's memory goes, run the sidecar yourself
//! under a heap profiler and point the burst at it:
//! `CAPACITY_MQTT_AT=127.0.0.1:1883 CAPACITY_HOLD_S=20` bursts at that
//! address only (no RSS, no Mosquitto) and keeps the clients connected
//! and idle that long; kill the profiled process meanwhile, and what it
//! still held is what the idle clients cost (`heaptrack_print --print-leaks`).
//! For WebSocket consumers, `CAPACITY_WS_AT=127.0.0.1:8080` (the sidecar's
//! HTTP address; its MQTT one in `CAPACITY_WS_MQTT`, 127.0.0.1:1883, for the
//! agent's events) connects the largest stage's consumers there, waits until
//! each got an event, and holds them CAPACITY_HOLD_S seconds.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lmos_testkit::process::{start_ready, Running};
use tokio::task::JoinSet;

#[path = "capacity/ws.rs"]
mod ws;
use ws::{THING, TOPIC};

/// The sidecar binary in a process of its own (killed when dropped).
struct Sidecar(Running);

impl Sidecar {
    fn rss_kib(&self) -> u64 {
        rss_of(self.0 .0.id())
    }
}

/// The sidecar binary, ready; its HTTP and MQTT addresses.
fn start(max_connections: usize) -> Result<(Sidecar, String, String)> {
    let mut cmd = lmos_testkit::sidecar_command!();
    cmd.env(
        "LMOS_SIDECAR_HTTP__MAX_CONNECTIONS",
        (max_connections + 100).to_string(),
    )
    .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    // Its log keeps being read (and dropped), so it never blocks on a full pipe.
    let (running, _log, ready) = start_ready(&mut cmd);
    let http = ready["http"].as_str().context("http address")?.to_owned();
    let mqtt = ready["mqtt"].as_str().context("mqtt address")?.to_owned();
    Ok((Sidecar(running), http, mqtt))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A process's VmRSS, in KiB.
fn rss_of(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// An MQTT 3.1.1 CONNECT: clean session, keep-alive 60 s.
fn connect_packet(client_id: &str) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60];
    body.extend_from_slice(&(client_id.len() as u16).to_be_bytes());
    body.extend_from_slice(client_id.as_bytes());
    let mut packet = vec![0x10, body.len() as u8];
    packet.extend_from_slice(&body);
    packet
}

/// An MQTT 3.1.1 SUBSCRIBE of one filter at QoS 1, packet identifier 1.
fn subscribe_packet(filter: &str) -> Vec<u8> {
    let mut body = vec![0, 1];
    body.extend_from_slice(&(filter.len() as u16).to_be_bytes());
    body.extend_from_slice(filter.as_bytes());
    body.push(1);
    let mut packet = vec![0x82];
    let mut len = body.len();
    loop {
        let byte = (len % 128) as u8;
        len /= 128;
        packet.push(if len > 0 { byte | 0x80 } else { byte });
        if len == 0 {
            break;
        }
    }
    packet.extend_from_slice(&body);
    packet
}

/// What each client of a burst subscribes to (`CAPACITY_MQTT_SUBSCRIBE`).
#[derive(Clone, Copy)]
enum Subscribe {
    /// Connect only (the rows before issue 48).
    No,
    /// All to one Thing's event.
    Shared,
    /// Each to a Thing of its own.
    Own,
}

impl Subscribe {
    fn from_env() -> Result<Self> {
        match env_or("CAPACITY_MQTT_SUBSCRIBE", "shared").as_str() {
            "0" | "no" => Ok(Self::No),
            "1" | "shared" => Ok(Self::Shared),
            "own" => Ok(Self::Own),
            other => bail!("CAPACITY_MQTT_SUBSCRIBE={other}: 0, shared or own"),
        }
    }

    fn filter(self, i: usize) -> Option<String> {
        match self {
            Self::No => None,
            Self::Shared => Some(TOPIC.to_owned()),
            Self::Own => Some(format!("lmos/{THING}-{i}/events/tick")),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::No => "connecting (no SUBSCRIBE)",
            Self::Shared => "connecting, each then subscribing at QoS 1 to one shared topic",
            Self::Own => "connecting, each then subscribing at QoS 1 to a topic of its own",
        }
    }
}

/// One client: connected (CONNACK accepted) and, with a filter, subscribed
/// at QoS 1 (SUBACK granting it) within 5 s; its connection.
async fn mqtt_client(
    addr: std::net::SocketAddr,
    id: String,
    filter: Option<String>,
) -> Result<(Duration, tokio::net::TcpStream)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = Instant::now();
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(&connect_packet(&id)).await?;
        let mut connack = [0u8; 4];
        stream.read_exact(&mut connack).await?;
        if connack[0] != 0x20 || connack[3] != 0 {
            bail!("refused: {connack:?}");
        }
        if let Some(filter) = filter {
            stream.write_all(&subscribe_packet(&filter)).await?;
            let mut suback = [0u8; 5];
            stream.read_exact(&mut suback).await?;
            if suback[0] != 0x90 || suback[4] != 1 {
                bail!("subscription refused: {suback:?}");
            }
        }
        anyhow::Ok(stream)
    };
    let stream = tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .context("not in within 5 s")??;
    Ok((started.elapsed(), stream))
}

/// A burst of `n` clients at `addr`; (connected, failed, time to the last
/// CONNACK or SUBACK), and the open connections.
async fn burst(
    addr: std::net::SocketAddr,
    n: usize,
    label: &str,
    subscribe: Subscribe,
) -> (usize, usize, Duration, Vec<tokio::net::TcpStream>) {
    let mut clients = JoinSet::new();
    for i in 0..n {
        clients.spawn(mqtt_client(
            addr,
            format!("{label}-{i}"),
            subscribe.filter(i),
        ));
    }
    let (mut ok, mut failed, mut last, mut open) = (0, 0, Duration::ZERO, Vec::new());
    let mut why = std::collections::BTreeMap::<String, usize>::new();
    while let Some(result) = clients.join_next().await {
        match result {
            Ok(Ok((took, stream))) => {
                ok += 1;
                last = last.max(took);
                open.push(stream);
            }
            Ok(Err(e)) => {
                failed += 1;
                *why.entry(format!("{e:#}")).or_default() += 1;
            }
            Err(e) => {
                failed += 1;
                *why.entry(e.to_string()).or_default() += 1;
            }
        }
    }
    for (reason, count) in why {
        eprintln!("{label}: {count} failed: {reason}");
    }
    (ok, failed, last, open)
}

/// A field of /proc/<pid>/status in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Samples `pid`'s VmRSS every 20 ms until dropped; the most seen. The
/// kernel's high-water mark is reset too (`clear_refs` 5), and the peak is
/// the larger of the two, so that a spike between samples counts.
struct PeakRss {
    pid: u32,
    most: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn start(pid: u32) -> Self {
        let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        let most = Arc::new(AtomicU64::new(rss_of(pid)));
        let sampler = tokio::spawn({
            let most = most.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(20));
                loop {
                    tick.tick().await;
                    most.fetch_max(rss_of(pid), Relaxed);
                }
            }
        });
        Self { pid, most, sampler }
    }

    fn peak_kib(&self) -> u64 {
        self.most.load(Relaxed).max(status_kib(self.pid, "VmHWM"))
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// One broker's row: a burst, the RSS at its peak and settled (every client
/// in and idle), and the RSS above the one before the burst per client.
async fn burst_row(
    name: &str,
    broker: &Sidecar,
    addr: std::net::SocketAddr,
    n: usize,
    subscribe: Subscribe,
) {
    let before = broker.rss_kib();
    let peak = PeakRss::start(broker.0 .0.id());
    let (ok, failed, last, _open) = burst(addr, n, name, subscribe).await;
    // What connecting took and no idle client holds is given back (the
    // sidecar trims its allocator once a wave of connections has settled,
    // looking every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = broker.rss_kib();
    let most = peak.peak_kib().max(settled);
    // The pages of the program and its libraries mapped from files (clean,
    // shared with the page cache): how much of the RSS no client changes.
    let mapped = status_kib(broker.0 .0.id(), "RssFile");
    let each = |kib: u64| kib.saturating_sub(before) as f64 / ok.max(1) as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| {name} | {ok} | {failed} | {:.2} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} KiB | {:.1} KiB |",
        last.as_secs_f64(),
        mib(before),
        mib(most),
        mib(settled),
        mib(mapped),
        each(most),
        each(settled),
    );
}

async fn mqtt_scenario() -> Result<()> {
    let n: usize = env_or("CAPACITY_BURST", "5000").parse()?;
    let subscribe = Subscribe::from_env()?;
    if let Ok(at) = std::env::var("CAPACITY_MQTT_AT") {
        let hold: u64 = env_or("CAPACITY_HOLD_S", "20").parse()?;
        let (ok, failed, last, _open) = burst(at.parse()?, n, "profiled", subscribe).await;
        println!("{ok} in, {failed} failed, the last after {last:?}; holding {hold} s");
        tokio::time::sleep(Duration::from_secs(hold)).await;
        return Ok(());
    }
    println!(
        "{n} MQTT 3.1.1 clients at once, {}, 5 s timeout each",
        subscribe.describe()
    );
    println!();
    println!(
        "| broker | in | failed | last in after | RSS before | RSS peak | RSS settled | of it file-mapped | per client, peak | per client, settled |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    {
        let (sidecar, _http, mqtt) = start(10)?;
        let addr = mqtt.parse()?;
        burst_row("lmos-sidecar", &sidecar, addr, n, subscribe).await;
    }
    match mosquitto() {
        Ok((broker, addr)) => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            burst_row("Mosquitto", &broker, addr, n, subscribe).await;
        }
        Err(e) => println!("| Mosquitto | - | - | {e} | - | - | - | - | - | - |"),
    }
    Ok(())
}

/// Mosquitto on a free loopback port, unlimited connections.
fn mosquitto() -> Result<(Sidecar, std::net::SocketAddr)> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let conf = std::env::temp_dir().join(format!("capacity-mosquitto-{}.conf", addr.port()));
    std::fs::write(
        &conf,
        format!(
            "listener {} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\nlog_dest none\n",
            addr.port()
        ),
    )?;
    let child = Command::new("mosquitto")
        .arg("-c")
        .arg(&conf)
        .spawn()
        .context("mosquitto on PATH")?;
    Ok((Sidecar(Running(child)), addr))
}

#[tokio::main]
async fn main() -> Result<()> {
    if env_or("CAPACITY_SCENARIO", "ws") == "mqtt" {
        return mqtt_scenario().await;
    }
    ws::scenario().await
}
