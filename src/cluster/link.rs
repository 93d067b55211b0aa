//! One MQTT session of the bridge, driven in a task of its own.
//!
//! rumqttc's `EventLoop::poll` is not cancel-safe: it takes a request (or a
//! packet needing an acknowledgement) and then awaits the socket write, so a
//! `select!` that drops it half-way loses a PUBACK or a PUBLISH until the
//! next reconnection (bytebeamio/rumqtt#930). Each session's loop therefore
//! runs uninterrupted here and hands what matters to the bridge over a
//! bounded channel (a bridge that stops reading stops the loop, which stops
//! reading its socket: backpressure). Reconnection is the link's business:
//! a doubling wait, and the next node each time.

use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, Publish};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// How long a publication may wait for its acknowledgement before the
/// session is deemed stuck and started again.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Events for the bridge; enough of them that it can retry what it holds.
#[derive(Debug)]
pub enum LinkEvent {
    Connected {
        node: String,
        session_present: bool,
        /// Not the first connection.
        again: bool,
    },
    Subscribed,
    Message(Publish),
    /// A publication was acknowledged: room for more.
    Acked,
    /// The session broke; the link retries after `retry`. `first`: the
    /// first failure since the link was last up (or since it started).
    Lost {
        error: String,
        retry: Duration,
        first: bool,
    },
}

pub struct Link {
    pub client: AsyncClient,
    pub events: mpsc::Receiver<LinkEvent>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn node_name(options: &MqttOptions) -> String {
    let (host, port) = options.broker_address();
    format!("{host}:{port}")
}

impl Link {
    /// Connects to `nodes[0]`, then to the next node at each failure.
    /// `capacity` bounds the client's request queue.
    pub fn start(
        nodes: Vec<MqttOptions>,
        capacity: usize,
        reconnect_max: Duration,
        nodelay: bool,
    ) -> Link {
        assert!(!nodes.is_empty(), "a link needs a node");
        let (client, mut eventloop) = AsyncClient::new(nodes[0].clone(), capacity);
        if nodelay {
            eventloop.network_options.set_tcp_nodelay(true);
        }
        let (tx, events) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            drive(eventloop, nodes, reconnect_max, tx, stop.clone()).in_current_span(),
        );
        Link {
            client,
            events,
            stop,
            task,
        }
    }

    /// Says goodbye (DISCONNECT) within `grace`, then stops.
    pub async fn close(self, grace: Duration) {
        let _ = self.client.try_disconnect();
        let mut task = self.task;
        // The loop ends once the DISCONNECT is out, or fails to go.
        let mut events = self.events;
        let drain = async { while events.recv().await.is_some() {} };
        if tokio::time::timeout(grace, drain).await.is_err() {
            self.stop.cancel();
        }
        let _ = (&mut task).await;
    }
}

async fn drive(
    mut eventloop: EventLoop,
    nodes: Vec<MqttOptions>,
    reconnect_max: Duration,
    tx: mpsc::Sender<LinkEvent>,
    stop: CancellationToken,
) {
    let mut node = 0;
    let mut backoff = FIRST_BACKOFF;
    let mut connected_once = false;
    let mut up = false;
    // Publications sent and not yet acknowledged, and when the last
    // acknowledgement (or the connection) came.
    let mut awaiting: u64 = 0;
    let mut progress = Instant::now();
    loop {
        let stalled = progress + ACK_TIMEOUT;
        let event = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            event = eventloop.poll() => event.map_err(|e| e.to_string()),
            // A cluster node may keep a connection (and answer pings) while
            // it cannot store what it is sent: NATS was seen to stop
            // acknowledging for good after its JetStream timed out. The
            // connection is dropped and everything unacknowledged goes
            // again (this is the one place poll is cancelled: whatever it
            // was sending is either unacknowledged, so sent again, or an
            // acknowledgement, whose message the broker sends again).
            _ = tokio::time::sleep_until(stalled.into()), if awaiting > 0 && up => {
                eventloop.clean();
                Err(format!(
                    "{awaiting} publications unacknowledged for {} s",
                    ACK_TIMEOUT.as_secs()
                ))
            }
        };
        match &event {
            Ok(Event::Outgoing(Outgoing::Publish(_))) => awaiting += 1,
            Ok(Event::Incoming(Packet::PubAck(_))) => {
                awaiting = awaiting.saturating_sub(1);
                progress = Instant::now();
            }
            _ => {}
        }
        let out = match event {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                // What is resent is counted again as it goes out.
                awaiting = 0;
                progress = Instant::now();
                backoff = FIRST_BACKOFF;
                let again = connected_once;
                connected_once = true;
                up = true;
                LinkEvent::Connected {
                    node: node_name(&eventloop.mqtt_options),
                    session_present: ack.session_present,
                    again,
                }
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => LinkEvent::Subscribed,
            Ok(Event::Incoming(Packet::Publish(p))) => LinkEvent::Message(p),
            Ok(Event::Incoming(Packet::PubAck(_))) => LinkEvent::Acked,
            Ok(Event::Outgoing(Outgoing::Disconnect)) => return,
            Ok(_) => continue,
            Err(e) => {
                let first = up || !connected_once;
                up = false;
                let lost = LinkEvent::Lost {
                    error: e,
                    retry: backoff,
                    first,
                };
                if tx.send(lost).await.is_err() {
                    return;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                // Unacknowledged QoS 1 messages stay with the event loop and
                // go again to whichever node answers next.
                if nodes.len() > 1 {
                    node = (node + 1) % nodes.len();
                    eventloop.mqtt_options = nodes[node].clone();
                    // A round of nodes at the same wait, then longer.
                    if node == 0 {
                        backoff = (backoff * 2).min(reconnect_max);
                    }
                } else {
                    backoff = (backoff * 2).min(reconnect_max);
                }
                continue;
            }
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}
