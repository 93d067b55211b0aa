//! The checks of `auth.jwt`, with keys made here: every acceptance and
//! refusal rule, on a key set from a file (the fetcher has its own tests).

use std::time::UNIX_EPOCH;

use serde_json::json;

use super::signer::{b64, set, Signer};
use super::*;
use crate::auth::Access;
use crate::config::Grants;

const ISS: &str = "https://idp.example";
const MCP: &str = "http://localhost:8080/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn config() -> JwtConfig {
    let mut grants = BTreeMap::new();
    grants.insert(
        "weather:read".to_owned(),
        Grants {
            consume: vec!["urn:weather*".into()],
            ..Grants::default()
        },
    );
    grants.insert(
        "agent".to_owned(),
        Grants {
            host: vec!["urn:agent:{principal}".into()],
            ..Grants::default()
        },
    );
    JwtConfig {
        issuer: ISS.into(),
        audience: vec!["lmos".into()],
        grants,
        ..JwtConfig::default()
    }
}

use std::collections::BTreeMap;

fn jwt_with(config: &JwtConfig, signers: &[(&Signer, &str)]) -> Jwt {
    let jwks: Vec<_> = signers.iter().map(|(s, kid)| s.jwk(kid)).collect();
    let keys = Keys::File(Arc::new(KeySet::parse(&set(&jwks)).unwrap()));
    let reserved = ["agent".to_owned()].into_iter();
    Jwt::with_keys(config, Some(MCP), reserved, keys).unwrap()
}

fn claims() -> Value {
    json!({"iss": ISS, "aud": "lmos", "sub": "alice", "exp": now() + 300,
        "scope": "openid weather:read agent"})
}

fn token(s: &Signer, kid: &str, claims: &Value) -> String {
    s.sign(json!({"kid": kid, "typ": "at+jwt"}), claims)
}

#[tokio::test]
async fn every_algorithm_verifies_and_names_its_principal() {
    let (rsa, ec, ed) = (Signer::rsa(), Signer::ec(), Signer::ed());
    let jwt = jwt_with(&config(), &[(&rsa, "r"), (&ec, "e"), (&ed, "d")]);
    for (s, kid) in [(&rsa, "r"), (&ec, "e"), (&ed, "d")] {
        let p = jwt
            .verify(token(s, kid, &claims()).as_bytes())
            .await
            .unwrap();
        assert_eq!(p.name(), "alice", "{}", s.alg());
        assert!(p.may(Access::Consume, "urn:weather:1"));
        assert!(p.may(Access::Host, "urn:agent:alice"));
        assert!(!p.may(Access::Host, "urn:agent:bob"));
        assert!(!p.may(Access::Operate, "urn:weather:1"));
        let t = p.token().unwrap();
        assert_eq!(t.issuer, ISS);
        assert_eq!(t.audiences, ["lmos"]);
        assert_eq!(t.scopes, ["openid", "weather:read", "agent"]);
        assert!(t.expires_at.unwrap() > SystemTime::now());
    }
    // Without a kid, any key of the token's algorithm may verify it.
    let p = jwt.verify(ec.sign(json!({}), &claims()).as_bytes()).await;
    assert_eq!(p.unwrap().name(), "alice");
}

