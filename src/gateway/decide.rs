//! What a WebSocket client's frame means, decided without I/O: size and
//! syntax checks, the peer's dialect, authorization, the agent-data check
//! against the Thing's description, whether an agent's message may answer
//! a routed request, and what [`inbound::route`] makes of the rest. The
//! connection ([`super::connection`]) carries out the [`Effect`]s, in order;
//! it only reads, writes and waits.

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tracing::{debug, info};

use super::dispatcher::Command;
use super::inbound::{route, Destination};
use super::subscriptions::ConnId;
use super::{authorize, forbidden};
use crate::auth::{Access, Principal};
use crate::broker::Publication;
use crate::directory::{affordances, DirectoryService};
use crate::lmos::dialect::{self, Dialect, Gatherer};
use crate::lmos::{Direction, Message, Problem, ProblemKind, Rejection};
use crate::telemetry::metrics::{self, Metrics};
use crate::topics::Topics;

/// What the connection does about a frame.
#[derive(Debug)]
pub(super) enum Effect {
    /// An LMOS `error` to this client, queued behind what the dispatcher
    /// queued for it before.
    Refuse {
        problem: Problem,
        thing: Option<String>,
        correlation: Option<String>,
    },
    /// A message to this client at once, in its dialect.
    Send(String),
    /// To the dispatcher.
    Command(Command),
    /// Onto the bus, each traced as `message`'s; a refusal if the bus has
    /// stopped.
    Publish {
        message: Box<Message>,
        publications: Vec<Publication>,
    },
    /// A Thing Description this connection's agent sends: registered as by
    /// `PUT /things/{id}`, and announced.
    RegisterTd { id: String, text: Utf8Bytes },
}

impl Effect {
    fn refuse(problem: Problem, thing: Option<&str>, correlation: Option<&str>) -> Effect {
        Effect::Refuse {
            problem,
            thing: thing.map(str::to_owned),
            correlation: correlation.map(str::to_owned),
        }
    }
}

/// The connection's own state that decisions read and change.
pub(super) struct Peer<'a> {
    pub id: ConnId,
    pub principal: &'a Principal,
    /// Things this connection serves as their agent (`?host=`).
    pub hosts: &'a [String],
    /// The dialect the peer speaks, once one of its messages said so.
    pub dialect: &'a mut Option<Dialect>,
    /// Kotlin reads of several properties waiting for all their readings.
    pub gatherer: &'a mut Gatherer,
}

/// What the gateway as a whole lends a decision.
pub(super) struct Context<'a> {
    pub topics: &'a Topics,
    pub max_message_size: usize,
    pub validate_agent_data: bool,
    /// Thing Descriptions, for Kotlin reads and the agent-data check (its
    /// lock is taken only then, and never across an await).
    pub directory: &'a DirectoryService,
    pub metrics: &'a Metrics,
}

/// A binary frame: one stream chunk ([`crate::lmos::binary`]), taken as
/// the JSON message it stands for; anything else is refused.
pub(super) fn binary(peer: &mut Peer<'_>, cx: &Context<'_>, frame: &[u8]) -> Vec<Effect> {
    if let Some(refused) = too_large(cx, frame.len()) {
        return refused;
    }
    match crate::lmos::binary::decode(frame) {
        // Past the size check: base64 makes the payload a third larger,
        // which the sidecar, not the peer, chose.
        Ok(text) => message(peer, cx, text.into()),
        Err(e) => {
            let detail = format!(
                "A binary frame carries one stream chunk: a 4-byte big-endian header length, the JSON message without `stream.data`, then the chunk's bytes. This one does not: {e}. Other LMOS messages are JSON text frames."
            );
            let problem = Problem::new(ProblemKind::BinaryFrame, detail);
            vec![Effect::refuse(problem, None, None)]
        }
    }
}

/// A `413` for a frame of `len` bytes over `gateway.max_message_size`.
fn too_large(cx: &Context<'_>, len: usize) -> Option<Vec<Effect>> {
    let max = cx.max_message_size;
    if len <= max {
        return None;
    }
    let detail = format!(
        "The message has {len} bytes; this gateway accepts at most {max} (gateway.max_message_size)."
    );
    let problem = Problem::new(ProblemKind::MessageTooLarge, detail);
    Some(vec![Effect::refuse(problem, None, None)])
}

/// A text frame.
pub(super) fn text(peer: &mut Peer<'_>, cx: &Context<'_>, text: Utf8Bytes) -> Vec<Effect> {
    if let Some(refused) = too_large(cx, text.len()) {
        return refused;
    }
    message(peer, cx, text)
}

/// A message within the size limit.
fn message(peer: &mut Peer<'_>, cx: &Context<'_>, text: Utf8Bytes) -> Vec<Effect> {
    let value = match serde_json::from_slice::<Value>(text.as_bytes()) {
        Ok(value) => value,
        // Parsed again for the rejection naming where it failed.
        Err(_) => return parsed(peer, cx, Message::parse(text.as_bytes()), text),
    };
    if looks_like_td(&value) {
        return td(peer, &value, text);
    }
    let detected = match &value {
        Value::Object(map) => dialect::detect(map),
        _ => None,
    };
    if peer.dialect.is_none() && detected.is_some() {
        *peer.dialect = detected;
        debug!(dialect = ?detected, "The peer's dialect is known.");
    }
    let kotlin = detected == Some(Dialect::Kotlin)
        || (detected.is_none() && *peer.dialect == Some(Dialect::Kotlin));
    match value {
        Value::Object(map) if kotlin => in_kotlin(peer, cx, map),
        // The draft's (or a message valid in both): published verbatim.
        value => parsed(peer, cx, Message::from_value(value), text),
    }
}

