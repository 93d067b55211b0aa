//! The WebSocket gateway: `lmosprotocol` connections bridged into the bus.
//!
//! One bus connection serves every WebSocket connection. The gateway keeps its
//! own subscription table and asks the bus for one filter per Thing and stream,
//! so a thousand consumers of one event cost the broker one subscriber, and
//! each message is parsed and serialized once however many receive it.
//!
//! Which file holds which part: `docs/architecture.md`, "Where is what".

pub mod agent_link;
pub mod budget;
mod connection;
mod decide;
mod dispatcher;
mod effects;
mod foreign;
mod frame;
pub mod history;
mod http_consumers;
mod inbound;
mod inbox;
pub mod metered;
mod outbound;
mod published;
mod queue;
mod requests;
mod slow;
pub mod subscriptions;

pub(crate) use dispatcher::parse_agent_replies;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::auth::{Access, Principal};
use crate::broker::{Bus, Delivery, Publication};
use crate::config::{GatewayConfig, HistoryConfig, RequestsConfig};
use crate::directory::DirectoryService;
use crate::lmos::splice::set_traceparent;
use crate::lmos::{Message, Problem, ProblemKind};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::{MessageInfo, MessageTracer, Operation, TraceContext};
use crate::topics::Topics;
use connection::Connection;
use dispatcher::Command;
pub use dispatcher::{Activity, Dispatcher, GatewayStats};
use http_consumers::HttpConsumer;
pub use http_consumers::Replies;
pub use requests::{ClaimError, RunningInvocation};
use subscriptions::ConnId;

/// The WebSocket subprotocol this gateway speaks.
pub const SUBPROTOCOL: &str = "lmosprotocol";

/// Commands queued towards the dispatcher before connections wait.
const COMMAND_QUEUE: usize = 1024;

pub(crate) struct Shared {
    bus: Bus,
    topics: Topics,
    config: GatewayConfig,
    /// thingID for errors that concern no Thing.
    thing_id: String,
    tracer: MessageTracer,
    directory: DirectoryService,
    validate_agent_data: bool,
    metrics: Metrics,
    dispatcher: mpsc::Sender<Command>,
    next_id: AtomicU64,
    /// The router connection of each principal using the HTTP binding.
    http_consumers: tokio::sync::Mutex<HashMap<String, HttpConsumer>>,
    /// How each connection's outbound queue is bounded.
    queue_limits: outbound::QueueLimits,
    budgets: budget::Budgets,
    /// What WebSocket messages being received hold (`max_inbound_bytes`).
    inbound: Arc<metered::InboundBudget>,
}

impl Shared {
    /// What a decision about a client's frame may read.
    fn context(&self) -> decide::Context<'_> {
        decide::Context {
            topics: &self.topics,
            max_message_size: self.config.max_message_size,
            validate_agent_data: self.validate_agent_data,
            directory: &self.directory,
            metrics: &self.metrics,
        }
    }

    async fn command(&self, command: Command) {
        // Fails only once the dispatcher has stopped, i.e. during shutdown.
        let _ = self.dispatcher.send(command).await;
    }
}

/// Who is at the other end of a WebSocket connection.
#[derive(Debug, Clone)]
pub struct Client {
    pub conn: ConnId,
    pub addr: SocketAddr,
    pub principal: Principal,
    /// Things this connection serves as their agent (`?host=` at handshake).
    pub hosts: Vec<String>,
}

#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

/// What the gateway is made of.
pub struct GatewaySetup {
    pub bus: Bus,
    pub deliveries: mpsc::Receiver<Delivery>,
    pub topics: Topics,
    pub config: GatewayConfig,
    pub requests: RequestsConfig,
    pub history: HistoryConfig,
    /// thingID for errors that concern no Thing.
    pub thing_id: String,
    pub tracer: MessageTracer,
    /// Registered Thing Descriptions, which requests are checked against.
    pub directory: DirectoryService,
    pub validate_agent_data: bool,
    pub metrics: Metrics,
    /// Per-principal quotas (running invocations, waiting requests,
    /// subscriptions).
    pub quotas: Arc<crate::quotas::Quotas>,
    /// Where the resume history and the invocation records are kept
    /// across a restart.
    pub store: crate::store::Store,
}

