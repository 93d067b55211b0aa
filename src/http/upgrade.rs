//! The WebSocket handshake for `lmosprotocol`, done here rather than by a
//! framework extractor so that a client not offering the subprotocol gets a
//! clear refusal instead of a connection speaking nothing in particular.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, info, Instrument};

use super::server::Slot;
use super::HttpState;
use crate::auth::Access;
use crate::gateway::{Client, SUBPROTOCOL};
use crate::telemetry::metrics;
use crate::tls::identity::Certified;

pub(super) fn header_has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

pub(super) fn refuse(status: StatusCode, text: &'static str) -> Response {
    let mut response = (status, text).into_response();
    if status == StatusCode::UPGRADE_REQUIRED {
        response
            .headers_mut()
            .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    }
    response
}

/// `GET /lmos[?host=<thingID>...]`: each `host` names a Thing the connecting
/// agent serves requests for.
pub async fn lmos(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(params): Query<Vec<(String, String)>>,
    mut request: Request,
) -> Response {
    let handshake = match Handshake::read(request.headers(), peer) {
        Ok(h) => h,
        Err(refusal) => return refusal,
    };
    let principal = match state
        .auth
        .authenticate_from(
            request.headers(),
            Some(peer),
            request.extensions().get::<Certified>(),
        )
        .await
    {
        Ok(p) => p,
        Err(response) => return response,
    };
    let hosts = match hosts(&state, &principal, params) {
        Ok(h) => h,
        Err(refusal) => return refusal,
    };
    let gateway = state.gateway.clone();
    let conn = gateway.next_connection();
    if !hosts.is_empty() {
        if let Err(e) = gateway.claim(conn, hosts.clone()).await {
            debug!(%peer, error = %e, "Refused an agent for a Thing already hosted.");
            return (StatusCode::CONFLICT, format!("Cannot host: {e}.\n")).into_response();
        }
    }
    let client = Client {
        conn,
        addr: peer,
        principal,
        hosts,
    };
    serve_upgraded(&state, client, &mut request);
    handshake.accept()
}

/// A WebSocket handshake this endpoint takes.
struct Handshake {
    key: HeaderValue,
    /// Whether the client offered subprotocols (then ours is named back).
    offers_any: bool,
}

impl Handshake {
    /// The handshake of `headers`, or the refusal of one that is not a
    /// WebSocket version 13 handshake for `lmosprotocol`.
    fn read(headers: &HeaderMap, peer: SocketAddr) -> Result<Handshake, Response> {
        let Some(key) = websocket_key(headers) else {
            return Err(refuse(
                StatusCode::UPGRADE_REQUIRED,
                "This is the LMOS WebSocket endpoint: connect with a WebSocket client (version 13) offering the subprotocol `lmosprotocol`.\n",
            ));
        };
        // A client offering subprotocols must offer ours. One offering none
        // is taken to speak it: the Kotlin LMOS stack's client (ktor's
        // `webSocketSession`) offers none, and is answered without one, as
        // RFC 6455 requires.
        let offers_any = headers.contains_key(header::SEC_WEBSOCKET_PROTOCOL);
        if offers_any && !header_has_token(headers, header::SEC_WEBSOCKET_PROTOCOL, SUBPROTOCOL) {
            debug!(%peer, "Refused a WebSocket handshake offering other subprotocols than lmosprotocol.");
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "The WebSocket handshake must offer the subprotocol `lmosprotocol` (header `Sec-WebSocket-Protocol: lmosprotocol`).\n",
            ));
        }
        Ok(Handshake { key, offers_any })
    }

    /// `101 Switching Protocols`.
    fn accept(self) -> Response {
        switching_protocols(&self.key, self.offers_any.then_some(SUBPROTOCOL))
    }
}

/// The key of a WebSocket (version 13) handshake; `None`: not one.
pub(super) fn websocket_key(headers: &HeaderMap) -> Option<HeaderValue> {
    let is_websocket = header_has_token(headers, header::UPGRADE, "websocket")
        && header_has_token(headers, header::CONNECTION, "upgrade")
        && headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v == "13");
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| is_websocket)
        .cloned()
}

/// `101 Switching Protocols` for the handshake of `key`, naming
/// `subprotocol` when given.
pub(super) fn switching_protocols(key: &HeaderValue, subprotocol: Option<&str>) -> Response {
    let mut response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(
            header::SEC_WEBSOCKET_ACCEPT,
            derive_accept_key(key.as_bytes()),
        );
    if let Some(protocol) = subprotocol {
        response = response.header(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    response
        .body(Body::empty())
        .expect("static response parts are valid")
}

/// The Things the `host` parameters name, each one the principal may host.
fn hosts(
    state: &HttpState,
    principal: &crate::auth::Principal,
    params: Vec<(String, String)>,
) -> Result<Vec<String>, Response> {
    let hosts: Vec<String> = params
        .into_iter()
        .filter(|(k, _)| k == "host")
        .map(|(_, v)| v)
        .collect();
    if hosts.iter().any(String::is_empty) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "A `host` parameter must name a thingID.\n",
        ));
    }
    if let Some(thing) = hosts.iter().find(|t| !principal.may(Access::Host, t)) {
        state.metrics.denied(metrics::HTTP, Access::Host.as_str());
        info!(principal = principal.name(), thing = %thing, "Refused to let a client host a Thing.");
        let text = format!(
            "`{}` may not host `{thing}` (it needs `host` access to it in [auth]).\n",
            principal.name()
        );
        return Err((StatusCode::FORBIDDEN, text).into_response());
    }
    Ok(hosts)
}

/// Once the connection is upgraded, the gateway serves `client` on it
/// (its claim released should the upgrade fail).
fn serve_upgraded(state: &HttpState, client: Client, request: &mut Request) {
    let gateway = state.gateway.clone();
    let slot = request.extensions().get::<Slot>().cloned();
    let on_upgrade = hyper::upgrade::on(request);
    let shutdown = state.closing.child_token();
    let config = gateway.websocket_config();
    let clients = state.console.clients.clone();
    // Boxed and freed once the connection runs: what waiting for the upgrade
    // and setting up the WebSocket hold would otherwise stay in every idle
    // consumer's task beside the connection's own future.
    let opening = Box::pin(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let socket = WebSocketStream::from_raw_socket(
                    gateway.metered(TokioIo::new(upgraded)),
                    Role::Server,
                    Some(config),
                )
                .await;
                // Counted by principal for the console while it lives.
                let counted = clients.enter(client.principal.name());
                Some((gateway.serve(client, socket, shutdown), counted))
            }
            Err(e) => {
                debug!(error = %e, "WebSocket upgrade failed.");
                gateway.release(client.conn).await;
                None
            }
        }
    });
    state.connections.spawn(
        async move {
            if let Some((connection, _counted)) = opening.await {
                connection.await;
            }
            drop(slot);
        }
        .in_current_span(),
    );
}
