//! Who receives what: the gateway's subscription table. Pure data, no I/O.
//!
//! The gateway holds at most one bus subscription per Thing and stream
//! (`{prefix}/{thing}/events/+`, `{prefix}/{thing}/properties/+`), whatever
//! its consumers ask for, and picks recipients here. Disjoint bus filters mean
//! the broker never delivers one message twice to the gateway.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::quotas::Tally;

pub type ConnId = u64;

/// What a consumer subscribed to on one Thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    Event(String),
    AllEvents,
    Property(String),
}

/// The bus-level stream a selector needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Events,
    Properties,
}

impl Selector {
    pub fn stream(&self) -> Stream {
        match self {
            Selector::Event(_) | Selector::AllEvents => Stream::Events,
            Selector::Property(_) => Stream::Properties,
        }
    }
}

/// A bus subscription to add or drop after a table change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamChange {
    pub thing: String,
    pub stream: Stream,
    pub subscribe: bool,
}

/// The correlation ID a recipient's copies carry, already JSON-encoded.
pub type Correlation = Arc<str>;

type Recipients = HashMap<ConnId, Correlation>;

#[derive(Debug, Default)]
struct ThingSubscriptions {
    all_events: Recipients,
    events: HashMap<String, Recipients>,
    properties: HashMap<String, Recipients>,
}

impl ThingSubscriptions {
    fn has(&self, stream: Stream) -> bool {
        match stream {
            Stream::Events => !self.all_events.is_empty() || !self.events.is_empty(),
            Stream::Properties => !self.properties.is_empty(),
        }
    }

    fn is_empty(&self) -> bool {
        !self.has(Stream::Events) && !self.has(Stream::Properties)
    }

    fn recipients_mut(&mut self, selector: &Selector) -> &mut Recipients {
        match selector {
            Selector::AllEvents => &mut self.all_events,
            Selector::Event(e) => self.events.entry(e.clone()).or_default(),
            Selector::Property(p) => self.properties.entry(p.clone()).or_default(),
        }
    }

    fn remove(&mut self, conn: ConnId, selector: &Selector) {
        match selector {
            Selector::AllEvents => {
                self.all_events.remove(&conn);
            }
            Selector::Event(e) => remove_nested(&mut self.events, e, conn),
            Selector::Property(p) => remove_nested(&mut self.properties, p, conn),
        }
    }
}

fn remove_nested(map: &mut HashMap<String, Recipients>, key: &str, conn: ConnId) {
    if let Some(r) = map.get_mut(key) {
        r.remove(&conn);
        if r.is_empty() {
            map.remove(key);
        }
    }
}

#[derive(Debug, Default)]
pub struct Table {
    things: HashMap<String, ThingSubscriptions>,
    by_conn: HashMap<ConnId, HashSet<(String, Selector)>>,
    /// Each registered connection's principal, and the subscriptions each
    /// principal holds over all its connections (`quotas.subscriptions`).
    principals: HashMap<ConnId, Arc<str>>,
    by_principal: Tally,
}

impl Table {
    /// Reports the largest principal's subscriptions on `gauge`.
    pub fn with_gauge(gauge: prometheus_client::metrics::gauge::Gauge) -> Table {
        Table {
            by_principal: Tally::new(gauge),
            ..Table::default()
        }
    }

    /// A connection's principal, whose quota its subscriptions count in.
    pub fn register(&mut self, conn: ConnId, principal: &str) {
        self.principals.insert(conn, principal.into());
    }

    /// The connection's principal and the subscriptions it holds over all
    /// its connections.
    pub fn principal_usage(&self, conn: ConnId) -> Option<(&Arc<str>, u64)> {
        let principal = self.principals.get(&conn)?;
        Some((principal, self.by_principal.get(principal)))
    }

    /// Adds (or, for the same connection and selector, replaces the
    /// correlation of) a subscription. Returns the bus subscription to make
    /// when this is the Thing's first of its stream.
    pub fn add(
        &mut self,
        conn: ConnId,
        thing: &str,
        selector: Selector,
        correlation: Correlation,
    ) -> Option<StreamChange> {
        let stream = selector.stream();
        let subs = self.things.entry(thing.to_owned()).or_default();
        let had = subs.has(stream);
        subs.recipients_mut(&selector).insert(conn, correlation);
        let new = self
            .by_conn
            .entry(conn)
            .or_default()
            .insert((thing.to_owned(), selector));
        if let (true, Some(p)) = (new, self.principals.get(&conn)) {
            self.by_principal.add(p, 1);
        }
        (!had).then(|| StreamChange {
            thing: thing.to_owned(),
            stream,
            subscribe: true,
        })
    }

