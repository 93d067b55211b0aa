//! MCP's shapes to the [`Upstream`](super::super::upstream) contract's
//! (sans-IO): an `initialize` result and the tool and resource lists to an
//! [`Offer`], a `tools/call` result to an [`Outcome`], a `resources/read`
//! result to a property's value.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::imports::upstream::{ActionOffer, Offer, Outcome, PropertyOffer, UpstreamError};

/// The longest TD description taken from a server's `instructions`, in
/// characters (they are meant for a model's prompt and can be long).
const MAX_DESCRIPTION: usize = 1000;

/// A readable resource: its property, and the URI `resources/read` takes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resource {
    pub property: PropertyOffer,
    pub uri: String,
}

/// The offer: the server's identity from its `initialize` result, its
/// tools as actions, its resources as properties.
pub(crate) fn offer(init: &Value, tools: &[Value], resources: &[Resource], target: &str) -> Offer {
    let info = &init["serverInfo"];
    let title = text(&info["title"])
        .or_else(|| text(&info["name"]))
        .unwrap_or(target);
    let description = text(&init["instructions"])
        .or_else(|| text(&info["description"]))
        .map(|d| d.chars().take(MAX_DESCRIPTION).collect());
    let mut extra = Map::new();
    extra.insert("lmos:protocol".into(), json!("mcp"));
    extra.insert("lmos:upstream".into(), json!(target));
    Offer {
        title: title.to_owned(),
        description,
        version: text(&info["version"]).map(str::to_owned),
        actions: tools.iter().filter_map(action).collect(),
        properties: resources.iter().map(|r| r.property.clone()).collect(),
        extra,
    }
}

/// A tool as an action; `None` for one without a name.
pub(crate) fn action(tool: &Value) -> Option<ActionOffer> {
    let name = text(&tool["name"])?;
    let annotations = &tool["annotations"];
    let mut extra = Map::new();
    if annotations.is_object() {
        // destructiveHint and openWorldHint have no TD term; kept whole so
        // that nothing the server said is lost on the way.
        extra.insert("mcp:annotations".into(), annotations.clone());
    }
    Some(ActionOffer {
        name: name.to_owned(),
        title: text(&tool["title"])
            .or_else(|| text(&annotations["title"]))
            .map(str::to_owned),
        description: text(&tool["description"]).map(str::to_owned),
        input: schema(&tool["inputSchema"]),
        output: schema(&tool["outputSchema"]),
        safe: annotations["readOnlyHint"].as_bool().unwrap_or(false),
        idempotent: annotations["idempotentHint"].as_bool().unwrap_or(false),
        extra,
    })
}

/// The listed resources as properties, each name unique (a repeated name
/// gets `_2`, `_3`, …). Whether a resource's value is text or base64 text
/// of a blob is guessed from its `mimeType` (the list does not say; a
/// read does): none, `text/*`, and JSON, XML, JavaScript, YAML are text.
pub(crate) fn resources(listed: &[Value]) -> Vec<Resource> {
    let mut taken = HashSet::new();
    let mut out = Vec::new();
    for resource in listed {
        let Some(uri) = text(&resource["uri"]) else {
            continue;
        };
        let base = text(&resource["name"]).unwrap_or(uri);
        let mut name = base.to_owned();
        let mut n = 1;
        while !taken.insert(name.clone()) {
            n += 1;
            name = format!("{base}_{n}");
        }
        let media = text(&resource["mimeType"]);
        let mut schema = json!({"type": "string"});
        if !media.is_none_or(is_text) {
            schema["contentEncoding"] = json!("base64");
        }
        let mut extra = Map::new();
        extra.insert("lmos:uri".into(), json!(uri));
        if let Some(media) = media {
            extra.insert("contentMediaType".into(), json!(media));
        }
        let property = PropertyOffer {
            name,
            title: text(&resource["title"]).map(str::to_owned),
            description: text(&resource["description"]).map(str::to_owned),
            schema,
            extra,
        };
        out.push(Resource {
            property,
            uri: uri.to_owned(),
        });
    }
    out
}

