//! MCP over stdio: the server is a child process the sidecar starts; one
//! JSON-RPC message per line on its stdin and stdout, its stderr logged.
//!
//! Every line is bounded (`max_message_bytes`; stderr lines 1 KiB): past
//! the bound the rest of the line is skipped, never buffered, and the
//! request it answered (when its ID can be seen) fails with `TooLarge`.
//! The child's exit is the connection's loss, with its exit status.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::session::{overlong_id, Session};
use crate::config::ImportConfig;
use crate::imports::upstream::UpstreamError;

/// The last bytes of an overlong line kept, for its ID.
const TAIL: usize = 64;
/// Longest stderr line logged, in bytes.
const STDERR_LINE: usize = 1024;
/// Stderr lines logged per second; the rest are counted.
const STDERR_RATE: u32 = 20;

/// A running child and its stdin.
#[derive(Debug)]
pub(crate) struct Stdio {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// Fired by `close` (or a drop): the child is killed and reaped.
    stop: CancellationToken,
    reaper: Mutex<Option<JoinHandle<()>>>,
    pid: Option<u32>,
}

impl Stdio {
    /// Starts `config.command`, its stdout read into `session`.
    pub(crate) fn spawn(
        config: &ImportConfig,
        session: Arc<Session>,
    ) -> Result<Stdio, UpstreamError> {
        let Some((program, args)) = config.command.split_first() else {
            return Err(UpstreamError::Unreachable("no command to start".into()));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .envs(&config.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| UpstreamError::Unreachable(format!("cannot start `{program}`: {e}")))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let inner = Arc::new(Inner {
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            stop: CancellationToken::new(),
            reaper: Mutex::new(None),
            pid: child.id(),
        });
        let stdout_closed = CancellationToken::new();
        if let Some(stdout) = stdout {
            let reading = read_stdout(
                stdout,
                config.max_message_bytes,
                session.clone(),
                inner.clone(),
            );
            let closed = stdout_closed.clone();
            tokio::spawn(async move {
                reading.await;
                closed.cancel();
            });
        }
        if let Some(stderr) = stderr {
            tokio::spawn(log_stderr(stderr, config.name.clone()));
        }
        let reaper = reap(child, inner.stop.clone(), stdout_closed, session);
        *inner.reaper.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::spawn(reaper));
        Ok(Stdio { inner })
    }

    pub(crate) async fn send(&self, message: &Value) -> Result<(), UpstreamError> {
        self.inner.send(message).await
    }

    /// The child's process ID (while it runs).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// Kills the child and waits until it is reaped.
    pub(crate) async fn close(&self) {
        // Its stdin closed first: a grandchild sharing it sees the end too.
        if let Ok(mut stdin) = self.inner.stdin.try_lock() {
            stdin.take();
        }
        self.inner.stop.cancel();
        let reaper = self
            .inner
            .reaper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(reaper) = reaper {
            let _ = tokio::time::timeout(Duration::from_secs(5), reaper).await;
        }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl Inner {
    async fn send(&self, message: &Value) -> Result<(), UpstreamError> {
        let mut line =
            serde_json::to_vec(message).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let Some(stdin) = stdin.as_mut() else {
            return Err(UpstreamError::Unreachable(
                "the server's stdin is closed".into(),
            ));
        };
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        written
            .await
            .map_err(|e| UpstreamError::Unreachable(format!("cannot write to the server: {e}")))
    }
}

/// Waits for the child's exit (the connection's loss) or for `stop`.
async fn reap(
    mut child: Child,
    stop: CancellationToken,
    stdout_closed: CancellationToken,
    session: Arc<Session>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        () = stop.cancelled() => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return;
        }
        () = stdout_closed.cancelled() => {
            // Its stdout closed: it is exiting, or broken (then killed).
            match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    session.lose("the server closed its stdout");
                    return;
                }
            }
        }
    };
    let reason = match status {
        Ok(status) => format!("the server exited ({status})"),
        Err(e) => format!("the server is gone ({e})"),
    };
    session.lose(&reason);
}

async fn read_stdout(
    mut stdout: impl AsyncRead + Unpin,
    max: usize,
    session: Arc<Session>,
    inner: Arc<Inner>,
) {
    let mut lines = Lines::new(max);
    let mut buf = vec![0; 64 * 1024];
    let mut frames = Vec::new();
    while let Ok(n @ 1..) = stdout.read(&mut buf).await {
        lines.push(&buf[..n], &mut frames);
        for frame in frames.drain(..) {
            match frame {
                Frame::Line(line) if line.trim_ascii().is_empty() => {}
                Frame::Line(line) => {
                    for reply in session.receive(&line).replies {
                        // Not awaited here: a child not reading its stdin
                        // must not stop its stdout being read.
                        let inner = inner.clone();
                        tokio::spawn(async move { inner.send(&reply).await });
                    }
                }
                Frame::Overlong { head, tail } => {
                    session.overlong(overlong_id(&head, &tail), UpstreamError::TooLarge(max));
                }
            }
        }
    }
}

