//! An established connection: its two pumps ([`super::relay`]) and what
//! they share, run until either side closes, the session is handed over or
//! the sidecar shuts down. Everything here is held in the connection's
//! task for as long as the client stays, so it is kept small (issue 32):
//! what is rare is boxed when it happens.

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::{debug, Instrument};

use super::bell::Bell;
use super::connection::{close_client, lock, session_ends, End, FAREWELL};
use super::delivery::{ClientLimits, Delivery, Undelivered};
use super::downstream::Downstream;
use super::handshake::{self, Offer};
use super::inspect::Inspector;
use super::packet;
use super::relay::{ClientStream, Outbox};
use super::sessions::{AfterClose, Asked, Expiry, Handover, Opened};
use super::{Session, Shared};
use crate::broker::engine::{EngineRx, EngineTx};

/// At shutdown, what the broker already sent (replies the sidecar published
/// while stopping) still goes out: the connection closes once the broker
/// has been quiet this long, or after `DRAIN` at the latest.
const QUIET: Duration = Duration::from_millis(200);
/// How long a connection asked to hand its client ID over keeps reading
/// what its client sent before (a DISCONNECT already in the socket takes
/// microseconds).
const HANDOVER_DRAIN: Duration = Duration::from_millis(20);
const DRAIN: Duration = Duration::from_secs(2);

/// What the two pumps share: the counters one changes and the other
/// reads, the delivery state, and the guard's own packets for the client.
/// Held in the connection's task.
pub(super) struct Between {
    /// PINGREQs the guard sent whose PINGRESP the client must not see.
    pub(super) guard_pings: AtomicU32,
    /// The client's QoS 1 and 2 publications the broker has not yet
    /// acknowledged (PUBACK, PUBCOMP): at most the Receive Maximum the
    /// CONNACK announced.
    pub(super) unacked: AtomicU32,
    /// What is on its way to the client; its acknowledgements change it.
    pub(super) delivery: Mutex<Delivery>,
    /// Wakes the client-to-broker pump to write what [`Delivery`] owes the
    /// broker.
    pub(super) owed: Bell,
    pub(super) outbox: Outbox,
    /// The store's mark as each packet awaiting an acknowledgement went
    /// to the broker ([`super::stored`]); only with a durable store.
    pub(super) marks: Mutex<super::stored::Marks>,
}

impl Between {
    pub(super) fn new(version: packet::Version, limits: ClientLimits) -> Between {
        Between {
            guard_pings: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            delivery: Mutex::new(Delivery::new(version, limits)),
            owed: Bell::default(),
            outbox: Outbox::default(),
            marks: Mutex::default(),
        }
    }

    pub(super) fn marks(&self) -> std::sync::MutexGuard<'_, super::stored::Marks> {
        // Two integers per entry: a panic leaves them consistent.
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The delivery state (see [`lock`]).
    pub(super) fn delivery(&self) -> std::sync::MutexGuard<'_, Delivery> {
        lock(&self.delivery)
    }
}

/// An established connection: its session open in rumqttd, what its
/// CONNECT asked for, both sides' halves. Held in the connection's task
/// while it lasts.
pub(super) struct Live<S: ClientStream> {
    pub(super) shared: Arc<Shared>,
    pub(super) client_rx: S::Rx,
    pub(super) client_tx: S::Tx,
    pub(super) socket: RawFd,
    /// What the client sent after its CONNECT, not yet inspected.
    pub(super) inbound: BytesMut,
    /// The connection's place under `mqtt.max_connections`.
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) version: packet::Version,
    pub(super) client_id: String,
    pub(super) up_rx: EngineRx,
    pub(super) up_tx: EngineTx,
    pub(super) opened: Opened,
    pub(super) asked: handshake::Asked,
    /// The client has no keep-alive: the guard pings the broker on its
    /// behalf (a flag, not a period: every idle client's task holds it).
    pub(super) pings: bool,
    pub(super) offer: Offer,
}

/// How the pumps left the session.
pub(super) struct Ended {
    end: End,
    /// Set at DISCONNECT (see [`Inspector`]).
    after_close: Option<AfterClose>,
    expiry: Expiry,
}

