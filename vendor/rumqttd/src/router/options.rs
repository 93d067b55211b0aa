//! lmos-sidecar patch 14: MQTT 5 subscription options (No Local, Retain As
//! Published, Retain Handling, §3.8.3.1) and one delivery for overlapping
//! subscriptions, carrying every matching subscription's identifier
//! (§3.3.4). rumqttd parsed the options and ignored them, and delivered a
//! publication once per matching filter, each copy with one identifier.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

use crate::protocol::{Filter as FilterOptions, Publish, PublishProperties, QoS, RetainForwardRule};
use crate::{Filter, Offset};

use super::logs::DataLog;
use super::subscriptions::Subscriptions;
use super::{Connection, DataRequest};

/// A publication about to be forwarded: read from the filter's log (with
/// its offset) or a retained message (without).
pub type Candidate = ((Publish, Option<PublishProperties>), Option<Offset>, Source);

/// What a connection asked for with one subscription, as its last
/// SUBSCRIBE of the filter said (a new SUBSCRIBE replaces them, §3.8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubscriptionOptions {
    pub id: Option<usize>,
    pub qos: u8,
    /// Not sent what this client published itself.
    pub nolocal: bool,
    /// Sent with the retain flag as published.
    pub preserve_retain: bool,
}

impl SubscriptionOptions {
    pub fn of(filter: &FilterOptions, id: Option<usize>) -> SubscriptionOptions {
        SubscriptionOptions {
            id,
            qos: filter.qos as u8,
            nolocal: filter.nolocal,
            preserve_retain: filter.preserve_retain,
        }
    }

}

/// Whether a SUBSCRIBE sends the retained messages matching its filter:
/// Retain Handling 0 on every subscribe, 1 when the subscription is new, 2
/// never; never for a shared subscription (§4.8.2).
pub fn forwards_retained(filter: &FilterOptions, new: bool, shared: bool) -> bool {
    !shared
        && match filter.retain_forward_rule {
            RetainForwardRule::OnEverySubscribe => true,
            RetainForwardRule::OnNewSubscribe => new,
            RetainForwardRule::Never => false,
        }
}

/// Where a publication in a filter's log came from, for the subscribers
/// reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The publishing client's [`origin`]; 0 for none (a retained message
    /// read at subscribe, a will, a restored publication).
    pub origin: u64,
    /// How many filters' logs the publication was appended to: with one,
    /// no connection can hold two subscriptions matching it.
    pub filters: usize,
}

impl Source {
    pub const NONE: Source = Source {
        origin: 0,
        filters: 1,
    };
}

/// A client ID's stand-in in every publication it appends (No Local is by
/// client ID, §3.8.3.1), keyed per process. Two IDs that hash alike would
/// each miss the other's publications on a No Local subscription: the
/// chance is 2^-64, and one client could only hide its own publications
/// from the other.
pub fn origin(client_id: &str) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut hasher = KEYS.get_or_init(Default::default).build_hasher();
    client_id.hash(&mut hasher);
    hasher.finish().max(1)
}

/// What one delivery of a publication matching several of a connection's
/// subscriptions carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overlap {
    /// Every matching subscription's identifier.
    pub ids: Vec<usize>,
    /// Whether any of them keeps the retain flag as published.
    pub preserve_retain: bool,
}

/// Of a connection's non-shared subscriptions `matching` a publication (the
/// filters its topic matches, those the connection holds), the one whose
/// request delivers it: the highest QoS, then the first filter by name, so
/// that every request of the connection picks the same one and the QoS is
/// the highest of them (§3.3.4). `None` when `reading` is not it: its copy
/// is skipped. A subscription with No Local does not count for the
/// client's own publications.
pub fn overlap<'a>(
    reading: &str,
    matching: impl IntoIterator<Item = &'a Filter>,
    options: &Subscriptions,
    own: bool,
) -> Option<Overlap> {
    let mut chosen: Option<(&Filter, u8)> = None;
    let mut overlap = Overlap::default();
    for filter in matching {
        let Some(o) = options.get(filter) else {
            continue;
        };
        if o.nolocal && own {
            continue;
        }
        overlap.ids.extend(o.id);
        overlap.preserve_retain |= o.preserve_retain;
        let better = match chosen {
            None => true,
            Some((f, qos)) => o.qos > qos || (o.qos == qos && filter < f),
        };
        if better {
            chosen = Some((filter, o.qos));
        }
    }
    match chosen {
        Some((f, _)) if f != reading => None,
        _ => Some(overlap),
    }
}

