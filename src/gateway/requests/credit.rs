//! Stream credit (issue 48 item 2): a consumer that asked for a streamed
//! answer with `"stream": {"credit": N}` gets at most N output chunks until
//! it grants more (`actionInput` with `"credit": M`). What the agent sends
//! beyond the credit waits here, in order, within a byte budget
//! (`requests.stream_hold_bytes`); statuses that are not chunks (progress,
//! the terminal one) wait behind held chunks, so the order the agent sent
//! is the order the consumer reads (all streams together within
//! `requests.stream_hold_total_bytes`). An agent that outruns the budget has
//! its stream failed: the consumer is told, the agent is asked to cancel,
//! and nothing more of the invocation reaches the consumer.
//!
//! Pure: the router feeds it the consumer's copies and carries out what it
//! answers.

use std::collections::VecDeque;

use serde_json::Value;

use super::{Consumer, Effect, Requests};
use crate::lmos::{Body, Message, Problem, ProblemKind};

/// The member of an `invokeAction`'s `stream` object, and of an
/// `actionInput`, that grants credit.
pub const CREDIT: &str = "credit";

/// The most credit one message may grant: more is no limit at all.
pub const MAX_GRANT: u64 = u32::MAX as u64;

/// Bytes counted for a held message beyond its text.
const HELD_OVERHEAD: usize = 64;

/// What became of a copy offered to the consumer.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    /// Send these, in order.
    Send(Vec<String>),
    /// Held until more credit comes.
    Held,
    /// The hold budget is full: the stream fails (once).
    Overflow,
    /// The stream failed earlier; dropped.
    Dropped,
}

/// One invocation's credit.
#[derive(Debug)]
pub struct Credit {
    /// Chunks the consumer may still get.
    left: u64,
    /// Copies waiting, each with whether it is a chunk.
    held: VecDeque<(String, bool)>,
    held_bytes: usize,
    budget: usize,
    failed: bool,
}

impl Credit {
    pub fn new(initial: u64, budget: usize) -> Credit {
        Credit {
            left: initial,
            held: VecDeque::new(),
            held_bytes: 0,
            budget,
            failed: false,
        }
    }

    /// The consumer's copy of one message of the invocation; `chunk`: it
    /// carries an output chunk (not the end marker). `room`: what every
    /// stream together may still hold (`requests.stream_hold_total_bytes`).
    pub fn offer(&mut self, copy: String, chunk: bool, room: usize) -> Offer {
        if self.failed {
            return Offer::Dropped;
        }
        if self.held.is_empty() && (!chunk || self.left > 0) {
            if chunk {
                self.left -= 1;
            }
            return Offer::Send(vec![copy]);
        }
        let cost = copy.len() + HELD_OVERHEAD;
        if self.held_bytes + cost > self.budget || cost > room {
            self.failed = true;
            self.held.clear();
            self.held_bytes = 0;
            return Offer::Overflow;
        }
        self.held_bytes += cost;
        self.held.push_back((copy, chunk));
        Offer::Held
    }

    /// `n` more chunks; what that releases, in order.
    pub fn grant(&mut self, n: u64) -> Vec<String> {
        self.left = self.left.saturating_add(n);
        let mut out = Vec::new();
        while let Some((_, chunk)) = self.held.front() {
            if *chunk {
                if self.left == 0 {
                    break;
                }
                self.left -= 1;
            }
            if let Some((copy, _)) = self.held.pop_front() {
                self.held_bytes -= copy.len() + HELD_OVERHEAD;
                out.push(copy);
            }
        }
        out
    }

    /// Nothing waits: the credit may go once the invocation has ended.
    pub fn is_drained(&self) -> bool {
        self.held.is_empty()
    }

    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }
}

/// The credit a `stream` member or an `actionInput` grants: `None` when it
/// names none; `Err` with what is wrong.
pub fn granted(value: Option<&Value>) -> Result<Option<u64>, String> {
    let Some(v) = value else {
        return Ok(None);
    };
    match v.as_u64() {
        Some(n) if n <= MAX_GRANT => Ok(Some(n)),
        _ => Err(format!(
            "`credit` must be an integer from 0 to {MAX_GRANT} (chunks the consumer may get)"
        )),
    }
}

