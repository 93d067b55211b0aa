//! The authorization rules for MQTT, on topics and filters. Pure: the MQTT
//! guard in front of the broker asks, for every SUBSCRIBE filter and every
//! PUBLISH topic.
//!
//! What each part of a Thing's subtree takes:
//!
//! | subtree                                   | subscribe | publish |
//! |-------------------------------------------|-----------|---------|
//! | `events/…`, `properties/…`, `actions/…`, `td`, `agent/status`, `values/…` | consume | host |
//! | `requests/{type}`                         | host (others' requests) | consume for `readProperty`, else operate |
//! | `replies/{correlationID}`                 | consume; host with a wildcard | host |
//! | `agent/requests/…`, `agent/replies`       | host | host |
//! | anything else under the Thing             | consume | host |
//!
//! A wildcard in the Thing's level needs the access for every Thing (`*`).
//! Topics outside the prefix are not LMOS's business and are left alone.

use std::net::SocketAddr;

use tracing::info;

use super::verifier::Quiet;
use super::{Access, Authority, Credentials, Principal, Refused};
use crate::broker::guard::{GuardEvent, GuardLimit, Policy, Refusal, Session, Verdict};
use crate::telemetry::metrics::{Metrics, MQTT};
use crate::topics::{
    unescape, Topics, ACTIONS, AGENT, EVENTS, PROPERTIES, REPLIES, REQUESTS, STATUS, TD, VALUES,
};

/// Why an operation is refused: the access it needed, and for which Thing
/// (`None`: every Thing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub access: Access,
    pub thing: Option<String>,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.thing {
            Some(t) => write!(f, "needs `{}` access to {t}", self.access),
            None => write!(f, "needs `{}` access to every Thing", self.access),
        }
    }
}

enum Things {
    One(String),
    All,
}

fn check(principal: &Principal, things: &Things, access: Access) -> Result<(), Denial> {
    let ok = match things {
        Things::One(t) => principal.may(access, t),
        Things::All => principal.may_all(access),
    };
    if ok {
        Ok(())
    } else {
        Err(Denial {
            access,
            thing: match things {
                Things::One(t) => Some(t.clone()),
                Things::All => None,
            },
        })
    }
}

/// The levels of `topic` under the prefix, or `None` when the topic or
/// filter cannot reach into the LMOS subtree at all.
fn under_prefix<'a>(topics: &Topics, filter: &'a str) -> Option<Vec<&'a str>> {
    let mut levels = filter.split('/');
    for prefix_level in topics.prefix().split('/') {
        match levels.next() {
            Some("#") => return Some(vec!["#"]),
            Some("+") => {}
            Some(l) if l == prefix_level => {}
            _ => return None,
        }
    }
    let rest: Vec<&str> = levels.collect();
    // The prefix itself as a topic, or `prefix/#` reaching everything.
    Some(rest)
}

/// Shared subscriptions (`$share/{group}/{filter}`) are checked on the filter.
fn strip_share(filter: &str) -> &str {
    filter
        .strip_prefix("$share/")
        .and_then(|rest| rest.split_once('/'))
        .map_or(filter, |(_, f)| f)
}

/// Can `filter` (levels, MQTT wildcards) match a topic of this template
/// (literal levels, `*` for any one level)?
fn overlaps(filter: &[&str], template: &[&str]) -> bool {
    match (filter.first(), template.first()) {
        (Some(&"#"), _) => true,
        (None, None) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(f), Some(t)) => {
            (*f == "+" || *t == "*" || f == t) && overlaps(&filter[1..], &template[1..])
        }
    }
}

const CONSUMED: &[&[&str]] = &[
    &[EVENTS, "*"],
    &[PROPERTIES, "*"],
    &[ACTIONS, "*", STATUS, "*"],
    &[TD],
    &[AGENT, STATUS],
    &[VALUES, EVENTS, "*"],
    &[VALUES, PROPERTIES, "*"],
];
const HOSTED: &[&[&str]] = &[&[REQUESTS, "*"], &[AGENT, REQUESTS, "*"], &[AGENT, REPLIES]];

