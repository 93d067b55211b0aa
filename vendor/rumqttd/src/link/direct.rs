//! lmos-sidecar patch: a link for connections the embedding process
//! terminates itself (the sidecar's MQTT guard), straight to the router.
//!
//! A remote link reads MQTT bytes from a socket, parses them into packets
//! for the router, and writes the router's notifications back as bytes, on
//! the server's thread. Reached through an in-memory pipe, each packet
//! crossed the pipe, a second task and a second thread's wake-up. A direct
//! link does the remote link's work in the embedder's own tasks: what the
//! embedder writes is parsed into the router's buffer at once, and reading
//! encodes what the router left in the link's buffer. The bytes are those a
//! remote link of the same server would read and write; the rules are its
//! rules (`remote::mqtt_connect`, `RemoteLink`, `server::broker::remote`):
//! the CONNECT's checks, the keep-alive (1.5 times the CONNECT's, counted
//! from the last bytes written), the disconnection event when the embedder
//! closes, and the will's delay.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use flume::r#async::SendFut;
use flume::{Receiver, Sender};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use uuid::Uuid;

use crate::link::local::LinkError;
use crate::protocol::v5::V5;
use crate::protocol::{self, ConnAck, ConnectReturnCode, Packet, Protocol, Publish, PublishProperties};
use crate::router::iobufs::DirectWake;
use crate::router::{Ack, Connection, Event, LinkToken, Notification};
use crate::server::AwaitingWill;
use crate::{ConnectionId, ConnectionSettings};

type RouterTx = Sender<(ConnectionId, Event)>;
type Wills = Arc<Mutex<HashMap<String, Sender<AwaitingWill>>>>;
type Buffer<T> = Arc<parking_lot::Mutex<VecDeque<T>>>;
/// lmos-sidecar patch 15: a message for the router waiting for room in its
/// queue, boxed: an `Event` is some 800 bytes, and each half of every link
/// held room for one inline although it is rarely needed.
type Telling = Pin<Box<SendFut<'static, (ConnectionId, Event)>>>;

/// Opens direct links to the router with one server's settings; cheap to
/// clone. From [`crate::Broker::direct`].
#[derive(Clone)]
pub struct Direct {
    router_tx: RouterTx,
    config: Arc<ConnectionSettings>,
    wills: Wills,
}

impl Direct {
    pub(crate) fn new(router_tx: RouterTx, config: Arc<ConnectionSettings>, wills: Wills) -> Self {
        Direct {
            router_tx,
            config,
            wills,
        }
    }

    /// A new connection, opened with `connect` (one whole MQTT 5 CONNECT).
    /// Reading it yields the CONNACK first. A CONNECT the server's remote
    /// link would drop without a word (not a CONNECT, keep-alive 0, wrong
    /// credentials) fails with `InvalidData`; a router gone fails with
    /// `ConnectionRefused`.
    pub async fn open(&self, connect: &[u8]) -> io::Result<DirectStream> {
        // lmos-sidecar patch 34: the future of every connection opening
        // waits for the router (thousands at once in a burst of CONNECTs),
        // so what it holds across its awaits is kept to what the CONNACK
        // needs: the parsed CONNECT is used up before the router is asked.
        let parsed = Parsed::read(connect, self.config.max_payload_size)?;
        let prepared = if self.config.auth.is_some() || self.config.external_auth.is_some() {
            Box::pin(self.authenticated(parsed)).await?
        } else {
            self.prepare(parsed)?
        };
        match prepared {
            Prepared::Refused(stream) => Ok(stream),
            Prepared::Asking(asking) => self.ask(asking).await,
        }
    }

    /// [`Direct::prepare`] once the server's authentication let it in.
    async fn authenticated(&self, parsed: Parsed) -> io::Result<Prepared> {
        crate::link::remote::handle_auth(
            self.config.clone(),
            parsed.login.as_ref(),
            &parsed.connect.client_id,
        )
        .await
        .map_err(invalid)?;
        self.prepare(parsed)
    }

