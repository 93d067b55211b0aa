//! The Thing Description directory over HTTP, its MQTT side, and the forms
//! it serves, followed to the running example agent.

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use common::{http, lmos, TestSidecar};
use serde_json::{json, Value};

const WEATHER: &str = include_str!("../fixtures/weather-agent-td.json");
const AS_PRINTED: &str = include_str!("../fixtures/short-example-td-as-printed.json");
const ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
const TD_JSON: &str = "application/td+json";

async fn put_weather(addr: std::net::SocketAddr) -> common::HttpResponse {
    http(
        addr,
        "PUT",
        &format!("/things/{ID}"),
        Some(TD_JSON),
        WEATHER.as_bytes(),
    )
    .await
}

async fn get_weather(addr: std::net::SocketAddr) -> common::HttpResponse {
    http(addr, "GET", &format!("/things/{ID}"), None, b"").await
}

#[tokio::test]
async fn register_read_page_patch_and_remove_over_http() {
    let sidecar = TestSidecar::start().await;
    let a = sidecar.http;
    assert_eq!(put_weather(a).await.status, 201);
    assert_eq!(put_weather(a).await.status, 204, "re-registering replaces");

    let got = get_weather(a).await;
    assert_eq!(
        (got.status, got.header("content-type")),
        (200, Some(TD_JSON))
    );
    let td = got.json();
    assert_eq!(td["title"], "WeatherAgent");
    let forms = td["actions"]["getWeather"]["forms"].as_array().unwrap();
    assert!(
        forms
            .iter()
            .any(|f| f["subprotocol"] == "lmosprotocol" && f["href"] == sidecar.ws_url().as_str()),
        "{forms:?}"
    );

    let mut anonymous: Value = serde_json::from_str(WEATHER).unwrap();
    anonymous.as_object_mut().unwrap().remove("id");
    let created = http(
        a,
        "POST",
        "/things",
        Some(TD_JSON),
        anonymous.to_string().as_bytes(),
    )
    .await;
    assert_eq!(created.status, 201);
    let location = created.header("location").unwrap().to_owned();
    assert!(location.starts_with("/things/urn:uuid:"), "{location}");
    assert_eq!(http(a, "GET", &location, None, b"").await.status, 200);

    let page = http(a, "GET", "/things?offset=0&limit=1", None, b"").await;
    assert_eq!(page.json().as_array().unwrap().len(), 1);
    assert!(
        page.header("link").unwrap().contains("offset=1"),
        "{:?}",
        page.headers
    );
    assert_eq!(
        http(a, "GET", "/things", None, b"")
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let patched = http(
        a,
        "PATCH",
        &format!("/things/{ID}"),
        Some("application/merge-patch+json"),
        br#"{"title": "WeatherAgent 2"}"#,
    )
    .await;
    assert_eq!(patched.status, 204);
    assert_eq!(get_weather(a).await.json()["title"], "WeatherAgent 2");
    assert_eq!(
        http(a, "PATCH", &format!("/things/{ID}"), Some(TD_JSON), b"{}")
            .await
            .status,
        415
    );

    assert_eq!(
        http(a, "DELETE", &format!("/things/{ID}"), None, b"")
            .await
            .status,
        204
    );
    let gone = get_weather(a).await;
    assert_eq!(
        (gone.status, gone.header("content-type")),
        (404, Some("application/problem+json"))
    );
    assert_eq!(
        http(a, "DELETE", &format!("/things/{ID}"), None, b"")
            .await
            .status,
        404
    );

    let wot = http(a, "GET", "/.well-known/wot", None, b"").await;
    assert_eq!(wot.json()["@type"], "ThingDirectory");
    sidecar.stop().await;
}

#[tokio::test]
async fn invalid_descriptions_are_refused_with_every_violation() {
    let sidecar = TestSidecar::start().await;
    let a = sidecar.http;
    let bad_json = http(
        a,
        "PUT",
        "/things/urn:x",
        Some(TD_JSON),
        AS_PRINTED.as_bytes(),
    )
    .await;
    assert_eq!(bad_json.status, 400);
    let detail = bad_json.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("trailing comma") && detail.contains("line 6, column 7"),
        "the draft's trailing comma is pointed at: {detail}"
    );

    let mut td: Value = serde_json::from_str(WEATHER).unwrap();
    td["@type"] = json!("Thing");
    td["properties"]["modelConfiguration"]["readOnly"] = json!("yes");
    let refused = http(
        a,
        "PUT",
        &format!("/things/{ID}"),
        Some(TD_JSON),
        td.to_string().as_bytes(),
    )
    .await;
    assert_eq!(refused.status, 400);
    let problem = refused.json();
    let pointers: Vec<&str> = problem["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.contains(&"/@type")
            && pointers.contains(&"/properties/modelConfiguration/readOnly"),
        "{problem}"
    );
    assert_eq!(get_weather(a).await.status, 404, "nothing was registered");
    sidecar.stop().await;
}