pub fn may_subscribe(topics: &Topics, principal: &Principal, filter: &str) -> Result<(), Denial> {
    let Some(rest) = under_prefix(topics, strip_share(filter)) else {
        return Ok(());
    };
    let (things, kind) = match rest.split_first() {
        None => return Ok(()),
        Some((&"#", _)) => (Things::All, &["#"][..]),
        Some((&"+", kind)) => (Things::All, kind),
        Some((thing, kind)) => match unescape(thing) {
            Ok(t) => (Things::One(t.into_owned()), kind),
            // Not a level the sidecar writes: no Thing lives there.
            Err(_) => return Ok(()),
        },
    };
    if kind.is_empty() {
        return Ok(());
    }
    let mut needs = Vec::new();
    if HOSTED.iter().any(|t| overlaps(kind, t)) {
        needs.push(Access::Host);
    }
    match kind {
        [REPLIES, c] if *c != "+" && *c != "#" => needs.push(Access::Consume),
        _ if overlaps(kind, &[REPLIES, "*"]) => needs.push(Access::Host),
        _ => {}
    }
    let known = CONSUMED
        .iter()
        .chain(HOSTED)
        .chain([&[REPLIES, "*"][..]].iter())
        .any(|t| overlaps(kind, t));
    if CONSUMED.iter().any(|t| overlaps(kind, t)) || !known {
        needs.push(Access::Consume);
    }
    for access in needs {
        check(principal, &things, access)?;
    }
    Ok(())
}

pub fn may_publish(topics: &Topics, principal: &Principal, topic: &str) -> Result<(), Denial> {
    let Some(rest) = under_prefix(topics, topic) else {
        return Ok(());
    };
    let Some((thing, kind)) = rest.split_first() else {
        return Ok(());
    };
    let Ok(thing) = unescape(thing) else {
        // Only the agent's side writes into a Thing's subtree, and this is
        // no Thing's; treat it as the agent's side of nobody.
        return Err(Denial {
            access: Access::Host,
            thing: Some((*thing).to_owned()),
        });
    };
    let access = match kind {
        [REQUESTS, message_type] => {
            match unescape(message_type).ok().and_then(|t| t.parse().ok()) {
                Some(t) if Access::to_send(t) != Access::Host => Access::to_send(t),
                // Not a request type: the sidecar refuses it anyway; reading
                // its error takes no more than consuming.
                _ => Access::Consume,
            }
        }
        _ => Access::Host,
    };
    check(principal, &Things::One(thing.into_owned()), access)
}

/// The sidecar's rules, for the MQTT guard.
pub struct MqttPolicy {
    authority: Authority,
    topics: Topics,
    /// `mqtt.authentication`: every CONNECT must name a principal.
    required: bool,
    metrics: Metrics,
    /// CONNECTs without credentials, logged once a minute.
    anonymous_refused: Quiet,
    /// Client certificates naming no principal, logged once a minute.
    unknown_certificate: Quiet,
}

impl MqttPolicy {
    pub fn new(authority: Authority, topics: Topics, required: bool, metrics: Metrics) -> Self {
        MqttPolicy {
            authority,
            topics,
            required,
            metrics,
            anonymous_refused: Quiet::default(),
            unknown_certificate: Quiet::default(),
        }
    }

