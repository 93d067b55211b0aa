//! What crosses between the embedded broker and NATS, decided without I/O.
//!
//! - Events, readings, action statuses, TDs and presence go out on the
//!   subject of their topic, to every sidecar (core NATS publish/subscribe).
//! - A request for an agent on another host goes out as a NATS request: on
//!   the subject of its `agent/requests/…` topic, which only the sidecar
//!   whose agent hosts the Thing subscribes to (it learns that from the
//!   agent's presence on its own broker), with a reply subject in this
//!   sidecar's inbox that names the route and the Thing's `agent/replies`
//!   topic. The agent's sidecar remembers route → reply subject and sends
//!   the agent's answers there only, until the last one; nobody else sees
//!   them, so no echo suppression is needed. NATS answers a request nobody
//!   subscribes to with "no responders", which becomes the same 503 a
//!   request for an absent agent gets locally.
//! - Core NATS keeps nothing, so retained state (readings, presence, TDs)
//!   is kept here, as this sidecar published it, and handed to a sidecar
//!   that asks on the sync subject when its link comes up.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;

use super::ordered::{self, Ordered};
use super::subjects::{self, SubjectError};
use crate::lmos::{Body, Problem, ProblemKind};
use crate::topics::{Route, Topics};

/// Routes an agent's sidecar remembers at most; past it the oldest go
/// (invocations that never end would otherwise grow it for good).
pub const ROUTES_LIMIT: usize = 100_000;

/// What the link does on the NATS side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToNats {
    Publish {
        subject: String,
        payload: Bytes,
    },
    Request {
        subject: String,
        reply: String,
        payload: Bytes,
    },
    /// An agent's answer for the sidecar that asked, on its reply subject:
    /// sent until that sidecar acknowledges it (a node dying on the way
    /// loses none), each numbered within its route (`seq`, from 1) so the
    /// asker drops a repeat.
    Answer {
        subject: String,
        route: String,
        seq: u64,
        payload: Bytes,
    },
    /// Take requests for this Thing: its agent is here.
    Host(String),
    /// No longer: its agent left.
    Unhost(String),
    /// An event, through the JetStream stream (`cluster.jetstream`).
    Store {
        subject: String,
        payload: Bytes,
    },
    /// Retained state of this sidecar's for the buckets: put, or delete
    /// (`None`: an emptied retained topic, an agent gone offline).
    Keep {
        topic: String,
        payload: Option<Bytes>,
    },
}

/// A message for the embedded broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToLocal {
    pub topic: String,
    pub payload: Bytes,
    pub retain: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    reply: String,
    thing: String,
    /// An invocation: its statuses follow until a terminal one.
    invocation: bool,
    /// Answers sent so far.
    sent: u64,
}

pub struct Relay {
    topics: Topics,
    /// This sidecar's reply subjects start with it.
    inbox: String,
    /// Things whose agent is connected to this sidecar.
    hosted: HashSet<String>,
    /// Route → where the agent's answers go (requests from other sidecars).
    pending: HashMap<String, Pending>,
    order: VecDeque<String>,
    /// Retained messages this sidecar published, by topic.
    retained: HashMap<String, Bytes>,
    /// Route → the answers taken from another sidecar (their `seq`), so a
    /// repeat is dropped; the oldest routes are forgotten first.
    answered: HashMap<String, Ordered<(String, Bytes)>>,
    answered_order: VecDeque<String>,
    /// Routes whose answers wait behind a gap, by when they began to: the
    /// waits a sweep may have to give up ([`Relay::overdue_answers`]).
    holding: VecDeque<(Instant, String)>,
    /// Events go through JetStream, retained state to the buckets too.
    jetstream: bool,
}

/// The subject on which a sidecar asks the others for their retained state.
pub fn sync_subject(topics: &Topics) -> String {
    format!("{}._sync", subjects::subject(topics.prefix()))
}

fn correlation(payload: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    v.get("correlationID")?.as_str().map(str::to_owned)
}

pub(super) fn is_online(payload: &[u8]) -> bool {
    serde_json::from_slice::<Value>(payload)
        .ok()
        .is_some_and(|v| v["status"] == "online")
}

impl Relay {
    pub fn new(topics: Topics, inbox: String) -> Relay {
        Relay {
            topics,
            inbox,
            hosted: HashSet::new(),
            pending: HashMap::new(),
            order: VecDeque::new(),
            retained: HashMap::new(),
            answered: HashMap::new(),
            answered_order: VecDeque::new(),
            holding: VecDeque::new(),
            jetstream: false,
        }
    }

    /// Events through the JetStream stream, retained state into the
    /// buckets as well as on its subject.
    pub fn with_jetstream(mut self) -> Relay {
        self.jetstream = true;
        self
    }

    /// Events by core NATS and no bucket writes from now on (the servers
    /// turned out to have no JetStream).
    pub fn without_jetstream(&mut self) {
        self.jetstream = false;
    }

