//! The console's traffic history, kept in the sidecar: a page opened now
//! shows the last five minutes, not "none so far". Once a second the
//! counters the console plots become one point of per-second rates; the
//! newest [`POINTS`] are kept. Bounded: a point holds only non-zero rates,
//! and its keys are the metrics' label values (transports, message types,
//! three kinds of problem), a fixed set the code names, never client text.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Counters;
use crate::telemetry::metrics::Metrics;

/// Five minutes at one point a second.
pub const POINTS: usize = 300;
pub const STEP: Duration = Duration::from_secs(1);

/// One second of traffic: messages per second by transport and by message
/// type, and errors, drops and denials per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Unix time in milliseconds.
    pub t: u64,
    pub transport: BTreeMap<String, f64>,
    #[serde(rename = "type")]
    pub message_type: BTreeMap<String, f64>,
    pub problems: BTreeMap<&'static str, f64>,
}

/// The cumulative totals a point is the difference of.
#[derive(Debug, Clone, Default)]
struct Totals {
    t: u64,
    transport: BTreeMap<String, f64>,
    message_type: BTreeMap<String, f64>,
    problems: BTreeMap<&'static str, f64>,
}

impl Totals {
    fn of(counters: &Counters, t: u64) -> Totals {
        let sum = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
        let mut totals = Totals {
            t,
            ..Totals::default()
        };
        for (transport, types) in &counters.messages {
            totals.transport.insert(transport.clone(), sum(types));
            for (message_type, n) in types {
                *totals.message_type.entry(message_type.clone()).or_default() += n;
            }
        }
        totals.problems = BTreeMap::from([
            ("errors", sum(&counters.errors)),
            ("dropped", sum(&counters.dropped)),
            ("denied", sum(&counters.denied)),
        ]);
        totals
    }
}

#[derive(Debug, Default)]
struct Inner {
    points: VecDeque<Point>,
    previous: Option<Totals>,
}

/// Shared between the sampler and `/console/state`.
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Inner>>);

/// Per-second rates from `before` to `now`, the zeros left out.
fn rates<K: Ord + Clone>(
    now: &BTreeMap<K, f64>,
    before: &BTreeMap<K, f64>,
    seconds: f64,
) -> BTreeMap<K, f64> {
    now.iter()
        .filter_map(|(k, n)| {
            // Counters only grow; a smaller value (a reset) is no traffic.
            let rate = (n - before.get(k).copied().unwrap_or(0.0)).max(0.0) / seconds;
            (rate > 0.0).then(|| (k.clone(), rate))
        })
        .collect()
}

impl History {
    /// Adds the point from the previous totals to these (at `t`, Unix ms).
    pub(super) fn record(&self, counters: &Counters, t: u64) {
        let now = Totals::of(counters, t);
        let mut inner = self.0.lock().expect("the history lock is never poisoned");
        if let Some(before) = inner.previous.take() {
            let seconds = (now.t.saturating_sub(before.t) as f64 / 1000.0).max(0.001);
            let point = Point {
                t,
                transport: rates(&now.transport, &before.transport, seconds),
                message_type: rates(&now.message_type, &before.message_type, seconds),
                problems: rates(&now.problems, &before.problems, seconds),
            };
            if inner.points.len() == POINTS {
                inner.points.pop_front();
            }
            inner.points.push_back(point);
        }
        inner.previous = Some(now);
    }

    /// The points after `t` (Unix ms), oldest first: a page asks for what
    /// it has not seen yet.
    pub fn since(&self, t: u64) -> Vec<Point> {
        let inner = self.0.lock().expect("the history lock is never poisoned");
        inner.points.iter().filter(|p| p.t > t).cloned().collect()
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Samples the metrics every [`STEP`] until `stop`.
pub async fn sample_traffic(history: History, metrics: Metrics, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(STEP);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => history.record(&super::counters(&metrics.render()), now_ms()),
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(websocket_events: f64, errors: f64) -> Counters {
        let mut c = Counters::default();
        c.messages
            .entry("websocket".into())
            .or_default()
            .insert("event".into(), websocket_events);
        c.errors.insert("forbidden".into(), errors);
        c
    }

    #[test]
    fn points_are_rates_between_samples() {
        let h = History::default();
        h.record(&counters(10.0, 0.0), 1_000);
        assert!(h.since(0).is_empty(), "one sample is no rate yet");
        h.record(&counters(30.0, 1.0), 3_000);
        let points = h.since(0);
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].transport["websocket"], 10.0);
        assert_eq!(points[0].message_type["event"], 10.0);
        assert_eq!(points[0].problems["errors"], 0.5);
        assert!(!points[0].problems.contains_key("denied"), "zeros left out");
        assert!(h.since(3_000).is_empty());
    }

    #[test]
    fn the_history_is_bounded() {
        let h = History::default();
        for i in 0..(POINTS as u64 + 50) {
            h.record(&counters(i as f64, 0.0), i * 1_000);
        }
        let points = h.since(0);
        assert_eq!(points.len(), POINTS);
        assert_eq!(points.last().unwrap().t, (POINTS as u64 + 49) * 1_000);
    }
}
