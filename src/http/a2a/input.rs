//! What a message's parts make of an action's input. No I/O.
//!
//! A data part is the input (an object is merged with the text). A text
//! part fills a string input whole, or the one free-text member of an
//! object input when every other required member can be filled without
//! the caller: it has a `default`, a `const` or an `enum` of one value.
//! Only such actions offer `text/plain` on the Agent Card, so what the
//! card offers works.

use serde_json::{Map, Value};

/// How a text part becomes the input.
#[derive(Debug, Clone, PartialEq)]
pub enum TextFill {
    /// The input is a string: the text is the input.
    Whole,
    /// The text goes in `member`; `implied` fills the other required ones.
    Member {
        member: String,
        implied: Map<String, Value>,
    },
}

/// The member a text part fills: the object input's only string member
/// without an `enum` (a free-text question, not a choice).
fn text_member(input: &Value) -> Option<&str> {
    let properties = input["properties"].as_object()?;
    let mut free = properties.iter().filter(|(_, p)| {
        p["type"] == "string" && p.get("enum").is_none() && p.get("const").is_none()
    });
    match (free.next(), free.next()) {
        (Some((name, _)), None) => Some(name),
        _ => None,
    }
}

/// The value a member takes when nobody gives one.
fn implied(schema: &Value) -> Option<Value> {
    if let Some(d) = schema.get("default") {
        return Some(d.clone());
    }
    if let Some(c) = schema.get("const") {
        return Some(c.clone());
    }
    match schema["enum"].as_array().map(Vec::as_slice) {
        Some([only]) => Some(only.clone()),
        _ => None,
    }
}

/// Whether a string is a valid input: `type` string (or among its
/// types), a `oneOf`/`anyOf` branch that takes one, or no type at all.
fn takes_string(schema: &Value) -> bool {
    match &schema["type"] {
        Value::String(t) => t == "string",
        Value::Array(types) => types.iter().any(|t| t == "string"),
        _ => {
            let branches: Vec<&Value> = ["oneOf", "anyOf"]
                .iter()
                .filter_map(|k| schema[*k].as_array())
                .flatten()
                .collect();
            if branches.is_empty() {
                schema.get("properties").is_none() && schema.get("enum").is_none()
            } else {
                branches.into_iter().any(takes_string)
            }
        }
    }
}

/// Whether, and how, a text part can fill an action's input.
pub fn text_fill(input: Option<&Value>) -> Option<TextFill> {
    let schema = input?;
    if takes_string(schema) {
        return Some(TextFill::Whole);
    }
    let member = text_member(schema)?;
    let properties = schema["properties"].as_object()?;
    let mut implied_members = Map::new();
    for required in schema["required"].as_array().into_iter().flatten() {
        let Some(name) = required.as_str().filter(|n| *n != member) else {
            continue;
        };
        let value = properties.get(name).and_then(implied)?;
        implied_members.insert(name.to_owned(), value);
    }
    Some(TextFill::Member {
        member: member.to_owned(),
        implied: implied_members,
    })
}

/// Why the parts make no input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoInput {
    #[error("this skill does not take text/plain: send its input as a data part (the Agent Card's skill lists its input modes)")]
    TextNotTaken,
    #[error(
        "this skill does not take `{0}`: the Agent Card's skill lists the media types it takes"
    )]
    MediaType(String),
}

/// A file part (`raw` or `url`) of a media type the skill does not take
/// is refused, not passed on for the agent to ignore (A2A 1.0 §3.1.1,
/// ContentTypeNotSupportedError). A part without a media type is let
/// through: nothing says it is unsupported.
pub fn check_media_types(parts: &[Value], taken: &[String]) -> Result<(), NoInput> {
    let files = parts
        .iter()
        .filter(|p| p.get("raw").is_some() || p.get("url").is_some());
    for part in files {
        let Some(media) = part["mediaType"].as_str() else {
            continue;
        };
        let bare = media.split(';').next().unwrap_or(media).trim();
        let taken_here = taken.iter().any(|t| {
            t.eq_ignore_ascii_case(bare)
                || t == "*/*"
                || t.strip_suffix("/*").is_some_and(|major| {
                    bare.split('/')
                        .next()
                        .is_some_and(|m| m.eq_ignore_ascii_case(major))
                })
        });
        if !taken_here {
            return Err(NoInput::MediaType(bare.to_owned()));
        }
    }
    Ok(())
}

