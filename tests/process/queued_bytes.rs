//! What kept MQTT sessions' queues may take on disk (issue 43): each
//! session's, each principal's and all sessions' queued publications are
//! counted as they are stored (keys with the client ID, a copy per matching
//! filter) and bounded; past a bound a session's newest publications are
//! not written for it. Another principal keeps everything; after a restart
//! a session over its bound gets what was kept, and the counts come back
//! and go to zero as it is delivered.

use std::time::Duration;

use lmos_testkit as common;

use common::process::{on_directory, DataDir, Started};
use common::{MqttClient, WAIT};
use lmos_testkit::sidecar_command as sidecar;
use serde_json::json;

const TOPIC: &str = "x/1/2/3/4/5";
const KIB: u64 = 1024;

/// A metric's value in `/metrics` (`series` with its labels), 0 if absent.
async fn metric(sidecar: &Started, series: &str) -> u64 {
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"").await;
    let prefix = format!("{series} ");
    metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

const QUEUED: &str = "lmos_sidecar_mqtt_queued_bytes";

fn hits(limit: &str) -> String {
    format!(r#"lmos_sidecar_limit_hits_total{{limit="{limit}",transport="mqtt"}}"#)
}

/// Publication `i`: 1 KiB, its number first.
fn payload(i: usize) -> serde_json::Value {
    json!(format!("{i:04}{}", "p".repeat(1020)))
}

async fn publish(
    mqtt: std::net::SocketAddr,
    configure: impl FnOnce(&mut rumqttc::MqttOptions),
    n: usize,
) {
    let mut publisher = MqttClient::connect_with(mqtt, "publisher", configure).await;
    for i in 0..n {
        // QoS 1, PUBACK awaited: a session's refused disk copy does not
        // hold it back.
        publisher.publish(TOPIC, &payload(i), false).await;
    }
    publisher.client.disconnect().await.unwrap();
}

/// The numbers of what a kept session gets when it comes back, in order,
/// until none comes for a while.
async fn drain(client: &mut MqttClient) -> Vec<usize> {
    let mut got = Vec::new();
    while let Ok(Some(p)) =
        tokio::time::timeout(Duration::from_millis(700), client.publishes.recv()).await
    {
        let text: String = serde_json::from_slice(&p.payload).unwrap();
        got.push(text[..4].parse().unwrap());
    }
    got
}

/// Waits until `series` reads `want`.
async fn settles(sidecar: &Started, series: &str, want: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = metric(sidecar, series).await;
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} is {now}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The 64 filters matching [`TOPIC`]: each of its six levels as written
/// or `+`.
fn overlapping_filters() -> Vec<String> {
    let levels: Vec<&str> = TOPIC.split('/').collect();
    (0..1u32 << levels.len())
        .map(|mask| {
            let filter: Vec<&str> = levels
                .iter()
                .enumerate()
                .map(|(i, l)| if mask & (1 << i) != 0 { "+" } else { l })
                .collect();
            filter.join("/")
        })
        .collect()
}

fn principal(name: &str) -> String {
    crate::principal_toml(name, "")
}

fn as_(name: &'static str, id: String) -> impl FnOnce(&mut rumqttc::MqttOptions) {
    move |o| {
        o.set_client_id(id);
        o.set_credentials(name, format!("{name}-pw"));
        o.set_clean_session(false);
    }
}

#[tokio::test]
async fn a_principal_flooding_kept_sessions_with_overlapping_filters_stays_within_its_bounds_on_disk(
) {
    const PER_SESSION: u64 = 128 * KIB;
    const PER_PRINCIPAL: u64 = 256 * KIB;
    const SESSIONS: usize = 16;
    const PUBLICATIONS: usize = 100;
    let dir = DataDir::new("queued-flood");
    let toml = format!(
        "[mqtt]\nauthentication = true\nmax_queued_bytes_per_session = {PER_SESSION}\n\n[quotas]\nqueued_bytes = {PER_PRINCIPAL}\n\n{}{}",
        principal("flood"),
        principal("calm")
    );
    let start = crate::configured(&dir, &toml);
    let first = start();
    // No rights needed outside lmos/: kept sessions with client IDs of
    // 250 bytes, each with 64 filters matching the same topic.
    let filters = overlapping_filters();
    for s in 0..SESSIONS {
        let id = format!("{s:03}{}", "f".repeat(247));
        let mut flood = MqttClient::connect_with(first.mqtt, "", as_("flood", id)).await;
        for filter in &filters {
            flood.subscribe(filter).await;
        }
        flood.client.disconnect().await.unwrap();
    }
    let mut calm = MqttClient::connect_with(first.mqtt, "", as_("calm", "calm".into())).await;
    calm.subscribe(TOPIC).await;
    calm.client.disconnect().await.unwrap();
    drop(calm);
    let as_calm = |o: &mut rumqttc::MqttOptions| {
        o.set_credentials("calm", "calm-pw");
    };
    publish(first.mqtt, as_calm, PUBLICATIONS).await;

    // Counted as stored, the flood stays within its principal's share and
    // the calm session within its own; the file holds no more than that,
    // plus 2 MiB for redb's own pages (tables, free-space tracking, pages
    // a commit frees but has not yet reused: the whole file was some 0.8
    // MiB when measured; unbounded, this flood writes some 50 MiB).
    let queued = metric(&first, QUEUED).await;
    let refused = metric(&first, &hits("quotas.queued_bytes")).await;
    first.terminate();
    let file = std::fs::metadata(dir.0.join("data").join("store.redb"))
        .unwrap()
        .len();
    assert!(
        file < PER_PRINCIPAL + PER_SESSION + 2 * 1024 * KIB,
        "store.redb is {file} bytes"
    );
    assert!(queued <= PER_PRINCIPAL + PER_SESSION, "{queued}");
    assert!(refused > 0);

    // The other principal's session got every publication on disk.
    let second = start();
    let mut calm = MqttClient::connect_with(second.mqtt, "", as_("calm", "calm".into())).await;
    assert!(calm.session_present);
    assert_eq!(
        drain(&mut calm).await,
        (0..PUBLICATIONS).collect::<Vec<_>>()
    );
    second.terminate();
}

#[tokio::test]
async fn past_its_bound_a_session_finds_after_a_restart_what_was_kept_and_no_more() {
    const PER_SESSION: u64 = 64 * KIB;
    const PUBLICATIONS: usize = 100;
    let dir = DataDir::new("queued-over");
    let start = || per_session_bound(&dir, PER_SESSION);
    let first = start();
    for id in ["over", "back"] {
        let mut s = MqttClient::connect_kept(first.mqtt, id).await;
        s.subscribe("x/#").await;
        s.client.disconnect().await.unwrap();
    }
    publish(first.mqtt, |_| {}, PUBLICATIONS).await;
    let refused = metric(&first, &hits("max_queued_bytes_per_session")).await;
    let queued = metric(&first, QUEUED).await;

    // Back before a restart: everything, from the broker's memory; what it
    // acknowledges gives back only what was counted for it.
    let mut back = MqttClient::connect_kept(first.mqtt, "back").await;
    assert_eq!(
        drain(&mut back).await,
        (0..PUBLICATIONS).collect::<Vec<_>>()
    );
    back.client.disconnect().await.unwrap();
    drop(back);
    settles(&first, QUEUED, queued / 2).await;
    first.terminate();

    // After a restart: the counts are rebuilt from the disk, and the session
    // gets the oldest it could keep, in order, and no more.
    let second = start();
    assert_eq!(metric(&second, QUEUED).await, queued / 2);
    let mut over = MqttClient::connect_kept(second.mqtt, "over").await;
    assert!(over.session_present);
    let got = drain(&mut over).await;
    let kept = got.len();
    assert_eq!(got, (0..kept).collect::<Vec<_>>(), "the oldest, in order");
    // Each entry costs its key (4 + 29 bytes) and the publication (some
    // 1 KiB and its topic and filter): 59 to 64 fit in 64 KiB.
    let fit = (PER_SESSION / 1100) as usize..=(PER_SESSION / 1024) as usize;
    assert!(fit.contains(&kept), "{kept} kept of {PUBLICATIONS}");
    // Counted as kept: each publication refused for both sessions alike.
    assert_eq!(refused as usize, 2 * (PUBLICATIONS - kept));
    assert!(queued <= 2 * PER_SESSION, "{queued}");
    settles(&second, QUEUED, 0).await;
    over.client.disconnect().await.unwrap();
    drop(over);
    second.terminate();
}

#[tokio::test]
async fn a_session_over_its_bound_takes_nothing_from_another_across_restarts() {
    // `over` pays two copies per publication (two filters match), the
    // others one: `over` reaches its bound halfway, the others keep all,
    // each publication once for both of them. After a restart `over` is
    // delivered their copies too (the broker's log holds them); its
    // acknowledging them must not count as one of theirs, or the second of
    // them would find them gone at the next restart.
    const PER_SESSION: u64 = 64 * KIB;
    const PUBLICATIONS: usize = 50;
    let dir = DataDir::new("queued-other");
    let start = || per_session_bound(&dir, PER_SESSION);
    let first = start();
    let mut over = MqttClient::connect_kept(first.mqtt, "over").await;
    over.subscribe("x/#").await;
    over.subscribe("x/+/+/+/+/+").await;
    over.client.disconnect().await.unwrap();
    drop(over);
    for id in ["other", "other-too"] {
        let mut other = MqttClient::connect_kept(first.mqtt, id).await;
        other.subscribe("x/#").await;
        other.client.disconnect().await.unwrap();
    }
    publish(first.mqtt, |_| {}, PUBLICATIONS).await;
    assert!(metric(&first, &hits("max_queued_bytes_per_session")).await > 0);
    first.terminate();

    let second = start();
    for id in ["over", "other"] {
        let mut s = MqttClient::connect_kept(second.mqtt, id).await;
        let got = drain(&mut s).await;
        assert!(got.len() >= PUBLICATIONS, "{id}: {} delivered", got.len());
        s.client.disconnect().await.unwrap();
    }
    second.terminate();

    let third = start();
    let mut other = MqttClient::connect_kept(third.mqtt, "other-too").await;
    assert_eq!(
        drain(&mut other).await,
        (0..PUBLICATIONS).collect::<Vec<_>>()
    );
    settles(&third, QUEUED, 0).await;
    third.terminate();
}

/// A sidecar on `dir` whose kept sessions may each queue `bytes` on disk.
fn per_session_bound(dir: &DataDir, bytes: u64) -> Started {
    let mut cmd = sidecar!();
    cmd.env(
        "LMOS_SIDECAR_MQTT__MAX_QUEUED_BYTES_PER_SESSION",
        bytes.to_string(),
    );
    Started::start(on_directory(&mut cmd, &dir.0))
}