impl Requests {
    /// Everyone's copy of one message of `route` (the consumer that asked
    /// and the invocation's watchers), through its credit when it has one;
    /// `chunk`: the message carries an output chunk.
    pub(super) fn deliver(&mut self, route: &str, copy: &str, chunk: bool) -> Vec<Effect> {
        let Some(p) = self.routes.get(route) else {
            return Vec::new();
        };
        let Some(credit) = self.credits.get_mut(route) else {
            return p.to_all(copy);
        };
        let before = credit.held_bytes();
        let room = self.stream_hold_total.saturating_sub(self.held_total);
        let offer = credit.offer(copy.to_owned(), chunk, room);
        self.held_total = self.held_total - before + credit.held_bytes();
        match offer {
            Offer::Send(copies) => copies.iter().flat_map(|c| p.to_all(c)).collect(),
            Offer::Held | Offer::Dropped => Vec::new(),
            Offer::Overflow => self.overflow(route),
        }
    }

    /// Forgets a stream's credit and what it held.
    pub(super) fn drop_credit(&mut self, route: &str) {
        if let Some(credit) = self.credits.remove(route) {
            self.held_total -= credit.held_bytes();
        }
    }

    /// The hold budget is full: the consumer hears why (a `429`), the
    /// agent is asked to cancel, and the rest of the stream is dropped.
    fn overflow(&mut self, route: &str) -> Vec<Effect> {
        self.metrics.dropped("stream_hold_full");
        let Some(p) = self.routes.get(route) else {
            return Vec::new();
        };
        let detail = format!(
            "The consumer granted no more stream credit and the output held for it passed requests.stream_hold_bytes ({} bytes), or all streams' held output passed requests.stream_hold_total_bytes ({} bytes): the stream is failed and the agent asked to cancel.",
            self.stream_hold_bytes, self.stream_hold_total
        );
        let problem = Problem::new(ProblemKind::TooManyRequests, detail)
            .to_message(&p.thing, Some(&p.correlation));
        let mut effects = p.to_all(&p.speak(problem).to_json());
        let thing = p.thing.clone();
        if let (Some(action), Some(host)) = (p.asked.action(), self.hosts.get(&thing).copied()) {
            let cancel = Message::new(
                thing.clone(),
                Body::CancelAction {
                    action: action.to_owned(),
                    reason: Some(
                        "The consumer's stream credit is used up and the sidecar holds no more."
                            .into(),
                    ),
                },
            )
            .with_correlation_id(route.to_owned());
            effects.push(self.to_host(host, &thing, "cancelAction", cancel.to_json()));
        }
        effects
    }

    /// `n` more chunks for the invocation `route` (an `actionInput` with
    /// `credit`): what is held and now allowed goes to the consumer, and
    /// the grant to the agent, which may pace itself by it.
    pub(super) fn grant(
        &mut self,
        consumer: Consumer,
        message: Message,
        route: String,
        n: u64,
    ) -> Vec<Effect> {
        let Some(credit) = self.credits.get_mut(&route) else {
            let m = Problem::new(
                ProblemKind::InvalidMember,
                "This invocation was not started with stream credit (`\"stream\": {\"credit\": N}` on its invokeAction); there is nothing to grant.".to_owned(),
            )
            .to_message(&message.thing_id, Some(message.reply_correlation_id()));
            return vec![Effect::ToConsumer(consumer, m.to_json())];
        };
        let before = credit.held_bytes();
        let released = credit.grant(n);
        self.held_total = self.held_total - before + credit.held_bytes();
        let drained = credit.is_drained();
        let Some(p) = self.routes.get(&route) else {
            return Vec::new();
        };
        let mut effects: Vec<Effect> = released.iter().flat_map(|c| p.to_all(c)).collect();
        if p.finished {
            if drained {
                self.drop_credit(&route);
            }
            return effects;
        }
        let thing = p.thing.clone();
        if let Some(host) = self.hosts.get(&thing).copied() {
            let text = message.with_correlation_id(route).to_json();
            effects.push(self.to_host(host, &thing, "actionInput", text));
        }
        effects
    }
}

#[cfg(test)]
#[path = "credit_tests.rs"]
mod tests;
