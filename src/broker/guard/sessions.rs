//! MQTT sessions as the guard keeps them: which filters each holds, and
//! how long it outlives its connection.
//!
//! rumqttd answers an UNSUBSCRIBE with one UNSUBACK per filter it removed
//! and none for a filter the session does not hold, so the guard answers
//! UNSUBSCRIBE itself and must know what the session holds, across
//! reconnections, and counts them against `mqtt.max_subscriptions`.
//!
//! rumqttd also knows only 3.1.1's two kinds of session: clean (ends with
//! its connection) and not clean (kept forever). MQTT 5 separates starting
//! clean (Clean Start) from how long the session outlives its connection
//! (Session Expiry Interval, which a DISCONNECT may change). The guard
//! maps one onto the other: a session that must be kept reaches rumqttd
//! as not clean, and the guard ends it (a clean CONNECT and DISCONNECT
//! under the same client ID, a "wipe") when it expires, or before a
//! connection that must not find it. A wipe and a connection of the same
//! client ID never overlap: both hold the session's gate.
//!
//! This file decides; the connection does the I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

pub use super::filter_set::FilterSet;
pub use super::handover::{Asked, Handover};
use crate::broker::kept::Owners;

/// One session's filters, shared by the connections that resume it.
#[derive(Debug, Default)]
pub struct Filters(Mutex<FilterSet>);

impl Filters {
    /// The set, even after a panic elsewhere (it holds no invariant a
    /// half-finished insert could break).
    pub fn lock(&self) -> MutexGuard<'_, FilterSet> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Serialises a client ID's connections and wipes.
pub type Gate = Arc<tokio::sync::Mutex<()>>;

/// How long a session outlives its connection (MQTT 5 Session Expiry
/// Interval, seconds). 3.1.1: clean sessions 0, others [`Expiry::NEVER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry(pub u32);

impl Expiry {
    pub const NEVER: Expiry = Expiry(u32::MAX);

    fn after(self, now: Instant) -> Option<Instant> {
        (self != Expiry::NEVER).then(|| now + Duration::from_secs(u64::from(self.0)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A connection holds it.
    Live,
    /// Its connection ended; resumable until then (`None`: forever).
    Kept { until: Option<Instant> },
}

#[derive(Debug)]
struct Entry {
    filters: Arc<Filters>,
    /// Counts the connections that opened it; a connection or wipe acts
    /// only while its generation is the current one.
    generation: u64,
    state: State,
    gate: Gate,
    /// Whether rumqttd keeps it beyond the connection (connected not
    /// clean), so that ending it takes a wipe.
    kept_by_broker: bool,
    /// The live connection's (`None`: none has been live).
    handover: Option<Handover>,
    /// The principal whose connection opened it (`None`: restored from a
    /// store written before sessions had owners; the next one claims it).
    owner: Option<Arc<str>>,
}

impl Entry {
    /// A client ID with nothing to resume.
    fn unknown() -> Entry {
        Entry {
            filters: Arc::default(),
            generation: 0,
            state: State::Kept {
                until: Some(Instant::now()),
            },
            gate: Gate::default(),
            kept_by_broker: false,
            handover: None,
            owner: None,
        }
    }

    /// Whether `owner` may take it: it is nobody's, or `owner`'s, or over
    /// (neither connected nor kept any more).
    fn claimable_by(&self, owner: &str, now: Instant) -> bool {
        let over = match self.state {
            State::Live => false,
            State::Kept { until } => !self.kept_by_broker || until.is_some_and(|t| t <= now),
        };
        over || self.owner.as_deref().is_none_or(|o| o == owner)
    }
}

/// Why a CONNECT may not open the session it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Another principal's connection or kept session holds the client ID.
    #[error("the client ID is another principal's session")]
    OtherOwner,
    /// `mqtt.max_kept_sessions` sessions are kept already.
    #[error("mqtt.max_kept_sessions sessions are kept already")]
    TooManyKept,
    /// The principal keeps `mqtt.max_kept_sessions_per_principal` already.
    #[error("the principal keeps mqtt.max_kept_sessions_per_principal sessions already")]
    TooManyKeptForPrincipal,
}

/// How many sessions may outlive their connection (disk and memory each
/// one holds until it expires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptLimits {
    pub total: usize,
    pub per_principal: usize,
}

impl Default for KeptLimits {
    fn default() -> KeptLimits {
        KeptLimits {
            total: usize::MAX,
            per_principal: usize::MAX,
        }
    }
}

/// The sessions rumqttd keeps beyond their connection, counted.
#[derive(Debug, Default)]
struct KeptCount {
    total: usize,
    by_owner: HashMap<Arc<str>, usize>,
}

impl KeptCount {
    fn add(&mut self, owner: &Option<Arc<str>>) {
        self.total += 1;
        if let Some(owner) = owner {
            *self.by_owner.entry(owner.clone()).or_default() += 1;
        }
    }

