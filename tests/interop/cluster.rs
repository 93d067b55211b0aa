//! Sidecars bridged through a real 3-node NATS cluster's MQTT listener
//! (`cluster.mode = "mqtt"`): a Thing behind sidecar A is usable by
//! consumers of sidecar B. The scenarios are in the test kit
//! (`lmos_testkit::cluster_scenarios`), shared with `tests/interop/nats_native.rs`.

use lmos_testkit::cluster_scenarios;

use cluster_scenarios::Mode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once() {
    cluster_scenarios::events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once(
        Mode::Mqtt,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another() {
    cluster_scenarios::a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another(Mode::Mqtt)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern() {
    cluster_scenarios::a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern(Mode::Mqtt).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_a_consumer_of_one_sidecar_to_an_agent_behind_another_is_one_trace() {
    cluster_scenarios::a_request_from_a_consumer_of_one_sidecar_to_an_agent_behind_another_is_one_trace(Mode::Mqtt).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_node_a_sidecar_uses_loses_no_qos1_message() {
    cluster_scenarios::killing_the_node_a_sidecar_uses_loses_no_qos1_message(Mode::Mqtt).await
}
