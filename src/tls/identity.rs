//! Who a verified client certificate names: its SPIFFE ID (the first URI
//! SAN with scheme `spiffe://`), else its subject CN. Pure: the TLS
//! listeners hand over the end-entity certificate after rustls verified
//! its chain; the principal is the `[[auth.principals]]` entry of exactly
//! that name ([`crate::auth::Authority::certificate`]).

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use tracing::debug;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// Longest name taken. SPIFFE IDs are at most 2048 bytes (SPIFFE ID
/// specification, §2.3); no principal needs a longer CN either.
pub const MAX_NAME: usize = 2048;

const SPIFFE: &str = "spiffe://";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the certificate cannot be read: {0}")]
    Unreadable(String),
    #[error("the certificate has neither a spiffe:// URI SAN nor a subject CN")]
    Unnamed,
    #[error("the certificate's subject has more than one CN")]
    AmbiguousCn,
    #[error("the certificate's name is longer than {MAX_NAME} bytes")]
    TooLong,
}

/// The name `der` (an X.509 certificate) gives its holder.
///
/// A certificate with a `spiffe://` URI SAN is a SPIFFE identity: its CN,
/// whatever it says, is not looked at. A SAN extension that cannot be read
/// (or appears twice) refuses the certificate rather than falling back to
/// the CN, and so does a subject with several CNs (which one is "the" CN
/// depends on who reads the subject).
pub fn name(der: &[u8]) -> Result<String, IdentityError> {
    let unreadable = |e: &dyn std::fmt::Display| IdentityError::Unreadable(e.to_string());
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| unreadable(&e))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| unreadable(&e))?;
    let mut names = san.into_iter().flat_map(|s| &s.value.general_names);
    let spiffe = names.find_map(|n| match n {
        GeneralName::URI(uri) if uri.starts_with(SPIFFE) => Some(*uri),
        _ => None,
    });
    let name = match spiffe {
        Some(id) => id,
        None => {
            let mut cns = cert.subject().iter_common_name();
            let cn = cns.next().ok_or(IdentityError::Unnamed)?;
            if cns.next().is_some() {
                return Err(IdentityError::AmbiguousCn);
            }
            cn.as_str().map_err(|e| unreadable(&e))?
        }
    };
    match name.len() {
        0 => Err(IdentityError::Unnamed),
        n if n > MAX_NAME => Err(IdentityError::TooLong),
        _ => Ok(name.to_owned()),
    }
}

/// A connection's verified client certificate, by the name it gives. Kept
/// with the connection (HTTP: in every request's extensions; MQTT: handed
/// to the CONNECT check). The name is empty when the certificate gives none
/// ([`IdentityError`]): no principal has an empty name, so such a client
/// is refused where it gives no other credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certified(Arc<str>);

impl Certified {
    /// From a finished handshake's peer certificates (end-entity first),
    /// which rustls has verified by then; `None` without any.
    pub fn of_handshake(chain: Option<&[CertificateDer<'_>]>) -> Option<Certified> {
        let end_entity = chain?.first()?;
        let name = name(end_entity).unwrap_or_else(|e| {
            debug!(error = %e, "A client certificate names no principal.");
            String::new()
        });
        Some(Certified(name.into()))
    }

    /// The SPIFFE ID or CN; empty: none.
    pub fn name(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
