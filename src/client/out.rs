//! Standard output for the client. `println!` panics when a write fails,
//! and Rust ignores SIGPIPE, so `lmos-sidecar things | head -1` would end in
//! a panic; here a closed pipe is [`ClientError::PipeClosed`] (the command
//! ends quietly) and any other failure an error the user reads.

use std::io::Write;

use super::ClientError;

/// Writes `text` and a newline, and flushes, so each line is out (and a
/// failure known) before the next message is awaited.
pub fn line(text: &str) -> Result<(), ClientError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(failed)
}

/// Writes `text` as it is (no newline added), and flushes.
pub fn text(text: &str) -> Result<(), ClientError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(failed)
}

fn failed(e: std::io::Error) -> ClientError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ClientError::PipeClosed
    } else {
        ClientError::Output(e.to_string())
    }
}
