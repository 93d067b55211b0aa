//! MCP sessions (`Mcp-Session-Id`): who opened each, the protocol version
//! it negotiated, the tool calls it has running (so a
//! `notifications/cancelled` finds its invocation), bounded per principal
//! and in all. A session is its principal's: presented by anyone else it
//! does not exist (404, as for an unknown one).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::logging::Level;

/// How many sessions there may be.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// In all (`mcp.max_sessions`): past it `initialize` is refused.
    pub max: usize,
    /// Per principal (`mcp.max_sessions_per_principal`): past it the
    /// principal's least recently used session is closed.
    pub per_principal: usize,
    /// Unused this long, a session is forgotten (`mcp.session_idle_ms`).
    pub idle: Duration,
}

/// A tool call whose invocation is running.
#[derive(Debug, Clone)]
pub struct RunningCall {
    pub thing: String,
    pub action: String,
    pub invocation: String,
    /// Fired by `notifications/cancelled`: the call's stream ends without
    /// an answer, as MCP asks.
    pub cancelled: CancellationToken,
}

#[derive(Debug)]
struct Session {
    principal: String,
    version: String,
    last_used: Instant,
    /// By the JSON-RPC id of the `tools/call`, as JSON text.
    calls: HashMap<String, RunningCall>,
    /// Cancelled when the session ends: its streams close.
    ended: CancellationToken,
    /// The GET stream's own token: a newer GET replaces it.
    listening: Option<CancellationToken>,
    /// What `logging/setLevel` asked for (none: no log notifications).
    log_level: Option<Level>,
}

/// Why `initialize` opened no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sidecar holds {0} MCP sessions, as many as it may (mcp.max_sessions)")]
pub struct Full(pub usize);

#[derive(Debug)]
pub struct Sessions {
    limits: SessionLimits,
    by_id: Mutex<HashMap<String, Session>>,
}

/// What a request learns of its session.
#[derive(Debug, Clone)]
pub struct Current {
    pub version: String,
    pub ended: CancellationToken,
    pub log_level: Option<Level>,
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            by_id: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session for `principal`; `Ok(evicted)` says whether one of
    /// the principal's older sessions was closed to make room.
    pub fn open(&self, principal: &str, version: &str) -> Result<(String, bool), Full> {
        let now = Instant::now();
        let mut sessions = self.lock();
        let idle = self.limits.idle;
        sessions.retain(|_, s| {
            let keep = now.duration_since(s.last_used) < idle;
            if !keep {
                s.ended.cancel();
            }
            keep
        });
        let own: Vec<(&String, Instant)> = sessions
            .iter()
            .filter(|(_, s)| s.principal == principal)
            .map(|(id, s)| (id, s.last_used))
            .collect();
        let mut evicted = false;
        if own.len() >= self.limits.per_principal {
            let oldest = own
                .iter()
                .min_by_key(|(_, t)| *t)
                .map(|(id, _)| (*id).clone());
            if let Some(s) = oldest.and_then(|id| sessions.remove(&id)) {
                s.ended.cancel();
                evicted = true;
            }
        }
        if sessions.len() >= self.limits.max {
            return Err(Full(self.limits.max));
        }
        let id = Uuid::new_v4().simple().to_string();
        sessions.insert(
            id.clone(),
            Session {
                principal: principal.to_owned(),
                version: version.to_owned(),
                last_used: now,
                calls: HashMap::new(),
                ended: CancellationToken::new(),
                listening: None,
                log_level: None,
            },
        );
        Ok((id, evicted))
    }

    /// The session, if it is `principal`'s and alive; marks it used.
    pub fn touch(&self, id: &str, principal: &str) -> Option<Current> {
        let mut sessions = self.lock();
        let s = sessions.get_mut(id).filter(|s| s.principal == principal)?;
        if s.last_used.elapsed() >= self.limits.idle {
            if let Some(s) = sessions.remove(id) {
                s.ended.cancel();
            }
            return None;
        }
        s.last_used = Instant::now();
        Some(Current {
            version: s.version.clone(),
            ended: s.ended.clone(),
            log_level: s.log_level,
        })
    }

    /// Ends the session (`DELETE`); false when it is not `principal`'s.
    pub fn close(&self, id: &str, principal: &str) -> bool {
        let mut sessions = self.lock();
        if sessions.get(id).is_none_or(|s| s.principal != principal) {
            return false;
        }
        if let Some(s) = sessions.remove(id) {
            s.ended.cancel();
        }
        true
    }

    /// A token for a new GET stream; the previous one's stream ends.
    pub fn listen(&self, id: &str) -> Option<CancellationToken> {
        let mut sessions = self.lock();
        let s = sessions.get_mut(id)?;
        if let Some(previous) = s.listening.take() {
            previous.cancel();
        }
        let token = s.ended.child_token();
        s.listening = Some(token.clone());
        Some(token)
    }

    /// `logging/setLevel`: the session's log notifications from now on.
    pub fn set_log_level(&self, id: &str, level: Level) {
        if let Some(s) = self.lock().get_mut(id) {
            s.log_level = Some(level);
        }
    }

    pub fn begin_call(&self, id: &str, request: &str, call: RunningCall) {
        if let Some(s) = self.lock().get_mut(id) {
            s.calls.insert(request.to_owned(), call);
        }
    }

    pub fn end_call(&self, id: &str, request: &str) {
        if let Some(s) = self.lock().get_mut(id) {
            s.calls.remove(request);
        }
    }

    /// The running call a `notifications/cancelled` names, taken out.
    pub fn take_call(&self, id: &str, request: &str) -> Option<RunningCall> {
        self.lock().get_mut(id)?.calls.remove(request)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(max: usize, per_principal: usize) -> Sessions {
        Sessions::new(SessionLimits {
            max,
            per_principal,
            idle: Duration::from_secs(60),
        })
    }

    #[test]
    fn a_session_is_its_principal_s_only() {
        let s = sessions(10, 10);
        let (id, _) = s.open("alice", "2025-11-25").unwrap();
        assert_eq!(s.touch(&id, "alice").unwrap().version, "2025-11-25");
        assert!(s.touch(&id, "mallory").is_none());
        assert!(!s.close(&id, "mallory"));
        assert!(s.close(&id, "alice"));
        assert!(s.touch(&id, "alice").is_none());
    }

    #[test]
    fn a_principal_over_its_share_loses_its_oldest_session_not_anothers() {
        let s = sessions(3, 2);
        let (bob, _) = s.open("bob", "v").unwrap();
        let (first, _) = s.open("alice", "v").unwrap();
        let ended = s.touch(&first, "alice").unwrap().ended;
        let (_second, evicted) = s.open("alice", "v").unwrap();
        assert!(!evicted);
        let (_third, evicted) = s.open("alice", "v").unwrap();
        assert!(evicted);
        assert!(ended.is_cancelled());
        assert!(s.touch(&first, "alice").is_none());
        assert!(s.touch(&bob, "bob").is_some());
        // The global cap refuses rather than evicts someone else's.
        assert_eq!(s.open("carol", "v"), Err(Full(3)));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_running_call_is_found_once_by_its_request_id() {
        let s = sessions(3, 3);
        let (id, _) = s.open("a", "v").unwrap();
        let call = RunningCall {
            thing: "t".into(),
            action: "x".into(),
            invocation: "i".into(),
            cancelled: CancellationToken::new(),
        };
        s.begin_call(&id, "7", call);
        assert_eq!(s.take_call(&id, "7").unwrap().invocation, "i");
        assert!(s.take_call(&id, "7").is_none());
    }
}
