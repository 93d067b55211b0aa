//! Test tokens: keys made in the test (P-256, Ed25519) or read from a fixed
//! test vector (RSA: ring cannot generate those), their JWKs, and tokens
//! signed with them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde_json::{json, Value};

pub(crate) const RSA_PEM: &[u8] = include_bytes!("../../../tests/fixtures/jwt-rs256.pem");

pub(crate) enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Signer {
    pub(crate) fn rsa() -> Signer {
        let der = PrivatePkcs8KeyDer::from_pem_slice(RSA_PEM).unwrap();
        Signer::Rsa(RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap())
    }

    pub(crate) fn ec() -> Signer {
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let rng = SystemRandom::new();
        let pk8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Signer::Ec(EcdsaKeyPair::from_pkcs8(alg, pk8.as_ref(), &rng).unwrap())
    }

    pub(crate) fn ed() -> Signer {
        let pk8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Signer::Ed(Ed25519KeyPair::from_pkcs8(pk8.as_ref()).unwrap())
    }

    pub(crate) fn alg(&self) -> &'static str {
        match self {
            Signer::Rsa(_) => "RS256",
            Signer::Ec(_) => "ES256",
            Signer::Ed(_) => "EdDSA",
        }
    }

    /// The public JWK, with `kid`.
    pub(crate) fn jwk(&self, kid: &str) -> Value {
        match self {
            Signer::Rsa(k) => {
                let p: signature::RsaPublicKeyComponents<Vec<u8>> = k.public().into();
                json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                    "n": b64(&p.n), "e": b64(&p.e)})
            }
            Signer::Ec(k) => {
                let p = k.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&p[1..33]), "y": b64(&p[33..])})
            }
            Signer::Ed(k) => {
                json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(k.public_key().as_ref())})
            }
        }
    }

    /// `header` (JSON, `alg` added when absent) and `claims`, signed.
    pub(crate) fn sign(&self, mut header: Value, claims: &Value) -> String {
        if header.get("alg").is_none() {
            header["alg"] = json!(self.alg());
        }
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match self {
            Signer::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut sig,
                )
                .unwrap();
                sig
            }
            Signer::Ec(k) => k.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Signer::Ed(k) => k.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&sig))
    }
}

/// A JWK Set of these keys' JWKs.
pub(crate) fn set(keys: &[Value]) -> Vec<u8> {
    json!({ "keys": keys }).to_string().into_bytes()
}
