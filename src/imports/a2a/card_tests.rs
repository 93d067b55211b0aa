use serde_json::{json, Value};

use super::*;

const CARD_URL: &str = "http://127.0.0.1:4000/.well-known/agent-card.json";

/// The card a2a-sdk 1.3.0 serves for tests/imports/a2a_agent.py (1.0 shape).
fn sdk_card() -> Value {
    json!({
        "name": "Fixture Weather Agent",
        "description": "An A2A agent for the sidecar's tests.",
        "supportedInterfaces": [
            {"url": "http://127.0.0.1:4000/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "version": "1.2.3",
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": "forecast", "name": "Forecast", "description": "Tells the weather, streamed.",
             "tags": ["weather"], "examples": ["forecast Oslo"]},
            {"id": "fail", "name": "Fail", "description": "Fails on purpose.",
             "tags": ["test"], "examples": ["fail"], "outputModes": ["application/json"]}
        ]
    })
}

#[test]
fn a_1_0_card_becomes_the_offer() {
    let card = read_card(&sdk_card(), CARD_URL).unwrap();
    let offer = &card.offer;
    assert_eq!(offer.title, "Fixture Weather Agent");
    assert_eq!(
        offer.description.as_deref(),
        Some("An A2A agent for the sidecar's tests.")
    );
    assert_eq!(offer.version.as_deref(), Some("1.2.3"));
    assert!(offer.properties.is_empty());
    assert_eq!(offer.extra["lmos:protocol"], "a2a");
    assert_eq!(offer.extra["lmos:upstream"], CARD_URL);
    assert_eq!(offer.extra["lmos:agentCard"], CARD_URL);
    let names: Vec<_> = offer.actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["forecast", "fail"]);
    let forecast = &offer.actions[0];
    assert_eq!(forecast.title.as_deref(), Some("Forecast"));
    assert_eq!(
        forecast.description.as_deref(),
        Some("Tells the weather, streamed.")
    );
    assert_eq!(forecast.input, Some(input_schema()));
    assert_eq!(forecast.output, Some(output_schema()));
    assert!(!forecast.safe && !forecast.idempotent);
    assert_eq!(
        forecast.extra["lmos:inputModes"],
        json!(["text/plain", "application/json"])
    );
    assert_eq!(forecast.extra["lmos:outputModes"], json!(["text/plain"]));
    assert_eq!(forecast.extra["lmos:tags"], json!(["weather"]));
    assert_eq!(forecast.extra["lmos:examples"], json!(["forecast Oslo"]));
    // A skill's own modes win over the card's defaults.
    assert_eq!(
        offer.actions[1].extra["lmos:outputModes"],
        json!(["application/json"])
    );
    assert_eq!(
        card.endpoint,
        Endpoint {
            url: "http://127.0.0.1:4000/".into(),
            dialect: Dialect::V1,
            tenant: None,
            streaming: true
        }
    );
}

#[test]
fn a_0_3_card_is_read_by_its_url_and_preferred_transport() {
    let card = json!({
        "name": "Old", "url": "/a2a", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "capabilities": {}, "skills": [{"id": "x", "name": "X"}]
    });
    let card = read_card(&card, CARD_URL).unwrap();
    assert_eq!(card.endpoint.url, "http://127.0.0.1:4000/a2a");
    assert_eq!(card.endpoint.dialect, Dialect::V03);
    assert!(!card.endpoint.streaming);
    assert_eq!(card.offer.actions[0].extra["lmos:inputModes"], json!([]));
}

#[test]
fn the_first_interface_we_speak_wins() {
    let card = json!({
        "name": "Many",
        "supportedInterfaces": [
            {"url": "https://a.example:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "https://a.example/v2", "protocolBinding": "JSONRPC", "protocolVersion": "2.0"},
            {"url": "https://a.example/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "https://a.example/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]
    });
    let endpoint = read_card(&card, CARD_URL).unwrap().endpoint;
    assert_eq!(endpoint.url, "https://a.example/v03");
    assert_eq!(endpoint.dialect, Dialect::V03);
}

#[test]
fn a_0_3_cards_additional_interfaces_are_tried_after_its_url() {
    let card = json!({
        "name": "Rest first", "url": "https://a.example/rest", "preferredTransport": "HTTP+JSON",
        "additionalInterfaces": [{"url": "https://a.example/rpc", "transport": "JSONRPC"}]
    });
    let endpoint = read_card(&card, CARD_URL).unwrap().endpoint;
    assert_eq!(endpoint.url, "https://a.example/rpc");
    assert_eq!(endpoint.dialect, Dialect::V03);
}

#[test]
fn a_tenant_is_kept() {
    let card = json!({"name": "T", "supportedInterfaces": [
        {"url": "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "acme"}
    ]});
    assert_eq!(
        read_card(&card, CARD_URL)
            .unwrap()
            .endpoint
            .tenant
            .as_deref(),
        Some("acme")
    );
}

#[test]
fn a_card_without_a_json_rpc_interface_is_refused() {
    let card = json!({"name": "Grpc only", "supportedInterfaces": [
        {"url": "https://a.example:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    ]});
    match read_card(&card, CARD_URL) {
        Err(UpstreamError::Refused {
            status: 502,
            message,
        }) => {
            assert!(message.contains("no JSON-RPC interface"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let none = json!({"name": "Nothing"});
    assert!(matches!(
        read_card(&none, CARD_URL),
        Err(UpstreamError::Refused { .. })
    ));
}

#[test]
fn broken_cards_are_malformed_not_a_panic() {
    for card in [
        json!([]),
        json!("card"),
        json!({"skills": []}),
        json!({"name": 3}),
    ] {
        assert!(
            matches!(read_card(&card, CARD_URL), Err(UpstreamError::Malformed(_))),
            "{card}"
        );
    }
    let bad_url = json!({"name": "B", "url": "ftp://a.example/rpc"});
    assert!(matches!(
        read_card(&bad_url, CARD_URL),
        Err(UpstreamError::Malformed(_))
    ));
}

#[test]
fn odd_skills_are_skipped_or_read_leniently() {
    let card = json!({"name": "Odd", "url": "/", "skills": [
        {"name": "no id"}, {"id": ""}, {"id": 7}, "not an object",
        {"id": "a", "tags": ["t", 1, null], "examples": "not a list"},
        {"id": "a", "name": "the second a"}
    ]});
    let offer = read_card(&card, CARD_URL).unwrap().offer;
    assert_eq!(offer.actions.len(), 1);
    let a = &offer.actions[0];
    assert_eq!(a.title, None);
    assert_eq!(a.extra["lmos:tags"], json!(["t"]));
    assert_eq!(a.extra["lmos:examples"], json!([]));
}
