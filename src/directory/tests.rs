//! Tests of `directory`.

use super::*;
use crate::topics::Topics;
use serde_json::json;

const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");

fn directory() -> Directory {
    Directory::new(test_endpoints(Topics::new("lmos").unwrap()))
}

#[test]
fn put_creates_then_replaces() {
    let mut d = directory();
    let (r, served) = d.put(None, WEATHER.as_bytes()).unwrap();
    assert_eq!(r, Registered::Created);
    assert!(
        served["properties"]["modelConfiguration"]["forms"]
            .as_array()
            .unwrap()
            .len()
            > 1
    );
    assert_eq!(
        d.put(
            Some("urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77"),
            WEATHER.as_bytes()
        )
        .unwrap()
        .0,
        Registered::Updated
    );
    assert!(matches!(
        d.put(Some("urn:other"), WEATHER.as_bytes()),
        Err(DirectoryError::IdMismatch { .. })
    ));
}

#[test]
fn tds_from_the_bus_are_learnt_rewritten_and_withdrawn_but_never_override_ours() {
    const ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
    let mut elsewhere: Value = serde_json::from_str(WEATHER).unwrap();
    forms::rewrite(
        &mut elsewhere,
        &Endpoints {
            websocket: "ws://other:8080/lmos".into(),
            mqtt: "mqtt://other:1883".into(),
            http: "http://other:8080".into(),
            topics: Topics::new("lmos").unwrap(),
            value_topics: true,
            http_schemes: Vec::new(),
            mqtt_password: false,
        },
    );
    let text = elsewhere.to_string();
    let mut d = directory();
    assert!(d.learn(ID, text.as_bytes()).unwrap());
    assert!(d.is_remote(ID));
    let served = d.get(ID).unwrap().to_string();
    assert!(
        served.contains("ws://h:8080/lmos") && !served.contains("other:"),
        "{served}"
    );
    assert!(matches!(
        d.learn("urn:other", text.as_bytes()),
        Err(DirectoryError::IdMismatch { .. })
    ));
    assert!(d.learn(ID, b"{").is_err());
    assert!(d.learn(ID, b"").unwrap(), "withdrawn");
    assert!(d.get(ID).is_none());

    // Registered here: the bus's copy (its own echo, or a rival's) is ignored.
    d.put(None, WEATHER.as_bytes()).unwrap();
    assert!(!d.is_remote(ID));
    assert!(!d.learn(ID, text.as_bytes()).unwrap());
    assert!(!d.learn(ID, b"").unwrap());
    assert!(d.get(ID).is_some());
}

#[test]
fn anonymous_tds_get_a_uuid_urn() {
    let mut d = directory();
    let mut td: Value = serde_json::from_str(WEATHER).unwrap();
    td.as_object_mut().unwrap().remove("id");
    let (id, served) = d.post(None, td.to_string().as_bytes()).unwrap();
    assert!(id.starts_with("urn:uuid:"));
    assert_eq!(served["id"], id.as_str());
    assert!(matches!(
        d.post(None, WEATHER.as_bytes()),
        Err(DirectoryError::HasId(_))
    ));
}

#[test]
fn patches_are_merged_and_checked() {
    let mut d = directory();
    d.put(None, WEATHER.as_bytes()).unwrap();
    let id = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
    let served = d
        .patch(None, id, br#"{"title": "Weather 2", "links": null}"#)
        .unwrap();
    assert_eq!(served["title"], "Weather 2");
    assert!(served.get("links").is_none());
    assert!(matches!(
        d.patch(None, id, br#"{"@type": "Thing"}"#),
        Err(DirectoryError::Td(TdError::Invalid(_)))
    ));
    assert_eq!(
        d.get(id).unwrap()["@type"],
        "lmos:Agent",
        "a refused patch changes nothing"
    );
    assert!(matches!(
        d.patch(None, "urn:none", b"{}"),
        Err(DirectoryError::NotFound(_))
    ));
}

#[test]
fn pages_are_in_id_order() {
    let mut d = directory();
    for i in 0..5 {
        let mut td: Value = serde_json::from_str(WEATHER).unwrap();
        td["id"] = json!(format!("urn:t:{i}"));
        d.put(None, td.to_string().as_bytes()).unwrap();
    }
    let (page, total) = d.list(1, 2);
    assert_eq!(total, 5);
    assert_eq!(
        page.iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["urn:t:1", "urn:t:2"]
    );
}
