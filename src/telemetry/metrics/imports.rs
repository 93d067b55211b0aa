//! Imported MCP servers and A2A agents (`crate::imports`), labelled by the
//! upstream's configured `name` (bounded by the configuration, so the label
//! sets are too).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

pub(super) struct Imports {
    calls: Family<Labels, Counter>,
    seconds: Family<Labels, Histogram>,
    up: Family<Labels, Gauge>,
    connects: Family<Labels, Counter>,
}

impl Imports {
    pub fn register(registry: &mut Registry) -> Imports {
        let it = Imports {
            calls: Family::default(),
            seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 18))
            }),
            up: Family::default(),
            connects: Family::default(),
        };
        registry.register(
            "import_calls",
            "Requests to an imported upstream, by upstream, protocol, operation (call, read) and outcome (completed, failed, cancelled, and for errors the LMOS error type: unavailable, timeout, bad-gateway, ...)",
            it.calls.clone(),
        );
        registry.register(
            "import_call_duration_seconds",
            "Time from a request to an imported upstream to its end, by upstream and operation",
            it.seconds.clone(),
        );
        registry.register(
            "import_up",
            "Whether an imported upstream answers (1) or not (0), by upstream and protocol",
            it.up.clone(),
        );
        registry.register(
            "import_connects",
            "Connection attempts to an imported upstream, by upstream and result (ok, failed)",
            it.connects.clone(),
        );
        it
    }
}

impl super::Metrics {
    /// One request to an imported upstream ended.
    pub fn import_call(
        &self,
        upstream: &str,
        protocol: &'static str,
        operation: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        let imports = &self.0.imports;
        let labels = vec![
            ("upstream", upstream.to_owned()),
            ("protocol", protocol.to_owned()),
            ("operation", operation.to_owned()),
            ("outcome", outcome.to_owned()),
        ];
        imports.calls.get_or_create(&labels).inc();
        let labels = vec![
            ("upstream", upstream.to_owned()),
            ("operation", operation.to_owned()),
        ];
        imports
            .seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn import_up(&self, upstream: &str, protocol: &'static str, up: bool) {
        let labels = vec![
            ("upstream", upstream.to_owned()),
            ("protocol", protocol.to_owned()),
        ];
        self.0.imports.up.get_or_create(&labels).set(i64::from(up));
    }

    /// `result`: `ok` or `failed`.
    pub fn import_connect(&self, upstream: &str, result: &'static str) {
        let labels = vec![
            ("upstream", upstream.to_owned()),
            ("result", result.to_owned()),
        ];
        self.0.imports.connects.get_or_create(&labels).inc();
    }
}
