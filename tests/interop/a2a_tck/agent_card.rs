//! The Agent Card (CARD-*, BIND-FIELD-001).

use super::*;

async fn get(face: &Face, path: &str) -> HttpResponse {
    common::http(face.addr(), "GET", path, None, b"").await
}

fn card_paths(face: &Face) -> [String; 2] {
    [
        "/.well-known/agent-card.json".to_owned(),
        format!("{}/.well-known/agent-card.json", face.path),
    ]
}

async fn card(face: &Face) -> Value {
    let r = get(face, "/.well-known/agent-card.json").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

#[tokio::test]
async fn card_disc_001_the_agent_card_is_served_at_the_well_known_urls() {
    let face = Face::start().await;
    for path in card_paths(&face) {
        let r = get(&face, &path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(r
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"));
        assert_eq!(r.json()["name"], "A2A TCK Agent", "{path}");
    }
    face.stop().await;
}

#[tokio::test]
async fn card_proto_001_the_card_declares_its_protocols() {
    let face = Face::start().await;
    let card = card(&face).await;
    let interfaces = card["supportedInterfaces"].as_array().expect("a list");
    assert!(!interfaces.is_empty(), "{card}");
    for i in interfaces {
        assert_eq!(i["protocolBinding"], "JSONRPC", "{i}");
        assert_eq!(i["protocolVersion"], "1.0", "{i}");
    }
    face.stop().await;
}

/// The TCK's client posts to the interface URL plus `/` (httpx with the
/// URL as its base), its raw calls to the URL itself: both answer.
#[tokio::test]
async fn card_proto_002_each_interface_url_answers_its_binding() {
    let face = Face::start().await;
    let card = card(&face).await;
    let url = card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = url
        .strip_prefix("http://")
        .and_then(|rest| rest.find('/').map(|i| rest[i..].to_owned()))
        .unwrap_or_else(|| panic!("not an http URL with a path: {url}"));
    assert_eq!(path, face.path);
    for p in [path.clone(), format!("{path}/")] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message("tck-complete-task", json!({}))}});
        let r = face
            .post(
                &p,
                &[("Content-Type", "application/json"), ("A2A-Version", "1.0")],
                body.to_string().as_bytes(),
            )
            .await;
        assert_eq!(r.status, 200, "{p}: {r:?}");
        assert_eq!(
            state(&r.json()["result"]["task"]),
            "TASK_STATE_COMPLETED",
            "{p}: {}",
            r.body
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn card_struct_001_the_card_has_the_required_fields() {
    let face = Face::start().await;
    let card = card(&face).await;
    assert_schema("Agent Card", &card);
    for field in [
        "name",
        "description",
        "version",
        "capabilities",
        "skills",
        "supportedInterfaces",
        "defaultInputModes",
        "defaultOutputModes",
    ] {
        assert!(card.get(field).is_some(), "no `{field}`: {card}");
    }
    let skills = card["skills"].as_array().unwrap();
    assert!(!skills.is_empty());
    for s in skills {
        for field in ["id", "name", "description", "tags"] {
            assert!(s.get(field).is_some(), "a skill without `{field}`: {s}");
        }
    }
    for i in card["supportedInterfaces"].as_array().unwrap() {
        for field in ["url", "protocolBinding", "protocolVersion"] {
            assert!(i[field].is_string(), "an interface without `{field}`: {i}");
        }
    }
    face.stop().await;
}

#[tokio::test]
async fn bind_field_001_every_binding_served_is_declared() {
    let face = Face::start().await;
    let card = card(&face).await;
    let bindings: Vec<&str> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["protocolBinding"].as_str())
        .collect();
    // The face serves JSON-RPC only (no HTTP+JSON, no gRPC).
    assert_eq!(bindings, ["JSONRPC"], "{card}");
    face.stop().await;
}

#[tokio::test]
async fn card_cache_001_the_card_says_how_long_to_cache_it() {
    let face = Face::start().await;
    for path in card_paths(&face) {
        let r = get(&face, &path).await;
        let cache = r
            .header("cache-control")
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            cache.contains("max-age="),
            "{path}: Cache-Control {cache:?}"
        );
    }
    face.stop().await;
}

#[tokio::test]
async fn card_cache_002_the_card_has_an_etag() {
    let face = Face::start().await;
    for path in card_paths(&face) {
        let r = get(&face, &path).await;
        let etag = r.header("etag").unwrap_or_default().to_owned();
        assert!(!etag.is_empty(), "{path}: no ETag");
        // Derived from the content: the same card, the same tag.
        assert_eq!(get(&face, &path).await.header("etag"), Some(etag.as_str()));
    }
    face.stop().await;
}
