//! Durability (issue 31): what the store costs and how fast a restart
//! brings everything back, against Mosquitto with persistence in the same
//! run.
//!
//! Rows:
//! - `fanin`: DURABILITY_PUBLISHERS publishers (8) send DURABILITY_MESSAGES
//!   (20 000) QoS 1 messages in all (64 bytes each, up to 100 unacknowledged
//!   each) to one kept session (clean session off) that takes them as they
//!   come: messages per second until the session has them all. The sidecar
//!   memory-only, with the store syncing every batch (the default), and
//!   syncing periodically; Mosquitto with `persistence true` (which writes
//!   only at its autosave and shutdown: not durable per message).
//! - `restart`: DURABILITY_RETAINED (100 000) retained messages,
//!   DURABILITY_SESSIONS (10 000) kept sessions over 100 topics, and
//!   DURABILITY_PER_TOPIC (100) messages per topic queued for each of them
//!   (1 000 000 queued at the defaults); then SIGTERM and a start on the
//!   same directory: time to "Sidecar ready.", and memory (VmRSS) before
//!   and after.
//!
//! `cargo bench --bench durability` (DURABILITY_ROWS=fanin,restart picks
//! rows). Everything on loopback ephemeral ports and temporary
//! directories; the sidecar is the release binary in a process of its own.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lmos_testkit::process::{on_directory, DataDir, Started};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn options(addr: std::net::SocketAddr, id: &str, clean: bool) -> MqttOptions {
    let mut o = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    o.set_keep_alive(Duration::from_secs(60));
    o.set_clean_session(clean);
    o.set_inflight(100);
    o
}

/// Connects, waits for the CONNACK, keeps the event loop running; the
/// publications it gets are counted in `got`.
async fn client(
    addr: std::net::SocketAddr,
    id: &str,
    clean: bool,
    got: Option<Arc<AtomicU64>>,
) -> Result<(AsyncClient, tokio::sync::mpsc::UnboundedReceiver<Packet>)> {
    let (client, mut events) = AsyncClient::new(options(addr, id, clean), 100);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(event) = events.poll().await {
            match event {
                Event::Incoming(Packet::Publish(_)) => {
                    if let Some(got) = &got {
                        got.fetch_add(1, Relaxed);
                    }
                }
                Event::Incoming(p) => {
                    let _ = tx.send(p);
                }
                Event::Outgoing(Outgoing::Disconnect) => return,
                Event::Outgoing(_) => {}
            }
        }
    });
    let mut rx = rx;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(Packet::ConnAck(_))) => return Ok((client, rx)),
            Ok(Some(_)) => {}
            _ => bail!("no CONNACK from {addr}"),
        }
    }
}

async fn subscribed(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Packet>) -> Result<()> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(Packet::SubAck(_))) => return Ok(()),
            Ok(Some(_)) => {}
            _ => bail!("no SUBACK"),
        }
    }
}

/// Messages per second from the first publication until the kept session
/// has them all.
async fn fanin(addr: std::net::SocketAddr) -> Result<f64> {
    let publishers = env_or("DURABILITY_PUBLISHERS", 8);
    let total = env_or("DURABILITY_MESSAGES", 20_000);
    let got = Arc::new(AtomicU64::new(0));
    let (sub, mut rx) = client(addr, "fanin-sub", false, Some(got.clone())).await?;
    sub.subscribe("bench/fanin/#", QoS::AtLeastOnce).await?;
    subscribed(&mut rx).await?;
    let payload = vec![b'x'; 64];
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let (publisher, _rx) = client(addr, &format!("fanin-pub-{p}"), true, None).await?;
        let payload = payload.clone();
        let each = total / publishers;
        tasks.push(tokio::spawn(async move {
            for _ in 0..each {
                publisher
                    .publish(
                        format!("bench/fanin/{p}"),
                        QoS::AtLeastOnce,
                        false,
                        payload.clone(),
                    )
                    .await?;
            }
            anyhow::Ok(publisher)
        }));
    }
    let expected = (total / publishers * publishers) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got.load(Relaxed) < expected {
        if Instant::now() > deadline {
            bail!("the kept session got {} of {expected}", got.load(Relaxed));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = expected as f64 / started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await?;
    }
    // Ends the session, so a run after this one starts afresh.
    let _ = sub.disconnect().await;
    let _ = client(addr, "fanin-sub", true, None)
        .await?
        .0
        .disconnect()
        .await;
    Ok(rate)
}

