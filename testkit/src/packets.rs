//! rumqttc clients, MQTT 3.1.1 ([`v4`]) and 5 ([`v5`]), that hand the test
//! every packet the broker sends (SUBACK codes, PUBACK reasons, refusals at
//! CONNECT), where [`crate::MqttClient`] keeps to publications and waits.
//! One event loop driver and one packet stash serve both versions.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::WAIT;

/// A rumqttc event loop of either version, as [`Packets`] drives it.
pub trait EventLoop: Send + 'static {
    type Packet: Send + 'static;
    type Error;

    /// The next event: an incoming packet, or `None` for any other.
    fn incoming(
        &mut self,
    ) -> impl Future<Output = Result<Option<Self::Packet>, Self::Error>> + Send;

    fn is_connack(packet: &Self::Packet) -> bool;
}

impl EventLoop for rumqttc::EventLoop {
    type Packet = rumqttc::Packet;
    type Error = rumqttc::ConnectionError;

    async fn incoming(&mut self) -> Result<Option<rumqttc::Packet>, rumqttc::ConnectionError> {
        Ok(match self.poll().await? {
            rumqttc::Event::Incoming(p) => Some(p),
            rumqttc::Event::Outgoing(_) => None,
        })
    }

    fn is_connack(packet: &rumqttc::Packet) -> bool {
        matches!(packet, rumqttc::Packet::ConnAck(_))
    }
}

impl EventLoop for rumqttc::v5::EventLoop {
    type Packet = rumqttc::v5::mqttbytes::v5::Packet;
    type Error = rumqttc::v5::ConnectionError;

    async fn incoming(&mut self) -> Result<Option<Self::Packet>, rumqttc::v5::ConnectionError> {
        Ok(match self.poll().await? {
            rumqttc::v5::Event::Incoming(p) => Some(p),
            rumqttc::v5::Event::Outgoing(_) => None,
        })
    }

    fn is_connack(packet: &Self::Packet) -> bool {
        matches!(packet, rumqttc::v5::mqttbytes::v5::Packet::ConnAck(_))
    }
}

/// What the broker sent a connected client, packet by packet; dropping it
/// drops the socket without DISCONNECT.
pub struct Packets<P> {
    pub events: mpsc::UnboundedReceiver<P>,
    stash: VecDeque<P>,
    task: JoinHandle<()>,
}

impl<P> Drop for Packets<P> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<P: Send + 'static> Packets<P> {
    /// Polls `eventloop` up to the CONNACK (an error before it is the
    /// connection's: a refusal, say), then drives it in a task of its own.
    pub async fn connect<L>(mut eventloop: L) -> Result<Packets<P>, L::Error>
    where
        L: EventLoop<Packet = P>,
    {
        loop {
            let incoming = tokio::time::timeout(WAIT, eventloop.incoming())
                .await
                .expect("CONNACK in time")?;
            if incoming.as_ref().is_some_and(L::is_connack) {
                break;
            }
        }
        let (tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok(incoming) = eventloop.incoming().await {
                if let Some(p) = incoming {
                    let _ = tx.send(p);
                }
            }
        });
        Ok(Packets {
            events,
            stash: VecDeque::new(),
            task,
        })
    }

    /// The first packet `pick` takes; the others stay for later.
    pub async fn next<T>(&mut self, pick: impl Fn(&P) -> Option<T>) -> T {
        if let Some((i, t)) = self
            .stash
            .iter()
            .enumerate()
            .find_map(|(i, p)| Some((i, pick(p)?)))
        {
            self.stash.remove(i);
            return t;
        }
        loop {
            let p = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("packet in time")
                .expect("client alive");
            match pick(&p) {
                Some(t) => return t,
                None => self.stash.push_back(p),
            }
        }
    }
}

/// MQTT 3.1.1.
pub mod v4 {
    use super::*;
    pub use rumqttc::{
        ConnectReturnCode, ConnectionError, Event, MqttOptions, Packet, QoS, SubscribeFilter,
        SubscribeReasonCode,
    };

    /// A connected client; what the broker sends is in `packets`.
    pub struct Client {
        pub client: rumqttc::AsyncClient,
        pub packets: Packets<Packet>,
    }

    pub fn options(addr: SocketAddr, id: &str, user: &str, password: &str) -> MqttOptions {
        let mut o = MqttOptions::new(id, addr.ip().to_string(), addr.port());
        o.set_keep_alive(Duration::from_secs(30));
        o.set_credentials(user, password);
        o
    }

