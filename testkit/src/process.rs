//! The `lmos-sidecar` binary in a process of its own, on ephemeral loopback
//! ports.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::WAIT;

/// A command running the sidecar binary (`env!("CARGO_BIN_EXE_lmos-sidecar")`,
/// which only the package's own tests know: hence [`crate::sidecar_command`]).
pub fn sidecar(bin: &str) -> Command {
    let mut c = Command::new(bin);
    c.env_remove("RUST_LOG");
    // Many run at once: none may take the default data directory. Tests of
    // what survives a restart set a directory of their own.
    c.env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true");
    c
}

/// [`process::sidecar`](crate::process::sidecar) with the binary Cargo
/// built for the calling test.
#[macro_export]
macro_rules! sidecar_command {
    () => {
        $crate::process::sidecar(env!("CARGO_BIN_EXE_lmos-sidecar"))
    };
}

pub fn ephemeral_flags(c: &mut Command) -> &mut Command {
    c.args([
        "--mqtt-addr",
        "127.0.0.1:0",
        "--mqtt5-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ])
}

/// Kills the child if a test fails half-way.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the sidecar on port 0 with JSON logs; its log lines, and the
/// `Sidecar ready.` one.
pub fn start_ready(cmd: &mut Command) -> (Running, std::sync::mpsc::Receiver<Value>, Value) {
    ephemeral_flags(cmd)
        .args(["--log-format", "json"])
        .stdout(Stdio::piped());
    let mut child = Running(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let ready = loop {
        let line = rx
            .recv_timeout(WAIT)
            .expect("the sidecar logs that it is ready");
        if line["message"] == "Sidecar ready." {
            break line;
        }
    };
    (child, rx, ready)
}

/// How a test stops a sidecar process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, as an orchestrator stops a container: a graceful shutdown.
    Term,
    /// SIGKILL: a crash, nothing said or flushed.
    Kill,
}

/// A sidecar process keeping its state in a data directory (`store.dir`),
/// for tests of what survives a restart: start one, stop it with
/// [`Stop::Term`] or [`Stop::Kill`], start another on the same directory.
/// Ports are ephemeral, so each run has its own.
pub struct OnDisk {
    pub child: Running,
    pub log: std::sync::mpsc::Receiver<Value>,
    /// `host:port` of the HTTP port (WebSocket at `ws://{http}/lmos`).
    pub http: std::net::SocketAddr,
    pub mqtt: std::net::SocketAddr,
}

impl OnDisk {
    /// Starts `cmd` (see [`crate::sidecar_command`]) with its store in `dir`.
    pub fn start(mut cmd: Command, dir: &std::path::Path) -> OnDisk {
        cmd.env("LMOS_SIDECAR_STORE__DIR", dir)
            .env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "false");
        OnDisk::run(cmd)
    }

    /// Starts `cmd` with a memory-only store (as [`sidecar`] sets it).
    pub fn start_memory_only(mut cmd: Command) -> OnDisk {
        cmd.env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true");
        OnDisk::run(cmd)
    }

    fn run(mut cmd: Command) -> OnDisk {
        let (child, log, ready) = start_ready(&mut cmd);
        let addr = |name: &str| ready[name].as_str().unwrap().parse().unwrap();
        OnDisk {
            http: addr("http"),
            mqtt: addr("mqtt"),
            child,
            log,
        }
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/lmos", self.http)
    }

    /// Stops the process and waits for it to exit (10 s at most); its exit
    /// status.
    pub fn stop(mut self, how: Stop) -> std::process::ExitStatus {
        let signal = match how {
            Stop::Term => libc::SIGTERM,
            Stop::Kill => libc::SIGKILL,
        };
        let pid = libc::pid_t::try_from(self.child.0.id()).unwrap();
        // SAFETY: signals a child of this process, which has not been
        // waited for (Running waits only when dropped).
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sidecar did not exit within 10 s of {how:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The first log line (JSON) whose message is `message`, within
    /// [`WAIT`](crate::WAIT).
    pub fn logged(&self, message: &str) -> Value {
        loop {
            let line = self
                .log
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("the sidecar logs {message:?}"));
            if line["message"] == message {
                return line;
            }
        }
    }
}

/// A fresh, empty directory under the system's temporary one, removed when
/// dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "lmos-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