    /// The CONNECT's checks, then the router's `Event` for it and what the
    /// link keeps while the router answers.
    fn prepare(&self, parsed: Parsed) -> io::Result<Prepared> {
        let Parsed {
            connect,
            props,
            will,
            will_props,
            login: _,
        } = parsed;
        if connect.keep_alive == 0 {
            return Err(invalid("keep-alive 0"));
        }
        if connect.client_id.is_empty() && !connect.clean_session {
            let ack = ConnAck {
                session_present: false,
                code: ConnectReturnCode::ClientIdentifierNotValid,
            };
            return Ok(Prepared::Refused(DirectStream::refused(Packet::ConnAck(
                ack, None,
            ))));
        }

        let mut client_id = connect.client_id.clone();
        let mut assigned = None;
        if client_id.is_empty() {
            client_id = format!("rumqtt-{}", Uuid::new_v4().simple());
            assigned = Some(client_id.clone());
        }
        // A connection of the same client ID waiting out its will's delay:
        // a clean start fires the will, a resumed session cancels it.
        let awaiting = {
            let mut wills = self.wills.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(waiting) = wills.remove(&client_id) {
                let decision = if connect.clean_session {
                    AwaitingWill::Fire
                } else {
                    AwaitingWill::Cancel
                };
                let _ = waiting.try_send(decision);
            }
            // lmos-sidecar patch 22: only a connection with a will waits
            // for a decision on it (a channel and an entry here were some
            // 250 bytes for every connection, most of them without one).
            will.is_some().then(|| {
                let (tx, rx) = flume::bounded(1);
                wills.insert(client_id.clone(), tx.clone());
                (tx, rx)
            })
        };
        let session_expiry = props
            .as_ref()
            .and_then(|p| p.session_expiry_interval)
            .unwrap_or(0);
        let will_delay = will_props
            .as_ref()
            .and_then(|p| p.delay_interval)
            .unwrap_or(0)
            .min(session_expiry);
        let topic_alias_max = props.as_ref().and_then(|p| p.topic_alias_max);

        let mut connection = Connection::new(
            None,
            client_id.clone(),
            connect.clean_session,
            self.config.dynamic_filters,
        );
        connection
            .last_will(will, will_props)
            .topic_alias_max(topic_alias_max.unwrap_or(0));
        let incoming = crate::router::iobufs::Incoming::new(client_id.clone());
        let (outgoing, wakeups) = crate::router::iobufs::Outgoing::direct(client_id.clone());
        let outgoing_buffer = outgoing.buffer();
        let incoming_buffer = incoming.buffer();
        let event = Event::Connect {
            connection,
            incoming,
            outgoing,
        };
        // Patch 15: waiting for room in the router's queue is rare, and the
        // future waiting holds the whole `Event`: boxed, so that opening a
        // link (thousands at once in a burst of CONNECTs) takes less.
        let telling = match self.router_tx.try_send((0, event)) {
            Ok(()) => None,
            Err(flume::TrySendError::Full(message)) => {
                Some(Box::pin(self.router_tx.clone().into_send_async(message)))
            }
            Err(flume::TrySendError::Disconnected(_)) => return Err(stopped()),
        };
        Ok(Prepared::Asking(Asking {
            telling,
            wakeups,
            outgoing_buffer,
            incoming_buffer,
            assigned,
            client_id,
            awaiting,
            will_delay,
            keep_alive: connect.keep_alive,
        }))
    }

