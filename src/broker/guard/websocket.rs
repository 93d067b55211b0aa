//! MQTT over WebSocket (`GET /mqtt` on the HTTP port, subprotocol `mqtt`):
//! the WebSocket's binary frames read as the byte stream the guard reads
//! from a TCP client, so a browser's client (MQTT.js) meets the same
//! admission, authentication, rights, limits and slow-consumer handling as
//! every other MQTT client. Packets may span frames and a frame may carry
//! several (MQTT 5 §6.0, 3.1.1 §6.0); each write of the guard goes out as
//! one binary frame. A text frame is a protocol error: it ends the
//! connection (the specification requires closing it).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::relay::{ClientRx, ClientStream};
use crate::tls::identity::Certified;

/// Frame room beyond the largest packet the guard takes: a client may pack
/// a few small packets with it.
const FRAME_HEADROOM: usize = 64 * 1024;

/// The WebSocket settings for a guard whose packets are at most
/// `max_packet_size` bytes: no frame or message may be larger than a
/// packet and its headroom, so a client cannot make the WebSocket layer
/// buffer more than the guard would.
pub fn config(max_packet_size: usize) -> WebSocketConfig {
    let largest = max_packet_size.saturating_add(FRAME_HEADROOM);
    WebSocketConfig::default()
        .max_message_size(Some(largest))
        .max_frame_size(Some(largest))
        .write_buffer_size(0)
        .max_write_buffer_size(largest.saturating_mul(2))
}

/// A WebSocket carrying MQTT, as bytes.
pub struct WsBytes<S> {
    socket: WebSocketStream<S>,
    /// What is left of the last binary frame.
    pending: Bytes,
    certified: Option<Certified>,
}

impl<S> WsBytes<S> {
    /// `certified`: the client certificate of the HTTPS connection the
    /// WebSocket was opened on, if any.
    pub fn new(socket: WebSocketStream<S>, certified: Option<Certified>) -> WsBytes<S> {
        WsBytes {
            socket,
            pending: Bytes::new(),
            certified,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            let next = ready!(Pin::new(&mut self.socket).poll_next(cx));
            match next {
                // The end of the stream (a Close frame or the connection
                // gone): the guard sees the client hang up.
                None | Some(Ok(Message::Close(_))) => return Poll::Ready(Ok(())),
                Some(Ok(Message::Binary(data))) => self.pending = data,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text frame on an MQTT WebSocket (MQTT travels in binary frames)",
                    )))
                }
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut socket = Pin::new(&mut self.socket);
        ready!(socket.as_mut().poll_ready(cx)).map_err(io::Error::other)?;
        let frame = Message::Binary(Bytes::copy_from_slice(buf));
        socket.start_send(frame).map_err(io::Error::other)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket)
            .poll_flush(cx)
            .map_err(io::Error::other)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket)
            .poll_close(cx)
            .map_err(io::Error::other)
    }
}

impl<S> ClientStream for WsBytes<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Rx = tokio::io::ReadHalf<WsBytes<S>>;
    type Tx = tokio::io::WriteHalf<WsBytes<S>>;
    fn split(self) -> (Self::Rx, Self::Tx) {
        tokio::io::split(self)
    }
    fn certified(&self) -> Option<Certified> {
        self.certified.clone()
    }
}

impl<S> ClientRx for tokio::io::ReadHalf<WsBytes<S>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Frames are read whole by the WebSocket layer into its own buffer.
    const UNBUFFERED_WAIT: bool = false;
    fn try_read(&mut self, _: &mut bytes::BytesMut) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn poll_readable(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
