//! One compact JWS (RFC 7515) taken apart and checked, without I/O: the
//! header's algorithm against the policy and the key, the signature, then
//! the claims (`iss`, `aud`, `exp`, `nbf`, the principal's name).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};

use super::keys::{Alg, KeySet};
use super::JwtError;

/// A token's parts, decoded; nothing in it is trusted yet.
pub(crate) struct Parsed<'a> {
    pub(crate) alg: Alg,
    pub(crate) kid: Option<String>,
    /// `header.payload`, what the signature covers.
    signed: &'a [u8],
    signature: Vec<u8>,
    payload: Vec<u8>,
}

/// Whether `token` has the shape of a JWT: three base64url segments whose
/// first decodes to a JSON object naming an `alg`. Cheap enough to ask of
/// every bearer token and MQTT password (no signature is checked).
pub(crate) fn looks_like_jwt(token: &[u8], max: usize) -> bool {
    if token.len() > max {
        // Still a JWT by shape, so that it is refused as one, not checked
        // against the static tokens.
        return token.iter().filter(|&&b| b == b'.').count() == 2;
    }
    header_of(token).is_some_and(|h| h.contains_key("alg"))
}

fn header_of(token: &[u8]) -> Option<Map<String, Value>> {
    let mut parts = token.split(|&b| b == b'.');
    let (header, _, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let json = URL_SAFE_NO_PAD.decode(header).ok()?;
    match serde_json::from_slice(&json).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// The header checked against `accepted`: `none`, HMAC and anything not
/// configured are refused before any key is looked at, and so is a header
/// with `crit` (no extension is understood here). `jku`, `x5u`, `jwk` in
/// the header are ignored: keys come from the configuration only.
pub(crate) fn parse<'a>(token: &'a [u8], accepted: &[Alg]) -> Result<Parsed<'a>, JwtError> {
    let header = header_of(token).ok_or(JwtError::Malformed)?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .and_then(Alg::from_name)
        .filter(|a| accepted.contains(a))
        .ok_or(JwtError::Algorithm)?;
    if header.contains_key("crit") {
        return Err(JwtError::Malformed);
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(JwtError::Malformed),
    };
    let last_dot = token
        .iter()
        .rposition(|&b| b == b'.')
        .ok_or(JwtError::Malformed)?;
    let (signed, signature) = (&token[..last_dot], &token[last_dot + 1..]);
    let payload = signed
        .split(|&b| b == b'.')
        .nth(1)
        .ok_or(JwtError::Malformed)?;
    Ok(Parsed {
        alg,
        kid,
        signed,
        signature: URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| JwtError::Malformed)?,
        payload: URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| JwtError::Malformed)?,
    })
}

impl Parsed<'_> {
    /// The claims, once a key of `keys` verifies the signature. A `kid` no
    /// key has is [`JwtError::UnknownKey`] (the caller may fetch the keys
    /// again); a key of that `kid` for another algorithm is a refusal.
    pub(crate) fn verify(&self, keys: &KeySet) -> Result<Map<String, Value>, JwtError> {
        let mut found = false;
        let mut verified = false;
        for key in keys.candidates(self.kid.as_deref(), self.alg) {
            found = true;
            if key.alg != self.alg {
                return Err(JwtError::Algorithm);
            }
            if key.verifies(self.signed, &self.signature) {
                verified = true;
                break;
            }
        }
        if !found {
            return Err(JwtError::UnknownKey);
        }
        if !verified {
            return Err(JwtError::Signature);
        }
        self.unverified_claims()
    }
}

impl Parsed<'_> {
    /// The claims before any signature check: only to refuse a token early
    /// that would be refused anyway.
    pub(crate) fn unverified_claims(&self) -> Result<Map<String, Value>, JwtError> {
        match serde_json::from_slice(&self.payload) {
            Ok(Value::Object(claims)) => Ok(claims),
            _ => Err(JwtError::Malformed),
        }
    }
}

/// What the claims must say, besides the signature.
pub(crate) struct Expect<'a> {
    pub(crate) issuer: &'a str,
    /// `auth.jwt.audience` and the MCP resource.
    pub(crate) audiences: &'a [String],
    pub(crate) leeway: Duration,
    pub(crate) now: SystemTime,
}

/// `iss`, `aud`, `exp` (required), `nbf`; `exp` as a time when valid.
pub(crate) fn check_claims(
    claims: &Map<String, Value>,
    expect: &Expect<'_>,
) -> Result<(Vec<String>, SystemTime), JwtError> {
    if claims.get("iss").and_then(Value::as_str) != Some(expect.issuer) {
        return Err(JwtError::Issuer);
    }
    let audiences = strings(claims.get("aud"));
    if !audiences.iter().any(|a| expect.audiences.contains(a)) {
        return Err(JwtError::Audience);
    }
    let exp = claims
        .get("exp")
        .and_then(time)
        .ok_or(JwtError::Malformed)?;
    if expect.now > exp + expect.leeway {
        return Err(JwtError::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = time(nbf).ok_or(JwtError::Malformed)?;
        if expect.now + expect.leeway < nbf {
            return Err(JwtError::NotYetValid);
        }
    }
    Ok((audiences, exp))
}

/// A NumericDate (seconds since the epoch, maybe fractional).
fn time(v: &Value) -> Option<SystemTime> {
    let secs = v
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e11)?;
    Some(UNIX_EPOCH + Duration::from_secs_f64(secs))
}

/// A string or an array of strings (`aud`, a roles claim); a
/// space-separated string when `split` (`scope`, RFC 8693 §4.2).
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A claim by name, dots reaching into objects (`realm_access.roles`); a
/// claim whose name itself has a dot is found too.
pub(crate) fn claim<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut here = claims.get(parts.next()?)?;
    for part in parts {
        here = here.as_object()?.get(part)?;
    }
    Some(here)
}
