//! TLS for the sidecar's listeners: a rustls server configuration from the
//! PEM files named in the configuration, loaded once at start-up.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("`{key}` is set but `{other}` is not; TLS needs both a certificate and a key")]
    Half {
        key: &'static str,
        other: &'static str,
    },
    #[error("cannot read the certificate chain {path}: {error}")]
    Certificate { path: String, error: String },
    #[error("cannot read the private key {path}: {error}")]
    Key { path: String, error: String },
    #[error("the certificate chain {path} contains no certificate")]
    NoCertificate { path: String },
    #[error("the certificate and key do not go together: {0}")]
    Mismatch(rustls::Error),
}

/// The acceptor for a listener, or `None` when neither file is configured.
/// `keys` names the two configuration keys, for the error messages.
pub fn acceptor(
    cert: &str,
    key: &str,
    keys: (&'static str, &'static str),
) -> Result<Option<TlsAcceptor>, TlsError> {
    match (cert.is_empty(), key.is_empty()) {
        (true, true) => Ok(None),
        (false, true) => Err(TlsError::Half {
            key: keys.0,
            other: keys.1,
        }),
        (true, false) => Err(TlsError::Half {
            key: keys.1,
            other: keys.0,
        }),
        (false, false) => Ok(Some(TlsAcceptor::from(server_config(
            Path::new(cert),
            Path::new(key),
        )?))),
    }
}

pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Certificate {
            path: cert.display().to_string(),
            error: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.display().to_string(),
        });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        error: e.to_string(),
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsError::Mismatch)?
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(TlsError::Mismatch)?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_without_a_key_is_refused_by_name() {
        let Err(e) = acceptor("cert.pem", "", ("http.tls_cert", "http.tls_key")) else {
            panic!("half a TLS configuration was accepted");
        };
        assert_eq!(
            e.to_string(),
            "`http.tls_cert` is set but `http.tls_key` is not; TLS needs both a certificate and a key"
        );
        assert!(acceptor("", "", ("a", "b")).unwrap().is_none());
    }

    #[test]
    fn generated_pem_files_load() {
        let dir = std::env::temp_dir().join(format!("lmos-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&c, generated.cert.pem()).unwrap();
        std::fs::write(&k, generated.signing_key.serialize_pem()).unwrap();
        assert!(
            acceptor(c.to_str().unwrap(), k.to_str().unwrap(), ("a", "b"))
                .unwrap()
                .is_some()
        );
        let e = server_config(&k, &k).unwrap_err().to_string();
        assert!(e.contains("no certificate"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
