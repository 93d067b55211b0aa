//! How client commands end, as scripts and pipes see it (issue 47's first
//! hour): `sub | head -1` ends when `head` does, `cancel` exits 0 when the
//! invocation was cancelled, `sub --mqtt` says the sidecar went away,
//! `--thing +` is refused where it means nothing, `write` prints as `read`,
//! and `demo-agent` serves the WeatherAgent from the sidecar's own binary.

use std::process::Stdio;
use std::time::Duration;

use lmos_testkit as common;
use lmos_testkit::weather_agent::{self, THING_ID};

use common::TestSidecar;
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_lmos-sidecar");

use super::cli_first_hour::{invoke_in_background, run};

#[tokio::test]
async fn sub_ends_when_the_reader_of_its_pipe_goes_away() {
    let sidecar = weather_agent::start_sidecar().await;
    // A real pipe: the reader takes one line and closes its end, as
    // `| head -1` does, while `sub` waits for a next message that never
    // comes.
    let mut child = tokio::process::Command::new(BIN)
        .args(["sub", "--url", &sidecar.ws_url(), "--thing", THING_ID])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(common::WAIT, lines.next_line())
        .await
        .expect("the current value at once")
        .unwrap()
        .unwrap();
    assert!(first.contains("modelConfiguration = "), "{first}");
    drop(lines);
    let out = tokio::time::timeout(common::WAIT, child.wait_with_output())
        .await
        .expect("sub ends once its reader has gone")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "quietly: {stderr}");
    sidecar.stop().await;
}

#[tokio::test]
async fn sub_in_a_shell_pipeline_into_head_ends_with_it() {
    let sidecar = weather_agent::start_sidecar().await;
    let script = format!(
        "set -o pipefail; '{BIN}' sub --url {} --thing {THING_ID} | head -1",
        sidecar.ws_url()
    );
    let out = tokio::time::timeout(
        common::WAIT,
        tokio::process::Command::new("bash")
            .args(["-c", &script])
            .output(),
    )
    .await
    .expect("the pipeline ends when head does")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "both ends exit 0: {stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    sidecar.stop().await;
}

#[tokio::test]
async fn cancel_exits_zero_when_the_invocation_is_cancelled() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let invoke = invoke_in_background(&url, "to-cancel");
    let cancel = [
        "cancel",
        "--url",
        &url,
        "--thing",
        THING_ID,
        "getWeather",
        "--correlation-id",
        "to-cancel",
    ];
    // Until the invocation exists (another process starts it).
    let (code, stdout, stderr) = loop {
        let (code, stdout, stderr) = run(&cancel, "").await;
        if !stdout.contains("404") {
            break (code, stdout, stderr);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.trim_end().ends_with("getWeather cancelled"),
        "{stdout}"
    );
    // `cancel && next` goes on; the invocation itself did not complete.
    let script = format!(
        "'{BIN}' cancel --url {url} --thing {THING_ID} getWeather --correlation-id to-cancel && echo next"
    );
    let out = tokio::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("next\n"));
    let (code, stdout, _) = invoke.await.unwrap();
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("cancelled"), "{stdout}");
    // Nothing to cancel: an error, exit code 1.
    let unknown = [
        "cancel",
        "--url",
        &url,
        "--thing",
        THING_ID,
        "getWeather",
        "--correlation-id",
        "none",
    ];
    let (code, stdout, _) = run(&unknown, "").await;
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("error 404"), "{stdout}");
    sidecar.stop().await;
}

#[tokio::test]
async fn sub_over_mqtt_says_the_sidecar_went_away() {
    let sidecar = TestSidecar::start().await;
    let mqtt = format!("mqtt://{}", sidecar.mqtt);
    let mut child = tokio::process::Command::new(BIN)
        .args(["sub", "--thing", "urn:x", "--mqtt", &mqtt])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Connected and subscribed once an event comes through.
    let mut agent = sidecar.mqtt("an-agent").await;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        agent
            .publish_event("urn:x", "ping", serde_json::json!(1))
            .await;
        let wait = Duration::from_millis(100);
        if let Ok(line) = tokio::time::timeout(wait, lines.next_line()).await {
            assert!(line.unwrap().unwrap().contains("event ping"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sub never got the event"
        );
    }
    sidecar.stop().await;
    let out = tokio::time::timeout(common::WAIT, child.wait_with_output())
        .await
        .expect("sub ends when the sidecar does")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "Error: the sidecar closed the connection (no more events or readings will come)"
    );
}

#[tokio::test]
async fn plus_is_a_command_line_error_for_one_thing_commands() {
    for args in [
        &["read", "--thing", "+", "modelConfiguration"][..],
        &["write", "--thing", "+", "modelConfiguration", "{}"],
        &["invoke", "--thing", "+", "getWeather"],
        &["query", "--thing", "+", "getWeather"],
        &["cancel", "--thing", "+", "getWeather"],
    ] {
        // Refused before anything connects: no sidecar needed.
        let (code, stdout, stderr) = run(args, "").await;
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("`+` (every Thing) is for `sub` only"),
            "{stderr}"
        );
        let (_, help, _) = run(&[args[0], "--help"], "").await;
        assert!(help.contains("--thing <ID>"), "{help}");
        assert!(!help.contains("`+`"), "{}: {help}", args[0]);
    }
    let (_, help, _) = run(&["sub", "--help"], "").await;
    assert!(help.contains("or `+`: every Thing"), "{help}");
}

#[tokio::test]
async fn write_prints_what_read_prints_and_replaces_the_whole_value() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let target = ["--url", &url, "--thing", THING_ID, "modelConfiguration"];
    let write = |value: &'static str| {
        let mut args = vec!["write"];
        args.extend(target);
        args.push(value);
        args
    };
    let mut read = vec!["read"];
    read.extend(target);
    let (code, written, _) = run(&write(r#"{"modelName":"o3"}"#), "").await;
    assert_eq!(code, 0, "{written}");
    let (_, now, _) = run(&read, "").await;
    assert_eq!(written, now, "write prints as read");
    assert_eq!(
        now,
        format!("{THING_ID} modelConfiguration = {{\"modelName\":\"o3\"}}\n"),
        "temperature and maxTokens are gone: the value is replaced"
    );
    let help = run(&["write", "--help"], "").await.1;
    assert!(help.contains("replaces the whole value"), "{help}");
    sidecar.stop().await;
}

#[tokio::test]
async fn demo_agent_serves_the_weather_agent_from_the_sidecars_binary() {
    let sidecar = TestSidecar::start().await;
    let url = sidecar.ws_url();
    let mut agent = tokio::process::Command::new(BIN)
        .arg("demo-agent")
        .env("LMOS_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_for_td(&sidecar, THING_ID).await;
    let input = r#"{"question":"What is the weather in Lisbon?","interactionMode":"text"}"#;
    let args = [
        "invoke",
        "--url",
        &url,
        "--thing",
        THING_ID,
        "getWeather",
        input,
    ];
    let (code, stdout, stderr) = run(&args, "").await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let statuses: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        statuses,
        ["pending", "running", "running", "running", "completed"],
        "{stdout}"
    );
    assert!(
        stdout.contains("The weather in Lisbon is sunny"),
        "{stdout}"
    );
    let mut log = tokio::io::BufReader::new(agent.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(common::WAIT, log.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default();
    assert!(first.contains("serves urn:uuid:6f1d3a7a"), "{first}");
    agent.start_kill().unwrap();
    let _ = agent.wait().await;
    sidecar.stop().await;
}
