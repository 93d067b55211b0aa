//! rumqttd gives no readiness signal and only logs a failed bind. The sidecar
//! connects to each listener, publishes a token on a topic only it knows, and
//! waits for its own bus link to receive it: that proves the listener is up
//! *and* belongs to this broker (not to another process that took the port
//! between the sidecar's check and rumqttd's bind).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttVersion {
    V311,
    V5,
}

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

/// CONNECT with clean session and keepalive 60 s (rumqttd refuses 0).
fn connect_packet(version: MqttVersion, client_id: &str) -> Vec<u8> {
    let mut body = string(b"MQTT");
    match version {
        MqttVersion::V311 => body.extend([0x04, 0x02, 0x00, 0x3C]),
        MqttVersion::V5 => body.extend([0x05, 0x02, 0x00, 0x3C, 0x00]),
    }
    body.extend(string(client_id.as_bytes()));
    with_length(0x10, body)
}

/// PUBLISH at QoS 0.
fn publish_packet(version: MqttVersion, topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = string(topic.as_bytes());
    if version == MqttVersion::V5 {
        body.push(0x00);
    }
    body.extend(payload);
    with_length(0x30, body)
}

/// One probe: the token is the payload, so a late answer to an earlier
/// attempt cannot be mistaken for this one.
async fn try_once(
    addr: SocketAddr,
    version: MqttVersion,
    topic: &str,
    token: &str,
) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(&connect_packet(version, token)).await?;
    let mut ack = [0u8; 4];
    stream.read_exact(&mut ack).await?;
    // CONNACK; byte 3 is the 3.1.1 return code or the MQTT 5 reason code.
    if ack[0] != 0x20 || ack[3] != 0 {
        return Ok(false);
    }
    stream
        .write_all(&publish_packet(version, topic, token.as_bytes()))
        .await?;
    stream.write_all(&[0xE0, 0x00]).await?;
    Ok(true)
}

/// Waits until the listener at `addr` delivers a probe to `seen`, the
/// sidecar's own link, within `timeout`.
pub async fn wait_ready(
    addr: SocketAddr,
    version: MqttVersion,
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
        let sent = tokio::time::timeout(
            Duration::from_millis(500),
            try_once(addr, version, topic, &token),
        );
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
        for v in [MqttVersion::V311, MqttVersion::V5] {
            let p = connect_packet(v, "id");
            assert_eq!(p[1] as usize, p.len() - 2);
            let p = publish_packet(v, "a/b", b"x");
            assert_eq!(p[1] as usize, p.len() - 2);
        }
    }
}
