//! A local JWT issuer for tests and benches: one P-256 key made at start,
//! its JWK Set in a file for `auth.jwt.jwks_file`, and ES256 tokens signed
//! with it. Not an OpenID provider (the OIDC tests run a real one); just
//! enough to put a token through every transport.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use lmos_sidecar::config::{Config, Grants, HttpScheme};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

pub const ISSUER: &str = "https://issuer.test";
pub const AUDIENCE: &str = "lmos-sidecar";

pub struct LocalIssuer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    jwks: PathBuf,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl LocalIssuer {
    /// A fresh key; its JWK Set (kid `k1`) written to a file of its own.
    pub fn new() -> LocalIssuer {
        let rng = SystemRandom::new();
        let alg = &ECDSA_P256_SHA256_FIXED_SIGNING;
        let pk8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(alg, pk8.as_ref(), &rng).unwrap();
        let p = key.public_key().as_ref();
        let set = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
            "x": b64(&p[1..33]), "y": b64(&p[33..])}]});
        let jwks =
            std::env::temp_dir().join(format!("lmos-test-jwks-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&jwks, set.to_string()).unwrap();
        LocalIssuer { key, rng, jwks }
    }

    /// `[auth.jwt]` trusting this issuer, Bearer accepted on the HTTP port
    /// and MQTT requiring credentials; scope `things` grants everything.
    pub fn configure(&self, c: &mut Config) {
        c.http.authentication = vec![HttpScheme::Bearer];
        c.mqtt.authentication = true;
        c.auth.anonymous = Grants::default();
        c.auth.jwt.issuer = ISSUER.into();
        c.auth.jwt.audience = vec![AUDIENCE.into()];
        c.auth.jwt.jwks_file = self.jwks.display().to_string();
        c.auth
            .jwt
            .grants
            .insert("things".into(), Grants::everything());
    }

    /// A token for `sub` with `scope`, expiring `exp_in` seconds from now.
    pub fn token(&self, sub: &str, scope: &str, exp_in: i64) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": scope,
            "iat": now, "exp": now + exp_in});
        self.sign(&claims)
    }

    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": "k1", "typ": "at+jwt"});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.key.sign(&self.rng, input.as_bytes()).unwrap();
        format!("{input}.{}", b64(sig.as_ref()))
    }
}

impl Default for LocalIssuer {
    fn default() -> Self {
        LocalIssuer::new()
    }
}

impl Drop for LocalIssuer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.jwks);
    }
}