    /// Waits for the router's CONNACK (after room in its queue, if it had
    /// none).
    async fn ask(&self, asking: Asking) -> io::Result<DirectStream> {
        let Asking {
            telling,
            wakeups,
            outgoing_buffer,
            incoming_buffer,
            assigned,
            client_id,
            awaiting,
            will_delay,
            keep_alive,
        } = asking;
        if let Some(telling) = telling {
            telling.await.map_err(|_| stopped())?;
        }
        std::future::poll_fn(|cx| wakeups.poll(cx))
            .await
            .map_err(|_| stopped())?;
        let connack = {
            let mut queue = outgoing_buffer.lock();
            let connack = queue.pop_front();
            // lmos-sidecar patch 22: the room the CONNACK took (some 250
            // bytes) is not kept for an idle connection. What came with it
            // (a resumed session's publications) is read at once: wake-ups
            // coalesce, and the one for them was the CONNACK's.
            if queue.is_empty() {
                *queue = VecDeque::new();
            } else {
                wakeups.wake();
            }
            connack
        };
        let Some(Notification::DeviceAck(Ack::ConnAck(id, ack, ack_props))) = connack else {
            return Err(io::Error::other(LinkError::NotConnectionAck));
        };
        let ack_props = match assigned {
            Some(assigned) => {
                let mut props = ack_props.unwrap_or_default();
                props.assigned_client_identifier = Some(assigned);
                Some(props)
            }
            None => ack_props,
        };
        let mut out = BytesMut::new();
        V5.write(Packet::ConnAck(ack, ack_props), &mut out)
            .map_err(invalid)?;

        let keep_alive = Duration::from_secs(u64::from(keep_alive));
        let keep_alive = keep_alive + keep_alive.mul_f32(0.5);
        let shared = Arc::new(Shared {
            router_tx: self.router_tx.clone(),
            connection_id: id,
            start: Instant::now(),
            heard: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            end: Mutex::new(Some(End {
                token: LinkToken(outgoing_buffer.clone()),
                client_id,
                will: awaiting.map(|(tx, rx)| Will {
                    tx,
                    rx,
                    delay: will_delay,
                    wills: self.wills.clone(),
                }),
            })),
        });
        Ok(DirectStream {
            rx: DirectRx {
                shared: Some(shared.clone()),
                wakeups,
                outgoing: outgoing_buffer,
                notifications: VecDeque::new(),
                out,
                wake: None,
                keep_alive,
                timer: Box::pin(tokio::time::sleep(keep_alive)),
                eof: false,
            },
            tx: DirectTx {
                shared: Some(shared),
                incoming: incoming_buffer,
                read: BytesMut::new(),
                max_size: self.config.max_payload_size,
                notify: None,
            },
        })
    }
}

/// A CONNECT as rumqttd's parser reads it.
struct Parsed {
    connect: protocol::Connect,
    props: Option<protocol::ConnectProperties>,
    will: Option<protocol::LastWill>,
    will_props: Option<protocol::LastWillProperties>,
    login: Option<protocol::Login>,
}

impl Parsed {
    fn read(connect: &[u8], max_payload_size: usize) -> io::Result<Parsed> {
        let mut bytes = BytesMut::from(connect);
        let packet = V5.read_mut(&mut bytes, max_payload_size).map_err(invalid)?;
        let Packet::Connect(connect, props, will, will_props, login) = packet else {
            return Err(invalid("not a CONNECT"));
        };
        Ok(Parsed {
            connect,
            props,
            will,
            will_props,
            login,
        })
    }
}

enum Prepared {
    /// Answered without the router.
    Refused(DirectStream),
    Asking(Asking),
}

/// What opening a link holds while the router answers its CONNECT (its
/// event went to the router, or waits for room boxed).
struct Asking {
    telling: Option<Telling>,
    wakeups: Arc<DirectWake>,
    outgoing_buffer: Buffer<Notification>,
    incoming_buffer: Buffer<Packet>,
    assigned: Option<String>,
    client_id: String,
    awaiting: Option<(Sender<AwaitingWill>, Receiver<AwaitingWill>)>,
    will_delay: u32,
    keep_alive: u16,
}

fn invalid(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionRefused, "the router stopped")
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the link has ended")
}

