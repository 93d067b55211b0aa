//! `lmos-sidecar check URL`: a conformance check of any `lmosprotocol`
//! WebSocket endpoint. Each check says what the draft asks and whether the
//! endpoint does it.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::{connect, message, next, send, Socket};

const ANSWER: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(500);

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    pub detail: String,
}

fn check(name: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            name,
            passed: true,
            detail,
        },
        Err(detail) => Check {
            name,
            passed: false,
            detail,
        },
    }
}

/// An LMOS `error` with every mandatory member.
fn is_error(m: &Value) -> Result<(), String> {
    if m["messageType"] != "error" {
        return Err(format!("expected an `error`, got {m}"));
    }
    let missing: Vec<&str> = ["type", "title", "status", "detail", "instance"]
        .into_iter()
        .filter(|k| m.get(*k).is_none())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the error lacks {}", missing.join(", ")))
    }
}

async fn answer(socket: &mut Socket) -> Result<Value, String> {
    tokio::time::timeout(ANSWER, next(socket))
        .await
        .map_err(|_| format!("no answer within {ANSWER:?}"))?
        .ok_or_else(|| "the connection closed".to_owned())
}

async fn bad_input(
    socket: &mut Socket,
    frame: WsMessage,
    correlation: Option<&str>,
) -> Result<String, String> {
    socket
        .send(frame)
        .await
        .map_err(|e| format!("cannot send: {e}"))?;
    let m = answer(socket).await?;
    is_error(&m)?;
    if let Some(c) = correlation {
        let got = m.get("correlationID").or(m.get("correlationId"));
        if got != Some(&json!(c)) {
            return Err(format!(
                "the error is not correlated to the offending messageID `{c}`: {m}"
            ));
        }
    }
    Ok(format!(
        "error {} `{}`",
        m["status"],
        m["title"].as_str().unwrap_or_default()
    ))
}

/// Runs every check against `url`; one connection for the message checks,
/// so it also shows that bad input does not close it.
pub async fn run(url: &str) -> Vec<Check> {
    let mut report = vec![check(
        "handshake with another subprotocol is refused",
        other_subprotocol_refused(url).await,
    )];
    let mut socket = match connect(url).await {
        Ok(s) => s,
        Err(e) => {
            report.push(check("handshake with `lmosprotocol`", Err(e.to_string())));
            return report;
        }
    };
    report.push(check(
        "handshake with `lmosprotocol`",
        Ok("accepted".into()),
    ));
    bad_inputs(&mut socket, &mut report).await;
    report.push(check(
        "subscribeAllEvents is accepted",
        subscription_accepted(&mut socket).await,
    ));
    report.push(check(
        "a request for an unknown Thing is answered, correlated",
        unknown_thing_answered(&mut socket).await,
    ));
    let _ = socket.close(None).await;
    report
}

/// A client that offers no subprotocol at all may be served (the Kotlin
/// stack's does not offer one); one offering only others must not be.
async fn other_subprotocol_refused(url: &str) -> Result<String, String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("not-lmosprotocol"),
    );
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            Ok(format!("refused with HTTP {}", r.status()))
        }
        Err(e) => Ok(format!("refused: {e}")),
        Ok(_) => Err("a handshake offering only another subprotocol was accepted".to_owned()),
    }
}

const THING: &str = "urn:lmos:conformance-check";

/// Malformed messages each get an `error`, correlated where they can be.
async fn bad_inputs(socket: &mut Socket, report: &mut Vec<Check>) {
    report.push(check(
        "invalid JSON gets an `error`",
        bad_input(socket, WsMessage::Text("{\"thingID\": ".into()), None).await,
    ));
    let unknown = message(THING, "teleport", json!({}));
    let id = unknown["messageID"].as_str().unwrap_or_default().to_owned();
    report.push(check(
        "unknown messageType gets a correlated `error`",
        bad_input(
            socket,
            WsMessage::Text(unknown.to_string().into()),
            Some(&id),
        )
        .await,
    ));
    let missing = message(THING, "subscribeEvent", json!({}));
    let id = missing["messageID"].as_str().unwrap_or_default().to_owned();
    report.push(check(
        "missing mandatory member gets a correlated `error`",
        bad_input(
            socket,
            WsMessage::Text(missing.to_string().into()),
            Some(&id),
        )
        .await,
    ));
    report.push(check(
        "binary frame gets an `error`",
        bad_input(socket, WsMessage::Binary(vec![0, 1].into()), None).await,
    ));
}

async fn subscription_accepted(socket: &mut Socket) -> Result<String, String> {
    let subscribe = message(THING, "subscribeAllEvents", json!({}));
    send(socket, &subscribe).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(QUIET, next(socket)).await {
        Err(_) => Ok("accepted (no error)".to_owned()),
        Ok(Some(m)) if m["messageType"] == "error" => Err(format!("refused: {m}")),
        Ok(Some(m)) => Ok(format!("accepted ({})", m["messageType"])),
        Ok(None) => Err("the connection closed".to_owned()),
    }
}

async fn unknown_thing_answered(socket: &mut Socket) -> Result<String, String> {
    let read = message(
        THING,
        "readProperty",
        json!({"name": "nothing", "correlationID": "conformance-read"}),
    );
    send(socket, &read).await.map_err(|e| e.to_string())?;
    loop {
        let m = answer(socket).await?;
        if m.get("correlationID").or(m.get("correlationId")) == Some(&json!("conformance-read")) {
            let kind = m["messageType"].as_str().unwrap_or("?").to_owned();
            return match kind.as_str() {
                "error" | "propertyReading" => Ok(format!("answered with `{kind}`")),
                _ => Err(format!(
                    "answered with `{kind}`, not an `error` or `propertyReading`"
                )),
            };
        }
    }
}

/// The report as a table.
pub fn table(report: &[Check]) -> String {
    let width = report.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in report {
        let verdict = if c.passed { "PASS" } else { "FAIL" };
        out.push_str(&format!("{verdict}  {:width$}  {}\n", c.name, c.detail));
    }
    let passed = report.iter().filter(|c| c.passed).count();
    out.push_str(&format!("{passed}/{} checks passed\n", report.len()));
    out
}