    pub async fn try_connect(options: MqttOptions) -> Result<Client, ConnectionError> {
        let (client, eventloop) = rumqttc::AsyncClient::new(options, 100);
        let packets = Packets::connect(eventloop).await?;
        Ok(Client { client, packets })
    }

    impl Client {
        /// See [`Packets::next`].
        pub async fn next<T>(&mut self, pick: impl Fn(&Packet) -> Option<T>) -> T {
            self.packets.next(pick).await
        }

        /// At QoS 1; the SUBACK's codes.
        pub async fn subscribe(&mut self, filters: &[&str]) -> Vec<SubscribeReasonCode> {
            let filters = filters
                .iter()
                .map(|f| SubscribeFilter::new(f.to_string(), QoS::AtLeastOnce));
            self.client.subscribe_many(filters).await.unwrap();
            self.next(|p| match p {
                Packet::SubAck(a) => Some(a.return_codes.clone()),
                _ => None,
            })
            .await
        }

        /// QoS 1, waits for the PUBACK.
        pub async fn publish(&mut self, topic: &str, payload: &str) {
            self.client
                .publish(topic, QoS::AtLeastOnce, false, payload.to_owned())
                .await
                .unwrap();
            self.next(|p| matches!(p, Packet::PubAck(_)).then_some(()))
                .await;
        }

        /// The next publication: topic and payload.
        pub async fn received(&mut self) -> (String, String) {
            self.next(|p| match p {
                Packet::Publish(p) => Some((
                    p.topic.clone(),
                    String::from_utf8_lossy(&p.payload).into_owned(),
                )),
                _ => None,
            })
            .await
        }
    }
}

/// MQTT 5.
pub mod v5 {
    use super::*;
    pub use rumqttc::v5::mqttbytes::v5::{
        ConnectReturnCode, Filter, Packet, PubAckReason, SubscribeReasonCode,
    };
    pub use rumqttc::v5::mqttbytes::QoS;
    pub use rumqttc::v5::{ConnectionError, Event, MqttOptions};

    /// A connected client; what the broker sends is in `packets`.
    pub struct Client {
        pub client: rumqttc::v5::AsyncClient,
        pub packets: Packets<Packet>,
    }

    pub fn options(addr: SocketAddr, id: &str, user: &str, password: &str) -> MqttOptions {
        let mut o = MqttOptions::new(id, addr.ip().to_string(), addr.port());
        o.set_keep_alive(Duration::from_secs(30));
        o.set_credentials(user, password);
        o
    }

    pub async fn try_connect(options: MqttOptions) -> Result<Client, ConnectionError> {
        let (client, eventloop) = rumqttc::v5::AsyncClient::new(options, 100);
        let packets = Packets::connect(eventloop).await?;
        Ok(Client { client, packets })
    }

    impl Client {
        /// See [`Packets::next`].
        pub async fn next<T>(&mut self, pick: impl Fn(&Packet) -> Option<T>) -> T {
            self.packets.next(pick).await
        }

        /// At QoS 1; the SUBACK's codes.
        pub async fn subscribe(&mut self, filters: &[&str]) -> Vec<SubscribeReasonCode> {
            let filters = filters
                .iter()
                .map(|f| Filter::new(f.to_string(), QoS::AtLeastOnce));
            self.client.subscribe_many(filters).await.unwrap();
            self.next(|p| match p {
                Packet::SubAck(a) => Some(a.return_codes.clone()),
                _ => None,
            })
            .await
        }

        /// QoS 1; the PUBACK's reason.
        pub async fn publish(&mut self, topic: &str, payload: &str) -> PubAckReason {
            self.client
                .publish(topic, QoS::AtLeastOnce, false, payload.to_owned())
                .await
                .unwrap();
            self.next(|p| match p {
                Packet::PubAck(a) => Some(a.reason),
                _ => None,
            })
            .await
        }

        /// The next publication: topic and payload.
        pub async fn received(&mut self) -> (String, String) {
            self.next(|p| match p {
                Packet::Publish(p) => Some((
                    String::from_utf8_lossy(&p.topic).into_owned(),
                    String::from_utf8_lossy(&p.payload).into_owned(),
                )),
                _ => None,
            })
            .await
        }
    }
}