    /// The presence this sidecar's agents have now, to renew in the bucket.
    pub fn hosted_presence(&self) -> Vec<(String, Bytes)> {
        self.hosted
            .iter()
            .filter_map(|thing| {
                let topic = self.topics.agent_status(thing);
                let payload = self.retained.get(&topic)?.clone();
                Some((topic, payload))
            })
            .collect()
    }

    pub fn inbox(&self) -> &str {
        &self.inbox
    }

    /// The subject on which the agent of `thing` takes requests.
    pub fn requests_subject(&self, thing: &str) -> String {
        subjects::subject_filter(&self.topics.agent_requests_filter(thing))
    }

    /// The NATS side of a message published on the embedded broker by
    /// anyone but the link itself.
    pub fn from_local(&mut self, topic: &str, payload: Bytes) -> Vec<ToNats> {
        let publish = |payload: Bytes| ToNats::Publish {
            subject: subjects::subject(topic),
            payload,
        };
        let route = self.topics.parse(topic);
        let mut out = Vec::new();
        if super::super::is_retained(&self.topics, topic) {
            if payload.is_empty() {
                self.retained.remove(topic);
            } else {
                self.retained.insert(topic.to_owned(), payload.clone());
            }
            if self.jetstream {
                // The presence bucket holds agents that are online.
                let gone = payload.is_empty()
                    || (matches!(route, Some(Route::AgentStatus { .. })) && !is_online(&payload));
                out.push(ToNats::Keep {
                    topic: topic.to_owned(),
                    payload: (!gone).then(|| payload.clone()),
                });
            }
        }
        match route {
            Some(Route::Event { .. }) if self.jetstream => out.push(ToNats::Store {
                subject: subjects::subject(topic),
                payload,
            }),
            Some(Route::AgentStatus { thing }) => {
                if is_online(&payload) {
                    if self.hosted.insert(thing.clone()) {
                        out.push(ToNats::Host(thing));
                    }
                } else if self.hosted.remove(&thing) {
                    out.push(ToNats::Unhost(thing));
                }
                out.push(publish(payload));
            }
            // The agent is here: the request is this sidecar's own business.
            Some(Route::AgentRequest { thing, .. }) if self.hosted.contains(&thing) => {}
            Some(Route::AgentRequest { thing, .. }) => {
                let Some(route) = correlation(&payload) else {
                    // The router always names its route; without one no
                    // answer could find its way back.
                    return out;
                };
                // One token for the route, whatever it holds.
                let reply = format!(
                    "{}.{}.{}",
                    self.inbox,
                    subjects::subject(&crate::topics::escape(&route)),
                    subjects::subject(&self.topics.agent_replies(&thing))
                );
                out.push(ToNats::Request {
                    subject: subjects::subject(topic),
                    reply,
                    payload,
                });
            }
            Some(Route::AgentReplies { .. }) => {
                for (subject, route, seq) in self.answers(&payload) {
                    out.push(ToNats::Answer {
                        subject,
                        route,
                        seq,
                        payload: payload.clone(),
                    });
                }
            }
            _ => out.push(publish(payload)),
        }
        out
    }

    /// Where the agent's answer goes: each reply subject once, with the
    /// route and the answer's number on it; forgets routes that nothing
    /// more will answer.
    fn answers(&mut self, payload: &[u8]) -> Vec<(String, String, u64)> {
        let mut out: Vec<(String, String, u64)> = Vec::new();
        for message in crate::gateway::parse_agent_replies(payload) {
            let Some(route) = message.correlation_id.as_deref() else {
                continue;
            };
            let Some(p) = self.pending.get_mut(route) else {
                continue;
            };
            if p.thing != message.thing_id {
                continue;
            }
            if !out.iter().any(|(subject, ..)| *subject == p.reply) {
                p.sent += 1;
                out.push((p.reply.clone(), route.to_owned(), p.sent));
            }
            let last = match &message.body {
                Body::ActionStatus { status, .. } if p.invocation => {
                    crate::lmos::is_terminal(status)
                }
                _ => true,
            };
            if last {
                self.pending.remove(route);
            }
        }
        if self.order.len() > 2 * self.pending.len() + 1024 {
            let pending = &self.pending;
            self.order.retain(|r| pending.contains_key(r));
        }
        out
    }

    /// A request another sidecar routed to an agent here: the topic to hand
    /// it to, once its reply subject is remembered.
    pub fn request_from_nats(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        payload: Bytes,
    ) -> Option<ToLocal> {
        let topic = subjects::topic(subject).ok()?;
        let Some(Route::AgentRequest {
            thing,
            message_type,
        }) = self.topics.parse(&topic)
        else {
            return None;
        };
        if let (Some(reply), Some(route)) = (reply, correlation(&payload)) {
            // A cancel or an input chunk names a running invocation, whose
            // answers already have a place to go.
            let names_invocation = matches!(message_type.as_str(), "cancelAction" | "actionInput");
            if !names_invocation || !self.pending.contains_key(&route) {
                let fresh = self
                    .pending
                    .insert(
                        route.clone(),
                        Pending {
                            reply: reply.to_owned(),
                            thing,
                            invocation: message_type == "invokeAction",
                            sent: 0,
                        },
                    )
                    .is_none();
                if fresh {
                    self.order.push_back(route);
                }
                while self.pending.len() > ROUTES_LIMIT {
                    match self.order.pop_front() {
                        Some(old) => {
                            self.pending.remove(&old);
                        }
                        None => break,
                    }
                }
            }
        }
        Some(ToLocal {
            topic,
            payload,
            retain: false,
        })
    }

