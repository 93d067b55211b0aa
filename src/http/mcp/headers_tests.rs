use axum::http::HeaderValue;
use serde_json::{json, Value};

use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn meta(version: &str) -> Value {
    json!({"_meta": {PROTOCOL_VERSION: version, "io.modelcontextprotocol/clientCapabilities": {}}})
}

fn request(method: &str, params: Value) -> Incoming {
    Incoming::Request {
        id: json!(1),
        method: method.into(),
        params,
    }
}

#[test]
fn the_era_follows_the_meta_version_then_the_header() {
    let none = HeaderMap::new();
    assert_eq!(
        era(&none, &request("initialize", json!({}))),
        Era::Handshake
    );
    assert_eq!(
        era(&none, &request("tools/list", meta(MODERN))),
        Era::Stateless
    );
    let old = headers(&[("mcp-protocol-version", "2025-11-25")]);
    assert_eq!(era(&old, &request("tools/list", json!({}))), Era::Handshake);
    let new = headers(&[("mcp-protocol-version", MODERN)]);
    assert_eq!(era(&new, &request("tools/list", json!({}))), Era::Stateless);
    // An unknown version is the stateless path's to refuse (-32022).
    let odd = headers(&[("mcp-protocol-version", "v999")]);
    assert_eq!(era(&odd, &request("initialize", json!({}))), Era::Stateless);
    assert!(stateless_header(&odd) && stateless_header(&new));
    assert!(!stateless_header(&old) && !stateless_header(&none));
}

#[test]
fn a_missing_meta_is_invalid_params_before_any_header_is_looked_at() {
    let h = HeaderMap::new();
    let e = check(&h, "server/discover", &json!({})).unwrap_err();
    assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, -32602));
    let no_caps = json!({"_meta": {PROTOCOL_VERSION: MODERN}});
    assert_eq!(
        check(&h, "server/discover", &no_caps).unwrap_err().code,
        -32602
    );
}

#[test]
fn headers_must_match_the_body() {
    let ok = headers(&[
        ("mcp-protocol-version", MODERN),
        ("mcp-method", " tools/list "),
    ]);
    assert_eq!(check(&ok, "tools/list", &meta(MODERN)), Ok(()));
    let cases: [&[(&'static str, &str)]; 4] = [
        &[("mcp-method", "tools/list")],
        &[("mcp-protocol-version", MODERN)],
        &[
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "TOOLS/LIST"),
        ],
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
        ],
    ];
    for case in cases {
        let e = check(&headers(case), "tools/list", &meta(MODERN)).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, HEADER_MISMATCH),
            "{case:?}"
        );
    }
}

#[test]
fn the_name_header_is_compared_decoded() {
    let params = |name: &str| {
        let mut p = meta(MODERN);
        p["name"] = json!(name);
        p
    };
    let with = |name: &str| {
        headers(&[
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ])
    };
    assert_eq!(
        check(&with("  getWeather "), "tools/call", &params("getWeather")),
        Ok(())
    );
    // "Wetter für Köln" escaped, as a client must send it.
    let escaped = "=?base64?V2V0dGVyIGbDvHIgS8O2bG4=?=";
    assert_eq!(
        check(&with(escaped), "tools/call", &params("Wetter für Köln")),
        Ok(())
    );
    for wrong in ["other", "=?base64?!!?="] {
        let e = check(&with(wrong), "tools/call", &params("getWeather")).unwrap_err();
        assert_eq!(e.code, HEADER_MISMATCH, "{wrong}");
    }
    let missing = headers(&[
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
    ]);
    assert_eq!(
        check(&missing, "tools/call", &params("getWeather"))
            .unwrap_err()
            .code,
        HEADER_MISMATCH
    );
}

#[test]
fn an_unknown_version_names_the_supported_and_the_requested() {
    let h = headers(&[
        ("mcp-protocol-version", "v999.0.0"),
        ("mcp-method", "server/discover"),
    ]);
    let e = check(&h, "server/discover", &meta("v999.0.0")).unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_REQUEST, UNSUPPORTED_VERSION)
    );
    let data = e.data.unwrap();
    assert_eq!(data["requested"], "v999.0.0");
    assert_eq!(data["supported"][0], MODERN);
    assert!(data["supported"]
        .as_array()
        .unwrap()
        .contains(&json!("2025-11-25")));
}

#[test]
fn stateless_results_say_their_type_and_lists_their_freshness() {
    let mut listed = json!({"tools": []});
    shape("tools/list", &mut listed);
    assert_eq!(listed["resultType"], "complete");
    assert_eq!(
        (listed["ttlMs"].as_u64().is_some(), &listed["cacheScope"]),
        (true, &json!("private"))
    );
    let mut called = json!({"content": []});
    shape("tools/call", &mut called);
    assert_eq!(called, json!({"content": [], "resultType": "complete"}));
    assert!(removed("ping") && removed("initialize") && !removed("tools/list"));
}
