//! A JWK Set (RFC 7517) turned into verification keys, and the signature
//! check of a token with one of them. Only what `[auth.jwt]` accepts
//! survives the parsing: RSA keys for RS256, P-256 keys for ES256, Ed25519
//! keys for EdDSA. Every other key is skipped (a provider's set often
//! holds encryption keys or algorithms this sidecar does not take), so the
//! algorithm a key can be used with is fixed by the key itself, never by
//! the token: a token naming another algorithm for a key is refused (no
//! algorithm confusion, RFC 8725 §2.1).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;

/// The signature algorithms this sidecar can verify; `none` and the HMAC
/// ones are no variant, so no token can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alg {
    Rs256,
    Es256,
    EdDsa,
}

impl Alg {
    /// The JOSE name (`alg`), exactly: `rs256` or `ES256 ` are no names.
    pub(crate) fn from_name(name: &str) -> Option<Alg> {
        match name {
            "RS256" => Some(Alg::Rs256),
            "ES256" => Some(Alg::Es256),
            "EdDSA" => Some(Alg::EdDsa),
            _ => None,
        }
    }
}

/// One public key, with the one algorithm it verifies.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    pub(crate) alg: Alg,
    material: Material,
}

#[derive(Clone)]
enum Material {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed point (`04 || x || y`) or the Ed25519 key.
    Point(Vec<u8>),
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Material(..)")
    }
}

/// The usable keys of one JWK Set.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySet {
    keys: Vec<Key>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeysError {
    #[error("is no JSON object with a `keys` array")]
    NotASet,
    #[error("holds no key for RS256, ES256 or EdDSA signatures")]
    NoUsableKey,
}

/// Smallest RSA modulus accepted (ring refuses smaller ones anyway).
const MIN_RSA_BYTES: usize = 256;

impl KeySet {
    /// The keys of a JWK Set document; a set without any usable key is an
    /// error (a provider with no signing key cannot be trusted for any).
    pub(crate) fn parse(json: &[u8]) -> Result<KeySet, KeysError> {
        let doc: Value = serde_json::from_slice(json).map_err(|_| KeysError::NotASet)?;
        let list = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(KeysError::NotASet)?;
        let keys: Vec<Key> = list.iter().filter_map(key).collect();
        if keys.is_empty() {
            return Err(KeysError::NoUsableKey);
        }
        Ok(KeySet { keys })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The keys a token with this header may be checked against: those
    /// with its `kid` (any algorithm: the caller refuses a mismatch), or,
    /// without a `kid`, every key of its algorithm.
    pub(crate) fn candidates<'a>(
        &'a self,
        kid: Option<&'a str>,
        alg: Alg,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.keys.iter().filter(move |k| match kid {
            Some(kid) => k.kid.as_deref() == Some(kid),
            None => k.alg == alg,
        })
    }
}

impl Key {
    /// Whether `signature` is this key's over `message` (JWS signing
    /// input), with the key's own algorithm.
    pub(crate) fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match (&self.material, self.alg) {
            (Material::Rsa { n, e }, Alg::Rs256) => RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            (Material::Point(p), Alg::Es256) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, p)
                    .verify(message, signature)
                    .is_ok()
            }
            (Material::Point(p), Alg::EdDsa) => UnparsedPublicKey::new(&signature::ED25519, p)
                .verify(message, signature)
                .is_ok(),
            _ => false,
        }
    }
}

/// One JWK, if it is a signature key of an accepted kind. A JWK's own
/// `alg`, when given, must be the one its kind implies.
fn key(jwk: &Value) -> Option<Key> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    let bytes = |name: &str| text(name).and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    if text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    if let Some(ops) = jwk.get("key_ops").and_then(Value::as_array) {
        if !ops.iter().any(|op| op.as_str() == Some("verify")) {
            return None;
        }
    }
    let (alg, material) = match (text("kty")?, text("crv")) {
        ("RSA", _) => {
            let n = strip_zeros(bytes("n")?);
            let e = strip_zeros(bytes("e")?);
            if n.len() < MIN_RSA_BYTES || e.is_empty() {
                return None;
            }
            (Alg::Rs256, Material::Rsa { n, e })
        }
        ("EC", Some("P-256")) => {
            let (x, y) = (bytes("x")?, bytes("y")?);
            if x.len() != 32 || y.len() != 32 {
                return None;
            }
            let point = [&[4u8][..], &x, &y].concat();
            (Alg::Es256, Material::Point(point))
        }
        ("OKP", Some("Ed25519")) => {
            let x = bytes("x")?;
            if x.len() != 32 {
                return None;
            }
            (Alg::EdDsa, Material::Point(x))
        }
        _ => return None,
    };
    if text("alg").is_some_and(|a| Alg::from_name(a) != Some(alg)) {
        return None;
    }
    Some(Key {
        kid: text("kid").map(str::to_owned),
        alg,
        material,
    })
}

/// Big-endian integers in JWKs may carry a leading zero byte.
fn strip_zeros(mut b: Vec<u8>) -> Vec<u8> {
    let zeros = b.iter().take_while(|&&x| x == 0).count();
    b.drain(..zeros);
    b
}
