//! The one boundary between the bus and an imported agent, whatever it
//! speaks: what it offers (becomes the Thing's TD), a call (an LMOS
//! invocation), a read (a property), and the news it brings (its lists
//! changed, it went away). MCP (`super::mcp`) and A2A (`super::a2a`)
//! implement [`Upstream`]; [`super::bridge`] serves any of them to the
//! gateway as the Thing's agent, so nothing past the bridge knows which.

use std::future::Future;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::telemetry::TraceContext;

/// What an upstream offers: the Thing's affordances.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offer {
    /// The upstream's own name for itself (MCP `serverInfo`, the Agent
    /// Card's `name`): the TD's title.
    pub title: String,
    pub description: Option<String>,
    /// The upstream's version, when it says.
    pub version: Option<String>,
    pub actions: Vec<ActionOffer>,
    pub properties: Vec<PropertyOffer>,
    /// Further top-level TD members (`lmos:…`, no `@context` changes).
    pub extra: Map<String, Value>,
}

/// An MCP tool or an A2A skill: a TD action.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionOffer {
    /// The affordance's name (the tool's name, the skill's `id`).
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// The input's JSON Schema, as a TD DataSchema.
    pub input: Option<Value>,
    pub output: Option<Value>,
    /// TD `safe` (MCP `readOnlyHint`).
    pub safe: bool,
    /// TD `idempotent` (MCP `idempotentHint`).
    pub idempotent: bool,
    /// Further members of the action (`lmos:inputModes`, …).
    pub extra: Map<String, Value>,
}

/// A readable MCP resource: a read-only TD property.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PropertyOffer {
    /// The affordance's name (unique in the TD).
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// The value's DataSchema (e.g. `{"type": "string"}`).
    pub schema: Value,
    /// Further members (`lmos:uri`, `contentMediaType`, …).
    pub extra: Map<String, Value>,
}

/// One action call: an LMOS `invokeAction` on its way upstream.
#[derive(Debug, Clone)]
pub struct Call {
    pub action: String,
    pub input: Option<Value>,
    /// The invocation's route (unique): a progress token or message ID.
    pub id: String,
    /// The consumer asked for a streamed answer (`"stream": true`).
    pub stream: bool,
    /// The trace context to carry upstream (MCP `_meta`, HTTP headers).
    pub trace: Option<TraceContext>,
}

/// What a call reports while it runs; each becomes a `running`
/// `actionStatus`.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// Progress: the status's `output` (MCP progress, an A2A status
    /// update's message).
    Progress(Value),
    /// A chunk of streamed output (an A2A artifact chunk): the status's
    /// `stream` member, numbered by the bridge.
    Chunk {
        data: Value,
        content_type: Option<String>,
        /// `data` is base64 text of binary content.
        base64: bool,
    },
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `completed`, with this `output`.
    Completed(Value),
    /// `failed`: the upstream said so (MCP `isError`, A2A `failed` or
    /// `rejected`); `output` as given, e.g. `{"error": "…"}`.
    Failed(Value),
    /// `cancelled`, after the call's cancellation fired.
    Cancelled,
}

/// The news an upstream brings of itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Its tools, resources or skills changed: read the offer again.
    Lists,
    /// It went away (the connection broke, the child exited): connect again.
    Lost(String),
}

/// Why an upstream could not do what was asked.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum UpstreamError {
    /// It cannot be reached (connection refused, reset, the child exited).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// It did not answer in time (`timeout_ms`).
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// It answered what is no valid JSON-RPC, MCP or A2A.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// Its answer passed `max_message_bytes`.
    #[error("answer larger than {0} bytes (max_message_bytes)")]
    TooLarge(usize),
    /// It answered with an error (a JSON-RPC error, an HTTP status).
    #[error("{message}")]
    Refused {
        /// The LMOS status it maps to (400, 401, 404, 500, …).
        status: u16,
        message: String,
    },
    /// No such action or property.
    #[error("{0} not found")]
    NotFound(String),
}

/// An imported agent. Implementations keep their own connection state and
/// are shared by the bridge's tasks (`&self` everywhere).
pub trait Upstream: Send + Sync + 'static {
    /// `mcp` or `a2a`: the presence's `transport`, the metrics' label.
    fn protocol(&self) -> &'static str;

    /// Where it is, for errors and logs (its URL, or its command).
    fn target(&self) -> &str;

    /// Connects (again, after a loss) and reads what it offers.
    fn connect(&self) -> impl Future<Output = Result<Offer, UpstreamError>> + Send;

    /// Reads the offer again, on the same connection (after
    /// [`Change::Lists`]).
    fn offer(&self) -> impl Future<Output = Result<Offer, UpstreamError>> + Send;

    /// Runs one call until it ends, sending what it reports to `updates`
    /// (dropped when the channel is full: updates are not the answer).
    /// When `cancel` fires, asks the upstream to stop (MCP
    /// `notifications/cancelled`, A2A `CancelTask`) and returns
    /// [`Outcome::Cancelled`] without waiting long.
    fn call(
        &self,
        call: Call,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<Outcome, UpstreamError>> + Send;

    /// Reads a property (an MCP resource) as its TD describes it.
    fn read(
        &self,
        property: &str,
        trace: Option<TraceContext>,
    ) -> impl Future<Output = Result<Value, UpstreamError>> + Send;

    /// Whether it still answers (MCP `ping`, A2A the card).
    fn probe(&self) -> impl Future<Output = Result<(), UpstreamError>> + Send;

    /// The next news of it; pending while there is none.
    fn changed(&self) -> impl Future<Output = Change> + Send;

    /// Lets go of it: closes sessions, stops a child process (at
    /// shutdown, or before connecting again).
    fn close(&self) -> impl Future<Output = ()> + Send;
}
