//! The dispatcher's effects: what goes to connections, what is queued
//! for the bus (publications, subscription changes) and how the bus takes
//! it without the loop ever waiting.

use std::time::Instant;

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{Core, Decisions, Dispatcher};
use crate::broker::{BusCommand, Publication};
use crate::gateway::history;
use crate::gateway::requests::{Consumer, Effect};
use crate::gateway::subscriptions::{Stream, StreamChange};
use crate::lmos::splice::peek_member;
use crate::lmos::ProblemKind;
use crate::telemetry::metrics;

impl<D: Decisions> Core<D> {
    /// The history as the store kept it; the gateway follows the events of
    /// its Things again, so that what is published before their consumers
    /// come back is kept too.
    pub(super) fn restore_history(&mut self, log: history::HistoryLog, rows: history::Rows) {
        let started = Instant::now();
        let restored = self
            .history
            .restore(log, rows, started, history::wall_micros());
        for thing in &restored.things {
            let filter = self.topics.thing_events_filter(thing);
            self.out.bus(BusCommand::Subscribe(filter));
        }
        info!(
            things = restored.things.len(),
            events = restored.events,
            ms = started.elapsed().as_millis() as u64,
            "Restored the resume history."
        );
    }

    pub(super) fn change_bus(&mut self, change: StreamChange) {
        // With a history, the gateway keeps following a Thing's events for
        // a while after its last subscriber left, so a consumer that comes
        // back finds what it missed.
        if change.stream == Stream::Events {
            let needed = if change.subscribe {
                self.history.follow(&change.thing)
            } else {
                self.history.leave(&change.thing, Instant::now())
            };
            if !needed {
                return;
            }
        }
        let filter = match change.stream {
            Stream::Events => self.topics.thing_events_filter(&change.thing),
            Stream::Properties => self.topics.thing_properties_filter(&change.thing),
        };
        if !change.subscribe && change.stream == Stream::Properties {
            self.latest.remove(&change.thing);
        }
        self.out.bus(if change.subscribe {
            BusCommand::Subscribe(filter)
        } else {
            BusCommand::Unsubscribe(filter)
        });
    }

    /// Counts a message the sidecar sends; errors by kind too.
    pub(super) fn count_sent(&self, transport: &'static str, text: &str) {
        let message_type = peek_member(text, "messageType").unwrap_or_default();
        self.metrics.sent(transport, message_type);
        if message_type == "error" {
            let kind = peek_member(text, "type").and_then(ProblemKind::from_type_uri);
            self.metrics.error(kind.map_or("agent", ProblemKind::slug));
        }
    }

    pub(super) fn carry_out(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match &effect {
                Effect::ToConsumer(Consumer::WebSocket(_), text)
                | Effect::ChunkToConsumer(Consumer::WebSocket(_), text)
                | Effect::ToAgent(_, text) => self.count_sent(metrics::WEBSOCKET, text),
                Effect::ToConsumer(Consumer::Mqtt { .. }, text)
                | Effect::ChunkToConsumer(Consumer::Mqtt { .. }, text) => {
                    self.count_sent(metrics::MQTT, text)
                }
                Effect::Publish(p) => {
                    if let Ok(text) = std::str::from_utf8(&p.payload) {
                        self.count_sent(metrics::MQTT, text);
                    }
                }
                Effect::Subscribe(_) | Effect::Unsubscribe(_) => {}
            }
            match effect {
                Effect::ToConsumer(Consumer::WebSocket(conn), text)
                | Effect::ToAgent(conn, text) => self.send(conn, text),
                Effect::ChunkToConsumer(Consumer::WebSocket(conn), text) => {
                    self.out.send_chunk(conn, text)
                }
                Effect::ToConsumer(
                    Consumer::Mqtt {
                        topic,
                        correlation_data,
                        ..
                    },
                    text,
                )
                | Effect::ChunkToConsumer(
                    Consumer::Mqtt {
                        topic,
                        correlation_data,
                        ..
                    },
                    text,
                ) => {
                    let mut publication = Publication::new(topic, text, false);
                    publication.correlation_data = correlation_data;
                    self.publish(publication);
                }
                Effect::Publish(publication) => self.publish(publication),
                Effect::Subscribe(filter) => self.out.bus(BusCommand::Subscribe(filter)),
                Effect::Unsubscribe(filter) => self.out.bus(BusCommand::Unsubscribe(filter)),
            }
        }
    }

    /// Publishes on the bus, after what was decided before.
    pub(super) fn publish(&mut self, publication: Publication) {
        self.out.bus(BusCommand::Publish(publication));
    }
}

impl Dispatcher {
    /// Hands the bus the first queued command through `permit`, and as
    /// many more as it has room for now.
    pub(super) fn feed_bus(&mut self, permit: mpsc::Permit<'_, BusCommand>) {
        let Some(first) = self.core.out.to_bus.pop_front() else {
            return;
        };
        permit.send(first);
        let mut closed = false;
        while !self.core.out.to_bus.is_empty() {
            match self.bus.try_reserve() {
                Ok(Some(permit)) => {
                    if let Some(command) = self.core.out.to_bus.pop_front() {
                        permit.send(command);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            self.bus_closed();
        }
    }

    pub(super) fn bus_closed(&mut self) {
        warn!(
            dropped = self.core.out.to_bus.len(),
            "The message bus closed; queued publications and subscription changes are lost."
        );
        self.core.out.to_bus.clear();
    }

    /// Hands the bus what the start-up queued (the restored history's
    /// subscriptions) and waits until the broker has applied it, before the
    /// sidecar says it is ready: so that no event published by a client that
    /// connects once it is ready goes by them. The proof is a barrier
    /// published after them coming back (the broker takes the gateway's
    /// commands in order); what else arrives meanwhile is handled as usual.
    pub async fn prime(&mut self) {
        const PRIMED: &[u8] = b"primed";
        if self.core.out.to_bus.is_empty() {
            return;
        }
        self.flush_bus().await;
        let Some(topic) = self.bus.barrier_topic().cloned() else {
            return;
        };
        let barrier = Publication::new(topic.to_string(), PRIMED, false);
        if self.bus.publish(barrier).await.is_err() {
            return;
        }
        let back = async {
            while let Some(delivery) = self.deliveries.recv().await {
                let ours = *delivery.topic == *topic.as_bytes() && *delivery.payload == *PRIMED;
                self.delivery(delivery);
                if ours {
                    return;
                }
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(5), back)
            .await
            .is_err()
        {
            warn!("The broker did not confirm the gateway's start-up subscriptions within 5 s; starting anyway.");
        }
    }

    /// Waits until the bus has taken everything queued (at shutdown).
    pub(super) async fn flush_bus(&mut self) {
        while let Some(command) = self.core.out.to_bus.pop_front() {
            if self.bus.send_command(command).await.is_err() {
                return self.bus_closed();
            }
        }
    }
}
