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

/// Resolves when whoever read standard output has gone (`| head -1`
/// exited): a command that waits for messages would otherwise notice only
/// at its next write, which may never come. A pipe's writing end reports an
/// error as soon as it has no reader; a terminal or a file never resolves
/// this (epoll refuses a file: then nothing is watched).
pub async fn closed() {
    #[cfg(unix)]
    if let Some(stdout) = watched_stdout() {
        if stdout.ready(tokio::io::Interest::ERROR).await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// Standard output registered with the runtime for its errors only, on a
/// descriptor of its own (a duplicate: the same pipe, closed with it).
// Registering a descriptor is unsafe in tokio (it must stay open while
// registered); an `OwnedFd` moved into the registration guarantees it.
#[cfg(unix)]
#[allow(unsafe_code)]
fn watched_stdout() -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    // SAFETY: `fd` is open and owned by the AsyncFd until it is dropped;
    // nothing else can close or replace it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::ERROR) }.ok()
}

fn failed(e: std::io::Error) -> ClientError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ClientError::PipeClosed
    } else {
        ClientError::Output(e.to_string())
    }
}
