//! One WebSocket connection speaking `lmosprotocol`: it reads frames, asks
//! [`super::decide`] what each means, carries out the effects, and writes
//! what the dispatcher queued for it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{self, Effect, Peer};
use super::dispatcher::Command;
use super::effects::Effects;
use super::metered::{Metered, Refusal};
use super::outbound::{Frame, Inbox, Outbound, TooSlow};
use super::subscriptions::ConnId;
use super::{Client, Shared};
use crate::auth::Principal;
use crate::lmos::dialect::{self, Dialect, Gatherer};
use crate::telemetry::metrics;
use serde_json::Value;

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
    socket: WebSocketStream<Metered<S>>,
    /// Everything this connection sends goes through its queue, in order:
    /// the dispatcher's deliveries and replies and the connection's own
    /// refusals alike (one reply path).
    outbound: Outbound,
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

/// Ends when `expiry` passes; never without one.
async fn expired(expiry: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match expiry {
        Some(sleep) => sleep.await,
        None => std::future::pending().await,
    }
}

/// Why a connection ends, which decides its close frame.
enum Ending {
    PeerClosed,
    Shutdown,
    TooSlow,
    Idle,
    /// Its principal's JWT passed its `exp`.
    Expired,
    /// Its reading was stopped to keep within a memory budget.
    Inbound(Refusal),
    Failed(WsError),
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    pub(super) fn new(
        client: Client,
        socket: WebSocketStream<Metered<S>>,
        (outbound, inbox): (Outbound, Inbox),
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> Self {
        Connection {
            id: client.conn,
            peer: client.addr,
            principal: client.principal,
            hosts: client.hosts,
            socket,
            outbound,
            inbox,
            shared,
            shutdown,
            dialect: None,
            gatherer: Gatherer::default(),
        }
    }

    /// Boxed: an `async fn` keeps its arguments twice (what was passed
    /// and the binding), and the connection is most of an idle consumer's
    /// task; two pointers cost less than two copies.
    pub async fn run(mut self: Box<Self>) {
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
            Ending::TooSlow => Some((CloseCode::Again, self.too_slow())),
            Ending::Inbound(why) => Some(self.inbound_refused(why)),
            Ending::Expired => {
                info!(
                    principal = self.principal.name(),
                    "Closing a WebSocket connection: its token expired."
                );
                Some((
                    CloseCode::Policy,
                    "Token expired (exp); reconnect with a fresh one.".to_owned(),
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

    /// The close reason of a consumer found too slow.
    fn too_slow(&self) -> String {
        let config = &self.shared.config;
        let why = self.inbox.account.too_slow();
        // The global budget is logged by the budget, once in a while.
        if why != Some(TooSlow::Budget) {
            warn!(
                queue = config.outbound_queue,
                queue_bytes = config.outbound_queue_bytes,
                stall_ms = config.outbound_stall_ms,
                why = ?why,
                "Disconnecting slow consumer."
            );
        }
        let waiting = match why {
            Some(TooSlow::Budget) => {
                // A close reason holds at most 123 bytes.
                return "Slow consumer: outbound memory budget full (gateway.max_outbound_bytes); reconnect and subscribe again.".to_owned();
            }
            Some(TooSlow::Stalled) => {
                return format!(
                    "Slow consumer: nothing taken off its queue for {} ms; reconnect and subscribe again.",
                    config.outbound_stall_ms
                );
            }
            Some(TooSlow::Bytes) => format!("{} bytes", config.outbound_queue_bytes),
            _ => format!("{} messages", config.outbound_queue),
        };
        format!("Slow consumer: more than {waiting} waiting; reconnect and subscribe again.")
    }

    fn inbound_refused(&self, why: Refusal) -> (CloseCode, String) {
        let config = &self.shared.config;
        match why {
            Refusal::Budget => (
                CloseCode::Again,
                "Inbound memory budget full (gateway.max_inbound_bytes) and this connection held the most; retry later."
                    .to_owned(),
            ),
            Refusal::Fragmented => {
                debug!("Closing a connection sending a fragmented message over max_message_size.");
                (
                    CloseCode::Size,
                    format!("Fragmented message larger than gateway.max_message_size ({} bytes); the rest was not read.", config.max_message_size),
                )
            }
        }
    }

    async fn serve(&mut self) -> Ending {
        let too_slow = self.inbox.too_slow.clone();
        let evicted = self.socket.get_ref().meter().evicted.clone();
        let shutdown = self.shutdown.clone();
        // Pings make a live peer answer; a peer that vanished without a FIN
        // (host down, cable out) answers nothing and is closed.
        let idle = Duration::from_millis(self.shared.config.idle_timeout_ms);
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = tokio::time::Instant::now();
        // Only a token that expires gets a timer, boxed: a timer is 128 bytes
        // of every idle connection's task.
        let mut expiry = self
            .principal
            .expires_in()
            .map(|left| Box::pin(tokio::time::sleep(left)));
        loop {
            tokio::select! {
                _ = expired(&mut expiry) => return Ending::Expired,
                _ = ping.tick() => {
                    if last_heard.elapsed() >= idle {
                        return Ending::Idle;
                    }
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.socket.send(WsMessage::Ping(Bytes::new()))).await;
                }
                _ = shutdown.cancelled() => {
                    // Deliver what is already queued (e.g. the errors for
                    // requests the shutdown leaves unanswered), briefly.
                    if let Some(frame) = self.inbox.try_recv() {
                        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.write_batch(frame)).await;
                    }
                    return Ending::Shutdown;
                }
                _ = too_slow.cancelled() => return Ending::TooSlow,
                _ = evicted.cancelled() => return self.refused(),
                frame = self.inbox.recv() => {
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
                    Some(Err(_)) if self.socket.get_ref().meter().refusal().is_some() => return self.refused(),
                    Some(Err(e)) => return Ending::Failed(e),
                    Some(Ok(message)) => {
                        last_heard = tokio::time::Instant::now();
                        // Boxed: deciding and applying a frame's effects
                        // takes 2.5 KiB of state that an idle consumer's
                        // task would otherwise hold all along.
                        Box::pin(self.handle(message)).await;
                        // The message no longer counts in max_inbound_bytes.
                        self.socket.get_ref().settle();
                    }
                },
            }
        }
    }

    fn refused(&self) -> Ending {
        let why = self.socket.get_ref().meter().refusal();
        Ending::Inbound(why.unwrap_or(Refusal::Budget))
    }

    async fn write_batch(&mut self, first: Frame) -> Result<(), WsError> {
        self.feed(first).await?;
        for _ in 1..WRITE_BATCH {
            match self.inbox.try_recv() {
                Some(frame) => self.feed(frame).await?,
                None => break,
            }
        }
        self.socket.flush().await
    }

    /// Queues one frame, in the peer's dialect.
    async fn feed(&mut self, frame: Frame) -> Result<(), WsError> {
        if self.dialect != Some(Dialect::Kotlin) {
            return self.socket.feed(frame.into_message()).await;
        }
        let frame = frame.into_text();
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

    /// One frame from the peer: [`decide`] says what it means, this carries
    /// it out.
    async fn handle(&mut self, message: WsMessage) {
        let mut peer = Peer {
            id: self.id,
            principal: &self.principal,
            hosts: &self.hosts,
            dialect: &mut self.dialect,
            gatherer: &mut self.gatherer,
        };
        let effects = match message {
            WsMessage::Text(text) => decide::text(&mut peer, &self.shared.context(), text),
            WsMessage::Binary(frame) => decide::binary(&mut peer, &self.shared.context(), &frame),
            // tungstenite answers pings itself; close frames end the stream.
            WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Close(_) | WsMessage::Frame(_) => {
                Vec::new()
            }
        };
        for effect in effects {
            self.apply(effect).await;
        }
    }

    async fn apply(&mut self, effect: Effect) {
        self.effects().apply(effect).await;
    }

    fn effects(&self) -> Effects<'_> {
        Effects {
            shared: &self.shared,
            principal: &self.principal,
            outbound: &self.outbound,
            transport: metrics::WEBSOCKET,
        }
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
