//! lmos-sidecar patch 38: a connection's subscriptions by filter, with
//! their options. Most connections hold one or a few: a hash map took 212
//! bytes of the router's heap for one (four buckets of 48 bytes and their
//! control bytes), a vector takes 48. Past [`FEW`] filters it becomes a
//! hash map, so a connection with many stays at constant-time lookups.

use std::collections::HashMap;

use super::options::SubscriptionOptions;
use crate::Filter;

/// Up to this many filters are kept in a vector, searched in order.
const FEW: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscriptions {
    Few(Vec<(Filter, SubscriptionOptions)>),
    Many(HashMap<Filter, SubscriptionOptions>),
}

impl Default for Subscriptions {
    fn default() -> Self {
        Subscriptions::Few(Vec::new())
    }
}

impl Subscriptions {
    pub fn get(&self, filter: &str) -> Option<&SubscriptionOptions> {
        match self {
            Subscriptions::Few(few) => few.iter().find(|(f, _)| f == filter).map(|(_, o)| o),
            Subscriptions::Many(many) => many.get(filter),
        }
    }

    pub fn contains_key(&self, filter: &str) -> bool {
        self.get(filter).is_some()
    }

    /// Sets `filter`'s options; the ones they replace, if any.
    pub fn insert(&mut self, filter: Filter, options: SubscriptionOptions) -> Option<SubscriptionOptions> {
        let few = match self {
            Subscriptions::Many(many) => return many.insert(filter, options),
            Subscriptions::Few(few) => few,
        };
        if let Some((_, o)) = few.iter_mut().find(|(f, _)| *f == filter) {
            return Some(std::mem::replace(o, options));
        }
        if few.len() < FEW {
            // One at a time: most connections stay at one or two.
            few.reserve_exact(1);
            few.push((filter, options));
            return None;
        }
        let mut many: HashMap<_, _> = few.drain(..).collect();
        many.insert(filter, options);
        *self = Subscriptions::Many(many);
        None
    }

    pub fn remove(&mut self, filter: &str) -> Option<SubscriptionOptions> {
        match self {
            Subscriptions::Few(few) => {
                let at = few.iter().position(|(f, _)| f == filter)?;
                Some(few.swap_remove(at).1)
            }
            Subscriptions::Many(many) => many.remove(filter),
        }
    }

    pub fn keys(&self) -> Box<dyn Iterator<Item = &Filter> + '_> {
        match self {
            Subscriptions::Few(few) => Box::new(few.iter().map(|(f, _)| f)),
            Subscriptions::Many(many) => Box::new(many.keys()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Subscriptions::Few(few) => few.len(),
            Subscriptions::Many(many) => many.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<(Filter, SubscriptionOptions)> for Subscriptions {
    fn from_iter<I: IntoIterator<Item = (Filter, SubscriptionOptions)>>(iter: I) -> Self {
        let mut subscriptions = Subscriptions::default();
        for (filter, options) in iter {
            subscriptions.insert(filter, options);
        }
        subscriptions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(qos: u8) -> SubscriptionOptions {
        SubscriptionOptions {
            qos,
            ..Default::default()
        }
    }

    #[test]
    fn one_filter_takes_one_slot() {
        let mut s = Subscriptions::default();
        assert_eq!(s.insert("a/b".into(), qos(1)), None);
        let Subscriptions::Few(few) = &s else {
            panic!("a vector for one filter");
        };
        assert_eq!(few.capacity(), 1);
        assert_eq!(s.insert("a/b".into(), qos(2)), Some(qos(1)), "replaced");
        assert_eq!(s.get("a/b"), Some(&qos(2)));
        assert_eq!(s.len(), 1);
        assert_eq!(s.remove("a/b"), Some(qos(2)));
        assert_eq!(s.remove("a/b"), None);
        assert!(s.is_empty());
    }

    #[test]
    fn many_filters_become_a_map_and_keep_their_options() {
        let mut s = Subscriptions::default();
        for i in 0..20u8 {
            assert_eq!(s.insert(format!("t/{i}"), qos(i % 3)), None);
        }
        assert!(matches!(s, Subscriptions::Many(_)));
        assert_eq!(s.len(), 20);
        for i in 0..20u8 {
            assert_eq!(s.get(&format!("t/{i}")), Some(&qos(i % 3)));
        }
        let mut keys: Vec<_> = s.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys.len(), 20);
        assert_eq!(s.remove("t/3"), Some(qos(0)));
        assert!(!s.contains_key("t/3"));
        assert!(s.contains_key("t/4"));
    }
}
