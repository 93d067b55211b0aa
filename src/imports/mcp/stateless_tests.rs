//! The client against the Python fixture serving one era of the protocol
//! only (`mcp_server.py http --revision …`): 2026-07-28 alone (stateless:
//! `server/discover`, the envelope, `subscriptions/listen`, a cancel by
//! closing the stream), and 2025-11-25 alone (the probe refused, the
//! handshake as before). The dual-era server is in `fixture_tests`.

use serde_json::json;

use super::fixture_tests::{
    bounded, bounds, config, exercise, fixture, outcome, serve, Server, WAIT,
};
use super::McpUpstream;
use crate::config::ImportConfig;
use crate::imports::upstream::{Change, Outcome, Upstream, UpstreamError};

async fn python_only(revision: &str) -> Server {
    let args = [
        fixture("mcp_server.py"),
        "http".into(),
        "--revision".into(),
        revision.into(),
    ];
    serve("python3", &args).await
}

fn at(server: &Server) -> ImportConfig {
    ImportConfig {
        url: Some(server.url.clone()),
        ..config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_2026_07_28_alone_is_spoken_to_statelessly() {
    let server = python_only("2026-07-28").await;
    let up = McpUpstream::new(&at(&server)).unwrap();
    // The offer, add, echo, fail, whoami's traceparent, the resource, the
    // probe, count's progress, its cancel, a tool added heard of on the
    // listen stream.
    exercise(&up).await;
    assert_eq!(up.protocol_version().as_deref(), Some("2026-07-28"));
    // An argument annotated `x-mcp-header` goes in its header too (the
    // server refuses the call with -32020 without it).
    for region in ["eu-west", "Zürich "] {
        assert_eq!(
            outcome(&up, "locate", json!({"region": region})).await,
            Outcome::Completed(json!(format!("in {region}")))
        );
    }

    // Reconnecting starts over, statelessly again; its news still comes.
    up.connect().await.unwrap();
    assert_eq!(up.protocol_version().as_deref(), Some("2026-07-28"));
    let added = outcome(&up, "add_tool", json!({"name": "yon"})).await;
    assert_eq!(added, Outcome::Completed(json!("added yon")));
    let change = tokio::time::timeout(WAIT, up.changed()).await;
    assert_eq!(change.expect("no list change heard"), Change::Lists);
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_2025_11_25_alone_gets_the_handshake() {
    let server = python_only("2025-11-25").await;
    let up = McpUpstream::new(&at(&server)).unwrap();
    exercise(&up).await;
    assert_eq!(up.protocol_version().as_deref(), Some("2025-11-25"));
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_over_stateless_http() {
    let server = python_only("2026-07-28").await;
    bounds(bounded(at(&server))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_that_went_away_is_unreachable() {
    let server = python_only("2026-07-28").await;
    let up = McpUpstream::new(&at(&server)).unwrap();
    tokio::time::timeout(WAIT, up.connect())
        .await
        .unwrap()
        .unwrap();
    drop(server);
    // The listen stream breaks and cannot be opened again: the loss is news.
    let change = tokio::time::timeout(WAIT, up.changed()).await.unwrap();
    assert!(matches!(change, Change::Lost(_)), "{change:?}");
    assert!(matches!(
        up.probe().await,
        Err(UpstreamError::Unreachable(_))
    ));
}
