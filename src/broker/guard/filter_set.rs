//! The filters one session holds. Most sessions hold one or a few: a hash
//! set took some 120 bytes of heap for one (four buckets and their control
//! bytes, beside the filter's own allocation), a vector takes 24. Past
//! [`FEW`] filters it becomes a hash set, so a session holding many stays
//! at constant-time lookups (issue 48).

use std::collections::HashSet;

/// Up to this many filters are kept in a vector, searched in order.
const FEW: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterSet {
    Few(Vec<String>),
    Many(HashSet<String>),
}

impl Default for FilterSet {
    fn default() -> Self {
        FilterSet::Few(Vec::new())
    }
}

impl FilterSet {
    pub fn contains(&self, filter: &str) -> bool {
        match self {
            FilterSet::Few(few) => few.iter().any(|f| f == filter),
            FilterSet::Many(many) => many.contains(filter),
        }
    }

    /// Adds `filter`; false when it was there already.
    pub fn insert(&mut self, filter: String) -> bool {
        if self.contains(&filter) {
            return false;
        }
        match self {
            FilterSet::Many(many) => {
                many.insert(filter);
            }
            FilterSet::Few(few) if few.len() < FEW => {
                // One at a time: most sessions stay at one or two.
                few.reserve_exact(1);
                few.push(filter);
            }
            FilterSet::Few(few) => {
                let mut many: HashSet<String> = few.drain(..).collect();
                many.insert(filter);
                *self = FilterSet::Many(many);
            }
        }
        true
    }

    /// Removes `filter`; false when it was not there.
    pub fn remove(&mut self, filter: &str) -> bool {
        match self {
            FilterSet::Few(few) => match few.iter().position(|f| f == filter) {
                Some(at) => {
                    few.swap_remove(at);
                    true
                }
                None => false,
            },
            FilterSet::Many(many) => many.remove(filter),
        }
    }

    pub fn iter(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            FilterSet::Few(few) => Box::new(few.iter()),
            FilterSet::Many(many) => Box::new(many.iter()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            FilterSet::Few(few) => few.len(),
            FilterSet::Many(many) => many.len(),
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<String> for FilterSet {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        let mut set = FilterSet::default();
        for filter in iter {
            set.insert(filter);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_filter_takes_one_slot() {
        let mut set = FilterSet::default();
        assert!(set.insert("a/#".into()));
        assert!(!set.insert("a/#".into()), "once");
        let FilterSet::Few(few) = &set else {
            panic!("a vector for one filter");
        };
        assert_eq!(few.capacity(), 1);
        assert!(set.contains("a/#"));
        assert!(set.remove("a/#"));
        assert!(!set.remove("a/#"));
        assert!(set.is_empty());
    }

    #[test]
    fn many_filters_become_a_set_and_stay_whole() {
        let set: FilterSet = (0..20).map(|i| format!("t/{i}")).collect();
        assert!(matches!(set, FilterSet::Many(_)));
        assert_eq!(set.len(), 20);
        assert!((0..20).all(|i| set.contains(&format!("t/{i}"))));
        let mut all: Vec<_> = set.iter().cloned().collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 20);
    }
}