fn is_text(media: &str) -> bool {
    let media = media.to_ascii_lowercase();
    let essence = media.split(';').next().unwrap_or_default().trim();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/yaml"
                | "application/x-yaml"
        )
}

/// A `tools/call` result as an outcome.
///
/// `isError` is `Failed` with the text contents joined as `error`;
/// `structuredContent` is the output as it is; a single text content is
/// that text; anything else is `{"content": [...]}` with the contents as
/// MCP gives them: images and audio stay `{type, data, mimeType}` (base64
/// `data`), resource links and embedded resources likewise, so that a
/// consumer sees the same content an MCP client would, and no content
/// type is lost by a translation to TD terms the TD has no words for.
pub(crate) fn outcome(result: &Value) -> Result<Outcome, UpstreamError> {
    let Some(fields) = result.as_object() else {
        return Err(malformed("a tools/call result that is no object"));
    };
    let content = match fields.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err(malformed("a tools/call result whose content is no list")),
    };
    if fields.get("isError").and_then(Value::as_bool) == Some(true) {
        let texts: Vec<&str> = content.iter().filter_map(|c| text(&c["text"])).collect();
        let error = json!({"error": texts.join("\n"), "content": content});
        return Ok(Outcome::Failed(error));
    }
    if let Some(structured) = fields.get("structuredContent").filter(|v| !v.is_null()) {
        return Ok(Outcome::Completed(structured.clone()));
    }
    if let [only] = content.as_slice() {
        if only["type"] == "text" {
            if let Some(text) = text(&only["text"]) {
                return Ok(Outcome::Completed(json!(text)));
            }
        }
    }
    Ok(Outcome::Completed(json!({"content": content})))
}

/// A `resources/read` result as the property's value: the text, or the
/// blob's base64 text, of the content for `uri` (else the first).
pub(crate) fn read_value(result: &Value, uri: &str) -> Result<Value, UpstreamError> {
    let Some(contents) = result["contents"].as_array() else {
        return Err(malformed("a resources/read result without contents"));
    };
    let content = contents
        .iter()
        .find(|c| c["uri"] == uri)
        .or_else(|| contents.first())
        .ok_or_else(|| malformed("a resources/read result with no content"))?;
    text(&content["text"])
        .or_else(|| text(&content["blob"]))
        .map(|t| json!(t))
        .ok_or_else(|| malformed("a resource content with neither text nor blob"))
}

/// A schema the server gave, if it is one (an object).
fn schema(value: &Value) -> Option<Value> {
    value.is_object().then(|| value.clone())
}

fn text(value: &Value) -> Option<&str> {
    value.as_str()
}

