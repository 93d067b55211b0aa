//! The `lmos-sidecar` binary as users run it: flags, port 0, clear start-up
//! failures, and graceful shutdown on SIGTERM.

use lmos_testkit as common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::process::start_ready;
use common::{lmos, WsClient, WAIT};
use futures_util::StreamExt;
use lmos_testkit::sidecar_command as sidecar;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as WsMessage;

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the sidecar did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn starts_on_port_zero_logs_its_ports_serves_and_stops_on_sigterm() {
    let mut cmd = sidecar!();
    let (mut child, rx, ready) = start_ready(&mut cmd);
    let http = ready["http"].as_str().unwrap().to_owned();
    let mqtt: std::net::SocketAddr = ready["mqtt"].as_str().unwrap().parse().unwrap();
    assert_ne!(mqtt.port(), 0);
    assert_eq!(ready["websocket"], format!("ws://{http}/lmos"));

    let mut consumer = WsClient::connect(&format!("ws://{http}/lmos")).await;
    consumer
        .send(lmos("urn:t", "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = common::MqttClient::connect(mqtt, "agent").await;
    agent.publish_event("urn:t", "e", json!(1)).await;
    assert_eq!(consumer.recv().await["event"], "e");

    // SIGTERM, as an orchestrator stops a container; straight from libc so
    // the test needs no `kill` binary on the machine.
    let pid = child.0.id();
    assert_eq!(common::process::signal(pid, libc::SIGTERM), 0);
    let close = loop {
        match tokio::time::timeout(WAIT, consumer.stream.next())
            .await
            .expect("closed in time")
        {
            Some(Ok(WsMessage::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(
        close.expect("a close frame with a code").code,
        CloseCode::Away
    );
    let status = wait_exit(&mut child.0, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let stopped = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(2)).ok())
        .any(|l| l["message"] == "Sidecar stopped.");
    assert!(stopped, "the sidecar logs that it stopped");
}

#[test]
fn a_taken_port_fails_start_up_with_a_clear_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for flag in ["--http-addr", "--mqtt-addr", "--mqtt5-addr"] {
        let mut cmd = sidecar!();
        for other in ["--http-addr", "--mqtt-addr", "--mqtt5-addr"] {
            cmd.args([other, if other == flag { &addr } else { "127.0.0.1:0" }]);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot listen") && stderr.contains(&addr),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn print_config_shows_the_effective_configuration() {
    // defaults < file < environment < flags
    let dir = std::env::temp_dir().join(format!("lmos-sidecar-precedence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(&file, "[topics]\nprefix = \"from-file\"\n[gateway]\noutbound_queue = 7\n[http]\nlisten = \"127.0.0.1:7777\"\n").unwrap();
    for form in [&["--print-config"][..], &["config"][..]] {
        let out = sidecar!()
            .env("LMOS_SIDECAR_TOPICS__PREFIX", "org/lmos")
            .env("LMOS_SIDECAR_HTTP__LISTEN", "127.0.0.1:8888")
            .args([
                "--config",
                file.to_str().unwrap(),
                "--http-addr",
                "127.0.0.1:9999",
            ])
            .args(form)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{form:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert_eq!(
            printed["gateway"]["outbound_queue"].as_integer(),
            Some(7),
            "the file beats the defaults"
        );
        assert_eq!(
            printed["topics"]["prefix"].as_str(),
            Some("org/lmos"),
            "the environment beats the file"
        );
        assert_eq!(
            printed["http"]["listen"].as_str(),
            Some("127.0.0.1:9999"),
            "flags beat the environment"
        );
        assert_eq!(
            printed["mqtt"]["listen"].as_str(),
            Some("127.0.0.1:1883"),
            "defaults stay"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_shipped_config_file_loads_and_bad_files_name_the_key() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/lmos-sidecar.toml");
    assert!(sidecar!()
        .args(["--config", shipped, "--print-config"])
        .output()
        .unwrap()
        .status
        .success());

    let dir = std::env::temp_dir().join(format!("lmos-sidecar-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[gateway]\noutbound_queu = 5\n").unwrap();
    let out = sidecar!()
        .args(["--config", bad.to_str().unwrap(), "--print-config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("outbound_queu")
            && stderr.contains("bad.toml")
            && stderr.contains("line 2"),
        "{stderr}"
    );

    std::fs::write(&bad, "[topics]\nprefix = \"a/+\"\n").unwrap();
    let out = sidecar!()
        .args(["--config", bad.to_str().unwrap(), "--print-config"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("topics.prefix"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nothing the sidecar does needs a writable disk: the whole filesystem is
/// remounted read-only (in a mount namespace of the test's own, so nothing
/// else is affected) and it starts, serves, registers a TD and stops.
#[tokio::test]
async fn serves_and_stops_with_a_read_only_filesystem() {
    let namespaces = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -o remount,bind,ro / && ! touch /ro-probe 2>/dev/null",
        ])
        .status();
    if !namespaces.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: this machine cannot make a read-only mount namespace (unshare -m).");
        return;
    }
    let mut cmd = Command::new("unshare");
    cmd.env_remove("RUST_LOG")
        // Nothing to keep on a read-only root (production mounts a volume).
        .env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -o remount,bind,ro / && exec \"$0\" \"$@\"",
        ])
        .arg(env!("CARGO_BIN_EXE_lmos-sidecar"));
    let (mut child, _rx, ready) = start_ready(&mut cmd);
    let http: std::net::SocketAddr = ready["http"].as_str().unwrap().parse().unwrap();
    let mqtt: std::net::SocketAddr = ready["mqtt"].as_str().unwrap().parse().unwrap();
    let mut consumer = WsClient::connect(&format!("ws://{http}/lmos")).await;
    consumer
        .send(lmos("urn:ro", "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = common::MqttClient::connect(mqtt, "ro-agent").await;
    agent.publish_event("urn:ro", "e", json!(1)).await;
    assert_eq!(consumer.recv().await["event"], "e");
    let mut td: Value =
        serde_json::from_str(include_str!("../fixtures/weather-agent-td.json")).unwrap();
    td["id"] = json!("urn:ro");
    let put = common::http(
        http,
        "PUT",
        "/things/urn:ro",
        Some("application/td+json"),
        td.to_string().as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);

    let pid = child.0.id();
    assert_eq!(common::process::signal(pid, libc::SIGTERM), 0);
    let status = wait_exit(&mut child.0, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}
