//! The live console: `GET /console`, one page compiled into the binary
//! (HTML, CSS and JavaScript under `console/`, no CDN, no build step), and
//! `GET /console/state`, the JSON it polls. Everything else the page does
//! goes through the sidecar's own interfaces with the rights of whoever
//! opened it: the directory for TDs and `/lmos` (`lmosprotocol`) for live
//! events, readings, writes and invocations. So the console can show and
//! do nothing its principal could not do with any other client.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use axum::extract::Query;

use super::auth::Caller;
use super::HttpState;
use crate::auth::Access;
use crate::gateway::RunningInvocation;

mod bus_view;
mod clients;
mod history;
mod monitor;
mod sessions;
mod topics;
mod traces;
pub use clients::Clients;
pub use history::{sample_traffic, History};
pub use monitor::{follow as follow_bus, Monitor, MonitorLimits};

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");
const BUS_SCRIPT: &str = include_str!("console/bus.js");
const TRACES_SCRIPT: &str = include_str!("console/traces.js");

/// The page may load and connect to this sidecar only: no third-party
/// script, style, font or beacon, which is also what makes it work
/// offline. Jaeger links are navigations, which this does not restrict.
/// Media only from `blob:` URLs the page made itself (a voice agent's
/// streamed audio, put together).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; media-src blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// What `/console` needs from the configuration.
#[derive(Debug, Clone, Default)]
pub struct ConsoleSettings {
    pub enabled: bool,
    /// `tracing.jaeger_ui_url`, without a trailing slash; empty: no links.
    pub jaeger_ui_url: String,
    /// The traffic of the last minutes, sampled since the start.
    pub history: History,
    /// WebSocket connections by principal.
    pub clients: Clients,
    /// The broker as the console sees it.
    pub broker: BrokerView,
    /// `console.administrators`: principals who see every MQTT client and
    /// session and may disconnect clients.
    pub administrators: Vec<String>,
}

/// The broker as the console sees it.
#[derive(Clone, Default)]
pub struct BrokerView {
    /// The latest message per topic and the recent messages.
    pub monitor: Monitor,
    /// The console's own bus link, for publishing from the page.
    pub bus: Option<crate::broker::Bus>,
    /// The public MQTT listeners' guard: sessions, disconnects.
    pub guard: Option<crate::broker::guard::Guard>,
}

impl std::fmt::Debug for BrokerView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerView").finish_non_exhaustive()
    }
}

impl ConsoleSettings {
    /// Whether `principal` may administer (`console.administrators`).
    pub fn administers(&self, principal: &crate::auth::Principal) -> bool {
        self.administrators.iter().any(|a| a == principal.name())
    }
}

/// The console's routes, when it is enabled.
pub fn routes(enabled: bool) -> Router<HttpState> {
    if !enabled {
        return Router::new();
    }
    Router::new()
        // Where a person typing the address lands.
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(page))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/console/bus.js", get(bus_script))
        .route("/console/traces.js", get(traces_script))
        .route("/console/traces", get(traces::list))
        .route("/console/traces/{id}", get(traces::one))
        .route("/console/state", get(state))
        .route("/console/topics", get(thing_topics))
        .route("/console/tree", get(bus_view::tree))
        .route("/console/recent", get(bus_view::recent))
        .route("/console/publish", axum::routing::post(bus_view::publish))
        .route("/console/clients", get(sessions::clients))
        .route(
            "/console/disconnect",
            axum::routing::post(sessions::disconnect),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, &str); 4] = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        // The page changes with the binary; a stale script against a new
        // sidecar would be confusing, and the files are small.
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    (StatusCode::OK, headers, body).into_response()
}

/// The page itself; authenticating here makes the browser ask for (and
/// then send) the credentials the page's own requests need.
async fn page(_caller: Caller) -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script(_caller: Caller) -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn bus_script(_caller: Caller) -> Response {
    asset("text/javascript; charset=utf-8", BUS_SCRIPT)
}

async fn traces_script(_caller: Caller) -> Response {
    asset("text/javascript; charset=utf-8", TRACES_SCRIPT)
}

async fn style(_caller: Caller) -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// One Thing as the console lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ThingState {
    id: String,
    title: Option<String>,
    /// Whether the directory holds its TD.
    registered: bool,
    /// How its agent is connected (`websocket`, `mqtt`), if it is.
    agent: Option<&'static str>,
    subscriptions: usize,
    consumers: usize,
    running: Vec<RunningInvocation>,
    /// Whether the caller may write and invoke, so the page can say so
    /// before the sidecar refuses.
    may_operate: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsoleState {
    principal: String,
    jaeger_ui_url: String,
    things: Vec<ThingState>,
    /// Open connections by transport.
    connections: BTreeMap<&'static str, usize>,
    /// The caller's own open WebSocket connections (this page's included).
    own_connections: usize,
    /// Cumulative counters from the metrics: the totals, by kind.
    counters: Counters,
    /// Per-second rates, one point a second, after the `since` asked for.
    history: Vec<history::Point>,
    health: Health,
}

