//! The I/O edge around the [`Core`]: the [`Handoff`] that offers the
//! core's decisions to the connections' queues and the bus without
//! waiting, and the [`Dispatcher`] loop that feeds the core.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Command, Core, Decisions, Services};
use crate::broker::{Bus, BusCommand, Delivery};
use crate::gateway::budget::Budget;
use crate::gateway::outbound::{Account, Frame, Offer, Outbound, Queued, RecipientCopy, TooSlow};
use crate::gateway::requests::Requests;
use crate::gateway::subscriptions::ConnId;
use crate::telemetry::metrics::Metrics;
use crate::topics::Topics;

/// The edge's side of the decisions: each message offered to its
/// connection's queue at once (a connection starts writing while the core
/// is still fanning out), each bus command queued for the bus.
pub struct Handoff {
    outbounds: HashMap<ConnId, Outbound, BuildHasherDefault<IdHasher>>,
    /// Publications and subscription changes decided and not yet taken by
    /// the bus, in order. The bus drains this as it can.
    pub(super) to_bus: VecDeque<BusCommand>,
    metrics: Metrics,
    /// `gateway.max_outbound_bytes`, which every queue counts in.
    global: Arc<Budget>,
    /// Queues of connections closed for `global` whose bytes are not yet
    /// given back (their connections are still closing).
    doomed: Vec<Arc<Account>>,
    /// During a turn (`holding`), the frames decided so far (see
    /// [`Dispatcher::turn`]).
    holding: bool,
    held: Vec<(ConnId, Frame)>,
}

/// Frames held in a turn beyond which they are offered at once: a turn's
/// fan-out to many consumers waits in a bounded buffer, not beside the
/// queues' budgets.
const HELD: usize = 1024;

/// Connection IDs are handed out in sequence, not chosen by peers: a
/// multiplication spreads them over the table (its high bits too, which the
/// table's probes compare), and SipHash of each recipient's ID, twice per
/// copy, was 1 % of a WebSocket fan-out's CPU.
#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, id: u64) {
        // 2^64 / the golden ratio.
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Decisions for Handoff {
    fn send(&mut self, conn: ConnId, text: String) {
        self.offer(conn, text.into());
    }

    fn send_copy(&mut self, conn: ConnId, copy: RecipientCopy) {
        self.offer(conn, Frame::Copy(copy));
    }

    fn send_chunk(&mut self, conn: ConnId, text: String) {
        self.offer(conn, Frame::Chunk(text.into()));
    }

    fn bus(&mut self, command: BusCommand) {
        self.to_bus.push_back(command);
    }
}

impl Handoff {
    /// Holds what the core decides until [`Handoff::release`].
    fn hold(&mut self) {
        self.holding = true;
    }

    /// Offers what was held, connection by connection, each one's in the
    /// order decided, and holds no more.
    fn release(&mut self) {
        self.holding = false;
        self.offer_held();
    }

    /// Offers what is held. The buffer is kept for the next turn.
    fn offer_held(&mut self) {
        let mut held = std::mem::take(&mut self.held);
        // Stable: each connection's frames keep their order.
        held.sort_by_key(|(conn, _)| *conn);
        // One clock read for all the queues' stall checks.
        let now = self.global.now_ms();
        let mut frames = held.drain(..);
        while let Some((conn, first)) = frames.next() {
            let run = 1 + frames
                .as_slice()
                .iter()
                .take_while(|(c, _)| *c == conn)
                .count();
            let mut batch = Vec::with_capacity(run);
            batch.push(Queued::new(first));
            batch.extend(frames.by_ref().take(run - 1).map(|(_, f)| Queued::new(f)));
            self.offer_now(conn, batch, now);
        }
        drop(frames);
        self.held = held;
    }

    fn offer(&mut self, conn: ConnId, frame: Frame) {
        if !self.holding {
            let now = self.global.now_ms();
            return self.offer_now(conn, vec![Queued::new(frame)], now);
        }
        self.held.push((conn, frame));
        if self.held.len() >= HELD {
            self.offer_held();
        }
    }