    fn remove(&mut self, owner: &Option<Arc<str>>) {
        self.total = self.total.saturating_sub(1);
        if let Some(owner) = owner {
            if let Some(n) = self.by_owner.get_mut(owner) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.by_owner.remove(owner);
                }
            }
        }
    }

    fn check(&self, owner: &str, limits: KeptLimits) -> Result<(), Refused> {
        if self.total >= limits.total {
            return Err(Refused::TooManyKept);
        }
        if self.by_owner.get(owner).copied().unwrap_or(0) >= limits.per_principal {
            return Err(Refused::TooManyKeptForPrincipal);
        }
        Ok(())
    }
}

/// The guard's sessions and their count, under one lock.
#[derive(Debug, Default)]
struct Table {
    by_client: HashMap<String, Entry>,
    kept: KeptCount,
    /// The kept sessions' owners, shared with the broker's keeper (which
    /// charges each session's queue to its principal).
    owners: Owners,
    /// The connections of an empty client ID (never resumed, so not in
    /// `by_client`), by their generation, for [`Sessions::shut_down`].
    anonymous: HashMap<u64, Handover>,
    /// Counts the connections of an empty client ID.
    anonymous_opened: u64,
    /// The sidecar is stopping: a connection opened now is told at once.
    stopping: bool,
}

impl Table {
    fn remove(&mut self, client_id: &str) {
        if let Some(entry) = self.by_client.remove(client_id) {
            if entry.kept_by_broker {
                self.kept.remove(&entry.owner);
                self.owners.forget(client_id);
            }
        }
    }
}

/// What a connection does with the session it opens.
#[derive(Debug)]
pub struct Opened {
    pub filters: Arc<Filters>,
    pub generation: u64,
    /// Wipe rumqttd's session first: the client starts clean but wants it
    /// kept, or the session it would resume has expired.
    pub wipe_first: bool,
    /// Connect to rumqttd clean (nothing to resume, nothing to keep).
    pub clean_upstream: bool,
    /// This connection's: it is asked to hand the session over by the
    /// next connection of its client ID.
    pub handover: Handover,
}

/// What becomes of a session whose connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterClose {
    /// Nothing to do (rumqttd ends it, it is kept forever, or another
    /// connection has it).
    Nothing,
    /// Wipe it once `after` has passed, if still nobody resumed it.
    Wipe { generation: u64, after: Duration },
}

/// A session as the console lists it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub client_id: String,
    /// The principal whose connection opened it.
    pub owner: Option<String>,
    /// A connection holds it now.
    pub connected: bool,
    /// It outlives its connection.
    pub kept: bool,
    /// Seconds until a kept, unconnected session expires (`None`: never,
    /// or connected).
    pub expires_in_s: Option<u64>,
    pub subscriptions: Vec<String>,
}

/// Sessions by client ID.
#[derive(Debug, Default)]
pub struct Sessions {
    table: Mutex<Table>,
    limits: KeptLimits,
}

impl Sessions {
    pub fn new(limits: KeptLimits) -> Sessions {
        Sessions {
            table: Mutex::default(),
            limits,
        }
    }

