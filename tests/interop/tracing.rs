//! Message spans, checked with the SDK's in-memory exporter: parents, trace
//! IDs, trace state, the context carried on, attributes.

use lmos_testkit as common;

use common::{event, lmos, TestSidecar, WsClient};
use lmos_sidecar::telemetry::Tracing;
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::{json, Value};

const THING: &str = "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

async fn traced(new_trace_for_untraced: bool) -> (TestSidecar, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let tracing = Tracing::with_exporter(exporter.clone(), new_trace_for_untraced);
    (
        TestSidecar::start_traced(common::test_config(), tracing).await,
        exporter,
    )
}

fn traceparent(v: &Value) -> (String, String) {
    let tp = v["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent in {v}"));
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!((parts.len(), parts[0], parts[3]), (4, "00", "01"), "{tp}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn spans_named(exporter: &InMemorySpanExporter, name: &str) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == name)
        .collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn an_event_fanned_out_to_three_subscribers_is_one_producer_and_one_consumer_span() {
    let (sidecar, exporter) = traced(true).await;
    let mut consumers = Vec::new();
    for i in 0..3 {
        let mut c = sidecar.ws().await;
        c.send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "e", "correlationID": format!("c{i}")}),
        ))
        .await;
        c.barrier().await;
        consumers.push(c);
    }
    let mut mqtt = sidecar.mqtt("mqtt-subscriber").await;
    mqtt.subscribe(&format!("lmos/{THING}/events/e")).await;

    let mut agent = sidecar.ws().await;
    let mut sent = event(THING, "e", json!(1));
    sent["traceparent"] = json!(format!("00-{TRACE}-{PARENT}-01"));
    sent["tracestate"] = json!(STATE);
    agent.send(sent.clone()).await;

    let topic = format!("lmos/{THING}/events/e");
    let (_, on_mqtt, _) = mqtt.recv_json().await;
    let (trace, producer_id) = traceparent(&on_mqtt);
    assert_eq!(trace, TRACE, "the trace goes on");
    assert_eq!(on_mqtt["tracestate"], STATE, "tracestate unchanged");

    let mut delivered = Vec::new();
    for c in &mut consumers {
        let got = c.recv().await;
        assert_eq!(got["tracestate"], STATE);
        let (t, span) = traceparent(&got);
        assert_eq!(t, TRACE);
        delivered.push(span);
    }

    let producers = spans_named(&exporter, &format!("publish {topic}"));
    assert_eq!(producers.len(), 1, "one producer span");
    let producer = &producers[0];
    assert_eq!(producer.span_kind, SpanKind::Producer);
    assert_eq!(producer.span_context.trace_id().to_string(), TRACE);
    assert_eq!(
        producer.parent_span_id.to_string(),
        PARENT,
        "parent = the incoming span"
    );
    assert_eq!(
        producer.span_context.span_id().to_string(),
        producer_id,
        "the bus copy carries the producer span"
    );
    assert_eq!(
        attribute(producer, "messaging.system").as_deref(),
        Some("lmos")
    );
    assert_eq!(
        attribute(producer, "messaging.destination.name"),
        Some(topic.clone())
    );
    assert_eq!(
        attribute(producer, "messaging.operation.type").as_deref(),
        Some("send")
    );
    assert_eq!(
        attribute(producer, "messaging.message.id"),
        sent["messageID"].as_str().map(str::to_owned)
    );
    assert_eq!(
        attribute(producer, "lmos.message_type").as_deref(),
        Some("event")
    );
    assert_eq!(attribute(producer, "lmos.thing_id").as_deref(), Some(THING));
    assert_eq!(attribute(producer, "lmos.affordance").as_deref(), Some("e"));

    // One span for the fan-out, however many subscribers: a span each made
    // an event to ten thousand consumers ten thousand spans.
    let consumer_spans = spans_named(&exporter, &format!("process {topic}"));
    assert_eq!(consumer_spans.len(), 1, "one consumer span for the fan-out");
    let fan_out = &consumer_spans[0];
    assert_eq!(fan_out.span_kind, SpanKind::Consumer);
    assert_eq!(
        fan_out.parent_span_id.to_string(),
        producer_id,
        "a child of the producer"
    );
    assert_eq!(fan_out.span_context.trace_id().to_string(), TRACE);
    assert_eq!(
        attribute(fan_out, "messaging.operation.type").as_deref(),
        Some("process")
    );
    assert_eq!(attribute(fan_out, "lmos.recipients").as_deref(), Some("3"));
    let id = fan_out.span_context.span_id().to_string();
    assert_eq!(
        delivered,
        vec![id.clone(), id.clone(), id],
        "every copy carries the fan-out's span"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn invoke_status_and_reply_form_one_trace() {
    let (sidecar, exporter) = traced(true).await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "invokeAction", json!({"action": "go", "correlationID": "inv", "traceparent": format!("00-{TRACE}-{PARENT}-01"), "tracestate": STATE})))
        .await;
    let request = agent.recv().await;
    let (trace, request_span) = traceparent(&request);
    assert_eq!(trace, TRACE);
    assert_eq!(request["tracestate"], STATE);
    for status in ["pending", "completed"] {
        // The agent continues the trace it was given.
        let mut reply = lmos(
            THING,
            "actionStatus",
            json!({"action": "go", "status": status}),
        );
        reply["correlationID"] = request["correlationID"].clone();
        reply["traceparent"] = request["traceparent"].clone();
        reply["tracestate"] = request["tracestate"].clone();
        agent.send(reply).await;
    }
    let mut reply_spans = Vec::new();
    for _ in 0..2 {
        let got = consumer.recv().await;
        let (t, span) = traceparent(&got);
        assert_eq!(t, TRACE, "one trace from request to reply");
        assert_eq!(got["tracestate"], STATE);
        reply_spans.push(span);
    }

    let requests = spans_named(
        &exporter,
        &format!("publish lmos/{THING}/agent/requests/invokeAction"),
    );
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].parent_span_id.to_string(), PARENT);
    assert_eq!(requests[0].span_context.span_id().to_string(), request_span);
    assert_eq!(
        attribute(&requests[0], "lmos.correlation_id").as_deref(),
        Some("inv")
    );
    let replies = spans_named(&exporter, &format!("process lmos/{THING}/agent/replies"));
    assert_eq!(replies.len(), 2);
    for s in &replies {
        assert_eq!(
            s.parent_span_id.to_string(),
            request_span,
            "replies are children of the request"
        );
        assert_eq!(s.span_kind, SpanKind::Consumer);
        assert!(reply_spans.contains(&s.span_context.span_id().to_string()));
    }
    sidecar.stop().await;
}

