//! The WebSocket gateway: `lmosprotocol` connections bridged into the bus.
//!
//! One bus connection serves every WebSocket connection. The gateway keeps its
//! own subscription table and asks the bus for one filter per Thing and stream,
//! so a thousand consumers of one event cost the broker one subscriber, and
//! each message is parsed and serialized once however many receive it.

mod connection;
mod dispatcher;
mod inbound;
mod outbound;
pub mod subscriptions;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::broker::{Bus, Delivery};
use crate::config::GatewayConfig;
use crate::topics::Topics;
use connection::Connection;
use dispatcher::Command;
pub use dispatcher::Dispatcher;

/// The WebSocket subprotocol this gateway speaks.
pub const SUBPROTOCOL: &str = "lmosprotocol";

/// Commands queued towards the dispatcher before connections wait.
const COMMAND_QUEUE: usize = 1024;

pub(crate) struct Shared {
    bus: Bus,
    topics: Topics,
    config: GatewayConfig,
    /// thingID for errors that concern no Thing.
    thing_id: String,
    dispatcher: mpsc::Sender<Command>,
    next_id: AtomicU64,
}

impl Shared {
    async fn command(&self, command: Command) {
        // Fails only once the dispatcher has stopped, i.e. during shutdown.
        let _ = self.dispatcher.send(command).await;
    }
}

#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// The gateway and the dispatcher task that must run for it to deliver.
    pub fn new(
        bus: Bus,
        deliveries: mpsc::Receiver<Delivery>,
        topics: Topics,
        config: GatewayConfig,
        thing_id: String,
    ) -> (Gateway, Dispatcher) {
        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        let dispatcher = Dispatcher::new(bus.clone(), topics.clone(), commands_rx, deliveries);
        let shared = Arc::new(Shared {
            bus,
            topics,
            config,
            thing_id,
            dispatcher: commands_tx,
            next_id: AtomicU64::new(1),
        });
        (Gateway { shared }, dispatcher)
    }

    /// tungstenite's own limit sits above `max_message_size` so that a
    /// moderately oversized message gets an LMOS error and the connection
    /// lives on; only far larger ones close it (code 1009).
    pub fn websocket_config(&self) -> WebSocketConfig {
        let hard_limit = self
            .shared
            .config
            .max_message_size
            .saturating_mul(4)
            .max(16 * 1024 * 1024);
        WebSocketConfig::default()
            .max_message_size(Some(hard_limit))
            .max_frame_size(Some(hard_limit))
    }

    /// Serves one upgraded connection until it closes or `shutdown` fires.
    pub async fn serve<S>(
        &self,
        socket: WebSocketStream<S>,
        peer: SocketAddr,
        shutdown: CancellationToken,
    ) where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let shared = self.shared.clone();
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (outbound, inbox) =
            outbound::channel(shared.config.outbound_queue, shared.config.slow_consumer);
        shared
            .command(Command::Register { conn: id, outbound })
            .await;
        let span = tracing::info_span!("ws", conn = id, peer = %peer);
        Connection::new(id, peer, socket, inbox, shared, shutdown)
            .run()
            .instrument(span)
            .await;
    }
}