/// A message in the Kotlin dialect: the canonical message(s) it stands for
/// are decided as if sent so, and what is published is their canonical
/// form, so draft consumers read it.
fn in_kotlin(peer: &mut Peer<'_>, cx: &Context<'_>, map: Map<String, Value>) -> Vec<Effect> {
    let (thing, correlation) = dialect::reply_target(&map);
    // `readAllProperties` looks up the Thing's TD: authorized first, so
    // that a principal without rights learns nothing of whether it exists.
    if map.get("messageType").and_then(Value::as_str) == Some("readAllProperties") {
        let target = thing.as_deref().unwrap_or_default();
        if !peer.principal.may(Access::Consume, target) {
            cx.metrics
                .denied(metrics::WEBSOCKET, Access::Consume.as_str());
            let problem = forbidden(peer.principal, Access::Consume, "readAllProperties", target);
            return vec![Effect::refuse(
                problem,
                thing.as_deref(),
                correlation.as_deref(),
            )];
        }
    }
    let normalized = dialect::normalize(map, |t| {
        let directory = cx.directory.directory();
        dialect::readable_properties(directory.get(t)?)
    });
    let normalized = match normalized {
        Ok(n) => n,
        Err(e) => {
            let problem = e.problem();
            return vec![Effect::refuse(
                problem,
                thing.as_deref(),
                correlation.as_deref(),
            )];
        }
    };
    if let Some(names) = &normalized.gather {
        let thing = thing.as_deref().unwrap_or_default();
        let correlation = correlation.as_deref().unwrap_or_default();
        if let Some(empty) = peer.gatherer.gather(thing, correlation, names) {
            return vec![Effect::Send(crate::lmos::splice::text(&empty))];
        }
    }
    let mut effects = Vec::new();
    for map in normalized.messages {
        let message = Message::from_value(Value::Object(map));
        let raw = match &message {
            Ok(m) => Utf8Bytes::from(m.to_json()),
            Err(_) => Utf8Bytes::default(),
        };
        effects.extend(parsed(peer, cx, message, raw));
    }
    effects
}

/// A message as read (or why it could not be); `raw` is what an agent's
/// message is published as.
fn parsed(
    peer: &mut Peer<'_>,
    cx: &Context<'_>,
    parsed: Result<Message, Rejection>,
    raw: Utf8Bytes,
) -> Vec<Effect> {
    let message = match parsed {
        Ok(m) => {
            cx.metrics
                .received(metrics::WEBSOCKET, m.message_type().as_str());
            m
        }
        Err(rejection) => {
            let problem = Problem::from(&rejection);
            let correlation = rejection.reply_correlation_id().map(str::to_owned);
            return vec![Effect::refuse(
                problem,
                rejection.thing_id.as_deref(),
                correlation.as_deref(),
            )];
        }
    };
    let thing = message.thing_id.clone();
    let correlation = message.reply_correlation_id().to_owned();
    let refuse = |problem| vec![Effect::refuse(problem, Some(&thing), Some(&correlation))];
    if let Err((access, problem)) = authorize(peer.principal, &message) {
        cx.metrics.denied(metrics::WEBSOCKET, access.as_str());
        info!(
            access = access.as_str(),
            message_type = %message.message_type(),
            "Denied a WebSocket message."
        );
        return refuse(problem);
    }
    if cx.validate_agent_data {
        let refused = {
            let directory = cx.directory.directory();
            directory
                .get(&thing)
                .and_then(|td| affordances::check_agent_data(td, &message).err())
        };
        if let Some(problem) = refused {
            return refuse(problem);
        }
    }
    let destination = route(peer.id, &message, Bytes::from(raw), cx.topics);
    // What a hosting agent sends with a correlation ID may answer a request
    // routed to it; the dispatcher decides, and publishes it as usual when
    // it does not.
    let answers = message.message_type().direction() == Direction::ThingToConsumer
        && message.correlation_id.is_some()
        && peer.hosts.contains(&thing);
    if answers {
        let fallback = match destination {
            Destination::Bus(publications) => publications,
            _ => Vec::new(),
        };
        return vec![Effect::Command(Command::AgentMessage {
            conn: peer.id,
            thing,
            message: Box::new(message),
            fallback,
        })];
    }
    match destination {
        Destination::Dispatcher(mut command) => {
            if let Command::Subscribe { acknowledge, .. }
            | Command::Unsubscribe { acknowledge, .. } = &mut command
            {
                // The Kotlin stack waits for an acknowledgement.
                *acknowledge = *peer.dialect == Some(Dialect::Kotlin);
            }
            debug!(message_type = %message.message_type(), "Applying subscription change.");
            vec![Effect::Command(command)]
        }
        Destination::Bus(publications) => vec![Effect::Publish {
            message: Box::new(message),
            publications,
        }],
        Destination::Refused(problem) => refuse(problem),
    }
}

/// A Thing Description over the WebSocket: only for a Thing this
/// connection hosts.
fn td(peer: &Peer<'_>, value: &Value, text: Utf8Bytes) -> Vec<Effect> {
    match value["id"]
        .as_str()
        .filter(|id| peer.hosts.iter().any(|h| h == id))
    {
        Some(id) => vec![Effect::RegisterTd {
            id: id.to_owned(),
            text,
        }],
        None => {
            let detail = "A Thing Description sent over the WebSocket must have an `id` naming a Thing this connection hosts (`?host=<thingID>`); others go to PUT /things/{id}.";
            vec![Effect::refuse(
                Problem::new(ProblemKind::Forbidden, detail),
                None,
                None,
            )]
        }
    }
}

/// A JSON object with `@context` and no `messageType`: a Thing Description,
/// not an LMOS message.
fn looks_like_td(value: &Value) -> bool {
    value.get("@context").is_some() && value.get("messageType").is_none()
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
