//! A real OpenID provider for the tests: npm `oidc-provider` (pinned in
//! `tests/oidc/package-lock.json`, installed by `npm ci --prefix tests/oidc`,
//! which `.ci/run` does) running `tests/oidc/provider.mjs` on 127.0.0.1.
//! Its access tokens are JWTs for the requested resource (`aud`), signed
//! RS256, ES256 or EdDSA by the provider's own keys, which it publishes at
//! [`Provider::jwks_url`]. The child stops when the [`Provider`] drops (its
//! stdin closes), so a failing test never leaks it.
//!
//! Besides real tokens, the provider crafts the attack tokens it would never
//! issue ([`Forged`]): `alg: none`, HS256 keyed with its RSA public key, a
//! `kid` it never published. A wrong issuer is a second provider signing
//! with the same keys ([`Provider::start_sharing_keys`]). [`flow`]: the
//! authorization-code flow as the MCP SDKs run it, cookie-free.

mod flow;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use crate::WAIT;

/// The signing algorithm of a token; each has its own static client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
    EdDsa,
}

impl Alg {
    pub const ALL: [Alg; 3] = [Alg::Rs256, Alg::Es256, Alg::EdDsa];

    /// The JOSE name, as in the token's header and the sidecar's `algorithms`.
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
        }
    }

    fn client(self) -> &'static str {
        match self {
            Alg::Rs256 => "lmos-rs256",
            Alg::Es256 => "lmos-es256",
            Alg::EdDsa => "lmos-eddsa",
        }
    }
}

/// A token the provider would never issue, otherwise valid for its issuer.
#[derive(Clone, Copy, Debug)]
pub enum Forged {
    /// `alg: none`, no signature.
    AlgNone,
    /// HS256 keyed with the provider's RSA public key (PEM): alg confusion.
    HmacWithPublicKey,
    /// RS256 by a fresh key under a `kid` the provider never published.
    UnknownKid,
}

pub struct Provider {
    child: Child,
    stdin: Mutex<ChildStdin>,
    stdout: Mutex<Lines<BufReader<ChildStdout>>>,
    started: Value,
    keys_file: PathBuf,
}

/// The installed provider's directory; fails the test with the fix if
/// `npm ci` has not run.
fn dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/oidc");
    assert!(
        dir.join("node_modules/oidc-provider").is_dir(),
        "node-oidc-provider is not installed: run `npm ci --prefix tests/oidc` (.ci/run does this)"
    );
    dir
}

impl Provider {
    /// A provider at `http://127.0.0.1:{port}` with fresh keys.
    pub async fn start() -> Provider {
        Provider::spawn(&[], fresh_keys_file()).await
    }

    /// A provider whose issuer has a path (`http://127.0.0.1:{port}{path}`,
    /// e.g. `/realms/lmos`), for the path-inserted metadata forms.
    pub async fn start_at_path(path: &str) -> Provider {
        Provider::spawn(&["--path", path], fresh_keys_file()).await
    }

    /// A second provider, another issuer, signing with `other`'s keys (as
    /// they are now): its tokens verify against `other`'s JWKS but name the
    /// wrong issuer.
    pub async fn start_sharing_keys(other: &Provider) -> Provider {
        let keys_file = fresh_keys_file();
        std::fs::copy(&other.keys_file, &keys_file).expect("copy the provider's keys");
        Provider::spawn(&["--path", "/other"], keys_file).await
    }

    async fn spawn(args: &[&str], keys_file: PathBuf) -> Provider {
        let dir = dir();
        let mut child = Command::new("node")
            .arg(dir.join("provider.mjs"))
            .args(args)
            .arg("--keys")
            .arg(&keys_file)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start node on tests/oidc/provider.mjs");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let started = next_line(&mut stdout).await;
        Provider {
            child,
            stdin: Mutex::new(stdin),
            stdout: Mutex::new(stdout),
            started,
            keys_file,
        }
    }

    pub fn issuer(&self) -> &str {
        self.field("issuer")
    }

    pub fn jwks_url(&self) -> &str {
        self.field("jwks_uri")
    }

    /// The OIDC discovery document's URL (`{issuer}/.well-known/openid-configuration`).
    pub fn discovery_url(&self) -> &str {
        self.field("discovery")
    }

    pub fn token_endpoint(&self) -> &str {
        self.field("token_endpoint")
    }

