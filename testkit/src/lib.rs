//! lmos-testkit: what the tests and benches of lmos-sidecar share, by what
//! it drives. This root: a real sidecar on ephemeral ports ([`TestSidecar`]),
//! real WebSocket and MQTT clients, LMOS message builders, HTTP, and bounded
//! waits (every wait fails the test after `WAIT`). Modules: [`mqtt5`] and
//! [`raw_mqtt`] (MQTT written byte by byte), [`otlp`] (a real OTLP
//! collector), [`process`] (the sidecar binary as a child process),
//! [`nats`] (a real NATS cluster), [`oidc`] (a real OpenID provider), [`cluster_scenarios`] (the cluster tests
//! both cluster modes run), [`upstreams`] (MCP servers and A2A agents for a
//! sidecar to import, their `[[imports.*]]` entries), [`weather_agent`] (the
//! draft's WeatherAgent), [`tck_agent`] (the A2A TCK's scripted agent),
//! [`bench`] (the benches' clock, settings and tallies); [`alone`] and
//! [`CapturedLogs`] for tests that observe the whole process.

pub mod bench;
pub mod cluster_scenarios;
mod events;
pub mod jwt;
mod logs;
pub mod mqtt5;
pub mod mqtt_ws;
pub mod mtls;
pub mod nats;
pub mod oidc;
pub mod otlp;
pub mod packets;
mod parties;
pub mod process;
pub mod raw_mqtt;
pub mod tck_agent;
pub mod tools;
pub mod upstreams;
pub mod weather_agent;
pub mod webdriver;

pub use events::message_ids;
pub use logs::{alone, CapturedLogs};
pub use parties::Parties;
pub use tools::python;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use lmos_sidecar::{Application, Config};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Longest any single expected thing may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TestSidecar {
    pub http: SocketAddr,
    pub mqtt: SocketAddr,
    pub mqtt5: SocketAddr,
    /// rumqttd's own listener behind the guard, to reach the engine as a
    /// client the guard would have stopped.
    pub broker: SocketAddr,
    pub gateway: lmos_sidecar::gateway::Gateway,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

pub fn test_config() -> Config {
    let mut c = Config::default();
    c.mqtt.listen = "127.0.0.1:0".parse().unwrap();
    c.mqtt.listen_v5 = "127.0.0.1:0".parse().unwrap();
    c.http.listen = "127.0.0.1:0".parse().unwrap();
    c.sidecar.thing_id = "urn:lmos:test-sidecar".into();
    c.sidecar.shutdown_grace_ms = 2_000;
    // Tests that keep state across a restart choose a directory of their own.
    c.store.memory_only = true;
    c
}

impl TestSidecar {
    pub async fn start() -> TestSidecar {
        TestSidecar::start_with(test_config()).await
    }

    pub async fn start_with(config: Config) -> TestSidecar {
        let app = Application::build(config).await.expect("sidecar starts");
        TestSidecar::run(app)
    }

    /// With tracing chosen by the test (e.g. an in-memory exporter).
    pub async fn start_traced(
        config: Config,
        tracing: lmos_sidecar::telemetry::Tracing,
    ) -> TestSidecar {
        let listener = tokio::net::TcpListener::bind(config.http.listen)
            .await
            .unwrap();
        let app = Application::with_parts(config, listener, tracing)
            .await
            .expect("sidecar starts");
        TestSidecar::run(app)
    }

    fn run(app: Application) -> TestSidecar {
        let (http, mqtt, mqtt5) = (app.http_addr(), app.mqtt_addr(), app.mqtt5_addr());
        let broker = app.broker_addr();
        let gateway = app.gateway();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));
        TestSidecar {
            http,
            mqtt,
            mqtt5,
            broker,
            gateway,
            stop: Some(stop),
            task,
        }
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/lmos", self.http)
    }

    pub async fn ws(&self) -> WsClient {
        WsClient::connect(&self.ws_url()).await
    }

    /// A WebSocket agent hosting `thing`.
    pub async fn ws_agent(&self, thing: &str) -> WsClient {
        let url = format!("{}?host={}", self.ws_url(), urlencode(thing));
        WsClient::connect(&url).await
    }

    pub async fn mqtt(&self, client_id: &str) -> MqttClient {
        MqttClient::connect(self.mqtt, client_id).await
    }

    /// Waits for `run` to return without being asked to stop.
    pub async fn ended(mut self) -> std::io::Result<()> {
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("sidecar stops in time")
            .unwrap()
    }

    /// Triggers shutdown and waits for `run` to return.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("sidecar stops in time")
            .unwrap()
            .unwrap();
    }
}

