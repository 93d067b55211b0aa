//! MCP revision 2026-07-28 (stateless) on `/mcp`, beside 2025-11-25: the
//! official Python SDK's default lands on it (and the TypeScript SDK's on
//! the handshake, tests/interop/mcp.rs), and raw HTTP shows the error
//! shapes the specification gives, the 405s, `server/discover` without a
//! session, and `subscriptions/listen` news, for the caller's rights only.

use std::net::SocketAddr;

use lmos_testkit::weather_agent::{THING_DESCRIPTION, THING_ID};
use lmos_testkit::{self as common, ws_request, WsClient};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::mcp::{
    agent_reports_cancelled, basic, mcp_url, python, with_principals, with_weather_agent,
};

const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

type Headers = Vec<(String, String)>;

/// A stateless request as a client sends it: headers mirror the body.
fn request(id: u64, method: &str, mut params: Value) -> (Headers, Value) {
    params["_meta"] = meta();
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    if let Some(name) = params["name"].as_str() {
        headers.push(("Mcp-Name".to_owned(), name.to_owned()));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    (headers, body)
}

async fn post(
    addr: SocketAddr,
    headers: &[(String, String)],
    body: &Value,
) -> common::HttpResponse {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    common::http_with(addr, "POST", "/mcp", &all, body.to_string().as_bytes()).await
}

#[tokio::test]
async fn the_python_sdk_cancels_a_stateless_call_by_closing_its_stream() {
    let (sidecar, _agent) = with_weather_agent().await;
    let mut statuses = sidecar.mqtt("mcp-stateless-watcher").await;
    statuses
        .subscribe(&format!("lmos/{THING_ID}/actions/getWeather/status/+"))
        .await;
    let report = python("cancel", &mcp_url(&sidecar)).report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(report["protocolVersion"], MODERN, "{report:#}");
    assert_eq!(report["cancelled"], true, "{report:#}");
    // The closed stream reached the agent as cancelAction.
    agent_reports_cancelled(&mut statuses).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn stateless_requests_get_the_errors_the_specification_gives() {
    let (sidecar, _agent) = with_weather_agent().await;
    let addr = sidecar.http;
    // Discovery needs no session.
    let (h, b) = request(1, "server/discover", json!({}));
    let found = post(addr, &h, &b).await;
    let result = &found.json()["result"];
    assert_eq!(found.status, 200, "{}", found.body);
    assert_eq!(result["supportedVersions"][0], MODERN);
    assert!(result["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2025-11-25")));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "lmos-sidecar"
    );
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["ttlMs"].is_u64() && result["cacheScope"] == "public",
        "{result}"
    );
    assert!(found.header("mcp-session-id").is_none());
    // Lists carry cache hints; private, since they follow the caller's rights.
    let (h, b) = request(2, "tools/list", json!({}));
    let listed = post(addr, &h, &b).await.json();
    assert_eq!(listed["result"]["cacheScope"], "private", "{listed}");
    assert!(listed["result"]["ttlMs"].is_u64(), "{listed}");
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(3));

    let cases: Vec<(&str, Headers, Value, u16, i64)> = vec![
        {
            let (h, mut b) = request(101, "server/discover", json!({}));
            b["params"] = json!({});
            ("no _meta", h, b, 400, -32602)
        },
        {
            let (mut h, b) = request(102, "server/discover", json!({}));
            h[0].1 = "2025-11-25".into();
            ("version header against _meta", h, b, 400, -32020)
        },
        {
            let (mut h, b) = request(103, "tools/list", json!({}));
            h[1].1 = "prompts/list".into();
            ("Mcp-Method against method", h, b, 400, -32020)
        },
        {
            let (mut h, b) = request(
                104,
                "tools/call",
                json!({"name": "getWeather", "arguments": {}}),
            );
            h[2].1 = "wrong_tool".into();
            ("Mcp-Name against name", h, b, 400, -32020)
        },
        {
            let (mut h, b) = request(
                105,
                "tools/call",
                json!({"name": "getWeather", "arguments": {}}),
            );
            h.pop();
            ("no Mcp-Name", h, b, 400, -32020)
        },
        {
            let (h, b) = request(106, "unknown/method", json!({}));
            ("unknown method", h, b, 404, -32601)
        },
        {
            let (h, b) = request(107, "ping", json!({}));
            ("ping, removed", h, b, 404, -32601)
        },
        {
            let (h, b) = request(108, "initialize", json!({}));
            ("initialize with _meta", h, b, 404, -32601)
        },
    ];
    for (what, h, b, status, code) in cases {
        let answer = post(addr, &h, &b).await;
        let body = answer.json();
        assert_eq!(
            (answer.status, &body["error"]["code"]),
            (status, &json!(code)),
            "{what}: {body}"
        );
        assert_eq!(
            body["id"], b["id"],
            "{what}: the error answers the request's id"
        );
    }
    // An unknown version names what is served and what was asked.
    let (mut h, mut b) = request(109, "server/discover", json!({}));
    h[0].1 = "v999.0.0".into();
    b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let refused = post(addr, &h, &b).await;
    let error = &refused.json()["error"];
    assert_eq!(
        (refused.status, &error["code"]),
        (400, &json!(-32022)),
        "{error}"
    );
    assert_eq!(error["data"]["requested"], "v999.0.0");
    assert_eq!(error["data"]["supported"], result["supportedVersions"]);
    assert_eq!(refused.json()["id"], 109);

    // No GET stream and no sessions at this revision.
    let version = [
        ("MCP-Protocol-Version", MODERN),
        ("Accept", "text/event-stream"),
    ];
    for method in ["GET", "DELETE"] {
        let answer = common::http_with(addr, method, "/mcp", &version, b"").await;
        assert_eq!(answer.status, 405, "{method}: {}", answer.body);
    }
    // The handshake revisions are as before: no session, no answer, but
    // the error names the request's id now.
    let old = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let answer = post(addr, &[], &old).await;
    assert_eq!(
        (answer.status, answer.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
    assert_eq!(answer.json()["id"], 7);
    sidecar.stop().await;
}

/// An SSE answer read as it comes (raw HTTP/1.1, one event per chunk).
struct Events {
    stream: TcpStream,
    text: String,
    seen: usize,
}

impl Events {
    async fn open(addr: SocketAddr, auth: &str, id: u64, filter: Value) -> Events {
        let (headers, body) = request(id, "subscriptions/listen", json!({"notifications": filter}));
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !auth.is_empty() {
            head.push_str(&format!("Authorization: {auth}\r\n"));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("{head}\r\n{body}").as_bytes())
            .await
            .unwrap();
        Events {
            stream,
            text: String::new(),
            seen: 0,
        }
    }

    /// The JSON of every `data:` line so far.
    fn parsed(&self) -> Vec<Value> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }

    /// The next event.
    async fn next(&mut self) -> Value {
        loop {
            if let Some(v) = self.parsed().get(self.seen).cloned() {
                self.seen += 1;
                return v;
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(common::WAIT, self.stream.read(&mut buf))
                .await
                .expect("an event in time")
                .unwrap();
            assert!(n > 0, "the stream ended: {}", self.text);
            self.text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    /// Everything up to the stream's end.
    async fn rest(mut self) -> Vec<Value> {
        let _ =
            tokio::time::timeout(common::WAIT, self.stream.read_to_string(&mut self.text)).await;
        self.parsed().split_off(self.seen)
    }
}

#[tokio::test]
async fn listen_streams_tell_of_agents_coming_and_going_to_those_who_may_see_them() {
    let (sidecar, agent) = with_principals().await;
    let addr = sidecar.http;
    let mut operator = Events::open(
        addr,
        &basic("operator"),
        11,
        json!({"toolsListChanged": true}),
    )
    .await;
    let mut stranger = Events::open(
        addr,
        &basic("stranger"),
        12,
        json!({"toolsListChanged": true, "promptsListChanged": true}),
    )
    .await;
    for (events, id) in [(&mut operator, 11), (&mut stranger, 12)] {
        let ack = events.next().await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            id
        );
        // Only what is honoured: there are no prompts.
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true})
        );
    }
    drop(agent);
    let gone = operator.next().await;
    assert_eq!(gone["method"], "notifications/tools/list_changed", "{gone}");
    assert_eq!(
        gone["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        11
    );
    // The agent comes back.
    let url = format!("{}?host={}", sidecar.ws_url(), common::urlencode(THING_ID));
    let mut upgrade = ws_request(&url, Some("lmosprotocol"));
    upgrade
        .headers_mut()
        .insert("Authorization", basic("agent").parse().unwrap());
    let mut agent = WsClient::connect_request(upgrade).await.unwrap();
    agent
        .send(serde_json::from_str(THING_DESCRIPTION).unwrap())
        .await;
    let back = operator.next().await;
    assert_eq!(back["method"], "notifications/tools/list_changed", "{back}");
    // The stranger sees no tools, and heard nothing of the Thing; when the
    // sidecar stops, its stream ends with the graceful-close result.
    let (h, b) = request(3, "tools/list", json!({}));
    let mut h = h;
    h.push(("Authorization".into(), basic("stranger")));
    assert_eq!(
        post(addr, &h, &b).await.json()["result"]["tools"],
        json!([])
    );
    sidecar.stop().await;
    let rest = stranger.rest().await;
    assert!(
        rest.iter()
            .all(|e| e["method"] != "notifications/tools/list_changed"),
        "{rest:?}"
    );
    if let Some(last) = rest.last() {
        assert_eq!(last["id"], 12, "{rest:?}");
        assert_eq!(last["result"]["resultType"], "complete", "{rest:?}");
    }
}