/// The child's stderr, line by line: escaped, truncated, rate-limited.
async fn log_stderr(mut stderr: impl AsyncRead + Unpin, name: String) {
    let mut lines = Lines::new(STDERR_LINE);
    let mut buf = vec![0; 8 * 1024];
    let mut frames = Vec::new();
    let (mut window, mut logged, mut dropped) = (Instant::now(), 0, 0u64);
    while let Ok(n @ 1..) = stderr.read(&mut buf).await {
        lines.push(&buf[..n], &mut frames);
        for frame in frames.drain(..) {
            if window.elapsed() >= Duration::from_secs(1) {
                if dropped > 0 {
                    tracing::info!(upstream = %name, dropped, "imports: stderr lines not logged (too many)");
                }
                (window, logged, dropped) = (Instant::now(), 0, 0);
            }
            if logged >= STDERR_RATE {
                dropped += 1;
                continue;
            }
            logged += 1;
            let (line, cut) = match frame {
                Frame::Line(line) => (line, false),
                Frame::Overlong { head, .. } => (head, true),
            };
            let line = String::from_utf8_lossy(&line);
            tracing::info!(upstream = %name, line = ?line, truncated = cut, "imports: server stderr");
        }
    }
    if dropped > 0 {
        tracing::info!(upstream = %name, dropped, "imports: stderr lines not logged (too many)");
    }
}

/// A line of a child's output.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// A whole line, without its `\n` (or `\r\n`).
    Line(Vec<u8>),
    /// A line past the bound: its first `max` bytes and its last few.
    Overlong { head: Vec<u8>, tail: Vec<u8> },
}

/// Splits bytes into lines of at most `max` bytes (sans-IO).
#[derive(Debug)]
pub(crate) struct Lines {
    max: usize,
    line: Vec<u8>,
    over: bool,
    tail: Vec<u8>,
}

impl Lines {
    pub(crate) fn new(max: usize) -> Lines {
        Lines {
            max,
            line: Vec::new(),
            over: false,
            tail: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, mut chunk: &[u8], out: &mut Vec<Frame>) {
        while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            self.take(&chunk[..end]);
            out.push(self.finish());
            chunk = &chunk[end + 1..];
        }
        self.take(chunk);
    }

    fn take(&mut self, part: &[u8]) {
        let room = self.max.saturating_sub(self.line.len());
        if !self.over && part.len() <= room {
            self.line.extend_from_slice(part);
            return;
        }
        if !self.over {
            self.line.extend_from_slice(&part[..room]);
            self.over = true;
        }
        self.tail
            .extend_from_slice(&part[part.len().saturating_sub(TAIL)..]);
        let excess = self.tail.len().saturating_sub(TAIL);
        self.tail.drain(..excess);
    }

    fn finish(&mut self) -> Frame {
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.over) {
            let tail = std::mem::take(&mut self.tail);
            return Frame::Overlong { head: line, tail };
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Frame::Line(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut lines = Lines::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            lines.push(chunk, &mut out);
        }
        out
    }

    #[test]
    fn lines_split_across_chunks_and_crlf_come_out_whole() {
        let out = frames(100, &[b"{\"a\"", b":1}\r\n\n{", b"}\n{\"half"]);
        assert_eq!(
            out,
            vec![
                Frame::Line(b"{\"a\":1}".to_vec()),
                Frame::Line(vec![]),
                Frame::Line(b"{}".to_vec())
            ]
        );
    }

    #[test]
    fn an_overlong_line_keeps_only_its_head_and_tail_and_the_next_is_fine() {
        let long = vec![b'x'; 10_000];
        let out = frames(16, &[b"{\"id\":7,", &long, b"\"id\":8}\nok\n"]);
        let Frame::Overlong { head, tail } = &out[0] else {
            panic!("{out:?}");
        };
        assert_eq!(head.len(), 16);
        assert!(tail.len() <= TAIL && tail.ends_with(b"\"id\":8}"));
        assert_eq!(out[1], Frame::Line(b"ok".to_vec()));
        assert_eq!(out.len(), 2);
        // Exactly max bytes is no overlong line.
        assert_eq!(frames(2, &[b"ab\n"]), vec![Frame::Line(b"ab".to_vec())]);
    }
}
