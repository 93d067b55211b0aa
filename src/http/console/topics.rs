//! Every MQTT topic of one Thing, for the console's topic table: what to
//! give `mosquitto_sub` or any MQTT client. Pure: the rows come from the
//! sidecar's own topic layout ([`Topics`]) and the TD's affordance names,
//! so the table lists the topics a TD's forms leave out (action statuses,
//! replies, the TD, the agent's presence, its requests and replies).

use serde::Serialize;
use serde_json::Value;

use crate::topics::Topics;

/// One row of the table.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TopicRow {
    /// A topic or, with `+`, a filter.
    pub topic: String,
    /// What it is for, in a few words.
    pub purpose: String,
    /// `LMOS messages`, `values only` or `the TD`.
    pub carries: &'static str,
    pub retained: bool,
}

const LMOS: &str = "LMOS messages";
const VALUES: &str = "values only";

fn row(topic: String, purpose: String, carries: &'static str, retained: bool) -> TopicRow {
    TopicRow {
        topic,
        purpose,
        carries,
        retained,
    }
}

/// The names of one kind of affordance (`properties`, `actions`, `events`)
/// in the TD, sorted as the TD's object keys are (serde_json's map).
fn names<'a>(td: &'a Value, kind: &str) -> impl Iterator<Item = &'a str> {
    td.get(kind)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|o| o.keys().map(String::as_str))
}

/// The rows for `thing`, whose TD (if the directory has one) is `td`.
pub fn thing_topics(topics: &Topics, thing: &str, td: Option<&Value>) -> Vec<TopicRow> {
    let empty = Value::Null;
    let td = td.unwrap_or(&empty);
    let mut rows = Vec::new();
    for name in names(td, "properties") {
        rows.push(row(
            topics.property(thing, name),
            format!("property {name}: readings"),
            LMOS,
            true,
        ));
        rows.push(row(
            topics.property_value(thing, name),
            format!("property {name}: its value"),
            VALUES,
            true,
        ));
    }
    for name in names(td, "actions") {
        rows.push(row(
            topics.action_invocations_filter(thing, name),
            format!("action {name}: each invocation's status"),
            LMOS,
            false,
        ));
    }
    for name in names(td, "events") {
        rows.push(row(
            topics.event(thing, name),
            format!("event {name}"),
            LMOS,
            false,
        ));
        rows.push(row(
            topics.event_value(thing, name),
            format!("event {name}: its data"),
            VALUES,
            false,
        ));
    }
    let requests = format!("{}/+", strip_last(&topics.request(thing, "x")));
    rows.push(row(
        requests,
        "consumers' requests (publish here)".into(),
        LMOS,
        false,
    ));
    rows.push(row(
        format!("{}/+", strip_last(&topics.reply(thing, "x"))),
        "replies to MQTT 3.1.1 consumers, by correlationID".into(),
        LMOS,
        false,
    ));
    rows.push(row(
        topics.td(thing),
        "the Thing Description".into(),
        "the TD",
        true,
    ));
    rows.push(row(
        topics.agent_status(thing),
        "the agent's presence".into(),
        LMOS,
        true,
    ));
    rows.push(row(
        topics.agent_requests_filter(thing),
        "requests for the agent".into(),
        LMOS,
        false,
    ));
    rows.push(row(
        topics.agent_replies(thing),
        "the agent's replies".into(),
        LMOS,
        false,
    ));
    rows
}

/// `a/b/c` → `a/b`.
fn strip_last(topic: &str) -> &str {
    topic.rsplit_once('/').map_or(topic, |(head, _)| head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_topic_of_a_thing_is_listed() {
        let topics = Topics::new("lmos").unwrap();
        let td = json!({
            "properties": {"modelName": {}},
            "actions": {"getWeather": {}},
            "events": {"userFeedbackReceived": {}}
        });
        let rows = thing_topics(&topics, "urn:a/b", Some(&td));
        let all: Vec<&str> = rows.iter().map(|r| r.topic.as_str()).collect();
        for want in [
            "lmos/urn:a%2Fb/properties/modelName",
            "lmos/urn:a%2Fb/values/properties/modelName",
            "lmos/urn:a%2Fb/actions/getWeather/status/+",
            "lmos/urn:a%2Fb/events/userFeedbackReceived",
            "lmos/urn:a%2Fb/requests/+",
            "lmos/urn:a%2Fb/replies/+",
            "lmos/urn:a%2Fb/td",
            "lmos/urn:a%2Fb/agent/status",
            "lmos/urn:a%2Fb/agent/requests/+",
            "lmos/urn:a%2Fb/agent/replies",
        ] {
            assert!(all.contains(&want), "{want} missing from {all:?}");
        }
        let td_row = rows.iter().find(|r| r.topic.ends_with("/td")).unwrap();
        assert!(td_row.retained);
    }

    #[test]
    fn a_thing_without_a_td_still_has_its_own_topics() {
        let topics = Topics::new("lmos").unwrap();
        let rows = thing_topics(&topics, "t", None);
        assert!(rows.iter().any(|r| r.topic == "lmos/t/agent/status"));
        assert!(rows.iter().all(|r| !r.topic.contains("/events/")));
    }
}
