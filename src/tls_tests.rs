use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};
use rustls::pki_types::ServerName;

use super::*;
use crate::tls::identity::Certified;

fn settings<'a>(cert: &'a str, key: &'a str, ca: &'a str) -> Settings<'a> {
    Settings {
        cert,
        key,
        client_ca: ca,
        client_auth: ClientAuth::Required,
        section: "http",
    }
}

#[test]
fn a_certificate_without_a_key_is_refused_by_name() {
    let Err(e) = acceptor(&settings("cert.pem", "", "")) else {
        panic!("half a TLS configuration was accepted");
    };
    assert_eq!(
        e.to_string(),
        "`http.tls_cert` is set but `http.tls_key` is not; TLS needs both a certificate and a key"
    );
    assert!(acceptor(&settings("", "", "")).unwrap().is_none());
}

#[test]
fn a_client_ca_without_tls_is_refused_by_name() {
    let Err(e) = acceptor(&settings("", "", "ca.pem")) else {
        panic!("a client CA without TLS was accepted");
    };
    assert_eq!(
        e.to_string(),
        "`http.tls_client_ca` is set but TLS is not (`http.tls_cert`, `http.tls_key`); client certificates need TLS"
    );
}

/// A temporary directory with a server certificate for `localhost`, a CA
/// and client certificates it issued, and one from another CA.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    other_ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!("lmos-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let server = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("c.pem"), server.cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), server.signing_key.serialize_pem()).unwrap();
        let pki = Pki {
            dir,
            ca: Pki::ca("Mesh CA"),
            other_ca: Pki::ca("Other CA"),
        };
        std::fs::write(pki.path("ca.pem"), pki.ca.pem()).unwrap();
        pki
    }

    fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }

    fn settings(&self, auth: ClientAuth) -> Settings<'static> {
        let leak = |s: String| &*Box::leak(s.into_boxed_str());
        Settings {
            cert: leak(self.path("c.pem")),
            key: leak(self.path("k.pem")),
            client_ca: leak(self.path("ca.pem")),
            client_auth: auth,
            section: "mqtt",
        }
    }

    /// A client's TLS configuration: trusting the server, presenting a
    /// certificate for `spiffe_id` from `issuer`, if any.
    fn client(
        &self,
        issuer: Option<&CertifiedIssuer<'static, KeyPair>>,
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        let server = std::fs::read(self.path("c.pem")).unwrap();
        roots
            .add(CertificateDer::from_pem_slice(&server).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let Some(issuer) = issuer else {
            return Arc::new(builder.with_no_client_auth());
        };
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::URI("spiffe://example.org/a".try_into().unwrap())];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, issuer).unwrap();
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let config = builder
            .with_client_auth_cert(vec![cert.der().clone()], key)
            .unwrap();
        Arc::new(config)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server's side of a handshake with `client`: the client's
/// identity, or the error.
async fn handshake(
    acceptor: &TlsAcceptor,
    client: Arc<rustls::ClientConfig>,
) -> Result<Option<Certified>, std::io::Error> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let connector = tokio_rustls::TlsConnector::from(client);
    let name = ServerName::try_from("localhost").unwrap();
    let (decided, wait) = tokio::sync::oneshot::channel::<()>();
    // With TLS 1.3 the client is done before the server has read its
    // certificate: its end stays open until the server has decided.
    let client = tokio::spawn(async move {
        let stream = connector.connect(name, client_io).await;
        let _ = wait.await;
        drop(stream);
    });
    let accepted = acceptor.accept(server_io).await;
    let _ = decided.send(());
    client.await.unwrap();
    let tls = accepted?;
    Ok(Certified::of_handshake(tls.get_ref().1.peer_certificates()))
}

#[test]
fn generated_pem_files_load() {
    let pki = Pki::new();
    let (c, k) = (pki.path("c.pem"), pki.path("k.pem"));
    assert!(acceptor(&settings(&c, &k, "")).unwrap().is_some());
    let e = server_config(Path::new(&k), Path::new(&k), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no certificate"), "{e}");
    let Err(e) = acceptor(&settings(&c, &k, &k)) else {
        panic!("a key file was taken for CA certificates");
    };
    assert_eq!(
        e.to_string(),
        format!("the client CA file {k} (`http.tls_client_ca`) contains no usable CA certificate")
    );
    let Err(e) = acceptor(&settings(&c, &k, &pki.path("missing.pem"))) else {
        panic!("a missing CA file was accepted");
    };
    assert!(e.to_string().contains("`http.tls_client_ca`"), "{e}");
}

#[tokio::test]
async fn a_required_certificate_must_chain_to_the_client_ca() {
    let pki = Pki::new();
    let acceptor = acceptor(&pki.settings(ClientAuth::Required))
        .unwrap()
        .unwrap();
    let ok = handshake(&acceptor, pki.client(Some(&pki.ca)))
        .await
        .unwrap();
    assert_eq!(ok.unwrap().name(), "spiffe://example.org/a");
    for client in [pki.client(None), pki.client(Some(&pki.other_ca))] {
        let e = handshake(&acceptor, client).await.unwrap_err();
        assert!(refused_certificate(&e), "{e}");
    }
}

#[tokio::test]
async fn an_optional_certificate_may_be_missing_but_not_wrong() {
    let pki = Pki::new();
    let acceptor = acceptor(&pki.settings(ClientAuth::Optional))
        .unwrap()
        .unwrap();
    let ok = handshake(&acceptor, pki.client(Some(&pki.ca)))
        .await
        .unwrap();
    assert_eq!(ok.unwrap().name(), "spiffe://example.org/a");
    assert_eq!(handshake(&acceptor, pki.client(None)).await.unwrap(), None);
    let e = handshake(&acceptor, pki.client(Some(&pki.other_ca)))
        .await
        .unwrap_err();
    assert!(refused_certificate(&e), "{e}");
    assert!(!refused_certificate(&std::io::Error::other("reset")));
}