    pub fn authorization_endpoint(&self) -> &str {
        self.field("authorization_endpoint")
    }

    /// Open dynamic client registration (RFC 7591), as the MCP SDKs use it.
    pub fn registration_endpoint(&self) -> &str {
        self.field("registration_endpoint")
    }

    /// Where it listens, for raw HTTP ([`crate::http_with`]).
    pub fn addr(&self) -> std::net::SocketAddr {
        let port = self.started["port"].as_u64().unwrap_or_default() as u16;
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn field(&self, name: &str) -> &str {
        self.started[name].as_str().unwrap_or_default()
    }

    /// One JSON command, its one JSON answer (the child answers in order;
    /// the locks keep one command in flight).
    async fn command(&self, command: Value) -> Value {
        let mut stdout = self.stdout.lock().await;
        let mut stdin = self.stdin.lock().await;
        let line = format!("{command}\n");
        stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the provider");
        stdin.flush().await.expect("flush to the provider");
        let answer = next_line(&mut stdout).await;
        assert!(
            answer.get("error").is_none(),
            "provider: {command} -> {answer}"
        );
        answer
    }

    /// An access token from the token endpoint (client_credentials) for
    /// `resource` (its `aud`) with `scopes` (space-separated), signed `alg`.
    /// Its `sub` is the client's id (`lmos-rs256`, `lmos-es256`, `lmos-eddsa`).
    pub async fn token(&self, resource: &str, scopes: &str, alg: Alg) -> String {
        self.token_of(alg.client(), resource, scopes).await
    }

    /// A token that expires one second after it is issued (RS256, `sub`
    /// `lmos-short`).
    pub async fn short_lived_token(&self, resource: &str, scopes: &str) -> String {
        self.token_of("lmos-short", resource, scopes).await
    }

    async fn token_of(&self, client: &str, resource: &str, scopes: &str) -> String {
        let answer = self
            .command(
                json!({"cmd": "token", "client": client, "resource": resource, "scope": scopes}),
            )
            .await;
        match answer["access_token"].as_str() {
            Some(token) => token.to_owned(),
            None => panic!("the provider issued no token: {answer}"),
        }
    }

    /// New RSA, EC and Ed25519 keys sign from now on; the old ones stay
    /// published. Same port, same issuer. Returns the new key ids by alg.
    pub async fn rotate(&self) -> Value {
        self.command(json!({"cmd": "rotate"})).await["kids"].clone()
    }

    /// The `kid` that signs `alg` tokens now.
    pub async fn current_kid(&self, alg: Alg) -> String {
        let token = self.token("urn:lmos:kid-probe", "", alg).await;
        header(&token)["kid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// An attack token for `aud` with `scopes`, `sub` `mallory`, this
    /// issuer, unexpired.
    pub async fn forge(&self, kind: Forged, aud: &str, scopes: &str) -> String {
        let kind = match kind {
            Forged::AlgNone => "none",
            Forged::HmacWithPublicKey => "hs256-public",
            Forged::UnknownKid => "unknown-kid",
        };
        let answer = self
            .command(json!({"cmd": "forge", "kind": kind, "aud": aud, "scope": scopes}))
            .await;
        answer["token"].as_str().unwrap_or_default().to_owned()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        // kill_on_drop ends the child; the keys file is ours.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.keys_file);
    }
}

fn fresh_keys_file() -> PathBuf {
    std::env::temp_dir().join(format!("lmos-oidc-keys-{}.json", uuid::Uuid::new_v4()))
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the provider answers within WAIT")
        .expect("read the provider's stdout")
        .expect("the provider is running");
    match serde_json::from_str(&line) {
        Ok(value) => value,
        Err(e) => panic!("the provider printed {line:?}, not JSON: {e}"),
    }
}

/// A JWT's decoded header or claims (segment 0 or 1), for assertions.
fn segment(token: &str, index: usize) -> Value {
    let part = token.split('.').nth(index).unwrap_or_default();
    serde_json::from_slice(&base64url_decode(part)).unwrap_or(Value::Null)
}

pub fn header(token: &str) -> Value {
    segment(token, 0)
}

pub fn claims(token: &str) -> Value {
    segment(token, 1)
}

fn base64url_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in text.bytes() {
        let Some(value) = ALPHABET.iter().position(|&c| c == byte) else {
            break;
        };
        buffer = (buffer << 6) | value as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    out
}
