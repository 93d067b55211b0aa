//! The cluster's retained state in JetStream key-value buckets, decided
//! without I/O: which bucket and key a retained topic lives under, the
//! topic an entry stands for, and when a presence nobody renews is stale.
//!
//! Three buckets per prefix (`{P}` is [`name`] of the prefix):
//!
//! | bucket          | key                  | topic                             |
//! |-----------------|----------------------|-----------------------------------|
//! | `{P}-readings`  | `{thing}.{property}` | `{prefix}/{thing}/properties/{property}` |
//! | `{P}-tds`       | `{thing}`            | `{prefix}/{thing}/td`             |
//! | `{P}-presence`  | `{thing}`            | `{prefix}/{thing}/agent/status`   |
//!
//! `{thing}` and `{property}` are the topic's levels (already escaped by
//! `crate::topics`) written with [`key_token`]: `A`–`Z`, `a`–`z`, `0`–`9`,
//! `_` and `-` stay, every other byte of the level's UTF-8 is `=XX`
//! (upper-case hex), an empty level is `=`. KV keys allow
//! `[-/_=.a-zA-Z0-9]`, so `:` (in every `urn:`) cannot stay as it is in
//! subjects; `=` is the escape because it is the one allowed character no
//! token otherwise holds. Reversible (property-tested).
//!
//! Presence lives in a bucket whose entries expire (`cluster.presence_ttl_s`)
//! unless the hosting sidecar renews them: a sidecar that dies leaves no
//! presence behind for longer. The others learn it with [`Staleness`].

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::topics::Topics;

/// Which bucket a retained topic lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    Readings,
    Tds,
    Presence,
}

impl Bucket {
    pub const ALL: [Bucket; 3] = [Bucket::Readings, Bucket::Tds, Bucket::Presence];

    fn suffix(self) -> &'static str {
        match self {
            Bucket::Readings => "readings",
            Bucket::Tds => "tds",
            Bucket::Presence => "presence",
        }
    }

    /// The bucket's name for `topics`' prefix.
    pub fn name(self, topics: &Topics) -> String {
        format!("{}-{}", name(topics.prefix()), self.suffix())
    }
}

/// A stream, bucket or consumer name from free text: `A`–`Z`, `a`–`z`,
/// `0`–`9` and `-` stay, any other byte is `_XX` (so `acme/lmos` is
/// `acme_2Flmos`, distinct from `acme_lmos`, which is `acme_5Flmos`).
pub fn name(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(char::from(b));
        } else {
            write!(out, "_{b:02X}").expect("writing to a String cannot fail");
        }
    }
    out
}

/// One key token for a topic level (see the module documentation).
pub fn key_token(level: &str) -> String {
    if level.is_empty() {
        return "=".to_owned();
    }
    let mut out = String::with_capacity(level.len() + 8);
    for b in level.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            write!(out, "={b:02X}").expect("writing to a String cannot fail");
        }
    }
    out
}

/// The topic level of a key token; `None` if no [`key_token`] wrote it.
pub fn key_level(token: &str) -> Option<String> {
    if token == "=" {
        return Some(String::new());
    }
    let mut bytes = Vec::with_capacity(token.len());
    let mut rest = token.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'=' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            let upper = hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c));
            let byte = u8::from_str_radix(hex, 16).ok().filter(|_| upper)?;
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
                return None; // never escaped: not ours
            }
            bytes.push(byte);
            rest = &tail[2..];
        } else if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            bytes.push(b);
            rest = tail;
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// The bucket and key of a retained topic; `None` for what is not retained
/// state of this prefix.
pub fn entry(topics: &Topics, topic: &str) -> Option<(Bucket, String)> {
    let rest = topic
        .strip_prefix(topics.prefix())
        .and_then(|r| r.strip_prefix('/'))?;
    let levels: Vec<&str> = rest.split('/').collect();
    match levels[..] {
        [thing, "properties", property] => Some((
            Bucket::Readings,
            format!("{}.{}", key_token(thing), key_token(property)),
        )),
        [thing, "td"] => Some((Bucket::Tds, key_token(thing))),
        [thing, "agent", "status"] => Some((Bucket::Presence, key_token(thing))),
        _ => None,
    }
}