/// What both halves share: the connection and how it ends.
struct Shared {
    router_tx: RouterTx,
    connection_id: ConnectionId,
    /// `heard` counts from here.
    start: Instant,
    /// When the embedder last wrote, in nanoseconds from `start`.
    heard: AtomicU64,
    /// The link has ended: no more packets go to the router.
    closed: AtomicBool,
    /// Taken by whichever end comes first.
    end: Mutex<Option<End>>,
}

struct End {
    token: LinkToken,
    client_id: String,
    /// `None`: the connection has no will (patch 22).
    will: Option<Will>,
}

/// A connection's will, waiting for its end and a decision.
struct Will {
    /// This connection's entry in `wills`, to know it there.
    tx: Sender<AwaitingWill>,
    rx: Receiver<AwaitingWill>,
    delay: u32,
    wills: Wills,
}

impl Shared {
    fn heard(&self) {
        let nanos = self.start.elapsed().as_nanos();
        self.heard
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn last_heard(&self) -> Instant {
        self.start + Duration::from_nanos(self.heard.load(Ordering::Relaxed))
    }

    /// Ends the link, once: tells the router unless the router ended it,
    /// then publishes the will when its delay says so, as the server does
    /// after a remote link ends.
    fn finish(&self, tell_router: bool) {
        self.closed.store(true, Ordering::Release);
        let Some(end) = self.end.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let router_tx = self.router_tx.clone();
        let id = self.connection_id;
        let mut messages = Vec::with_capacity(2);
        if tell_router {
            messages.push((id, Event::Disconnect(end.token.clone())));
        }
        let End {
            client_id, will, ..
        } = end;
        let Some(Will {
            tx: will_tx,
            rx: will_rx,
            delay: will_delay,
            wills,
        }) = will
        else {
            return tell(&router_tx, messages);
        };
        let will = move |client_id: String| (id, Event::PublishWill((client_id, None)));
        if will_delay == 0 {
            let fire = match will_rx.try_recv() {
                Ok(decision) => decision == AwaitingWill::Fire,
                Err(flume::TryRecvError::Disconnected) => false,
                Err(flume::TryRecvError::Empty) => {
                    remove_own(&wills, &client_id, &will_tx);
                    true
                }
            };
            if fire {
                messages.push(will(client_id));
            }
            return tell(&router_tx, messages);
        }
        tell(&router_tx, messages);
        spawn(async move {
            let delay = Duration::from_secs(u64::from(will_delay));
            let fire = match tokio::time::timeout(delay, will_rx.recv_async()).await {
                Ok(decision) => decision.is_ok_and(|d| d == AwaitingWill::Fire),
                Err(_) => {
                    remove_own(&wills, &client_id, &will_tx);
                    true
                }
            };
            if fire {
                tell(&router_tx, vec![will(client_id)]);
            }
        });
    }
}

/// Sends the router `messages` in order without blocking the caller: when
/// its queue is full, the rest wait for room in a task of their own. The
/// remote link blocks its thread instead; none is ever dropped.
fn tell(router_tx: &RouterTx, messages: Vec<(ConnectionId, Event)>) {
    let mut messages = messages.into_iter();
    while let Some(message) = messages.next() {
        match router_tx.try_send(message) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(message)) => {
                let router_tx = router_tx.clone();
                let rest: Vec<_> = std::iter::once(message).chain(messages).collect();
                spawn(async move {
                    for message in rest {
                        if router_tx.send_async(message).await.is_err() {
                            return;
                        }
                    }
                });
                return;
            }
            Err(flume::TrySendError::Disconnected(_)) => return,
        }
    }
}

/// Both halves gone: as a socket closed under a remote link.
impl Drop for Shared {
    fn drop(&mut self) {
        self.finish(true);
    }
}

