//! The `lmos-sidecar` binary in a process of its own, on ephemeral loopback
//! ports.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::WAIT;

/// Sends `signal` to the process `pid`, straight from libc so that a test
/// needs no `kill` binary on the machine; libc's result (0 when sent).
// kill(2) has no safe std API (`Child::kill` sends SIGKILL only).
#[allow(unsafe_code)]
pub fn signal(pid: u32, signal: libc::c_int) -> libc::c_int {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill takes no pointers; a wrong pid is an error return.
    unsafe { libc::kill(pid, signal) }
}

/// Sends `signal` to every process of the group `leader` leads (started
/// with `process_group(0)`): a program and what it started.
#[allow(unsafe_code)]
pub fn signal_group(leader: u32, signal: libc::c_int) -> libc::c_int {
    let group = libc::pid_t::try_from(leader).expect("a pid fits pid_t");
    // SAFETY: as in `signal`; a negative pid names the process group.
    unsafe { libc::kill(-group, signal) }
}

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

/// A sidecar process keeping its state in `dir` (the store on, as by
/// default), to be stopped and started again on the same directory.
pub fn on_directory<'a>(cmd: &'a mut Command, dir: &std::path::Path) -> &'a mut Command {
    cmd.env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "false")
        .env("LMOS_SIDECAR_STORE__DIR", dir)
}

/// A started sidecar process: its addresses from the ready line.
pub struct Started {
    pub process: Running,
    pub logs: std::sync::mpsc::Receiver<Value>,
    pub http: std::net::SocketAddr,
    pub mqtt: std::net::SocketAddr,
    pub mqtt5: std::net::SocketAddr,
}

impl Started {
    /// Starts `cmd` (with [`start_ready`]) and reads its addresses.
    pub fn start(cmd: &mut Command) -> Started {
        let (process, logs, ready) = start_ready(cmd);
        let addr = |key: &str| ready[key].as_str().unwrap().parse().unwrap();
        Started {
            http: addr("http"),
            mqtt: addr("mqtt"),
            mqtt5: addr("mqtt5"),
            process,
            logs,
        }
    }

    /// SIGTERM, as a deploy or a node drain stops it; waits for the exit
    /// and returns its status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let status = self.process.0.wait().unwrap();
        assert!(status.success(), "a SIGTERM stop exits 0: {status}");
        status
    }

    /// SIGKILL, as a crash or an out-of-memory kill: nothing is flushed.
    pub fn kill(mut self) {
        self.signal("KILL");
        let _ = self.process.0.wait();
    }

    fn signal(&mut self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.process.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The next log line whose message is `message` (JSON logs).
    pub fn log_line(&self, message: &str) -> Value {
        loop {
            let line = self
                .logs
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("the sidecar logs {message:?}"));
            if line["message"] == message {
                return line;
            }
        }
    }
}

/// A data directory of the test's own, removed when dropped.
pub struct DataDir(pub std::path::PathBuf);

impl DataDir {
    pub fn new(name: &str) -> DataDir {
        let dir = std::env::temp_dir().join(format!(
            "lmos-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary `bin` (a client command, say) with `stdin` as its input
/// until it ends by itself, within [`WAIT`]: exit code, stdout, stderr.
pub async fn run(bin: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the command ends by itself")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
