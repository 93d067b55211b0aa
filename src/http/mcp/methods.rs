//! The MCP methods, one `match` for both revisions: a method's arm answers
//! it whichever revision the request came in (the stateless revision's
//! envelope, `resultType` and cache hints, is added around the answer by
//! `Ctx::reply`).

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{call, tools_for, Ctx};
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
        other => {
            let text = format!("Method not found: `{other}`");
            jsonrpc::error(&id, jsonrpc::METHOD_NOT_FOUND, &text, None)
        }
    };
    rpc_io::json(StatusCode::OK, &answer)
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
        return rpc_io::json(StatusCode::OK, &answer);
    }
    // Unknown and not permitted read alike: the caller learns nothing of
    // tools it may not use.
    let Some(tool) = tools_for(&ctx.state, &ctx.principal)
        .await
        .into_iter()
        .find(|t| t.name == name)
    else {
        let text = format!("Unknown tool: `{name}`");
        let answer = jsonrpc::error(&id, jsonrpc::INVALID_PARAMS, &text, None);
        return rpc_io::json(StatusCode::OK, &answer);
    };
    let token = params["_meta"].get("progressToken").cloned();
    match token.filter(|_| accepts_sse(headers)) {
        None => {
            let result = call::traced(ctx, &id, &tool, &arguments, None).await;
            match result {
                Some(r) => rpc_io::json(StatusCode::OK, &jsonrpc::result(&id, r)),
                None => StatusCode::ACCEPTED.into_response(),
            }
        }
        Some(token) => {
            let (sse, response) = rpc_io::sse(&ctx.state.mcp.streams);
            tokio::spawn(async move {
                let progress = call::Progress {
                    sse: sse.clone(),
                    token,
                };
                if let Some(r) = call::traced(ctx, &id, &tool, &arguments, Some(progress)).await {
                    sse.send(&jsonrpc::result(&id, r));
                }
            });
            response
        }
    }
}

