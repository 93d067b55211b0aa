//! The fetcher: rotation through an unknown `kid`, floods of made-up kids,
//! failures keeping the last good keys (a counting fetch, paused time),
//! and the HTTP fetch against a loopback server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::super::signer::{set, Signer};
use super::super::{Jwt, JwtError, Keys};
use super::*;
use crate::config::JwtConfig;

/// A key server whose answer the test changes, counting requests.
#[derive(Clone)]
struct Provider {
    answer: Arc<Mutex<Result<Vec<u8>, String>>>,
    fetches: Arc<AtomicUsize>,
}

impl Default for Provider {
    fn default() -> Self {
        Provider {
            answer: Arc::new(Mutex::new(Err("nothing yet".into()))),
            fetches: Arc::default(),
        }
    }
}

impl Provider {
    fn serve(&self, answer: Result<Vec<u8>, String>) {
        *self.answer.lock().unwrap() = answer;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    fn jwks(&self) -> Arc<Jwks> {
        let this = self.clone();
        let fetch: Fetch = Box::new(move || {
            let this = this.clone();
            Box::pin(async move {
                this.fetches.fetch_add(1, Ordering::SeqCst);
                // A provider that takes a while: concurrent verifiers wait.
                tokio::time::sleep(Duration::from_millis(50)).await;
                this.answer.lock().unwrap().clone().map(Bytes::from)
            })
        });
        let periods = (Duration::from_secs(600), Duration::from_secs(10));
        Jwks::new(fetch, "test", periods, Metrics::default())
    }
}

fn jwt(jwks: Arc<Jwks>) -> Jwt {
    let config = JwtConfig {
        issuer: "https://idp".into(),
        audience: vec!["lmos".into()],
        ..JwtConfig::default()
    };
    Jwt::with_keys(&config, None, std::iter::empty(), Keys::Url(jwks)).unwrap()
}

fn token(s: &Signer, kid: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let claims = json!({"iss": "https://idp", "aud": "lmos", "sub": "alice", "exp": exp});
    s.sign(json!({"kid": kid}), &claims)
}

#[tokio::test(start_paused = true)]
async fn an_unknown_kid_fetches_once_and_takes_the_rotated_key() {
    let (old, new) = (Signer::ec(), Signer::rsa());
    let provider = Provider::default();
    provider.serve(Ok(set(&[old.jwk("old")])));
    let jwks = provider.jwks();
    jwks.start();
    let jwt = jwt(jwks);
    assert!(jwt.verify(token(&old, "old").as_bytes()).await.is_ok());
    assert_eq!(provider.fetches(), 1);
    // Rotated: the new kid is unknown until fetched, then taken.
    provider.serve(Ok(set(&[new.jwk("new")])));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        jwt.verify(token(&new, "new").as_bytes())
            .await
            .unwrap()
            .name(),
        "alice"
    );
    assert_eq!(provider.fetches(), 2);
    assert!(jwt.verify(token(&new, "new").as_bytes()).await.is_ok());
    assert_eq!(provider.fetches(), 2, "a known kid fetches nothing");
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_made_up_kids_costs_one_fetch_per_period() {
    let real = Signer::ec();
    let provider = Provider::default();
    provider.serve(Ok(set(&[real.jwk("real")])));
    let jwks = provider.jwks();
    jwks.start();
    let jwt = Arc::new(jwt(jwks));
    assert!(jwt.verify(token(&real, "real").as_bytes()).await.is_ok());
    tokio::time::sleep(Duration::from_secs(10)).await;
    // A hundred at once: all wait on the one fetch the first started.
    let mut all = tokio::task::JoinSet::new();
    for i in 0..100 {
        let (jwt, t) = (jwt.clone(), token(&Signer::ec(), &format!("bogus-{i}")));
        all.spawn(async move { jwt.verify(t.as_bytes()).await.map(|_| ()) });
    }
    while let Some(r) = all.join_next().await {
        assert_eq!(r.unwrap(), Err(JwtError::UnknownKey));
    }
    assert_eq!(provider.fetches(), 2);
    // Within the period: refused without a fetch.
    for i in 0..50 {
        let t = token(&Signer::ec(), &format!("more-{i}"));
        assert_eq!(
            jwt.verify(t.as_bytes()).await.unwrap_err(),
            JwtError::UnknownKey
        );
    }
    assert_eq!(provider.fetches(), 2);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t = token(&Signer::ec(), "later");
    assert_eq!(
        jwt.verify(t.as_bytes()).await.unwrap_err(),
        JwtError::UnknownKey
    );
    assert_eq!(provider.fetches(), 3);
    assert!(jwt.verify(token(&real, "real").as_bytes()).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_failed_fetch_keeps_the_last_good_keys() {
    let (old, new) = (Signer::ed(), Signer::ed());
    let provider = Provider::default();
    provider.serve(Err("provider down".into()));
    let jwks = provider.jwks();
    jwks.start();
    let jwt = jwt(jwks);
    // Down at start: refused, not fatal; up later: the next token fetches.
    let t = token(&old, "old");
    assert_eq!(
        jwt.verify(t.as_bytes()).await.unwrap_err(),
        JwtError::UnknownKey
    );
    provider.serve(Ok(set(&[old.jwk("old")])));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(jwt.verify(t.as_bytes()).await.is_ok());
    provider.serve(Ok(b"not json".to_vec()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let fresh = token(&new, "new");
    assert_eq!(
        jwt.verify(fresh.as_bytes()).await.unwrap_err(),
        JwtError::UnknownKey
    );
    assert!(
        jwt.verify(t.as_bytes()).await.is_ok(),
        "the old keys still serve"
    );
    // Past the TTL a fetch starts in the background, the old keys serving.
    provider.serve(Ok(set(&[new.jwk("new")])));
    let before = provider.fetches();
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert!(jwt.verify(t.as_bytes()).await.is_ok());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(provider.fetches(), before + 1);
    assert!(jwt.verify(fresh.as_bytes()).await.is_ok());
}

/// One HTTP answer per connection, from a loopback port.
async fn serve_once(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(&body).await;
    });
    format!("http://{addr}/jwks")
}

#[tokio::test]
async fn the_http_fetch_reads_a_loopback_provider_within_its_budget() {
    let key = Signer::ec();
    let url = serve_once(set(&[key.jwk("k")])).await;
    let fetch = super::super::http::fetcher(&url, "", Duration::from_secs(5)).unwrap();
    let body = fetch().await.unwrap();
    assert_eq!(KeySet::parse(&body).unwrap().len(), 1);
    let huge = vec![b' '; super::super::http::MAX_JWKS_BYTES + 1];
    let url = serve_once(huge).await;
    let fetch = super::super::http::fetcher(&url, "", Duration::from_secs(5)).unwrap();
    assert!(fetch().await.unwrap_err().contains("over"));
    assert!(super::super::http::fetcher("ftp://x/jwks", "", Duration::from_secs(1)).is_err());
    assert!(super::super::http::fetcher("http://[::1]:1/jwks", "", Duration::from_secs(1)).is_ok());
}