impl Gateway {
    /// The gateway and the dispatcher task that must run for it to deliver.
    /// Fails when what the store kept (the resume history, invocation
    /// records) cannot be read: the sidecar does not start silently empty.
    pub fn new(setup: GatewaySetup) -> Result<(Gateway, Dispatcher), crate::store::StoreError> {
        let GatewaySetup {
            bus,
            deliveries,
            topics,
            config,
            requests,
            history,
            thing_id,
            tracer,
            directory,
            validate_agent_data,
            metrics,
            quotas,
            store,
        } = setup;
        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        let budgets = budget::Budgets::new(&metrics, &config, &history);
        let queue_limits = outbound::QueueLimits {
            bounds: slow::Bounds {
                messages: config.outbound_queue,
                bytes: config.outbound_queue_bytes,
                stall_ms: config.outbound_stall_ms,
            },
            policy: config.slow_consumer,
            global: budgets.outbound.clone(),
            bytes_hits: metrics.budget_hit_counter("outbound_per_connection"),
            dropped_oldest: metrics.dropped_counter("slow_consumer_oldest"),
        };
        let inbound = Arc::new(metered::InboundBudget::new(
            budgets.inbound.clone(),
            config.max_message_size,
            metrics.budget_hit_counter("inbound_fragmented"),
        ));
        let router = request_router(&topics, &requests, &metrics, quotas, &store)?;
        let kept_history = kept_history(&store)?;
        let services = dispatcher::Services {
            tracer: tracer.clone(),
            directory: directory.clone(),
            metrics: metrics.clone(),
            limits: dispatcher::Limits {
                max_subscriptions: config.max_subscriptions,
                max_pending_requests: config.max_pending_requests,
            },
            validate_agent_data,
            history: history_limits(&history),
            budgets: budgets.clone(),
            kept_history,
        };
        let dispatcher = Dispatcher::new(
            bus.clone(),
            topics.clone(),
            router,
            services,
            commands_rx,
            deliveries,
        )
        .with_store(store.clone());
        let shared = Arc::new(Shared {
            bus,
            topics,
            config,
            thing_id,
            tracer,
            directory,
            validate_agent_data,
            metrics,
            dispatcher: commands_tx,
            next_id: AtomicU64::new(1),
            http_consumers: Default::default(),
            queue_limits,
            budgets,
            inbound,
        });
        Ok((Gateway { shared }, dispatcher))
    }

    /// The bus filters the gateway needs from the start: consumers'
    /// requests, agents' replies, agents' presence and TDs, for every Thing.
    pub fn bus_filters(topics: &Topics) -> Vec<String> {
        vec![
            topics.all_requests_filter(),
            topics.all_agent_replies_filter(),
            topics.all_agent_status_filter(),
            topics.all_td_filter(),
        ]
    }

