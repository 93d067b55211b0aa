//! TLS for the sidecar's listeners: a rustls server configuration from the
//! PEM files named in the configuration, loaded once at start-up; with
//! `tls_client_ca`, clients are asked for a certificate chaining to it, and
//! its name is their identity ([`identity`]).

pub mod identity;

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

use crate::config::{ClientAuth, HttpConfig, MqttConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("`{key}` is set but `{other}` is not; TLS needs both a certificate and a key")]
    Half { key: String, other: String },
    #[error("`{section}.tls_client_ca` is set but TLS is not (`{section}.tls_cert`, `{section}.tls_key`); client certificates need TLS")]
    ClientCaWithoutTls { section: &'static str },
    #[error("cannot read the certificate chain {path}: {error}")]
    Certificate { path: String, error: String },
    #[error("cannot read the private key {path}: {error}")]
    Key { path: String, error: String },
    #[error("the certificate chain {path} contains no certificate")]
    NoCertificate { path: String },
    #[error("the certificate and key do not go together: {0}")]
    Mismatch(rustls::Error),
    #[error("cannot read the client CA certificates {path} (`{key}`): {error}")]
    ClientCa {
        key: String,
        path: String,
        error: String,
    },
    #[error("the client CA file {path} (`{key}`) contains no usable CA certificate")]
    NoClientCa { key: String, path: String },
    #[error("cannot verify client certificates against `{key}`: {error}")]
    ClientVerifier { key: String, error: String },
}

/// A listener's TLS keys, as configured.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub cert: &'a str,
    pub key: &'a str,
    /// Empty: clients are not asked for certificates.
    pub client_ca: &'a str,
    pub client_auth: ClientAuth,
    /// The configuration section (`http`, `mqtt`), naming the keys in
    /// error messages.
    pub section: &'static str,
}

impl<'a> Settings<'a> {
    pub fn http(c: &'a HttpConfig) -> Settings<'a> {
        Settings {
            cert: &c.tls_cert,
            key: &c.tls_key,
            client_ca: &c.tls_client_ca,
            client_auth: c.tls_client_auth,
            section: "http",
        }
    }

    pub fn mqtt(c: &'a MqttConfig) -> Settings<'a> {
        Settings {
            cert: &c.tls_cert,
            key: &c.tls_key,
            client_ca: &c.tls_client_ca,
            client_auth: c.tls_client_auth,
            section: "mqtt",
        }
    }

    fn key_name(&self, key: &str) -> String {
        format!("{}.{key}", self.section)
    }
}

/// The acceptor for a listener, or `None` when neither file is configured.
pub fn acceptor(settings: &Settings<'_>) -> Result<Option<TlsAcceptor>, TlsError> {
    let name = |k| settings.key_name(k);
    match (settings.cert.is_empty(), settings.key.is_empty()) {
        // A CA without TLS would silently authenticate no one.
        (true, true) if !settings.client_ca.is_empty() => Err(TlsError::ClientCaWithoutTls {
            section: settings.section,
        }),
        (true, true) => Ok(None),
        (false, true) => Err(TlsError::Half {
            key: name("tls_cert"),
            other: name("tls_key"),
        }),
        (true, false) => Err(TlsError::Half {
            key: name("tls_key"),
            other: name("tls_cert"),
        }),
        (false, false) => {
            let clients = match settings.client_ca {
                "" => None,
                ca => Some(client_verifier(
                    Path::new(ca),
                    settings.client_auth,
                    &name("tls_client_ca"),
                )?),
            };
            let config = server_config(Path::new(settings.cert), Path::new(settings.key), clients)?;
            Ok(Some(TlsAcceptor::from(config)))
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server configuration; `clients`: how client certificates are
/// verified (`None`: they are not asked for).
pub fn server_config(
    cert: &Path,
    key: &Path,
    clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = read_certificates(cert).map_err(|error| TlsError::Certificate {
        path: cert.display().to_string(),
        error,
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
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Mismatch)?;
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let config = builder
        .with_single_cert(chain, private)
        .map_err(TlsError::Mismatch)?;
    Ok(Arc::new(config))
}

/// Client certificates must chain to one of the CA certificates in `ca`
/// (webpki: signatures, validity dates, the client-auth key usage); with
/// [`ClientAuth::Optional`] a client may also present none. `key` names
/// the configuration key in errors.
pub fn client_verifier(
    ca: &Path,
    auth: ClientAuth,
    key: &str,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let path = || ca.display().to_string();
    let certificates = read_certificates(ca).map_err(|error| TlsError::ClientCa {
        key: key.to_owned(),
        path: path(),
        error,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(TlsError::NoClientCa {
            key: key.to_owned(),
            path: path(),
        });
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = match auth {
        ClientAuth::Required => builder,
        ClientAuth::Optional => builder.allow_unauthenticated(),
    };
    builder.build().map_err(|e| TlsError::ClientVerifier {
        key: key.to_owned(),
        error: e.to_string(),
    })
}

/// The configuration of the sidecar's own HTTPS clients (JWKS fetches,
/// imported upstreams): the system's roots, read once per process, and the
/// CA certificates in `ca_file` when given. `Err`: why `ca_file` is unusable.
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    static NATIVE: std::sync::OnceLock<Vec<CertificateDer<'static>>> = std::sync::OnceLock::new();
    let native = NATIVE.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::debug!(%error, "A system CA certificate could not be read.");
        }
        found.certs
    });
    let mut roots = rustls::RootCertStore::empty();
    // Unusable system certificates are skipped, as browsers do.
    let _ = roots.add_parsable_certificates(native.iter().cloned());
    if let Some(file) = ca_file {
        let certs = read_certificates(file)?;
        if certs.is_empty() {
            return Err("no certificate in it".into());
        }
        for cert in certs {
            roots.add(cert).map_err(|e| e.to_string())?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| e.to_string())
}

/// Whether a failed handshake was the client certificate's refusal (none
/// presented where one is required, or one not chaining to the CA, expired,
/// not for client authentication), which is counted as an authentication
/// failure.
pub fn refused_certificate(error: &std::io::Error) -> bool {
    let Some(e) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        e,
        rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_)
    )
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