fn sidecar(dir: &DataDir, env: &[(&str, &str)]) -> Started {
    let mut cmd = lmos_testkit::sidecar_command!();
    on_directory(&mut cmd, &dir.0).env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    // The restart row's 10 000 kept sessions are all anonymous: one
    // principal, past `mqtt.max_kept_sessions_per_principal`'s default.
    for key in ["MAX_KEPT_SESSIONS", "MAX_KEPT_SESSIONS_PER_PRINCIPAL"] {
        cmd.env(format!("LMOS_SIDECAR_MQTT__{key}"), "1000000");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    Started::start(&mut cmd)
}

/// Mosquitto and its directory (removed after it).
struct Mosquitto(std::process::Child, #[allow(dead_code)] DataDir);

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mosquitto() -> Result<(Mosquitto, std::net::SocketAddr)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = DataDir::new("durability-mosquitto");
    let conf = dir.0.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nmax_queued_messages 0\nmax_inflight_messages 100\n",
            dir.0.display()
        ),
    )?;
    let child = Command::new("mosquitto")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("mosquitto on PATH")?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok((Mosquitto(child, dir), addr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("mosquitto did not listen")
}

async fn fanin_rows() -> Result<()> {
    println!("## fanin: QoS 1 to one kept session, messages/s (higher is better)");
    let mut rows: Vec<(&str, f64)> = Vec::new();
    for (name, env) in [
        (
            "sidecar, memory only",
            vec![("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true")],
        ),
        ("sidecar, store (every_batch)", vec![]),
        (
            "sidecar, store (periodic, 1 s)",
            vec![("LMOS_SIDECAR_STORE__SYNC", "periodic")],
        ),
    ] {
        let dir = DataDir::new("durability-fanin");
        let s = sidecar(&dir, &env);
        let rate = fanin(s.mqtt).await?;
        println!("{name:<40} {rate:>10.0}");
        rows.push((name, rate));
        s.terminate();
    }
    match mosquitto() {
        Ok((m, addr)) => {
            let rate = fanin(addr).await?;
            println!("{:<40} {rate:>10.0}", "mosquitto, persistence true");
            rows.push(("mosquitto", rate));
            drop(m);
        }
        Err(e) => println!("mosquitto: skipped ({e})"),
    }
    let by: HashMap<&str, f64> = rows.iter().copied().collect();
    if let (Some(mem), Some(store)) = (
        by.get("sidecar, memory only"),
        by.get("sidecar, store (every_batch)"),
    ) {
        println!("store ÷ memory only: {:.2}×", store / mem);
        if let Some(m) = by.get("mosquitto") {
            println!("store ÷ mosquitto (persistence true): {:.2}×", store / m);
        }
    }
    Ok(())
}

async fn restart_row() -> Result<()> {
    let retained = env_or("DURABILITY_RETAINED", 100_000);
    let sessions = env_or("DURABILITY_SESSIONS", 10_000);
    let per_topic = env_or("DURABILITY_PER_TOPIC", 100);
    let topics = 100;
    println!(
        "## restart: {retained} retained, {sessions} kept sessions, {} queued",
        sessions / topics * topics * per_topic
    );
    let dir = DataDir::new("durability-restart");
    let s = sidecar(&dir, &[]);
    let (publisher, _rx) = client(s.mqtt, "filler", true, None).await?;
    let payload = vec![b'r'; 100];
    for i in 0..retained {
        publisher
            .publish(
                format!("bench/retained/{i}"),
                QoS::AtMostOnce,
                true,
                payload.clone(),
            )
            .await?;
    }
    for batch in (0..sessions).collect::<Vec<_>>().chunks(200) {
        let mut joins = Vec::new();
        for &i in batch {
            let addr = s.mqtt;
            joins.push(tokio::spawn(async move {
                let (c, mut rx) = client(addr, &format!("kept-{i}"), false, None).await?;
                c.subscribe(format!("bench/q/{}", i % topics), QoS::AtLeastOnce)
                    .await?;
                subscribed(&mut rx).await?;
                c.disconnect().await?;
                anyhow::Ok(())
            }));
        }
        for j in joins {
            j.await??;
        }
    }
    let (qos1, mut acks) = client(s.mqtt, "filler-q", true, None).await?;
    let mut sent = 0;
    for round in 0..per_topic {
        for t in 0..topics {
            qos1.publish(
                format!("bench/q/{t}"),
                QoS::AtLeastOnce,
                false,
                format!("{round}"),
            )
            .await?;
            sent += 1;
        }
    }
    let mut acked = 0;
    while acked < sent {
        match tokio::time::timeout(Duration::from_secs(60), acks.recv()).await {
            Ok(Some(Packet::PubAck(_))) => acked += 1,
            Ok(Some(_)) => {}
            _ => bail!("{acked} of {sent} PUBACKs"),
        }
    }
    let before = rss_kib(s.process.0.id());
    let file = std::fs::metadata(dir.0.join("store.redb"))?.len();
    s.terminate();
    let started = Instant::now();
    let again = sidecar(&dir, &[]);
    let ready = started.elapsed();
    let after = rss_kib(again.process.0.id());
    let metrics = lmos_testkit::http(again.http, "GET", "/metrics", None, b"")
        .await
        .body;
    let recovered = |what: &str| {
        let key = format!("lmos_sidecar_store{{what=\"recovered_{what}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .unwrap_or("?")
            .to_owned()
    };
    println!(
        "ready after {:.2} s; recovered {} retained, {} sessions, {} queued; VmRSS {} MiB before the restart, {} MiB after; store {} MiB",
        ready.as_secs_f64(),
        recovered("retained"),
        recovered("sessions"),
        recovered("queued"),
        before / 1024,
        after / 1024,
        file / (1 << 20)
    );
    again.terminate();
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let rows = std::env::var("DURABILITY_ROWS").unwrap_or_else(|_| "fanin,restart".into());
    if rows.contains("fanin") {
        fanin_rows().await?;
    }
    if rows.contains("restart") {
        restart_row().await?;
    }
    Ok(())
}
