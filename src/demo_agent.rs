//! The LMOS draft's WeatherAgent, a demo agent in the sidecar's own binary
//! (`lmos-sidecar demo-agent`), so that trying the sidecar needs no second
//! build; `examples/weather_agent.rs` and the test kit run this same code.
//!
//! It connects to the sidecar's WebSocket gateway declaring that it hosts
//! [`THING_ID`] (`?host=...`), registers its Thing Description
//! (`examples/weather_agent.td.json`) on the same socket, and serves:
//! - property `modelConfiguration` (read, write: the new value replaces the
//!   old one whole, observe);
//! - action `getWeather`: `pending`, three `running` updates with progress
//!   0.3 s apart, then `completed` (or `cancelled`); asked with
//!   `"stream": true`, it also streams the forecast word by word (`running`
//!   statuses with a `stream` chunk each) before the `completed` that ends
//!   the stream and still carries the whole text; asked with
//!   `"interactionMode": "voice"`, it speaks the forecast instead: WAV
//!   audio ([`voice`]), a word per chunk, sent as binary frames
//!   ([`crate::lmos::binary`]);
//! - event `userFeedbackReceived`, sent after every completed forecast.
//!
//! Deterministic: no LLM, the forecast is made up from the question. What
//! it answers is decided in [`weather`] (no I/O); this module moves the
//! messages.

pub mod voice;
mod weather;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;

pub use weather::{Step, Weather, STEP, THING_DESCRIPTION, THING_ID, TOKEN_STEP};

use crate::client::Credentials;
use crate::lmos::now_timestamp;

/// The largest message the agent takes from the sidecar: well above what
/// the sidecar forwards (`gateway.max_message_size`, 1 MiB by default, and
/// the members it adds), and a bound on what a peer makes it hold.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// Messages waiting for the socket; beyond it the agent stops reading
/// requests until the sidecar reads its answers.
const QUEUE: usize = 256;
/// `getWeather` invocations running at once; more are refused (503).
const MAX_RUNNING: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Request(String),
    #[error(transparent)]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("the Thing Description does not parse: {0}")]
    Description(#[from] serde_json::Error),
}

/// The `Authorization` value from the environment, as every client
/// command sends it (`LMOS_TOKEN`, or `LMOS_USER` and `LMOS_PASSWORD`): a
/// sidecar with authentication on wants the agent's credentials.
fn from_env() -> Option<String> {
    Credentials::from_env().map(|c| c.header())
}

/// Connects and serves until the sidecar closes the connection.
pub async fn serve(sidecar: &str) -> Result<(), AgentError> {
    serve_as(sidecar, from_env().as_deref(), &|line| eprintln!("{line}")).await
}

/// [`serve`] with the bearer token given rather than read from the
/// environment (which is one for all the tests in a test binary).
pub async fn serve_with_token(sidecar: &str, token: Option<&str>) -> Result<(), AgentError> {
    let authorization = token.map(|t| format!("Bearer {t}"));
    serve_as(sidecar, authorization.as_deref(), &|line| {
        eprintln!("{line}")
    })
    .await
}

/// First wait before connecting again, doubled after each failed attempt
/// up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that lasted this long was a good one: the next wait starts
/// from [`FIRST_BACKOFF`] again.
const STABLE: Duration = Duration::from_secs(2);

/// [`serve`] for as long as the process runs: an agent beside a sidecar
/// that restarts (an upgrade, a crash, a pod's sidecar container) must come
/// back by itself, with its description, and not hammer a sidecar that is
/// still starting. `report` hears when it serves and why each connection
/// ended.
pub async fn serve_reconnecting(sidecar: &str, report: impl Fn(String) + Sync) {
    let authorization = from_env();
    let mut delay = FIRST_BACKOFF;
    loop {
        let started = tokio::time::Instant::now();
        let why = match serve_as(sidecar, authorization.as_deref(), &report).await {
            Ok(()) => "the sidecar closed the connection".to_owned(),
            Err(e) => format!("cannot reach the sidecar at {sidecar}: {e}"),
        };
        if started.elapsed() >= STABLE {
            delay = FIRST_BACKOFF;
        }
        report(format!("{why}; connecting again in {delay:?}."));
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_BACKOFF);
    }
}

