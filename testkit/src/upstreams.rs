//! Upstreams for the import tests (`[[imports.mcp]]`, `[[imports.a2a]]`):
//! the fixture servers of `tests/imports/` started as children of the test
//! ([`Fixture`], killed on drop), a [`Relay`] that takes an upstream away
//! and brings it back on the same port (the fixtures bind port 0), the
//! `[[imports.*]]` entries that point a sidecar at them and their TOML for
//! a sidecar process, and the stdio child a sidecar started, found by a
//! mark in its environment ([`marked`], [`find_marked`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lmos_sidecar::config::{ImportConfig, ImportsConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

/// How long a fixture may take to say `LISTENING`: Python importing an SDK
/// on a loaded machine takes seconds.
pub const START_WAIT: Duration = Duration::from_secs(30);

/// The workspace's root (the sidecar package's directory).
pub fn workspace() -> PathBuf {
    let kit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    kit.parent()
        .expect("testkit/ is in the workspace")
        .to_owned()
}

/// `relative` (e.g. `tests/imports/mcp_server.py`) under the workspace,
/// as a string for a command line.
pub fn path(relative: &str) -> String {
    workspace().join(relative).display().to_string()
}

/// A fixture server: a child that printed `LISTENING <port>`, serving on
/// 127.0.0.1 until [`Fixture::stop`] or drop (its stdin stays open while
/// it runs: the fixtures exit when it closes).
pub struct Fixture {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub port: u16,
}

impl Fixture {
    /// Runs `program` with `args` in the workspace and waits for its
    /// `LISTENING <port>` line.
    pub async fn start(program: &str, args: &[&str]) -> Fixture {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(workspace())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} {args:?} runs ({e}); is it installed?"));
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let listening = async {
            while let Some(line) = lines.next_line().await.ok().flatten() {
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    return port.trim().parse::<u16>().ok();
                }
            }
            None
        };
        let port = tokio::time::timeout(START_WAIT, listening)
            .await
            .unwrap_or_else(|_| panic!("{program} {args:?} said LISTENING within {START_WAIT:?}"))
            .unwrap_or_else(|| panic!("{program} {args:?} ended before LISTENING <port>"));
        // Drained, so that a chatty fixture never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Fixture {
            child,
            _stdin: stdin,
            port,
        }
    }

    /// `python3 {script} {args}`, the script's path from the workspace root.
    pub async fn python(script: &str, args: &[&str]) -> Fixture {
        let script = path(script);
        let mut all = vec![script.as_str()];
        all.extend_from_slice(args);
        Fixture::start("python3", &all).await
    }

    /// `node {script} {args}`, once the SDK is installed in `tests/mcp`
    /// (where the fixture scripts load it from).
    pub async fn node(script: &str, args: &[&str]) -> Fixture {
        let script = path(script);
        assert!(
            workspace()
                .join("tests/mcp/node_modules/@modelcontextprotocol/sdk")
                .is_dir(),
            "the MCP TypeScript SDK is not installed: run `npm ci --prefix tests/mcp`"
        );
        let mut all = vec![script.as_str()];
        all.extend_from_slice(args);
        Fixture::start("node", &all).await
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// The child's process ID (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills it and waits until it is gone (its port closed).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A TCP relay on a port of its own to an upstream: the sidecar is pointed
/// at the relay, and the test takes the upstream away ([`Relay::down`]:
/// the port refuses, every connection is cut) and brings it (or a fresh
/// fixture on another port) back on the same address ([`Relay::up`]).
pub struct Relay {
    addr: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    /// Relays 127.0.0.1:{ephemeral} to `target`.
    pub async fn to(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            tasks: Arc::default(),
        };
        relay.serve(listener, target);
        relay
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{relay}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops listening and cuts every relayed connection.
    pub fn down(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Listens on the same port again, relaying to `target`.
    pub async fn up(&self, target: SocketAddr) {
        self.down();
        let deadline = tokio::time::Instant::now() + crate::WAIT;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                // The aborted listener closes on the runtime's next turn.
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the relay's port {} is free again: {e}", self.addr),
            }
        };
        self.serve(listener, target);
    }

    fn serve(&self, listener: TcpListener, target: SocketAddr) {
        let tasks = Arc::downgrade(&self.tasks);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Some(tasks) = tasks.upgrade() else { return };
                let pipe = tokio::spawn(relay_one(inbound, target));
                let mut tasks = tasks.lock().unwrap();
                tasks.retain(|t| !t.is_finished());
                tasks.push(pipe);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.down();
    }
}

async fn relay_one(mut inbound: TcpStream, target: SocketAddr) {
    let _ = inbound.set_nodelay(true);
    // Refused upstream: the inbound connection closes at once.
    if let Ok(mut outbound) = TcpStream::connect(target).await {
        let _ = outbound.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    }
}