    /// Removes a subscription; unknown ones are ignored. Returns the bus
    /// subscription to drop when it was the Thing's last of its stream.
    pub fn remove(
        &mut self,
        conn: ConnId,
        thing: &str,
        selector: &Selector,
    ) -> Option<StreamChange> {
        if let Some(set) = self.by_conn.get_mut(&conn) {
            let held = set.remove(&(thing.to_owned(), selector.clone()));
            if let (true, Some(p)) = (held, self.principals.get(&conn)) {
                self.by_principal.sub(p, 1);
            }
            if set.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        let subs = self.things.get_mut(thing)?;
        let stream = selector.stream();
        let had = subs.has(stream);
        subs.remove(conn, selector);
        let change = (had && !subs.has(stream)).then(|| StreamChange {
            thing: thing.to_owned(),
            stream,
            subscribe: false,
        });
        if subs.is_empty() {
            self.things.remove(thing);
        }
        change
    }

    /// Removes everything of a connection that went away.
    pub fn remove_connection(&mut self, conn: ConnId) -> Vec<StreamChange> {
        let principal = self.principals.remove(&conn);
        let Some(set) = self.by_conn.remove(&conn) else {
            return Vec::new();
        };
        if let Some(p) = principal {
            self.by_principal.sub(&p, set.len() as u64);
        }
        set.into_iter()
            .filter_map(|(thing, selector)| self.remove(conn, &thing, &selector))
            .collect()
    }

    /// Recipients of one event: those subscribed to it by name, then those
    /// subscribed to all events of the Thing. A connection with both gets it
    /// once, with the correlation of its named subscription.
    pub fn event_recipients(&self, thing: &str, event: &str) -> Vec<(ConnId, Correlation)> {
        let Some(subs) = self.things.get(thing) else {
            return Vec::new();
        };
        let named = subs.events.get(event);
        let most = named.map_or(0, |n| n.len()) + subs.all_events.len();
        let mut out = Vec::with_capacity(most);
        out.extend(named.into_iter().flatten().map(|(c, k)| (*c, k.clone())));
        out.extend(
            subs.all_events
                .iter()
                .filter(|(c, _)| !named.is_some_and(|n| n.contains_key(c)))
                .map(|(c, k)| (*c, k.clone())),
        );
        out
    }

    pub fn property_recipients(&self, thing: &str, name: &str) -> Vec<(ConnId, Correlation)> {
        self.things
            .get(thing)
            .and_then(|s| s.properties.get(name))
            .into_iter()
            .flatten()
            .map(|(c, k)| (*c, k.clone()))
            .collect()
    }

    /// Whether the gateway needs the Thing's stream on the bus.
    pub fn follows(&self, thing: &str, stream: Stream) -> bool {
        self.things.get(thing).is_some_and(|s| s.has(stream))
    }

    /// Subscriptions of all connections.
    pub fn len(&self) -> usize {
        self.by_conn.values().map(HashSet::len).sum()
    }

    pub fn holds(&self, conn: ConnId, thing: &str, selector: &Selector) -> bool {
        self.by_conn
            .get(&conn)
            .is_some_and(|s| s.contains(&(thing.to_owned(), selector.clone())))
    }

    pub fn subscription_count(&self, conn: ConnId) -> usize {
        self.by_conn.get(&conn).map_or(0, HashSet::len)
    }

    /// Per Thing: its subscriptions and the distinct connections holding
    /// them, for the console (counts only: which connections is nobody
    /// else's business).
    pub fn counts(&self) -> HashMap<&str, (usize, usize)> {
        self.things
            .iter()
            .map(|(thing, subs)| {
                let lists = std::iter::once(&subs.all_events)
                    .chain(subs.events.values())
                    .chain(subs.properties.values());
                let mut conns = HashSet::new();
                let mut subscriptions = 0;
                for recipients in lists {
                    subscriptions += recipients.len();
                    conns.extend(recipients.keys().copied());
                }
                (thing.as_str(), (subscriptions, conns.len()))
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.things.is_empty() && self.by_conn.is_empty() && self.principals.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Correlation {
        Arc::from(s)
    }

    fn sorted(mut v: Vec<(ConnId, Correlation)>) -> Vec<(ConnId, String)> {
        v.sort_by_key(|(c, _)| *c);
        v.into_iter().map(|(c, k)| (c, k.to_string())).collect()
    }

    #[test]
    fn first_and_last_subscriptions_of_a_stream_change_the_bus() {
        let mut t = Table::default();
        let sub = t.add(1, "T", Selector::Event("a".into()), c("x"));
        assert_eq!(
            sub,
            Some(StreamChange {
                thing: "T".into(),
                stream: Stream::Events,
                subscribe: true
            })
        );
        assert_eq!(t.add(2, "T", Selector::AllEvents, c("y")), None);
        assert!(t
            .add(2, "T", Selector::Property("p".into()), c("z"))
            .is_some());
        assert_eq!(t.remove(1, "T", &Selector::Event("a".into())), None);
        let unsub = t.remove(2, "T", &Selector::AllEvents).unwrap();
        assert!(!unsub.subscribe && unsub.stream == Stream::Events);
        assert_eq!(t.remove_connection(2).len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn a_connection_with_named_and_all_events_gets_each_event_once() {
        let mut t = Table::default();
        t.add(1, "T", Selector::Event("a".into()), c("named"));
        t.add(1, "T", Selector::AllEvents, c("all"));
        t.add(2, "T", Selector::AllEvents, c("two"));
        assert_eq!(
            sorted(t.event_recipients("T", "a")),
            vec![(1, "named".into()), (2, "two".into())]
        );
        assert_eq!(
            sorted(t.event_recipients("T", "b")),
            vec![(1, "all".into()), (2, "two".into())]
        );
        assert!(t.event_recipients("U", "a").is_empty());
    }

    #[test]
    fn resubscribing_replaces_the_correlation() {
        let mut t = Table::default();
        t.add(1, "T", Selector::Property("p".into()), c("old"));
        t.add(1, "T", Selector::Property("p".into()), c("new"));
        assert_eq!(
            sorted(t.property_recipients("T", "p")),
            vec![(1, "new".into())]
        );
        assert_eq!(t.subscription_count(1), 1);
    }

    #[test]
    fn counts_are_per_thing_with_distinct_connections() {
        let mut t = Table::default();
        t.add(1, "a", Selector::AllEvents, c("x"));
        t.add(1, "a", Selector::Property("p".into()), c("y"));
        t.add(2, "a", Selector::Event("e".into()), c("z"));
        t.add(2, "b", Selector::Event("e".into()), c("z"));
        let counts = t.counts();
        assert_eq!(counts["a"], (3, 2));
        assert_eq!(counts["b"], (1, 1));
    }

    #[test]
    fn a_principal_s_subscriptions_are_counted_over_its_connections() {
        let mut t = Table::default();
        t.register(1, "bob");
        t.register(2, "bob");
        t.register(3, "alice");
        t.add(1, "T", Selector::AllEvents, c("x"));
        t.add(1, "T", Selector::AllEvents, c("again"));
        t.add(2, "T", Selector::Property("p".into()), c("y"));
        t.add(3, "T", Selector::AllEvents, c("z"));
        let usage = |t: &Table, conn| t.principal_usage(conn).map(|(p, n)| (p.to_string(), n));
        assert_eq!(
            usage(&t, 2),
            Some(("bob".into(), 2)),
            "a renewal is no new one"
        );
        assert_eq!(usage(&t, 3), Some(("alice".into(), 1)));
        t.remove(2, "T", &Selector::Property("p".into()));
        t.remove(2, "T", &Selector::Property("p".into()));
        assert_eq!(usage(&t, 1), Some(("bob".into(), 1)));
        t.remove_connection(1);
        assert_eq!(usage(&t, 2), Some(("bob".into(), 0)));
        assert_eq!(usage(&t, 1), None, "a connection gone has no principal");
    }

    #[test]
    fn removing_unknown_subscriptions_is_harmless() {
        let mut t = Table::default();
        assert_eq!(t.remove(9, "T", &Selector::AllEvents), None);
        assert!(t.remove_connection(9).is_empty());
        t.add(1, "T", Selector::AllEvents, c("x"));
        assert_eq!(t.remove(2, "T", &Selector::AllEvents), None);
        assert_eq!(t.event_recipients("T", "e").len(), 1);
    }
}