    /// A message on this sidecar's inbox: an agent's answer, NATS saying no
    /// one took the request (`no_responders`), or another sidecar's state.
    pub fn from_inbox(
        &self,
        subject: &str,
        payload: Bytes,
        no_responders: bool,
    ) -> Result<ToLocal, SubjectError> {
        let rest = subjects::topic_under(&self.inbox, subject)?;
        if let Some(state) = rest.strip_prefix("_state/") {
            let topic = state.to_owned();
            let retain = super::super::is_retained(&self.topics, &topic);
            return Ok(ToLocal {
                topic,
                payload,
                retain,
            });
        }
        // `{route}/{the Thing's agent/replies topic}`.
        let foreign = || SubjectError::Foreign {
            subject: subject.to_owned(),
            root: self.inbox.clone(),
        };
        let (route, topic) = rest.split_once('/').ok_or_else(foreign)?;
        let route = crate::topics::unescape(route).map_err(|_| foreign())?;
        let payload = if no_responders {
            let thing = match self.topics.parse(topic) {
                Some(Route::AgentReplies { thing }) => thing,
                _ => String::new(),
            };
            let detail =
                format!("No sidecar in the cluster has an agent hosting `{thing}` connected.");
            let problem = Problem::new(ProblemKind::Unavailable, detail);
            Bytes::from(problem.to_message(&thing, Some(&route)).to_json())
        } else {
            payload
        };
        Ok(ToLocal {
            topic: topic.to_owned(),
            payload,
            retain: false,
        })
    }

    /// An answer another sidecar sent for a route of this one's, numbered
    /// `seq`, at `now`: as [`Relay::from_inbox`], with the route's answers
    /// handed on in their numbers' order (`ordered.rs`); nothing for a
    /// repeat of one taken already (its acknowledgement was lost on the
    /// way back) or one that waits for an earlier one.
    pub fn answer_from_inbox(
        &mut self,
        subject: &str,
        payload: Bytes,
        seq: u64,
        now: Instant,
    ) -> Result<Vec<ToLocal>, SubjectError> {
        let rest = subjects::topic_under(&self.inbox, subject)?;
        let route = rest.split_once('/').map(|(route, _)| route.to_owned());
        let Some(route) = route else {
            return Ok(vec![self.from_inbox(subject, payload, false)?]);
        };
        if !self.answered.contains_key(&route) {
            self.answered_order.push_back(route.clone());
            while self.answered.len() >= ROUTES_LIMIT {
                match self.answered_order.pop_front() {
                    Some(old) => {
                        self.answered.remove(&old);
                    }
                    None => break,
                }
            }
        }
        let ordered = self.answered.entry(route.clone()).or_default();
        let was_holding = ordered.is_holding();
        let size = payload.len();
        let out = ordered.offer(seq, (subject.to_owned(), payload), size, now);
        if ordered.is_holding() && !was_holding {
            self.holding.push_back((now, route));
        }
        self.local(out)
    }

    /// The answers that waited past [`ordered::HOLD_WAIT`] for a gap that
    /// did not fill while no further answer of their route came: handed on
    /// in order, the gap given up. The carrier asks at every inbox message.
    pub fn overdue_answers(&mut self, now: Instant) -> Vec<ToLocal> {
        let mut out = Vec::new();
        while let Some((since, route)) = self.holding.front() {
            if now.duration_since(*since) < ordered::HOLD_WAIT {
                break;
            }
            let route = route.clone();
            self.holding.pop_front();
            let Some(ordered) = self.answered.get_mut(&route) else {
                continue;
            };
            if ordered.overdue(now) {
                out.extend(ordered.give_up());
            } else if ordered.is_holding() {
                // It moved on since, and waits for a later gap.
                self.holding.push_back((now, route));
            }
        }
        self.local(out).unwrap_or_default()
    }

    fn local(&self, answers: Vec<(String, Bytes)>) -> Result<Vec<ToLocal>, SubjectError> {
        answers
            .into_iter()
            .map(|(subject, payload)| self.from_inbox(&subject, payload, false))
            .collect()
    }

    /// This sidecar's retained state, for another sidecar's inbox.
    pub fn state_for(&self, inbox: &str) -> Vec<(String, Bytes)> {
        self.retained
            .iter()
            .map(|(topic, payload)| {
                (
                    format!("{inbox}._state.{}", subjects::subject(topic)),
                    payload.clone(),
                )
            })
            .collect()
    }

    pub fn hosted(&self) -> impl Iterator<Item = &String> {
        self.hosted.iter()
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
