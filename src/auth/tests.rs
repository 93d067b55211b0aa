//! Tests of `auth`.

use super::*;

fn authority() -> Authority {
    let config = AuthConfig {
        anonymous: Grants {
            consume: vec!["urn:public:*".into()],
            ..Grants::default()
        },
        principals: vec![PrincipalConfig {
            name: "agent".into(),
            password_hash: credentials::hash_password("pw"),
            token_sha256: credentials::sha256_hex(b"tok"),
            host: vec!["urn:weather".into()],
            consume: vec!["*".into()],
            ..PrincipalConfig::default()
        }],
        ..AuthConfig::default()
    };
    Authority::from_config(&config).unwrap()
}

async fn name(a: &Authority, c: Credentials<'_>) -> Result<String, Refused> {
    a.verify(None, c).await.map(|p| p.name().to_owned())
}

#[tokio::test]
async fn credentials_identify_their_principal() {
    let a = authority();
    let basic = |name, password| Credentials::Password { name, password };
    let mqtt = |name, secret| Credentials::NameAndSecret { name, secret };
    let invalid = Err(Refused::Invalid);
    assert_eq!(name(&a, basic("agent", b"pw")).await.unwrap(), "agent");
    assert_eq!(name(&a, basic("agent", b"tok")).await, invalid);
    assert_eq!(name(&a, basic("nobody", b"pw")).await, invalid);
    assert_eq!(name(&a, Credentials::Token(b"tok")).await.unwrap(), "agent");
    assert_eq!(name(&a, Credentials::Token(b"pw")).await, invalid);
    assert!(name(&a, mqtt("agent", b"tok")).await.is_ok());
    assert!(name(&a, mqtt("agent", b"pw")).await.is_ok());
    assert_eq!(name(&a, mqtt("agent", b"x")).await, invalid);
}

#[tokio::test]
async fn grants_apply_per_thing_and_access() {
    let a = authority();
    let basic = Credentials::Password {
        name: "agent",
        password: b"pw",
    };
    let agent = a.verify(None, basic).await.unwrap();
    assert!(agent.may(Access::Host, "urn:weather"));
    assert!(!agent.may(Access::Host, "urn:weather2"));
    assert!(agent.may(Access::Consume, "urn:anything"));
    assert!(agent.may_all(Access::Consume));
    assert!(!agent.may(Access::Operate, "urn:weather"));
    let anonymous = a.anonymous();
    assert!(anonymous.may(Access::Consume, "urn:public:x"));
    assert!(!anonymous.may(Access::Consume, "urn:private"));
    assert!(!anonymous.may_all(Access::Consume));
}

#[test]
fn configuration_mistakes_are_named() {
    let bad = |p: PrincipalConfig| {
        Authority::from_config(&AuthConfig {
            principals: vec![p],
            ..AuthConfig::default()
        })
        .unwrap_err()
        .to_string()
    };
    let e = bad(PrincipalConfig {
        name: "a".into(),
        password_hash: "hunter2".into(),
        ..Default::default()
    });
    assert!(e.contains("`password_hash` is not an Argon2 hash"), "{e}");
    let e = bad(PrincipalConfig {
        name: "a".into(),
        token_env: "LMOS_TEST_SURELY_UNSET".into(),
        ..Default::default()
    });
    assert!(
        e.contains("LMOS_TEST_SURELY_UNSET, which is not set"),
        "{e}"
    );
    let e = bad(PrincipalConfig {
        name: "a".into(),
        host: vec!["urn:*:x".into()],
        ..Default::default()
    });
    assert!(e.contains("`*` may only end a pattern"), "{e}");
}

#[tokio::test]
async fn a_certificate_names_an_entry_that_needs_no_secret() {
    const WEATHER: &str = "spiffe://example.org/ns/agents/sa/weather";
    let config = AuthConfig {
        principals: vec![PrincipalConfig {
            name: WEATHER.into(),
            host: vec!["urn:weather".into()],
            ..PrincipalConfig::default()
        }],
        ..AuthConfig::default()
    };
    let a = Authority::from_config(&config).expect("an entry without secrets is valid");
    let weather = a.certificate(WEATHER).unwrap();
    assert_eq!(weather.name(), WEATHER);
    assert!(weather.may(Access::Host, "urn:weather"));
    assert!(weather.token().is_none());
    for nobody in ["", ANONYMOUS, "spiffe://example.org/ns/agents/sa/other"] {
        assert!(a.certificate(nobody).is_none(), "{nobody:?}");
    }
    // Without a secret, no password or token gets the entry.
    let password = Credentials::Password {
        name: WEATHER,
        password: b"",
    };
    assert_eq!(name(&a, password).await, Err(Refused::Invalid));
    assert_eq!(
        name(&a, Credentials::Token(b"")).await,
        Err(Refused::Invalid)
    );
}
