//! The client commands a newcomer reaches for first (issue 34): `raw` in
//! place of websocat, `sub` as its help describes it (events and property
//! changes, `+` across Things, a non-zero exit when the sidecar goes away),
//! `invoke --stream` printing chunks, and `query` finding an invocation
//! another connection of the same principal started.

use std::process::Stdio;
use std::time::Duration;

use lmos_testkit as common;
use lmos_testkit::weather_agent::{self, THING_ID};

use common::TestSidecar;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_lmos-sidecar");

/// Runs the binary with `stdin` as its input: exit code, stdout, stderr.
pub(crate) async fn run(args: &[&str], stdin: &str) -> (i32, String, String) {
    common::process::run(BIN, args, stdin).await
}

/// `invoke getWeather` for Rome, with `correlation`, in a process of its
/// own started in the background: what it printed once it ends.
pub(crate) fn invoke_in_background(
    url: &str,
    correlation: &'static str,
) -> tokio::task::JoinHandle<(i32, String, String)> {
    let url = url.to_owned();
    tokio::spawn(async move {
        let input = r#"{"question":"What is the weather in Rome?","interactionMode":"text"}"#;
        let args = [
            "invoke",
            "--url",
            &url,
            "--thing",
            THING_ID,
            "getWeather",
            input,
            "--correlation-id",
            correlation,
        ];
        run(&args, "").await
    })
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn raw_sends_json_lines_and_prints_each_reply_as_a_line() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let input = format!(
        "{}\n\n{}\nnot json\n",
        serde_json::json!({"thingID": THING_ID, "messageID": "m1", "messageType": "subscribeEvent", "event": "userFeedbackReceived", "correlationID": "my-feedback"}),
        serde_json::json!({"thingID": THING_ID, "messageID": "m2", "messageType": "invokeAction", "action": "getWeather", "input": {"question": "What is the weather in Berlin?", "interactionMode": "text"}, "correlationID": "my-forecast"}),
    );
    let (code, stdout, stderr) = run(&["raw", "--url", &url, "--idle", "4"], &input).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let replies = lines(&stdout);
    let statuses: Vec<&str> = replies
        .iter()
        .filter(|m| m["correlationID"] == "my-forecast")
        .filter_map(|m| m["status"].as_str())
        .collect();
    assert_eq!(statuses.first(), Some(&"pending"), "{stdout}");
    assert_eq!(statuses.last(), Some(&"completed"), "{stdout}");
    assert!(
        replies
            .iter()
            .any(|m| m["messageType"] == "event" && m["correlationID"] == "my-feedback"),
        "the event, correlated to the subscription: {stdout}"
    );
    assert!(
        replies
            .iter()
            .any(|m| m["messageType"] == "error" && m["status"] == "400"),
        "the line that is not JSON is answered by the sidecar: {stdout}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn raw_says_so_when_the_sidecar_goes_away_while_input_is_open() {
    let sidecar = TestSidecar::start().await;
    let mut child = tokio::process::Command::new(BIN)
        .args(["raw", "--url", &sidecar.ws_url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // A round trip first, so the connection is up before the sidecar stops.
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"{}\n").await.unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(common::WAIT, out.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(first.unwrap().contains("\"error\""));
    sidecar.stop().await;
    let status = tokio::time::timeout(common::WAIT, child.wait())
        .await
        .expect("raw ends when the sidecar does")
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("closed the connection"), "{stderr}");
    drop(input);
}

#[tokio::test]
async fn sub_without_names_shows_events_and_property_changes() {
    let sidecar = weather_agent::start_sidecar().await;
    common::wait_for_td(&sidecar, THING_ID).await;
    let url = sidecar.ws_url();
    // The observed property's current value comes at once.
    let (code, stdout, stderr) = run(
        &[
            "sub", "--url", &url, "--thing", THING_ID, "--count", "1", "--json",
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let first = &lines(&stdout)[0];
    assert_eq!(first["messageType"], "propertyReading", "{stdout}");
    assert_eq!(first["name"], "modelConfiguration");
    sidecar.stop().await;
}

#[tokio::test]
async fn sub_exits_non_zero_when_the_sidecar_goes_away() {
    let sidecar = TestSidecar::start().await;
    let child = tokio::process::Command::new(BIN)
        .args(["sub", "--url", &sidecar.ws_url(), "--thing", "urn:x"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_for_stats(&sidecar, |s| s.connections == 1).await;
    sidecar.stop().await;
    let out = tokio::time::timeout(common::WAIT, child.wait_with_output())
        .await
        .expect("sub ends when the sidecar does")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("closed the connection"), "{stderr}");
}

#[tokio::test]
async fn sub_over_mqtt_covers_every_thing_with_a_plus() {
    let sidecar = TestSidecar::start().await;
    let mqtt_url = format!("mqtt://{}", sidecar.mqtt);
    let sub = tokio::spawn(async move {
        let args = [
            "sub", "--thing", "+", "--mqtt", &mqtt_url, "--count", "2", "--json",
        ];
        run(&args, "").await
    });
    let mut agent = sidecar.mqtt("an-agent").await;
    // Published until the subscriber is there (its count ends it).
    let (mut published, started) = (0, tokio::time::Instant::now());
    while !sub.is_finished() && started.elapsed() < common::WAIT {
        agent
            .publish_event("urn:a", "ping", serde_json::json!(published))
            .await;
        agent
            .publish_event("urn:b", "ping", serde_json::json!(published))
            .await;
        published += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, stdout, stderr) = sub.await.unwrap();
    assert_eq!(code, 0, "{stdout}{stderr}");
    let things: std::collections::BTreeSet<String> = lines(&stdout)
        .iter()
        .map(|m| m["thingID"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(things.len(), 2, "both Things: {stdout}");
    sidecar.stop().await;
}

#[tokio::test]
async fn invoke_prints_the_chunks_of_a_streamed_answer() {
    let sidecar = weather_agent::start_sidecar().await;
    common::wait_for_td(&sidecar, THING_ID).await;
    let url = sidecar.ws_url();
    let input = r#"{"question":"What is the weather in Oslo?","interactionMode":"text"}"#;
    let args = [
        "invoke",
        "--url",
        &url,
        "--thing",
        THING_ID,
        "getWeather",
        input,
        "--stream",
    ];
    let (code, stdout, stderr) = run(&args, "").await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("[stream #0] \"The \""), "{stdout}");
    assert!(
        stdout.lines().last().unwrap().contains("end]"),
        "the end marker on the completed status: {stdout}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn query_finds_an_invocation_started_by_another_connection() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let invoke = invoke_in_background(&url, "my-forecast");
    // While it runs (about a second), from another process and connection.
    let (mut answered, started) = (None, tokio::time::Instant::now());
    while started.elapsed() < common::WAIT {
        let args = [
            "query",
            "--url",
            &url,
            "--thing",
            THING_ID,
            "getWeather",
            "--correlation-id",
            "my-forecast",
        ];
        let (code, stdout, stderr) = run(&args, "").await;
        if code == 0 {
            answered = Some(stdout);
            break;
        }
        assert!(stdout.contains("404"), "{stdout}{stderr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answered = answered.expect("the invocation was found");
    assert!(answered.contains("getWeather"), "{answered}");
    let (code, stdout, _) = invoke.await.unwrap();
    assert_eq!(code, 0, "{stdout}");
    sidecar.stop().await;
}