    /// Offers a connection its frames, in order; `now` on the budget's clock.
    fn offer_now(&mut self, conn: ConnId, batch: Vec<Queued>, now: u64) {
        let bytes = batch.iter().map(Queued::bytes).sum();
        if self.global.would_exceed(bytes) {
            self.shed(bytes);
        }
        let Some(outbound) = self.outbounds.get(&conn) else {
            // Gone, or it was the slowest.
            return;
        };
        let offered = outbound.offer_batch(batch, now);
        for _ in 0..offered.dropped {
            self.metrics.dropped("slow_consumer");
        }
        match offered.end {
            None | Some(Offer::Queued | Offer::Dropped) => {}
            // The connection closes itself and deregisters; stop offering now.
            Some(Offer::Disconnected) => {
                self.metrics.dropped("slow_consumer_disconnected");
                self.outbounds.remove(&conn);
            }
            Some(Offer::Closed) => {
                self.outbounds.remove(&conn);
            }
        }
    }

    /// `gateway.max_outbound_bytes` is reached: closes the slowest
    /// consumers (of those with bytes queued, the ones whose queue has not
    /// moved for longest; the most queued first among equals) until
    /// `bytes` more fit, counting what the ones already closing will give
    /// back. Not the most queued alone: a consumer that reads may hold a
    /// burst for a moment while the paused ones' first megabytes sit in
    /// their sockets. Closed under either `slow_consumer` policy: dropping
    /// new messages would free none of what is queued.
    fn shed(&mut self, bytes: usize) {
        self.doomed
            .retain(|a| Arc::strong_count(a) > 1 && a.queued() > 0);
        let mut leaving: usize = self.doomed.iter().map(|a| a.queued()).sum();
        let limit = self.global.limit();
        while self
            .global
            .used()
            .saturating_sub(leaving)
            .saturating_add(bytes)
            > limit
        {
            let slowest = self
                .outbounds
                .iter()
                .map(|(conn, out)| (*conn, out.account()))
                .filter(|(_, account)| account.queued() > 0 && account.sheddable())
                .min_by_key(|(_, a)| (a.last_taken(), std::cmp::Reverse(a.queued())))
                .map(|(conn, account)| (conn, account.queued()));
            let Some((conn, queued)) = slowest else {
                break;
            };
            let out = self.outbounds.remove(&conn).expect("found");
            out.disconnect(TooSlow::Budget);
            self.doomed.push(out.account().clone());
            leaving += queued;
            self.global.hit();
            self.metrics.dropped("slow_consumer_disconnected");
        }
    }
}

/// The I/O edge around the [`Core`]: the connections' queues and the bus.
/// Its loop feeds the core one input at a time; the core's decisions go
/// out through the [`Handoff`] without waiting (see [`Dispatcher::run`]).
pub struct Dispatcher {
    pub(super) core: Core<Handoff>,
    pub(super) bus: Bus,
    commands: mpsc::Receiver<Command>,
    pub(super) deliveries: mpsc::Receiver<Delivery>,
    /// What the history and the invocation records are written to: past
    /// `store.max_queued_bytes` the loop takes no more input until the
    /// writer made room (a put never waits on a tokio worker).
    store: crate::store::Store,
}

/// Commands queued for the bus beyond which the dispatcher stops taking the
/// connections' commands until the bus catches up (backpressure, as when it
/// awaited each publication).
const BUS_BACKLOG: usize = 1024;

/// Deliveries taken in one turn at most (see [`Dispatcher::turn`]).
const TURN: usize = 64;

impl Dispatcher {
    pub fn new(
        bus: Bus,
        topics: Topics,
        requests: Requests,
        services: Services,
        commands: mpsc::Receiver<Command>,
        deliveries: mpsc::Receiver<Delivery>,
    ) -> Dispatcher {
        let handoff = Handoff {
            outbounds: HashMap::default(),
            to_bus: VecDeque::new(),
            metrics: services.metrics.clone(),
            global: services.budgets.outbound.clone(),
            doomed: Vec::new(),
            holding: false,
            held: Vec::new(),
        };
        Dispatcher {
            core: Core::new(topics, requests, services, handoff)
                .with_barrier(bus.barrier_topic().cloned()),
            bus,
            commands,
            deliveries,
            store: crate::store::Store::memory(),
        }
    }

