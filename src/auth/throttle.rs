//! Failed attempts per source address and name: after `auth.max_failures`
//! of them the next ones are refused without a check, for a period that
//! doubles with every further failure up to `auth.max_failure_backoff_ms`.
//!
//! The key is the pair (address, name), not the address alone: every
//! client on one machine, behind one NAT or one reverse proxy shares an
//! address, and one of them guessing must not lock out the others; nor the
//! name alone, which anyone anywhere could then lock out. Credentials in
//! the cache pass before this is asked (see `super::verifier`), so a
//! client that authenticated recently keeps working from the very address
//! and name under attack, unless the attack passes `auth.lockout_failures`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::cache::lock;

/// Records kept at most; beyond, the one with the fewest failures goes
/// (an attacker inventing names cannot push out its own record that way).
const CAPACITY: usize = 10_000;

/// Where attempts come from: an address (IPv6 by its /64, which one host
/// usually has whole) and a name, as a truncated keyed hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Source {
    addr: Option<IpAddr>,
    name: [u8; 16],
}

impl Source {
    pub(crate) fn new(addr: Option<IpAddr>, name_mac: &[u8; 32]) -> Source {
        let addr = addr.map(|a| match a.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(bits.into())
            }
            v4 => v4,
        });
        let mut name = [0u8; 16];
        name.copy_from_slice(&name_mac[..16]);
        Source { addr, name }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    /// Refused without a check for this long, unless cached.
    Blocked(Duration),
    /// Refused, cached or not, for this long.
    Locked(Duration),
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    last: Instant,
    until: Instant,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) max_failures: u32,
    pub(crate) backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) lockout: u32,
}

pub(crate) struct Throttle {
    rules: Rules,
    records: Mutex<HashMap<Source, Record>>,
}

impl Throttle {
    pub(crate) fn new(rules: Rules) -> Throttle {
        Throttle {
            rules,
            records: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn gate(&self, source: Source, now: Instant) -> Gate {
        if self.rules.max_failures == 0 {
            return Gate::Open;
        }
        let records = lock(&self.records);
        match records.get(&source) {
            Some(r) if now < r.until => {
                let wait = r.until - now;
                if self.rules.lockout > 0 && r.failures >= self.rules.lockout {
                    Gate::Locked(wait)
                } else {
                    Gate::Blocked(wait)
                }
            }
            _ => Gate::Open,
        }
    }

    /// Counts a failure (an attempt refused, checked or not); the period
    /// from now on during which the source is refused, if it is.
    pub(crate) fn failed(&self, source: Source, now: Instant) -> Option<Duration> {
        let rules = self.rules;
        if rules.max_failures == 0 {
            return None;
        }
        let mut records = lock(&self.records);
        if !records.contains_key(&source) && records.len() >= CAPACITY {
            make_room(&mut records, now, rules.max_backoff);
        }
        let record = records.entry(source).or_insert(Record {
            failures: 0,
            last: now,
            until: now,
        });
        if now >= record.last.max(record.until) + rules.max_backoff {
            // Quiet long enough after its last failure or refusal period:
            // a fresh start.
            record.failures = 0;
        }
        record.failures = record.failures.saturating_add(1);
        record.last = now;
        if record.failures < rules.max_failures {
            return None;
        }
        let doublings = (record.failures - rules.max_failures).min(20);
        let period = rules
            .backoff
            .saturating_mul(1 << doublings)
            .min(rules.max_backoff);
        record.until = record.until.max(now + period);
        Some(record.until - now)
    }

    /// A check passed: the source starts afresh.
    pub(crate) fn succeeded(&self, source: Source) {
        lock(&self.records).remove(&source);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.records).len()
    }
}

/// Forgets the records no longer in force, then, if none was, the one with
/// the fewest failures (the oldest among those).
fn make_room(records: &mut HashMap<Source, Record>, now: Instant, quiet: Duration) {
    records.retain(|_, r| now < r.last.max(r.until) + quiet);
    if records.len() >= CAPACITY {
        let weakest = records
            .iter()
            .min_by_key(|(_, r)| (r.failures, r.last))
            .map(|(s, _)| *s);
        if let Some(s) = weakest {
            records.remove(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            max_failures: 3,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(8),
            lockout: 10,
        }
    }

    fn source(ip: &str, name: u8) -> Source {
        Source::new(Some(ip.parse().unwrap()), &[name; 32])
    }

    #[test]
    fn failures_block_with_a_doubling_period_per_address_and_name() {
        let t = Throttle::new(rules());
        let now = Instant::now();
        let s = source("10.0.0.1", 1);
        assert_eq!(t.failed(s, now), None);
        assert_eq!(t.failed(s, now), None);
        assert_eq!(t.failed(s, now), Some(Duration::from_secs(1)));
        assert_eq!(t.gate(s, now), Gate::Blocked(Duration::from_secs(1)));
        assert_eq!(t.failed(s, now), Some(Duration::from_secs(2)));
        assert_eq!(t.failed(s, now), Some(Duration::from_secs(4)));
        assert_eq!(t.failed(s, now), Some(Duration::from_secs(8)));
        assert_eq!(t.failed(s, now), Some(Duration::from_secs(8)), "capped");
        // Another name from that address, or that name from another
        // address, is not affected.
        assert_eq!(t.gate(source("10.0.0.1", 2), now), Gate::Open);
        assert_eq!(t.gate(source("10.0.0.2", 1), now), Gate::Open);
        // The period passes.
        let later = now + Duration::from_secs(8);
        assert_eq!(t.gate(s, later), Gate::Open);
        // Still counted: one more failure blocks again at once ...
        assert!(t.failed(s, later).is_some());
        // ... until the source was quiet for the longest period after it.
        let quiet = later + Duration::from_secs(16);
        assert_eq!(t.failed(s, quiet), None);
        t.succeeded(s);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn many_failures_lock_out_and_ipv6_counts_by_its_64() {
        let t = Throttle::new(rules());
        let now = Instant::now();
        let a = source("2001:db8::1", 1);
        for _ in 0..9 {
            t.failed(a, now);
        }
        assert!(matches!(t.gate(a, now), Gate::Blocked(_)));
        t.failed(source("2001:db8::ffff", 1), now);
        assert!(matches!(t.gate(a, now), Gate::Locked(_)));
        let v4_mapped = source("::ffff:10.0.0.1", 1);
        assert_eq!(v4_mapped, source("10.0.0.1", 1));
        let off = Throttle::new(Rules {
            max_failures: 0,
            ..rules()
        });
        for _ in 0..20 {
            assert_eq!(off.failed(a, now), None);
        }
        assert_eq!(off.gate(a, now), Gate::Open);
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_worst() {
        let t = Throttle::new(rules());
        let now = Instant::now();
        let worst = source("10.9.9.9", 9);
        for _ in 0..5 {
            t.failed(worst, now);
        }
        for i in 0..CAPACITY as u32 + 10 {
            let ip = IpAddr::from(i.to_be_bytes());
            t.failed(Source::new(Some(ip), &[0; 32]), now);
        }
        assert_eq!(t.len(), CAPACITY);
        assert!(matches!(t.gate(worst, now), Gate::Blocked(_)));
    }
}
