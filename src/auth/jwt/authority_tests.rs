//! JWTs through [`Authority::verify`]: bearer tokens and MQTT passwords,
//! beside static principals, the cache capped at `exp`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::signer::{set, Signer};
use crate::auth::{credentials, Access, Authority, Credentials, Refused};
use crate::config::{AuthConfig, Grants, JwtConfig, PrincipalConfig};
use crate::telemetry::metrics::Metrics;

const ISS: &str = "https://idp.example";
const MCP: &str = "http://127.0.0.1:1/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An authority with one static principal and JWTs from `signer`'s key,
/// written to a file of the test's own.
pub(crate) fn authority(signer: &Signer, test: &str) -> (Authority, Metrics) {
    let file = std::env::temp_dir().join(format!("lmos-jwks-{}-{test}.json", std::process::id()));
    std::fs::write(&file, set(&[signer.jwk("k1")])).unwrap();
    let mut jwt = JwtConfig {
        issuer: ISS.into(),
        audience: vec!["lmos".into()],
        jwks_file: file.display().to_string(),
        ..JwtConfig::default()
    };
    jwt.grants.insert(
        "things".into(),
        Grants {
            consume: vec!["*".into()],
            ..Grants::default()
        },
    );
    let config = AuthConfig {
        principals: vec![PrincipalConfig {
            name: "agent".into(),
            token_sha256: credentials::sha256_hex(b"tok"),
            host: vec!["urn:weather".into()],
            ..PrincipalConfig::default()
        }],
        jwt,
        ..AuthConfig::default()
    };
    let metrics = Metrics::default();
    let a = Authority::with_mcp_resource(&config, metrics.clone(), MCP).unwrap();
    let _ = std::fs::remove_file(&file);
    (a, metrics)
}

pub(crate) fn claims(sub: &str, exp: u64) -> Value {
    json!({"iss": ISS, "aud": [MCP], "sub": sub, "exp": exp, "scope": "things"})
}

#[tokio::test]
async fn a_bearer_jwt_verifies_beside_static_tokens() {
    let ec = Signer::ec();
    let (a, _) = authority(&ec, "bearer");
    assert!(!a.is_empty());
    let t = ec.sign(json!({"kid": "k1"}), &claims("alice", now() + 60));
    let p = a
        .verify(None, Credentials::Token(t.as_bytes()))
        .await
        .unwrap();
    assert_eq!(p.name(), "alice");
    assert!(p.may(Access::Consume, "urn:anything"));
    assert_eq!(p.token().unwrap().audiences, [MCP]);
    let s = a.verify(None, Credentials::Token(b"tok")).await.unwrap();
    assert_eq!(s.name(), "agent");
    assert!(s.token().is_none());
    // Basic credentials are never taken as a JWT.
    let basic = Credentials::Password {
        name: "alice",
        password: t.as_bytes(),
    };
    assert_eq!(a.verify(None, basic).await.unwrap_err(), Refused::Invalid);
    let posing = ec.sign(json!({"kid": "k1"}), &claims("agent", now() + 60));
    let refused = a.verify(None, Credentials::Token(posing.as_bytes())).await;
    assert_eq!(refused.unwrap_err(), Refused::Invalid);
}

#[tokio::test]
async fn an_mqtt_password_jwt_names_the_principal_whatever_the_user_name() {
    let ed = Signer::ed();
    let (a, _) = authority(&ed, "mqtt");
    let t = ed.sign(json!({"kid": "k1"}), &claims("bob", now() + 60));
    assert!(a.takes_jwt(t.as_bytes()));
    assert!(!a.takes_jwt(b"tok"));
    for name in ["", "bob", "agent", "whoever"] {
        let c = Credentials::NameAndSecret {
            name,
            secret: t.as_bytes(),
        };
        assert_eq!(a.verify(None, c).await.unwrap().name(), "bob", "{name:?}");
    }
    let c = Credentials::NameAndSecret {
        name: "agent",
        secret: b"tok",
    };
    assert_eq!(a.verify(None, c).await.unwrap().name(), "agent");
}

#[tokio::test]
async fn expired_tokens_are_refused_as_such_and_never_served_from_the_cache() {
    let ec = Signer::ec();
    let (a, metrics) = authority(&ec, "expired");
    let old = ec.sign(json!({"kid": "k1"}), &claims("alice", now() - 120));
    let refused = a.verify(None, Credentials::Token(old.as_bytes())).await;
    assert_eq!(refused.unwrap_err(), Refused::Expired);
    assert_eq!(Refused::Expired.reason(), "expired");
    // Past `exp` but within the leeway: taken, yet not cached (the cache
    // would outlive the token).
    let late = ec.sign(json!({"kid": "k1"}), &claims("alice", now() - 5));
    for _ in 0..2 {
        assert!(a
            .verify(None, Credentials::Token(late.as_bytes()))
            .await
            .is_ok());
    }
    let text = metrics.render();
    assert!(
        text.contains(r#"lmos_sidecar_auth_cache_total{result="miss"} 3"#),
        "{text}"
    );
    let fresh = ec.sign(json!({"kid": "k1"}), &claims("alice", now() + 60));
    for _ in 0..2 {
        assert!(a
            .verify(None, Credentials::Token(fresh.as_bytes()))
            .await
            .is_ok());
    }
    let text = metrics.render();
    assert!(
        text.contains(r#"lmos_sidecar_auth_cache_total{result="hit"} 1"#),
        "{text}"
    );
}

#[test]
fn the_cache_keeps_an_entry_no_later_than_until() {
    use crate::auth::cache::Cache;
    use tokio::time::Instant;
    let cache = Cache::new(Duration::from_secs(60), 8);
    let t0 = Instant::now();
    let until = SystemTime::now() + Duration::from_secs(2);
    cache.put_until([1; 32], "a", t0, Some(until));
    assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(1)), Some("a"));
    assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(3)), None);
    cache.put_until(
        [2; 32],
        "b",
        t0,
        Some(SystemTime::now() - Duration::from_secs(1)),
    );
    assert_eq!(cache.len(), 0);
}

#[test]
fn jwt_alone_is_someone_to_log_in_as() {
    let file = std::env::temp_dir().join(format!("lmos-jwks-{}-alone.json", std::process::id()));
    std::fs::write(&file, set(&[Signer::ed().jwk("k")])).unwrap();
    let config = AuthConfig {
        jwt: JwtConfig {
            issuer: ISS.into(),
            jwks_file: file.display().to_string(),
            ..JwtConfig::default()
        },
        ..AuthConfig::default()
    };
    // No `auth.jwt.audience`: the MCP resource is the one accepted.
    let a = Authority::with_mcp_resource(&config, Metrics::default(), MCP).unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        !a.is_empty(),
        "so `AuthError::NoOne` does not stop the start"
    );
    assert!(Authority::from_config(&AuthConfig::default())
        .unwrap()
        .is_empty());
}
