//! A collector that is down is reported once, not once per batch (600 traced
//! events make several), and costs no message.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{event, lmos, TestSidecar, WAIT};
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_collector_that_is_down_is_logged_once_and_messages_still_flow() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter(lmos_sidecar::Config::default().log.filter)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = common::test_config();
    config.tracing.endpoint = format!("http://{closed}");
    let sidecar = TestSidecar::start_with(config).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos("urn:t", "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.ws().await;
    for i in 0..600 {
        let mut e = event("urn:t", "e", json!(i));
        e["traceparent"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        agent.send(e).await;
    }
    for i in 0..600 {
        assert_eq!(
            consumer.recv().await["data"],
            i,
            "every message is delivered"
        );
    }
    tokio::time::timeout(WAIT, sidecar.stop())
        .await
        .expect("shutdown ends");
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert_eq!(text.matches("Cannot export spans").count(), 1, "{text}");
}
