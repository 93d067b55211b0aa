//! Client certificates for the tests of the TLS ports (issue 46): a mesh
//! CA and the certificates it issues (a SPIFFE ID, or a CN only), another
//! CA's, and the sidecar's server certificate, as PEM files for the
//! configuration; and TLS clients presenting them: HTTP requests,
//! WebSockets, MQTT (rumqttc's transport). Generated with rcgen per test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use lmos_sidecar::config::{ClientAuth, Config};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::WebSocketStream;

use crate::{http_exchange, ws_request, HttpResponse, WAIT};

/// A TLS connection to the sidecar.
pub type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A client's certificate (issued by a CA of a [`Pki`]) and its key.
#[derive(Clone)]
pub struct ClientCert {
    certificate: CertificateDer<'static>,
    key: Vec<u8>,
}

/// How a TLS client was turned away.
#[derive(Debug)]
pub enum Refused {
    /// In the TLS handshake (or by the alert that ended it).
    Tls(String),
    /// With this HTTP status.
    Http(u16),
}

/// The CAs, the server's certificate and the PEM files, in a temporary
/// directory removed on drop.
pub struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    other: CertifiedIssuer<'static, KeyPair>,
    server: CertificateDer<'static>,
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

impl Pki {
    pub fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!("lmos-mtls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        // rumqttc names the server by the address it connects to.
        let names = vec!["localhost".into(), "127.0.0.1".into()];
        let server = rcgen::generate_simple_self_signed(names).unwrap();
        std::fs::write(dir.join("server.pem"), server.cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), server.signing_key.serialize_pem()).unwrap();
        let mesh = ca("Mesh CA");
        std::fs::write(dir.join("ca.pem"), mesh.pem()).unwrap();
        Pki {
            dir,
            ca: mesh,
            other: ca("Another CA"),
            server: server.cert.der().clone(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// TLS on the HTTP port and the MQTT listeners with the server
    /// certificate, client certificates from the mesh CA (`auth`).
    pub fn configure(&self, config: &mut Config, auth: ClientAuth) {
        let (cert, key) = (self.path("server.pem"), self.path("server.key"));
        let ca = self.path("ca.pem");
        config.http.tls_cert = cert.clone();
        config.http.tls_key = key.clone();
        config.http.tls_client_ca = ca.clone();
        config.http.tls_client_auth = auth;
        config.mqtt.tls_cert = cert;
        config.mqtt.tls_key = key;
        config.mqtt.tls_client_ca = ca;
        config.mqtt.tls_client_auth = auth;
    }

    /// From the mesh CA, a certificate whose URI SAN is `spiffe_id` (and
    /// whose CN says something else, which must not count).
    pub fn spiffe(&self, spiffe_id: &str) -> ClientCert {
        issue(&self.ca, Some(spiffe_id), "ignored-cn")
    }

    /// From the mesh CA, a certificate with a subject CN and no URI SAN.
    pub fn cn(&self, cn: &str) -> ClientCert {
        issue(&self.ca, None, cn)
    }

    /// A certificate for `spiffe_id` from another CA, which the sidecar
    /// does not trust.
    pub fn foreign(&self, spiffe_id: &str) -> ClientCert {
        issue(&self.other, Some(spiffe_id), "ignored-cn")
    }

    /// A client configuration trusting the sidecar, presenting `cert`.
    pub fn client_config(&self, cert: Option<&ClientCert>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.server.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some(c) => {
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key.clone()));
                builder
                    .with_client_auth_cert(vec![c.certificate.clone()], key)
                    .unwrap()
            }
        };
        Arc::new(config)
    }

    /// A TLS connection to `addr` as `localhost`, presenting `cert`. With
    /// TLS 1.3 a refused certificate shows only at the first read.
    pub async fn tls(&self, addr: SocketAddr, cert: Option<&ClientCert>) -> std::io::Result<Tls> {
        let connector = tokio_rustls::TlsConnector::from(self.client_config(cert));
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        tokio::time::timeout(WAIT, connector.connect(name, tcp))
            .await
            .expect("TLS handshake in time")
    }

    /// One HTTPS request; `Err`: the TLS connection was refused.
    pub async fn https(
        &self,
        addr: SocketAddr,
        cert: Option<&ClientCert>,
        (method, path): (&str, &str),
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, Refused> {
        let tls = self.tls(addr, cert).await.map_err(refused)?;
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let host = format!("localhost:{}", addr.port());
        http_exchange(tls, &host, method, path, &extra, body)
            .await
            .map_err(refused)
    }

    /// A WebSocket (subprotocol `lmosprotocol`) on `/lmos{query}` over TLS.
    pub async fn wss(
        &self,
        addr: SocketAddr,
        cert: Option<&ClientCert>,
        query: &str,
    ) -> Result<WebSocketStream<Tls>, Refused> {
        let tls = self.tls(addr, cert).await.map_err(refused)?;
        let url = format!("wss://localhost:{}/lmos{query}", addr.port());
        let request = ws_request(&url, Some("lmosprotocol"));
        let handshake = tokio_tungstenite::client_async(request, tls);
        match tokio::time::timeout(WAIT, handshake)
            .await
            .expect("WebSocket handshake in time")
        {
            Ok((socket, _)) => Ok(socket),
            Err(tungstenite::Error::Http(response)) => {
                Err(Refused::Http(response.status().as_u16()))
            }
            Err(e) => Err(Refused::Tls(e.to_string())),
        }
    }

    /// rumqttc's transport over TLS presenting `cert`, for options made
    /// with the sidecar's address (e.g. [`crate::MqttClient::connect_with`]).
    pub fn mqtt_transport(&self, cert: Option<&ClientCert>) -> rumqttc::Transport {
        let tls = rumqttc::TlsConfiguration::Rustls(self.client_config(cert));
        rumqttc::Transport::tls_with_config(tls)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn refused(e: std::io::Error) -> Refused {
    Refused::Tls(e.to_string())
}

fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A client certificate as a mesh issues them: for client authentication,
/// the SPIFFE ID (if any) as its URI SAN.
fn issue(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    spiffe_id: Option<&str>,
    cn: &str,
) -> ClientCert {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(id) = spiffe_id {
        params.subject_alt_names = vec![SanType::URI(id.try_into().unwrap())];
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let certificate = params.signed_by(&key, issuer).unwrap().der().clone();
    ClientCert {
        certificate,
        key: key.serialize_der(),
    }
}
