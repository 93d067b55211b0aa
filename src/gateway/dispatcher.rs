//! The one task that owns the subscription table: it applies the
//! connections' subscribe/unsubscribe commands, keeps the gateway's bus
//! subscriptions in step, and fans each delivery out to its recipients.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::outbound::{Offer, Outbound};
use super::subscriptions::{ConnId, Selector, Stream, StreamChange, Table};
use crate::broker::{Bus, Delivery};
use crate::lmos::splice::{json_string, Prepared};
use crate::topics::{Route, Topics};

#[derive(Debug)]
pub enum Command {
    Register {
        conn: ConnId,
        outbound: Outbound,
    },
    Subscribe {
        conn: ConnId,
        thing: String,
        selector: Selector,
        correlation_id: String,
    },
    Unsubscribe {
        conn: ConnId,
        thing: String,
        selector: Selector,
    },
    Deregister {
        conn: ConnId,
    },
}

pub struct Dispatcher {
    table: Table,
    outbounds: HashMap<ConnId, Outbound>,
    /// Latest reading of every property of the Things the gateway follows, so
    /// a new observer gets the current value at once even when the gateway's
    /// bus subscription (and the retained message it brought) predates it.
    latest: HashMap<String, HashMap<String, Arc<Prepared>>>,
    bus: Bus,
    topics: Topics,
    commands: mpsc::Receiver<Command>,
    deliveries: mpsc::Receiver<Delivery>,
}

impl Dispatcher {
    pub fn new(
        bus: Bus,
        topics: Topics,
        commands: mpsc::Receiver<Command>,
        deliveries: mpsc::Receiver<Delivery>,
    ) -> Dispatcher {
        Dispatcher {
            table: Table::default(),
            outbounds: HashMap::new(),
            latest: HashMap::new(),
            bus,
            topics,
            commands,
            deliveries,
        }
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                command = self.commands.recv() => match command {
                    Some(command) => self.apply(command).await,
                    None => return,
                },
                delivery = self.deliveries.recv() => match delivery {
                    Some(delivery) => self.deliver(delivery),
                    None => {
                        warn!("The message bus closed; the gateway stops delivering.");
                        return;
                    }
                },
            }
        }
    }

    async fn apply(&mut self, command: Command) {
        match command {
            Command::Register { conn, outbound } => {
                self.outbounds.insert(conn, outbound);
            }
            Command::Subscribe {
                conn,
                thing,
                selector,
                correlation_id,
            } => {
                if !self.outbounds.contains_key(&conn) {
                    return;
                }
                let correlation: Arc<str> = json_string(&correlation_id).into();
                let change = self
                    .table
                    .add(conn, &thing, selector.clone(), correlation.clone());
                if let Selector::Property(name) = &selector {
                    let cached = self.latest.get(&thing).and_then(|m| m.get(name)).cloned();
                    if let Some(prepared) = cached {
                        self.send(conn, prepared.with_correlation(&correlation));
                    }
                }
                if let Some(change) = change {
                    self.change_bus(change).await;
                }
            }
            Command::Unsubscribe {
                conn,
                thing,
                selector,
            } => {
                if let Some(change) = self.table.remove(conn, &thing, &selector) {
                    self.change_bus(change).await;
                }
            }
            Command::Deregister { conn } => self.forget(conn).await,
        }
    }

    async fn forget(&mut self, conn: ConnId) {
        self.outbounds.remove(&conn);
        for change in self.table.remove_connection(conn) {
            self.change_bus(change).await;
        }
    }

    async fn change_bus(&mut self, change: StreamChange) {
        let filter = match change.stream {
            Stream::Events => self.topics.thing_events_filter(&change.thing),
            Stream::Properties => self.topics.thing_properties_filter(&change.thing),
        };
        if !change.subscribe && change.stream == Stream::Properties {
            self.latest.remove(&change.thing);
        }
        let result = if change.subscribe {
            self.bus.subscribe(filter).await
        } else {
            self.bus.unsubscribe(filter).await
        };
        if result.is_err() {
            warn!("The message bus closed; subscriptions can no longer change.");
        }
    }

    fn deliver(&mut self, delivery: Delivery) {
        let Ok(topic) = std::str::from_utf8(&delivery.topic) else {
            return;
        };
        let Some(route) = self.topics.parse(topic) else {
            debug!(topic, "Ignoring a delivery outside the LMOS topics.");
            return;
        };
        let (thing, recipients) = match &route {
            Route::Event { thing, event } => (thing, self.table.event_recipients(thing, event)),
            Route::Property { thing, name } => {
                if delivery.payload.is_empty() {
                    // An empty retained message clears the property.
                    if let Some(m) = self.latest.get_mut(thing) {
                        m.remove(name);
                    }
                    return;
                }
                (thing, self.table.property_recipients(thing, name))
            }
            Route::ActionStatus { .. } => return,
        };
        // Property readings are cached even without an observer yet; events
        // nobody wants are not worth parsing.
        if recipients.is_empty() && matches!(route, Route::Event { .. }) {
            return;
        }
        let prepared = match Prepared::from_payload(&delivery.payload, thing) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                warn!(error = %e, kind = "invalid-payload", "Dropped a message published on an LMOS topic.");
                return;
            }
        };
        if let Route::Property { thing, name } = &route {
            // Only while the gateway follows the Thing's properties: a reading
            // still in flight after the last observer left must not leave a
            // stale value behind.
            if self.table.follows(thing, Stream::Properties) {
                self.latest
                    .entry(thing.clone())
                    .or_default()
                    .insert(name.clone(), prepared.clone());
            }
        }
        for (conn, correlation) in recipients {
            self.send(conn, prepared.with_correlation(&correlation));
        }
    }

    fn send(&mut self, conn: ConnId, text: String) {
        let Some(outbound) = self.outbounds.get(&conn) else {
            return;
        };
        match outbound.offer(Utf8Bytes::from(text)) {
            Offer::Queued | Offer::Dropped => {}
            // The connection closes itself and deregisters; stop offering now.
            Offer::Closed => {
                self.outbounds.remove(&conn);
            }
        }
    }
}