#[tokio::test]
async fn none_hmac_and_algorithms_not_the_keys_are_refused() {
    let rsa = Signer::rsa();
    let ec = Signer::ec();
    let jwt = jwt_with(&config(), &[(&rsa, "r"), (&ec, "e")]);
    let body = b64(claims().to_string().as_bytes());
    let none = format!("{}.{body}.", b64(br#"{"alg":"none","kid":"r"}"#));
    assert_eq!(
        jwt.verify(none.as_bytes()).await.unwrap_err(),
        JwtError::Algorithm
    );
    // HS256 keyed with the RSA public key's bytes (the classic confusion).
    let input = format!("{}.{body}", b64(br#"{"alg":"HS256","kid":"r"}"#));
    let public = rsa.jwk("r").to_string();
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, public.as_bytes());
    let mac = ring::hmac::sign(&key, input.as_bytes());
    let hs = format!("{input}.{}", b64(mac.as_ref()));
    assert!(jwt.looks_like(hs.as_bytes()));
    assert_eq!(
        jwt.verify(hs.as_bytes()).await.unwrap_err(),
        JwtError::Algorithm
    );
    // ES256 claimed for the RSA key's kid, EdDSA nowhere configured.
    let mixed = ec.sign(json!({"kid": "r"}), &claims());
    assert_eq!(
        jwt.verify(mixed.as_bytes()).await.unwrap_err(),
        JwtError::Algorithm
    );
    let only_es = JwtConfig {
        algorithms: vec!["ES256".into()],
        ..config()
    };
    let jwt = jwt_with(&only_es, &[(&rsa, "r"), (&ec, "e")]);
    let rs = token(&rsa, "r", &claims());
    assert_eq!(
        jwt.verify(rs.as_bytes()).await.unwrap_err(),
        JwtError::Algorithm
    );
    let bad = JwtConfig {
        algorithms: vec!["HS256".into()],
        ..config()
    };
    let keys = Keys::File(Arc::default());
    let e = Jwt::with_keys(&bad, None, std::iter::empty(), keys)
        .err()
        .unwrap();
    assert!(matches!(e, JwtSetupError::Algorithm(a) if a == "HS256"));
}

#[tokio::test]
async fn signatures_sizes_and_shapes_are_checked() {
    let ec = Signer::ec();
    let jwt = jwt_with(&config(), &[(&ec, "e")]);
    let good = token(&ec, "e", &claims());
    let (input, _) = good.rsplit_once('.').unwrap();
    let other = token(&Signer::ec(), "e", &claims());
    let forged = format!("{input}.{}", other.rsplit_once('.').unwrap().1);
    assert_eq!(
        jwt.verify(forged.as_bytes()).await.unwrap_err(),
        JwtError::Signature
    );
    let mut big = claims();
    big["pad"] = json!("x".repeat(9000));
    let big = token(&ec, "e", &big);
    assert!(jwt.looks_like(big.as_bytes()));
    assert_eq!(
        jwt.verify(big.as_bytes()).await.unwrap_err(),
        JwtError::TooLarge
    );
    assert!(!jwt.looks_like(b"static-token"));
    assert!(!jwt.looks_like(b"a.b.c"));
    let crit = ec.sign(json!({"kid": "e", "crit": ["exp"]}), &claims());
    assert_eq!(
        jwt.verify(crit.as_bytes()).await.unwrap_err(),
        JwtError::Malformed
    );
    // Keys are the configuration's: one in the header counts for nothing.
    let mallory = Signer::ec();
    let embedded = mallory.sign(json!({"kid": "e", "jwk": mallory.jwk("e")}), &claims());
    assert_eq!(
        jwt.verify(embedded.as_bytes()).await.unwrap_err(),
        JwtError::Signature
    );
}

#[tokio::test]
async fn issuer_audience_and_times_are_checked_with_leeway() {
    let ec = Signer::ec();
    let jwt = jwt_with(&config(), &[(&ec, "e")]);
    let check = |edit: &dyn Fn(&mut Value)| {
        let mut c = claims();
        edit(&mut c);
        let t = token(&ec, "e", &c);
        let jwt = &jwt;
        async move { jwt.verify(t.as_bytes()).await.map(|p| p.name().to_owned()) }
    };
    assert_eq!(
        check(&|c| c["iss"] = json!("https://evil")).await,
        Err(JwtError::Issuer)
    );
    assert_eq!(
        check(&|c| c["aud"] = json!("other")).await,
        Err(JwtError::Audience)
    );
    assert_eq!(
        check(&|c| c["aud"] = json!(["x", MCP])).await.unwrap(),
        "alice"
    );
    assert_eq!(
        check(&|c| drop(c.as_object_mut().unwrap().remove("aud"))).await,
        Err(JwtError::Audience)
    );
    assert_eq!(
        check(&|c| c["exp"] = json!(now() - 60)).await,
        Err(JwtError::Expired)
    );
    assert!(
        check(&|c| c["exp"] = json!(now() - 10)).await.is_ok(),
        "within the leeway"
    );
    assert_eq!(
        check(&|c| drop(c.as_object_mut().unwrap().remove("exp"))).await,
        Err(JwtError::Malformed)
    );
    assert_eq!(
        check(&|c| c["nbf"] = json!(now() + 60)).await,
        Err(JwtError::NotYetValid)
    );
    assert!(
        check(&|c| c["nbf"] = json!(now() + 10)).await.is_ok(),
        "within the leeway"
    );
}

#[tokio::test]
async fn the_principal_claim_must_be_a_usable_free_name() {
    let ec = Signer::ec();
    let jwt = jwt_with(&config(), &[(&ec, "e")]);
    for sub in [
        json!(""),
        json!(7),
        json!("agent"),
        json!("anonymous"),
        json!("a*"),
        json!("a\nb"),
    ] {
        let mut c = claims();
        c["sub"] = sub.clone();
        let e = jwt.verify(token(&ec, "e", &c).as_bytes()).await;
        assert_eq!(e.unwrap_err(), JwtError::Principal, "{sub}");
    }
    let roles = JwtConfig {
        principal_claim: "preferred_username".into(),
        grants_claim: "realm_access.roles".into(),
        ..config()
    };
    let jwt = jwt_with(&roles, &[(&ec, "e")]);
    let mut c = claims();
    c["preferred_username"] = json!("bob");
    c["realm_access"] = json!({"roles": ["agent", 5]});
    let p = jwt.verify(token(&ec, "e", &c).as_bytes()).await.unwrap();
    assert_eq!(p.name(), "bob");
    assert!(p.may(Access::Host, "urn:agent:bob"));
    assert!(!p.may(Access::Consume, "urn:weather:1"));
}

#[test]
fn grant_patterns_are_checked_at_start_up() {
    let with = |pattern: &str| {
        let mut c = config();
        c.grants.insert(
            "x".into(),
            Grants {
                operate: vec![pattern.into()],
                ..Grants::default()
            },
        );
        Jwt::with_keys(&c, None, std::iter::empty(), Keys::File(Arc::default())).err()
    };
    assert!(with("urn:{principal}:*").is_none());
    assert!(with("{principal}").is_none());
    let e = with("urn:*:{principal}").unwrap();
    assert_eq!(
        e.to_string(),
        "`auth.jwt.grants.x`: `operate` has a pattern `urn:*:{principal}`; `*` may only end a pattern"
    );
    let no_aud = JwtConfig {
        audience: vec![],
        ..config()
    };
    let e = Jwt::with_keys(
        &no_aud,
        None,
        std::iter::empty(),
        Keys::File(Arc::default()),
    );
    assert!(matches!(e.err().unwrap(), JwtSetupError::NoAudience));
}

#[test]
fn key_sets_keep_only_signature_keys_they_can_use() {
    let ec = Signer::ec();
    let mut enc = ec.jwk("enc");
    enc["use"] = json!("enc");
    let mut es384 = ec.jwk("384");
    es384["alg"] = json!("ES384");
    let odd = json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"});
    let keys = KeySet::parse(&set(&[enc.clone(), es384, odd, ec.jwk("ok")])).unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        KeySet::parse(&set(&[enc])).unwrap_err(),
        KeysError::NoUsableKey
    );
    assert_eq!(KeySet::parse(b"[]").unwrap_err(), KeysError::NotASet);
}

#[test]
fn a_bad_key_file_stops_the_start_naming_the_key() {
    let c = JwtConfig {
        jwks_file: "/nonexistent/jwks.json".into(),
        ..config()
    };
    let e = Jwt::new(&c, None, std::iter::empty(), &Metrics::default())
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .starts_with("`auth.jwt.jwks_file` /nonexistent/jwks.json:"),
        "{e}"
    );
    let both = JwtConfig {
        jwks_url: "https://idp.example/jwks".into(),
        ..c
    };
    let e = Jwt::new(&both, None, std::iter::empty(), &Metrics::default())
        .err()
        .unwrap();
    assert!(matches!(e, JwtSetupError::KeySource));
    let plain = JwtConfig {
        jwks_url: "http://idp.example/jwks".into(),
        ..config()
    };
    let e = Jwt::new(&plain, None, std::iter::empty(), &Metrics::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("not loopback"), "{e}");
}
