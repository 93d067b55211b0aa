//! Strings a client chooses cannot forge log lines or reach an operator's
//! terminal: a `?host=` thingID with a line break and an escape sequence
//! is logged escaped, on one line (issue 30, item 8).

use lmos_testkit as common;

use common::*;

#[tokio::test]
async fn a_hostile_thing_id_is_logged_escaped_on_one_line() {
    let logs = CapturedLogs::install("lmos_sidecar=debug");
    let sidecar = TestSidecar::start().await;
    let hostile = "urn:x\n2026-11-25T00:00:00.000000Z  INFO lmos_sidecar: forged line\u{1b}[2J";
    let _agent = sidecar.ws_agent(hostile).await;
    // A second agent for the same Thing is refused, and the refusal, which
    // names the Thing, is logged.
    let url = format!("{}?host={}", sidecar.ws_url(), urlencode(hostile));
    let refused = WsClient::connect_request(ws_request(&url, Some("lmosprotocol"))).await;
    assert_eq!(refused.err(), Some(409));
    sidecar.stop().await;

    let text = logs.text();
    assert!(
        text.contains(
            r"urn:x\n2026-11-25T00:00:00.000000Z  INFO lmos_sidecar: forged line\u{1b}[2J"
        ),
        "the Thing is logged, escaped:\n{text}"
    );
    assert!(!text.contains('\u{1b}'), "no escape character:\n{text}");
    let forged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("2026-11-25T00:00:00.000000Z"))
        .collect();
    assert!(forged.is_empty(), "forged lines: {forged:?}");
}
