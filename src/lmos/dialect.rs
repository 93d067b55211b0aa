//! The Kotlin dialect of `lmosprotocol`: what the one other public
//! implementation (eclipse-thingweb/kotlin-wot, `kotlin-wot-binding-websocket`,
//! `Messages.kt`) reads and writes, and its translation to and from the
//! draft's canonical messages the rest of the sidecar handles. No I/O.
//!
//! Jackson writes those classes with `messageType` as the type id and the
//! constructor parameters as members: `thingId`, `messageId`, `correlationId`
//! (`null` when unset), `property` where the draft says `name`, `data` where a
//! `propertyReading` has `value`, `subscribeevent` in lower case, `Instant`s as
//! decimal seconds (`1737399600.123456789`), and `lastEvent` /
//! `lastPropertyReading` in subscriptions. It has types the draft lacks
//! (`readAllProperties`, `readMultipleProperties`, `writeAllProperties`,
//! `actionStatuses`, `acknowledgement`); its reader ignores unknown members but
//! fails on a missing `thingId`, `property` or `data`, and on an `actionStatus`
//! whose `status` is not `pending`, `completed` or `failed`.
//!
//! On the way in, [`normalize`] turns a Kotlin message into one or more
//! canonical ones; on the way out, [`render`] turns a canonical message into
//! what a Kotlin reader accepts, and a [`Gatherer`] joins the replies to a
//! Kotlin read of several properties into the one `propertyReadings` its
//! sender expects.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Number, Value};
use uuid::Uuid;

use super::problem::{Problem, ProblemKind};

mod gather;
pub use gather::Gatherer;

/// The dialect a message or a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The draft's: `thingID`, `name`, `value`, `subscribeEvent`, RFC 3339.
    Draft,
    /// kotlin-wot's `Messages.kt`.
    Kotlin,
}

/// Message types only the Kotlin library has, or spells its own way.
const KOTLIN_ONLY_TYPES: [&str; 6] = [
    "subscribeevent",
    "readAllProperties",
    "readMultipleProperties",
    "writeAllProperties",
    "actionStatuses",
    "acknowledgement",
];

/// Message types only the draft has.
const DRAFT_ONLY_TYPES: [&str; 5] = [
    "subscribeEvent",
    "subscribeAllEvents",
    "unsubscribeAllEvents",
    "queryAction",
    "cancelAction",
];

/// Messages naming one property: `name` in the draft, `property` in Kotlin.
const PROPERTY_TYPES: [&str; 5] = [
    "readProperty",
    "writeProperty",
    "observeProperty",
    "unobserveProperty",
    "propertyReading",
];

/// Requests a consumer sends: towards a Kotlin agent, their `messageId` is
/// what the agent's reply carries as `correlationId`.
const REQUEST_TYPES: [&str; 10] = [
    "readProperty",
    "writeProperty",
    "writeMultipleProperties",
    "observeProperty",
    "unobserveProperty",
    "invokeAction",
    "queryAction",
    "cancelAction",
    "subscribeEvent",
    "unsubscribeEvent",
];

/// The envelope members, draft spelling first.
const ENVELOPE: [(&str, &str); 3] = [
    ("thingID", "thingId"),
    ("messageID", "messageId"),
    ("correlationID", "correlationId"),
];

/// Why a Kotlin message has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialectError {
    #[error("`readMultipleProperties` needs `properties`: a list of property names")]
    PropertyList,
    #[error("`writeAllProperties` needs `data`: an object of property values")]
    WriteData,
    #[error("`actionStatuses` needs `statuses`: an object of action names to status strings")]
    StatusMap,
    #[error("`readAllProperties` needs the Thing Description of `{0}` registered with the sidecar, which lists its properties; none is")]
    NoDescription(String),
}