fn malformed(what: &str) -> UpstreamError {
    UpstreamError::Malformed(what.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_becomes_an_action_with_its_schemas_and_hints() {
        let tool = json!({
            "name": "add", "description": "Adds two numbers.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
            "annotations": {"title": "Add", "readOnlyHint": true, "idempotentHint": true,
                            "destructiveHint": false, "openWorldHint": false}
        });
        let action = action(&tool).unwrap();
        assert_eq!(action.name, "add");
        assert_eq!(action.title.as_deref(), Some("Add"));
        assert_eq!(action.description.as_deref(), Some("Adds two numbers."));
        assert_eq!(action.input.unwrap()["properties"]["a"]["type"], "number");
        assert_eq!(
            action.output.unwrap()["properties"]["sum"]["type"],
            "number"
        );
        assert!(action.safe && action.idempotent);
        assert_eq!(action.extra["mcp:annotations"]["destructiveHint"], false);

        let bare = super::action(&json!({"name": "x", "inputSchema": "no"})).unwrap();
        assert!(!bare.safe && !bare.idempotent && bare.input.is_none() && bare.extra.is_empty());
        assert!(super::action(&json!({"title": "nameless"})).is_none());
    }

    #[test]
    fn resources_get_unique_names_and_a_schema_by_media_type() {
        let listed = [
            json!({"uri": "memo://greeting", "name": "greeting", "mimeType": "text/plain"}),
            json!({"uri": "memo://other", "name": "greeting", "title": "Other"}),
            json!({"uri": "file:///logo.png", "name": "logo", "mimeType": "image/png"}),
            json!({"name": "no uri"}),
        ];
        let found = resources(&listed);
        let names: Vec<&str> = found.iter().map(|r| r.property.name.as_str()).collect();
        assert_eq!(names, ["greeting", "greeting_2", "logo"]);
        assert_eq!(found[0].property.schema, json!({"type": "string"}));
        assert_eq!(found[0].property.extra["lmos:uri"], "memo://greeting");
        assert_eq!(found[0].property.extra["contentMediaType"], "text/plain");
        assert_eq!(found[1].uri, "memo://other");
        assert_eq!(
            found[2].property.schema,
            json!({"type": "string", "contentEncoding": "base64"})
        );
    }

    #[test]
    fn the_offer_names_the_server_and_truncates_its_instructions() {
        let init = json!({"serverInfo": {"name": "fixture", "version": "1.2"},
                          "instructions": "x".repeat(5000)});
        let tools = [json!({"name": "echo"})];
        let offer = offer(&init, &tools, &resources(&[]), "http://127.0.0.1/mcp");
        assert_eq!(offer.title, "fixture");
        assert_eq!(offer.version.as_deref(), Some("1.2"));
        assert_eq!(offer.description.unwrap().chars().count(), 1000);
        assert_eq!(offer.actions[0].name, "echo");
        assert_eq!(offer.extra["lmos:protocol"], "mcp");
        assert_eq!(offer.extra["lmos:upstream"], "http://127.0.0.1/mcp");
        let titled = json!({"serverInfo": {"name": "n", "title": "Nice"}});
        assert_eq!(super::offer(&titled, &[], &[], "t").title, "Nice");
    }

    #[test]
    fn call_results_become_outcomes() {
        let failed = json!({"isError": true, "content": [{"type": "text", "text": "boom"}]});
        assert_eq!(
            outcome(&failed).unwrap(),
            Outcome::Failed(
                json!({"error": "boom", "content": [{"type": "text", "text": "boom"}]})
            )
        );
        let structured = json!({"content": [{"type": "text", "text": "{\"sum\":3}"}],
                                "structuredContent": {"sum": 3}});
        assert_eq!(
            outcome(&structured).unwrap(),
            Outcome::Completed(json!({"sum": 3}))
        );
        let one = json!({"content": [{"type": "text", "text": "hi"}]});
        assert_eq!(outcome(&one).unwrap(), Outcome::Completed(json!("hi")));
        let image = json!({"type": "image", "data": "AAAA", "mimeType": "image/png"});
        let mixed = json!({"content": [{"type": "text", "text": "see"}, image]});
        assert_eq!(
            outcome(&mixed).unwrap(),
            Outcome::Completed(json!({"content": mixed["content"]}))
        );
        assert_eq!(
            outcome(&json!({})).unwrap(),
            Outcome::Completed(json!({"content": []}))
        );
        assert!(matches!(
            outcome(&json!([])),
            Err(UpstreamError::Malformed(_))
        ));
        assert!(outcome(&json!({"content": "x"})).is_err());
    }

    #[test]
    fn a_read_gives_the_text_or_the_blob() {
        let text = json!({"contents": [{"uri": "a", "text": "hello"}]});
        assert_eq!(read_value(&text, "a").unwrap(), json!("hello"));
        let blob = json!({"contents": [{"uri": "b", "blob": "AAE="}, {"uri": "a", "text": "x"}]});
        assert_eq!(read_value(&blob, "b").unwrap(), json!("AAE="));
        assert_eq!(read_value(&blob, "a").unwrap(), json!("x"));
        assert!(read_value(&json!({"contents": []}), "a").is_err());
        assert!(read_value(&json!({"contents": [{"uri": "a"}]}), "a").is_err());
    }
}
