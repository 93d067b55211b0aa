//! What authentication costs a connecting client: sequential WebSocket
//! handshakes (HTTP Basic) and MQTT CONNECTs (username and password)
//! against an in-process sidecar, with authentication off, with it on and
//! the credential cache (`auth.cache_ttl_ms`, the default), and with it on
//! and no cache (`auth.cache_ttl_ms = 0`: an Argon2 verification per
//! connect, as before issue 30).
//!
//! ```sh
//! cargo bench --bench auth                 # 200 connects per row
//! AUTH_CONNECTS=1000 cargo bench --bench auth
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_sidecar::{Application, Config};
use lmos_testkit::bench::env_or;
use lmos_testkit::raw_mqtt::{packet, string};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

#[derive(Clone, Copy)]
enum Mode {
    Off,
    Cached,
    Uncached,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "auth off",
            Mode::Cached => "auth on, cache (default)",
            Mode::Uncached => "auth on, no cache (Argon2 per connect)",
        }
    }
}

fn config(mode: Mode) -> Config {
    let mut c = Config::default();
    c.store.dir = lmos_testkit::bench::store_dir("auth");
    c.mqtt.listen = "127.0.0.1:0".parse().unwrap();
    c.mqtt.listen_v5 = "127.0.0.1:0".parse().unwrap();
    c.http.listen = "127.0.0.1:0".parse().unwrap();
    if matches!(mode, Mode::Off) {
        return c;
    }
    c.http.authentication = vec![HttpScheme::Basic];
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![PrincipalConfig {
        name: "agent".into(),
        password_hash: hash_password("agent-pw"),
        consume: vec!["*".into()],
        ..PrincipalConfig::default()
    }];
    if matches!(mode, Mode::Uncached) {
        c.auth.cache_ttl_ms = 0;
    }
    c
}

async fn websocket(http: SocketAddr) -> Result<()> {
    let mut request = format!("ws://{http}/lmos").into_client_request()?;
    let basic = base64::engine::general_purpose::STANDARD.encode("agent:agent-pw");
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    headers.insert(
        "Authorization",
        HeaderValue::from_str(&format!("Basic {basic}"))?,
    );
    let (ws, _) = tokio_tungstenite::connect_async(request).await?;
    drop(ws);
    Ok(())
}

async fn mqtt(addr: SocketAddr, n: usize) -> Result<()> {
    let mut body = string(b"MQTT");
    body.extend([4, 0b1100_0010, 0, 60]);
    body.extend(string(format!("bench-{n}").as_bytes()));
    body.extend(string(b"agent"));
    body.extend(string(b"agent-pw"));
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    stream.write_all(&packet(0x10, &body)).await?;
    let mut ack = [0u8; 4];
    stream.read_exact(&mut ack).await?;
    if ack[0] != 0x20 || ack[3] != 0 {
        bail!("CONNACK {ack:?}");
    }
    // DISCONNECT, so the session ends at once.
    stream.write_all(&[0xE0, 0]).await?;
    Ok(())
}

/// Per connect: mean, p50, p99, in milliseconds.
fn summary(mut took: Vec<Duration>) -> String {
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = took.iter().sum::<Duration>() / took.len() as u32;
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    format!(
        "mean {:7.3} ms  p50 {:7.3} ms  p99 {:7.3} ms",
        ms(mean),
        ms(at(0.5)),
        ms(at(0.99))
    )
}

async fn row(mode: Mode, connects: usize) -> Result<()> {
    let app = Application::build(config(mode)).await?;
    let (http, mqtt_addr) = (app.http_addr(), app.mqtt_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));
    // Warm up (and fill the cache where there is one).
    websocket(http).await.context("WebSocket")?;
    mqtt(mqtt_addr, 0).await.context("MQTT")?;
    let mut ws = Vec::with_capacity(connects);
    let mut mq = Vec::with_capacity(connects);
    for n in 0..connects {
        let start = Instant::now();
        websocket(http).await?;
        ws.push(start.elapsed());
        let start = Instant::now();
        mqtt(mqtt_addr, n + 1).await?;
        mq.push(start.elapsed());
    }
    println!("{:<40} WebSocket  {}", mode.name(), summary(ws));
    println!("{:<40} MQTT 3.1.1 {}", "", summary(mq));
    let _ = stop.send(());
    let _ = server.await;
    Ok(())
}

fn main() -> Result<()> {
    let connects = env_or("AUTH_CONNECTS", 200);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        println!("{connects} sequential connects per row, each a new TCP connection");
        for mode in [Mode::Off, Mode::Cached, Mode::Uncached] {
            row(mode, connects).await?;
        }
        Ok(())
    })
}