pub type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub struct WsClient {
    pub stream: WsStream,
    /// Messages read while waiting for something else.
    pending: VecDeque<Value>,
}

pub fn ws_request(
    url: &str,
    subprotocol: Option<&str>,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut request = url.into_client_request().unwrap();
    if let Some(p) = subprotocol {
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
    }
    request
}

impl WsClient {
    /// A handshake with the request given (e.g. with an `Authorization`
    /// header); `Err` carries the HTTP status of a refusal.
    pub async fn connect_request(
        request: tokio_tungstenite::tungstenite::handshake::client::Request,
    ) -> Result<WsClient, u16> {
        use tokio_tungstenite::tungstenite::Error;
        match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("handshake in time")
        {
            Ok((stream, _)) => Ok(WsClient {
                stream,
                pending: VecDeque::new(),
            }),
            Err(Error::Http(response)) => Err(response.status().as_u16()),
            Err(e) => panic!("handshake failed without an HTTP answer: {e}"),
        }
    }

    /// A client on a connection the test made itself (e.g. a socket with
    /// a small receive buffer).
    pub fn from_stream(stream: WsStream) -> WsClient {
        WsClient {
            stream,
            pending: VecDeque::new(),
        }
    }

    pub async fn connect(url: &str) -> WsClient {
        let (stream, response) = tokio::time::timeout(
            WAIT,
            tokio_tungstenite::connect_async(ws_request(url, Some("lmosprotocol"))),
        )
        .await
        .expect("handshake in time")
        .expect("handshake succeeds");
        assert_eq!(response.headers()["sec-websocket-protocol"], "lmosprotocol");
        WsClient {
            stream,
            pending: VecDeque::new(),
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(WsMessage::Text(message.to_string().into()))
            .await;
    }

    pub async fn send_raw(&mut self, message: WsMessage) {
        self.stream.send(message).await.expect("send");
    }

    async fn next_json(&mut self) -> Value {
        self.next_json_within(WAIT).await
    }

    async fn next_json_within(&mut self, wait: Duration) -> Value {
        match self.next_frame_within(wait).await {
            WsMessage::Text(t) => serde_json::from_str(&t).expect("the sidecar sends JSON"),
            other => panic!("unexpected frame {other:?}"),
        }
    }

    /// The next frame that is not a ping or pong.
    async fn next_frame_within(&mut self, wait: Duration) -> WsMessage {
        loop {
            let frame = tokio::time::timeout(wait, self.stream.next())
                .await
                .expect("a frame arrives in time")
                .expect("connection open")
                .expect("no protocol error");
            if !matches!(frame, WsMessage::Ping(_) | WsMessage::Pong(_)) {
                return frame;
            }
        }
    }

    /// The next frame as it came (text or binary), skipping pings: for
    /// binary stream chunks.
    pub async fn recv_frame(&mut self) -> WsMessage {
        assert!(
            self.pending.is_empty(),
            "messages read ahead: {:?}",
            self.pending
        );
        self.next_frame_within(WAIT).await
    }

    /// The next message, skipping barrier readings.
    pub async fn recv(&mut self) -> Value {
        self.recv_within(WAIT).await
    }

    /// As [`WsClient::recv`], waiting up to `wait` for each frame: for what
    /// may come late by design (JetStream redelivering after a node died).
    pub async fn recv_within(&mut self, wait: Duration) -> Value {
        if let Some(v) = self.pending.pop_front() {
            return v;
        }
        loop {
            let v = self.next_json_within(wait).await;
            if !is_barrier(&v) {
                return v;
            }
        }
    }

    /// Waits until every command this client sent before has been applied by
    /// the sidecar and its bus subscriptions are live. It publishes a retained
    /// reading on a fresh Thing and observes it: bus commands are ordered, so
    /// once the reading arrives, everything before it has taken effect.
    pub async fn barrier(&mut self) {
        let thing = format!("urn:barrier:{}", uuid::Uuid::new_v4());
        self.send(json!({"thingID": thing, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "propertyReading", "name": "barrier", "value": true, "timestamp": "2025-01-01T00:00:00Z"})).await;
        self.send(json!({"thingID": thing, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "observeProperty", "name": "barrier"})).await;
        loop {
            let v = self.next_json().await;
            if is_barrier(&v) && v["thingID"] == thing.as_str() {
                break;
            }
            if !is_barrier(&v) {
                self.pending.push_back(v);
            }
        }
        self.send(json!({"thingID": thing, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": "unobserveProperty", "name": "barrier"})).await;
    }

    /// Asserts nothing but barrier traffic arrives before the next barrier.
    pub async fn assert_nothing_pending(&mut self) {
        self.barrier().await;
        assert!(
            self.pending.is_empty(),
            "unexpected messages: {:?}",
            self.pending
        );
    }
}

fn is_barrier(v: &Value) -> bool {
    v["messageType"] == "propertyReading" && v["name"] == "barrier"
}

/// An MQTT 3.1.1 client whose received publishes arrive on a channel.
/// A rumqttc event loop driven in a task of its own: what the broker sends,
/// split by kind, for the test clients of this kit.
pub(crate) struct Driven {
    pub publishes: mpsc::UnboundedReceiver<rumqttc::Publish>,
    /// SUBACKs, PUBACKs and UNSUBACKs, for the calls that await them.
    pub acks: mpsc::UnboundedReceiver<Packet>,
    /// The first CONNACK.
    pub connack: oneshot::Receiver<rumqttc::ConnAck>,
    /// Why the loop ended (the error, or "disconnected").
    pub closed: mpsc::UnboundedReceiver<String>,
    pub task: JoinHandle<()>,
}

pub(crate) fn drive(mut eventloop: rumqttc::EventLoop) -> Driven {
    let (pub_tx, publishes) = mpsc::unbounded_channel();
    let (ack_tx, acks) = mpsc::unbounded_channel();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let (connack_tx, connack) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut connack_tx = Some(connack_tx);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(a))) => {
                    if let Some(tx) = connack_tx.take() {
                        let _ = tx.send(a);
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = pub_tx.send(p);
                }
                Ok(Event::Incoming(
                    p @ (Packet::SubAck(_) | Packet::PubAck(_) | Packet::UnsubAck(_)),
                )) => {
                    let _ = ack_tx.send(p);
                }
                Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) => {
                    let _ = closed_tx.send("disconnected".to_owned());
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = closed_tx.send(e.to_string());
                    return;
                }
            }
        }
    });
    Driven {
        publishes,
        acks,
        connack,
        closed,
        task,
    }
}

