//! An LMOS output as MCP content blocks: text, and the images, audio and
//! embedded resources a TD's output can describe. No I/O.
//!
//! What decides, first match wins:
//! 1. **Several items at once**: an output object with a `content` list
//!    whose every item is an MCP content block (`text`, `image`, `audio`,
//!    `resource`, `resource_link`, as MCP writes them) is that content, in
//!    its order. An imported MCP server's mixed results already have this
//!    shape, so they pass through unchanged.
//! 2. **Media output**: a string output whose schema (the TD action's
//!    `output`, or the property's) says `"contentEncoding": "base64"` and a
//!    `contentMediaType` is one block: `image/*` an `image`, `audio/*` an
//!    `audio`, any other type an embedded `resource` with a `blob`.
//! 3. **Media members**: an object output whose schema's `properties` give
//!    some members such a media schema: each of those members a block (in
//!    the schema's order), the other members one `text` block before them.
//! 4. Anything else is one `text` block: a string as it is, JSON as JSON.

use base64::Engine;
use serde_json::{json, Map, Value};

/// More blocks than this in one result are not a client's content but a
/// mistake (or an attack on its memory): the output then reads as text.
const MAX_ITEMS: usize = 64;

/// The content blocks for `output`, described by `schema` if the TD gives
/// one; `uri` names an embedded binary that is neither image nor audio.
pub fn content(output: &Value, schema: Option<&Value>, uri: &str) -> Vec<Value> {
    if let Some(items) = explicit(output) {
        return items;
    }
    if let Some(block) = schema.and_then(|s| media(output, s, uri)) {
        return vec![block];
    }
    if let Some(blocks) = schema.and_then(|s| media_members(output, s, uri)) {
        return blocks;
    }
    vec![text(output)]
}

/// Whether [`content`] takes `output` as a list of blocks given whole (the
/// structured result then repeats none of it unless a schema asks).
pub fn is_explicit(output: &Value) -> bool {
    explicit(output).is_some()
}

fn text(output: &Value) -> Value {
    let text = match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({"type": "text", "text": text})
}

fn explicit(output: &Value) -> Option<Vec<Value>> {
    let items = output.get("content")?.as_array()?;
    if items.is_empty() || items.len() > MAX_ITEMS || !items.iter().all(is_block) {
        return None;
    }
    Some(items.clone())
}

fn string(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(Value::is_string)
}

fn base64_text(v: &Value, key: &str) -> bool {
    v.get(key)
        .and_then(Value::as_str)
        .is_some_and(|s| base64::engine::general_purpose::STANDARD.decode(s).is_ok())
}

/// An MCP content block with the members its type requires.
fn is_block(item: &Value) -> bool {
    match item["type"].as_str() {
        Some("text") => string(item, "text"),
        Some("image" | "audio") => base64_text(item, "data") && string(item, "mimeType"),
        Some("resource_link") => string(item, "uri") && string(item, "name"),
        Some("resource") => {
            let r = &item["resource"];
            string(r, "uri") && (string(r, "text") || base64_text(r, "blob"))
        }
        _ => false,
    }
}

/// The media type of a schema that describes base64 binary.
fn media_type(schema: &Value) -> Option<&str> {
    let encoding = schema["contentEncoding"].as_str()?;
    if !encoding.eq_ignore_ascii_case("base64") {
        return None;
    }
    schema["contentMediaType"].as_str()
}

/// One block for a base64 string described by `schema`.
fn media(output: &Value, schema: &Value, uri: &str) -> Option<Value> {
    let data = output.as_str()?;
    let mime = media_type(schema)?;
    if base64::engine::general_purpose::STANDARD
        .decode(data)
        .is_err()
    {
        // Not what the TD promised: the client gets the text, not a
        // broken image.
        return None;
    }
    Some(media_block(mime, data.to_owned(), uri))
}

/// The block for base64 `data` of type `mime`: `image/*` an `image`,
/// `audio/*` an `audio`, anything else an embedded `resource` at `uri`.
pub fn media_block(mime: &str, data: String, uri: &str) -> Value {
    let essence = mime.to_ascii_lowercase();
    if essence.starts_with("image/") {
        json!({"type": "image", "data": data, "mimeType": mime})
    } else if essence.starts_with("audio/") {
        json!({"type": "audio", "data": data, "mimeType": mime})
    } else {
        json!({"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": data}})
    }
}

