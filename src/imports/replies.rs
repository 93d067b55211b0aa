//! What the bridge answers, as LMOS messages: no I/O. Every reply carries
//! the request's route as its `correlationID`, as any agent's does, so the
//! router hands it to the one consumer that asked.

use serde_json::{json, Value};

use super::upstream::UpstreamError;
use crate::lmos::{Body, Message, Problem, ProblemKind};
use crate::telemetry::TraceContext;

/// Who answers: the imported Thing, named for errors.
#[derive(Debug, Clone)]
pub struct Speaker {
    pub thing: String,
    /// The configured name (`[[imports.*]] name`).
    pub name: String,
    /// `mcp` or `a2a`.
    pub protocol: &'static str,
    /// Its URL or command, for errors.
    pub target: String,
}

/// One request being answered: its route and the trace it continues.
#[derive(Debug, Clone)]
pub struct Answering {
    pub route: String,
    pub trace: Option<TraceContext>,
}

impl Speaker {
    /// An `actionStatus` with `status`, its `output` and stream member.
    pub fn status(
        &self,
        to: &Answering,
        action: &str,
        status: &str,
        output: Option<Value>,
        stream: Option<Value>,
    ) -> String {
        let body = Body::ActionStatus {
            action: action.to_owned(),
            status: status.to_owned(),
            output,
        };
        let mut message = self.message(to, body);
        if let Some(stream) = stream {
            message.extra.insert("stream".into(), stream);
        }
        message.to_json()
    }

    pub fn reading(&self, to: &Answering, name: &str, value: Value) -> String {
        let body = Body::PropertyReading {
            name: name.to_owned(),
            value,
            timestamp: now(),
        };
        self.message(to, body).to_json()
    }

    /// An LMOS `error` answering the request.
    pub fn error(&self, to: &Answering, problem: Problem) -> String {
        let mut message = problem.to_message(&self.thing, Some(&to.route));
        set_trace(&mut message, to.trace.as_ref());
        message.to_json()
    }

    /// What an upstream's failure means to the consumer, naming the upstream.
    pub fn problem(&self, error: &UpstreamError) -> Problem {
        let kind = match error {
            UpstreamError::Unreachable(_) => ProblemKind::Unavailable,
            UpstreamError::Timeout(_) => ProblemKind::Timeout,
            UpstreamError::NotFound(_) => ProblemKind::NotFound,
            UpstreamError::Refused { status: 404, .. } => ProblemKind::NotFound,
            UpstreamError::Refused { status: 400, .. } => ProblemKind::InvalidData,
            UpstreamError::Refused { status: 429, .. } => ProblemKind::TooManyRequests,
            UpstreamError::Refused { status: 503, .. } => ProblemKind::Unavailable,
            UpstreamError::Malformed(_)
            | UpstreamError::TooLarge(_)
            | UpstreamError::Refused { .. } => ProblemKind::BadGateway,
        };
        let detail = match error {
            UpstreamError::Timeout(ms) => format!(
                "{} said nothing within {ms} ms (its timeout_ms).",
                self.who()
            ),
            other => format!("{}: {other}.", self.who()),
        };
        Problem::new(kind, detail)
    }

    /// The 503 while the upstream is down, with the last error seen.
    pub fn down(&self, last_error: &str) -> Problem {
        let detail = format!("{} is unreachable: {last_error}.", self.who());
        Problem::new(ProblemKind::Unavailable, detail)
    }

    /// The imported upstream, as errors name it.
    pub fn who(&self) -> String {
        format!(
            "The imported {} upstream `{}` ({})",
            self.protocol.to_uppercase(),
            self.name,
            self.target
        )
    }

    fn message(&self, to: &Answering, body: Body) -> Message {
        let mut message = Message::new(self.thing.clone(), body).with_correlation_id(&to.route);
        set_trace(&mut message, to.trace.as_ref());
        message
    }
}

fn set_trace(message: &mut Message, trace: Option<&TraceContext>) {
    if let Some(t) = trace {
        message.traceparent = Some(t.traceparent.clone());
        message.tracestate = t.tracestate.clone();
    }
}

/// A chunk's `stream` member (`docs/requests.md`, Streams).
pub fn chunk(seq: u64, data: Value, content_type: Option<&str>, base64: bool) -> Value {
    let mut stream = json!({"seq": seq, "data": data});
    if let Some(t) = content_type {
        stream["contentType"] = json!(t);
    }
    if base64 {
        stream["contentEncoding"] = json!("base64");
    }
    stream
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