impl<S: ClientStream> Live<S> {
    /// Runs the two pumps until the connection ends.
    pub(super) async fn serve(&mut self, session: Box<dyn Session>) -> Ended {
        let shared = &*self.shared;
        let between = Between::new(self.version, self.asked.limits);
        let mut inspector = Inspector {
            version: self.version,
            session,
            shared,
            aliases: Default::default(),
            subscriptions: self.opened.filters.clone(),
            denied_qos2: Default::default(),
            pending: Vec::new(),
            pings: self.pings,
            between: &between,
            client_id: &self.client_id,
            generation: self.opened.generation,
            expiry: self.asked.expiry,
            after_close: None,
            prepare_first: false,
            order: Default::default(),
            last_publish: None,
            over_logged: false,
        };
        let durable = shared.store.is_durable();
        let mut downstream = Downstream::new(self.version, &between, durable, self.offer);
        let relayed = AtomicU64::new(0);
        let end = {
            let inbound = &mut self.inbound;
            let client_rx = &mut self.client_rx;
            let inbound_pump = inspector.pump(client_rx, self.socket, &mut self.up_tx, inbound);
            let upstream = (&mut self.up_rx, &shared.store);
            let outbound_pump = downstream.relay(upstream, &mut self.client_tx, &relayed);
            let mut pumps = Pumps {
                inbound: std::pin::pin!(inbound_pump),
                outbound: std::pin::pin!(outbound_pump),
                relayed: &relayed,
            };
            pumps.until_end(&self.opened.handover).await
        };
        log_undelivered(between.delivery().undelivered);
        Ended {
            end,
            after_close: inspector.after_close.take(),
            expiry: inspector.expiry,
        }
    }

    /// The session's fate, then the client's side closed; in a log span
    /// naming the client ID when the connection had a span of its own
    /// (see `Connection::admitted`).
    pub(super) async fn finish(self, ended: Ended, logged: bool) {
        let span = match logged {
            true => tracing::debug_span!("mqtt_connection", client_id = self.client_id.as_str()),
            false => tracing::Span::none(),
        };
        self.closed(ended).instrument(span).await;
    }

    async fn closed(mut self, ended: Ended) {
        let Ended {
            end,
            after_close,
            expiry,
        } = ended;
        let (shared, client_id) = (&self.shared, &self.client_id);
        session_ends(shared, client_id, &self.opened, after_close, expiry, end);
        // Its will is published or dropped now (issue 43).
        shared.keeps.wills.release(self.socket);
        debug!(?end, "MQTT connection closed.");
        close_client(end, &mut self.client_rx, &mut self.client_tx).await;
        drop(self.permit);
    }
}

/// The connection's two pumps, pinned in its task.
struct Pumps<'p, I, O> {
    inbound: Pin<&'p mut I>,
    outbound: Pin<&'p mut O>,
    /// Counts the writes of the broker-to-client pump.
    relayed: &'p AtomicU64,
}

impl<'p, I: Future<Output = End>, O: Future<Output = End>> Pumps<'p, I, O> {
    /// Runs both pumps until one side ends, the session is handed over or
    /// the sidecar shuts down, and says how it ended.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
    )]
    fn until_end<'u>(
        &'u mut self,
        handover: &'u Handover,
    ) -> impl Future<Output = End> + use<'u, 'p, I, O> {
        async move {
            let end = tokio::select! {
                // What the client sent before its next connection counts
                // first: a DISCONNECT already in the socket ends the session
                // as it says. A client still talking is cut off. At
                // shutdown the sessions ask every connection the same way.
                asked = handover.asked() => match asked {
                    Asked::HandOver => Box::pin(self.handed_over()).await,
                    Asked::Shutdown => Box::pin(self.drain()).await,
                },
                end = self.inbound.as_mut() => {
                    if end == End::Closing {
                        let _ = Box::pin(tokio::time::timeout(FAREWELL, self.outbound.as_mut())).await;
                    }
                    end
                }
                end = self.outbound.as_mut() => end,
            };
            // rumqttd closes the connection of a DISCONNECT itself; the guard
            // waits for that, as `probe::leave` explains why.
            if end == End::ClientDisconnected {
                let _ = Box::pin(tokio::time::timeout(FAREWELL, self.outbound.as_mut())).await;
            }
            end
        }
    }

    /// The next connection of the client ID asked for the session.
    async fn handed_over(&mut self) -> End {
        match tokio::time::timeout(HANDOVER_DRAIN, self.inbound.as_mut()).await {
            Ok(end) => end,
            Err(_) => End::TakenOver,
        }
    }

    /// At shutdown: what the broker still sends goes out until it has been
    /// quiet for a moment.
    async fn drain(&mut self) -> End {
        let deadline = Instant::now() + DRAIN;
        loop {
            let before = self.relayed.load(Ordering::Relaxed);
            let sent = tokio::time::timeout(QUIET, self.outbound.as_mut());
            let ended = sent.await.is_ok();
            let idle = self.relayed.load(Ordering::Relaxed) == before;
            if ended || idle || Instant::now() >= deadline {
                return End::Shutdown;
            }
        }
    }
}

fn log_undelivered(undelivered: Undelivered) {
    if undelivered != Undelivered::default() {
        debug!(
            expired = undelivered.expired,
            too_large = undelivered.too_large,
            "Publications this MQTT client did not get."
        );
    }
}
