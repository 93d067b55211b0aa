use serde_json::json;

use super::*;

fn discovered(versions: Value) -> Value {
    json!({
        "supportedVersions": versions,
        "capabilities": {"tools": {"listChanged": true}, "resources": {}},
        "instructions": "Use it well.",
        "resultType": "complete",
        "_meta": {SERVER_INFO: {"name": "srv", "version": "2.0"}},
    })
}

#[test]
fn a_server_that_discovers_the_revision_is_spoken_to_statelessly() {
    let verdict = verdict(Ok(discovered(json!(["2025-11-25", MODERN])))).unwrap();
    let Discovered::Modern(init) = verdict else {
        panic!("not modern: {verdict:?}");
    };
    assert_eq!(init["protocolVersion"], MODERN);
    assert_eq!(init["serverInfo"]["name"], "srv");
    assert_eq!(init["instructions"], "Use it well.");
    assert_eq!(init["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(
        listen_filter(&init),
        Some(json!({"toolsListChanged": true}))
    );
}

#[test]
fn anything_else_but_an_outage_falls_back_to_the_handshake() {
    let older = verdict(Ok(discovered(json!(["2025-11-25"])))).unwrap();
    assert!(matches!(older, Discovered::Legacy(_)), "{older:?}");
    let nothing = verdict(Ok(json!({}))).unwrap();
    assert!(matches!(nothing, Discovered::Legacy(_)));
    let refused = UpstreamError::Refused {
        status: 400,
        message: "HTTP 400: Bad Request: Missing session ID".into(),
    };
    assert!(matches!(verdict(Err(refused)), Ok(Discovered::Legacy(_))));
    let odd = UpstreamError::Malformed("an answer of type \"text/html\"".into());
    assert!(matches!(verdict(Err(odd)), Ok(Discovered::Legacy(_))));
    for outage in [
        UpstreamError::Unreachable("connection refused".into()),
        UpstreamError::Timeout(100),
        UpstreamError::TooLarge(10),
    ] {
        assert_eq!(verdict(Err(outage.clone())), Err(outage));
    }
}

#[test]
fn the_envelope_joins_what_meta_holds() {
    let mut request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "add", "_meta": {"progressToken": "p", "traceparent": "00-x"}}});
    stamp(&mut request);
    let meta = &request["params"]["_meta"];
    assert_eq!(meta[PROTOCOL_VERSION], MODERN);
    assert_eq!(meta[CLIENT_CAPABILITIES], json!({}));
    assert_eq!(meta[CLIENT_INFO]["name"], "lmos-sidecar");
    assert_eq!(
        (&meta["progressToken"], &meta["traceparent"]),
        (&json!("p"), &json!("00-x"))
    );

    let mut bare = json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover"});
    stamp(&mut bare);
    assert_eq!(bare["params"]["_meta"][PROTOCOL_VERSION], MODERN);
    let mut odd = json!({"id": 3, "method": "m", "params": {"_meta": 7}});
    stamp(&mut odd);
    assert_eq!(odd["params"]["_meta"][PROTOCOL_VERSION], MODERN);
}

#[test]
fn routing_headers_name_the_method_and_its_target() {
    let call = json!({"method": "tools/call", "params": {"name": "add"}});
    assert_eq!(
        routing(&call),
        (Some("tools/call".into()), Some("add".into()))
    );
    let read = json!({"method": "resources/read", "params": {"uri": "memo://greeting"}});
    assert_eq!(routing(&read).1.as_deref(), Some("memo://greeting"));
    let list = json!({"method": "tools/list", "params": {}});
    assert_eq!(routing(&list), (Some("tools/list".into()), None));
    // What a header cannot carry as it is goes as base64.
    assert_eq!(header_value("héllo"), "=?base64?aMOpbGxv?=");
    assert_eq!(header_value(" x"), "=?base64?IHg=?=");
    assert_eq!(header_value("a\nb"), "=?base64?YQpi?=");
    assert_eq!(header_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
}

#[test]
fn only_complete_results_are_answers() {
    let done = json!({"content": [], "resultType": "complete"});
    assert_eq!(complete(done.clone()), Ok(done));
    assert_eq!(complete(json!({"content": []})), Ok(json!({"content": []})));
    let asks = json!({"resultType": "input_required", "requestState": "s"});
    assert!(matches!(
        complete(asks),
        Err(UpstreamError::Refused { status: 501, .. })
    ));
    assert!(matches!(
        complete(json!({"resultType": "task"})),
        Err(UpstreamError::Malformed(_))
    ));
}

#[test]
fn nothing_to_listen_for_opens_no_stream() {
    let init = json!({"capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": true}}});
    assert_eq!(
        listen_filter(&init),
        Some(json!({"resourcesListChanged": true}))
    );
    assert_eq!(listen_filter(&json!({"capabilities": {}})), None);
    assert_eq!(listen_filter(&json!(null)), None);
}

#[test]
fn annotated_arguments_are_mirrored_in_headers() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "fast": {"type": "boolean", "x-mcp-header": "Fast"},
        "ratio": {"type": "number", "x-mcp-header": "Ratio"},
        "bad": {"type": "string", "x-mcp-header": "no spaces"},
        "again": {"type": "string", "x-mcp-header": "region"},
        "plain": {"type": "string"},
        "nested": {"type": "object", "properties": {
            "id": {"type": "string", "x-mcp-header": "Id"}}},
    }});
    let tokens = param_tokens(&schema);
    let mut names: Vec<&str> = tokens.iter().map(|(_, t)| t.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(["Count", "Fast", "Id"].iter().all(|n| names.contains(n)));
    assert!(names.contains(&"Region") != names.contains(&"region"));

    let arguments = json!({"region": "eu", "again": "eu", "count": 42, "fast": true,
        "nested": {"id": "ünï"}});
    let mut headers = param_headers(&tokens, &arguments);
    headers.sort();
    let expected = [
        ("mcp-param-count", "42"),
        ("mcp-param-fast", "true"),
        ("mcp-param-id", "=?base64?w7xuw68=?="),
    ];
    for (name, value) in expected {
        assert!(
            headers.contains(&(name.into(), value.into())),
            "{headers:?}"
        );
    }
    assert!(headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("mcp-param-region") && v == "eu"));
    assert_eq!(param_headers(&tokens, &json!({})), vec![]);
    assert_eq!(param_tokens(&json!({"type": "object"})), vec![]);
}
