use std::time::Duration;

use super::*;
use crate::auth::credentials::{hash_password, sha256_hex};
use crate::auth::Authority;
use crate::config::PrincipalConfig;

/// `agent`: an Argon2 password "pw" and a token "tok"; `filed`: a password
/// from a file (SHA-256 only).
fn authority(tweak: impl FnOnce(&mut AuthConfig)) -> Authority {
    let file = std::env::temp_dir().join(format!("lmos-verifier-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, "filed-pw\n").unwrap();
    let mut config = AuthConfig {
        principals: vec![
            PrincipalConfig {
                name: "agent".into(),
                password_hash: hash_password("pw"),
                token_sha256: sha256_hex(b"tok"),
                ..PrincipalConfig::default()
            },
            PrincipalConfig {
                name: "filed".into(),
                password_file: file.to_string_lossy().into_owned(),
                ..PrincipalConfig::default()
            },
        ],
        ..AuthConfig::default()
    };
    tweak(&mut config);
    let a = Authority::from_config(&config).unwrap();
    let _ = std::fs::remove_file(file);
    a
}

fn basic<'a>(name: &'a str, password: &'a [u8]) -> Credentials<'a> {
    Credentials::Password { name, password }
}

fn addr(ip: &str) -> Option<IpAddr> {
    Some(ip.parse().unwrap())
}

/// Whatever a wrong password is wrong for (a principal's hash, a name
/// that is no principal's, a principal whose password is in a file), the
/// refusal costs exactly one Argon2 verification: no name can be told from
/// another by the time it takes.
#[tokio::test]
async fn every_refusal_costs_one_argon2_verification_known_name_or_not() {
    let a = authority(|_| {});
    let mut runs = a.argon2_runs();
    let wrong = [
        basic("agent", b"wrong"),
        basic("nobody", b"wrong"),
        basic("filed", b"wrong"),
        Credentials::NameAndSecret {
            name: "nobody",
            secret: b"tok",
        },
        Credentials::NameAndSecret {
            name: "agent",
            secret: b"wrong",
        },
    ];
    for (i, c) in wrong.into_iter().enumerate() {
        // Each from an address of its own: no throttling in the way.
        let from = addr(&format!("10.0.0.{i}"));
        assert_eq!(
            a.verify(from, c).await.err(),
            Some(Refused::Invalid),
            "{c:?}"
        );
        assert_eq!(a.argon2_runs(), runs + 1, "{c:?}");
        runs += 1;
    }
    // What is cheap to check and right passes without one.
    for c in [
        basic("filed", b"filed-pw"),
        Credentials::Token(b"tok"),
        Credentials::NameAndSecret {
            name: "agent",
            secret: b"tok",
        },
    ] {
        assert!(a.verify(None, c).await.is_ok(), "{c:?}");
    }
    assert_eq!(a.argon2_runs(), runs);
    // A wrong token costs none: tokens are SHA-256 for everyone.
    assert!(a.verify(None, Credentials::Token(b"nope")).await.is_err());
    assert_eq!(a.argon2_runs(), runs);
}

#[tokio::test]
async fn without_argon2_passwords_there_is_no_stand_in_and_no_thread() {
    let a = authority(|c| {
        c.principals.remove(0);
    });
    assert!(a.verify(None, basic("nobody", b"x")).await.is_err());
    assert!(a.verify(None, basic("filed", b"filed-pw")).await.is_ok());
    assert_eq!(a.argon2_runs(), 0);
    assert!(a.0.verifier.stand_in().is_none());
}

#[tokio::test(start_paused = true)]
async fn passed_credentials_are_cached_until_they_expire() {
    let a = authority(|c| c.cache_ttl_ms = 1_000);
    assert!(a.verify(None, basic("agent", b"pw")).await.is_ok());
    assert_eq!(a.argon2_runs(), 1);
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(a.verify(None, basic("agent", b"pw")).await.is_ok());
    assert_eq!(a.argon2_runs(), 1, "a cache hit");
    // The same secret through another scheme is another entry.
    let mqtt = Credentials::NameAndSecret {
        name: "agent",
        secret: b"pw",
    };
    assert!(a.verify(None, mqtt).await.is_ok());
    assert_eq!(a.argon2_runs(), 2);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(a.verify(None, basic("agent", b"pw")).await.is_ok());
    assert_eq!(a.argon2_runs(), 3, "expired: checked again");
    // Failures are never cached.
    for _ in 0..2 {
        assert!(a.verify(None, basic("agent", b"x")).await.is_err());
    }
    assert_eq!(a.argon2_runs(), 5);
    let text = a.0.verifier.metrics.render();
    assert!(
        text.contains(r#"lmos_sidecar_auth_cache_total{result="hit"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_auth_cache_total{result="miss"} 5"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_auth_verifications_total{outcome="queued"} 5"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn repeated_failures_are_refused_unchecked_but_cached_credentials_pass() {
    let a = authority(|c| {
        c.max_failures = 3;
        c.lockout_failures = 6;
    });
    let me = addr("127.0.0.1");
    assert!(a.verify(me, basic("agent", b"pw")).await.is_ok());
    for _ in 0..3 {
        assert_eq!(
            a.verify(me, basic("agent", b"guess")).await.err(),
            Some(Refused::Invalid)
        );
    }
    let runs = a.argon2_runs();
    assert_eq!(
        a.verify(me, basic("agent", b"guess")).await.err(),
        Some(Refused::Throttled(Duration::from_secs(2)))
    );
    assert_eq!(a.argon2_runs(), runs, "refused without a check");
    // The client that authenticated before keeps working, from the same
    // address, for the same name; other names and addresses too.
    assert!(a.verify(me, basic("agent", b"pw")).await.is_ok());
    assert!(a.verify(me, basic("filed", b"filed-pw")).await.is_ok());
    let elsewhere = a.verify(addr("10.1.1.1"), basic("agent", b"guess")).await;
    assert_eq!(elsewhere.err(), Some(Refused::Invalid));
    // A token's failures are the tokens' own.
    assert!(a.verify(me, Credentials::Token(b"tok")).await.is_ok());
    // Past auth.lockout_failures, even cached credentials are refused
    // while the period runs: a guesser cannot use the cache as an oracle
    // for free.
    assert!(a.verify(me, basic("agent", b"guess")).await.is_err());
    assert!(a.verify(me, basic("agent", b"guess")).await.is_err());
    let locked = a.verify(me, basic("agent", b"pw")).await;
    assert!(matches!(locked, Err(Refused::Throttled(_))), "{locked:?}");
    // Once the period is over, cached credentials pass again, and one more
    // guess is checked; but the failures are not forgotten (a cache hit
    // does not reset them, or a busy client would shelter a guesser) ...
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(a.verify(me, basic("agent", b"pw")).await.is_ok());
    let guess = || a.verify(me, basic("agent", b"guess"));
    assert_eq!(guess().await.err(), Some(Refused::Invalid));
    assert!(matches!(guess().await, Err(Refused::Throttled(_))));
    // ... until the address kept quiet for auth.max_failure_backoff_ms
    // after its last period.
    tokio::time::advance(Duration::from_secs(120)).await;
    assert_eq!(guess().await.err(), Some(Refused::Invalid));
    assert_eq!(guess().await.err(), Some(Refused::Invalid));
}

#[test]
fn one_log_line_per_minute_per_kind() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let q = Quiet::default();
        let now = Instant::now();
        assert_eq!(q.due(now), Some(0));
        for _ in 0..300 {
            assert_eq!(q.due(now + Duration::from_secs(1)), None);
        }
        assert_eq!(q.due(now + QUIET), Some(300));
    });
}