/// Forgets the waiting will of `client_id` if it is this connection's (a
/// newer connection of the ID has put its own there otherwise).
fn remove_own(wills: &Wills, client_id: &str, own: &Sender<AwaitingWill>) {
    let mut wills = wills.lock().unwrap_or_else(|e| e.into_inner());
    if wills.get(client_id).is_some_and(|tx| tx.same_channel(own)) {
        wills.remove(client_id);
    }
}

fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// Both halves of a direct link.
pub struct DirectStream {
    rx: DirectRx,
    tx: DirectTx,
}

impl DirectStream {
    /// A connection the server refuses with `ack`, then closes.
    fn refused(ack: Packet) -> DirectStream {
        let mut out = BytesMut::new();
        let _ = V5.write(ack, &mut out);
        DirectStream {
            rx: DirectRx {
                shared: None,
                wakeups: Default::default(),
                outgoing: Default::default(),
                notifications: VecDeque::new(),
                out,
                wake: None,
                keep_alive: Duration::MAX,
                timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
                eof: true,
            },
            tx: DirectTx {
                shared: None,
                incoming: Default::default(),
                read: BytesMut::new(),
                max_size: 0,
                notify: None,
            },
        }
    }

    pub fn into_split(self) -> (DirectRx, DirectTx) {
        (self.rx, self.tx)
    }
}

/// lmos-sidecar patch 31: a publication the router sent, handed over
/// unwritten by [`DirectRx::poll_read_split`].
pub struct Publication {
    /// Where it goes: after this many of the bytes read with it.
    pub at: usize,
    publish: Publish,
    /// As the router has them; what MQTT 5 would write.
    pub properties: Option<PublishProperties>,
}

impl Publication {
    /// Its QoS: 0, 1 or 2.
    pub fn qos(&self) -> u8 {
        self.publish.qos as u8
    }

    /// 0 at QoS 0.
    pub fn pkid(&self) -> u16 {
        self.publish.pkid
    }

    pub fn dup(&self) -> bool {
        self.publish.dup
    }

    pub fn retain(&self) -> bool {
        self.publish.retain
    }

    pub fn topic(&self) -> &[u8] {
        &self.publish.topic
    }

    pub fn payload(&self) -> &[u8] {
        &self.publish.payload
    }
}

/// What the router sends the connection, as MQTT 5 bytes.
pub struct DirectRx {
    shared: Option<Arc<Shared>>,
    /// The router's word that it left notifications in `outgoing`.
    wakeups: Arc<DirectWake>,
    outgoing: Buffer<Notification>,
    notifications: VecDeque<Notification>,
    /// Encoded, not yet read.
    out: BytesMut,
    /// The router unscheduled the connection; it is told it may send again
    /// once what it sent has been read.
    wake: Option<Telling>,
    keep_alive: Duration,
    timer: Pin<Box<Sleep>>,
    /// Returns end of file from now on.
    eof: bool,
}

impl DirectRx {
    /// Appends what the router has sent to `dst`, waiting for something if
    /// nothing has come; `Ok(0)` once the link has ended.
    pub fn poll_read_into(&mut self, cx: &mut Context<'_>, dst: &mut BytesMut) -> Poll<io::Result<usize>> {
        self.poll_read_some(cx, dst, None)
    }

    /// lmos-sidecar patch 31: [`Self::poll_read_into`], but the
    /// publications are appended to `publications` unwritten, each marked
    /// with where it goes among the bytes appended to `dst`. An embedder
    /// that writes publications in another form (MQTT 3.1.1) then need not
    /// read back the MQTT 5 this link would write. `Ok(n)`: bytes and
    /// publications together, 0 once the link has ended.
    pub fn poll_read_split(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut BytesMut,
        publications: &mut Vec<Publication>,
    ) -> Poll<io::Result<usize>> {
        self.poll_read_some(cx, dst, Some(publications))
    }