impl DialectError {
    /// The LMOS `error` reporting it.
    pub fn problem(&self) -> Problem {
        let kind = match self {
            DialectError::PropertyList | DialectError::WriteData | DialectError::StatusMap => {
                ProblemKind::InvalidMember
            }
            DialectError::NoDescription(_) => ProblemKind::NotFound,
        };
        Problem::new(kind, format!("{self}."))
    }
}

fn message_type(map: &Map<String, Value>) -> &str {
    map.get("messageType")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The dialect a message is unambiguously in, if any. Kotlin: one of its own
/// types, `property` (or a reading's `data`) where the draft says `name` (or
/// `value`), `lastEvent` / `lastPropertyReading`, or a numeric `timestamp`.
/// Draft: a table-spelled envelope member, `name` / `value`, or a type only
/// the draft has. Many messages (an `invokeAction` with `thingId`, say) are
/// valid in both.
pub fn detect(map: &Map<String, Value>) -> Option<Dialect> {
    let t = message_type(map);
    let property_message = PROPERTY_TYPES.contains(&t);
    let kotlin = KOTLIN_ONLY_TYPES.contains(&t)
        || (property_message && map.contains_key("property") && !map.contains_key("name"))
        || (t == "propertyReading" && map.contains_key("data") && !map.contains_key("value"))
        || map.contains_key("lastEvent")
        || map.contains_key("lastPropertyReading")
        || map.get("timestamp").is_some_and(Value::is_number);
    if kotlin {
        return Some(Dialect::Kotlin);
    }
    let draft = ENVELOPE.iter().any(|(draft, _)| map.contains_key(*draft))
        || (property_message && map.contains_key("name"))
        || (t == "propertyReading" && map.contains_key("value"))
        || DRAFT_ONLY_TYPES.contains(&t);
    draft.then_some(Dialect::Draft)
}

/// A Kotlin message in canonical form.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Normalized {
    /// Canonical messages, in order (none for an `acknowledgement`, which
    /// asks nothing of the sidecar).
    pub messages: Vec<Map<String, Value>>,
    /// For a read of several properties that became one `readProperty` each:
    /// the properties whose readings answer it.
    pub gather: Option<Vec<String>>,
}

impl Normalized {
    fn one(map: Map<String, Value>) -> Normalized {
        Normalized {
            messages: vec![map],
            gather: None,
        }
    }
}

/// `thingId` / `messageId` / the reply correlation of a raw message, to
/// answer one that cannot be normalized.
pub fn reply_target(map: &Map<String, Value>) -> (Option<String>, Option<String>) {
    let get = |(a, b): (&str, &str)| {
        [a, b]
            .into_iter()
            .find_map(|k| map.get(k)?.as_str().filter(|s| !s.is_empty()))
            .map(str::to_owned)
    };
    let thing = get(ENVELOPE[0]);
    let correlation = get(ENVELOPE[2]).or_else(|| get(ENVELOPE[1]));
    (thing, correlation)
}

fn rename(map: &mut Map<String, Value>, from: &str, to: &str) {
    if map.contains_key(to) {
        return;
    }
    if let Some(v) = map.shift_remove(from) {
        map.insert(to.to_owned(), v);
    }
}

fn drop_null(map: &mut Map<String, Value>, member: &str) {
    if map.get(member).is_some_and(Value::is_null) {
        map.shift_remove(member);
    }
}

