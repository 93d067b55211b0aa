//! Secrets a principal authenticates with, and how they are checked.
//!
//! Nothing kept in memory can be turned back into the secret: passwords
//! from the configuration are Argon2 hashes, tokens SHA-256 digests, and a
//! secret read from a file or variable is kept as its SHA-256 only.

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Clone)]
pub enum Secret {
    /// A PHC string (`$argon2id$...`).
    Argon2(String),
    Sha256([u8; 32]),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secret::Argon2(_) => "Secret::Argon2(..)",
            Secret::Sha256(_) => "Secret::Sha256(..)",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("is not an Argon2 hash in PHC format (`$argon2id$v=19$...`, from `lmos-sidecar hash-password`)")]
    NotArgon2,
    #[error("is not 64 hexadecimal digits (a SHA-256)")]
    NotSha256,
    #[error("is empty")]
    Empty,
}

impl Secret {
    pub fn argon2(phc: &str) -> Result<Secret, SecretError> {
        let parsed = PasswordHash::new(phc).map_err(|_| SecretError::NotArgon2)?;
        if !parsed.algorithm.as_str().starts_with("argon2") {
            return Err(SecretError::NotArgon2);
        }
        Ok(Secret::Argon2(phc.to_owned()))
    }

    pub fn sha256_hex(hex: &str) -> Result<Secret, SecretError> {
        let hex = hex.trim();
        if hex.len() != 64 {
            return Err(SecretError::NotSha256);
        }
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| SecretError::NotSha256)?;
        }
        Ok(Secret::Sha256(digest))
    }

    /// A secret given in clear (from a file or a variable). A trailing line
    /// break, as editors and `echo` leave, is not part of it.
    pub fn clear(secret: &str) -> Result<Secret, SecretError> {
        let secret = secret.trim_end_matches(['\r', '\n']);
        if secret.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret::Sha256(sha256(secret.as_bytes())))
    }

    /// Slow and memory-hungry to check.
    pub fn is_argon2(&self) -> bool {
        matches!(self, Secret::Argon2(_))
    }

    pub fn verify(&self, candidate: &[u8]) -> bool {
        match self {
            Secret::Argon2(phc) => PasswordHash::new(phc)
                .map(|hash| Argon2::default().verify_password(candidate, &hash).is_ok())
                .unwrap_or(false),
            Secret::Sha256(digest) => sha256(candidate).ct_eq(digest).into(),
        }
    }
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    sha256(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// An Argon2id hash of `password` for `password_hash` in the configuration.
pub fn hash_password(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("Argon2 with default parameters hashes any password")
        .to_string()
}

/// A PHC string taken apart for [`super::pool`]'s threads, which bring
/// Argon2's working memory themselves ([`super::scratch`]).
pub(crate) struct Argon2Hash {
    argon2: Argon2<'static>,
    salt: Vec<u8>,
    expected: Vec<u8>,
}

impl Argon2Hash {
    pub(crate) fn parse(phc: &str) -> Option<Argon2Hash> {
        let hash = PasswordHash::new(phc).ok()?;
        let algorithm = Algorithm::try_from(hash.algorithm).ok()?;
        let version = Version::try_from(hash.version.unwrap_or(0x13)).ok()?;
        let params = Params::try_from(&hash).ok()?;
        let mut salt = [0u8; 64];
        let salt = hash.salt?.decode_b64(&mut salt).ok()?.to_vec();
        let expected = hash.hash?.as_bytes().to_vec();
        Some(Argon2Hash {
            argon2: Argon2::new(algorithm, version, params),
            salt,
            expected,
        })
    }

    /// The working memory a verification takes, in 1 KiB blocks.
    pub(crate) fn block_count(&self) -> usize {
        self.argon2.params().block_count()
    }

    /// `blocks`: at least [`Argon2Hash::block_count`].
    pub(crate) fn verify(&self, password: &[u8], blocks: &mut [argon2::Block]) -> bool {
        let mut out = vec![0u8; self.expected.len()];
        self.argon2
            .hash_password_into_with_memory(password, &self.salt, &mut out, blocks)
            .is_ok()
            && bool::from(out.ct_eq(&self.expected))
    }
}

/// An Argon2 hash of a random password nobody knows, with the parameters
/// of `like` (an Argon2 secret; else the defaults): checking a password
/// against it costs what checking one against `like` does, so a name that
/// is no principal's takes as long to refuse as one that is.
pub fn stand_in(like: Option<&Secret>) -> Secret {
    let parsed = match like {
        Some(Secret::Argon2(phc)) => PasswordHash::new(phc).ok(),
        _ => None,
    };
    let argon2 = parsed
        .and_then(|h| {
            let algorithm = Algorithm::try_from(h.algorithm).ok()?;
            let version = Version::try_from(h.version.unwrap_or(0x13)).ok()?;
            let params = Params::try_from(&h).ok()?;
            Some(Argon2::new(algorithm, version, params))
        })
        .unwrap_or_default();
    let mut password = [0u8; 32];
    OsRng.fill_bytes(&mut password);
    let salt = SaltString::generate(&mut OsRng);
    let phc = argon2
        .hash_password(&password, &salt)
        .expect("parameters that verified a hash can make one")
        .to_string();
    Secret::Argon2(phc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_passwords_verify_and_others_do_not() {
        let phc = hash_password("correct horse");
        let secret = Secret::argon2(&phc).unwrap();
        assert!(secret.verify(b"correct horse"));
        assert!(!secret.verify(b"correct horse "));
        assert!(format!("{secret:?}").ends_with("(..)"));
    }

    #[test]
    fn the_stand_in_has_the_parameters_it_imitates() {
        let like = hash_password("x");
        let like = like.replace("m=19456,t=2,p=1", "m=8192,t=3,p=1");
        // Not a valid hash of "x" any more, but parameters to imitate.
        let Secret::Argon2(phc) = stand_in(Some(&Secret::argon2(&like).unwrap())) else {
            panic!("an Argon2 secret");
        };
        assert!(phc.starts_with("$argon2id$v=19$m=8192,t=3,p=1$"), "{phc}");
        let Secret::Argon2(phc) = stand_in(None) else {
            panic!("an Argon2 secret");
        };
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
    }

    #[test]
    fn a_parsed_hash_verifies_in_the_memory_it_is_given() {
        let phc = hash_password("pw");
        let hash = Argon2Hash::parse(&phc).unwrap();
        assert_eq!(hash.block_count(), 19456);
        let mut blocks = vec![argon2::Block::default(); hash.block_count()];
        assert!(hash.verify(b"pw", &mut blocks));
        assert!(!hash.verify(b"pw ", &mut blocks));
        assert!(!hash.verify(b"pw", &mut blocks[..100]), "too little memory");
        assert!(Argon2Hash::parse("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ").is_none());
    }

    #[test]
    fn tokens_compare_by_digest() {
        let hex = sha256_hex(b"t0ken");
        let secret = Secret::sha256_hex(&hex).unwrap();
        assert!(secret.verify(b"t0ken"));
        assert!(!secret.verify(b"t0ke"));
        assert!(Secret::clear("t0ken\n").unwrap().verify(b"t0ken"));
    }

    #[test]
    fn malformed_secrets_are_refused() {
        assert_eq!(
            Secret::argon2("plaintext").unwrap_err(),
            SecretError::NotArgon2
        );
        assert_eq!(
            Secret::sha256_hex("abc").unwrap_err(),
            SecretError::NotSha256
        );
        assert_eq!(Secret::clear("\n").unwrap_err(), SecretError::Empty);
    }
}