    pub fn with_store(mut self, store: crate::store::Store) -> Dispatcher {
        self.store = store;
        self
    }

    /// Runs until `shutdown`; then answers every request still waiting
    /// (503) and cancels `closing`, so connections close after that.
    pub async fn run(mut self, shutdown: CancellationToken, closing: CancellationToken) {
        // Its own handle, so that waiting for room on the bus borrows
        // nothing the other branches change.
        let bus = self.bus.clone();
        loop {
            if !self.store.has_room() {
                // Boxed: rare, and its wait would take room in the loop.
                Box::pin(self.store.room()).await;
            }
            let expiry = self.core.history.next_expiry();
            tokio::select! {
                _ = shutdown.cancelled() => {
                    self.core.on_shutdown();
                    // The 503s to MQTT consumers go out before connections
                    // are told to close.
                    self.flush_bus().await;
                    closing.cancel();
                    return;
                }
                // The bus takes what is queued for it as fast as it can;
                // the loop never waits on it anywhere else.
                permit = bus.reserve(), if !self.core.out.to_bus.is_empty() => match permit {
                    Ok(permit) => self.feed_bus(permit),
                    Err(_) => self.bus_closed(),
                },
                // A bus that falls behind slows the connections' commands
                // down, never the deliveries (which would stall the broker's
                // side of the bus).
                command = self.commands.recv(), if self.core.out.to_bus.len() < BUS_BACKLOG => match command {
                    Some(command) => self.command(command),
                    None => return,
                },
                delivery = self.deliveries.recv() => match delivery {
                    Some(delivery) => {
                        self.turn(delivery);
                        // The connections' tasks, woken by the turn, write
                        // before the next one: under a flood they would
                        // otherwise fall behind a dispatcher that never
                        // stops, and be closed as slow.
                        tokio::task::yield_now().await;
                    }
                    None => {
                        warn!("The message bus closed; the gateway stops delivering.");
                        return;
                    }
                },
                Some(effects) = self.core.requests.next_timeout(), if self.core.requests.has_timers() => {
                    self.core.on_timeout(effects);
                }
                _ = sleep_until(expiry), if expiry.is_some() => {
                    self.core.on_history_expiry(Instant::now());
                }
            }
        }
    }

    /// A turn: `first` and the deliveries already waiting behind it (at
    /// most [`TURN`] in all), their frames offered to the connections'
    /// queues at the end, each connection's together, and the history's
    /// entries put in the store together. Offered one by one, every copy
    /// woke its connection to write one or two frames: a flush, a system
    /// call and a wake-up of the consumer each.
    pub(super) fn turn(&mut self, first: Delivery) {
        self.turn_of(first, TURN);
    }

    /// A turn of one delivery.
    pub(super) fn delivery(&mut self, delivery: Delivery) {
        self.turn_of(delivery, 1);
    }

    /// A turn of `first` and at most `most - 1` deliveries waiting behind it.
    fn turn_of(&mut self, first: Delivery, most: usize) {
        self.core.out.hold();
        self.core.on_delivery(first);
        for _ in 1..most {
            let Ok(delivery) = self.deliveries.try_recv() else {
                break;
            };
            self.core.on_delivery(delivery);
        }
        self.core.end_turn();
        self.core.out.release();
    }

    /// A connection's command; the edge keeps its outbound queue.
    pub(super) fn command(&mut self, command: Command) {
        match command {
            Command::Register {
                conn,
                outbound,
                principal,
            } => {
                self.core.out.outbounds.insert(conn, outbound);
                self.core.register(conn, &principal);
            }
            Command::Deregister { conn } => {
                self.core.out.outbounds.remove(&conn);
                self.core.on_command(Command::Deregister { conn });
            }
            command => self.core.on_command(command),
        }
    }
}

/// Sleeps until `at`; never polled when there is none.
fn sleep_until(at: Option<Instant>) -> tokio::time::Sleep {
    let at = at.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std);
    tokio::time::sleep_until(at)
}
