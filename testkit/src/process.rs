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
