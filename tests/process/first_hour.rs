//! What a newcomer meets in the first hour (issue 34): a client that ends
//! quietly on a closed pipe and says so on any other write error, the
//! sidecar's ready line and `GET /` pointing at the console with no warning
//! on a default start, readable configuration errors, and the example
//! agent coming back after a sidecar restart. The client commands:
//! `tests/process/cli_first_hour.rs`.

use std::process::Stdio;

use lmos_testkit as common;
use lmos_testkit::weather_agent::{self, THING_ID};

use common::TestSidecar;
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_lmos-sidecar");

/// Runs the binary with `stdin` as its input: exit code, stdout, stderr.
async fn run(args: &[&str], stdin: &str) -> (i32, String, String) {
    common::process::run(BIN, args, stdin).await
}

#[tokio::test]
async fn a_closed_pipe_ends_the_client_quietly_and_a_full_disk_is_an_error() {
    // The reader is gone before the first line is written.
    for args in [&["config"][..], &["new-token"]] {
        let mut child = tokio::process::Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = tokio::time::timeout(common::WAIT, child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        let out = tokio::process::Command::new(BIN)
            .arg("new-token")
            .stdout(full)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
            .wait_with_output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("cannot write to standard output") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn the_ready_line_names_the_console_and_slash_leads_there() {
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--http-addr",
            "localhost:0",
            "--mqtt-addr",
            "127.0.0.1:0",
            "--mqtt5-addr",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let ready = loop {
        let line = tokio::time::timeout(common::WAIT, out.next_line())
            .await
            .expect("the sidecar gets ready")
            .unwrap()
            .expect("a ready line before the output ends");
        seen.push(line.clone());
        if line.contains("Sidecar ready.") {
            break line;
        }
    };
    assert!(
        !seen.iter().any(|l| l.contains("WARN")),
        "no warning on a default start: {seen:#?}"
    );
    assert!(!ready.contains('\u{1b}'), "no colour into a pipe: {ready}");
    let console = ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix("console="))
        .unwrap_or_else(|| panic!("no console URL: {ready}"));
    let http = console
        .strip_prefix("http://")
        .and_then(|r| r.strip_suffix("/console"))
        .unwrap_or_else(|| panic!("{console}"));
    let addr: std::net::SocketAddr = http.parse().unwrap();
    let root = common::http(addr, "GET", "/", None, b"").await;
    assert_eq!(root.status, 303, "{}", root.body);
    assert_eq!(root.header("location"), Some("/console"));
    let page = common::http(addr, "GET", "/console", None, b"").await;
    assert_eq!(page.status, 200);
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// Environment, arguments, and what standard error must say.
type Case = (
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
    &'static str,
);

#[tokio::test]
async fn configuration_mistakes_get_readable_errors() {
    let cases: [Case; 4] = [
        (&[], &["--http-addr", "127.0.0.1:80800"], "port 80800 is out of range"),
        (
            &[("LMOS_SIDECAR_TRACING__ENDPOINT", "127.0.0.1:4317")],
            &["config"],
            "add http://",
        ),
        (
            &[("LMOS_SIDECAR_GATEWAY__NOPE", "1")],
            &["config"],
            "`gateway.nope` is not a configuration key (from the environment variable LMOS_SIDECAR_GATEWAY__NOPE)",
        ),
        (
            &[("LMOS_SIDECAR_HTTP__LISTEN", "127.0.0.1")],
            &["config"],
            "no port; write IP:PORT",
        ),
    ];
    for (env, args, expected) in cases {
        let out = tokio::process::Command::new(BIN)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(stderr.contains(expected), "{args:?} {env:?}: {stderr}");
        assert!(!stderr.contains("`one of"), "no nested quotes: {stderr}");
    }
}

#[tokio::test]
async fn the_weather_agent_comes_back_after_a_sidecar_restart() {
    let first = TestSidecar::start().await;
    let url = first.ws_url();
    let agent = tokio::spawn({
        let url = url.clone();
        async move { weather_agent::serve_reconnecting(&url, |_| {}).await }
    });
    common::wait_for_td(&first, THING_ID).await;
    // The same ports again, as a restarted sidecar would have.
    let mut config = common::test_config();
    config.http.listen = first.http;
    first.stop().await;
    let second = TestSidecar::start_with(config).await;
    common::wait_for_stats(&second, |s| s.hosted_things == 1).await;
    common::wait_for_td(&second, THING_ID).await;
    // And it serves: a read is answered by the agent.
    let (code, stdout, stderr) = run(
        &[
            "read",
            "--url",
            &second.ws_url(),
            "--thing",
            THING_ID,
            "modelConfiguration",
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    agent.abort();
    second.stop().await;
}
