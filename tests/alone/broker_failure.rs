//! A broker thread that panics must not leave the sidecar half alive.
//!
//! The guard keeps every packet known to crash rumqttd 0.20 away from it,
//! and since rumqttd patch 16 even rumqttd's own listener no longer panics
//! on the packet that used to take MQTT 5 down for everyone (a CONNACK from
//! a client; `raw_connack_no_longer_panics_the_broker` below shows it). So
//! this test raises a panic in rumqttd's code itself, on a thread of its
//! own: a router built with a filter buffer smaller than rumqttd accepts.
//! The sidecar must notice, say so on `/healthz` and `/readyz`, and stop
//! with an error so that its supervisor restarts it.
//!
//! Alone in its test binary (`lmos_testkit::alone()`, tests/alone/main.rs):
//! the panic hook that notices is process-wide, so every other sidecar in
//! the process would count the panic as its own broker's.

use lmos_testkit as common;

use std::time::Duration;

use common::raw_mqtt::{self as raw, Client};
use common::{http, TestSidecar};

#[tokio::test]
async fn a_panicking_broker_stops_the_sidecar_with_an_error() {
    let _turn = common::alone().await;
    let sidecar = TestSidecar::start().await;
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert_eq!(ready.status, 200, "{}", ready.body);

    let panicked = std::thread::spawn(|| {
        let config = rumqttd::RouterConfig {
            max_segment_size: 10,
            max_segment_count: 1,
            initialized_filters: Some(vec!["x".into()]),
            ..Default::default()
        };
        rumqttd::Router::new(0, config)
    })
    .join();
    assert!(panicked.is_err(), "rumqttd refuses a 10-byte segment");

    // Said on the HTTP port for a moment before the sidecar stops.
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let mut said = None;
    while tokio::time::Instant::now() < deadline {
        let response = http(sidecar.http, "GET", "/healthz", None, b"").await;
        if response.status == 503 {
            let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
            assert_eq!(ready.status, 503, "{}", ready.body);
            said = Some(response.body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let said = said.expect("/healthz turns 503");
    assert!(said.contains("MQTT broker failed"), "{said}");
    let ended = sidecar.ended().await;
    let error = ended.expect_err("the sidecar stops with an error");
    assert!(
        error.to_string().contains("embedded MQTT broker failed"),
        "{error}"
    );
}

#[tokio::test]
async fn raw_connack_no_longer_panics_the_broker() {
    let _turn = common::alone().await;
    let sidecar = TestSidecar::start().await;
    // What used to panic rumqttd's connection task (patch 16): refused, and
    // the broker serves on.
    let mut c = Client::connect_clean(sidecar.broker, 5, "x1").await;
    c.send(&[0x20, 0x02, 0x00, 0x00]).await;
    let mut again = Client::open(sidecar.broker).await;
    again.send(&raw::connect_with(5, "x2", true, 60)).await;
    let ack = again.recv().await.expect("a CONNACK");
    assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
    let health = http(sidecar.http, "GET", "/healthz", None, b"").await;
    assert_eq!(health.status, 200, "{}", health.body);
}
