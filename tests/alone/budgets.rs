//! Memory budgets (issue 30, item 6), each filled by real clients: large
//! events over many Things into the resume history, consumers that never
//! read, and messages sent in part over many connections. Each test checks
//! what the client sees, what `/metrics` and `/readyz` say, that the
//! process's resident memory stays bounded (the test process hosts the
//! sidecar; the tests take turns so that they do not measure each other),
//! and that other clients keep working.

use crate::rss_mib;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use lmos_testkit as common;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use common::{event, http, lmos, TestSidecar, WsClient, WAIT};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// One test at a time: each measures the process's memory (and so do
/// the other turn-takers of this test binary, `tests/alone/main.rs`).
async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    common::alone().await
}

/// A sample of `/metrics`, e.g. `memory_budget_hits_total{budget="inbound"}`.
async fn metric(sidecar: &TestSidecar, sample: &str) -> f64 {
    let text = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    let name = format!("lmos_sidecar_{sample} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

async fn used(sidecar: &TestSidecar, budget: &str) -> f64 {
    let sample = format!("memory_budget_bytes{{budget=\"{budget}\",of=\"used\"}}");
    metric(sidecar, &sample).await
}

async fn hits(sidecar: &TestSidecar, budget: &str) -> f64 {
    let sample = format!("memory_budget_hits_total{{budget=\"{budget}\"}}");
    metric(sidecar, &sample).await
}

/// `/readyz` stays 200 and names the budget reached.
async fn assert_ready_and_says(sidecar: &TestSidecar, line: &str) {
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.starts_with("ready"), "{}", ready.body);
    assert!(ready.body.contains(line), "{}", ready.body);
}

/// The close frame a client gets, reading past whatever comes before it.
async fn close_of(ws: &mut WsClient) -> Option<CloseFrame> {
    loop {
        match tokio::time::timeout(WAIT, ws.stream.next()).await {
            Ok(Some(Ok(WsMessage::Close(frame)))) => return frame,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) => return None,
            Err(_) => panic!("the connection was not closed"),
        }
    }
}

/// A consumer whose socket takes little before the sidecar must queue.
async fn paused_consumer(sidecar: &TestSidecar) -> WsClient {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * KIB as u32).unwrap();
    let tcp = socket.connect(sidecar.http).await.unwrap();
    let request = common::ws_request(&sidecar.ws_url(), Some("lmosprotocol"));
    let (stream, _) =
        tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(tcp))
            .await
            .unwrap();
    WsClient::from_stream(stream)
}

