//! The message bus the rest of the sidecar sees: publish, subscribe,
//! unsubscribe, and a stream of deliveries for what it subscribed to.
//!
//! Only [`embedded`] knows that rumqttd routes the messages; an external MQTT
//! cluster can take its place by producing the same [`Bus`] and deliveries.

pub mod embedded;
pub mod engine;
pub mod guard;
pub mod health;
pub mod kept;
mod probe;

use bytes::Bytes;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::telemetry::TraceContext;

/// A message the bus delivered for one of the sidecar's subscriptions.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub topic: Bytes,
    pub payload: Bytes,
    /// MQTT 5 request/response properties, when the publisher set them.
    pub response: Option<ResponseInfo>,
    /// Trace context from MQTT 5 user properties `traceparent`/`tracestate`.
    pub trace: Option<TraceContext>,
    /// The publisher's principal, when the MQTT guard named it (requests).
    pub publisher: Option<String>,
}

/// MQTT 5 Response Topic and Correlation Data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseInfo {
    pub topic: String,
    pub correlation_data: Option<Bytes>,
}

/// One message for the bus.
#[derive(Debug, Clone)]
pub struct Publication {
    pub topic: String,
    pub payload: Bytes,
    pub retain: bool,
    /// Correlation Data to send along (replies to MQTT 5 requesters).
    pub correlation_data: Option<Bytes>,
    /// Trace context to send as MQTT 5 user properties.
    pub trace: Option<TraceContext>,
    /// A raw stream chunk's MQTT 5 properties (boxed: rare).
    pub chunk: Option<Box<ChunkProperties>>,
}

/// What a raw stream chunk says beside its bytes, as MQTT 5 properties:
/// Content Type, and user properties `seq` and (on the end marker) `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkProperties {
    pub content_type: Option<String>,
    pub seq: u64,
    pub end: bool,
}

impl Publication {
    pub fn new(topic: String, payload: impl Into<Bytes>, retain: bool) -> Publication {
        Publication {
            topic,
            payload: payload.into(),
            retain,
            correlation_data: None,
            trace: None,
            chunk: None,
        }
    }
}

#[derive(Debug)]
pub(crate) enum BusCommand {
    Publish(Publication),
    Subscribe(String),
    Unsubscribe(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the message bus has stopped")]
pub struct BusClosed;

/// Cheap to clone; every clone feeds the same bus connection, in order.
#[derive(Debug, Clone)]
pub struct Bus {
    commands: mpsc::Sender<BusCommand>,
    barrier: Option<Arc<str>>,
}

impl Bus {
    pub(crate) fn new(commands: mpsc::Sender<BusCommand>) -> Bus {
        Bus {
            commands,
            barrier: None,
        }
    }

    /// With a topic only this bus connection subscribes to: a publication
    /// there comes back once the broker has carried out every command
    /// queued before it (it takes a connection's packets in order), e.g.
    /// a subscription.
    pub(crate) fn with_barrier(mut self, topic: Arc<str>) -> Bus {
        self.barrier = Some(topic);
        self
    }

    pub(crate) fn barrier_topic(&self) -> Option<&Arc<str>> {
        self.barrier.as_ref()
    }

    /// Publishes at QoS 0 from inside the sidecar. Waits (never drops) when
    /// the bus is busy, which slows the publishing connection down.
    pub async fn publish(&self, publication: Publication) -> Result<(), BusClosed> {
        self.send(BusCommand::Publish(publication)).await
    }

    /// Subscribes the sidecar. Retained messages matching the filter are
    /// delivered right after.
    pub async fn subscribe(&self, filter: String) -> Result<(), BusClosed> {
        self.send(BusCommand::Subscribe(filter)).await
    }

    pub async fn unsubscribe(&self, filter: String) -> Result<(), BusClosed> {
        self.send(BusCommand::Unsubscribe(filter)).await
    }

    /// A place on the bus's queue, for an actor that must not wait inside
    /// its loop (the dispatcher selects on this beside its other inputs).
    pub(crate) async fn reserve(&self) -> Result<mpsc::Permit<'_, BusCommand>, BusClosed> {
        self.commands.reserve().await.map_err(|_| BusClosed)
    }

    /// [`Bus::reserve`] without waiting: `None` while the queue is full.
    pub(crate) fn try_reserve(&self) -> Result<Option<mpsc::Permit<'_, BusCommand>>, BusClosed> {
        match self.commands.try_reserve() {
            Ok(permit) => Ok(Some(permit)),
            Err(mpsc::error::TrySendError::Full(())) => Ok(None),
            Err(mpsc::error::TrySendError::Closed(())) => Err(BusClosed),
        }
    }

    /// Queues any command, waiting for room.
    pub(crate) async fn send_command(&self, command: BusCommand) -> Result<(), BusClosed> {
        self.send(command).await
    }

    async fn send(&self, command: BusCommand) -> Result<(), BusClosed> {
        self.commands.send(command).await.map_err(|_| BusClosed)
    }
}
