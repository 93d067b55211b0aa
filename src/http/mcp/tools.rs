//! The Things' affordances as MCP tools, and LMOS answers as MCP results.
//! No I/O: given the hosted Things' descriptions and what the caller may
//! do, the tool list; given an action's statuses, what the client sees.
//!
//! One tool per action (named after it), one `read_{property}` per readable
//! property and one `write_{property}` per writable one. A name two Things
//! (or an action and a property) would share is prefixed with a short Thing
//! name (its TD's title), so every name is unique and says which action it
//! is. Names keep to MCP's `^[a-zA-Z0-9_-]{1,64}$`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::content;
use crate::auth::Access;

/// What a tool does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Action(String),
    ReadProperty(String),
    WriteProperty(String),
}

/// One tool, with what calling it means.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub thing: String,
    pub target: Target,
    /// The action takes input.
    has_input: bool,
    /// The action's input is not an object: the tool's arguments carry it
    /// as their one member `input`.
    wrapped_input: bool,
    /// The output is described by a schema that is not an object: the
    /// structured result carries it as its one member `output`.
    wrapped_output: bool,
    /// The TD describes the output.
    has_output_schema: bool,
    /// The TD's schema of the output (or of the property read), which
    /// says when it is an image, audio or other media ([`content`]).
    output_data: Option<Value>,
    /// What `tools/list` shows.
    pub descriptor: Value,
}

const MAX_NAME: usize = 64;
const MAX_PREFIX: usize = 24;

/// TD keys that are not JSON Schema and mean nothing to a tool's schema.
const NOT_SCHEMA: [&str; 6] = [
    "forms",
    "@type",
    "uriVariables",
    "observable",
    "titles",
    "descriptions",
];

/// `[a-zA-Z0-9_-]` only; anything else becomes `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// At most 64 characters; a longer name keeps its start and ends with a
/// hash of the whole, so two long names stay apart.
fn fit(name: String) -> String {
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{}_{:08x}", &name[..MAX_NAME - 9], hash as u32)
}

/// A short name for the Thing: its title, else the end of its id.
fn short_name(id: &str, td: &Value) -> String {
    let source = td["title"]
        .as_str()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| id.rsplit([':', '/']).next().unwrap_or(id));
    let mut short = sanitize(source.trim());
    short.truncate(MAX_PREFIX);
    short
}

/// A TD data schema as a JSON Schema.
fn schema(data: &Value) -> Value {
    let mut schema = data.clone();
    if let Some(object) = schema.as_object_mut() {
        for key in NOT_SCHEMA {
            object.remove(key);
        }
    }
    schema
}

fn is_object_schema(data: &Value) -> bool {
    data["type"] == "object"
}

/// `{"type": "object", "properties": {member: schema}, "required": [member]}`.
fn wrap(member: &str, inner: Value) -> Value {
    json!({"type": "object", "properties": {member: inner}, "required": [member]})
}

struct Candidate {
    base: String,
    thing: String,
    short: String,
    target: Target,
    affordance: Value,
}

fn candidates(id: &str, td: &Value, may: &dyn Fn(Access, &str) -> bool) -> Vec<Candidate> {
    let short = short_name(id, td);
    let mut out = Vec::new();
    let mut push = |base: String, target: Target, affordance: &Value| {
        out.push(Candidate {
            base: sanitize(&base),
            thing: id.to_owned(),
            short: short.clone(),
            target,
            affordance: affordance.clone(),
        });
    };
    if may(Access::Operate, id) {
        for (name, action) in td["actions"].as_object().into_iter().flatten() {
            push(name.clone(), Target::Action(name.clone()), action);
        }
    }
    for (name, property) in td["properties"].as_object().into_iter().flatten() {
        if property["writeOnly"] != true && may(Access::Consume, id) {
            push(
                format!("read_{name}"),
                Target::ReadProperty(name.clone()),
                property,
            );
        }
        if property["readOnly"] != true && may(Access::Operate, id) {
            push(
                format!("write_{name}"),
                Target::WriteProperty(name.clone()),
                property,
            );
        }
    }
    out
}

