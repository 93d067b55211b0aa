//! One WebSocket connection speaking `lmosprotocol`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::dispatcher::Command;
use super::inbound::{route, Outcome};
use super::outbound::Inbox;
use super::subscriptions::ConnId;
use super::{authorize, trace_publication, Client, Shared};
use crate::auth::Principal;
use crate::directory::affordances;
use crate::lmos::dialect::{self, Dialect, Gatherer};
use crate::lmos::{Body, Direction, Message, Problem, ProblemKind, Rejection};
use crate::telemetry::metrics;
use serde_json::{Map, Value};

/// Frames written per flush when many are queued.
const WRITE_BATCH: usize = 64;
/// How long a closing handshake may take before the socket is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Connection<S> {
    id: ConnId,
    peer: SocketAddr,
    principal: Principal,
    /// Things this connection serves as their agent (`?host=` at handshake).
    hosts: Vec<String>,
    socket: WebSocketStream<S>,
    inbox: Inbox,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    /// The dialect the peer speaks, from the first of its messages that is
    /// unambiguous; until then, and for draft peers, frames go out as the
    /// dispatcher wrote them.
    dialect: Option<Dialect>,
    /// Kotlin reads of several properties waiting for all their readings.
    gatherer: Gatherer,
}

/// Why a connection ends, which decides its close frame.
enum Ending {
    PeerClosed,
    Shutdown,
    TooSlow,
    Idle,
    Failed(WsError),
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    pub(super) fn new(
        client: Client,
        socket: WebSocketStream<S>,
        inbox: Inbox,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> Self {
        Connection {
            id: client.conn,
            peer: client.addr,
            principal: client.principal,
            hosts: client.hosts,
            socket,
            inbox,
            shared,
            shutdown,
            dialect: None,
            gatherer: Gatherer::default(),
        }
    }

    pub async fn run(mut self) {
        debug!(peer = %self.peer, "WebSocket connection opened.");
        let ending = self.serve().await;
        self.shared
            .command(Command::Deregister { conn: self.id })
            .await;
        let dropped = self.inbox.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            warn!(
                dropped,
                "Slow consumer missed messages (slow_consumer = \"drop\")."
            );
        }
        let close = match ending {
            Ending::PeerClosed => None,
            Ending::Shutdown => Some((CloseCode::Away, "Sidecar shutting down.".to_owned())),
            Ending::TooSlow => {
                warn!(
                    queue = self.shared.config.outbound_queue,
                    "Disconnecting slow consumer."
                );
                Some((
                    CloseCode::Again,
                    format!(
                        "Slow consumer: more than {} messages waiting; reconnect and subscribe again.",
                        self.shared.config.outbound_queue
                    ),
                ))
            }
            Ending::Idle => {
                let idle = self.shared.config.idle_timeout_ms;
                self.shared
                    .metrics
                    .limit_hit(metrics::WEBSOCKET, "idle_timeout_ms");
                info!(idle_ms = idle, "Closing an idle WebSocket connection.");
                Some((
                    CloseCode::Away,
                    format!("Idle timeout: nothing received for {idle} ms (gateway.idle_timeout_ms), not even a pong."),
                ))
            }
            Ending::Failed(WsError::Capacity(e)) => {
                Some((CloseCode::Size, format!("Message too big: {e}.")))
            }
            Ending::Failed(e) => {
                debug!(error = %e, "WebSocket connection failed.");
                None
            }
        };
        if let Some((code, reason)) = close {
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.socket.close(Some(frame))).await;
        }
        debug!("WebSocket connection closed.");
    }

    async fn serve(&mut self) -> Ending {
        let too_slow = self.inbox.too_slow.clone();
        let shutdown = self.shutdown.clone();
        // Pings make a live peer answer; a peer that vanished without a FIN
        // (host down, cable out) answers nothing and is closed.
        let idle = Duration::from_millis(self.shared.config.idle_timeout_ms);
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = ping.tick() => {
                    if last_heard.elapsed() >= idle {
                        return Ending::Idle;
                    }
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.socket.send(WsMessage::Ping(Bytes::new()))).await;
                }
                _ = shutdown.cancelled() => {
                    // Deliver what is already queued (e.g. the errors for
                    // requests the shutdown leaves unanswered), briefly.
                    if let Ok(frame) = self.inbox.rx.try_recv() {
                        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.write_batch(frame)).await;
                    }
                    return Ending::Shutdown;
                }
                _ = too_slow.cancelled() => return Ending::TooSlow,
                frame = self.inbox.rx.recv() => {
                    let Some(frame) = frame else { return Ending::Shutdown };
                    // A consumer that stops reading blocks this write; the
                    // slow-consumer signal and shutdown must still get through.
                    // Biased: a write that can finish at once does, even
                    // when shutdown is already under way.
                    tokio::select! {
                        biased;
                        result = self.write_batch(frame) => if let Err(e) = result { return Ending::Failed(e) },
                        _ = too_slow.cancelled() => return Ending::TooSlow,
                        _ = shutdown.cancelled() => return Ending::Shutdown,
                    }
                }
                incoming = self.socket.next() => match incoming {
                    None => return Ending::PeerClosed,
                    Some(Err(e)) => return Ending::Failed(e),
                    Some(Ok(message)) => {
                        last_heard = tokio::time::Instant::now();
                        if let Err(e) = self.handle(message).await {
                            return Ending::Failed(e);
                        }
                    }
                },
            }
        }
    }

    async fn write_batch(&mut self, first: Utf8Bytes) -> Result<(), WsError> {
        self.feed(first).await?;
        for _ in 1..WRITE_BATCH {
            match self.inbox.rx.try_recv() {
                Ok(frame) => self.feed(frame).await?,
                Err(_) => break,
            }
        }
        self.socket.flush().await
    }

    /// Queues one frame, in the peer's dialect.
    async fn feed(&mut self, frame: Utf8Bytes) -> Result<(), WsError> {
        if self.dialect != Some(Dialect::Kotlin) {
            return self.socket.feed(WsMessage::Text(frame)).await;
        }
        if let Some(text) = self.in_kotlin(&frame) {
            self.socket.feed(WsMessage::Text(text.into())).await?;
        }
        Ok(())
    }

    /// A canonical message as this Kotlin peer reads it; `None` while the
    /// gatherer holds it. Text that is no JSON goes out as it is.
    fn in_kotlin(&mut self, text: &str) -> Option<String> {
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            return Some(text.to_owned());
        };
        let value = self.gatherer.offer(value)?;
        Some(dialect::render(value).to_string())
    }

    /// Sends one message the connection writes itself, in the peer's
    /// dialect, ahead of queued deliveries.
    async fn send_now(&mut self, text: String) -> Result<(), WsError> {
        let text = if self.dialect == Some(Dialect::Kotlin) {
            match self.in_kotlin(&text) {
                Some(text) => text,
                None => return Ok(()),
            }
        } else {
            text
        };
        self.socket.send(WsMessage::Text(text.into())).await
    }

    async fn handle(&mut self, message: WsMessage) -> Result<(), WsError> {
        match message {
            WsMessage::Text(text) => self.handle_text(text).await,
            WsMessage::Binary(_) => {
                let problem = Problem::new(
                    ProblemKind::BinaryFrame,
                    "LMOS messages are JSON text; send them as WebSocket text frames.",
                );
                self.reply(problem, None, None).await
            }
            // tungstenite answers pings itself; close frames end the stream.
            WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Close(_) | WsMessage::Frame(_) => {
                Ok(())
            }
        }
    }

    async fn handle_text(&mut self, text: Utf8Bytes) -> Result<(), WsError> {
        let max = self.shared.config.max_message_size;
        if text.len() > max {
            let detail = format!("The message has {} bytes; this gateway accepts at most {max} (gateway.max_message_size).", text.len());
            return self
                .reply(
                    Problem::new(ProblemKind::MessageTooLarge, detail),
                    None,
                    None,
                )
                .await;
        }
        let value = match serde_json::from_slice::<Value>(text.as_bytes()) {
            Ok(value) => value,
            // Parsed again for the rejection naming where it failed.
            Err(_) => {
                return self
                    .handle_parsed(Message::parse(text.as_bytes()), text)
                    .await
            }
        };
        if looks_like_td(&value) {
            return self.register_td(&text).await;
        }
        let detected = match &value {
            Value::Object(map) => dialect::detect(map),
            _ => None,
        };
        if self.dialect.is_none() && detected.is_some() {
            self.dialect = detected;
            debug!(dialect = ?detected, "The peer's dialect is known.");
        }
        let kotlin = detected == Some(Dialect::Kotlin)
            || (detected.is_none() && self.dialect == Some(Dialect::Kotlin));
        match value {
            Value::Object(map) if kotlin => self.handle_kotlin(map).await,
            // The draft's (or a message valid in both): published verbatim.
            value => self.handle_parsed(Message::from_value(value), text).await,
        }
    }

    /// A message in the Kotlin dialect: the canonical message(s) it stands
    /// for are handled as if sent so, and what is published is their
    /// canonical form, so draft consumers read it.
    async fn handle_kotlin(&mut self, map: Map<String, Value>) -> Result<(), WsError> {
        let (thing, correlation) = dialect::reply_target(&map);
        let normalized = dialect::normalize(map, |t| {
            let directory = self.shared.directory.directory();
            dialect::readable_properties(directory.get(t)?)
        });
        let normalized = match normalized {
            Ok(n) => n,
            Err(e) => {
                return self
                    .reply(e.problem(), thing.as_deref(), correlation.as_deref())
                    .await
            }
        };
        if let Some(names) = &normalized.gather {
            let thing = thing.as_deref().unwrap_or_default();
            let correlation = correlation.as_deref().unwrap_or_default();
            if let Some(empty) = self.gatherer.expect(thing, correlation, names) {
                return self.send_now(empty.to_string()).await;
            }
        }
        for map in normalized.messages {
            let message = Message::from_value(Value::Object(map));
            let raw = match &message {
                Ok(m) => Utf8Bytes::from(m.to_json()),
                Err(_) => Utf8Bytes::default(),
            };
            self.handle_parsed(message, raw).await?;
        }
        Ok(())
    }

    /// A message as read (or why it could not be); `raw` is what agents'
    /// messages are published as.
    async fn handle_parsed(
        &mut self,
        parsed: Result<Message, Rejection>,
        raw: Utf8Bytes,
    ) -> Result<(), WsError> {
        let message = match parsed {
            Ok(m) => {
                self.shared
                    .metrics
                    .received(metrics::WEBSOCKET, m.message_type().as_str());
                m
            }
            Err(rejection) => {
                let problem = Problem::from(&rejection);
                let correlation = rejection.reply_correlation_id().map(str::to_owned);
                return self
                    .reply(
                        problem,
                        rejection.thing_id.as_deref(),
                        correlation.as_deref(),
                    )
                    .await;
            }
        };
        let text = raw;
        let thing = message.thing_id.clone();
        let correlation = message.reply_correlation_id().to_owned();
        if let Err((access, problem)) = authorize(&self.principal, &message) {
            self.shared
                .metrics
                .denied(metrics::WEBSOCKET, access.as_str());
            info!(
                access = access.as_str(),
                message_type = %message.message_type(),
                "Denied a WebSocket message."
            );
            return self.reply(problem, Some(&thing), Some(&correlation)).await;
        }
        if self.shared.validate_agent_data {
            let refused = {
                let directory = self.shared.directory.directory();
                directory
                    .get(&thing)
                    .and_then(|td| affordances::check_agent_data(td, &message).err())
            };
            if let Some(problem) = refused {
                return self.reply(problem, Some(&thing), Some(&correlation)).await;
            }
        }
        let outcome = route(self.id, &message, Bytes::from(text), &self.shared.topics);
        // What a hosting agent sends with a correlation ID may answer a
        // request routed to it; the dispatcher decides, and publishes it as
        // usual when it does not.
        let answers = message.message_type().direction() == Direction::ThingToConsumer
            && message.correlation_id.is_some()
            && self.hosts.contains(&thing);
        if answers {
            let fallback = match outcome {
                Outcome::Publish(publications) => publications,
                _ => Vec::new(),
            };
            let command = Command::AgentMessage {
                conn: self.id,
                thing,
                message: Box::new(message),
                fallback,
            };
            self.shared.command(command).await;
            return Ok(());
        }
        let kotlin = self.dialect == Some(Dialect::Kotlin);
        match outcome {
            Outcome::Command(mut command) => {
                if let Command::Subscribe { acknowledge, .. }
                | Command::Unsubscribe { acknowledge, .. } = &mut command
                {
                    *acknowledge = kotlin;
                }
                debug!(message_type = %message.message_type(), "Applying subscription change.");
                self.shared.command(command).await;
                Ok(())
            }
            Outcome::Publish(publications) => {
                for mut publication in publications {
                    trace_publication(&self.shared.tracer, &message, &mut publication);
                    if self.shared.bus.publish(publication).await.is_err() {
                        let problem = Problem::new(
                            ProblemKind::Unavailable,
                            "The message bus has stopped; the message was not published.",
                        );
                        return self.reply(problem, Some(&thing), Some(&correlation)).await;
                    }
                }
                Ok(())
            }
            Outcome::Reject(problem) => self.reply(problem, Some(&thing), Some(&correlation)).await,
        }
    }

    /// A hosting agent sends its Thing Description: registered as by
    /// `PUT /things/{id}`. Errors go back as LMOS `error`s; success is quiet.
    async fn register_td(&mut self, text: &str) -> Result<(), WsError> {
        let id = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|td| td["id"].as_str().map(str::to_owned));
        let Some(id) = id.filter(|id| self.hosts.contains(id)) else {
            let detail = "A Thing Description sent over the WebSocket must have an `id` naming a Thing this connection hosts (`?host=<thingID>`); others go to PUT /things/{id}.";
            return self
                .reply(Problem::new(ProblemKind::Forbidden, detail), None, None)
                .await;
        };
        let result = self
            .shared
            .directory
            .directory()
            .put(Some(&id), text.as_bytes());
        match result {
            Ok((registered, td)) => {
                self.shared
                    .directory
                    .announce(&id, Some(&td), registered)
                    .await;
                Ok(())
            }
            Err(e) => {
                let problem = Problem::new(ProblemKind::InvalidData, e.to_string());
                self.reply(problem, Some(&id), None).await
            }
        }
    }

    /// Sends an LMOS `error` to this connection, ahead of queued deliveries.
    async fn reply(
        &mut self,
        problem: Problem,
        thing: Option<&str>,
        correlation: Option<&str>,
    ) -> Result<(), WsError> {
        let thing = thing.unwrap_or(&self.shared.thing_id);
        self.shared.metrics.error(problem.kind.slug());
        self.shared.metrics.sent(metrics::WEBSOCKET, "error");
        if problem.kind == ProblemKind::MessageTooLarge {
            self.shared.metrics.dropped("too_large");
        }
        let message = problem.to_message(thing, correlation);
        if let Body::Error(e) = &message.body {
            info!(kind = problem.kind.slug(), instance = %e.instance, "Rejected a WebSocket message.");
        }
        self.send_now(message.to_json()).await
    }
}

/// A JSON object with `@context` and no `messageType`: a Thing Description,
/// not an LMOS message.
fn looks_like_td(value: &Value) -> bool {
    value.get("@context").is_some() && value.get("messageType").is_none()
}