fn media_members(output: &Value, schema: &Value, uri: &str) -> Option<Vec<Value>> {
    let members = output.as_object()?;
    let described = schema["properties"].as_object()?;
    let mut blocks = Vec::new();
    let mut rest: Map<String, Value> = members.clone();
    for (name, member_schema) in described {
        let Some(value) = members.get(name) else {
            continue;
        };
        let member_uri = format!("{uri}#{name}");
        if let Some(block) = media(value, member_schema, &member_uri) {
            blocks.push(block);
            rest.remove(name);
        }
    }
    if blocks.is_empty() {
        return None;
    }
    if !rest.is_empty() {
        let words = match (rest.len(), rest.values().next()) {
            (1, Some(Value::String(s))) => json!(s),
            _ => Value::Object(rest),
        };
        blocks.insert(0, text(&words));
    }
    Some(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

    fn image_schema(mime: &str) -> Value {
        json!({"type": "string", "contentEncoding": "base64", "contentMediaType": mime})
    }

    #[test]
    fn a_base64_output_with_a_media_type_is_an_image_or_audio() {
        let image = content(&json!(PNG), Some(&image_schema("image/png")), "u");
        assert_eq!(
            image,
            [json!({"type": "image", "data": PNG, "mimeType": "image/png"})]
        );
        let audio = content(&json!("UklGRg=="), Some(&image_schema("audio/wav")), "u");
        assert_eq!(audio[0]["type"], "audio");
        assert_eq!(audio[0]["mimeType"], "audio/wav");
        let pdf = content(
            &json!("JVBERi0="),
            Some(&image_schema("application/pdf")),
            "lmos://t",
        );
        assert_eq!(
            pdf[0],
            json!({"type": "resource", "resource": {"uri": "lmos://t", "mimeType": "application/pdf", "blob": "JVBERi0="}})
        );
    }

    #[test]
    fn what_the_schema_does_not_promise_stays_text() {
        // Not base64: the client gets the words, not a broken image.
        let broken = content(&json!("not base64!"), Some(&image_schema("image/png")), "u");
        assert_eq!(broken, [json!({"type": "text", "text": "not base64!"})]);
        let plain = content(&json!({"a": 1}), None, "u");
        assert_eq!(plain, [json!({"type": "text", "text": "{\"a\":1}"})]);
        let no_encoding = json!({"type": "string", "contentMediaType": "image/png"});
        assert_eq!(
            content(&json!(PNG), Some(&no_encoding), "u")[0]["type"],
            "text"
        );
    }

    #[test]
    fn media_members_become_blocks_after_the_words() {
        let schema = json!({"type": "object", "properties": {
            "transcript": {"type": "string"},
            "speech": image_schema("audio/ogg"),
        }});
        let output = json!({"transcript": "Sunny in Oslo.", "speech": "T2dnUw=="});
        let blocks = content(&output, Some(&schema), "u");
        assert_eq!(blocks[0], json!({"type": "text", "text": "Sunny in Oslo."}));
        assert_eq!(blocks[1]["type"], "audio");
        assert_eq!(blocks[1]["data"], "T2dnUw==");
        assert_eq!(blocks.len(), 2);
    }

    #[test]
    fn a_content_list_is_taken_whole_when_every_item_is_a_block() {
        let items = json!([
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://r", "mimeType": "application/json", "text": "{}"}},
            {"type": "resource_link", "uri": "test://l", "name": "l"},
        ]);
        let output = json!({"content": items});
        assert!(is_explicit(&output));
        assert_eq!(
            content(&output, None, "u"),
            items.as_array().unwrap().clone()
        );
        // One bad item and the whole is text: no half-taken lists.
        let bad = json!({"content": [{"type": "image", "data": PNG}]});
        assert!(!is_explicit(&bad));
        assert_eq!(content(&bad, None, "u")[0]["type"], "text");
        let empty = json!({"content": []});
        assert!(!is_explicit(&empty));
    }
}
