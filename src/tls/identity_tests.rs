use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use super::*;

/// A self-signed certificate (the signature is not what is read here)
/// with these SANs and, if any, this CN.
fn cert(sans: &[SanType], cn: Option<&str>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans.to_vec();
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example");
    }
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.try_into().unwrap())
}

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.try_into().unwrap())
}

const WEATHER: &str = "spiffe://example.org/ns/agents/sa/weather";

#[test]
fn the_spiffe_id_names_the_holder_whatever_the_cn_says() {
    let sans = [
        dns("weather.agents.svc"),
        uri("https://example.org/not-an-identity"),
        uri(WEATHER),
        uri("spiffe://example.org/ns/agents/sa/second"),
    ];
    assert_eq!(name(&cert(&sans, Some("admin"))), Ok(WEATHER.to_owned()));
    assert_eq!(name(&cert(&[uri(WEATHER)], None)), Ok(WEATHER.to_owned()));
}

#[test]
fn without_a_spiffe_id_the_subject_cn_names_the_holder() {
    assert_eq!(name(&cert(&[], Some("billing"))), Ok("billing".to_owned()));
    let other_uris = [uri("https://example.org/billing"), dns("billing.local")];
    assert_eq!(
        name(&cert(&other_uris, Some("billing"))),
        Ok("billing".to_owned())
    );
}

#[test]
fn a_certificate_naming_no_one_or_too_much_gives_no_name() {
    assert_eq!(
        name(&cert(&[dns("x.local")], None)),
        Err(IdentityError::Unnamed)
    );
    assert_eq!(name(&cert(&[], Some(""))), Err(IdentityError::Unnamed));
    let long = format!("spiffe://example.org/{}", "a".repeat(MAX_NAME));
    assert_eq!(
        name(&cert(&[uri(&long)], Some("ok"))),
        Err(IdentityError::TooLong),
        "no fallback to the CN of a SPIFFE certificate"
    );
    assert!(matches!(
        name(b"\x30\x03\x02\x01\x01"),
        Err(IdentityError::Unreadable(_))
    ));
    assert!(matches!(name(b""), Err(IdentityError::Unreadable(_))));
}

#[test]
fn a_handshake_without_certificates_has_no_identity() {
    assert_eq!(Certified::of_handshake(None), None);
    assert_eq!(Certified::of_handshake(Some(&[])), None);
    let named = CertificateDer::from(cert(&[uri(WEATHER)], None));
    let unnamed = CertificateDer::from(cert(&[], None));
    let ca = CertificateDer::from(cert(&[], Some("Example CA")));
    let of = |chain: &[CertificateDer<'_>]| Certified::of_handshake(Some(chain)).unwrap();
    assert_eq!(of(&[named.clone(), ca.clone()]).name(), WEATHER);
    assert_eq!(
        of(&[unnamed, named]).name(),
        "",
        "the end entity's name only"
    );
}
