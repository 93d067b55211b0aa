//! The HTTP port's accept loop: the connection cap (where slow clients
//! make room, see [`super::slow`]), TLS, the handshake and body timeouts and
//! graceful shutdown, around the router.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;
use tracing::{debug, info, warn};

use super::guard::Throttle;
use super::slow::{BodyLimits, Progress, Timed, Waiting, EVICT_AFTER};
use crate::telemetry::metrics::{self, Metrics};
use crate::tls::identity::Certified;

/// How the port accepts connections.
#[derive(Clone)]
pub struct ServeOptions {
    pub tls: Option<TlsAcceptor>,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    pub body: BodyLimits,
}

/// How long a connection closed to make room gets to say why (a body
/// being read is answered 408) before it is dropped.
const MAKING_ROOM: Duration = Duration::from_millis(500);

/// How long a newcomer waits for the place being made for it: longer than
/// [`MAKING_ROOM`], so the place is free by then.
const WAITING_FOR_ROOM: Duration = Duration::from_secs(2);

/// How a new connection gets its place.
enum Admission {
    Placed(Slot),
    /// The port was full; a slow connection is closing for this one.
    AfterEviction(Arc<Semaphore>),
    Refused,
}

/// A place under `http.max_connections`. An upgraded WebSocket keeps a
/// clone, so the place is held until the socket closes, not just until the
/// HTTP exchange that opened it ends.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// The TCP socket a request came on, unique among open connections: an
/// MQTT client upgraded at `/mqtt` is known to the MQTT guard by it, as
/// one on the MQTT port is by its own.
#[derive(Debug, Clone, Copy)]
pub struct Socket(pub std::os::fd::RawFd);

/// Serves `router` on an already bound listener until `shutdown` fires;
/// open HTTP exchanges then finish and idle keep-alive connections close.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let places = Arc::new(Semaphore::new(options.max_connections));
    let waiting = Waiting::default();
    let cut_log = Arc::new(Throttle::default());
    let exchanges = TaskTracker::new();
    let mut cap_logged = false;
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, typically: pause rather than spin.
                    warn!(error = %e, "Cannot accept an HTTP connection.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Without TCP_NODELAY the last frames of a burst wait ~40 ms for the
        // peer's delayed ACK (Nagle); WebSocket consumers want them now.
        let _ = tcp.set_nodelay(true);
        let admission = match places.clone().try_acquire_owned() {
            Ok(permit) => {
                cap_logged = false;
                Admission::Placed(Slot(Arc::new(permit)))
            }
            Err(_) if waiting.evict_oldest(EVICT_AFTER) => {
                metrics.limit_hit(metrics::HTTP, "slow_client_evicted");
                if !cap_logged {
                    warn!(
                        max = options.max_connections,
                        "HTTP connection limit reached; closing the connections that keep it waiting longest to make room."
                    );
                    cap_logged = true;
                }
                Admission::AfterEviction(places.clone())
            }
            Err(_) => {
                metrics.limit_hit(metrics::HTTP, "max_connections");
                if !cap_logged {
                    warn!(
                        max = options.max_connections,
                        "HTTP connection limit reached; refusing new connections with 503."
                    );
                    cap_logged = true;
                }
                Admission::Refused
            }
        };
        let connection = Exchange {
            peer,
            router: router.clone(),
            options: options.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
            waiting: waiting.clone(),
            cut_log: cut_log.clone(),
        };
        exchanges.spawn(connection.run(tcp, admission));
    }
    exchanges.close();
    exchanges.wait().await;
    Ok(())
}

/// One TCP connection of the HTTP port, up to its upgrade if any.
struct Exchange {
    peer: SocketAddr,
    router: Router,
    options: ServeOptions,
    metrics: Metrics,
    shutdown: CancellationToken,
    waiting: Waiting,
    cut_log: Arc<Throttle>,
}