/// The tools of `things` (id → TD, in a stable order) the caller may use:
/// actions and property writes need `operate`, property reads `consume`.
pub fn tools<'a>(
    things: impl IntoIterator<Item = (&'a str, &'a Value)>,
    may: &dyn Fn(Access, &str) -> bool,
) -> Vec<Tool> {
    let all: Vec<Candidate> = things
        .into_iter()
        .flat_map(|(id, td)| candidates(id, td, may))
        .collect();
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for c in &all {
        *uses.entry(&c.base).or_default() += 1;
    }
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut tools = Vec::with_capacity(all.len());
    for c in &all {
        let mut name = if uses[c.base.as_str()] > 1 {
            fit(format!("{}_{}", c.short, c.base))
        } else {
            fit(c.base.clone())
        };
        // Two Things with one title: a counter keeps them apart.
        let n = taken.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            name = fit(format!("{name}_{n}"));
        }
        tools.push(tool(name, c));
    }
    tools
}

fn tool(name: String, c: &Candidate) -> Tool {
    let a = &c.affordance;
    let description = a["description"].as_str().map(str::to_owned);
    let mut descriptor = json!({"name": name});
    if let Some(title) = a["title"].as_str() {
        descriptor["title"] = title.into();
    }
    let (input_schema, wrapped_input, output) = match &c.target {
        Target::Action(_) => {
            let input = a.get("input").filter(|i| i.is_object());
            let (schema_, wrapped) = match input {
                None => (json!({"type": "object", "properties": {}}), false),
                Some(i) if is_object_schema(i) => (schema(i), false),
                Some(i) => (wrap("input", schema(i)), true),
            };
            descriptor["annotations"] = json!({
                "readOnlyHint": a["safe"] == true,
                "idempotentHint": a["idempotent"] == true,
            });
            (schema_, wrapped, a.get("output").filter(|o| o.is_object()))
        }
        Target::ReadProperty(_) => {
            descriptor["annotations"] = json!({"readOnlyHint": true, "idempotentHint": true});
            (json!({"type": "object", "properties": {}}), false, Some(a))
        }
        Target::WriteProperty(_) => {
            descriptor["annotations"] = json!({"readOnlyHint": false, "idempotentHint": true});
            (wrap("value", schema(a)), false, None)
        }
    };
    let what = match &c.target {
        Target::Action(n) => format!("Invokes the action `{n}`"),
        Target::ReadProperty(n) => format!("Reads the property `{n}`"),
        Target::WriteProperty(n) => format!("Writes the property `{n}`"),
    };
    let origin = format!("{what} of {} ({}).", c.short, c.thing);
    descriptor["description"] = match description {
        Some(d) => format!("{d} {origin}").into(),
        None => origin.into(),
    };
    descriptor["inputSchema"] = input_schema;
    let wrapped_output = output.is_some_and(|o| !is_object_schema(o));
    if let Some(o) = output {
        // A property's schema describes its value, as an output's does.
        let mut s = schema(o);
        if let Some(object) = s.as_object_mut() {
            for key in ["readOnly", "writeOnly"] {
                object.remove(key);
            }
        }
        descriptor["outputSchema"] = if wrapped_output { wrap("output", s) } else { s };
    }
    Tool {
        name: descriptor["name"].as_str().unwrap_or_default().to_owned(),
        thing: c.thing.clone(),
        target: c.target.clone(),
        has_input: matches!(c.target, Target::Action(_))
            && a.get("input").is_some_and(Value::is_object),
        wrapped_input,
        wrapped_output,
        has_output_schema: output.is_some(),
        output_data: output.cloned(),
        descriptor,
    }
}

impl Tool {
    /// The LMOS input (or written value) for the call's arguments.
    pub fn input(&self, arguments: &Value) -> Option<Value> {
        match &self.target {
            Target::Action(_) if !self.has_input => None,
            Target::Action(_) if self.wrapped_input => arguments.get("input").cloned(),
            Target::Action(_) if arguments.is_null() => Some(json!({})),
            Target::Action(_) => Some(arguments.clone()),
            Target::WriteProperty(_) => {
                Some(arguments.get("value").cloned().unwrap_or(Value::Null))
            }
            Target::ReadProperty(_) => None,
        }
    }