/// `lmos-sidecar demo-agent`: serves (connecting again whenever the
/// sidecar goes away) until Ctrl-C.
pub async fn run(sidecar: &str) {
    tokio::select! {
        () = serve_reconnecting(sidecar, |line| eprintln!("{line}")) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// One connection: the description and the current value first, then an
/// answer to each request until the sidecar closes the connection.
async fn serve_as(
    sidecar: &str,
    authorization: Option<&str>,
    report: &(dyn Fn(String) + Sync),
) -> Result<(), AgentError> {
    let url = format!("{sidecar}?host={THING_ID}");
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    if let Some(authorization) = authorization {
        let value = HeaderValue::from_str(authorization)
            .map_err(|_| AgentError::Request("the credentials must be printable text".into()))?;
        request.headers_mut().insert("Authorization", value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let (socket, _) =
        tokio_tungstenite::connect_async_with_config(request, Some(config), false).await?;
    let (mut sink, mut stream) = socket.split();
    let (out, mut outgoing) = mpsc::channel::<Value>(QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(m) = outgoing.recv().await {
            // Audio goes as binary frames, the rest as text.
            let frame = match crate::lmos::binary::encode_value(m.clone()) {
                Some(frame) => WsMessage::Binary(frame.into()),
                None => WsMessage::Text(m.to_string().into()),
            };
            if sink.send(frame).await.is_err() {
                return;
            }
        }
    });
    let mut agent = Weather::default();
    // The description first: the sidecar checks requests against it.
    let _ = out.send(serde_json::from_str(THING_DESCRIPTION)?).await;
    let _ = out.send(agent.reading(None)).await;
    report(format!(
        "The WeatherAgent serves {THING_ID} through {sidecar}."
    ));
    let mut running = HashMap::new();
    let ended = loop {
        let Some(frame) = stream.next().await else {
            break Ok(());
        };
        match frame {
            Ok(WsMessage::Text(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(m) => act(&mut agent, &m, &out, &mut running, report).await,
                Err(e) => report(format!("Ignoring a message that is not JSON: {e}.")),
            },
            Ok(WsMessage::Close(_)) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e.into()),
        }
    };
    for (_, task) in running.drain() {
        task.abort();
    }
    writer.abort();
    ended
}

/// Carries out what the agent decided about `m`.
async fn act(
    agent: &mut Weather,
    m: &Value,
    out: &mpsc::Sender<Value>,
    running: &mut HashMap<String, JoinHandle<()>>,
    report: &(dyn Fn(String) + Sync),
) {
    let reply = match agent.handle(m) {
        None if m["messageType"] == "error" => {
            return report(format!("The sidecar refused something: {}", m["detail"]));
        }
        None => return report(format!("Ignoring a `{}` message.", m["messageType"])),
        Some(Step::Reply(reply)) => reply,
        Some(Step::Invoke { key, script }) => {
            running.retain(|_, t: &mut JoinHandle<()>| !t.is_finished());
            if running.len() >= MAX_RUNNING {
                weather::busy(m)
            } else {
                running.insert(key, tokio::spawn(play(script, out.clone())));
                return;
            }
        }
        Some(Step::Cancel {
            key,
            cancelled,
            unknown,
        }) => match running.remove(&key).filter(|t| !t.is_finished()) {
            Some(task) => {
                task.abort();
                cancelled
            }
            None => unknown,
        },
    };
    let _ = out.send(reply).await;
}

/// Sends an invocation's messages, each after its delay, with the time it
/// is sent as its timestamp.
async fn play(script: weather::Script, out: mpsc::Sender<Value>) {
    for (delay, mut m) in script {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if m.get("timestamp").is_some() {
            m["timestamp"] = Value::String(now_timestamp());
        }
        if out.send(m).await.is_err() {
            return;
        }
    }
}
