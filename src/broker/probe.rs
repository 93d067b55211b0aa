//! rumqttd gives no readiness signal: the sidecar connects to each listener
//! with a bare MQTT CONNECT until it answers CONNACK.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttVersion {
    V311,
    V5,
}

/// CONNECT with clean session, keepalive 60 s (rumqttd refuses 0) and a fixed
/// client ID, so probes do not leave a new session entry behind every time.
fn connect_packet(version: MqttVersion) -> Vec<u8> {
    let client_id = b"lmos-sidecar-probe";
    let mut body = vec![0x00, 0x04, b'M', b'Q', b'T', b'T'];
    match version {
        MqttVersion::V311 => body.extend([0x04, 0x02, 0x00, 0x3C]),
        MqttVersion::V5 => body.extend([0x05, 0x02, 0x00, 0x3C, 0x00]),
    }
    body.extend((client_id.len() as u16).to_be_bytes());
    body.extend(client_id);
    let mut packet = vec![0x10, body.len() as u8];
    packet.extend(body);
    packet
}

async fn try_once(addr: SocketAddr, version: MqttVersion) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(&connect_packet(version)).await?;
    let mut ack = [0u8; 4];
    stream.read_exact(&mut ack).await?;
    // CONNACK, then (3.1.1) the return code or (5) flags + reason code.
    let accepted = ack[0] == 0x20 && ack[3] == 0;
    stream.write_all(&[0xE0, 0x00]).await.ok();
    Ok(accepted)
}

/// Waits until the listener at `addr` accepts an MQTT connection.
pub async fn wait_ready(addr: SocketAddr, version: MqttVersion, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        let attempt = tokio::time::timeout(Duration::from_millis(500), try_once(addr, version));
        if let Ok(Ok(true)) = attempt.await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_packets_have_consistent_lengths() {
        for v in [MqttVersion::V311, MqttVersion::V5] {
            let p = connect_packet(v);
            assert_eq!(p[1] as usize, p.len() - 2);
        }
    }
}
