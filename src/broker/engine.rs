//! The way into rumqttd for connections the sidecar terminates itself (the
//! guard's, the probes'): an in-memory pipe per connection, handed to
//! rumqttd's MQTT 5 server as if its listener had accepted it
//! (`vendor/rumqttd/PATCHES.md`, patch 6).
//!
//! A loopback TCP connection per MQTT client cost the process two more file
//! descriptors (the guard's end and rumqttd's) and each packet two more
//! trips through the kernel. With pipes a client costs one descriptor, its
//! own socket.

use std::io;

use tokio::io::DuplexStream;

/// Bytes a pipe buffers in each direction before its writer waits for the
/// reader, as a socket's buffer would. rumqttd writes a batch of
/// notifications at a time; a few batches fit.
const PIPE_BUFFER: usize = 64 * 1024;

/// A connection to the engine: read what rumqttd sends, write what it reads.
pub type EngineStream = DuplexStream;

/// Opens connections to rumqttd's MQTT 5 server; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    intake: rumqttd::Intake,
}

impl Engine {
    pub(super) fn new(intake: rumqttd::Intake) -> Engine {
        Engine { intake }
    }

    /// A new connection; rumqttd expects a CONNECT on it first. Fails only
    /// once the broker's server has stopped.
    pub fn connect(&self) -> io::Result<EngineStream> {
        self.intake.connect(PIPE_BUFFER)
    }
}