    /// [`Self::poll_read_split`] as a future.
    pub async fn read_split(&mut self, dst: &mut BytesMut, publications: &mut Vec<Publication>) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_read_split(cx, dst, publications)).await
    }

    fn poll_read_some(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut BytesMut,
        mut publications: Option<&mut Vec<Publication>>,
    ) -> Poll<io::Result<usize>> {
        let from = publications.as_ref().map_or(0, |p| p.len());
        loop {
            let split = publications.as_ref().map_or(0, |p| p.len() - from);
            if !self.out.is_empty() || split > 0 {
                let n = self.out.len();
                if let Some(p) = publications.as_deref_mut() {
                    // Their places were counted in `out`, which goes after
                    // what `dst` holds.
                    let base = dst.len();
                    p[from..].iter_mut().for_each(|p| p.at += base);
                }
                if dst.is_empty() {
                    std::mem::swap(dst, &mut self.out);
                } else {
                    dst.extend_from_slice(&self.out);
                    self.out.clear();
                }
                return Poll::Ready(Ok(n + split));
            }
            if self.eof {
                return Poll::Ready(Ok(0));
            }
            let Some(shared) = self.shared.clone() else {
                self.eof = true;
                continue;
            };
            if let Some(wake) = self.wake.as_mut() {
                let sent = ready!(wake.as_mut().poll(cx));
                self.wake = None;
                if sent.is_err() {
                    self.eof = true;
                    shared.finish(false);
                    continue;
                }
            }
            match self.wakeups.poll(cx) {
                Poll::Ready(Ok(())) => {
                    std::mem::swap(&mut *self.outgoing.lock(), &mut self.notifications);
                    let lone = self.notifications.len() <= 1;
                    let mut unscheduled = false;
                    for notification in self.notifications.drain(..) {
                        match (Option::<Packet>::from(notification), publications.as_deref_mut()) {
                            (Some(Packet::Publish(publish, properties)), Some(p)) => {
                                let at = self.out.len();
                                p.push(Publication { at, publish, properties });
                            }
                            (Some(packet), _) => {
                                if let Err(e) = V5.write(packet, &mut self.out) {
                                    tracing::error!(error = ?e, "Cannot write a packet for a direct link");
                                }
                            }
                            (None, _) => unscheduled = true,
                        }
                    }
                    // lmos-sidecar patch 15: a link that is not busy keeps
                    // no room for notifications (the router's buffer and
                    // this one trade places at every read, so both stayed
                    // as large as the largest batch, for every idle
                    // connection). A busy one keeps it: the router, the
                    // broker's one thread, would grow a buffer per batch.
                    if lone {
                        self.notifications = VecDeque::new();
                    }
                    if unscheduled {
                        let ready = (shared.connection_id, Event::Ready);
                        self.wake = Some(Box::pin(shared.router_tx.clone().into_send_async(ready)));
                        if self.out.is_empty() {
                            continue;
                        }
                    }
                }
                // The router has ended the connection.
                Poll::Ready(Err(_)) => {
                    self.eof = true;
                    shared.finish(false);
                }
                Poll::Pending => {
                    ready!(self.timer.as_mut().poll(cx));
                    let due = shared.last_heard() + self.keep_alive;
                    if Instant::now() < due {
                        self.timer.as_mut().reset(due);
                        continue;
                    }
                    // Nothing heard for 1.5 keep-alives.
                    self.eof = true;
                    shared.finish(true);
                }
            }
        }
    }

    /// [`Self::poll_read_into`] as a future.
    pub async fn read_into(&mut self, dst: &mut BytesMut) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_read_into(cx, dst)).await
    }
}

