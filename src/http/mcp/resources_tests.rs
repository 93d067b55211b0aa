use super::*;

fn everything(_: Access, _: &str) -> bool {
    true
}

fn td() -> Value {
    json!({"title": "Fixture", "properties": {
        "text": {"type": "string", "contentMediaType": "text/plain", "lmos:uri": "test://static-text"},
        "config": {"type": "object", "description": "The model."},
        "secret": {"type": "string", "writeOnly": true},
        "byId": {"type": "object", "uriVariables": {"id": {"type": "string"}},
                 "lmos:uri": "test://template/{id}/data"},
        "forecast": {"type": "string", "uriVariables": {"city": {"type": "string", "enum": ["Oslo", "Bonn"]}}},
    }})
}

#[test]
fn readable_properties_are_resources_and_templates_with_their_uris() {
    let td = td();
    let all = resources([("urn:a:b", &td)], &everything);
    let uris: Vec<&str> = all.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "test://static-text",
            "lmos://urn%3Aa%3Ab/properties/config",
            "test://template/{id}/data",
            "lmos://urn%3Aa%3Ab/properties/forecast{?city}",
        ]
    );
    assert_eq!(all[0].descriptor["mimeType"], "text/plain");
    assert_eq!(all[1].descriptor["mimeType"], "application/json");
    assert!(all[1].descriptor["description"]
        .as_str()
        .unwrap()
        .starts_with("The model. Property `config` of Fixture"));
    assert_eq!(
        all[2].descriptor["uriTemplate"],
        "test://template/{id}/data"
    );
    // No consume right, no resources: the Thing is not there.
    let operate_only = |a: Access, _: &str| a == Access::Operate;
    assert!(resources([("urn:a:b", &td)], &operate_only).is_empty());
}

#[test]
fn uris_find_their_resource_and_variables() {
    let td = td();
    let all = || resources([("urn:a:b", &td)], &everything);
    let (r, vars) = find(all(), "test://template/123/data").unwrap();
    assert_eq!(r.property, "byId");
    assert_eq!(vars["id"], "123");
    let (r, vars) = find(
        all(),
        "lmos://urn%3Aa%3Ab/properties/forecast?city=Bad%20Ems",
    )
    .unwrap();
    assert_eq!(r.property, "forecast");
    assert_eq!(vars["city"], "Bad Ems");
    let (r, _) = find(all(), "lmos://urn%3Aa%3Ab/properties/config").unwrap();
    assert_eq!(r.property, "config");
    assert!(find(all(), "test://template//data").is_none());
    assert!(find(all(), "test://template/1/2/data").is_none());
    assert!(find(all(), "test://nothing").is_none());
    assert!(find(all(), "lmos://urn%3Aa%3Ab/properties/secret").is_none());
}

#[test]
fn encoding_round_trips() {
    let id = "urn:uuid:6f1d/ä x";
    assert_eq!(decode(&encode(id)).as_deref(), Some(id));
    assert_eq!(decode("%4"), None);
    assert_eq!(decode("%ff"), None);
}

#[test]
fn read_values_become_text_or_blobs() {
    let png =
        json!({"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png"});
    assert_eq!(
        contents("u", &png, &json!("AAAA")),
        json!({"uri": "u", "mimeType": "image/png", "blob": "AAAA"})
    );
    assert_eq!(
        contents("u", &json!({"type": "string"}), &json!("hi")),
        json!({"uri": "u", "mimeType": "text/plain", "text": "hi"})
    );
    assert_eq!(
        contents("u", &json!({"type": "object"}), &json!({"a": 1}))["text"],
        "{\"a\":1}"
    );
}