    /// Tells `owners` whose each kept session is.
    pub fn with_owners(self, owners: Owners) -> Sessions {
        self.table().owners = owners;
        self
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a CONNECT takes over a connection of `client_id`: whether
    /// `owner` may have its session at all, and keep it if `keeps`. A
    /// principal never takes over, resumes or ends another's session.
    pub fn check(&self, client_id: &str, owner: &str, keeps: bool) -> Result<(), Refused> {
        if client_id.is_empty() {
            return Ok(());
        }
        let table = self.table();
        let entry = table.by_client.get(client_id);
        if entry.is_some_and(|e| !e.claimable_by(owner, Instant::now())) {
            return Err(Refused::OtherOwner);
        }
        let kept_already = entry.is_some_and(|e| e.kept_by_broker);
        if keeps && !kept_already {
            table.kept.check(owner, self.limits)?;
        }
        Ok(())
    }

    /// The gate a connection or wipe of `client_id` holds while it talks
    /// to rumqttd about the session.
    pub fn gate(&self, client_id: &str) -> Gate {
        if client_id.is_empty() {
            // Never resumed: nothing to serialise.
            return Gate::default();
        }
        self.table()
            .by_client
            .entry(client_id.to_owned())
            .or_insert_with(Entry::unknown)
            .gate
            .clone()
    }

    /// The gate of a client ID the guard knows.
    pub fn existing_gate(&self, client_id: &str) -> Option<Gate> {
        self.table()
            .by_client
            .get(client_id)
            .map(|e| e.gate.clone())
    }

    /// A CONNECT of `owner`'s, under the gate. An empty client ID gets a
    /// session of its own that is never kept (the broker assigns it an ID
    /// nobody can resume). Checks again what [`Sessions::check`] did, now
    /// that no other connection of the client ID can come in between.
    pub fn open(
        &self,
        client_id: &str,
        clean_start: bool,
        expiry: Expiry,
        owner: &str,
    ) -> Result<Opened, Refused> {
        let clean_upstream = clean_start && expiry.0 == 0;
        let mut table = self.table();
        let handover = Handover::default();
        if table.stopping {
            handover.shut_down();
        }
        if client_id.is_empty() {
            table.anonymous_opened += 1;
            let generation = table.anonymous_opened;
            table.anonymous.insert(generation, handover.clone());
            return Ok(Opened {
                filters: Arc::default(),
                generation,
                wipe_first: false,
                clean_upstream: clean_start,
                handover,
            });
        }
        let now = Instant::now();
        let Table {
            by_client,
            kept,
            owners,
            ..
        } = &mut *table;
        let entry = by_client
            .entry(client_id.to_owned())
            .or_insert_with(Entry::unknown);
        if !entry.claimable_by(owner, now) {
            return Err(Refused::OtherOwner);
        }
        let expired = match entry.state {
            State::Live => false,
            State::Kept { until } => until.is_some_and(|t| t <= now),
        };
        if !clean_upstream && !entry.kept_by_broker {
            kept.check(owner, self.limits)?;
        }
        // rumqttd has a session to end when it kept one; a clean CONNECT
        // ends it anyway.
        let wipe_first = entry.kept_by_broker && !clean_upstream && (clean_start || expired);
        if clean_start || expired {
            entry.filters = Arc::default();
        }
        let was_kept = entry.kept_by_broker;
        if was_kept {
            kept.remove(&entry.owner);
        }
        if entry.owner.as_deref() != Some(owner) {
            entry.owner = Some(Arc::from(owner));
        }
        entry.generation += 1;
        entry.state = State::Live;
        entry.kept_by_broker = !clean_upstream;
        match &entry.owner {
            Some(owner) if entry.kept_by_broker => {
                kept.add(&entry.owner);
                owners.set(client_id, owner);
            }
            _ if was_kept => owners.forget(client_id),
            _ => {}
        }
        entry.handover = Some(handover.clone());
        Ok(Opened {
            filters: entry.filters.clone(),
            generation: entry.generation,
            wipe_first,
            clean_upstream,
            handover,
        })
    }

    /// The sidecar is stopping: every live connection is asked to end (it
    /// first sends what the broker still has for its client), and any
    /// opened from now on at once.
    pub fn shut_down(&self) {
        let mut table = self.table();
        table.stopping = true;
        let live = table.by_client.values().filter(|e| e.state == State::Live);
        for handover in live.filter_map(|e| e.handover.as_ref()) {
            handover.shut_down();
        }
        for handover in table.anonymous.values() {
            handover.shut_down();
        }
    }

    /// Every session a client holds or may resume, for the console.
    pub fn list(&self) -> Vec<SessionView> {
        let now = Instant::now();
        let table = self.table();
        table
            .by_client
            .iter()
            .filter_map(|(client_id, e)| {
                let (connected, expires_in_s) = match e.state {
                    State::Live => (true, None),
                    // Not kept, or kept no longer: nothing to show.
                    State::Kept { .. } if !e.kept_by_broker => return None,
                    State::Kept { until: Some(t) } if t <= now => return None,
                    State::Kept { until } => (false, until.map(|t| (t - now).as_secs())),
                };
                let mut subscriptions: Vec<String> = e.filters.lock().iter().cloned().collect();
                subscriptions.sort();
                Some(SessionView {
                    client_id: client_id.clone(),
                    owner: e.owner.as_deref().map(str::to_owned),
                    connected,
                    kept: e.kept_by_broker,
                    expires_in_s,
                    subscriptions,
                })
            })
            .collect()
    }

    /// Ends the connection holding `client_id`, as a takeover would (MQTT
    /// 5 clients read DISCONNECT 0x8E); its session stays as it was asked
    /// to be kept. `false`: no connection holds it.
    pub fn disconnect(&self, client_id: &str) -> bool {
        self.holder(client_id).map(|h| h.ask()).is_some()
    }

    /// The handover of the connection holding `client_id`, if one does.
    pub fn holder(&self, client_id: &str) -> Option<Handover> {
        if client_id.is_empty() {
            return None;
        }
        let table = self.table();
        let entry = table.by_client.get(client_id)?;
        if entry.state != State::Live {
            return None;
        }
        entry.handover.clone()
    }

    /// The connection `generation` of `client_id` ended (or its client sent
    /// DISCONNECT, which fixes the expiry): from now the session is kept
    /// for `expiry`.
    pub fn close(&self, client_id: &str, generation: u64, expiry: Expiry) -> AfterClose {
        self.close_kept(client_id, generation, expiry, |_, _| {})
    }

    /// [`Sessions::close`], calling `kept` with the expiry and the owner while the
    /// session is still this connection's and rumqttd keeps it: so that
    /// what it records comes before anything a later connection of the
    /// client ID does.
    pub fn close_kept(
        &self,
        client_id: &str,
        generation: u64,
        expiry: Expiry,
        kept: impl FnOnce(Expiry, &str),
    ) -> AfterClose {
        let mut table = self.table();
        if client_id.is_empty() {
            table.anonymous.remove(&generation);
            return AfterClose::Nothing;
        }
        let Some(entry) = table.by_client.get_mut(client_id) else {
            return AfterClose::Nothing;
        };
        if entry.generation != generation || entry.state != State::Live {
            return AfterClose::Nothing;
        }
        let now = Instant::now();
        entry.state = State::Kept {
            until: expiry.after(now),
        };
        if entry.kept_by_broker {
            kept(expiry, entry.owner.as_deref().unwrap_or_default());
        }
        if !entry.kept_by_broker {
            // rumqttd ends a clean session itself.
            if Arc::strong_count(&entry.gate) == 1 {
                table.remove(client_id);
            }
            return AfterClose::Nothing;
        }
        match expiry {
            Expiry::NEVER => AfterClose::Nothing,
            Expiry(secs) => AfterClose::Wipe {
                generation,
                after: Duration::from_secs(u64::from(secs)),
            },
        }
    }

    /// Under the gate, after `AfterClose::Wipe`: true when the session is
    /// still the one that closed and has expired, and must be wiped now.
    /// It is forgotten here; the caller wipes rumqttd's.
    pub fn expire(&self, client_id: &str, generation: u64) -> bool {
        let mut table = self.table();
        let Some(entry) = table.by_client.get(client_id) else {
            return false;
        };
        let due = entry.generation == generation
            && matches!(entry.state, State::Kept { until: Some(t) } if t <= Instant::now());
        if due {
            table.remove(client_id);
        }
        due
    }

    /// A session kept by an earlier run (rumqttd has it again, in its
    /// graveyard): resumable until `expires_in` has passed (`None`:
    /// forever). Its generation is 0; the caller arms its expiry.
    pub fn restore(
        &self,
        client_id: &str,
        filters: FilterSet,
        expires_in: Option<Duration>,
        owner: Option<&str>,
    ) {
        let now = Instant::now();
        let entry = Entry {
            filters: Arc::new(Filters(Mutex::new(filters))),
            generation: 0,
            state: State::Kept {
                until: expires_in.map(|d| now + d),
            },
            gate: Gate::default(),
            kept_by_broker: true,
            handover: None,
            owner: owner.map(Arc::from),
        };
        let mut table = self.table();
        table.remove(client_id);
        table.kept.add(&entry.owner);
        if let Some(owner) = &entry.owner {
            table.owners.set(client_id, owner);
        }
        table.by_client.insert(client_id.to_owned(), entry);
    }

    /// Sessions currently known (connected, or kept for a client that
    /// will resume).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table().by_client.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    const NONE: Expiry = Expiry(0);

    fn asked(opened: &Opened) -> Option<Asked> {
        opened.handover.asked().now_or_never()
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_asks_every_live_connection_and_each_later_one() {
        let sessions = Sessions::default();
        let named = sessions.open("c", true, NONE, "p").unwrap();
        let anonymous = sessions.open("", true, NONE, "p").unwrap();
        let closed = sessions.open("", true, NONE, "p").unwrap();
        assert_ne!(anonymous.generation, closed.generation);
        sessions.close("", closed.generation, NONE);
        assert!(
            sessions.table().anonymous.len() == 1,
            "the closed one is gone"
        );
        assert_eq!(asked(&named), None);
        sessions.shut_down();
        assert_eq!(asked(&named), Some(Asked::Shutdown));
        assert_eq!(asked(&anonymous), Some(Asked::Shutdown));
        assert_eq!(asked(&closed), None, "closed before: not asked");
        let late = sessions.open("d", true, NONE, "p").unwrap();
        assert_eq!(asked(&late), Some(Asked::Shutdown), "told at once");
        let late_anonymous = sessions.open("", true, NONE, "p").unwrap();
        assert_eq!(asked(&late_anonymous), Some(Asked::Shutdown));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_live_connection_is_asked_to_hand_over() {
        let sessions = Sessions::default();
        assert!(sessions.holder("c").is_none());
        let first = sessions.open("c", false, NONE, "p").unwrap();
        let holder = sessions.holder("c").expect("live");
        holder.ask();
        assert!(first.handover.is_asked(), "the same handover");
        sessions.close("c", first.generation, NONE);
        assert!(sessions.holder("c").is_none(), "closed");
        let second = sessions.open("c", false, NONE, "p").unwrap();
        assert!(!second.handover.is_asked(), "a fresh one");
        assert!(sessions.holder("").is_none(), "empty IDs are never resumed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_session_keeps_its_filters_until_it_expires() {
        let sessions = Sessions::default();
        let first = sessions.open("c", true, Expiry(10), "p").unwrap();
        assert!(!first.clean_upstream);
        assert!(!first.wipe_first, "nothing to wipe yet");
        first.filters.lock().insert("a/#".into());
        let after = sessions.close("c", first.generation, Expiry(10));
        assert_eq!(
            after,
            AfterClose::Wipe {
                generation: first.generation,
                after: Duration::from_secs(10)
            }
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        let again = sessions.open("c", false, Expiry(10), "p").unwrap();
        assert!(!again.wipe_first);
        assert!(again.filters.lock().contains("a/#"));
        // The first close's wipe finds another generation.
        assert!(!sessions.expire("c", first.generation));
        let after = sessions.close("c", again.generation, Expiry(10));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(matches!(after, AfterClose::Wipe { .. }));
        assert!(sessions.expire("c", again.generation));
        assert_eq!(sessions.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_session_is_wiped_before_it_could_be_resumed() {
        let sessions = Sessions::default();
        let s = sessions.open("c", false, NONE, "p").unwrap();
        s.filters.lock().insert("x".into());
        // Not clean: rumqttd keeps it, so expiry 0 takes a wipe.
        assert!(!s.clean_upstream);
        assert_eq!(
            sessions.close("c", s.generation, NONE),
            AfterClose::Wipe {
                generation: s.generation,
                after: Duration::ZERO
            }
        );
        // The client is back before the wipe ran: it must not resume.
        let back = sessions.open("c", false, NONE, "p").unwrap();
        assert!(back.wipe_first);
        assert!(back.filters.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn clean_start_with_an_expiry_ends_what_was_kept() {
        let sessions = Sessions::default();
        let s = sessions.open("c", false, Expiry::NEVER, "p").unwrap();
        s.filters.lock().insert("x".into());
        assert_eq!(
            sessions.close("c", s.generation, Expiry::NEVER),
            AfterClose::Nothing
        );
        let clean = sessions.open("c", true, Expiry(5), "p").unwrap();
        assert!(clean.wipe_first);
        assert!(!clean.clean_upstream);
        assert!(clean.filters.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn clean_sessions_are_rumqttds_to_end() {
        let sessions = Sessions::default();
        let s = sessions.open("c", true, NONE, "p").unwrap();
        assert!(s.clean_upstream && !s.wipe_first);
        assert_eq!(sessions.close("c", s.generation, NONE), AfterClose::Nothing);
        assert_eq!(sessions.len(), 0);
        let again = sessions.open("c", false, NONE, "p").unwrap();
        assert!(!again.wipe_first, "rumqttd kept nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_takeover_is_not_undone_by_the_old_connection_ending() {
        let sessions = Sessions::default();
        let old = sessions.open("c", true, NONE, "p").unwrap();
        let new = sessions.open("c", true, NONE, "p").unwrap();
        new.filters.lock().insert("x".into());
        assert_eq!(
            sessions.close("c", old.generation, NONE),
            AfterClose::Nothing
        );
        assert_eq!(sessions.len(), 1);
        sessions.close("c", new.generation, NONE);
        assert_eq!(sessions.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_principal_never_takes_anothers_session() {
        let sessions = Sessions::default();
        let a = sessions.open("c", false, Expiry(60), "alice").unwrap();
        // Connected: neither a takeover nor a clean start by another.
        assert_eq!(
            sessions.check("c", "mallory", false),
            Err(Refused::OtherOwner)
        );
        assert_eq!(
            sessions.open("c", true, NONE, "mallory").unwrap_err(),
            Refused::OtherOwner
        );
        // Kept: not resumed by another either, until it expires.
        sessions.close("c", a.generation, Expiry(60));
        assert_eq!(
            sessions.check("c", "mallory", true),
            Err(Refused::OtherOwner)
        );
        assert!(sessions.check("c", "alice", true).is_ok());
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(
            sessions.check("c", "mallory", true).is_ok(),
            "expired: anyone's"
        );
        // A clean session, once closed, was nobody's to keep.
        let b = sessions.open("d", true, NONE, "bob").unwrap();
        sessions.close("d", b.generation, NONE);
        assert!(sessions.open("d", true, NONE, "carol").is_ok());
        // Restored from a store without owners: the first one claims it.
        sessions.restore("old", FilterSet::default(), None, None);
        assert!(sessions.open("old", false, Expiry::NEVER, "dave").is_ok());
        assert_eq!(
            sessions.check("old", "erin", false),
            Err(Refused::OtherOwner)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn kept_sessions_are_counted_per_principal_and_in_all() {
        let sessions = Sessions::new(KeptLimits {
            total: 3,
            per_principal: 2,
        });
        let keep = Expiry(60);
        let a1 = sessions.open("a1", false, keep, "alice").unwrap();
        sessions.open("a2", false, keep, "alice").unwrap();
        assert_eq!(
            sessions.open("a3", false, keep, "alice").unwrap_err(),
            Refused::TooManyKeptForPrincipal
        );
        // Clean sessions are not counted; resuming one's own is not a new one.
        assert!(sessions.open("a3", true, NONE, "alice").is_ok());
        sessions.close("a1", a1.generation, keep);
        assert!(sessions.open("a1", false, keep, "alice").is_ok());
        sessions.open("b1", false, keep, "bob").unwrap();
        assert_eq!(
            sessions.open("b2", false, keep, "bob").unwrap_err(),
            Refused::TooManyKept
        );
        // One that expires makes room.
        let b1 = sessions.open("b1", false, keep, "bob").unwrap();
        sessions.close("b1", b1.generation, Expiry(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(sessions.expire("b1", b1.generation));
        assert!(sessions.open("b2", false, keep, "bob").is_ok());
        // Ending a kept session with a clean start makes room too.
        sessions.open("a1", true, NONE, "alice").unwrap();
        assert!(sessions.open("a4", false, keep, "alice").is_ok());
    }

    #[test]
    fn empty_client_ids_are_never_kept() {
        let sessions = Sessions::default();
        let s = sessions.open("", false, Expiry::NEVER, "p").unwrap();
        s.filters.lock().insert("x".into());
        assert_eq!(sessions.len(), 0);
        assert!(sessions
            .open("", false, Expiry::NEVER, "p")
            .unwrap()
            .filters
            .lock()
            .is_empty());
    }
}
