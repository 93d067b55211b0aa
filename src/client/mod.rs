//! The command-line client: what people would otherwise do with
//! mosquitto_sub and websocat, in LMOS terms. It speaks `lmosprotocol` to
//! any gateway (this sidecar's or another's).

pub mod check;
pub mod cli;
mod out;
pub mod raw;
mod things;
pub use things::things;
pub mod run;
mod save;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::lmos::now_timestamp;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the connection closed before an answer came")]
    Closed,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Usage(String),
    #[error("HTTP request failed: {0}")]
    Http(String),
    /// Whoever read the output stopped reading (`| head`): not a failure
    /// to report.
    #[error("standard output closed")]
    PipeClosed,
    #[error("cannot write to standard output: {0}")]
    Output(String),
    /// The endpoint went away while the command still expected messages.
    #[error("the sidecar closed the connection ({0})")]
    Ended(String),
}

/// How the results are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Human,
    Json,
}

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Credentials from the environment: `LMOS_TOKEN` (a bearer token), or
/// `LMOS_USER` with `LMOS_PASSWORD`. Never taken as flags, which would show
/// in the process list and the shell's history.
pub struct Credentials {
    pub user: Option<String>,
    pub secret: String,
    pub bearer: bool,
}

impl Credentials {
    pub fn from_env() -> Option<Credentials> {
        if let Ok(token) = std::env::var("LMOS_TOKEN") {
            return Some(Credentials {
                user: std::env::var("LMOS_USER").ok(),
                secret: token,
                bearer: true,
            });
        }
        let user = std::env::var("LMOS_USER").ok()?;
        let secret = std::env::var("LMOS_PASSWORD").unwrap_or_default();
        Some(Credentials {
            user: Some(user),
            secret,
            bearer: false,
        })
    }

    /// The HTTP `Authorization` value.
    pub fn header(&self) -> String {
        use base64::Engine;
        if self.bearer {
            format!("Bearer {}", self.secret)
        } else {
            let pair = format!(
                "{}:{}",
                self.user.as_deref().unwrap_or_default(),
                self.secret
            );
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        }
    }
}