pub struct MqttClient {
    pub client: AsyncClient,
    /// What the CONNACK said.
    pub session_present: bool,
    pub publishes: mpsc::UnboundedReceiver<rumqttc::Publish>,
    acks: mpsc::UnboundedReceiver<Packet>,
    task: JoinHandle<()>,
}

/// An MQTT 3.1.1 CONNECT's refusal code, or `None` when it is accepted;
/// `configure` names the client, its credentials and session.
pub async fn mqtt_refusal(
    addr: SocketAddr,
    configure: impl FnOnce(&mut MqttOptions),
) -> Option<rumqttc::ConnectReturnCode> {
    let mut o = MqttOptions::new("unnamed", addr.ip().to_string(), addr.port());
    configure(&mut o);
    let (_client, mut eventloop) = AsyncClient::new(o, 10);
    loop {
        match tokio::time::timeout(WAIT, eventloop.poll())
            .await
            .expect("an answer in time")
        {
            Err(rumqttc::ConnectionError::ConnectionRefused(code)) => return Some(code),
            Ok(Event::Incoming(Packet::ConnAck(_))) => return None,
            Ok(_) => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

impl MqttClient {
    pub async fn connect(addr: SocketAddr, client_id: &str) -> MqttClient {
        MqttClient::connect_with(addr, client_id, |_| {}).await
    }

    /// Connects with a last will: `will` (JSON, retained) on `topic`.
    pub async fn connect_with_will(
        addr: SocketAddr,
        client_id: &str,
        topic: &str,
        will: Value,
    ) -> MqttClient {
        let will = rumqttc::LastWill::new(topic, will.to_string(), QoS::AtLeastOnce, true);
        MqttClient::connect_with(addr, client_id, move |o| {
            o.set_last_will(will);
        })
        .await
    }

    pub async fn connect_with(
        addr: SocketAddr,
        client_id: &str,
        configure: impl FnOnce(&mut MqttOptions),
    ) -> MqttClient {
        let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(4 * 1024 * 1024, 4 * 1024 * 1024);
        configure(&mut options);
        let (client, eventloop) = AsyncClient::new(options, 1000);
        let Driven {
            publishes,
            acks,
            connack,
            task,
            ..
        } = drive(eventloop);
        let connack = tokio::time::timeout(WAIT, connack)
            .await
            .expect("MQTT connects in time")
            .expect("MQTT connects");
        MqttClient {
            client,
            session_present: connack.session_present,
            publishes,
            acks,
            task,
        }
    }

    /// Connects not clean (MQTT 3.1.1 clean session off): the broker keeps
    /// the session, its subscriptions and what is queued for it.
    pub async fn connect_kept(addr: SocketAddr, client_id: &str) -> MqttClient {
        MqttClient::connect_with(addr, client_id, |o| {
            o.set_clean_session(false);
        })
        .await
    }

    /// Connects with a principal's name and password; `will`: a retained
    /// last will (topic, JSON).
    pub async fn connect_as(
        addr: SocketAddr,
        client_id: &str,
        user: &str,
        password: &str,
        will: Option<(&str, Value)>,
    ) -> MqttClient {
        let will = will
            .map(|(topic, v)| rumqttc::LastWill::new(topic, v.to_string(), QoS::AtLeastOnce, true));
        let (user, password) = (user.to_owned(), password.to_owned());
        MqttClient::connect_with(addr, client_id, move |o| {
            o.set_credentials(user, password);
            if let Some(w) = will {
                o.set_last_will(w);
            }
        })
        .await
    }

    /// Subscribes at QoS 1 to several filters; the SUBACK's codes.
    pub async fn subscribe_codes(&mut self, filters: &[&str]) -> Vec<rumqttc::SubscribeReasonCode> {
        let filters = filters
            .iter()
            .map(|f| rumqttc::SubscribeFilter::new(f.to_string(), QoS::AtLeastOnce));
        self.client.subscribe_many(filters).await.unwrap();
        match self.ack().await {
            Packet::SubAck(a) => a.return_codes,
            other => panic!("expected a SUBACK, got {other:?}"),
        }
    }

    /// Drops the connection without a DISCONNECT, as a crashed client would.
    pub fn vanish(self) {
        self.task.abort();
    }

    async fn ack(&mut self) -> Packet {
        tokio::time::timeout(WAIT, self.acks.recv())
            .await
            .expect("ack in time")
            .expect("client alive")
    }

    /// Subscribes at QoS 1 and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .unwrap();
        assert!(matches!(self.ack().await, Packet::SubAck(_)));
    }

    /// Publishes at QoS 1 and waits for the PUBACK, so the broker has it.
    pub async fn publish(&mut self, topic: &str, payload: &Value, retain: bool) {
        self.client
            .publish(topic, QoS::AtLeastOnce, retain, payload.to_string())
            .await
            .unwrap();
        assert!(matches!(self.ack().await, Packet::PubAck(_)));
    }

    /// Publishes an LMOS `event` on its topic, as an MQTT agent would.
    pub async fn recv(&mut self) -> rumqttc::Publish {
        tokio::time::timeout(WAIT, self.publishes.recv())
            .await
            .expect("a publish arrives in time")
            .expect("client alive")
    }

    pub async fn recv_json(&mut self) -> (String, Value, bool) {
        let p = self.recv().await;
        let v = serde_json::from_slice(&p.payload).expect("payload is JSON");
        (p.topic, v, p.retain)
    }
}

/// An MQTT agent of `thing` on the MQTT listener `addr`, as the README's
/// conventions have it: a last will saying offline on its retained presence
/// topic, a subscription to its requests (asserted granted), then
/// "online". `credentials`: a principal's name and password.
pub async fn mqtt_agent(
    addr: SocketAddr,
    client_id: &str,
    thing: &str,
    credentials: Option<(&str, &str)>,
) -> MqttClient {
    let presence = format!("lmos/{thing}/agent/status");
    let offline = json!({"thingID": thing, "status": "offline"});
    let (user, password) = credentials.unwrap_or(("", ""));
    let mut agent = if credentials.is_some() {
        MqttClient::connect_as(addr, client_id, user, password, Some((&presence, offline))).await
    } else {
        MqttClient::connect_with_will(addr, client_id, &presence, offline).await
    };
    let codes = agent
        .subscribe_codes(&[&format!("lmos/{thing}/agent/requests/+")])
        .await;
    assert_eq!(
        codes,
        vec![rumqttc::SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    agent
        .publish(
            &presence,
            &json!({"thingID": thing, "status": "online"}),
            true,
        )
        .await;
    agent
}

/// An LMOS message with fresh IDs; `extra` members are merged in.
pub fn lmos(thing: &str, message_type: &str, extra: Value) -> Value {
    let mut v = json!({"thingID": thing, "messageID": uuid::Uuid::new_v4().to_string(), "messageType": message_type});
    for (k, x) in extra.as_object().expect("extra is an object") {
        v[k] = x.clone();
    }
    v
}

pub fn event(thing: &str, name: &str, data: Value) -> Value {
    lmos(
        thing,
        "event",
        json!({"event": name, "data": data, "timestamp": "2025-01-20T19:00:00Z"}),
    )
}

pub fn reading(thing: &str, name: &str, value: Value) -> Value {
    lmos(
        thing,
        "propertyReading",
        json!({"name": name, "value": value, "timestamp": "2025-01-20T19:00:00Z"}),
    )
}

/// Percent-encodes a query parameter value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Waits until `check` holds for the gateway's statistics.
pub async fn wait_for_stats(
    sidecar: &TestSidecar,
    check: impl Fn(&lmos_sidecar::gateway::GatewayStats) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let stats = sidecar.gateway.stats().await;
        if check(&stats) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gateway stats never matched: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An MQTT 5 client whose events arrive on a channel, subscribed to
/// `filter` (SUBACK awaited).
pub async fn mqtt5_client(
    addr: SocketAddr,
    client_id: &str,
    filter: &str,
) -> (
    rumqttc::v5::AsyncClient,
    mpsc::UnboundedReceiver<rumqttc::v5::Event>,
) {
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            let _ = tx.send(event);
        }
    });
    client
        .subscribe(filter, rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
        .await
        .unwrap();
    loop {
        let event = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("SUBACK in time")
            .expect("client alive");
        if let Event::Incoming(Packet::SubAck(_)) = event {
            return (client, rx);
        }
    }
}

/// The next PUBLISH an MQTT 5 client receives.
pub async fn mqtt5_next_publish(
    rx: &mut mpsc::UnboundedReceiver<rumqttc::v5::Event>,
) -> rumqttc::v5::mqttbytes::v5::Publish {
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::Event;
    loop {
        let event = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("a publish in time")
            .expect("client alive");
        if let Event::Incoming(Packet::Publish(p)) = event {
            return p;
        }
    }
}

/// A sidecar on `config` with an agent running beside it: `agent` gets the
/// WebSocket URL and serves until the test ends. Returns once the agent
/// hosts `thing` and its description is registered.
pub async fn start_with_agent<F, Fut, E>(config: Config, thing: &str, agent: F) -> TestSidecar
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let sidecar = TestSidecar::start_with(config).await;
    tokio::spawn(agent(sidecar.ws_url()));
    wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    // The agent registers its description on its socket; requests are then
    // checked against it.
    wait_for_td(&sidecar, thing).await;
    sidecar
}

/// Waits until the directory serves the Thing's description.
pub async fn wait_for_td(sidecar: &TestSidecar, thing: &str) {
    wait_for_td_as(sidecar, thing, &[]).await
}

/// As [`wait_for_td`], for a caller sending `headers` (its credentials,
/// where the anonymous one may not read the TD).
pub async fn wait_for_td_as(sidecar: &TestSidecar, thing: &str, headers: &[(&str, &str)]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while http_with(
        sidecar.http,
        "GET",
        &format!("/things/{thing}"),
        headers,
        b"",
    )
    .await
    .status
        != 200
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TD of {thing} was never registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP/1.1 response as a test sees it.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// As [`http`], with extra request headers.
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut extra = String::new();
    for (k, v) in headers {
        extra.push_str(&format!("{k}: {v}\r\n"));
    }
    http_raw(addr, method, path, &extra, body).await
}

/// A plain HTTP/1.1 request on a fresh connection (`Connection: close`).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> HttpResponse {
    let extra = content_type
        .map(|ct| format!("Content-Type: {ct}\r\n"))
        .unwrap_or_default();
    http_raw(addr, method, path, &extra, body).await
}

async fn http_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra_headers: &str,
    body: &[u8],
) -> HttpResponse {
    let stream = TcpStream::connect(addr).await.unwrap();
    let host = addr.to_string();
    http_exchange(stream, &host, method, path, extra_headers, body)
        .await
        .expect("an HTTP response")
}

