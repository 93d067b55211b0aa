//! What authentication costs a connecting client: sequential WebSocket
//! handshakes and MQTT CONNECTs against an in-process sidecar, with
//! authentication off, and with a password (HTTP Basic; Argon2), a static
//! bearer token and a JWT (ES256, `[auth.jwt]`, issue 46), each with the
//! credential cache (`auth.cache_ttl_ms`, the default) and without it
//! (`auth.cache_ttl_ms = 0`: a verification per connect). For the bearer
//! credentials also per request: `GET /things` with the token.
//!
//! ```sh
//! cargo bench --bench auth                 # 200 connects per row
//! AUTH_CONNECTS=1000 cargo bench --bench auth
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use lmos_sidecar::auth::credentials::{hash_password, sha256_hex};
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_sidecar::{Application, Config};
use lmos_testkit::bench::env_or;
use lmos_testkit::http_with;
use lmos_testkit::jwt::LocalIssuer;
use lmos_testkit::raw_mqtt::{packet, string};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// What the clients present.
#[derive(Clone, Copy, PartialEq)]
enum Cred {
    /// Authentication off.
    None,
    /// A password (HTTP Basic, MQTT password): Argon2.
    Password,
    /// A static bearer token (`token_sha256`; the MQTT password).
    Token,
    /// A JWT (ES256, `[auth.jwt]` with a JWK Set file; the MQTT password).
    Jwt,
}

#[derive(Clone, Copy)]
struct Mode {
    cred: Cred,
    cache: bool,
}

impl Mode {
    fn name(self) -> String {
        let cred = match self.cred {
            Cred::None => return "auth off".into(),
            Cred::Password => "password",
            Cred::Token => "static token",
            Cred::Jwt => "JWT ES256",
        };
        let cache = if self.cache { "cache" } else { "no cache" };
        format!("{cred}, {cache}")
    }
}

const TOKEN: &str = "bench-static-token-0123456789abcdef";

fn config(mode: Mode, issuer: &LocalIssuer) -> Config {
    let mut c = Config::default();
    c.store.dir = lmos_testkit::bench::store_dir("auth");
    c.mqtt.listen = "127.0.0.1:0".parse().unwrap();
    c.mqtt.listen_v5 = "127.0.0.1:0".parse().unwrap();
    c.http.listen = "127.0.0.1:0".parse().unwrap();
    if mode.cred == Cred::None {
        return c;
    }
    if mode.cred == Cred::Jwt {
        issuer.configure(&mut c);
    }
    c.http.authentication = vec![HttpScheme::Basic, HttpScheme::Bearer];
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![PrincipalConfig {
        name: "agent".into(),
        password_hash: hash_password("agent-pw"),
        token_sha256: sha256_hex(TOKEN.as_bytes()),
        consume: vec!["*".into()],
        ..PrincipalConfig::default()
    }];
    if !mode.cache {
        c.auth.cache_ttl_ms = 0;
    }
    c
}

/// The `Authorization` header and the MQTT password of `cred`.
fn secrets(cred: Cred, jwt: &str) -> (String, String) {
    match cred {
        Cred::None | Cred::Password => {
            let basic = base64::engine::general_purpose::STANDARD.encode("agent:agent-pw");
            (format!("Basic {basic}"), "agent-pw".into())
        }
        Cred::Token => (format!("Bearer {TOKEN}"), TOKEN.into()),
        Cred::Jwt => (format!("Bearer {jwt}"), jwt.into()),
    }
}

async fn websocket(http: SocketAddr, authorization: &str) -> Result<()> {
    let mut request = format!("ws://{http}/lmos").into_client_request()?;
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    headers.insert("Authorization", HeaderValue::from_str(authorization)?);
    let (ws, _) = tokio_tungstenite::connect_async(request).await?;
    drop(ws);
    Ok(())
}

async fn mqtt(addr: SocketAddr, n: usize, password: &str) -> Result<()> {
    let mut body = string(b"MQTT");
    body.extend([4, 0b1100_0010, 0, 60]);
    body.extend(string(format!("bench-{n}").as_bytes()));
    body.extend(string(b"agent"));
    body.extend(string(password.as_bytes()));
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

async fn row(mode: Mode, connects: usize, issuer: &LocalIssuer) -> Result<()> {
    let app = Application::build(config(mode, issuer)).await?;
    let (http, mqtt_addr) = (app.http_addr(), app.mqtt_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));
    let jwt = issuer.token("bench-user", "things", 3600);
    let (authorization, password) = secrets(mode.cred, &jwt);
    // Warm up (and fill the cache where there is one).
    websocket(http, &authorization).await.context("WebSocket")?;
    mqtt(mqtt_addr, 0, &password).await.context("MQTT")?;
    let mut ws = Vec::with_capacity(connects);
    let mut mq = Vec::with_capacity(connects);
    let mut get = Vec::with_capacity(connects);
    let bearer = matches!(mode.cred, Cred::Token | Cred::Jwt);
    for n in 0..connects {
        let start = Instant::now();
        websocket(http, &authorization).await?;
        ws.push(start.elapsed());
        let start = Instant::now();
        mqtt(mqtt_addr, n + 1, &password).await?;
        mq.push(start.elapsed());
        if bearer {
            let start = Instant::now();
            let headers = [("Authorization", authorization.as_str())];
            let answer = http_with(http, "GET", "/things", &headers, b"").await;
            if answer.status != 200 {
                bail!("GET /things: {}", answer.status);
            }
            get.push(start.elapsed());
        }
    }
    println!("{:<28} WebSocket  {}", mode.name(), summary(ws));
    println!("{:<28} MQTT 3.1.1 {}", "", summary(mq));
    if bearer {
        println!("{:<28} HTTP GET   {}", "", summary(get));
    }
    let _ = stop.send(());
    let _ = server.await;
    Ok(())
}

fn main() -> Result<()> {
    let connects = env_or("AUTH_CONNECTS", 200);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        println!("{connects} sequential connects per row, each a new TCP connection");
        let issuer = LocalIssuer::new();
        let rows = [
            (Cred::None, true),
            (Cred::Password, true),
            (Cred::Password, false),
            (Cred::Token, true),
            (Cred::Token, false),
            (Cred::Jwt, true),
            (Cred::Jwt, false),
        ];
        for (cred, cache) in rows {
            row(Mode { cred, cache }, connects, &issuer).await?;
        }
        Ok(())
    })
}
