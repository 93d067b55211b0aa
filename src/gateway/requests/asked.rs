//! What a route asks its agent, by kind: a property request carries only
//! its kind, an invocation what it alone has (its action, latest status,
//! owner, watchers, cancel waiters, liveness), so the compiler, not a
//! comment, keeps a property request from carrying them.

use std::time::Duration;

use super::Consumer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    ReadProperty,
    WriteProperty,
    Invocation,
}

/// What a route asks the agent, with what only that kind of request has.
#[derive(Debug)]
pub(super) enum Asked {
    ReadProperty,
    WriteProperty,
    Invocation(Invocation),
}

/// What only an invocation has: a property request cannot carry it.
#[derive(Debug)]
pub(super) struct Invocation {
    pub(super) action: String,
    /// The latest status, kept as the text the consumer got: parsed only
    /// when asked for (a query, a late cancel), not for every status of a
    /// stream.
    pub(super) latest: Option<String>,
    /// Who asked to cancel, and under which correlation ID.
    pub(super) cancel_waiters: Vec<(Consumer, String)>,
    /// The principal that owns it (WebSocket and HTTP consumers), so any
    /// of its connections can name it.
    pub(super) owner: Option<String>,
    /// Other consumers of the owner following its statuses: those that
    /// queried it while it ran (a consumer back after a reconnect, say).
    pub(super) watchers: Vec<Consumer>,
    /// Cancel at the agent when the invoking connection closes (asked for
    /// with `"cancelOnDisconnect": true` in the invokeAction).
    pub(super) cancel_on_disconnect: bool,
    /// Its consumers take chunks as binary WebSocket frames (asked for
    /// with `"stream": {"binary": true}`).
    pub(super) binary: bool,
    /// Binary chunks of its stream went out raw on its stream topic, so
    /// its end marker goes there too.
    pub(super) raw_stream: bool,
    /// How long the agent may stay silent.
    pub(super) liveness: Duration,
}

impl Invocation {
    pub(super) fn new(action: String, owner: Option<String>, liveness: Duration) -> Invocation {
        Invocation {
            action,
            latest: None,
            cancel_waiters: Vec::new(),
            owner,
            watchers: Vec::new(),
            cancel_on_disconnect: false,
            binary: false,
            raw_stream: false,
            liveness,
        }
    }
}

impl Asked {
    pub(super) fn kind(&self) -> Kind {
        match self {
            Asked::ReadProperty => Kind::ReadProperty,
            Asked::WriteProperty => Kind::WriteProperty,
            Asked::Invocation(_) => Kind::Invocation,
        }
    }

    /// The invoked action (invocations only).
    pub(super) fn action(&self) -> Option<&str> {
        self.invocation().map(|i| i.action.as_str())
    }

    pub(super) fn invocation(&self) -> Option<&Invocation> {
        match self {
            Asked::Invocation(invocation) => Some(invocation),
            _ => None,
        }
    }

    pub(super) fn invocation_mut(&mut self) -> Option<&mut Invocation> {
        match self {
            Asked::Invocation(invocation) => Some(invocation),
            _ => None,
        }
    }
}