/// A Kotlin message (see [`detect`]) as the draft's canonical message(s).
/// `readable_properties` lists the readable properties of a Thing from its
/// registered Thing Description, for `readAllProperties`.
///
/// - `property` → `name`; a reading's `data` → `value`; `subscribeevent` →
///   `subscribeEvent`; `writeAllProperties` → `writeMultipleProperties`;
///   numeric timestamps → RFC 3339.
/// - `lastEvent` is kept: a subscription resumes after that time from the
///   gateway's history (the Kotlin client sets it to "now" unless told
///   otherwise, which resumes nothing). `lastPropertyReading` is dropped:
///   an observer gets the latest reading anyway.
/// - `null` `input`, `output`, `href` and `correlationId` are what Jackson
///   writes for "none": dropped.
/// - `readMultipleProperties` / `readAllProperties` → one `readProperty` per
///   property, with [`Normalized::gather`] set.
/// - `actionStatuses` → one `actionStatus` per action.
/// - `acknowledgement` → nothing.
pub fn normalize(
    mut map: Map<String, Value>,
    readable_properties: impl FnOnce(&str) -> Option<Vec<String>>,
) -> Result<Normalized, DialectError> {
    for member in ["correlationId", "correlationID", "input", "output", "href"] {
        drop_null(&mut map, member);
    }
    map.shift_remove("lastPropertyReading");
    if let Some(ts) = map.get_mut("timestamp") {
        if let Some(text) = ts.as_f64().and_then(rfc3339_of_seconds) {
            *ts = Value::String(text);
        }
    }
    let t = message_type(&map).to_owned();
    if PROPERTY_TYPES.contains(&t.as_str()) {
        rename(&mut map, "property", "name");
    }
    let set_type = |map: &mut Map<String, Value>, t: &str| {
        map.insert("messageType".into(), t.into());
    };
    match t.as_str() {
        "propertyReading" => rename(&mut map, "data", "value"),
        "subscribeevent" => set_type(&mut map, "subscribeEvent"),
        "writeAllProperties" => {
            if !map.get("data").is_some_and(Value::is_object) {
                return Err(DialectError::WriteData);
            }
            set_type(&mut map, "writeMultipleProperties");
        }
        "acknowledgement" => return Ok(Normalized::default()),
        "readMultipleProperties" => {
            let names = match map.shift_remove("properties") {
                Some(Value::Array(a)) => a
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) if !s.is_empty() => Ok(s),
                        _ => Err(DialectError::PropertyList),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                _ => return Err(DialectError::PropertyList),
            };
            return Ok(expand_reads(map, names));
        }
        "readAllProperties" => {
            let thing = reply_target(&map).0.unwrap_or_default();
            let names =
                readable_properties(&thing).ok_or(DialectError::NoDescription(thing.clone()))?;
            return Ok(expand_reads(map, names));
        }
        "actionStatuses" => {
            let Some(Value::Object(statuses)) = map.shift_remove("statuses") else {
                return Err(DialectError::StatusMap);
            };
            let mut messages = Vec::with_capacity(statuses.len());
            for (action, status) in statuses {
                let Value::String(status) = status else {
                    return Err(DialectError::StatusMap);
                };
                let mut m = map.clone();
                set_type(&mut m, "actionStatus");
                m.insert("action".into(), action.into());
                m.insert("status".into(), status.into());
                messages.push(m);
            }
            return Ok(Normalized {
                messages,
                gather: None,
            });
        }
        _ => {}
    }
    Ok(Normalized::one(map))
}

/// One `readProperty` per distinct name, each with the envelope (and trace
/// context) of the original, so each reply carries its correlation.
fn expand_reads(mut map: Map<String, Value>, names: Vec<String>) -> Normalized {
    let mut distinct: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !distinct.contains(&n) {
            distinct.push(n);
        }
    }
    map.insert("messageType".into(), "readProperty".into());
    let messages = distinct
        .iter()
        .map(|name| {
            let mut m = map.clone();
            m.insert("name".into(), name.as_str().into());
            m
        })
        .collect();
    Normalized {
        messages,
        gather: Some(distinct),
    }
}

/// The readable properties a Thing Description lists (`writeOnly` ones are
/// left out), or `None` when it has no `properties` object.
pub fn readable_properties(td: &Value) -> Option<Vec<String>> {
    let properties = td.get("properties")?.as_object()?;
    Some(
        properties
            .iter()
            .filter(|(_, p)| p.get("writeOnly") != Some(&Value::Bool(true)))
            .map(|(name, _)| name.clone())
            .collect(),
    )
}

