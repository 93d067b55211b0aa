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
//! connection and send CONNECT all at once, each giving up on a CONNACK
//! after 5 s (a common client default); against the sidecar and, in the
//! same run, a Mosquitto on PATH. Prints how many connected, how many
//! failed, the time until the last CONNACK, the broker's RSS with all of
//! them connected (3 s after the last CONNACK) and, from its RSS before
//! the burst, what each idle client costs.
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
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lmos_testkit::process::{start_ready, Running};
use tokio::task::JoinSet;

#[path = "capacity/ws.rs"]
mod ws;

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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
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

/// One client: connected (CONNACK accepted) within 5 s; its connection.
async fn mqtt_client(
    addr: std::net::SocketAddr,
    id: String,
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
        anyhow::Ok(stream)
    };
    let stream = tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .context("no CONNACK within 5 s")??;
    Ok((started.elapsed(), stream))
}

/// A burst of `n` clients at `addr`; (connected, failed, time to the last
/// CONNACK), and the open connections.
async fn burst(
    addr: std::net::SocketAddr,
    n: usize,
    label: &str,
) -> (usize, usize, Duration, Vec<tokio::net::TcpStream>) {
    let mut clients = JoinSet::new();
    for i in 0..n {
        clients.spawn(mqtt_client(addr, format!("{label}-{i}")));
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

/// One broker's row: a burst, then its RSS with every client connected
/// and idle, and the RSS above the one before the burst per client.
async fn burst_row(name: &str, broker: &Sidecar, addr: std::net::SocketAddr, n: usize) {
    let before = broker.rss_kib();
    let (ok, failed, last, _open) = burst(addr, n, name).await;
    // What connecting took and no idle client holds is given back (the
    // sidecar trims its allocator once a wave of connections has settled,
    // looking every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let connected = broker.rss_kib();
    let each = connected.saturating_sub(before) as f64 / ok.max(1) as f64;
    println!(
        "| {name} | {ok} | {failed} | {:.2} s | {:.1} MiB | {:.1} MiB | {each:.1} KiB |",
        last.as_secs_f64(),
        before as f64 / 1024.0,
        connected as f64 / 1024.0,
    );
}

async fn mqtt_scenario() -> Result<()> {
    let n: usize = env_or("CAPACITY_BURST", "5000").parse()?;
    if let Ok(at) = std::env::var("CAPACITY_MQTT_AT") {
        let hold: u64 = env_or("CAPACITY_HOLD_S", "20").parse()?;
        let (ok, failed, last, _open) = burst(at.parse()?, n, "profiled").await;
        println!("{ok} connected, {failed} failed, the last after {last:?}; holding {hold} s");
        tokio::time::sleep(Duration::from_secs(hold)).await;
        return Ok(());
    }
    println!("{n} MQTT 3.1.1 clients connecting at once, 5 s CONNACK timeout each");
    println!();
    println!(
        "| broker | connected | failed | last CONNACK after | RSS before | RSS connected | per idle client |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    {
        let (sidecar, _http, mqtt) = start(10)?;
        let addr = mqtt.parse()?;
        burst_row("lmos-sidecar", &sidecar, addr, n).await;
    }
    match mosquitto() {
        Ok((broker, addr)) => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            burst_row("Mosquitto", &broker, addr, n).await;
        }
        Err(e) => println!("| Mosquitto | - | - | {e} | - | - | - |"),
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
