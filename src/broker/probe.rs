//! rumqttd gives no readiness signal and only logs a failed bind. The sidecar
//! connects through the [engine](super::engine), publishes a token on a topic
//! only it knows, and waits for its own bus link to receive it: that proves
//! the router takes connections and routes.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::engine::Engine;

fn with_length(first: u8, body: Vec<u8>) -> Vec<u8> {
    assert!(body.len() < 128, "probe packets are small");
    let mut packet = vec![first, body.len() as u8];
    packet.extend(body);
    packet
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u16).to_be_bytes().to_vec();
    out.extend(s);
    out
}

/// An MQTT 5 CONNECT with clean start and keepalive 60 s (rumqttd
/// refuses 0).
pub(super) fn connect_packet(client_id: &str) -> Vec<u8> {
    let mut body = string(b"MQTT");
    body.extend([0x05, 0x02, 0x00, 0x3C, 0x00]);
    body.extend(string(client_id.as_bytes()));
    with_length(0x10, body)
}

/// An MQTT 5 PUBLISH at QoS 0.
fn publish_packet(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = string(topic.as_bytes());
    body.push(0x00);
    body.extend(payload);
    with_length(0x30, body)
}

/// How long rumqttd may take to close a connection after its DISCONNECT.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(1);

/// Ends a conversation with rumqttd: DISCONNECT, then read (and discard)
/// until rumqttd closes, for at most a second.
///
/// Closing first races rumqttd. Its router ends the connection on the
/// DISCONNECT and frees the connection ID; if the socket closes before the
/// router's goodbye reaches the link, the link reports the disconnection
/// once more, by ID, and the router ends whichever connection has been
/// given that ID meanwhile: a client that just connected.
pub(crate) async fn leave<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    disconnect: &[u8],
) -> std::io::Result<()> {
    stream.write_all(disconnect).await?;
    stream.flush().await?;
    let mut sink = [0u8; 256];
    let _ = tokio::time::timeout(LEAVE_TIMEOUT, async {
        while stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
    Ok(())
}

/// One probe: the token is the payload, so a late answer to an earlier
/// attempt cannot be mistaken for this one.
async fn try_once(engine: &Engine, topic: &str, token: &str) -> std::io::Result<bool> {
    let mut stream = engine.open(&connect_packet(token)).await?;
    let mut ack = [0u8; 4];
    stream.read_exact(&mut ack).await?;
    // CONNACK; byte 3 is the reason code.
    if ack[0] != 0x20 || ack[3] != 0 {
        return Ok(false);
    }
    stream
        .write_all(&publish_packet(topic, token.as_bytes()))
        .await?;
    leave(&mut stream, &[0xE0, 0x00]).await?;
    Ok(true)
}

/// One liveness check that nobody else sees: CONNECT (a fixed client ID,
/// so that rumqttd's record of past clients does not grow), a CONNACK
/// accepting it (which rumqttd's router sends, so the router is alive
/// too), DISCONNECT. A broker whose CONNECTs panic fails it.
pub async fn alive(engine: &Engine, client_id: &str) -> std::io::Result<bool> {
    let mut stream = engine.open(&connect_packet(client_id)).await?;
    let mut ack = [0u8; 4];
    stream.read_exact(&mut ack).await?;
    leave(&mut stream, &[0xE0, 0x00]).await?;
    Ok(ack[0] == 0x20 && ack[3] == 0)
}

/// Waits until a probe through `engine` reaches `seen`, the sidecar's own
/// link, within `timeout`.
pub async fn wait_ready(
    engine: &Engine,
    topic: &str,
    seen: &mut mpsc::UnboundedReceiver<String>,
    timeout: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut attempt = 0u32;
    while tokio::time::Instant::now() < deadline {
        attempt += 1;
        let token = format!(
            "lmos-sidecar-probe-{}-{attempt}",
            uuid::Uuid::new_v4().simple()
        );
        let sent =
            tokio::time::timeout(Duration::from_millis(500), try_once(engine, topic, &token));
        if let Ok(Ok(true)) = sent.await {
            let wait = tokio::time::sleep(Duration::from_millis(500));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    _ = &mut wait => break,
                    got = seen.recv() => match got {
                        Some(t) if t == token => return true,
                        Some(_) => continue,
                        None => return false,
                    },
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_have_consistent_lengths() {
        let p = connect_packet("id");
        assert_eq!(p[1] as usize, p.len() - 2);
        let p = publish_packet("a/b", b"x");
        assert_eq!(p[1] as usize, p.len() - 2);
    }
}