/// The LMOS input the parts (1.0 shape) carry.
pub fn input(parts: &[Value], schema: Option<&Value>) -> Result<Option<Value>, NoInput> {
    let data = parts.iter().find_map(|p| p.get("data"));
    let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    let text = (!texts.is_empty()).then(|| texts.join("\n"));
    let fill = text_fill(schema);
    Ok(match (data, text, fill) {
        (_, Some(t), Some(TextFill::Whole)) => Some(Value::String(t)),
        (Some(Value::Object(d)), text, Some(TextFill::Member { member, implied })) => {
            let mut d = d.clone();
            if let Some(t) = text {
                d.entry(member).or_insert(Value::String(t));
            }
            for (k, v) in implied {
                d.entry(k).or_insert(v);
            }
            Some(Value::Object(d))
        }
        (Some(d), _, _) => Some(d.clone()),
        (None, Some(t), Some(TextFill::Member { member, implied })) => {
            let mut d = implied;
            d.insert(member, Value::String(t));
            Some(Value::Object(d))
        }
        (None, Some(_), None) if schema.is_some() => return Err(NoInput::TextNotTaken),
        (None, Some(t), None) => Some(Value::String(t)),
        (None, None, _) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather(default: bool) -> Value {
        let mut mode = json!({"type": "string", "enum": ["text", "voice"]});
        if default {
            mode["default"] = "text".into();
        }
        json!({"type": "object", "properties": {"question": {"type": "string"}, "interactionMode": mode},
            "required": ["question", "interactionMode"]})
    }

    #[test]
    fn a_text_part_fills_only_an_input_it_can_fill() {
        let text = [json!({"text": "Rain in Oslo?"})];
        assert_eq!(
            input(&text, Some(&weather(false))),
            Err(NoInput::TextNotTaken)
        );
        assert_eq!(text_fill(Some(&weather(false))), None);
        assert_eq!(
            input(&text, Some(&weather(true))),
            Ok(Some(
                json!({"question": "Rain in Oslo?", "interactionMode": "text"})
            ))
        );
        let both = [
            json!({"text": "q"}),
            json!({"data": {"interactionMode": "voice"}}),
        ];
        assert_eq!(
            input(&both, Some(&weather(true))),
            Ok(Some(json!({"interactionMode": "voice", "question": "q"})))
        );
        assert_eq!(input(&[], None), Ok(None));
        let string = json!({"type": "string"});
        assert_eq!(
            input(&text, Some(&string)),
            Ok(Some(json!("Rain in Oslo?")))
        );
        let any = json!({"oneOf": [{"type": "string"}, {"type": "object"}]});
        assert_eq!(input(&text, Some(&any)), Ok(Some(json!("Rain in Oslo?"))));
        let png = [json!({"raw": "iVBO", "mediaType": "image/png"})];
        let json_only = ["application/json".to_owned()];
        assert_eq!(
            check_media_types(&png, &json_only),
            Err(NoInput::MediaType("image/png".into()))
        );
        assert_eq!(check_media_types(&png, &["image/*".to_owned()]), Ok(()));
        assert_eq!(check_media_types(&text, &json_only), Ok(()));
        let one = json!({"type": "object", "properties": {"q": {"type": "string"},
            "unit": {"type": "string", "enum": ["C"]}}, "required": ["q", "unit"]});
        assert_eq!(
            input(&text, Some(&one)),
            Ok(Some(json!({"q": "Rain in Oslo?", "unit": "C"})))
        );
    }
}
