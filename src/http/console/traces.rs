//! The console's trace view without Jaeger: `GET /console/traces` lists the
//! recent traces the caller may see, `GET /console/traces/{id}` gives one
//! trace's spans for the waterfall (`traces.js`). Both read the recent-span
//! store (`tracing.recent_spans_bytes`).
//!
//! Who sees a trace: a principal in `console.administrators`; else one who
//! may consume every Thing the trace's spans name, and a trace naming no
//! Thing (an MCP `tools/list`, say) only one who may consume every Thing.
//! "Every", not "one": a trace ID is no secret (it rides in every
//! message), so anyone may send messages under another's trace, and a
//! trace shown to whoever may see one of its Things would show them the
//! rest. A trace that is not shown answers 404, as an unknown one: the
//! answer tells no one which traces exist.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::no_store_json;
use crate::auth::{Access, Principal};
use crate::http::auth::Caller;
use crate::http::HttpState;
use crate::telemetry::recent::{StoredSpan, TraceSummary};
use crate::topics::{Route, Topics};

/// The most traces one list answer carries; the search narrows.
const LIST_MAX: usize = 100;

#[derive(Debug, Deserialize)]
pub struct Search {
    /// A trace ID (or its start), or text in a span's name or a Thing.
    #[serde(default)]
    q: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ListAnswer {
    /// Whether the sidecar keeps spans at all (`recent_spans_bytes` > 0).
    kept: bool,
    budget_bytes: usize,
    used_bytes: usize,
    traces: Vec<TraceRow>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TraceRow {
    trace_id: String,
    name: String,
    /// Unix milliseconds of the earliest span's start.
    start_ms: u64,
    duration_us: u64,
    spans: usize,
    errors: usize,
    /// Spans past the per-trace bound, counted but not kept.
    not_kept: usize,
    things: Vec<String>,
}

impl TraceRow {
    fn from(s: &TraceSummary) -> TraceRow {
        TraceRow {
            trace_id: hex(&s.trace_id),
            name: s.name.clone(),
            start_ms: s.start_unix_nanos / 1_000_000,
            duration_us: s.end_unix_nanos.saturating_sub(s.start_unix_nanos) / 1_000,
            spans: s.spans,
            errors: s.errors,
            not_kept: s.not_kept,
            things: s.things.iter().map(|t| t.to_string()).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TraceAnswer {
    #[serde(flatten)]
    trace: TraceRow,
    /// Where each span sits, earliest first.
    span_list: Vec<SpanRow>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SpanRow {
    span_id: String,
    parent_id: Option<String>,
    /// The parent is another process's span (a consumer, an agent).
    parent_remote: bool,
    name: String,
    kind: &'static str,
    /// Who is talking to whom, in words.
    role: String,
    /// From the trace's start.
    offset_us: u64,
    duration_us: u64,
    error: Option<String>,
    attributes: Vec<(&'static str, String)>,
}

/// `GET /console/traces?q=TEXT`: the newest traces the caller may see.
pub async fn list(
    State(state): State<HttpState>,
    caller: Caller,
    Query(search): Query<Search>,
) -> Response {
    let Some(store) = state.gateway.tracer().recent() else {
        return no_store_json(&ListAnswer {
            kept: false,
            budget_bytes: 0,
            used_bytes: 0,
            traces: Vec::new(),
        });
    };
    let q = search.q.trim().to_lowercase();
    let admin = state.console.administers(&caller.principal);
    let traces = store.newest(LIST_MAX, |summary, spans| {
        may_see(&caller.principal, admin, &summary.things) && matches(&q, summary, spans)
    });
    no_store_json(&ListAnswer {
        kept: true,
        budget_bytes: store.budget(),
        used_bytes: store.used(),
        traces: traces.iter().map(TraceRow::from).collect(),
    })
}

/// `GET /console/traces/{id}`: one trace's spans; 404 when it is not
/// kept, or not the caller's to see.
pub async fn one(
    State(state): State<HttpState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return (
            StatusCode::BAD_REQUEST,
            "A trace ID is 32 hexadecimal digits, as in a traceparent.",
        )
            .into_response();
    };
    let admin = state.console.administers(&caller.principal);
    let trace = state
        .gateway
        .tracer()
        .recent()
        .and_then(|store| store.trace(&id))
        .filter(|t| may_see(&caller.principal, admin, &t.summary.things));
    let Some(trace) = trace else {
        return (
            StatusCode::NOT_FOUND,
            "This sidecar keeps no such trace that you may see: it may have been evicted (tracing.recent_spans_bytes), or it passed another sidecar.",
        )
            .into_response();
    };
    let mut spans = trace.spans;
    spans.sort_by_key(|s| s.head.start_unix_nanos);
    let start = trace.summary.start_unix_nanos;
    let topics = state.gateway.topics();
    no_store_json(&TraceAnswer {
        trace: TraceRow::from(&trace.summary),
        span_list: spans.iter().map(|s| span_row(s, start, topics)).collect(),
    })
}

/// Whether `principal` may see a trace naming `things`.
pub fn may_see(principal: &Principal, admin: bool, things: &[Box<str>]) -> bool {
    if admin {
        return true;
    }
    if things.is_empty() {
        return principal.may_all(Access::Consume);
    }
    things.iter().all(|t| principal.may(Access::Consume, t))
}

fn matches(q: &str, summary: &TraceSummary, spans: &[StoredSpan]) -> bool {
    q.is_empty()
        || hex(&summary.trace_id).starts_with(q)
        || summary.things.iter().any(|t| t.to_lowercase().contains(q))
        || spans.iter().any(|s| s.name().to_lowercase().contains(q))
}

fn span_row(s: &StoredSpan, trace_start: u64, topics: &Topics) -> SpanRow {
    SpanRow {
        span_id: hex(&s.head.span_id),
        parent_id: s.head.parent_id.as_ref().map(|p| hex(p)),
        parent_remote: s.head.parent_remote,
        name: s.name().to_owned(),
        kind: kind_name(s.head.kind),
        role: role(s, topics),
        offset_us: s.head.start_unix_nanos.saturating_sub(trace_start) / 1_000,
        duration_us: s
            .head
            .end_unix_nanos
            .saturating_sub(s.head.start_unix_nanos)
            / 1_000,
        error: s.error.as_deref().map(str::to_owned),
        attributes: s.attributes().map(|(k, v)| (k, v.to_owned())).collect(),
    }
}

/// OTLP's `SpanKind` numbers.
fn kind_name(kind: u8) -> &'static str {
    match kind {
        2 => "server",
        3 => "client",
        4 => "producer",
        5 => "consumer",
        _ => "internal",
    }
}

/// Who talks to whom in a span, read from its attributes and topic.
pub fn role(s: &StoredSpan, topics: &Topics) -> String {
    if s.attribute("mcp.method.name").is_some() {
        return match s.head.kind {
            3 => "the sidecar calls an imported MCP server".into(),
            _ => "an MCP client calls the sidecar".into(),
        };
    }
    if s.attribute("rpc.system").is_some() {
        return "an A2A client calls the sidecar".into();
    }
    let operation = s.attribute("messaging.operation.name").unwrap_or_default();
    if let Some(n) = s.attribute("lmos.recipients") {
        let noun = if n == "1" { "consumer" } else { "consumers" };
        return format!("the sidecar hands it to {n} WebSocket {noun}");
    }
    let route = s
        .attribute("messaging.destination.name")
        .and_then(|d| topics.parse(d));
    match (operation, route) {
        ("publish", Some(Route::AgentRequest { thing, .. })) => {
            format!("a consumer's request, sent to the agent of {thing}")
        }
        ("process", Some(Route::AgentRequest { thing, .. })) => {
            format!("an MQTT consumer's request, handed to the agent of {thing}")
        }
        ("process", Some(Route::AgentReplies { thing })) => {
            format!("the agent of {thing} answers")
        }
        (
            "publish",
            Some(
                Route::Event { thing, .. }
                | Route::Property { thing, .. }
                | Route::ActionStatus { thing, .. },
            ),
        ) => format!("the agent of {thing} publishes on the bus"),
        (op, _) => format!("{op} {}", s.name()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 hexadecimal digits, either case, not all zeros.
fn parse_id(text: &str) -> Option<[u8; 16]> {
    let text = text.trim();
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let digits = std::str::from_utf8(pair).ok()?;
        id[i] = u8::from_str_radix(digits, 16).ok()?;
    }
    (id != [0; 16]).then_some(id)
}

#[cfg(test)]
#[path = "traces_tests.rs"]
mod tests;