    /// A password CONNECT's credentials win; without one, the client
    /// certificate's identity (`certificate`) names the principal, whether
    /// or not `mqtt.authentication` is on: a listener that asks for
    /// certificates authenticates by them.
    async fn principal(
        &self,
        peer: SocketAddr,
        certificate: Option<&str>,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> Result<Principal, Refusal> {
        // A JWT as the password (`auth.jwt`) names the principal itself:
        // any user name goes with it, none too (MQTT 5).
        let jwt = password.is_some_and(|p| self.authority.takes_jwt(p));
        match (username, password) {
            // With no principals configured there is no one to be: clients
            // that send credentials out of habit stay anonymous.
            (name, Some(secret))
                if (jwt || name.is_some_and(|n| !n.is_empty())) && !self.authority.is_empty() =>
            {
                let name = name.unwrap_or_default();
                let credentials = Credentials::NameAndSecret { name, secret };
                let verified = self.authority.verify(Some(peer.ip()), credentials).await;
                verified.map_err(|refused| match refused {
                    // MQTT has no code of its own for an expired token.
                    Refused::Invalid | Refused::Expired => Refusal::BadCredentials,
                    Refused::Busy => Refusal::Busy,
                    Refused::Throttled(_) => Refusal::Throttled,
                })
            }
            _ if certificate.is_some() => self.certified(peer, certificate.unwrap_or_default()),
            _ if self.required => {
                if let Some(more) = self.anonymous_refused.due(tokio::time::Instant::now()) {
                    info!(%peer, more, "Refused an MQTT connection without credentials (mqtt.authentication); more within a minute are counted, not logged.");
                }
                Err(Refusal::NotAuthorized)
            }
            _ => Ok(self.authority.anonymous()),
        }
    }

    /// The entry a client certificate names; none: refused (CONNACK not
    /// authorized), logged once a minute.
    fn certified(&self, peer: SocketAddr, identity: &str) -> Result<Principal, Refusal> {
        let principal = self.authority.certificate(identity);
        if principal.is_none() {
            if let Some(more) = self.unknown_certificate.due(tokio::time::Instant::now()) {
                info!(%peer, ?identity, more, "Refused an MQTT connection whose client certificate names no principal ([[auth.principals]]); more within a minute are counted, not logged.");
            }
        }
        principal.ok_or(Refusal::Certificate)
    }
}

struct MqttSession {
    principal: Principal,
    topics: Topics,
    metrics: Metrics,
}

impl MqttSession {
    fn verdict(&self, result: Result<(), Denial>) -> bool {
        match result {
            Ok(()) => true,
            Err(denial) => {
                self.metrics.denied(MQTT, denial.access.as_str());
                false
            }
        }
    }
}

impl Session for MqttSession {
    fn name(&self) -> &str {
        self.principal.name()
    }

    fn expires_in(&self) -> Option<std::time::Duration> {
        self.principal.expires_in()
    }

    fn may_subscribe(&self, filter: &str) -> bool {
        self.verdict(may_subscribe(&self.topics, &self.principal, filter))
    }

    fn may_publish(&self, topic: &str) -> bool {
        self.verdict(may_publish(&self.topics, &self.principal, topic))
    }