#[tokio::test]
async fn changes_are_published_on_mqtt_and_as_events_of_the_sidecar() {
    let sidecar = TestSidecar::start().await;
    let mut watcher = sidecar.ws().await;
    watcher
        .send(lmos(
            "urn:lmos:test-sidecar",
            "subscribeAllEvents",
            json!({}),
        ))
        .await;
    watcher.barrier().await;
    let mut mqtt = sidecar.mqtt("td-watcher").await;
    mqtt.subscribe(&format!("lmos/{ID}/td")).await;

    put_weather(sidecar.http).await;
    let (_, td, _) = mqtt.recv_json().await;
    assert_eq!(td["id"], ID);
    assert!(
        td["actions"]["getWeather"]["forms"]
            .as_array()
            .unwrap()
            .len()
            > 1
    );
    let created = watcher.recv().await;
    assert_eq!(
        (created["event"].as_str(), created["data"]["id"].as_str()),
        (Some("thingCreated"), Some(ID))
    );

    let mut late = sidecar.mqtt("late").await;
    late.subscribe(&format!("lmos/{ID}/td")).await;
    let (_, retained_td, retained) = late.recv_json().await;
    assert!(
        retained && retained_td["id"] == ID,
        "the TD is retained for MQTT-only consumers"
    );

    http(sidecar.http, "DELETE", &format!("/things/{ID}"), None, b"").await;
    let cleared = mqtt.recv().await;
    assert!(cleared.payload.is_empty(), "removal clears the retained TD");
    assert_eq!(watcher.recv().await["event"], "thingDeleted");
    sidecar.stop().await;
}

