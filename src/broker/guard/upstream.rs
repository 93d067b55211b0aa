//! The guard's own conversations with rumqttd: ending a session that has
//! expired ([`super::sessions`] decides when).

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;

use crate::broker::engine::Engine;

use super::packet::{self, Connect};

/// How long a wipe may take before the guard gives up on it.
const WIPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Ends rumqttd's session of `client_id`: a clean CONNECT (which discards
/// what rumqttd kept) and a DISCONNECT (which ends the clean session it
/// opened). Returns once rumqttd has accepted the clean CONNECT.
pub async fn wipe(engine: &Engine, client_id: &str) -> std::io::Result<()> {
    let talk = async {
        let connect = packet::encode_connect(&Connect::own(client_id), true, 60, None)
            .map_err(std::io::Error::other)?;
        let mut stream = engine.open(&connect).await?;
        let mut buf = BytesMut::with_capacity(64);
        loop {
            if let Ok(Some(h)) = packet::frame(&buf, 4096) {
                if h.kind() != packet::CONNACK || buf.get(h.header_len + 1) != Some(&0) {
                    return Err(std::io::Error::other("rumqttd refused the wipe"));
                }
                break;
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        // The CONNACK says the router has discarded the kept session. A
        // connection of the client that overtakes this DISCONNECT takes
        // this clean session over, which leaves nothing behind either.
        crate::broker::probe::leave(&mut stream, &packet::disconnect(0)).await
    };
    tokio::time::timeout(WIPE_TIMEOUT, talk)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}