/// Opens an `lmosprotocol` WebSocket.
pub async fn connect(url: &str) -> Result<Socket, ClientError> {
    let failed = |reason: String| ClientError::Connect {
        url: url.to_owned(),
        reason,
    };
    let mut request = url
        .into_client_request()
        .map_err(|e| failed(e.to_string()))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    if let Some(credentials) = Credentials::from_env() {
        let value = HeaderValue::from_str(&credentials.header()).map_err(|_| {
            ClientError::Usage(
                "LMOS_USER, LMOS_PASSWORD and LMOS_TOKEN must be printable text".into(),
            )
        })?;
        request.headers_mut().insert("Authorization", value);
    }
    let (socket, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .map_err(|_| failed("timed out".into()))?
    .map_err(|e| failed(e.to_string()))?;
    Ok(socket)
}

/// A new LMOS message with a fresh ID; `members` are merged in.
pub fn message(thing: &str, message_type: &str, members: Value) -> Value {
    let mut m = json!({
        "thingID": thing,
        "messageID": uuid::Uuid::new_v4().to_string(),
        "messageType": message_type,
    });
    if let Value::Object(extra) = members {
        for (k, v) in extra {
            m[k] = v;
        }
    }
    m
}

pub async fn send(socket: &mut Socket, message: &Value) -> Result<(), ClientError> {
    socket
        .send(WsMessage::Text(message.to_string().into()))
        .await
        .map_err(|_| ClientError::Closed)
}

/// The next LMOS message, or `None` when the connection closes.
pub async fn next(socket: &mut Socket) -> Option<Value> {
    while let Some(frame) = socket.next().await {
        match frame {
            Ok(WsMessage::Text(t)) => {
                if let Ok(v) = serde_json::from_str(&t) {
                    return Some(v);
                }
            }
            Ok(WsMessage::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    None
}

/// One line for a person, or the JSON as it came.
pub fn render(m: &Value, output: Output) -> String {
    if output == Output::Json {
        return m.to_string();
    }
    let t = m["messageType"].as_str().unwrap_or("?");
    let thing = m["thingID"].as_str().unwrap_or("?");
    match t {
        "event" => format!(
            "{thing} event {} {}",
            m["event"].as_str().unwrap_or("?"),
            m["data"]
        ),
        "propertyReading" => format!(
            "{thing} {} = {}",
            m["name"].as_str().unwrap_or("?"),
            m["value"]
        ),
        // As `read` prints a reading: a line per property.
        "propertyReadings" => match m["data"].as_object() {
            Some(data) if !data.is_empty() => data
                .iter()
                .map(|(name, value)| format!("{thing} {name} = {value}"))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => format!("{thing} {}", m["data"]),
        },
        "actionStatus" => {
            let output = m.get("output").map(|o| format!(" {o}")).unwrap_or_default();
            format!(
                "{thing} {} {}{output}{}",
                m["action"].as_str().unwrap_or("?"),
                m["status"].as_str().unwrap_or("?"),
                m.get("stream").map(chunk).unwrap_or_default()
            )
        }
        "error" => format!(
            "error {} {}: {}",
            m["status"].as_str().unwrap_or("?"),
            m["title"].as_str().unwrap_or(""),
            m["detail"].as_str().unwrap_or("")
        ),
        other => format!("{other} {m}"),
    }
}

/// A stream chunk (docs/requests.md, Streams) as text: its number and its
/// data (text as it is, anything else by size), or the end marker.
fn chunk(stream: &Value) -> String {
    let seq = &stream["seq"];
    if stream["end"] == true {
        return format!(" [stream #{seq} end]");
    }
    match (&stream["data"], stream.get("contentEncoding")) {
        (Value::String(data), None) => format!(" [stream #{seq}] {data:?}"),
        (Value::String(data), Some(encoding)) => format!(
            " [stream #{seq}] {} characters of {} {encoding}",
            data.len(),
            stream["contentType"].as_str().unwrap_or("data")
        ),
        (data, _) => format!(" [stream #{seq}] {data}"),
    }
}

/// Whether `m` ends the answer to a request of type `asked`, and whether
/// the request succeeded: a `cancelAction` succeeded when the action is
/// `cancelled`; a `queryAction` is answered once, with the latest status
/// (a failed or cancelled action still says so).
fn ends(asked: &str, m: &Value) -> Option<bool> {
    match (asked, m["messageType"].as_str()?) {
        ("cancelAction", "actionStatus") => Some(matches!(
            m["status"].as_str(),
            Some("cancelled" | "canceled")
        )),
        ("queryAction", "actionStatus") => Some(outcome(m).unwrap_or(true)),
        _ => outcome(m),
    }
}

/// Whether a message ends a request's answer, and whether it succeeded.
fn outcome(m: &Value) -> Option<bool> {
    match m["messageType"].as_str()? {
        "error" => Some(false),
        "propertyReading" | "propertyReadings" => Some(true),
        "actionStatus" => match m["status"].as_str()? {
            "completed" => Some(true),
            "failed" | "cancelled" | "canceled" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Sends a request and prints every answer correlated to it until the final
/// one (an `actionStatus` stream included; a `queryAction` is answered once,
/// with the latest status, final or not). `Ok(true)` when it succeeded.
pub async fn request(
    url: &str,
    request: Value,
    output: Output,
    timeout: Duration,
) -> Result<bool, ClientError> {
    request_saving(url, request, output, timeout, None).await
}

/// [`request`], the answer's streamed data written to a file when `save`.
pub async fn request_saving(
    url: &str,
    request: Value,
    output: Output,
    timeout: Duration,
    mut save: Option<save::Saving>,
) -> Result<bool, ClientError> {
    let mut socket = connect(url).await?;
    let correlation = request
        .get("correlationID")
        .or(request.get("messageID"))
        .cloned()
        .unwrap_or(Value::Null);
    send(&mut socket, &request).await?;
    // Ctrl-C while an action runs asks the agent to cancel it, on the same
    // connection (invocations belong to the connection that started them).
    let invocation = (request["messageType"] == "invokeAction").then(|| request["action"].clone());
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    let mut cancelled = false;
    loop {
        let m = tokio::select! {
            m = tokio::time::timeout(timeout, next(&mut socket)) => m
                .map_err(|_| ClientError::Timeout(timeout))?
                .ok_or(ClientError::Closed)?,
            _ = &mut interrupt, if invocation.is_some() && !cancelled => {
                cancelled = true;
                let action = invocation.clone().unwrap_or_default();
                let thing = request["thingID"].as_str().unwrap_or_default();
                let cancel = message(thing, "cancelAction", json!({"action": action, "correlationID": correlation, "reason": "Interrupted by the user."}));
                eprintln!("Cancelling...");
                send(&mut socket, &cancel).await?;
                continue;
            }
        };
        if m["correlationID"] != correlation {
            continue;
        }
        out::line(&render(&m, output))?;
        if let Some(save) = &mut save {
            save.feed(&m);
        }
        if let Some(ok) = ends(request["messageType"].as_str().unwrap_or_default(), &m) {
            let _ = socket.close(None).await;
            if let Some(save) = save {
                eprintln!("{}", save.write()?);
            }
            return Ok(ok);
        }
    }
}

/// Subscribes and prints what arrives until interrupted (or `limit`).
pub async fn subscribe(
    url: &str,
    requests: Vec<Value>,
    output: Output,
    limit: Option<usize>,
) -> Result<bool, ClientError> {
    let mut socket = connect(url).await?;
    for r in &requests {
        send(&mut socket, r).await?;
    }
    let mut seen = 0;
    while let Some(m) = next(&mut socket).await {
        out::line(&render(&m, output))?;
        if m["messageType"] == "error" {
            return Ok(false);
        }
        seen += 1;
        if limit.is_some_and(|l| seen >= l) {
            return Ok(true);
        }
    }
    // A subscription has no natural end: the sidecar stopping (or a
    // network failure) is something a script must be able to tell.
    Err(ClientError::Ended(
        "no more events or readings will come".into(),
    ))
}

/// Subscribes over MQTT (`mqtt://host:port`) to a Thing's topics and prints
/// what arrives, until interrupted (or `limit`).
pub async fn subscribe_mqtt(
    url: &str,
    filters: Vec<String>,
    output: Output,
    limit: Option<usize>,
) -> Result<bool, ClientError> {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let failed = |reason: String| ClientError::Connect {
        url: url.to_owned(),
        reason,
    };
    let rest = url
        .strip_prefix("mqtt://")
        .ok_or_else(|| ClientError::Usage("the MQTT URL must look like mqtt://host:port".into()))?;
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .unwrap_or((rest, "1883"));
    let port: u16 = port
        .parse()
        .map_err(|_| ClientError::Usage(format!("bad port in {url}")))?;
    let id = format!("lmos-sidecar-sub-{}", uuid::Uuid::new_v4().simple());
    let mut options = MqttOptions::new(id, host, port);
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(16 * 1024 * 1024, 16 * 1024 * 1024);
    if let Some(c) = Credentials::from_env() {
        options.set_credentials(c.user.unwrap_or_default(), c.secret);
    }
    let (client, mut eventloop) = AsyncClient::new(options, 100);
    for f in &filters {
        client
            .subscribe(f, QoS::AtLeastOnce)
            .await
            .map_err(|e| failed(e.to_string()))?;
    }
    let (mut seen, mut connected) = (0, false);
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => connected = true,
            Ok(Event::Incoming(Packet::Publish(p))) => {
                match serde_json::from_slice::<Value>(&p.payload) {
                    Ok(m) => out::line(&render(&m, output))?,
                    // Retained values cleared on removal are empty.
                    Err(_) if p.payload.is_empty() => continue,
                    Err(_) => out::line(&format!(
                        "{} (not JSON) {}",
                        p.topic,
                        String::from_utf8_lossy(&p.payload)
                    ))?,
                }
                seen += 1;
                if limit.is_some_and(|l| seen >= l) {
                    let _ = client.disconnect().await;
                    return Ok(true);
                }
            }
            Ok(_) => {}
            // Once connected, an error is the sidecar (or the network)
            // going away, as over WebSocket: said so, not as a failure to
            // connect.
            Err(_) if connected => {
                return Err(ClientError::Ended(
                    "no more events or readings will come".into(),
                ))
            }
            Err(e) => return Err(failed(e.to_string())),
        }
    }
}

/// A property reading, as an agent would publish it (for `publish`).
pub fn reading(thing: &str, name: &str, value: Value) -> Value {
    message(
        thing,
        "propertyReading",
        json!({"name": name, "value": value, "timestamp": now_timestamp()}),
    )
}

#[cfg(test)]
mod tests;
