//! An agent's answer on its way back: to the consumer that asked (and the
//! invocation's watchers), its invocation status topic, and whoever waits
//! on a cancelAction.

use serde_json::Value;

use super::asked::Invocation;
use super::{Consumer, Effect, Kind, Requests, Timer};
use crate::broker::{ChunkProperties, Publication};
use crate::directory::forms::status_href;
use crate::lmos::binary::RawChunk;
use crate::lmos::splice::{json_string, Prepared};
use crate::lmos::stream::Chunk;
use crate::lmos::{is_terminal, Body, Message};

/// An action status an agent sent for an invocation.
struct InvocationStatus<'a> {
    thing: &'a str,
    action: &'a str,
    terminal: bool,
}

impl Requests {
    /// Whether a message from the agent hosting `thing` answers a request
    /// this sidecar routed and still waits on (not a late answer, not a
    /// message of its own).
    pub fn answers(&self, thing: &str, message: &Message) -> bool {
        message
            .correlation_id
            .as_ref()
            .and_then(|route| self.routes.get(route))
            .is_some_and(|p| p.thing == thing && !p.finished)
    }

    /// The consumer's copy of an agent's answer (see [`Requests::answers`]);
    /// `trace` is the `traceparent` it carries on, when traced. `None` when
    /// it answers nothing.
    pub fn reply(
        &mut self,
        thing: &str,
        message: &Message,
        trace: Option<&str>,
    ) -> Option<Vec<Effect>> {
        if !self.answers(thing, message) {
            return None;
        }
        let route = message.correlation_id.clone()?;
        let p = self.routes.get_mut(&route)?;
        if let Some((started, message_type)) = p.started.take() {
            self.metrics
                .request_done(message_type.as_str(), started.elapsed());
        }
        // The parsed message keeps every member it arrived with.
        let Value::Object(mut prepared_map) = message.to_value() else {
            return None;
        };
        if let (Body::ActionStatus { action, .. }, Kind::Invocation) =
            (&message.body, p.asked.kind())
        {
            // Where the invocation can be asked after, as the WoT profiles'
            // status objects say.
            prepared_map
                .entry("href")
                .or_insert_with(|| status_href(thing, action, &p.correlation).into());
        }
        let copy =
            Prepared::from_members(&prepared_map, thing).with(&json_string(&p.correlation), trace);
        let kind = p.asked.kind();
        // Whether it is an output chunk matters only to a stream with
        // credit: the others' answers are not read for it.
        let chunk = self.credits.contains_key(&route)
            && matches!(message.body, Body::ActionStatus { .. })
            && matches!(Chunk::of(&message.extra), Ok(Some(c)) if !c.end);
        let mut effects = self.deliver(&route, &copy, chunk);
        match (&message.body, kind) {
            (Body::ActionStatus { action, status, .. }, Kind::Invocation) => {
                let status = InvocationStatus {
                    thing,
                    action,
                    terminal: is_terminal(status),
                };
                self.invocation_status(&route, status, copy, &mut effects)?;
            }
            (Body::Error(_), Kind::Invocation) => {
                self.invocation_error(&route, copy, &mut effects)?;
            }
            (Body::PropertyReadings { data, timestamp }, _) => {
                // Observers see what was written.
                for (name, value) in data {
                    let reading = Message::new(
                        thing,
                        Body::PropertyReading {
                            name: name.clone(),
                            value: value.clone(),
                            timestamp: timestamp.clone(),
                        },
                    );
                    effects.push(Effect::Publish(Publication::new(
                        self.topics.property(thing, name),
                        reading.to_json(),
                        true,
                    )));
                }
                self.forget(&route);
            }
            (Body::PropertyReading { name, .. }, Kind::WriteProperty) => {
                let mut reading = message.clone();
                reading.correlation_id = None;
                effects.push(Effect::Publish(Publication::new(
                    self.topics.property(thing, name),
                    reading.to_json(),
                    true,
                )));
                self.forget(&route);
            }
            _ => self.forget(&route),
        }
        Some(effects)
    }

    /// An invocation's status (`copy`, as the consumer gets it): a sign of
    /// life, published on the invocation's topic; a terminal one answers
    /// whoever waits on a cancel and ends the invocation.
    fn invocation_status(
        &mut self,
        route: &str,
        status: InvocationStatus<'_>,
        copy: String,
        effects: &mut Vec<Effect>,
    ) -> Option<()> {
        let InvocationStatus {
            thing,
            action,
            terminal,
        } = status;
        let p = self.routes.get_mut(route)?;
        let invocation = p.asked.invocation_mut()?;
        invocation.latest = Some(copy.clone());
        let raw = raw_chunk(invocation, &copy);
        let waiters = if terminal {
            std::mem::take(&mut invocation.cancel_waiters)
        } else {
            Vec::new()
        };
        // A sign of life: the agent has as long again (unless the consumer
        // was already told it went silent).
        let liveness = (!p.remembered).then_some(invocation.liveness);
        let invocation_topic = self.topics.action_status(thing, action, &p.correlation);
        let raw = raw.map(|raw| {
            let topic = self.topics.action_stream(thing, action, &p.correlation);
            (topic, raw)
        });
        if let Some(liveness) = liveness {
            self.arm(Timer::Reply(route.to_owned()), liveness);
        }
        if terminal {
            if !waiters.is_empty() {
                let value: Value = serde_json::from_str(&copy).ok()?;
                effects.extend(self.answer_cancels(&value, waiters, route, false));
            }
            self.finish(route);
        } else {
            self.persist(route);
        }
        effects.push(Effect::Publish(Publication::new(
            invocation_topic,
            copy,
            false,
        )));
        if let Some((topic, raw)) = raw {
            effects.push(Effect::Publish(raw_publication(topic, raw)));
        }
        Some(())
    }

