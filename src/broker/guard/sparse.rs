//! A map that takes room in a connection's task only while it holds
//! something. A connection keeps half a dozen maps (topic aliases, QoS 2
//! bookkeeping, SUBACK rewrites) that most clients never use or use for a
//! moment; an empty `HashMap` is 48 bytes of every idle client's task, a
//! `Sparse` one 8 (issue 48).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

#[derive(Debug)]
#[expect(
    clippy::box_collection,
    reason = "the point: 8 bytes in the task while empty, where a map is 48"
)]
pub(super) struct Sparse<K, V>(Option<Box<HashMap<K, V>>>);

impl<K, V> Default for Sparse<K, V> {
    fn default() -> Self {
        Sparse(None)
    }
}

impl<K: Eq + Hash, V> Sparse<K, V> {
    pub(super) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.0.as_ref()?.get(key)
    }

    pub(super) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.0.as_mut()?.get_mut(key)
    }

    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.0.get_or_insert_default().insert(key, value)
    }

    /// Removes `key`; the last one out gives the map's room back.
    pub(super) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let map = self.0.as_mut()?;
        let value = map.remove(key);
        if map.is_empty() {
            self.0 = None;
        }
        value
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether it holds any room (for tests of what an idle client holds).
    #[cfg(test)]
    pub(super) fn holds_room(&self) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_holds_room_only_while_it_holds_entries() {
        let mut map: Sparse<u16, String> = Sparse::default();
        assert_eq!(std::mem::size_of_val(&map), 8);
        assert!(map.is_empty() && !map.holds_room() && map.get(&1).is_none());
        assert_eq!(map.remove(&1), None);
        assert_eq!(map.insert(1, "a".into()), None);
        assert_eq!(map.insert(2, "b".into()), None);
        assert_eq!(map.insert(1, "c".into()).as_deref(), Some("a"));
        assert_eq!(map.len(), 2);
        map.get_mut(&2).unwrap().push('!');
        assert_eq!(map.get(&2).map(String::as_str), Some("b!"));
        assert_eq!(map.remove(&1).as_deref(), Some("c"));
        assert!(map.holds_room());
        assert_eq!(map.remove(&9), None);
        assert_eq!(map.remove(&2).as_deref(), Some("b!"));
        assert!(map.is_empty() && !map.holds_room());
    }
}
