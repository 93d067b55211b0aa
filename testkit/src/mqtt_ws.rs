//! An MQTT client over WebSocket (`/mqtt`, subprotocol `mqtt`) written
//! byte by byte, as [`crate::raw_mqtt`] is over TCP: the packets are the
//! raw ones, the frames chosen by the test (a packet split across frames,
//! several packets in one, a text frame).

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::raw_mqtt::whole_packet;
use crate::WAIT;

pub struct WsMqtt {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    buf: Vec<u8>,
}

/// `ws://{http}/mqtt`.
pub fn url(http: SocketAddr) -> String {
    format!("ws://{http}/mqtt")
}

impl WsMqtt {
    /// Opens `/mqtt` offering `subprotocol` (and sending `origin`, as a
    /// browser's page would): the socket, or the HTTP status of the refusal.
    pub async fn open_with(
        http: SocketAddr,
        subprotocol: Option<&str>,
        origin: Option<&str>,
    ) -> Result<WsMqtt, u16> {
        let mut request = url(http).into_client_request().unwrap();
        let headers = request.headers_mut();
        if let Some(p) = subprotocol {
            headers.insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
        }
        if let Some(o) = origin {
            headers.insert("Origin", HeaderValue::from_str(o).unwrap());
        }
        let connected = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("handshake in time");
        match connected {
            Ok((socket, response)) => {
                let named = response.headers().get("Sec-WebSocket-Protocol");
                assert_eq!(named.map(|v| v.as_bytes()), subprotocol.map(str::as_bytes));
                Ok(WsMqtt {
                    socket,
                    buf: Vec::new(),
                })
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
            Err(e) => panic!("handshake failed: {e}"),
        }
    }

    /// Opens `/mqtt` offering `mqtt`.
    pub async fn open(http: SocketAddr) -> WsMqtt {
        WsMqtt::open_with(http, Some("mqtt"), None)
            .await
            .expect("the handshake is accepted")
    }

    /// Sends `bytes` as one binary frame.
    pub async fn send(&mut self, bytes: &[u8]) {
        let frame = Message::Binary(bytes.to_vec().into());
        self.socket.send(frame).await.unwrap();
    }

    /// Sends `bytes` as several binary frames, cut at `cuts`.
    pub async fn send_cut(&mut self, bytes: &[u8], cuts: &[usize]) {
        let mut from = 0;
        for &to in cuts.iter().chain([&bytes.len()]) {
            self.send(&bytes[from..to]).await;
            from = to;
        }
    }

    /// Sends a text frame (which MQTT over WebSocket forbids).
    pub async fn send_text(&mut self, text: &str) {
        let _ = self.socket.send(Message::Text(text.into())).await;
    }

    /// The next whole packet, or `None` once the connection is closed.
    pub async fn recv(&mut self) -> Option<Vec<u8>> {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(len) = whole_packet(&self.buf) {
                    return Some(self.buf.drain(..len).collect());
                }
                match self.socket.next().await {
                    Some(Ok(Message::Binary(data))) => self.buf.extend_from_slice(&data),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                    Some(Ok(other)) => assert!(
                        !other.is_text(),
                        "the sidecar sent MQTT in a text frame: {other:?}"
                    ),
                }
            }
        })
        .await
        .expect("packet or close in time")
    }
}