    /// A `tools/call` result for an output (a completed action's, a read
    /// value): its content blocks ([`content`]: text, or the image, audio
    /// and resources the TD's schema or the output itself describe), and
    /// the structured value where it is JSON the client can use.
    pub fn success(&self, output: Option<&Value>) -> Value {
        let Some(output) = output else {
            return json!({"content": [], "isError": false});
        };
        let uri = match &self.target {
            Target::Action(a) | Target::WriteProperty(a) => {
                super::resources::affordance_uri(&self.thing, "actions", a)
            }
            Target::ReadProperty(p) => {
                super::resources::affordance_uri(&self.thing, "properties", p)
            }
        };
        let blocks = content::content(output, self.output_data.as_ref(), &uri);
        let mut result = json!({"content": blocks, "isError": false});
        if self.has_output_schema {
            result["structuredContent"] = if self.wrapped_output {
                json!({"output": output})
            } else {
                output.clone()
            };
        } else if output.is_object() && !content::is_explicit(output) {
            result["structuredContent"] = output.clone();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        serde_json::from_str(include_str!("../../../examples/weather_agent.td.json")).unwrap()
    }

    fn everything(_: Access, _: &str) -> bool {
        true
    }

    #[test]
    fn an_agent_s_actions_and_properties_become_tools() {
        let td = weather();
        let tools = tools([("urn:w", &td)], &everything);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "getWeather",
                "read_modelConfiguration",
                "write_modelConfiguration"
            ]
        );
        let get = &tools[0];
        assert_eq!(
            get.descriptor["inputSchema"]["required"],
            json!(["question", "interactionMode"])
        );
        // The string output is wrapped: MCP output schemas are objects.
        assert_eq!(
            get.descriptor["outputSchema"]["properties"]["output"]["type"],
            "string"
        );
        let r = get.success(Some(&json!("Sunny.")));
        assert_eq!(r["content"][0]["text"], "Sunny.");
        assert_eq!(r["structuredContent"], json!({"output": "Sunny."}));
        assert!(get.descriptor["description"]
            .as_str()
            .unwrap()
            .contains("Fetches weather"));
    }

    #[test]
    fn shared_names_get_the_thing_s_name_and_stay_within_64_characters() {
        let td = weather();
        let mut other = weather();
        other["title"] = "Weather Two".into();
        let tools = tools([("urn:a", &td), ("urn:b", &other)], &everything);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert!(names.contains(&"WeatherAgent_getWeather"), "{names:?}");
        assert!(names.contains(&"Weather_Two_getWeather"), "{names:?}");
        let same = tools_named([("urn:a", &td), ("urn:c", &td)]);
        assert!(
            same.contains(&"WeatherAgent_getWeather_2".to_owned()),
            "{same:?}"
        );
        let long = fit("x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, fit(format!("{}y", "x".repeat(100))));
        for name in same {
            assert!(name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        }
    }

    fn tools_named<'a>(things: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Vec<String> {
        tools(things, &everything)
            .into_iter()
            .map(|t| t.name)
            .collect()
    }

    #[test]
    fn rights_decide_which_tools_exist() {
        let td = weather();
        let consume_only = |a: Access, _: &str| a == Access::Consume;
        let names: Vec<String> = tools([("urn:w", &td)], &consume_only)
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["read_modelConfiguration"]);
        assert!(tools([("urn:w", &td)], &|_, _| false).is_empty());
    }

    #[test]
    fn non_object_inputs_are_wrapped_and_unwrapped() {
        let td =
            json!({"title": "T", "actions": {"say": {"input": {"type": "string"}}, "ping": {}}});
        let tools = tools([("urn:t", &td)], &everything);
        assert_eq!(
            tools[0].descriptor["inputSchema"]["required"],
            json!(["input"])
        );
        assert_eq!(tools[0].input(&json!({"input": "hi"})), Some(json!("hi")));
        assert_eq!(tools[1].input(&json!({})), None);
        assert!(tools[1].descriptor.get("outputSchema").is_none());
    }
}
