//! The command-line client against a running sidecar and the example agent,
//! and `check` against the sidecar and against a broken endpoint.

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use common::TestSidecar;
use weather_agent::THING_ID;

async fn cli(args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lmos-sidecar"))
        .args(args)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

#[tokio::test]
async fn every_client_subcommand_against_a_running_sidecar() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let to = ["--url", url.as_str(), "--thing", THING_ID];

    let (code, out) = cli(&[&["read"][..], &to, &["modelConfiguration"]].concat()).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("modelConfiguration = ") && out.contains("gpt-4o"),
        "{out}"
    );

    let (code, out) = cli(&[
        &["write"][..],
        &to,
        &["modelConfiguration", r#"{"modelName":"o3"}"#],
    ]
    .concat())
    .await;
    assert_eq!(code, 0, "{out}");

    // Subscribe in the background while an action runs.
    let sub_args: Vec<String> = [
        &["sub"][..],
        &to,
        &["--event", "userFeedbackReceived", "--count", "1", "--json"],
    ]
    .concat()
    .into_iter()
    .map(str::to_owned)
    .collect();
    let sub = tokio::spawn(async move {
        let args: Vec<&str> = sub_args.iter().map(String::as_str).collect();
        cli(&args).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let input = r#"{"question":"What is the weather in Oslo?","interactionMode":"text"}"#;
    let (code, out) = cli(&[&["invoke"][..], &to, &["getWeather", input]].concat()).await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.first().unwrap().contains("getWeather pending"),
        "{out}"
    );
    assert!(
        lines.iter().filter(|l| l.contains("running")).count() >= 3,
        "progress shown: {out}"
    );
    assert!(
        lines.last().unwrap().contains("completed") && out.contains("Oslo"),
        "{out}"
    );

    let (code, out) = tokio::time::timeout(common::WAIT, sub)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let event: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(event["event"], "userFeedbackReceived");

    let (code, out) = cli(&[&["invoke"][..], &to, &["noSuchAction"]].concat()).await;
    assert_eq!(code, 1, "an LMOS error is a failure: {out}");
    assert!(out.contains("404"), "{out}");

    let (code, out) = cli(&[
        &["query"][..],
        &to,
        &["getWeather", "--correlation-id", "never"],
    ]
    .concat())
    .await;
    assert_eq!(code, 1, "{out}");

    let (code, out) = cli(&["things", "--url", &format!("http://{}", sidecar.http)]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(THING_ID) && out.contains("getWeather"),
        "{out}"
    );

    let (code, out) = cli(&[
        "read",
        "--url",
        "ws://127.0.0.1:9/lmos",
        "--thing",
        THING_ID,
        "x",
    ])
    .await;
    assert_eq!(code, 2, "no sidecar there: {out}");
    sidecar.stop().await;
}

#[tokio::test]
async fn check_passes_against_the_sidecar() {
    let sidecar = TestSidecar::start().await;
    let (code, out) = cli(&["check", &sidecar.ws_url()]).await;
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(out.contains("8/8 checks passed"), "{out}");
    sidecar.stop().await;
}

/// A WebSocket server that accepts any handshake and echoes what it gets:
/// no LMOS at all.
async fn broken_endpoint() -> std::net::SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // It agrees to whatever subprotocol is offered, and to none.
                let agree = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                             mut response: tokio_tungstenite::tungstenite::handshake::server::Response| {
                    if let Some(p) = request.headers().get("sec-websocket-protocol") {
                        response.headers_mut().insert("sec-websocket-protocol", p.clone());
                    }
                    Ok(response)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, agree).await else {
                    return;
                };
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_text() || m.is_binary() {
                        let _ = ws.send(m).await;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn check_reports_the_failures_of_a_broken_endpoint() {
    let addr = broken_endpoint().await;
    let (code, out) = cli(&["check", &format!("ws://{addr}/lmos")]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL  handshake with another subprotocol is refused"),
        "{out}"
    );
    assert!(out.contains("PASS  handshake with `lmosprotocol`"), "{out}");
    assert!(out.contains("FAIL  invalid JSON gets an `error`"), "{out}");
    assert!(
        out.contains("FAIL  unknown messageType gets a correlated `error`"),
        "{out}"
    );
}

#[tokio::test]
async fn sub_over_mqtt_and_ctrl_c_cancels_a_running_invocation() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let sidecar = weather_agent::start_sidecar().await;
    let url = sidecar.ws_url();
    let mqtt = format!("mqtt://127.0.0.1:{}", sidecar.mqtt.port());

    let sub_args = [
        "sub".to_owned(),
        "--thing".into(),
        THING_ID.into(),
        "--mqtt".into(),
        mqtt,
        "--count".into(),
        "2".into(),
    ];
    let sub = tokio::spawn(async move {
        let args: Vec<&str> = sub_args.iter().map(String::as_str).collect();
        cli(&args).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let input = r#"{"question":"What is the weather in Lima?","interactionMode":"text"}"#;
    let (code, out) = cli(&[
        "invoke",
        "--url",
        &url,
        "--thing",
        THING_ID,
        "getWeather",
        input,
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = tokio::time::timeout(common::WAIT, sub)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 0, "{out}");
    // Without --event or --property: the retained reading, then the event.
    assert!(
        out.contains("modelConfiguration = ") && out.contains("event userFeedbackReceived"),
        "over MQTT: {out}"
    );

    // Ctrl-C during an invocation cancels it at the agent.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_lmos-sidecar"))
        .args([
            "invoke",
            "--url",
            &url,
            "--thing",
            THING_ID,
            "getWeather",
            input,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(common::WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.contains("pending"), "{first}");
    let pid = child.id().unwrap();
    assert_eq!(common::process::signal(pid, libc::SIGINT), 0);
    let mut rest = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(common::WAIT, lines.next_line())
        .await
        .unwrap()
    {
        rest.push(line);
    }
    let status = tokio::time::timeout(common::WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        rest.last().is_some_and(|l| l.contains("cancelled")),
        "{rest:?}"
    );
    assert_eq!(
        status.code(),
        Some(1),
        "a cancelled action is not a success"
    );
    sidecar.stop().await;
}
