//! A full disk (issue 43): the store on a small tmpfs, filled by a filler
//! file and MQTT publications to a kept session. While full, nothing is
//! acknowledged that was not written (MQTT 5: 0x97; 3.1.1: no PUBACK),
//! QoS 0 and clean sessions keep working, `/readyz` and the metrics say
//! so; once the filler is deleted, writes are accepted again without a
//! restart, and every acknowledged publication reaches the kept session,
//! after a restart too. And `store.max_file_bytes` without a tmpfs.
//!
//! Alone (tests/alone/main.rs): it mounts, and fills a filesystem.

use lmos_testkit as common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::raw_mqtt::{self as raw, Client};
use common::{http, test_config, TestSidecar};

const TOPIC: &str = "x/kept";
const WEATHER: &str = include_str!("../fixtures/weather-agent-td.json");
const WEATHER_ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

async fn put_td(sidecar: &TestSidecar) -> u16 {
    let path = format!("/things/{WEATHER_ID}");
    let td = Some("application/td+json");
    http(sidecar.http, "PUT", &path, td, WEATHER.as_bytes())
        .await
        .status
}
const PAYLOAD: usize = 32 * 1024;

/// A tmpfs of `size`, unmounted when dropped (a failed assertion too).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("lmos-full-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status();
        match mounted {
            Ok(s) if s.success() => Tmpfs { dir },
            other => panic!(
                "this test mounts a tmpfs to fill it and needs root (as in CI): mount failed: {other:?}"
            ),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

fn payload(i: u32) -> Vec<u8> {
    let mut p = format!("{i:08}").into_bytes();
    p.resize(PAYLOAD, b'.');
    p
}

/// The reason code of an MQTT 5 PUBACK (0 when it has none).
fn puback_reason(p: &[u8]) -> u8 {
    assert_eq!(p[0], 0x40, "a PUBACK: {p:?}");
    p.get(4).copied().unwrap_or(0)
}

/// A 3.1.1 QoS 1 PUBLISH's packet identifier.
fn pkid4(p: &[u8]) -> u16 {
    let mut at = 1;
    while p[at] & 0x80 != 0 {
        at += 1;
    }
    at += 1;
    let topic = u16::from_be_bytes([p[at], p[at + 1]]) as usize;
    at += 2 + topic;
    u16::from_be_bytes([p[at], p[at + 1]])
}

async fn readyz(sidecar: &TestSidecar) -> String {
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert_eq!(
        ready.status, 200,
        "a full store keeps the 200: {}",
        ready.body
    );
    ready.body
}

async fn store_full_metric(sidecar: &TestSidecar) -> String {
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await;
    metrics
        .body
        .lines()
        .find(|l| l.starts_with("lmos_sidecar_store_full "))
        .unwrap_or("no lmos_sidecar_store_full")
        .to_owned()
}

/// Polls (the writer looks at the disk every `store.sync_interval_ms`).
async fn until_ready_says(sidecar: &TestSidecar, full: bool) -> String {
    for _ in 0..200 {
        let body = readyz(sidecar).await;
        if body.contains("store full") == full {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("/readyz never said full = {full}");
}

/// A kept 3.1.1 session subscribed to [`TOPIC`] at QoS 1.
async fn kept_session(sidecar: &TestSidecar) -> Client {
    let mut c = Client::open(sidecar.mqtt).await;
    c.send(&raw::connect_with(4, "kept-reader", false, 60))
        .await;
    let ack = c.recv().await.expect("CONNACK");
    assert_eq!((ack[0], ack[3]), (0x20, 0), "{ack:?}");
    c
}

#[tokio::test]
async fn a_full_disk_refuses_what_it_cannot_keep_and_recovers_by_itself() {
    let _turn = common::alone().await;
    let tmpfs = Tmpfs::mount("24m");
    let mut config = test_config();
    config.store.memory_only = false;
    config.store.dir = tmpfs.dir.join("data");
    config.store.min_free_bytes = 1024 * 1024;
    config.store.sync_interval_ms = 200;
    let sidecar = TestSidecar::start_with(config.clone()).await;

    let mut reader = kept_session(&sidecar).await;
    reader.send(&raw::subscribe(4, 1, &[(TOPIC, 1)])).await;
    assert_eq!(reader.recv().await.expect("SUBACK")[0], 0x90);
    drop(reader);

    // Leave about 4 MiB: a few hundred KiB of publications fill it.
    let filler = tmpfs.dir.join("filler");
    let leave = 4 * 1024 * 1024;
    let fill = free_bytes(&tmpfs.dir).saturating_sub(leave);
    std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();

    let mut publisher = Client::connect_clean(sidecar.mqtt5, 5, "pub5").await;
    let mut acked = BTreeSet::new();
    let mut refused = None;
    for i in 1..=400u32 {
        let pkid = (i % 60_000) as u16 + 1;
        let publish = raw::publish(5, TOPIC, 1, pkid, &[], &payload(i));
        publisher.send(&publish).await;
        let ack = publisher
            .recv()
            .await
            .expect("a PUBACK, not a closed connection");
        match puback_reason(&ack) {
            0 => {
                acked.insert(i);
            }
            reason => {
                refused = Some(reason);
                break;
            }
        }
    }
    assert_eq!(refused, Some(0x97), "MQTT 5: Quota exceeded once full");
    assert!(!acked.is_empty());

    // Full: a 3.1.1 publisher gets no PUBACK (its connection closes).
    let mut v4 = Client::connect_clean(sidecar.mqtt, 4, "pub4").await;
    v4.send(&raw::publish(4, TOPIC, 1, 1, &[], &payload(9_999)))
        .await;
    let got = v4.until_closed().await;
    assert!(got.iter().all(|p| p[0] != 0x40), "no PUBACK: {got:?}");

    // A kept session's subscription cannot be kept: 0x80 (3.1.1).
    let mut late = Client::open(sidecar.mqtt).await;
    late.send(&raw::connect_with(4, "kept-late", false, 60))
        .await;
    assert_eq!(late.recv().await.expect("CONNACK")[0], 0x20);
    late.send(&raw::subscribe(4, 3, &[("z/1", 1), ("z/2", 1)]))
        .await;
    let suback = late
        .recv()
        .await
        .expect("a SUBACK, not a closed connection");
    assert_eq!(suback, [0x90, 4, 0, 3, 0x80, 0x80], "refused per filter");
    drop(late);

    // What needs no write goes on: a clean session's SUBSCRIBE, QoS 0.
    let mut clean = Client::connect_clean(sidecar.mqtt5, 5, "clean-reader").await;
    clean.send(&raw::subscribe(5, 1, &[("q/#", 0)])).await;
    let suback = clean.recv().await.expect("SUBACK");
    assert_eq!((suback[0], suback[5]), (0x90, 0), "{suback:?}");
    publisher
        .send(&raw::publish(5, "q/1", 0, 0, &[], b"still here"))
        .await;
    let delivered = clean.recv().await.expect("the QoS 0 publication");
    assert_eq!(raw::published(5, &delivered).1, b"still here");

    let body = until_ready_says(&sidecar, true).await;
    assert!(
        body.contains("writes are refused until space returns"),
        "{body}"
    );
    assert_eq!(
        store_full_metric(&sidecar).await,
        "lmos_sidecar_store_full 1"
    );
    assert_eq!(put_td(&sidecar).await, 507, "a TD cannot be kept");

    // Space returns: no restart.
    std::fs::remove_file(&filler).unwrap();
    until_ready_says(&sidecar, false).await;
    assert_eq!(
        store_full_metric(&sidecar).await,
        "lmos_sidecar_store_full 0"
    );
    let status = put_td(&sidecar).await;
    assert!(
        [200, 201, 204].contains(&status),
        "a TD is kept again: {status}"
    );
    let after = 10_000;
    publisher
        .send(&raw::publish(5, TOPIC, 1, 1, &[], &payload(after)))
        .await;
    let ack = publisher.recv().await.expect("PUBACK");
    assert_eq!(puback_reason(&ack), 0, "accepted again: {ack:?}");
    acked.insert(after);
    let mut newcomer = Client::connect_clean(sidecar.mqtt5, 5, "newcomer").await;
    newcomer.send(&raw::subscribe(5, 7, &[("y/#", 1)])).await;
    let suback = newcomer
        .recv()
        .await
        .expect("a SUBACK, not a closed connection");
    assert_eq!((suback[0], suback[5]), (0x90, 1), "{suback:?}");
    drop((publisher, clean, newcomer));

    // Every acknowledged publication reaches the kept session after a
    // restart on the same directory.
    sidecar.stop().await;
    let sidecar = TestSidecar::start_with(config).await;
    let mut reader = kept_session(&sidecar).await;
    let mut missing = acked.clone();
    while !missing.is_empty() {
        let p = reader
            .recv()
            .await
            .unwrap_or_else(|| panic!("closed with {} acknowledged missing", missing.len()));
        if p[0] >> 4 != 3 {
            continue;
        }
        let (topic, payload) = raw::published(4, &p);
        assert_eq!(topic, TOPIC);
        let i: u32 = std::str::from_utf8(&payload[..8]).unwrap().parse().unwrap();
        missing.remove(&i);
        if p[0] & 0x06 != 0 {
            let pkid = pkid4(&p);
            reader.send(&raw::packet(0x40, &pkid.to_be_bytes())).await;
        }
    }
    sidecar.stop().await;
    drop(tmpfs);
}

/// `store.max_file_bytes`: past it, an MQTT 5 publisher gets 0x97 and the
/// store file stays under the bound.
#[tokio::test]
async fn past_max_file_bytes_publications_for_kept_sessions_are_refused() {
    let _turn = common::alone().await;
    let dir = std::env::temp_dir().join(format!("lmos-max-file-{}", uuid_like()));
    let mut config = test_config();
    config.store.memory_only = false;
    config.store.dir = dir.clone();
    config.store.max_file_bytes = 4 * 1024 * 1024;
    config.store.min_free_bytes = 0;
    let sidecar = TestSidecar::start_with(config).await;
    let mut reader = kept_session(&sidecar).await;
    reader.send(&raw::subscribe(4, 1, &[(TOPIC, 1)])).await;
    assert_eq!(reader.recv().await.expect("SUBACK")[0], 0x90);
    drop(reader);
    let mut publisher = Client::connect_clean(sidecar.mqtt5, 5, "pub5").await;
    let mut refused = None;
    for i in 1..=400u32 {
        let publish = raw::publish(5, TOPIC, 1, i as u16, &[], &payload(i));
        publisher.send(&publish).await;
        let ack = publisher.recv().await.expect("PUBACK");
        if puback_reason(&ack) != 0 {
            refused = Some(puback_reason(&ack));
            break;
        }
    }
    assert_eq!(refused, Some(0x97));
    let len = std::fs::metadata(dir.join("store.redb")).unwrap().len();
    assert!(len <= 4 * 1024 * 1024 + 64 * 1024, "store file {len} bytes");
    let body = until_ready_says(&sidecar, true).await;
    assert!(body.contains("store.max_file_bytes"), "{body}");
    sidecar.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}
