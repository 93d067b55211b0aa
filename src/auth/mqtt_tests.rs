//! Tests of `auth/mqtt.rs`.

use super::*;
use crate::auth::Authority;

#[test]
fn only_requests_name_their_publisher() {
    let session = MqttSession {
        principal: Authority::from_config(&AuthConfig::default())
            .unwrap()
            .anonymous(),
        topics: Topics::new("lmos/v1").unwrap(),
        metrics: Metrics::default(),
    };
    assert!(session.names_publisher("lmos/v1/urn:a/requests/invokeAction"));
    for topic in [
        "lmos/v1/urn:a/events/e",
        "lmos/v1/urn:a/requests",
        "lmos/v1/urn:a/requests/invokeAction/x",
        "lmos/urn:a/requests/invokeAction",
        "lmos/v1x/urn:a/requests/invokeAction",
        "other/urn:a/requests/invokeAction",
    ] {
        assert!(!session.names_publisher(topic), "{topic}");
    }
}

#[test]
fn a_message_names_the_thing_of_its_topic() {
    let topics = Topics::new("lmos").unwrap();
    let t = |topic: &str, payload: &str| thing_fits(&topics, topic, payload.as_bytes());
    assert!(t("lmos/a/events/e", r#"{"thingID":"a","data":1}"#).is_ok());
    assert!(t("lmos/a/events/e", r#"{"thingID":"b","data":1}"#).is_err());
    assert!(t("lmos/a/events/e", r#" {"data":1,"thingId":"b"}"#).is_err());
    // No claim, not JSON, not an LMOS topic: nothing to check.
    assert!(t("lmos/a/events/e", r#"{"data":1}"#).is_ok());
    assert!(t("lmos/a/events/e", "42").is_ok());
    assert!(t("lmos/a/events/e", "{not json").is_ok());
    assert!(t("other/a/events/e", r#"{"thingID":"b"}"#).is_ok());
    // Escaped Thing IDs compare unescaped.
    let thing = "urn:uuid:1/2";
    let topic = topics.event(thing, "e");
    assert!(t(&topic, r#"{"thingID":"urn:uuid:1/2"}"#).is_ok());
    assert!(t(&topic, r#"{"thingID":"urn:uuid:1"}"#).is_err());
    // The first member read quickly decides only what the whole
    // reading would: a second claim is a duplicate (not checked), an
    // escaped or other first claim is read in full.
    assert!(t("lmos/a/events/e", r#"{ "thingID" : "a", "thingID":"b"}"#).is_ok());
    assert!(t("lmos/a/events/e", r#"{"thingID":"\u0061","data":1}"#).is_ok());
    assert!(t("lmos/a/events/e", r#"{"thingID":"\u0062","data":1}"#).is_err());
    assert!(t("lmos/a/events/e", r#"{"thingID":"ab","data":1}"#).is_err());
    assert!(t(
        "lmos/a/events/e",
        r#"{"thingId":"a","data":{"thingID":"b"}}"#
    )
    .is_ok());
}

#[test]
fn the_first_claim_is_read_without_parsing_the_rest() {
    assert_eq!(first_claim(br#" { "thingID" : "a" ,"#), Some(&b"a"[..]));
    assert_eq!(first_claim(br#"{"thingId":"urn:x","#), Some(&b"urn:x"[..]));
    for none in [
        &br#"{"data":1,"thingID":"a"}"#[..],
        br#"{"thingID":"a\u0062"}"#,
        br#"{"thingID":1}"#,
        br#"{"thingID":"a"#,
        br#"["thingID","a"]"#,
    ] {
        assert_eq!(first_claim(none), None);
    }
}
use crate::auth::granted as principal;
use crate::config::AuthConfig;

fn t() -> Topics {
    Topics::new("lmos").unwrap()
}

#[test]
fn consumers_subscribe_to_what_they_consume_only() {
    let p = principal(&[], &["urn:a"], &[]);
    for ok in [
        "lmos/urn:a/events/e",
        "lmos/urn:a/events/+",
        "lmos/urn:a/properties/#",
        "lmos/urn:a/actions/+/status/+",
        "lmos/urn:a/td",
        "lmos/urn:a/values/events/e",
        "lmos/urn:a/values/properties/+",
        "lmos/urn:a/replies/my-correlation",
        "$share/g/lmos/urn:a/events/e",
        "other/#",
        "$SYS/#",
    ] {
        assert_eq!(may_subscribe(&t(), &p, ok), Ok(()), "{ok}");
    }
    for (denied, access) in [
        ("lmos/urn:b/events/e", Access::Consume),
        ("lmos/urn:b/values/events/e", Access::Consume),
        ("lmos/+/events/e", Access::Consume),
        ("#", Access::Host),
        ("lmos/#", Access::Host),
        ("+/urn:b/events/e", Access::Consume),
        ("lmos/urn:a/#", Access::Host),
        ("lmos/urn:a/requests/+", Access::Host),
        ("lmos/urn:a/agent/requests/+", Access::Host),
        ("lmos/urn:a/replies/+", Access::Host),
        ("$share/g/lmos/urn:b/events/e", Access::Consume),
    ] {
        let e = may_subscribe(&t(), &p, denied).unwrap_err();
        assert_eq!(e.access, access, "{denied}");
    }
}

#[test]
fn agents_subscribe_to_their_requests() {
    let agent = principal(&["urn:a"], &[], &[]);
    assert_eq!(
        may_subscribe(&t(), &agent, "lmos/urn:a/agent/requests/+"),
        Ok(())
    );
    assert_eq!(
        may_subscribe(&t(), &agent, "lmos/urn:a/agent/#"),
        Err(Denial {
            access: Access::Consume,
            thing: Some("urn:a".into())
        })
    );
    assert!(may_subscribe(&t(), &agent, "lmos/urn:b/agent/requests/+").is_err());
}

#[test]
fn only_the_agent_publishes_for_its_thing() {
    let agent = principal(&["urn:a"], &["*"], &[]);
    let consumer = principal(&[], &["*"], &["urn:a"]);
    for topic in [
        "lmos/urn:a/events/e",
        "lmos/urn:a/properties/p",
        "lmos/urn:a/actions/x/status/1",
        "lmos/urn:a/agent/replies",
        "lmos/urn:a/agent/status",
        "lmos/urn:a/td",
        "lmos/urn:a/replies/c",
        "lmos/urn:a/agent/requests/invokeAction",
    ] {
        assert_eq!(may_publish(&t(), &agent, topic), Ok(()), "{topic}");
        assert_eq!(
            may_publish(&t(), &consumer, topic).unwrap_err().access,
            Access::Host,
            "{topic}"
        );
    }
    assert!(may_publish(&t(), &agent, "lmos/urn:b/events/e").is_err());
    assert_eq!(may_publish(&t(), &consumer, "elsewhere/x"), Ok(()));
}

#[test]
fn requests_take_consume_or_operate_by_type() {
    let reader = principal(&[], &["urn:a"], &[]);
    assert_eq!(
        may_publish(&t(), &reader, "lmos/urn:a/requests/readProperty"),
        Ok(())
    );
    for ty in [
        "invokeAction",
        "writeProperty",
        "writeMultipleProperties",
        "cancelAction",
        "queryAction",
    ] {
        let e = may_publish(&t(), &reader, &format!("lmos/urn:a/requests/{ty}")).unwrap_err();
        assert_eq!(e.access, Access::Operate, "{ty}");
    }
    let operator = principal(&[], &[], &["urn:a"]);
    assert_eq!(
        may_publish(&t(), &operator, "lmos/urn:a/requests/invokeAction"),
        Ok(())
    );
}

#[test]
fn escaped_thing_ids_are_checked_as_the_ids_they_are() {
    let p = principal(&[], &["https://x.org/a"], &[]);
    let topic = t().event("https://x.org/a", "e");
    assert_eq!(may_subscribe(&t(), &p, &topic), Ok(()));
    assert!(may_subscribe(&t(), &p, &t().event("https://x.org/b", "e")).is_err());
}

/// What a CONNECT from a client with `certificate` and these credentials
/// gets: the principal's name, or the refusal.
async fn connect_as(
    required: bool,
    certificate: Option<&str>,
    credentials: Option<(&str, &[u8])>,
) -> Result<String, Refusal> {
    use crate::config::PrincipalConfig;
    let principal = |name: &str, password: &str| PrincipalConfig {
        name: name.into(),
        password_file: password.into(),
        ..PrincipalConfig::default()
    };
    let dir = std::env::temp_dir().join(format!("lmos-mqtt-cert-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let pw = dir.join("pw");
    std::fs::write(&pw, "secret").unwrap();
    let config = AuthConfig {
        principals: vec![
            principal("spiffe://example.org/a", ""),
            principal("alice", pw.to_str().unwrap()),
        ],
        ..AuthConfig::default()
    };
    let authority = Authority::from_config(&config).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    let policy = MqttPolicy::new(authority, t(), required, Metrics::default());
    let peer = "127.0.0.1:1".parse().unwrap();
    let (user, password) = (credentials.map(|c| c.0), credentials.map(|c| c.1));
    let verdict = policy.connect(peer, certificate, "c", user, password).await;
    verdict.map(|session| session.name().to_owned())
}

#[tokio::test]
async fn a_client_certificate_names_the_principal_of_a_connect_without_a_password() {
    let a = Some("spiffe://example.org/a");
    for required in [true, false] {
        assert_eq!(
            connect_as(required, a, None).await.unwrap(),
            "spiffe://example.org/a"
        );
        let alice = Some(("alice", b"secret".as_slice()));
        assert_eq!(connect_as(required, a, alice).await.unwrap(), "alice");
        let wrong = Some(("alice", b"wrong".as_slice()));
        assert_eq!(
            connect_as(required, a, wrong).await.err(),
            Some(Refusal::BadCredentials)
        );
        for unknown in [Some("spiffe://example.org/b"), Some("")] {
            assert_eq!(
                connect_as(required, unknown, None).await.err(),
                Some(Refusal::Certificate)
            );
        }
    }
    assert_eq!(connect_as(false, None, None).await.unwrap(), "anonymous");
    assert_eq!(
        connect_as(true, None, None).await.err(),
        Some(Refusal::NotAuthorized)
    );
}
