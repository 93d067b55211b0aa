//! The HTTP port's accept loop: the connection cap, TLS, the handshake
//! timeout and graceful shutdown, around the router.

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

use crate::telemetry::metrics::{self, Metrics};

/// How the port accepts connections.
#[derive(Clone)]
pub struct ServeOptions {
    pub tls: Option<TlsAcceptor>,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

/// A place under `http.max_connections`. An upgraded WebSocket keeps a
/// clone, so the place is held until the socket closes, not just until the
/// HTTP exchange that opened it ends.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

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
        let slot = match places.clone().try_acquire_owned() {
            Ok(permit) => {
                cap_logged = false;
                Some(Slot(Arc::new(permit)))
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
                None
            }
        };
        let connection = Exchange {
            peer,
            router: router.clone(),
            options: options.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        };
        exchanges.spawn(connection.run(tcp, slot));
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
}

impl Exchange {
    async fn run(self, tcp: TcpStream, slot: Option<Slot>) {
        let io = match &self.options.tls {
            None => Either::Left(tcp),
            Some(acceptor) => {
                let handshake =
                    tokio::time::timeout(self.options.handshake_timeout, acceptor.accept(tcp));
                match handshake.await {
                    Ok(Ok(tls)) => Either::Right(tls),
                    Ok(Err(e)) => {
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
        match slot {
            Some(slot) => self.serve(io, slot).await,
            None => self.refuse(io).await,
        }
    }

    async fn serve<I>(self, io: I, slot: Slot)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let router = self.router;
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(slot.clone());
            let mut router = router.clone();
            async move { router.call(request.map(Body::new)).await }
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
