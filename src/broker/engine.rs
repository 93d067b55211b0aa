//! The way into rumqttd for connections the sidecar terminates itself (the
//! guard's, the probes'): a direct link to rumqttd's router per connection
//! (`vendor/rumqttd/PATCHES.md`, patch 10), which parses what the guard
//! writes into the router's buffer and encodes what the router sends when
//! the guard reads, in the guard's own tasks.
//!
//! It replaced an in-memory pipe to rumqttd's MQTT 5 server (issue 16), and
//! that a loopback TCP connection per client. Through the pipe, every
//! packet was copied into it and out, and woke a second task on the
//! server's thread, which parsed it again and woke the router: about a
//! sixth of the CPU an MQTT fan-out took. The bytes and the rules are the
//! server's own (CONNECT checks, keep-alive, will delay), so the guard
//! cannot tell the difference.

use std::io;

/// A connection to the engine: read what rumqttd sends, write what it reads.
pub type EngineStream = rumqttd::DirectStream;
/// Its reading half: what rumqttd sends.
pub type EngineRx = rumqttd::DirectRx;
/// Its writing half: what rumqttd reads.
pub type EngineTx = rumqttd::DirectTx;

/// Opens connections to rumqttd's router; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    direct: rumqttd::Direct,
}

impl Engine {
    pub(super) fn new(direct: rumqttd::Direct) -> Engine {
        Engine { direct }
    }

    /// A new connection opened with `connect` (a whole MQTT 5 CONNECT);
    /// its first read is rumqttd's CONNACK. Fails once the router has
    /// stopped, or for a CONNECT rumqttd drops without an answer.
    pub async fn open(&self, connect: &[u8]) -> io::Result<EngineStream> {
        self.direct.open(connect).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use rumqttd::{Broker, Config, ConnectionSettings, RouterConfig, ServerSettings};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A bare rumqttd with only its MQTT 5 server, on a thread of its own.
    fn engine() -> Engine {
        let server = ServerSettings {
            name: "v5".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: None,
            next_connection_delay_ms: 0,
            connections: ConnectionSettings {
                connection_timeout_ms: 5_000,
                max_payload_size: 1 << 20,
                max_inflight_count: 100,
                auth: None,
                external_auth: None,
                dynamic_filters: true,
            },
        };
        let mut broker = Broker::new(Config {
            router: RouterConfig {
                max_connections: 10_000,
                max_outgoing_packet_count: 200,
                max_segment_size: 1 << 20,
                max_segment_count: 10,
                ..Default::default()
            },
            v5: Some(HashMap::from([("v5".to_owned(), server)])),
            ..Default::default()
        });
        let engine = Engine::new(broker.direct("v5").unwrap());
        std::thread::spawn(move || {
            let _ = broker.start();
        });
        engine
    }

    /// The probe's CONNECT (MQTT 5, clean start), then the CONNACK.
    async fn connected(engine: &Engine, client_id: &str) -> EngineStream {
        let mut stream = engine
            .open(&super::super::probe::connect_packet(client_id))
            .await
            .unwrap();
        let mut ack = [0u8; 2];
        stream.read_exact(&mut ack).await.unwrap();
        assert_eq!(ack[0], 0x20, "CONNACK");
        let mut rest = vec![0u8; usize::from(ack[1])];
        stream.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest[1], 0, "accepted");
        stream
    }