/// The topic an entry of `bucket` stands for.
pub fn topic(topics: &Topics, bucket: Bucket, key: &str) -> Option<String> {
    let p = topics.prefix();
    let tokens: Vec<&str> = key.split('.').collect();
    match (bucket, &tokens[..]) {
        (Bucket::Readings, [thing, property]) => Some(format!(
            "{p}/{}/properties/{}",
            key_level(thing)?,
            key_level(property)?
        )),
        (Bucket::Tds, [thing]) => Some(format!("{p}/{}/td", key_level(thing)?)),
        (Bucket::Presence, [thing]) => Some(format!("{p}/{}/agent/status", key_level(thing)?)),
        _ => None,
    }
}

/// Remote agents' presence that no longer has an entry: a sidecar that
/// died stops renewing it and it expires. A presence must be missing from
/// two listings in a row before it counts as stale, so an agent that came
/// online between a listing and its entry's first write is not taken for
/// gone.
#[derive(Debug, Default)]
pub struct Staleness {
    /// Presence topics other sidecars said were online.
    online: HashSet<String>,
    /// Missing from the last listing: topic → listings missed.
    missing: HashMap<String, u32>,
}

impl Staleness {
    /// A presence from another sidecar (or the buckets).
    pub fn heard(&mut self, topic: &str, online: bool) {
        self.missing.remove(topic);
        if online {
            self.online.insert(topic.to_owned());
        } else {
            self.online.remove(topic);
        }
    }

    /// A listing of the presence bucket's topics: the topics now stale,
    /// which the caller publishes as offline (and which are forgotten).
    pub fn listed(&mut self, present: &HashSet<String>) -> Vec<String> {
        let mut stale = Vec::new();
        for topic in &self.online {
            if present.contains(topic) {
                self.missing.remove(topic);
                continue;
            }
            let missed = self.missing.entry(topic.clone()).or_insert(0);
            *missed += 1;
            if *missed >= 2 {
                stale.push(topic.clone());
            }
        }
        for topic in &stale {
            self.online.remove(topic);
            self.missing.remove(topic);
        }
        stale.sort();
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn retained_topics_have_valid_keys_and_back() {
        let t = Topics::new("lmos").unwrap();
        let thing = "urn:x:lamp 1.a";
        let cases = [
            (t.property(thing, "on"), Bucket::Readings),
            (t.td(thing), Bucket::Tds),
            (t.agent_status(thing), Bucket::Presence),
        ];
        for (topic, bucket) in cases {
            let (b, key) = entry(&t, &topic).unwrap();
            assert_eq!(b, bucket);
            assert!(key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-/_=.".contains(c)));
            assert_eq!(super::topic(&t, b, &key).unwrap(), topic);
        }
        assert_eq!(
            entry(&t, &t.property("urn:x", "on")).unwrap().1,
            "urn=3Ax.on"
        );
        assert_eq!(entry(&t, &t.event(thing, "e")), None);
        assert_eq!(Bucket::Presence.name(&t), "lmos-presence");
        assert_eq!(name("acme/lmos"), "acme_2Flmos");
        assert_eq!(name("acme_lmos"), "acme_5Flmos");
    }

    #[test]
    fn keys_no_sidecar_writes_are_refused() {
        for bad in ["=3A=", "=3a", "=41", "a:b", "=ZZ", "=FF"] {
            assert_eq!(key_level(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_presence_missing_twice_is_stale() {
        let mut s = Staleness::default();
        s.heard("p/a", true);
        s.heard("p/b", true);
        let present: HashSet<String> = ["p/b".to_owned()].into();
        assert!(s.listed(&present).is_empty(), "once may be a race");
        assert_eq!(s.listed(&present), vec!["p/a".to_owned()]);
        assert!(s.listed(&present).is_empty(), "told once");
        s.heard("p/b", false);
        assert!(s.listed(&HashSet::new()).is_empty(), "offline is not stale");
    }

    proptest! {
        #[test]
        fn any_level_round_trips_through_a_valid_key(level in ".{0,12}") {
            let token = key_token(&level);
            prop_assert!(token.chars().all(|c| c.is_ascii_alphanumeric() || "_-=".contains(c)), "{}", token);
            prop_assert_eq!(key_level(&token).unwrap(), level);
        }
    }
}