    /// A fresh connection ID.
    pub fn next_connection(&self) -> ConnId {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes `conn` the agent of `things`, or refuses if another agent
    /// hosts one of them.
    pub async fn claim(&self, conn: ConnId, things: Vec<String>) -> Result<(), ClaimError> {
        let (reply, answer) = oneshot::channel();
        self.shared
            .command(Command::Claim {
                conn,
                things,
                reply,
            })
            .await;
        answer.await.unwrap_or(Ok(()))
    }

    /// Releases what a connection that never started had claimed.
    /// A consumer's request that came by HTTP: the WebSocket's checks and
    /// router, on the principal's own router connection (see
    /// [`http_consumers`]). The replies carry the request's correlation ID.
    pub async fn http_request(
        &self,
        principal: &Principal,
        message: Message,
    ) -> Result<Replies, Problem> {
        self.request_via(crate::telemetry::metrics::HTTP, principal, message)
            .await
    }

    /// As [`Gateway::http_request`], counted under `transport` (MCP and
    /// A2A callers share the principal's consumer with the HTTP binding,
    /// so `GetTask` or a status `GET` finds what either started).
    pub async fn request_via(
        &self,
        transport: &'static str,
        principal: &Principal,
        message: Message,
    ) -> Result<Replies, Problem> {
        self.admit(transport, principal, &message)?;
        if let Some(problem) = inbound::unfit(&message, &self.shared.topics) {
            return Err(problem);
        }
        self.shared
            .metrics
            .received(transport, message.message_type().as_str());
        let consumer = self.http_consumer(principal).await;
        let replies = consumer.wait_for(message.reply_correlation_id());
        let command = Command::Request {
            conn: consumer.conn,
            message: Box::new(message),
        };
        self.shared.command(command).await;
        Ok(replies)
    }

    /// As [`Gateway::request_via`] for an `observeProperty`, `subscribeEvent`
    /// and their ends: the principal's consumer connection subscribes as a
    /// WebSocket's would (MCP's `resources/subscribe`), and the deliveries
    /// carry the message's correlation ID.
    pub async fn subscribe_via(
        &self,
        transport: &'static str,
        principal: &Principal,
        message: Message,
    ) -> Result<Replies, Problem> {
        self.admit(transport, principal, &message)?;
        let consumer = self.http_consumer(principal).await;
        let route = inbound::route(
            consumer.conn,
            &message,
            bytes::Bytes::new(),
            &self.shared.topics,
        );
        let command = match route {
            inbound::Destination::Dispatcher(command) => command,
            inbound::Destination::Refused(problem) => return Err(problem),
            inbound::Destination::Bus(_) => {
                let detail = "Only subscriptions and observations are subscribed.";
                return Err(Problem::new(ProblemKind::NotSupported, detail));
            }
        };
        self.shared
            .metrics
            .received(transport, message.message_type().as_str());
        let replies = consumer.wait_for(message.reply_correlation_id());
        self.shared.command(command).await;
        Ok(replies)
    }

    /// Whether `principal` may send `message`; a refusal is counted under
    /// `transport`.
    fn admit(
        &self,
        transport: &'static str,
        principal: &Principal,
        message: &Message,
    ) -> Result<(), Problem> {
        authorize(principal, message).map_err(|(access, problem)| {
            self.shared.metrics.denied(transport, access.as_str());
            problem
        })
    }

    async fn http_consumer(&self, principal: &Principal) -> HttpConsumer {
        let mut consumers = self.shared.http_consumers.lock().await;
        if let Some(c) = consumers.get(principal.name()) {
            return c.clone();
        }
        let shared = &self.shared;
        let (outbound, inbox) = outbound::channel(&shared.queue_limits);
        // Drained by the sidecar's own task: nothing slow to close.
        outbound.account().exempt();
        let conn = self.next_connection();
        let principal_name = principal.name().to_owned();
        let register = Command::Register {
            conn,
            outbound,
            principal: principal_name,
        };
        shared.command(register).await;
        let consumer = HttpConsumer::start(conn, inbox);
        consumers.insert(principal.name().to_owned(), consumer.clone());
        consumer
    }

    pub async fn release(&self, conn: ConnId) {
        self.shared.command(Command::Deregister { conn }).await;
    }

    pub async fn stats(&self) -> GatewayStats {
        let (reply, answer) = oneshot::channel();
        self.shared.command(Command::Stats { reply }).await;
        answer.await.unwrap_or_default()
    }

    /// Per-Thing activity, for the console.
    pub async fn activity(&self) -> Activity {
        let (reply, answer) = oneshot::channel();
        self.shared.command(Command::Activity { reply }).await;
        answer.await.unwrap_or_default()
    }

    /// The topic layout, for the console's topic table.
    pub fn topics(&self) -> &Topics {
        &self.shared.topics
    }

    /// The tracer, for the spans of MCP and A2A calls.
    pub fn tracer(&self) -> &MessageTracer {
        &self.shared.tracer
    }

    /// The Things an agent hosts now.
    pub async fn hosted(&self) -> Vec<String> {
        let (reply, answer) = oneshot::channel();
        self.shared.command(Command::Hosted { reply }).await;
        answer.await.unwrap_or_default()
    }

    /// One line per global memory budget reached in the last seconds (see
    /// [`budget`]), for `/readyz`.
    pub fn budget_report(&self) -> Vec<String> {
        self.shared.budgets.report()
    }

    /// A WebSocket connection's transport, counted in `max_inbound_bytes`
    /// and cut when it sends a fragmented message over `max_message_size`
    /// (see [`metered`]). [`Gateway::serve`] takes only these.
    pub fn metered<S>(&self, io: S) -> metered::Metered<S> {
        metered::Metered::new(io, &self.shared.inbound)
    }

    /// tungstenite's own limit sits above `max_message_size` so that a
    /// moderately oversized message gets an LMOS error and the connection
    /// lives on; only far larger ones close it (code 1009).
    pub fn websocket_config(&self) -> WebSocketConfig {
        let hard_limit = self
            .shared
            .config
            .max_message_size
            .saturating_mul(4)
            .max(16 * 1024 * 1024);
        // tungstenite's default read buffer (128 KiB, zero-filled on every
        // read) was nearly all of an idle connection's memory (issue 16).
        WebSocketConfig::default()
            .max_message_size(Some(hard_limit))
            .max_frame_size(Some(hard_limit))
            .read_buffer_size(self.shared.config.read_buffer_size)
    }

    /// Serves one upgraded connection until it closes or `shutdown` fires.
    /// The future is most of what an idle consumer costs: registering the
    /// connection is boxed (freed once done), and what runs after holds the
    /// connection once (an `async fn` would keep its arguments beside it).
    pub fn serve<S>(
        &self,
        client: Client,
        socket: WebSocketStream<metered::Metered<S>>,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + use<S>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let opening = Box::pin(open(self.shared.clone(), client, socket, shutdown));
        async move {
            let (connection, span) = opening.await;
            connection.run().instrument(span).await;
        }
    }
}

/// A connection registered with the dispatcher, and its log span.
async fn open<S>(
    shared: Arc<Shared>,
    client: Client,
    socket: WebSocketStream<metered::Metered<S>>,
    shutdown: CancellationToken,
) -> (Box<Connection<S>>, tracing::Span)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (outbound, inbox) = outbound::channel(&shared.queue_limits);
    let conn = client.conn;
    let register = Command::Register {
        conn,
        outbound: outbound.clone(),
        principal: client.principal.name().to_owned(),
    };
    shared.command(register).await;
    let span = tracing::info_span!(
        "ws",
        conn,
        peer = %client.addr,
        principal = client.principal.name(),
        hosts = ?client.hosts
    );
    let connection = Connection::new(client, socket, (outbound, inbox), shared, shutdown);
    (Box::new(connection), span)
}

