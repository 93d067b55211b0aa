//! `[auth.jwt]` on MQTT with a locally signed token as the password (the
//! real provider's tests are tests/oidc): any user name goes with it, and
//! an MQTT 5 client is told at the token's `exp` (DISCONNECT 0xA0).

use lmos_testkit as common;

use common::jwt::LocalIssuer;
use common::*;

#[tokio::test]
async fn a_jwt_password_connects_whatever_the_user_name() {
    let issuer = LocalIssuer::new();
    let mut c = test_config();
    issuer.configure(&mut c);
    let sidecar = TestSidecar::start_with(c).await;
    let token = issuer.token("alice", "things", 300);
    for user in ["alice", "whoever"] {
        let t = token.clone();
        let refused = mqtt_refusal(sidecar.mqtt, |o| {
            o.set_credentials(user, t);
        })
        .await;
        assert_eq!(refused, None, "{user}");
    }
    let other = LocalIssuer::new().token("alice", "things", 300);
    let refused = mqtt_refusal(sidecar.mqtt, |o| {
        o.set_credentials("alice", other);
    })
    .await;
    assert_eq!(
        refused,
        Some(rumqttc::ConnectReturnCode::BadUserNamePassword)
    );
}

#[tokio::test]
async fn an_mqtt5_client_is_disconnected_at_the_tokens_exp() {
    use common::raw_mqtt::{packet, string, Client};
    let issuer = LocalIssuer::new();
    let mut c = test_config();
    issuer.configure(&mut c);
    let sidecar = TestSidecar::start_with(c).await;
    // MQTT 5 CONNECT: no user name, the token as password, clean start.
    let mut body = string(b"MQTT");
    body.extend([5, 0x42, 0, 60, 0]);
    body.extend(string(b"expiring"));
    body.extend(string(issuer.token("alice", "things", 2).as_bytes()));
    let mut client = Client::open(sidecar.mqtt).await;
    client.send(&packet(0x10, &body)).await;
    let ack = client.recv().await.expect("CONNACK");
    assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
    let last = client.until_closed().await;
    let disconnect = last.last().expect("a DISCONNECT before the close");
    assert_eq!((disconnect[0], disconnect[2]), (0xE0, 0xA0), "{last:?}");
}