    /// The agent's `error` for an invocation: it refuses the invocation
    /// (which ends), or, while a cancel waits, the cancel.
    fn invocation_error(
        &mut self,
        route: &str,
        copy: String,
        effects: &mut Vec<Effect>,
    ) -> Option<()> {
        let invocation = self.routes.get_mut(route)?.asked.invocation_mut()?;
        if invocation.cancel_waiters.is_empty() {
            // The agent refuses the invocation: it ends here.
            invocation.latest = Some(copy);
            self.finish(route);
        } else {
            let value: Value = serde_json::from_str(&copy).ok()?;
            // The agent refuses the cancel (the draft's "could not be
            // cancelled"): the invocation goes on, and whoever asked to
            // cancel hears why.
            let waiters = std::mem::take(&mut invocation.cancel_waiters);
            effects.clear();
            effects.extend(self.answer_cancels(&value, waiters, route, true));
        }
        Some(())
    }

    /// A `cancelAction` is answered by the invocation's final status, or by
    /// the agent's refusal. Each waiter gets its copy under its cancel's
    /// correlation ID, unless it follows the invocation and named it by the
    /// invocation's own (then the status it gets anyway answers it); `all`:
    /// every waiter does, as a refusal is no status of the invocation.
    pub(super) fn answer_cancels(
        &mut self,
        status: &Value,
        waiters: Vec<(Consumer, String)>,
        route: &str,
        all: bool,
    ) -> Vec<Effect> {
        self.disarm(&Timer::Cancel(route.to_owned()));
        let Some(p) = self.routes.get(route) else {
            return Vec::new();
        };
        waiters
            .into_iter()
            .filter(|(c, w)| all || *w != p.correlation || !p.follows(c))
            .map(|(c, w)| {
                let mut copy = status.clone();
                copy["correlationID"] = w.into();
                Effect::ToConsumer(c, copy.to_string())
            })
            .collect()
    }
}

/// The raw form of a status's binary chunk (or of the end marker of a
/// stream that had some), for the invocation's stream topic. Only statuses
/// that may carry one are parsed.
fn raw_chunk(invocation: &mut Invocation, copy: &str) -> Option<RawChunk> {
    if !invocation.raw_stream && !copy.contains("\"contentEncoding\"") {
        return None;
    }
    let raw = crate::lmos::binary::raw_chunk(copy)?;
    if raw.end && !invocation.raw_stream {
        return None;
    }
    invocation.raw_stream = true;
    Some(raw)
}

/// The longest Content Type passed on: media types are short, and an MQTT
/// string's length is 16 bits (rumqttd would write a longer one's length
/// wrong, corrupting every subscriber's stream).
const MAX_CONTENT_TYPE: usize = 255;

/// A raw chunk as MQTT 5 subscribers read it: the bytes, with Content Type
/// and user properties `seq` and `end`. A content type an MQTT client could
/// take for a malformed packet (control characters: MQTT forbids U+0000;
/// too long) is left out rather than let an agent disconnect subscribers.
fn raw_publication(topic: String, raw: RawChunk) -> Publication {
    let content_type = raw
        .content_type
        .filter(|t| t.len() <= MAX_CONTENT_TYPE && !t.chars().any(char::is_control));
    let mut publication = Publication::new(topic, raw.payload, false);
    publication.chunk = Some(Box::new(ChunkProperties {
        content_type,
        seq: raw.seq,
        end: raw.end,
    }));
    publication
}

#[cfg(test)]
mod raw_tests {
    use super::*;

    fn raw(content_type: &str) -> RawChunk {
        RawChunk {
            seq: 1,
            content_type: Some(content_type.into()),
            payload: b"x".to_vec(),
            end: false,
        }
    }

    #[test]
    fn a_content_type_subscribers_could_choke_on_is_left_out() {
        let props = |t: &str| raw_publication("t".into(), raw(t)).chunk.unwrap();
        assert_eq!(
            props("audio/wav").content_type.as_deref(),
            Some("audio/wav")
        );
        assert_eq!(props("audio/wav\u{0}x").content_type, None);
        assert_eq!(props("audio/\nwav").content_type, None);
        assert_eq!(props(&"a".repeat(70_000)).content_type, None);
        assert_eq!(props("audio/wav").seq, 1);
    }
}
