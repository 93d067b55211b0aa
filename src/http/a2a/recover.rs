//! A task the face forgot (its store is memory only: after a restart, or
//! past `a2a.task_ttl_ms`) read back from the router's invocation records,
//! which the sidecar's store keeps across restarts: a task's first
//! invocation has the task's id as its correlation ID, so `queryAction`
//! with that ID finds it, for the principal that started it only. What
//! comes back is the task's state and output, not its history or context
//! (those lived in the face).

use std::time::Duration;

use serde_json::{json, Value};

use super::rpc::Call;
use super::tasks;
use crate::lmos::{Body as Lmos, Message};
use crate::telemetry::metrics;

/// At most this many of the agent's actions are asked (an agent has a few;
/// a TD with hundreds does not make one `GetTask` hundreds of queries).
const MAX_ACTIONS: usize = 16;

/// How long one `queryAction` may take: the router answers it from its
/// records without the agent.
const QUERY_WAIT: Duration = Duration::from_secs(5);

/// The task `id` as the invocation records have it, if the caller started it.
pub(super) async fn recovered(call: &Call, id: &str) -> Option<Value> {
    // Only ids the face makes: anything else cannot be an invocation of ours.
    uuid::Uuid::parse_str(id).ok()?;
    let td = super::agent_td(&call.state, &call.principal, &call.thing)?;
    let actions: Vec<String> = td["actions"]
        .as_object()?
        .keys()
        .take(MAX_ACTIONS)
        .cloned()
        .collect();
    for action in actions {
        if let Some(reply) = query(call, id, &action).await {
            let mut task = json!({"id": id, "contextId": id,
                "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": tasks::now()}});
            tasks::apply(&mut task, &reply, &action);
            return Some(task);
        }
    }
    None
}

/// The latest status of invocation `id` of `action`, if the router has it.
async fn query(call: &Call, id: &str, action: &str) -> Option<Value> {
    let body = Lmos::QueryAction {
        action: action.to_owned(),
    };
    let mut m = Message::new(call.thing.clone(), body);
    m.correlation_id = Some(id.to_owned());
    m.traceparent = call.traceparent.clone();
    m.tracestate = call.tracestate.clone();
    let gateway = &call.state.gateway;
    let mut replies = gateway
        .request_via(metrics::A2A, &call.principal, m)
        .await
        .ok()?;
    let reply = tokio::time::timeout(QUERY_WAIT, replies.next())
        .await
        .ok()??;
    (reply["messageType"] != "error" && reply["status"].is_string()).then_some(reply)
}