/// A canonical message as a Kotlin reader wants it. Members it does not
/// know (trace context, vendor members) are kept: Jackson ignores them.
///
/// - envelope → `thingId` / `messageId` / `correlationId`;
/// - `name` → `property`; a reading's `value` → `data`; `subscribeEvent` →
///   `subscribeevent`; timestamps → decimal seconds, as Jackson writes an
///   `Instant`;
/// - an `actionStatus`'s `status` becomes one of the three Kotlin knows:
///   `cancelled` → `failed`, any other unfinished state → `pending`;
/// - a request (towards a Kotlin agent) carries its `correlationID` as
///   `messageId`: the Kotlin agent answers with `correlationId` = the
///   request's `messageId`, and the sidecar routes answers by that.
///
/// Anything else (an `acknowledgement`, a type Kotlin lacks) gets the
/// envelope renamed only.
pub fn render(value: Value) -> Value {
    let Value::Object(mut map) = value else {
        return value;
    };
    let t = message_type(&map).to_owned();
    if REQUEST_TYPES.contains(&t.as_str()) {
        if let Some(c) = map.shift_remove("correlationID") {
            map.insert("messageID".into(), c);
        }
    }
    for (draft, kotlin) in ENVELOPE {
        rename(&mut map, draft, kotlin);
        map.shift_remove(draft);
    }
    if PROPERTY_TYPES.contains(&t.as_str()) {
        rename(&mut map, "name", "property");
    }
    match t.as_str() {
        "propertyReading" => rename(&mut map, "value", "data"),
        "subscribeEvent" => {
            map.insert("messageType".into(), "subscribeevent".into());
        }
        "actionStatus" => {
            if let Some(Value::String(s)) = map.get_mut("status") {
                let kotlin = kotlin_status(s);
                if kotlin != s {
                    *s = kotlin.to_owned();
                }
            }
        }
        _ => {}
    }
    if let Some(ts) = map.get_mut("timestamp") {
        if let Some(n) = ts.as_str().and_then(seconds_of_rfc3339) {
            *ts = Value::Number(n);
        }
    }
    Value::Object(map)
}

/// The Kotlin `ActionStatus` enum has `pending`, `completed`, `failed`.
fn kotlin_status(status: &str) -> &str {
    match status {
        "pending" | "completed" | "failed" => status,
        "cancelled" | "canceled" => "failed",
        _ => "pending",
    }
}

/// RFC 3339 (with an optional RFC 9557 suffix) → decimal seconds.
fn seconds_of_rfc3339(s: &str) -> Option<Number> {
    let t = super::member::parse_timestamp(s)?;
    let seconds = t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9;
    Number::from_f64(seconds)
}

/// Decimal seconds since the epoch → RFC 3339, UTC, to the microsecond (an
/// f64 holds no more of a current date).
fn rfc3339_of_seconds(seconds: f64) -> Option<String> {
    let micros = (seconds * 1e6).round();
    if !micros.is_finite() || micros.abs() > 9.0e18 {
        return None;
    }
    let t = DateTime::<Utc>::from_timestamp_micros(micros as i64)?;
    Some(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// A Kotlin `acknowledgement` (canonical envelope; [`render`] respells it)
/// that the subscription change `of` (e.g. `subscribeevent`), requested
/// with `correlation`, took effect.
pub fn acknowledgement(thing: &str, correlation: &str, of: &str) -> Value {
    let mut map = Map::with_capacity(5);
    map.insert("thingID".into(), thing.into());
    map.insert("messageID".into(), Uuid::new_v4().to_string().into());
    map.insert("messageType".into(), "acknowledgement".into());
    map.insert("correlationID".into(), correlation.into());
    map.insert("message".into(), of.into());
    Value::Object(map)
}

#[cfg(test)]
#[path = "dialect_tests.rs"]
mod tests;
