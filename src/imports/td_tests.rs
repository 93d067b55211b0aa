use serde_json::json;

use super::*;
use crate::imports::upstream::{ActionOffer, PropertyOffer};

fn offer() -> Offer {
    Offer {
        title: "calc".into(),
        description: Some("A calculator.".into()),
        version: Some("1.2.0".into()),
        actions: vec![
            ActionOffer {
                name: "add".into(),
                description: Some("Adds two numbers.".into()),
                input: Some(json!({
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": ["number", "null"]}},
                    "required": ["a"],
                })),
                output: Some(json!({"type": "object", "properties": {"sum": {"type": "number"}}})),
                safe: true,
                idempotent: true,
                ..Default::default()
            },
            ActionOffer {
                name: "odd".into(),
                input: Some(json!({"type": "tuple-of-things"})),
                ..Default::default()
            },
        ],
        properties: vec![PropertyOffer {
            name: "greeting".into(),
            schema: json!({"type": "string"}),
            extra: [("lmos:uri".to_owned(), json!("memo://greeting"))]
                .into_iter()
                .collect(),
            ..Default::default()
        }],
        extra: [("lmos:protocol".to_owned(), json!("mcp"))]
            .into_iter()
            .collect(),
    }
}

#[test]
fn an_offer_becomes_a_valid_lmos_td_with_actions_and_read_only_properties() {
    let td = describe("urn:lmos:import:calc", ThingType::Tool, &offer());
    let td = repair(td, &TdValidator::new()).expect("valid once repaired");
    assert_eq!(td["@type"], "lmos:Tool");
    assert_eq!(td["title"], "calc");
    assert_eq!(td["version"]["instance"], "1.2.0");
    assert_eq!(td["lmos:protocol"], "mcp");
    let add = &td["actions"]["add"];
    assert_eq!(add["safe"], true);
    assert_eq!(add["idempotent"], true);
    assert_eq!(add["input"]["properties"]["a"]["type"], "number");
    assert!(add["input"].get("$schema").is_none());
    assert_eq!(
        add["input"]["properties"]["b"]["oneOf"],
        json!([{"type": "number"}, {"type": "null"}])
    );
    assert_eq!(add["output"]["properties"]["sum"]["type"], "number");
    let greeting = &td["properties"]["greeting"];
    assert_eq!(greeting["readOnly"], true);
    assert_eq!(greeting["type"], "string");
    assert_eq!(greeting["lmos:uri"], "memo://greeting");
}

#[test]
fn a_schema_the_td_schema_refuses_is_kept_beside_it_not_dropped() {
    let td = describe("urn:lmos:import:calc", ThingType::Agent, &offer());
    let td = repair(td, &TdValidator::new()).expect("valid once repaired");
    let odd = &td["actions"]["odd"];
    assert!(odd.get("input").is_none());
    assert_eq!(odd["lmos:jsonSchema"], json!({"type": "tuple-of-things"}));
    assert_eq!(td["@type"], "lmos:Agent");
}

#[test]
fn an_empty_offer_is_still_a_valid_td() {
    let td = describe("urn:lmos:import:x", ThingType::Tool, &Offer::default());
    let td = repair(td, &TdValidator::new()).expect("valid");
    assert_eq!(td["title"], "urn:lmos:import:x");
}
