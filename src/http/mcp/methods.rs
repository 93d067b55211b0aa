//! The MCP methods, one `match` for both revisions: a method's arm answers
//! it whichever revision the request came in (the stateless revision's
//! envelope, `resultType` and cache hints, is added around the answer by
//! `Ctx::reply`).

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{call, completion, logging, observe, resources, tools_for, Ctx};
use crate::http::jsonrpc;
use crate::http::rpc_io::{self, accepts_sse};

pub async fn dispatch(
    ctx: Ctx,
    headers: &HeaderMap,
    id: Value,
    method: &str,
    params: Value,
) -> Response {
    let answer = match method {
        "ping" => jsonrpc::result(&id, json!({})),
        "tools/list" => {
            let tools: Vec<Value> = tools_for(&ctx.state, &ctx.principal)
                .await
                .into_iter()
                .map(|t| t.descriptor)
                .collect();
            jsonrpc::result(&id, json!({"tools": tools}))
        }
        "tools/call" => return tools_call(ctx, headers, id, params).await,
        "resources/list" => resources::list(&ctx.state, &ctx.principal, &id).await,
        "resources/templates/list" => resources::templates(&ctx.state, &ctx.principal, &id).await,
        "resources/read" => resources::read(&ctx, &id, &params).await,
        "resources/subscribe" => observe::subscribe(&ctx, &id, &params).await,
        "resources/unsubscribe" => observe::unsubscribe(&ctx, &id, &params),
        "completion/complete" => {
            completion::complete(&ctx.state, &ctx.principal, &id, &params).await
        }
        "logging/setLevel" => match (logging::requested(&id, &params), &ctx.session) {
            (Ok(level), Some(session)) => {
                ctx.sessions().set_log_level(session, level);
                jsonrpc::result(&id, json!({}))
            }
            (Ok(_), None) => jsonrpc::error(
                &id,
                jsonrpc::METHOD_NOT_FOUND,
                "Method not found: `logging/setLevel`",
                None,
            ),
            (Err(refused), _) => refused,
        },
        other => {
            let text = format!("Method not found: `{other}`");
            jsonrpc::error(&id, jsonrpc::METHOD_NOT_FOUND, &text, None)
        }
    };
    ctx.reply(method, answer)
}

async fn tools_call(ctx: Ctx, headers: &HeaderMap, id: Value, params: Value) -> Response {
    let name = params["name"].as_str().unwrap_or_default();
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    if !arguments.is_object() {
        let answer = jsonrpc::error(
            &id,
            jsonrpc::INVALID_PARAMS,
            "`arguments` must be an object",
            None,
        );
        return ctx.reply("tools/call", answer);
    }
    // Unknown and not permitted read alike: the caller learns nothing of
    // tools it may not use.
    let Some(tool) = tools_for(&ctx.state, &ctx.principal)
        .await
        .into_iter()
        .find(|t| t.name == name)
    else {
        if let Some(step_up) = step_up(&ctx.state, &ctx.principal, name).await {
            return step_up;
        }
        let text = format!("Unknown tool: `{name}`");
        let answer = jsonrpc::error(&id, jsonrpc::INVALID_PARAMS, &text, None);
        return ctx.reply("tools/call", answer);
    };
    let token = params["_meta"].get("progressToken").cloned();
    let log = ctx.log_level;
    // Progress and log notifications need the call's own SSE stream; a
    // stateless call is always streamed when the client takes a stream:
    // closing it is how that revision cancels.
    let stateless = ctx.stateless();
    if !accepts_sse(headers) || (token.is_none() && log.is_none() && !stateless) {
        let result = call::traced(ctx, &id, &tool, &arguments, None).await;
        return match result {
            Some(r) => rpc_io::json(StatusCode::OK, &answer(stateless, &id, r)),
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    let (sse, response) = rpc_io::sse(&ctx.state.mcp.streams);
    tokio::spawn(async move {
        let progress = call::Progress {
            sse: sse.clone(),
            token,
            log,
        };
        if let Some(r) = call::traced(ctx, &id, &tool, &arguments, Some(progress)).await {
            sse.send(&answer(stateless, &id, r));
        }
    });
    response
}

/// A call's result as its revision shapes it.
fn answer(stateless: bool, id: &Value, mut result: Value) -> Value {
    if stateless {
        super::headers::shape("tools/call", &mut result);
    }
    jsonrpc::result(id, result)
}

/// Step-up (MCP authorization): a JWT caller refused a tool that some
/// `auth.jwt.grants` scope would allow gets 403 insufficient_scope
/// naming it, so its client can ask the provider for that scope.
async fn step_up(
    state: &crate::http::HttpState,
    principal: &crate::auth::Principal,
    tool: &str,
) -> Option<Response> {
    let oauth = state.oauth.as_deref()?;
    principal.token()?;
    for scope in &oauth.grant_scopes {
        let may = |access, thing: &str| oauth.scope_grants(scope, principal.name(), access, thing);
        if super::tools_where(state, &may)
            .await
            .iter()
            .any(|t| t.name == tool)
        {
            return oauth.step_up(principal, |s| s == scope);
        }
    }
    None
}