/// One HTTP/1.1 request (`Connection: close`) on `stream`, any transport
/// (e.g. TLS, [`mtls`]); `extra_headers`: lines ending in CRLF. `Err`: the
/// connection failed before a whole response came.
pub async fn http_exchange<S>(
    mut stream: S,
    host: &str,
    method: &str,
    path: &str,
    extra_headers: &str,
    body: &[u8],
) -> std::io::Result<HttpResponse>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n{extra_headers}\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("response in time")?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP response: {text:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// The Lamp, a small Thing the HTTP-port tests drive: property `mode`
/// (a string), synchronous action `go`.
pub const LAMP: &str = "urn:test:lamp";

/// The Lamp's Thing Description.
pub fn lamp_td() -> Value {
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": LAMP,
        "title": "Lamp",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "properties": {"mode": {"type": "string", "forms": [{"href": "https://lamp.example/mode"}]}},
        "actions": {"go": {"synchronous": true, "forms": [{"href": "https://lamp.example/go"}]}}
    })
}

/// A sidecar on `config` with the Lamp's TD registered and the test as
/// its WebSocket agent.
pub async fn start_with_lamp(config: Config) -> (TestSidecar, WsClient) {
    let sidecar = TestSidecar::start_with(config).await;
    let put = http(
        sidecar.http,
        "PUT",
        &format!("/things/{LAMP}"),
        Some("application/td+json"),
        lamp_td().to_string().as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201, "{put:?}");
    let agent = sidecar.ws_agent(LAMP).await;
    (sidecar, agent)
}

/// `lmos_sidecar_limit_hits_total` of the HTTP port for `limit`.
pub async fn http_limit_hits(addr: SocketAddr, limit: &str) -> u64 {
    let metrics = http(addr, "GET", "/metrics", None, b"").await.body;
    let prefix = format!(r#"lmos_sidecar_limit_hits_total{{limit="{limit}",transport="http"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse().unwrap())
}