/// Whether `principal` may send `message`: the access it needed and the
/// LMOS error when it may not.
pub(crate) fn authorize(principal: &Principal, message: &Message) -> Result<(), (Access, Problem)> {
    let access = Access::to_send(message.message_type());
    if principal.may(access, &message.thing_id) {
        return Ok(());
    }
    let problem = forbidden(
        principal,
        access,
        message.message_type().as_str(),
        &message.thing_id,
    );
    Err((access, problem))
}

/// The 403 for a principal without `access` to `thing`. Answered before
/// the Thing is looked up, so it says nothing of whether the Thing exists.
pub(crate) fn forbidden(
    principal: &Principal,
    access: Access,
    message_type: &str,
    thing: &str,
) -> Problem {
    let detail = format!(
        "`{}` may not send `{message_type}` for `{thing}`: that needs `{access}` access to the Thing, which [auth] does not grant.",
        principal.name(),
    );
    Problem::new(ProblemKind::Forbidden, detail)
}

/// What a span says about a parsed message.
pub(crate) fn message_info(message: &Message) -> MessageInfo<'_> {
    MessageInfo {
        message_type: Some(message.message_type().as_str()),
        thing_id: Some(&message.thing_id),
        affordance: message.affordance(),
        message_id: Some(&message.message_id),
        correlation_id: message.correlation_id.as_deref(),
        recipients: None,
    }
}

/// The trace context a message arrived with.
pub(crate) fn incoming_trace(message: &Message) -> Option<TraceContext> {
    message.traceparent.as_ref().map(|tp| TraceContext {
        traceparent: tp.clone(),
        tracestate: message.tracestate.clone(),
    })
}

/// Records the sidecar publishing an agent's message and makes the copy on
/// the bus carry the new span's context in its JSON.
pub(crate) fn trace_publication(
    tracer: &MessageTracer,
    message: &Message,
    publication: &mut Publication,
) {
    if !tracer.is_on() {
        return;
    }
    let incoming = incoming_trace(message);
    let Some(ctx) = tracer.hop(
        Operation::Publish,
        &publication.topic,
        incoming.as_ref(),
        &message_info(message),
        None,
    ) else {
        return;
    };
    if let Some(text) = set_traceparent(&publication.payload, &ctx.traceparent) {
        publication.payload = text.into();
    }
    if tracer.mqtt5_user_properties() {
        publication.trace = Some(ctx);
    }
}

/// The request router, configured from `[requests]`, with what the store
/// kept of its invocations.
fn request_router(
    topics: &Topics,
    requests: &RequestsConfig,
    metrics: &Metrics,
    quotas: Arc<crate::quotas::Quotas>,
    store: &crate::store::Store,
) -> Result<requests::Requests, crate::store::StoreError> {
    requests::Requests::new(
        topics.clone(),
        requests.timeout(),
        requests.finished_invocations,
    )
    .with_action_liveness(requests.action_liveness())
    .with_liveness_overrides(
        requests
            .action_liveness_overrides
            .iter()
            .map(|(k, ms)| (k.clone(), std::time::Duration::from_millis(*ms)))
            .collect(),
    )
    .with_invocation_limits(
        requests.invocation_retention(),
        requests.max_running_invocations,
    )
    .with_stream_hold_bytes(requests.stream_hold_bytes, requests.stream_hold_total_bytes)
    .with_metrics(metrics.clone())
    .with_quotas(quotas)
    .with_store(store)
}

/// The resume history the store kept, when it keeps one.
fn kept_history(
    store: &crate::store::Store,
) -> Result<Option<(history::HistoryLog, history::Rows)>, crate::store::StoreError> {
    if !store.is_durable() {
        return Ok(None);
    }
    let log = history::HistoryLog::new(store.lazy_table(history::TABLE));
    let rows = log.load()?;
    Ok(Some((log, rows)))
}

fn history_limits(history: &HistoryConfig) -> history::HistoryLimits {
    history::HistoryLimits {
        events_per_thing: history.events_per_thing,
        max_age: history.max_age(),
        max_bytes_per_thing: history.max_bytes_per_thing,
        max_bytes: history.max_bytes,
    }
}