impl AsyncRead for DirectRx {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.out.is_empty() {
            let mut more = std::mem::take(&mut this.out);
            let read = this.poll_read_into(cx, &mut more);
            this.out = more;
            ready!(read)?;
        }
        let n = this.out.len().min(buf.remaining());
        buf.put_slice(&this.out[..n]);
        this.out.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// What the connection sends the router, as MQTT 5 bytes.
pub struct DirectTx {
    shared: Option<Arc<Shared>>,
    incoming: Buffer<Packet>,
    /// Bytes of a packet not yet whole.
    read: BytesMut,
    max_size: usize,
    /// The router's queue was full when the router was told of packets.
    notify: Option<Telling>,
}

impl DirectTx {
    fn poll_notified(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(notify) = self.notify.as_mut() {
            let sent = ready!(notify.as_mut().poll(cx));
            self.notify = None;
            sent.map_err(|_| broken())?;
        }
        Poll::Ready(Ok(()))
    }
}

/// Takes the successful acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP
/// with a packet identifier and nothing else, as MQTT 5 §3.4.2.1 allows)
/// off the front of `buf` into `incoming`: the packets `V5::read_mut`
/// would read from them. Returns what is left.
fn plain_acks<'a>(mut buf: &'a [u8], incoming: &mut VecDeque<Packet>, parsed: &mut usize) -> &'a [u8] {
    use crate::protocol::{
        PubAck, PubAckReason, PubComp, PubCompReason, PubRec, PubRecReason, PubRel, PubRelReason,
    };
    while let [first, 2, hi, lo, rest @ ..] = buf {
        let pkid = u16::from_be_bytes([*hi, *lo]);
        let packet = match first {
            0x40 => Packet::PubAck(PubAck { pkid, reason: PubAckReason::Success }, None),
            0x50 => Packet::PubRec(PubRec { pkid, reason: PubRecReason::Success }, None),
            0x62 => Packet::PubRel(PubRel { pkid, reason: PubRelReason::Success }, None),
            0x70 => Packet::PubComp(PubComp { pkid, reason: PubCompReason::Success }, None),
            _ => break,
        };
        incoming.push_back(packet);
        *parsed += 1;
        buf = rest;
    }
    buf
}

impl AsyncWrite for DirectTx {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_notified(cx))?;
        let Some(shared) = this.shared.clone() else {
            return Poll::Ready(Err(broken()));
        };
        if shared.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(broken()));
        }
        shared.heard();
        let mut parsed = 0;
        {
            let mut incoming = this.incoming.lock();
            // lmos-sidecar patch 31: most of what a subscriber sends is
            // plain acknowledgements (ten for a publication fanned out to
            // ten): read in place, not copied into the read buffer and cut
            // out of it one by one to be read as any packet.
            let rest = match this.read.is_empty() {
                true => plain_acks(buf, &mut incoming, &mut parsed),
                false => buf,
            };
            this.read.extend_from_slice(rest);
            loop {
                match V5.read_mut(&mut this.read, this.max_size) {
                    Ok(packet) => {
                        incoming.push_back(packet);
                        parsed += 1;
                    }
                    Err(protocol::Error::InsufficientBytes(_)) => break,
                    Err(e) => {
                        drop(incoming);
                        shared.finish(true);
                        return Poll::Ready(Err(invalid(e)));
                    }
                }
            }
        }
        if parsed > 0 {
            let message = (shared.connection_id, Event::DeviceData);
            match shared.router_tx.try_send(message) {
                Ok(()) => {}
                Err(flume::TrySendError::Full(message)) => {
                    this.notify = Some(Box::pin(shared.router_tx.clone().into_send_async(message)));
                    // Registers the wake-up; the next write or flush ends it.
                    if let Poll::Ready(sent) = this.poll_notified(cx) {
                        sent?;
                    }
                }
                Err(flume::TrySendError::Disconnected(_)) => return Poll::Ready(Err(broken())),
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_notified(cx)
    }

    /// As a socket's end of file to the remote link: the link ends.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_notified(cx))?;
        if let Some(shared) = &this.shared {
            shared.finish(true);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for DirectStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().rx).poll_read(cx, buf)
    }
}

impl AsyncWrite for DirectStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tx).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tx).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tx).poll_shutdown(cx)
    }
}