/// What `/readyz` says, and the cluster link, for the page's header.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Health {
    ready: bool,
    /// `/readyz`'s lines (budgets reached, a full directory, the cluster).
    report: Vec<String>,
    /// `None`: no cluster configured.
    cluster: Option<ClusterHealth>,
}

#[derive(Debug, Serialize)]
struct ClusterHealth {
    connected: bool,
    reconnects: u64,
}

async fn health(state: &HttpState) -> Health {
    let (status, report) = super::readiness(state).await;
    Health {
        ready: status == StatusCode::OK,
        report: report.lines().map(str::to_owned).collect(),
        cluster: state.cluster.as_ref().map(|c| ClusterHealth {
            connected: c.connected(),
            reconnects: c.reconnects(),
        }),
    }
}

/// `?since=T`: only the history points after T (Unix ms).
#[derive(Debug, serde::Deserialize)]
struct Since {
    #[serde(default)]
    since: u64,
}

/// The counters the console plots, as `/metrics` has them.
#[derive(Debug, Default, Serialize)]
struct Counters {
    /// transport → message type → count, received and sent together: the
    /// traffic the sidecar handled.
    messages: BTreeMap<String, BTreeMap<String, f64>>,
    /// LMOS errors sent, by kind.
    errors: BTreeMap<String, f64>,
    /// Dropped messages, by reason (slow consumers among them).
    dropped: BTreeMap<String, f64>,
    /// Refusals by authorization, by access.
    denied: BTreeMap<String, f64>,
    /// Trace spans lost, by reason (`export_failed` with no collector):
    /// read from the same exposition as `/metrics`, so the two agree
    /// (issue 47 point 11).
    spans_dropped: BTreeMap<String, f64>,
}

/// `GET /console/state`: the Things the caller may consume, with their
/// agents, subscription counts and running invocations, and the counters.
async fn state(
    State(state): State<HttpState>,
    caller: Caller,
    Query(since): Query<Since>,
) -> Response {
    let principal = &caller.principal;
    let activity = state.gateway.activity().await;
    let stats = state.gateway.stats().await;
    let mut things: BTreeMap<String, ThingState> = BTreeMap::new();
    let visible = |id: &str| principal.may(Access::Consume, id);
    let blank = |id: &str| ThingState {
        id: id.to_owned(),
        title: None,
        registered: false,
        agent: None,
        subscriptions: 0,
        consumers: 0,
        running: Vec::new(),
        may_operate: principal.may(Access::Operate, id),
    };
    {
        let directory = state.directory.directory();
        let (all, _) = directory.list(0, usize::MAX);
        for td in all {
            let Some(id) = td["id"].as_str().filter(|id| visible(id)) else {
                continue;
            };
            let mut thing = blank(id);
            thing.registered = true;
            thing.title = td["title"].as_str().map(str::to_owned);
            things.insert(id.to_owned(), thing);
        }
    }
    // Hosted Things without a TD and Things only subscribed to are listed
    // too: an agent that never registered is what an operator looks for.
    for (id, via) in &activity.hosts {
        if visible(id) {
            things.entry(id.clone()).or_insert_with(|| blank(id)).agent = Some(via);
        }
    }
    for (id, (subscriptions, consumers)) in &activity.subscriptions {
        if visible(id) {
            let thing = things.entry(id.clone()).or_insert_with(|| blank(id));
            thing.subscriptions = *subscriptions;
            thing.consumers = *consumers;
        }
    }
    for invocation in activity.running {
        if let Some(thing) = things.get_mut(&invocation.thing) {
            thing.running.push(invocation);
        }
    }
    let connections = BTreeMap::from([
        (crate::telemetry::metrics::WEBSOCKET, stats.connections),
        (
            crate::telemetry::metrics::MQTT,
            state.mqtt_connections.load(Ordering::Relaxed),
        ),
    ]);
    let body = ConsoleState {
        principal: principal.name().to_owned(),
        jaeger_ui_url: state.console.jaeger_ui_url.clone(),
        things: things.into_values().collect(),
        connections,
        own_connections: state.console.clients.of(principal.name()),
        counters: counters(&state.metrics.render()),
        history: state.console.history.since(since.since),
        health: health(&state).await,
    };
    let json = serde_json::to_string(&body).expect("the console state always serializes");
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        json,
    )
        .into_response()
}