    /// `{prefix}/{thing}/requests/{messageType}`. Asked of every PUBLISH,
    /// so it collects nothing (a topic name has no wildcards).
    fn names_publisher(&self, topic: &str) -> bool {
        let Some(rest) = topic
            .strip_prefix(self.topics.prefix())
            .and_then(|r| r.strip_prefix('/'))
        else {
            return false;
        };
        let mut levels = rest.split('/');
        matches!(
            (levels.next(), levels.next(), levels.next(), levels.next()),
            (Some(_), Some(REQUESTS), Some(_), None)
        )
    }
}

impl Policy for MqttPolicy {
    /// Credentials sent are checked even where none are required: a client
    /// that names itself and gives the wrong password is refused, not
    /// quietly made anonymous.
    fn connect<'a>(
        &'a self,
        peer: SocketAddr,
        certificate: Option<&'a str>,
        _client_id: &'a str,
        username: Option<&'a str>,
        password: Option<&'a [u8]>,
    ) -> Verdict<'a> {
        Box::pin(async move {
            let principal = self
                .principal(peer, certificate, username, password)
                .await?;
            Ok(Box::new(MqttSession {
                principal,
                topics: self.topics.clone(),
                metrics: self.metrics.clone(),
            }) as Box<dyn Session>)
        })
    }

    /// An LMOS message on a Thing's topic names that Thing: a principal
    /// that may publish on its own topics cannot speak for another Thing
    /// through them. Payloads that are no JSON object, or name no Thing,
    /// claim nothing and pass.
    fn payload_fits(&self, topic: &str, payload: &[u8]) -> Result<(), String> {
        thing_fits(&self.topics, topic, payload)
    }

    fn observe(&self, event: GuardEvent) {
        match event {
            GuardEvent::Refused(Refusal::BadCredentials) => {
                self.metrics.auth_failure(MQTT, "invalid")
            }
            GuardEvent::Refused(Refusal::NotAuthorized) => {
                self.metrics.auth_failure(MQTT, "missing")
            }
            GuardEvent::Refused(Refusal::Certificate) => {
                self.metrics.auth_failure(MQTT, "certificate")
            }
            GuardEvent::Refused(Refusal::Busy) => self.metrics.auth_failure(MQTT, "busy"),
            GuardEvent::Refused(Refusal::Throttled) => self.metrics.auth_failure(MQTT, "throttled"),
            GuardEvent::Limit(limit) => self.metrics.limit_hit(
                MQTT,
                match limit {
                    GuardLimit::Connections => "max_connections",
                    GuardLimit::Subscriptions => "max_subscriptions",
                    GuardLimit::PacketSize => "max_payload_size",
                    GuardLimit::HandshakeTimeout => "connection_timeout_ms",
                    GuardLimit::KeptSessions => "max_kept_sessions",
                    GuardLimit::Keep(label) => label,
                    GuardLimit::ClientIdLength => "max_client_id_length",
                },
            ),
            GuardEvent::PayloadRefused => self.metrics.dropped("thing_mismatch"),
            GuardEvent::SessionDenied => self.metrics.denied(MQTT, "session"),
            // Counted per access in the session, which knows it.
            GuardEvent::SubscribeDenied | GuardEvent::PublishDenied => {}
        }
    }
}

/// See [`MqttPolicy::payload_fits`].
pub fn thing_fits(topics: &Topics, topic: &str, payload: &[u8]) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Claim<'a> {
        #[serde(rename = "thingID", alias = "thingId", borrow, default)]
        thing_id: Option<std::borrow::Cow<'a, str>>,
    }
    let Some(rest) = under_prefix(topics, topic) else {
        return Ok(());
    };
    let Some(Ok(thing)) = rest.first().map(|t| unescape(t)) else {
        return Ok(());
    };
    if rest.len() < 2 || payload.trim_ascii_start().first() != Some(&b'{') {
        return Ok(());
    }
    if first_claim(payload) == Some(thing.as_bytes()) {
        // Whatever follows, the answer is yes: another claim would be a
        // duplicate field, and a payload that is not JSON is not checked.
        // Reading the whole payload for it was most of what the guard
        // spent on a publication (issue 32).
        return Ok(());
    }
    match serde_json::from_slice::<Claim<'_>>(payload) {
        Ok(Claim {
            thing_id: Some(claimed),
        }) if claimed != thing => Err(format!(
            "the message's thingID {claimed:?} is not the Thing of its topic ({thing:?})"
        )),
        _ => Ok(()),
    }
}

/// The Thing ID a JSON object claims in its first member, when that is
/// `thingID` (or `thingId`) with a string written without escapes: the
/// LMOS messages' own order. `None` for anything else.
fn first_claim(payload: &[u8]) -> Option<&[u8]> {
    let rest = payload.trim_ascii_start().strip_prefix(b"{")?;
    let rest = rest.trim_ascii_start();
    let rest = rest
        .strip_prefix(br#""thingID""#)
        .or_else(|| rest.strip_prefix(br#""thingId""#))?;
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    let rest = rest.trim_ascii_start().strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then_some(&rest[..end])
}

#[cfg(test)]
#[path = "mqtt_tests.rs"]
mod tests;
