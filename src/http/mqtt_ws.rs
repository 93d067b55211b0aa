//! `GET /mqtt`: MQTT over WebSocket, what every broker a web page talks to
//! serves (Mosquitto, EMQX and HiveMQ at `/mqtt`, subprotocol `mqtt`), for
//! MQTT.js in a browser. The handshake is checked here; the connection is
//! then the MQTT guard's ([`crate::broker::guard::Guard::serve_websocket`]),
//! exactly as a client of the MQTT listeners: credentials in CONNECT (a
//! browser cannot set headers on a WebSocket), or the HTTPS connection's
//! client certificate, then the same rights, limits and budgets. The
//! port's Host, Origin and site checks ([`super::guard`]) have already run,
//! so a page on another origin never gets this far.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, Instrument};

use super::server::{Slot, Socket};
use super::upgrade::{header_has_token, refuse, switching_protocols, websocket_key};
use super::HttpState;
use crate::tls::identity::Certified;

pub const PATH: &str = "/mqtt";
/// The subprotocol MQTT 3.1.1 and 5 name for WebSocket (§6.0 of both).
pub const SUBPROTOCOL: &str = "mqtt";

pub async fn upgrade(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
) -> Response {
    let Some(guard) = state.mqtt.clone() else {
        return refuse(
            StatusCode::NOT_FOUND,
            "MQTT over WebSocket is off here (mqtt.websocket = false).\n",
        );
    };
    let key = match handshake(request.headers()) {
        Ok(key) => key,
        Err(refusal) => return refusal,
    };
    let extensions = request.extensions();
    let certified = extensions.get::<Certified>().cloned();
    let slot = extensions.get::<Slot>().cloned();
    let Some(Socket(fd)) = extensions.get::<Socket>().copied() else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "No connection.\n");
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let span = tracing::info_span!(
        "mqtt_connection",
        %peer,
        transport = "websocket",
        client_id = tracing::field::Empty,
        principal = tracing::field::Empty,
    );
    state.connections.spawn(
        async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let config = guard.websocket_config();
                    let io = TokioIo::new(upgraded);
                    let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config));
                    let socket = socket.await;
                    guard.serve_websocket(socket, (peer, fd), certified).await;
                    // The HTTP port's connection slot is held while it runs.
                    drop(slot);
                }
                Err(e) => debug!(error = %e, "MQTT WebSocket upgrade failed."),
            }
        }
        .instrument(span),
    );
    switching_protocols(&key, Some(SUBPROTOCOL))
}

/// The handshake's key, or the refusal of what is not a WebSocket
/// (version 13) handshake offering `mqtt`.
#[allow(clippy::result_large_err)]
fn handshake(headers: &HeaderMap) -> Result<header::HeaderValue, Response> {
    let Some(key) = websocket_key(headers) else {
        return Err(refuse(
            StatusCode::UPGRADE_REQUIRED,
            "This is MQTT over WebSocket: connect with an MQTT client over a WebSocket (version 13) offering the subprotocol `mqtt`.\n",
        ));
    };
    // Without the subprotocol a client might speak anything; MQTT clients
    // (MQTT.js, Paho) always offer it.
    if !header_has_token(headers, header::SEC_WEBSOCKET_PROTOCOL, SUBPROTOCOL) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "The WebSocket handshake must offer the subprotocol `mqtt` (header `Sec-WebSocket-Protocol: mqtt`).\n",
        ));
    }
    Ok(key)
}