/// `?thing=ID`: whose topics.
#[derive(Debug, serde::Deserialize)]
struct ThingQuery {
    thing: String,
}

/// `GET /console/topics?thing=ID`: every MQTT topic of a Thing the caller
/// may consume (the TD's forms name only some of them). 403 otherwise, as
/// for the Thing's TD; the answer is bounded by the TD's affordances,
/// which the directory's size limit bounds.
async fn thing_topics(
    State(state): State<HttpState>,
    caller: Caller,
    Query(query): Query<ThingQuery>,
) -> Response {
    if let Err(refused) = caller.may(Access::Consume, &query.thing) {
        return refused;
    }
    let rows = {
        let directory = state.directory.directory();
        topics::thing_topics(
            state.gateway.topics(),
            &query.thing,
            directory.get(&query.thing),
        )
    };
    no_store_json(&rows)
}

/// A JSON answer the browser must not cache (it changes with the state).
fn no_store_json(body: &impl Serialize) -> Response {
    let json = serde_json::to_string(body).expect("the console's answers always serialize");
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        json,
    )
        .into_response()
}

/// The counters out of the metrics' text exposition: the registry offers no
/// other way to read its families, and the text is what `/metrics` serves,
/// so the console and a Prometheus scrape can never disagree.
fn counters(exposition: &str) -> Counters {
    let mut c = Counters::default();
    for line in exposition.lines() {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
                .unwrap_or_default()
        };
        match name {
            "lmos_sidecar_messages_received_total" | "lmos_sidecar_messages_sent_total" => {
                *c.messages
                    .entry(label("transport"))
                    .or_default()
                    .entry(label("message_type"))
                    .or_default() += value;
            }
            "lmos_sidecar_errors_total" => *c.errors.entry(label("kind")).or_default() += value,
            "lmos_sidecar_dropped_messages_total" => {
                *c.dropped.entry(label("reason")).or_default() += value;
            }
            "lmos_sidecar_denied_total" => *c.denied.entry(label("access")).or_default() += value,
            "lmos_sidecar_spans_dropped_total" => {
                *c.spans_dropped.entry(label("reason")).or_default() += value;
            }
            _ => {}
        }
    }
    c
}

/// A sample's labels as (name, value) pairs.
type Labels<'a> = Vec<(&'a str, &'a str)>;

/// `name{k="v",...} value`: label values here are fixed identifiers
/// (message types, transports, reasons), never escaped text.
fn sample(line: &str) -> Option<(&str, Labels<'_>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let labels = labels
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k, v.trim_matches('"')))
        .collect();
    Some((name, labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::{Metrics, MQTT, WEBSOCKET};

    #[test]
    fn counters_come_from_the_metrics() {
        let m = Metrics::new();
        m.received(WEBSOCKET, "invokeAction");
        m.sent(WEBSOCKET, "invokeAction");
        m.sent_many(MQTT, "event", 3);
        m.error("forbidden");
        m.dropped("slow_consumer");
        m.denied(WEBSOCKET, "operate");
        let c = counters(&m.render());
        assert_eq!(c.messages["websocket"]["invokeAction"], 2.0);
        assert_eq!(c.messages["mqtt"]["event"], 3.0);
        assert_eq!(c.errors["forbidden"], 1.0);
        assert_eq!(c.dropped["slow_consumer"], 1.0);
        assert_eq!(c.denied["operate"], 1.0);
    }

    #[test]
    fn dropped_spans_are_the_count_metrics_has() {
        let spans = crate::telemetry::metrics::SpanCounters::default();
        for _ in 0..37 {
            spans.dropped(crate::telemetry::metrics::EXPORT_FAILED);
        }
        let exposition = Metrics::with_spans(&spans).render();
        assert!(
            exposition.contains(r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} 37"#)
        );
        let c = counters(&exposition);
        assert_eq!(c.spans_dropped["export_failed"], 37.0);
    }

    #[test]
    fn the_assets_are_self_contained() {
        // No URL with a host: nothing is fetched from anywhere but here
        // (the SVG namespace is a name, never fetched).
        for asset in [PAGE, SCRIPT, STYLE, BUS_SCRIPT, TRACES_SCRIPT] {
            let asset = asset.replace("http://www.w3.org/2000/svg", "");
            for scheme in ["http://", "https://", "//cdn", "@import"] {
                assert!(!asset.contains(scheme), "{scheme} in an asset");
            }
        }
    }
}