/// An MQTT agent's event without trace context, as a WebSocket subscriber
/// receives it.
async fn plain_event(
    new_trace_for_untraced: bool,
) -> (TestSidecar, InMemorySpanExporter, WsClient, Value) {
    let (sidecar, exporter) = traced(new_trace_for_untraced).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "plain"})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.mqtt("agent").await;
    agent.publish_event(THING, "plain", json!(1)).await;
    let got = consumer.recv().await;
    (sidecar, exporter, consumer, got)
}

#[tokio::test]
async fn untraced_messages_start_a_trace_and_errors_are_recorded() {
    let (sidecar, exporter, mut consumer, got) = plain_event(true).await;
    let (trace, span) = traceparent(&got);
    let spans = exporter.get_finished_spans().unwrap();
    let process = spans
        .iter()
        .find(|s| s.span_context.span_id().to_string() == span)
        .expect("span exported");
    let root = spans
        .iter()
        .find(|s| s.span_context.span_id() == process.parent_span_id)
        .expect("a stand-in producer");
    assert_eq!(root.span_kind, SpanKind::Producer);
    assert_eq!(root.span_context.trace_id().to_string(), trace);
    assert_eq!(
        root.parent_span_id,
        SpanId::INVALID,
        "a new trace starts at the stand-in"
    );

    consumer
        .send(lmos("urn:nobody", "readProperty", json!({"name": "p"})))
        .await;
    assert_eq!(consumer.recv().await["status"], "503");
    let failed = spans_named(
        &exporter,
        "publish lmos/urn:nobody/agent/requests/readProperty",
    );
    assert!(
        matches!(failed[0].status, Status::Error { .. }),
        "{:?}",
        failed[0].status
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn untraced_messages_pass_untouched_when_new_traces_are_off() {
    let (sidecar, exporter, _consumer, got) = plain_event(false).await;
    assert!(got.get("traceparent").is_none(), "{got}");
    assert!(spans_named(&exporter, &format!("process lmos/{THING}/events/plain")).is_empty());
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt5_user_properties_carry_the_context_when_the_json_does_not() {
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::{AsyncClient, MqttOptions};

    let (sidecar, _exporter) = traced(true).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "v5"})))
        .await;
    consumer.barrier().await;

    let mut options = MqttOptions::new("agent5", "127.0.0.1", sidecar.mqtt5.port());
    options.set_keep_alive(std::time::Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    let driver = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    let properties = PublishProperties {
        user_properties: vec![
            ("traceparent".into(), format!("00-{TRACE}-{PARENT}-01")),
            ("tracestate".into(), STATE.into()),
        ],
        ..Default::default()
    };
    client
        .publish_with_properties(
            format!("lmos/{THING}/events/v5"),
            QoS::AtLeastOnce,
            false,
            event(THING, "v5", json!(1)).to_string(),
            properties,
        )
        .await
        .unwrap();
    let got = consumer.recv().await;
    assert_eq!(traceparent(&got).0, TRACE);
    assert_eq!(got["tracestate"], STATE);
    driver.abort();
    sidecar.stop().await;
}

#[tokio::test]
async fn what_the_sidecar_says_for_a_vanished_agent_continues_the_trace() {
    let (sidecar, _exporter) = traced(true).await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "invokeAction", json!({"action": "go", "correlationID": "x", "traceparent": format!("00-{TRACE}-{PARENT}-01")})))
        .await;
    let request = agent.recv().await;
    drop(agent);
    let failed = consumer.recv().await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["traceparent"], request["traceparent"],
        "in the trace of the request"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt5_subscribers_can_get_the_context_as_user_properties_too() {
    let exporter = InMemorySpanExporter::default();
    let tracing = Tracing::with_exporter(exporter.clone(), true).with_mqtt5_user_properties(true);
    let sidecar = TestSidecar::start_traced(common::test_config(), tracing).await;

    let (_client, mut rx) = common::mqtt5_client(
        sidecar.mqtt5,
        "subscriber5",
        &format!("lmos/{THING}/events/+"),
    )
    .await;
    let mut agent = sidecar.ws().await;
    let mut sent = event(THING, "e", json!(1));
    sent["traceparent"] = json!(format!("00-{TRACE}-{PARENT}-01"));
    sent["tracestate"] = json!(STATE);
    agent.send(sent).await;
    let publish = common::mqtt5_next_publish(&mut rx).await;
    let payload: Value = serde_json::from_slice(&publish.payload).unwrap();
    let user = publish
        .properties
        .map(|p| p.user_properties)
        .unwrap_or_default();
    let find = |k: &str| {
        user.iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        find("traceparent").as_deref(),
        payload["traceparent"].as_str(),
        "the same context in both places"
    );
    assert_eq!(find("tracestate").as_deref(), Some(STATE));
    sidecar.stop().await;
}