#[tokio::test]
async fn the_forms_served_reach_the_running_agent() {
    let dir = std::env::temp_dir().join(format!("lmos-sidecar-td-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("weather.td.json");
    std::fs::write(&file, WEATHER).unwrap();
    let mut config = common::test_config();
    config.discovery.things = vec![file];
    let sidecar = common::start_with_agent(config, ID, |url| async move {
        weather_agent::serve(&url).await.map_err(|e| e.to_string())
    })
    .await;

    // Registered from the file at start-up; follow its forms.
    let td = get_weather(sidecar.http).await.json();
    let event_forms = td["events"]["userFeedbackReceived"]["forms"]
        .as_array()
        .unwrap();
    // The first MQTT form carries the event's data alone (for WoT
    // consumers); the one marked `lmosprotocol` the LMOS message.
    let mqtt_forms: Vec<&Value> = event_forms
        .iter()
        .filter(|f| f["href"].as_str().is_some_and(|h| h.starts_with("mqtt://")))
        .collect();
    for form in &mqtt_forms {
        let filter = form["mqv:filter"].as_str().unwrap();
        assert_eq!(
            form["href"],
            format!("mqtt://127.0.0.1:{}/{filter}", sidecar.mqtt.port())
        );
    }
    assert!(mqtt_forms[0].get("subprotocol").is_none(), "{mqtt_forms:?}");
    let envelope = mqtt_forms
        .iter()
        .find(|f| f["subprotocol"] == "lmosprotocol")
        .unwrap();
    let mut mqtt = sidecar.mqtt("follower").await;
    mqtt.subscribe(envelope["mqv:filter"].as_str().unwrap())
        .await;
    let mut values = sidecar.mqtt("wot-follower").await;
    values
        .subscribe(mqtt_forms[0]["mqv:filter"].as_str().unwrap())
        .await;

    let action_forms = td["actions"]["getWeather"]["forms"].as_array().unwrap();
    let ws_href = action_forms
        .iter()
        .find(|f| f["subprotocol"] == "lmosprotocol")
        .unwrap()["href"]
        .as_str()
        .unwrap();
    let mut consumer = common::WsClient::connect(ws_href).await;
    consumer
        .send(lmos(ID, "invokeAction", json!({"action": "getWeather", "input": {"question": "Sun in Rome?", "interactionMode": "text"}, "correlationID": "f"})))
        .await;
    loop {
        let status = consumer.recv().await;
        if status["status"] == "completed" {
            assert!(status["output"].as_str().unwrap().contains("Rome"));
            break;
        }
    }
    let (_, feedback, _) = mqtt.recv_json().await;
    assert_eq!(feedback["event"], "userFeedbackReceived");
    let (_, data, _) = values.recv_json().await;
    assert_eq!(data, feedback["data"]);
    sidecar.stop().await;
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn requests_are_checked_against_the_registered_description() {
    let sidecar = TestSidecar::start().await;
    put_weather(sidecar.http).await;
    let mut agent = sidecar.ws_agent(ID).await;
    let mut consumer = sidecar.ws().await;

    consumer
        .send(lmos(
            ID,
            "invokeAction",
            json!({"action": "getWether", "correlationID": "typo"}),
        ))
        .await;
    let e = consumer.recv().await;
    assert_eq!(
        (e["status"].as_str(), e["correlationID"].as_str()),
        (Some("404"), Some("typo"))
    );
    assert!(
        e["detail"].as_str().unwrap().contains("getWeather"),
        "names what exists: {e}"
    );

    consumer
        .send(lmos(
            ID,
            "invokeAction",
            json!({"action": "getWeather", "input": {"question": 42}, "correlationID": "bad"}),
        ))
        .await;
    let e = consumer.recv().await;
    assert_eq!(
        e["type"],
        "https://eclipse.dev/lmos/protocol/v1/errors#invalid-data"
    );
    assert!(e["detail"].as_str().unwrap().contains("/question"), "{e}");

    consumer
        .send(lmos(
            ID,
            "writeProperty",
            json!({"name": "modelConfiguration", "data": {}}),
        ))
        .await;
    assert!(consumer.recv().await["detail"]
        .as_str()
        .unwrap()
        .contains("read-only"));
    consumer
        .send(lmos(ID, "subscribeEvent", json!({"event": "noSuchEvent"})))
        .await;
    assert_eq!(consumer.recv().await["status"], "404");

    // Nothing refused reached the agent; a valid request does.
    consumer
        .send(lmos(
            ID,
            "invokeAction",
            json!({"action": "getWeather", "input": {"question": "Rain?", "interactionMode": "text"}}),
        ))
        .await;
    let request = agent.recv().await;
    assert_eq!(request["input"]["question"], "Rain?");
    sidecar.stop().await;
}

#[tokio::test]
async fn a_hosting_agent_registers_its_description_over_the_websocket() {
    let mut config = common::test_config();
    config.discovery.validate_agent_data = true;
    let sidecar = TestSidecar::start_with(config).await;
    let mut agent = sidecar.ws_agent(ID).await;

    let mut other: Value = serde_json::from_str(WEATHER).unwrap();
    other["id"] = json!("urn:not-mine");
    agent.send(other).await;
    assert_eq!(agent.recv().await["status"], "403");

    let mut invalid: Value = serde_json::from_str(WEATHER).unwrap();
    invalid["@type"] = json!("Thing");
    agent.send(invalid).await;
    let e = agent.recv().await;
    assert_eq!(e["status"], "400");
    assert!(e["detail"].as_str().unwrap().contains("/@type"), "{e}");

    agent.send(serde_json::from_str(WEATHER).unwrap()).await;
    agent.barrier().await;
    let got = get_weather(sidecar.http).await;
    assert_eq!(got.status, 200, "registered over the WebSocket");

    // With validate_agent_data, what the agent publishes is checked too.
    let mut subscriber = sidecar.ws().await;
    subscriber
        .send(lmos(
            ID,
            "subscribeEvent",
            json!({"event": "userFeedbackReceived"}),
        ))
        .await;
    subscriber.barrier().await;
    agent
        .send(common::event(
            ID,
            "userFeedbackReceived",
            json!({"rating": 9}),
        ))
        .await;
    let e = agent.recv().await;
    assert!(e["detail"].as_str().unwrap().contains("/rating"), "{e}");
    agent
        .send(common::event(
            ID,
            "userFeedbackReceived",
            json!({"rating": 5}),
        ))
        .await;
    assert_eq!(
        subscriber.recv().await["data"]["rating"],
        5,
        "only the valid event was published"
    );
    sidecar.stop().await;
}

/// The directory's own description (`/.well-known/wot`) passes the TD 1.1
/// JSON Schema the sidecar holds every registered TD to: its events carry
/// forms (WebSocket and MQTT, on the sidecar's own event topics) and its
/// security is the one in force.
#[tokio::test]
async fn the_directory_describes_itself_as_validly_as_it_asks_of_others() {
    let sidecar = TestSidecar::start().await;
    let wot = http(sidecar.http, "GET", "/.well-known/wot", None, b"").await;
    assert_eq!(wot.status, 200);
    let td = wot.json();
    if let Err(e) = lmos_sidecar::directory::validate::TdValidator::new().check_schema(&td) {
        panic!("{e}\n{td:#}");
    }
    assert_eq!(td["security"], "nosec_sc", "{td:#}");
    assert_eq!(td["securityDefinitions"]["nosec_sc"]["scheme"], "nosec");
    for event in ["thingCreated", "thingUpdated", "thingDeleted"] {
        let forms = td["events"][event]["forms"].as_array().expect("forms");
        assert!(
            forms.iter().any(|f| f["subprotocol"] == "lmosprotocol"
                && f["href"].as_str().is_some_and(|h| h.starts_with("ws://"))),
            "{event}: {forms:?}"
        );
        let filters: Vec<&Value> = forms
            .iter()
            .filter(|f| f["mqv:controlPacket"] == "subscribe")
            .map(|f| &f["mqv:filter"])
            .collect();
        assert_eq!(
            filters,
            [
                &json!(format!("lmos/urn:lmos:test-sidecar/values/events/{event}")),
                &json!(format!("lmos/urn:lmos:test-sidecar/events/{event}"))
            ],
            "{event}: {forms:?}"
        );
    }
    // The HTTP forms stay as they were.
    assert_eq!(td["properties"]["things"]["forms"][0]["href"], "/things");
    sidecar.stop().await;
}