/// Publications appended to more filters than this are delivered once per
/// matching subscription, each copy with its own identifier, as rumqttd
/// did (§3.3.4 allows it). Deciding on one delivery costs each of a
/// connection's matching subscriptions a look at every filter the topic
/// matches: with a cap, a client holding many overlapping filters
/// (`mqtt.max_subscriptions`, 1 000 by default) cannot make the router's
/// one thread do that a million times per publication.
pub const MAX_OVERLAP: usize = 32;

/// What [`choose`] left of a batch.
#[derive(Debug, Default)]
pub struct Chosen {
    /// Some publications were left out.
    pub dropped: bool,
    /// For each publication left, in order, what its delivery carries when
    /// it matches several subscriptions; empty when none does.
    pub overlaps: Vec<Option<Overlap>>,
}

/// Leaves out of a request's batch the client's own publications when the
/// subscription has No Local, and those that another of the connection's
/// subscriptions delivers ([`overlap`]). Those left out of a kept
/// session's batch count as delivered, so that the store forgets them.
/// Costs nothing for a batch of publications that each matched a single
/// filter, without No Local.
pub fn choose(
    publishes: &mut Vec<Candidate>,
    request: &DataRequest,
    subscription: Option<SubscriptionOptions>,
    datalog: &mut DataLog,
    connection: &Connection,
) -> Chosen {
    let nolocal = subscription.is_some_and(|o| o.nolocal);
    let shared = request.group.is_some();
    let single = |(_, offset, source): &Candidate| {
        offset.is_none() || !(2..=MAX_OVERLAP).contains(&source.filters)
    };
    if !nolocal && (shared || publishes.iter().all(single)) {
        return Chosen::default();
    }
    let before = publishes.len();
    let mut overlaps = Vec::with_capacity(before);
    publishes.retain(|((publish, _), offset, source)| {
        let Some(offset) = *offset else {
            overlaps.push(None);
            return true;
        };
        let own = source.origin != 0 && source.origin == connection.origin;
        let chosen = if nolocal && own {
            None
        } else if shared || !(2..=MAX_OVERLAP).contains(&source.filters) {
            Some(None)
        } else {
            let topic = String::from_utf8_lossy(&publish.topic);
            let idxs = datalog.matches(&topic).unwrap_or_default();
            let matching = idxs.iter().filter_map(|&idx| datalog.filter_name(idx));
            let options = &connection.subscription_options;
            overlap(&request.filter, matching, options, own).map(Some)
        };
        match chosen {
            Some(overlap) => {
                overlaps.push(overlap);
                true
            }
            None => {
                if !connection.clean && request.qos > 0 && publish.qos != QoS::AtMostOnce {
                    datalog.keep_delivered(&connection.client_id, request.filter_idx, offset);
                }
                false
            }
        }
    });
    Chosen {
        dropped: publishes.len() < before,
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(list: &[(&str, u8, Option<usize>, bool)]) -> Subscriptions {
        list.iter()
            .map(|&(f, qos, id, nolocal)| {
                let o = SubscriptionOptions {
                    id,
                    qos,
                    nolocal,
                    preserve_retain: false,
                };
                (f.to_owned(), o)
            })
            .collect()
    }

    #[test]
    fn one_subscription_delivers_with_every_identifier() {
        let o = options(&[("a", 1, Some(2), false), ("a/#", 1, Some(3), false)]);
        let matching: Vec<Filter> = vec!["a/#".into(), "a".into()];
        let chosen = overlap("a", &matching, &o, false).unwrap();
        let mut ids = chosen.ids.clone();
        ids.sort();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(overlap("a/#", &matching, &o, false), None);
    }

    #[test]
    fn the_highest_qos_delivers() {
        let o = options(&[("a", 0, None, false), ("a/#", 2, None, false)]);
        let matching: Vec<Filter> = vec!["a".into(), "a/#".into()];
        assert_eq!(overlap("a", &matching, &o, false), None);
        assert!(overlap("a/#", &matching, &o, false).is_some());
    }

    #[test]
    fn no_local_does_not_count_for_own_publications() {
        let o = options(&[("a", 2, Some(1), true), ("a/#", 0, Some(2), false)]);
        let matching: Vec<Filter> = vec!["a".into(), "a/#".into()];
        assert_eq!(overlap("a", &matching, &o, true), None);
        assert_eq!(overlap("a/#", &matching, &o, true).unwrap().ids, vec![2]);
        assert!(overlap("a", &matching, &o, false).is_some());
    }
}
