//! What the registered Thing Descriptions may take: the largest one
//! (`discovery.max_td_size`), all of them (`discovery.max_total_td_bytes`),
//! and each principal's share (`quotas.things`, `quotas.td_bytes`). A TD is
//! counted as served (forms added by the sidecar included), which is what
//! the directory keeps and what every reader downloads.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::warn;

use super::DirectoryError;
use crate::quotas::{Quota, Quotas, Tally};
use crate::telemetry::metrics::Metrics;

/// The directory's global byte limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TdLimits {
    /// Largest TD accepted as sent, bytes.
    pub max_td_size: usize,
    /// All registered TDs together, bytes as served; 0: no limit.
    pub max_total_bytes: u64,
}

impl Default for TdLimits {
    fn default() -> Self {
        TdLimits {
            max_td_size: usize::MAX,
            max_total_bytes: 0,
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// Who registered it; `None`: learnt from the bus or registered at
    /// start-up, on no principal's quota.
    owner: Option<Arc<str>>,
    bytes: u64,
}

/// The directory's accounts: per TD, per principal, in total.
#[derive(Debug, Default)]
pub(super) struct Budget {
    limits: TdLimits,
    quotas: Arc<Quotas>,
    entries: HashMap<String, Entry>,
    total: u64,
    things_by: Tally,
    bytes_by: Tally,
    metrics: Metrics,
    /// `lmos_sidecar_directory_bytes`: the total.
    gauge: prometheus_client::metrics::gauge::Gauge,
    /// Logged that the total is reached, until it is not any more.
    full_logged: bool,
}

impl Budget {
    pub(super) fn new(limits: TdLimits, quotas: Arc<Quotas>, metrics: Metrics) -> Budget {
        Budget {
            limits,
            quotas,
            things_by: Tally::new(metrics.quota_largest(Quota::Things.label())),
            bytes_by: Tally::new(metrics.quota_largest(Quota::TdBytes.label())),
            gauge: metrics.directory_bytes(),
            metrics,
            ..Budget::default()
        }
    }

    /// A TD (or a patch) as sent, before it is parsed.
    pub(super) fn check_size(&self, size: usize) -> Result<(), DirectoryError> {
        let max = self.limits.max_td_size;
        if size <= max {
            return Ok(());
        }
        self.metrics.limit_hit("any", "max_td_size");
        Err(DirectoryError::TooLarge { size, max })
    }

    /// Whether `owner` may have `id` take `bytes` (replacing what it took).
    pub(super) fn admit(
        &mut self,
        id: &str,
        owner: Option<&str>,
        bytes: u64,
    ) -> Result<(), DirectoryError> {
        let old = self.entries.get(id);
        let replaced = old.map_or(0, |e| e.bytes);
        let total = self.total - replaced + bytes;
        let max = self.limits.max_total_bytes;
        if max > 0 && total > max && bytes > replaced {
            self.metrics.limit_hit("any", "max_total_td_bytes");
            if !self.full_logged {
                self.full_logged = true;
                warn!(
                    total = self.total,
                    max, "The directory is full (discovery.max_total_td_bytes): registrations are refused with 507 until Thing Descriptions are deleted."
                );
            }
            return Err(DirectoryError::Full {
                total: self.total,
                max,
            });
        }
        let Some(owner) = owner else {
            return Ok(());
        };
        let mine = old.is_some_and(|e| e.owner.as_deref() == Some(owner));
        let (things, more_bytes) = match mine {
            true => (0, bytes.saturating_sub(replaced)),
            false => (1, bytes),
        };
        let checks = [
            (Quota::Things, self.things_by.get(owner), things),
            (Quota::TdBytes, self.bytes_by.get(owner), more_bytes),
        ];
        for (quota, used, adding) in checks {
            if adding == 0 {
                continue;
            }
            if let Err(e) = self.quotas.check(owner, quota, used, adding) {
                self.metrics.limit_hit("any", quota.label());
                return Err(DirectoryError::Quota(e));
            }
        }
        Ok(())
    }

    /// `id` now takes `bytes`, on `owner`'s quota (after [`Budget::admit`]).
    pub(super) fn record(&mut self, id: &str, owner: Option<&str>, bytes: u64) {
        self.release(id);
        let owner: Option<Arc<str>> = owner.map(Arc::from);
        if let Some(o) = &owner {
            self.things_by.add(o, 1);
            self.bytes_by.add(o, bytes);
        }
        self.total += bytes;
        self.gauge
            .set(i64::try_from(self.total).unwrap_or(i64::MAX));
        self.entries.insert(id.to_owned(), Entry { owner, bytes });
    }

    /// `id` is gone.
    pub(super) fn release(&mut self, id: &str) {
        let Some(e) = self.entries.remove(id) else {
            return;
        };
        if let Some(o) = &e.owner {
            self.things_by.sub(o, 1);
            self.bytes_by.sub(o, e.bytes);
        }
        self.total -= e.bytes;
        self.gauge
            .set(i64::try_from(self.total).unwrap_or(i64::MAX));
        let max = self.limits.max_total_bytes;
        if self.full_logged && self.total < max {
            self.full_logged = false;
        }
    }

    /// Bytes of all registered TDs, as served.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Whether the total is reached (for readiness reports).
    pub(super) fn is_full(&self) -> bool {
        self.full_logged
    }

    /// Who registered `id`, when a principal did.
    pub(super) fn owner(&self, id: &str) -> Option<&str> {
        self.entries.get(id).and_then(|e| e.owner.as_deref())
    }

    /// TDs registered and their bytes, of one principal.
    pub(super) fn usage(&self, principal: &str) -> (u64, u64) {
        (self.things_by.get(principal), self.bytes_by.get(principal))
    }
}

/// Bytes `value` takes as JSON, without writing it anywhere.
pub(super) fn json_len(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::super::{Directory, DirectoryError, Registered};
    use super::*;
    use crate::config::QuotasConfig;
    use crate::quotas::Exceeded;
    use crate::topics::Topics;
    use serde_json::{json, Value};

    const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");

    fn td(id: &str, padding: usize) -> Vec<u8> {
        let mut td: Value = serde_json::from_str(WEATHER).unwrap();
        td["id"] = json!(id);
        td["description"] = json!("x".repeat(padding));
        td.to_string().into_bytes()
    }

    /// The size of `td(id, 0)` as served.
    fn served(id: &str) -> u64 {
        let mut d = Directory::new(crate::directory::test_endpoints(
            Topics::new("lmos").unwrap(),
        ));
        let (_, v) = d.put(None, &td(id, 0)).unwrap();
        json_len(&v)
    }

    fn directory(limits: TdLimits, quotas: QuotasConfig) -> Directory {
        Directory::new(crate::directory::test_endpoints(
            Topics::new("lmos").unwrap(),
        ))
        .with_limits(limits, Quotas::new(&quotas, true), Metrics::default())
    }

    fn quota(e: DirectoryError) -> Exceeded {
        match e {
            DirectoryError::Quota(q) => q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_td_beyond_the_largest_is_refused_before_it_is_parsed() {
        let limits = TdLimits {
            max_td_size: 10,
            max_total_bytes: 0,
        };
        let mut d = directory(limits, QuotasConfig::default());
        let e = d
            .put_as(Some("bob"), None, b"{ not even JSON }")
            .unwrap_err();
        assert_eq!(e, DirectoryError::TooLarge { size: 17, max: 10 });
        assert!(e.to_string().contains("discovery.max_td_size"));
        assert_eq!(e.problem_kind(), crate::lmos::ProblemKind::MessageTooLarge);
        assert!(d.learn("urn:x", &td("urn:x", 0)).is_err());
        assert!(d.is_empty());
    }

    #[test]
    fn the_total_counts_tds_as_served_and_frees_on_delete() {
        let one = served("urn:a");
        let limits = TdLimits {
            max_td_size: usize::MAX,
            max_total_bytes: 2 * one + 10,
        };
        let mut d = directory(limits, QuotasConfig::default());
        d.put_as(Some("bob"), None, &td("urn:a", 0)).unwrap();
        d.learn("urn:b", &td("urn:b", 0)).unwrap();
        assert_eq!(d.bytes(), (2 * one, false));
        let e = d.put_as(Some("alice"), None, &td("urn:c", 0)).unwrap_err();
        assert!(matches!(e, DirectoryError::Full { .. }), "{e:?}");
        assert_eq!(e.problem_kind().status(), 429);
        assert!(d.bytes().1, "full");
        // Replacing one with no more bytes is no growth.
        assert_eq!(
            d.put_as(Some("bob"), None, &td("urn:a", 0)).unwrap().0,
            Registered::Updated
        );
        d.learn("urn:b", b"").unwrap();
        assert_eq!(d.bytes(), (one, false));
        d.put_as(Some("alice"), None, &td("urn:c", 0)).unwrap();
        d.delete("urn:c").unwrap();
        assert_eq!(d.bytes().0, one);
    }

    #[test]
    fn each_principal_has_its_count_and_bytes() {
        let one = served("urn:a");
        let quotas = QuotasConfig {
            things: 2,
            td_bytes: 3 * one,
            ..QuotasConfig::default()
        };
        let mut d = directory(TdLimits::default(), quotas);
        d.put_as(Some("bob"), None, &td("urn:a", 0)).unwrap();
        d.post(Some("bob"), {
            let mut v: Value = serde_json::from_slice(&td("x", 0)).unwrap();
            v.as_object_mut().unwrap().remove("id");
            &v.to_string().into_bytes()
        })
        .unwrap();
        let e = quota(d.put_as(Some("bob"), None, &td("urn:c", 0)).unwrap_err());
        assert_eq!((e.principal.as_str(), e.quota), ("bob", Quota::Things));
        d.put_as(Some("alice"), None, &td("urn:c", 0)).unwrap();
        // Growing one of his own past his bytes.
        let grown = td("urn:a", 2 * one as usize);
        let e = quota(d.put_as(Some("bob"), None, &grown).unwrap_err());
        assert_eq!(e.quota, Quota::TdBytes);
        assert!(e.to_string().contains("(quotas.td_bytes)"), "{e}");
        // Alice takes Bob's `urn:a` over: it moves to her quota.
        d.put_as(Some("alice"), None, &td("urn:a", 0)).unwrap();
        assert_eq!(d.usage("bob").0, 1);
        assert_eq!(d.usage("alice").0, 2);
        d.patch(Some("bob"), "urn:c", br#"{"title": "mine now"}"#)
            .unwrap();
        assert_eq!((d.usage("bob").0, d.usage("alice").0), (2, 1));
    }
}