#[tokio::test]
async fn a_stateless_tool_call_is_a_server_span_of_its_revision_without_a_session() {
    use opentelemetry::trace::SpanKind;
    let (sidecar, exporter, mut agent) = super::mcp::traced_with_scripted_weather_agent().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let arguments = json!({"question": "Sun in Oslo?", "interactionMode": "text"});
    let (mut h, b) = request(
        5,
        "tools/call",
        json!({"name": "getWeather", "arguments": arguments}),
    );
    h.push((
        "traceparent".into(),
        format!("00-{trace_id}-00f067aa0ba902b7-01"),
    ));
    let addr = sidecar.http;
    let call = tokio::spawn(async move { post(addr, &h, &b).await });
    super::mcp::complete_the_invocation(&mut agent).await;
    let answer = call.await.unwrap();
    // Streamed (closing it would cancel): the result is the last event.
    let last = answer
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .expect("an event");
    assert_eq!(last["result"]["content"][0]["text"], "Sunny.", "{last}");
    assert_eq!(last["result"]["resultType"], "complete", "{last}");

    let spans = exporter.get_finished_spans().unwrap();
    let span = spans
        .iter()
        .find(|s| s.name == "tools/call getWeather")
        .expect("the MCP span");
    assert_eq!(span.span_kind, SpanKind::Server);
    assert_eq!(span.span_context.trace_id().to_string(), trace_id);
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute("mcp.protocol.version").as_deref(), Some(MODERN));
    assert_eq!(attribute("mcp.session.id"), None);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_listen_stream_follows_the_resources_the_caller_may_read() {
    let (sidecar, _agent) = with_weather_agent().await;
    let addr = sidecar.http;
    let (h, b) = request(1, "resources/list", json!({}));
    let listed = post(addr, &h, &b).await.json();
    let uri = listed["result"]["resources"][0]["uri"]
        .as_str()
        .expect("the WeatherAgent's property as a resource")
        .to_owned();
    assert_eq!(listed["result"]["cacheScope"], "private", "{listed}");
    let unknown = "lmos://urn%3Anobody/properties/x";
    let filter = json!({"resourceSubscriptions": [uri, unknown], "resourcesListChanged": true});
    let mut events = Events::open(addr, "", 21, filter).await;
    let ack = events.next().await;
    // Only what it follows: the unknown URI is left out.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [uri], "resourcesListChanged": true}),
        "{ack}"
    );
    // The property's reading (observeProperty at the agent) as news.
    let updated = events.next().await;
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], uri.as_str());
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        21
    );
    sidecar.stop().await;
}