#[tokio::test]
async fn large_events_over_many_things_stay_within_the_history_budgets() {
    let _turn = alone().await;
    const THINGS: usize = 30;
    const EVENTS: usize = 12;
    let mut config = common::test_config();
    config.history.max_bytes_per_thing = 512 * KIB;
    config.history.max_bytes = 4 * MIB;
    // rumqttd keeps each filter's log up to segment_size x segment_count
    // (see docs/security.md); small here, so that the history is measured.
    config.mqtt.max_payload_size = 128 * KIB;
    config.mqtt.segment_size = 128 * KIB;
    config.mqtt.segment_count = 2;
    let sidecar = TestSidecar::start_with(config).await;
    let thing = |i: usize| format!("urn:history:{i}");
    let mut consumer = sidecar.ws().await;
    for i in 0..THINGS {
        consumer
            .send(lmos(&thing(i), "subscribeAllEvents", json!({})))
            .await;
    }
    consumer.barrier().await;
    let before = rss_mib();
    let started = Instant::now();
    let blob = "h".repeat(100 * KIB);
    let mut agent = sidecar.ws().await;
    // Thing by Thing: each fills its own budget, then together they fill
    // the total. Read as they come: the history, not the consumer (nor the
    // broker's small logs), is measured.
    for i in 0..THINGS {
        for n in 0..EVENTS {
            let mut e = event(&thing(i), "big", json!({"n": n, "blob": blob}));
            e["messageID"] = json!(format!("{i}-{n}"));
            agent.send(e).await;
            assert_eq!(consumer.recv().await["data"]["n"], n);
        }
    }
    let after = rss_mib();
    let pushed = THINGS * EVENTS * 100 * KIB / MIB;
    eprintln!(
        "history: {pushed} MiB of events over {THINGS} Things in {:?}; VmRSS {before:.0} -> {after:.0} MiB",
        started.elapsed()
    );
    let held = used(&sidecar, "history").await;
    assert!(held > 0.0 && held <= (4 * MIB) as f64, "{held}");
    assert!(hits(&sidecar, "history").await > 0.0);
    assert!(hits(&sidecar, "history_per_thing").await > 0.0);
    assert!(
        after - before < 32.0,
        "{pushed} MiB pushed through a 4 MiB history: VmRSS {before:.0} -> {after:.0} MiB"
    );
    assert_ready_and_says(&sidecar, "history budget full (history.max_bytes").await;
    // A consumer resuming from an evicted event learns of the gap and gets
    // what is kept: the latest events.
    let mut late = sidecar.ws().await;
    let last = THINGS - 1;
    late.send(lmos(
        &thing(last),
        "subscribeAllEvents",
        json!({"lastMessageID": format!("{last}-0")}),
    ))
    .await;
    let gap = late.recv().await;
    assert_eq!(gap["messageType"], "error", "{gap}");
    assert!(
        gap["type"].as_str().unwrap().ends_with("#history-gap"),
        "{gap}"
    );
    let first = late.recv().await;
    assert!(
        first["data"]["n"].as_u64().unwrap() > 0,
        "{}",
        first["data"]["n"]
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn consumers_that_never_read_are_closed_when_the_outbound_budget_is_full() {
    let _turn = alone().await;
    const SLOW: usize = 4;
    const EVENTS: usize = 300;
    let mut config = common::test_config();
    config.gateway.outbound_queue = 100_000;
    config.gateway.max_outbound_bytes = 4 * MIB;
    // Neither the resume history nor the broker's per-filter logs may hold
    // what is measured here.
    config.history.events_per_thing = 0;
    config.mqtt.max_payload_size = 128 * KIB;
    config.mqtt.segment_size = 128 * KIB;
    config.mqtt.segment_count = 2;
    let sidecar = TestSidecar::start_with(config).await;
    let thing = |i: usize| format!("urn:paused:{i}");
    // Each paused consumer follows a Thing of its own: its queue holds
    // messages nobody else's does.
    let mut paused = Vec::new();
    for i in 0..SLOW {
        let mut c = paused_consumer(&sidecar).await;
        c.send(lmos(&thing(i), "subscribeAllEvents", json!({})))
            .await;
        c.barrier().await;
        paused.push(c);
    }
    let mut fast = sidecar.ws().await;
    for i in 0..SLOW {
        fast.send(lmos(&thing(i), "subscribeAllEvents", json!({})))
            .await;
    }
    fast.barrier().await;
    let before = rss_mib();
    let blob = "o".repeat(64 * KIB);
    let mut agent = sidecar.ws().await;
    for n in 0..EVENTS {
        for i in 0..SLOW {
            agent
                .send(event(&thing(i), "tick", json!({"n": n, "blob": blob})))
                .await;
        }
        for _ in 0..SLOW {
            assert_eq!(
                fast.recv().await["data"]["n"],
                n,
                "the fast consumer gets everything"
            );
        }
    }
    let after = rss_mib();
    let pushed = SLOW * EVENTS * 64 * KIB / MIB;
    eprintln!(
        "outbound: {pushed} MiB to {SLOW} paused consumers; VmRSS {before:.0} -> {after:.0} MiB"
    );
    assert!(hits(&sidecar, "outbound").await > 0.0);
    assert!(used(&sidecar, "outbound").await <= (4 * MIB + 128 * KIB) as f64);
    assert!(after - before < 32.0, "VmRSS {before:.0} -> {after:.0} MiB");
    assert_ready_and_says(&sidecar, "outbound budget full (gateway.max_outbound_bytes").await;
    // Each paused consumer, once it reads, finds its connection closed:
    // with a 1013 naming the budget when the close frame got through.
    let mut closed = 0;
    for mut c in paused {
        match close_of(&mut c).await {
            Some(frame) => {
                assert_eq!(frame.code, CloseCode::Again);
                assert!(
                    frame.reason.contains("max_outbound_bytes"),
                    "{}",
                    frame.reason
                );
                closed += 1;
            }
            None => closed += 1,
        }
    }
    assert_eq!(closed, SLOW);
    fast.barrier().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_paused_consumer_over_its_byte_queue_misses_messages_under_the_drop_policy() {
    let _turn = alone().await;
    let mut config = common::test_config();
    config.gateway.outbound_queue = 100_000;
    config.gateway.outbound_queue_bytes = 512 * KIB;
    config.gateway.slow_consumer = lmos_sidecar::config::SlowConsumerPolicy::Drop;
    let sidecar = TestSidecar::start_with(config).await;
    let mut slow = paused_consumer(&sidecar).await;
    slow.send(lmos("urn:drop", "subscribeAllEvents", json!({})))
        .await;
    slow.barrier().await;
    let mut fast = sidecar.ws().await;
    fast.send(lmos("urn:drop", "subscribeAllEvents", json!({})))
        .await;
    fast.barrier().await;
    let blob = "d".repeat(64 * KIB);
    let mut agent = sidecar.ws().await;
    for n in 0..300 {
        agent
            .send(event("urn:drop", "tick", json!({"n": n, "blob": blob})))
            .await;
        assert_eq!(fast.recv().await["data"]["n"], n);
    }
    assert!(hits(&sidecar, "outbound_per_connection").await > 0.0);
    assert!(used(&sidecar, "outbound").await <= (512 + 128) as f64 * KIB as f64);
    // Still connected: it reads what was kept, then works as before.
    let mut received = 0;
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(Duration::from_secs(1), slow.stream.next()).await
    {
        received += usize::from(matches!(frame, WsMessage::Text(_)));
    }
    assert!(
        received > 0 && received < 300,
        "some were dropped ({received} of 300 received)"
    );
    slow.barrier().await;
    sidecar.stop().await;
}

/// A client's frame header (masked with a zero key, so the payload goes as
/// it is).
fn frame_header(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
    let mut h = vec![if fin { 0x80 } else { 0 } | opcode];
    if len < 126 {
        h.push(0x80 | len as u8);
    } else if len <= 0xFFFF {
        h.push(0x80 | 126);
        h.extend((len as u16).to_be_bytes());
    } else {
        h.push(0x80 | 127);
        h.extend((len as u64).to_be_bytes());
    }
    h.extend([0, 0, 0, 0]);
    h
}

/// Writes raw bytes under the WebSocket client's feet.
async fn write_raw(ws: &mut WsClient, bytes: &[u8]) -> std::io::Result<()> {
    match ws.stream.get_mut() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.write_all(bytes).await,
        _ => unreachable!("plain test connections"),
    }
}

#[tokio::test]
async fn fragmented_messages_over_the_size_limit_are_cut_and_whole_ones_still_get_an_error() {
    let _turn = alone().await;
    const ATTACKERS: usize = 40;
    let mut config = common::test_config();
    config.gateway.max_message_size = 64 * KIB;
    let sidecar = TestSidecar::start_with(config).await;
    let before = rss_mib();
    let mut attackers = Vec::new();
    for _ in 0..ATTACKERS {
        let mut ws = sidecar.ws().await;
        let mut first = frame_header(false, 1, 48 * KIB);
        first.extend(vec![b' '; 48 * KIB]);
        write_raw(&mut ws, &first).await.unwrap();
        // The next fragment announces 15 MiB: never read.
        write_raw(&mut ws, &frame_header(false, 0, 15 * MIB))
            .await
            .unwrap();
        attackers.push(ws);
    }
    for mut ws in attackers {
        let frame = close_of(&mut ws).await.expect("a close frame");
        assert_eq!(frame.code, CloseCode::Size);
        assert!(
            frame
                .reason
                .contains("Fragmented message larger than gateway.max_message_size"),
            "{}",
            frame.reason
        );
    }
    let after = rss_mib();
    eprintln!("fragmented: {ATTACKERS} connections; VmRSS {before:.0} -> {after:.0} MiB");
    assert_eq!(hits(&sidecar, "inbound_fragmented").await, ATTACKERS as f64);
    assert!(after - before < 64.0, "VmRSS {before:.0} -> {after:.0} MiB");
    // A message over the limit in one frame still gets an LMOS error, and
    // the connection lives on.
    let mut client = sidecar.ws().await;
    let whole = lmos(
        "urn:whole",
        "event",
        json!({"event": "e", "data": "w".repeat(100 * KIB), "timestamp": "2025-01-20T19:00:00Z"}),
    );
    client.send(whole).await;
    let error = client.recv().await;
    assert_eq!(error["status"], "413", "{error}");
    // So does a fragmented one within the limit get through.
    let part = |text: &str, opcode, last| {
        WsMessage::Frame(Frame::message(
            text.as_bytes().to_vec(),
            OpCode::Data(opcode),
            last,
        ))
    };
    let first = part(
        r#"{"thingID":"urn:whole","messageID":"f","#,
        Data::Text,
        false,
    );
    client.stream.feed(first).await.unwrap();
    let rest = part(
        r#""messageType":"readProperty","name":"p"}"#,
        Data::Continue,
        true,
    );
    client.stream.send(rest).await.unwrap();
    let reply = client.recv().await;
    assert_eq!(reply["correlationID"], "f", "{reply}");
    client.barrier().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn messages_trickled_over_many_connections_stay_within_the_inbound_budget() {
    let _turn = alone().await;
    const ATTACKERS: usize = 40;
    let mut config = common::test_config();
    config.gateway.max_inbound_bytes = 2 * MIB;
    let sidecar = TestSidecar::start_with(config).await;
    let mut legit = sidecar.ws().await;
    let before = rss_mib();
    // Each announces an 8 MiB message in one frame (under tungstenite's
    // 16 MiB limit) and sends 4 MiB of it in 64 KiB pieces, then waits.
    let mut attackers = Vec::new();
    for _ in 0..ATTACKERS {
        let mut ws = sidecar.ws().await;
        write_raw(&mut ws, &frame_header(true, 1, 8 * MIB))
            .await
            .unwrap();
        attackers.push(tokio::spawn(async move {
            let piece = vec![b' '; 64 * KIB];
            for _ in 0..64 {
                let write =
                    tokio::time::timeout(Duration::from_secs(2), write_raw(&mut ws, &piece));
                if !matches!(write.await, Ok(Ok(()))) {
                    break;
                }
            }
            ws
        }));
    }
    let mut attackers_ws = Vec::new();
    for a in attackers {
        attackers_ws.push(a.await.unwrap());
    }
    let after = rss_mib();
    eprintln!("inbound: {ATTACKERS} connections x 4 MiB; VmRSS {before:.0} -> {after:.0} MiB");
    let held = used(&sidecar, "inbound").await;
    assert!(held <= (2 * MIB) as f64, "{held}");
    // Each goes past the budget alone, so each is closed in the end.
    assert!(hits(&sidecar, "inbound").await >= (ATTACKERS - 1) as f64);
    assert!(after - before < 64.0, "VmRSS {before:.0} -> {after:.0} MiB");
    assert_ready_and_says(&sidecar, "inbound budget full (gateway.max_inbound_bytes").await;
    let mut refused = 0;
    for mut ws in attackers_ws {
        if let Ok(Some(Ok(WsMessage::Close(Some(frame))))) =
            tokio::time::timeout(Duration::from_millis(200), ws.stream.next()).await
        {
            assert_eq!(frame.code, CloseCode::Again);
            assert!(
                frame.reason.contains("max_inbound_bytes"),
                "{}",
                frame.reason
            );
            refused += 1;
        }
    }
    assert!(
        refused >= ATTACKERS - 1,
        "{refused} of {ATTACKERS} were told"
    );
    // Someone sending ordinary messages is not the one that holds the most.
    legit.barrier().await;
    sidecar.stop().await;
}