impl Exchange {
    async fn run(self, tcp: TcpStream, admission: Admission) {
        let slot = match admission {
            Admission::Placed(slot) => Some(slot),
            Admission::AfterEviction(places) => {
                match tokio::time::timeout(WAITING_FOR_ROOM, places.acquire_owned()).await {
                    Ok(Ok(permit)) => Some(Slot(Arc::new(permit))),
                    _ => None,
                }
            }
            Admission::Refused => None,
        };
        let progress = slot.as_ref().map(|_| self.waiting.track());
        let evicted = progress
            .as_ref()
            .map(|p| p.evicted().clone())
            .unwrap_or_default();
        let mut certified = None;
        let socket = Socket(std::os::fd::AsRawFd::as_raw_fd(&tcp));
        let io = match &self.options.tls {
            None => Either::Left(tcp),
            Some(acceptor) => {
                let handshake =
                    tokio::time::timeout(self.options.handshake_timeout, acceptor.accept(tcp));
                let handshake = tokio::select! {
                    done = handshake => done,
                    _ = evicted.cancelled() => return,
                };
                match handshake {
                    Ok(Ok(tls)) => {
                        certified = Certified::of_handshake(tls.get_ref().1.peer_certificates());
                        // Boxed: an upgraded connection keeps this in
                        // hyper's box for its whole life, sized for TLS
                        // state (1.2 KiB) even when plain.
                        Either::Right(Box::new(tls))
                    }
                    Ok(Err(e)) => {
                        if crate::tls::refused_certificate(&e) {
                            self.metrics.auth_failure(metrics::HTTP, "certificate");
                        }
                        debug!(peer = %self.peer, error = %e, "TLS handshake failed.");
                        return;
                    }
                    Err(_) => {
                        self.metrics
                            .limit_hit(metrics::HTTP, "handshake_timeout_ms");
                        debug!(peer = %self.peer, "TLS handshake timed out.");
                        return;
                    }
                }
            }
        };
        match (slot, progress) {
            (Some(slot), Some(progress)) => {
                self.serve(io, slot, progress, (certified, socket)).await
            }
            _ => self.refuse(io).await,
        }
    }

    /// `certified`: the client certificate's identity, which every request
    /// carries (see [`super::auth`]), as it carries the `socket`.
    async fn serve<I>(
        self,
        io: I,
        slot: Slot,
        progress: Arc<Progress>,
        (certified, socket): (Option<Certified>, Socket),
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let router = self.router;
        let limits = self.options.body;
        let metrics = self.metrics.clone();
        let cut_log = self.cut_log.clone();
        let evicted = progress.evicted().clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(ConnectInfo(peer));
            parts.extensions.insert(slot.clone());
            parts.extensions.insert(socket);
            if let Some(certified) = &certified {
                parts.extensions.insert(certified.clone());
            }
            // A request without a body is in once its head is.
            let (body, outcome) = if hyper::body::Body::is_end_stream(&body) {
                progress.busy();
                (Body::new(body), None)
            } else {
                let (body, outcome) = Timed::new(body, progress.clone(), limits);
                (Body::new(body), Some(outcome))
            };
            let request = Request::from_parts(parts, body);
            let mut router = router.clone();
            let progress = progress.clone();
            let metrics = metrics.clone();
            let cut_log = cut_log.clone();
            async move {
                let response = router.call(request).await;
                progress.waiting();
                match outcome.as_ref().and_then(|o| o.cut.get().map(|&c| (o, c))) {
                    None => response,
                    Some((outcome, cut)) => {
                        metrics.limit_hit(metrics::HTTP, cut.key());
                        if cut_log.due() {
                            warn!(%peer, %cut, "Cut off a slow request with 408. Logged at most once a minute.");
                        }
                        let received = outcome.received.load(std::sync::atomic::Ordering::Relaxed);
                        Ok(cut.response(limits, received))
                    }
                }
            }
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.options.handshake_timeout);
        let connection = builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            _ = self.shutdown.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
            // Chosen to make room: a body being read is answered 408 (see
            // `Timed`), anything else just closes.
            _ = evicted.cancelled() => {
                connection.as_mut().graceful_shutdown();
                tokio::time::timeout(MAKING_ROOM, connection).await.unwrap_or(Ok(()))
            }
        };
        if let Err(e) = result {
            if e.is_timeout() {
                self.metrics
                    .limit_hit(metrics::HTTP, "handshake_timeout_ms");
                info!(peer = %peer, "Closed an HTTP connection that sent no request in time.");
            } else {
                debug!(peer = %peer, error = %e, "HTTP connection ended with an error.");
            }
        }
    }

    /// Over the cap: one 503 with a reason, then close.
    async fn refuse<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let max = self.options.max_connections;
        let service = hyper::service::service_fn(move |_request: Request<Incoming>| async move {
            let body = format!(
                "The sidecar already serves {max} connections on this port (http.max_connections); try again later.\n"
            );
            Ok::<_, Infallible>(
                Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .header(header::RETRY_AFTER, "1")
                    .header(header::CONNECTION, "close")
                    .body(Body::from(body))
                    .expect("static response parts are valid"),
            )
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .keep_alive(false)
            .header_read_timeout(self.options.handshake_timeout);
        let _ = builder.serve_connection(TokioIo::new(io), service).await;
    }
}