/// `[[imports.mcp]]` by URL (Streamable HTTP), the other keys default.
pub fn mcp_url(name: &str, url: &str) -> ImportConfig {
    ImportConfig {
        name: name.into(),
        url: Some(url.into()),
        ..ImportConfig::default()
    }
}

/// `[[imports.mcp]]` started by the sidecar over stdio: `command`.
pub fn mcp_command(name: &str, command: &[&str]) -> ImportConfig {
    ImportConfig {
        name: name.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        ..ImportConfig::default()
    }
}

/// `[[imports.mcp]]` running `python3 {script} {args}` over stdio, the
/// script's path from the workspace root.
pub fn mcp_python(name: &str, script: &str, args: &[&str]) -> ImportConfig {
    let script = path(script);
    let mut command = vec!["python3", script.as_str()];
    command.extend_from_slice(args);
    mcp_command(name, &command)
}

/// `[[imports.a2a]]` by its Agent Card's URL.
pub fn a2a(name: &str, card_url: &str) -> ImportConfig {
    ImportConfig {
        name: name.into(),
        card_url: Some(card_url.into()),
        ..ImportConfig::default()
    }
}

/// The `[imports]` part of a sidecar's config file for `imports`.
pub fn imports_toml(imports: &ImportsConfig) -> String {
    #[derive(serde::Serialize)]
    struct File<'a> {
        imports: &'a ImportsConfig,
    }
    toml::to_string(&File { imports }).expect("imports serialize as TOML")
}

/// The environment variable [`marked`] sets on a command.
const MARK: &str = "LMOS_TEST_UPSTREAM_MARK";

/// `import` (a `command`) with a unique mark in its environment, so that
/// the test can find the child the sidecar starts ([`find_marked`]).
pub fn marked(mut import: ImportConfig) -> (ImportConfig, String) {
    let mark = uuid::Uuid::new_v4().to_string();
    import.env.insert(MARK.into(), mark.clone());
    (import, mark)
}

/// The running processes whose environment carries `mark` (Linux `/proc`).
pub fn find_marked(mark: &str) -> Vec<u32> {
    let needle = format!("{MARK}={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter(|pid| !is_zombie(*pid))
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Waits until exactly one process carries `mark`, and returns it.
pub async fn marked_process(mark: &str) -> u32 {
    let deadline = tokio::time::Instant::now() + START_WAIT;
    loop {
        if let [pid] = find_marked(mark)[..] {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no single process carries the mark {mark}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process's resident set, now and at its peak (`VmRSS`, `VmHWM`), in
/// KiB (Linux `/proc`).
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_imports_toml_reads_back_as_written() {
        let (stdio, _) = marked(mcp_python(
            "calc",
            "tests/imports/mcp_server.py",
            &["stdio"],
        ));
        let mut http = mcp_url("web", "http://127.0.0.1:1/mcp");
        http.timeout_ms = 1_000;
        let imports = ImportsConfig {
            mcp: vec![stdio, http],
            a2a: vec![a2a(
                "travel",
                "http://127.0.0.1:2/.well-known/agent-card.json",
            )],
        };
        let text = imports_toml(&imports);
        #[derive(serde::Deserialize)]
        struct File {
            imports: ImportsConfig,
        }
        let back: File = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        assert_eq!(back.imports, imports, "{text}");
        assert!(text.contains("[[imports.mcp]]"), "{text}");
        imports.check().unwrap();
    }

    /// A TCP server answering each connection's first bytes with `tag`.
    async fn tagging(tag: &'static [u8]) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0; 16];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        let _ = s.write_all(&[tag, &buf[..n]].concat()).await;
                    }
                });
            }
        });
        addr
    }

    async fn through(relay: &Relay) -> std::io::Result<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = TcpStream::connect(relay.addr()).await?;
        s.write_all(b"hi").await?;
        let mut got = vec![0; 4];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn the_relay_goes_down_and_comes_back_on_its_port_to_another_server() {
        let relay = Relay::to(tagging(b"1:").await).await;
        assert_eq!(through(&relay).await.unwrap(), b"1:hi");
        let mut open = TcpStream::connect(relay.addr()).await.unwrap();
        relay.down();
        tokio::task::yield_now().await;
        assert!(through(&relay).await.is_err(), "refused while down");
        let mut buf = [0; 4];
        let cut = tokio::io::AsyncReadExt::read(&mut open, &mut buf).await;
        assert!(matches!(cut, Ok(0) | Err(_)), "the open connection is cut");
        relay.up(tagging(b"2:").await).await;
        assert_eq!(through(&relay).await.unwrap(), b"2:hi");
    }
}