    /// rumqttd's connection IDs are slab indices, reused at once. A client
    /// that sends DISCONNECT and closes its socket makes its link report the
    /// closed socket by ID, and the router may have ended the connection
    /// already (on the DISCONNECT) and given the ID to a client connecting
    /// meanwhile; that report must not end that client
    /// (`vendor/rumqttd/PATCHES.md`, patch 8). Leaving and connecting run
    /// side by side on several tasks, so that the router sees them in every
    /// order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_link_that_left_never_ends_the_client_given_its_id() {
        let engine = engine();
        let churn = (0..8).map(|task| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut stayed = Vec::new();
                let mut leaving = connected(&engine, &format!("leaving-{task}-0")).await;
                for i in 1..100 {
                    let leave = async {
                        leaving.write_all(&[0xE0, 0]).await.unwrap();
                    };
                    let id = format!("staying-{task}-{i}");
                    let (_, staying) = tokio::join!(leave, connected(&engine, &id));
                    stayed.push(staying);
                    leaving = connected(&engine, &format!("leaving-{task}-{i}")).await;
                }
                stayed
            })
        });
        let mut stayed = Vec::new();
        for task in churn.collect::<Vec<_>>() {
            stayed.extend(task.await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut ended = Vec::new();
        for (i, s) in stayed.iter_mut().enumerate() {
            let mut pong = [0u8; 2];
            let alive = async {
                s.write_all(&[0xC0, 0]).await?;
                s.read_exact(&mut pong).await
            };
            match tokio::time::timeout(Duration::from_secs(5), alive).await {
                Ok(Ok(_)) if pong == [0xD0, 0] => {}
                other => ended.push((i, format!("{other:?}"))),
            }
        }
        assert!(
            ended.is_empty(),
            "{} ended by another's link: {ended:?}",
            ended.len()
        );
    }

    /// What rumqttd's server does with such CONNECTs, the direct link does:
    /// keep-alive 0 is dropped without a word, an empty client ID that
    /// wants its session kept gets CONNACK 0x85 and the end.
    #[tokio::test]
    async fn connects_the_server_refuses_are_refused() {
        let engine = engine();
        // MQTT 5, flags, keep-alive, no properties, client ID.
        let connect = |flags: u8, keep_alive: u8, id: &[u8]| {
            let mut p = vec![
                0x10, 0, 0, 4, b'M', b'Q', b'T', b'T', 5, flags, 0, keep_alive, 0,
            ];
            p.extend([0, id.len() as u8]);
            p.extend(id);
            p[1] = (p.len() - 2) as u8;
            p
        };
        let zero = engine.open(&connect(0x02, 0, b"z")).await.err();
        assert_eq!(zero.map(|e| e.kind()), Some(io::ErrorKind::InvalidData));

        let mut nameless = engine.open(&connect(0x00, 60, b"")).await.unwrap();
        let mut got = Vec::new();
        nameless.read_to_end(&mut got).await.unwrap();
        assert_eq!(got[..4], [0x20, 3, 0, 0x85], "{got:?}");

        // The same with a clean start is accepted, under a name of rumqttd's.
        let mut anonymous = engine.open(&connect(0x02, 60, b"")).await.unwrap();
        let mut ack = [0u8; 64];
        let n = anonymous.read(&mut ack).await.unwrap();
        assert_eq!(ack[..4], [0x20, ack[1], 0, 0], "{:?}", &ack[..n]);
        // Property 0x12: the assigned client identifier.
        assert!(
            ack[..n].windows(9).any(|w| w == b"\x12\x00\x27rumqtt"),
            "{:?}",
            &ack[..n]
        );
    }
    /// A DISCONNECT with a reason code and no property length (`E0 01 00`,
    /// as the guard's own wipe of a session writes it, and as MQTT 5
    /// allows) ends the connection at once. rumqttd read it as incomplete
    /// and waited for more (`vendor/rumqttd/PATCHES.md`, patch 11): every
    /// wipe took a second, and a client starting clean over a kept session
    /// timed out waiting for its CONNACK (Paho's `test_session_expiry`).
    #[tokio::test]
    async fn a_disconnect_with_only_a_reason_code_ends_the_link_at_once() {
        let engine = engine();
        for disconnect in [&[0xE0, 0][..], &[0xE0, 1, 0], &[0xE0, 2, 0, 0]] {
            let mut link = connected(&engine, "leaving").await;
            link.write_all(disconnect).await.unwrap();
            let mut rest = Vec::new();
            let ended =
                tokio::time::timeout(Duration::from_millis(500), link.read_to_end(&mut rest));
            assert!(ended.await.is_ok(), "{disconnect:?} ended the link");
        }
    }
}
