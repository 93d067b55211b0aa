//! A2A parts read in either wire shape (pure): 1.0 (`{"text"}`, `{"data"}`,
//! `{"raw"}`, `{"url"}` with `mediaType`, `filename`) and 0.3 (`kind`
//! `text`, `data`, `file` with `bytes` or `uri`, `mimeType`, `name`).

use serde_json::{json, Map, Value};

use crate::imports::upstream::Update;

/// One part's content, whichever wire it came on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Content<'a> {
    Text(&'a str),
    Data(&'a Value),
    /// Base64 of the file's bytes.
    Raw(&'a str),
    Url(&'a str),
    /// A part we cannot read (skipped).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part<'a> {
    pub content: Content<'a>,
    pub media_type: Option<&'a str>,
    pub filename: Option<&'a str>,
}

/// Reads one part.
pub fn part(value: &Value) -> Part<'_> {
    let media_type = value.get("mediaType").and_then(Value::as_str);
    let filename = value.get("filename").and_then(Value::as_str);
    match value.get("kind").and_then(Value::as_str) {
        Some("text") => plain(text(value)),
        Some("data") => plain(value.get("data").map_or(Content::Unknown, Content::Data)),
        Some("file") => file_0_3(value.get("file")),
        Some(_) => plain(Content::Unknown),
        None => {
            let content = if let Some(t) = value.get("text").and_then(Value::as_str) {
                Content::Text(t)
            } else if let Some(d) = value.get("data") {
                Content::Data(d)
            } else if let Some(r) = value.get("raw").and_then(Value::as_str) {
                Content::Raw(r)
            } else if let Some(u) = value.get("url").and_then(Value::as_str) {
                Content::Url(u)
            } else {
                Content::Unknown
            };
            Part {
                content,
                media_type,
                filename,
            }
        }
    }
}

fn plain(content: Content<'_>) -> Part<'_> {
    Part {
        content,
        media_type: None,
        filename: None,
    }
}

fn text(value: &Value) -> Content<'_> {
    value
        .get("text")
        .and_then(Value::as_str)
        .map_or(Content::Unknown, Content::Text)
}

fn file_0_3(file: Option<&Value>) -> Part<'_> {
    let Some(file) = file else {
        return plain(Content::Unknown);
    };
    let content = if let Some(b) = file.get("bytes").and_then(Value::as_str) {
        Content::Raw(b)
    } else if let Some(u) = file.get("uri").and_then(Value::as_str) {
        Content::Url(u)
    } else {
        Content::Unknown
    };
    Part {
        content,
        media_type: file.get("mimeType").and_then(Value::as_str),
        filename: file.get("name").and_then(Value::as_str),
    }
}

/// The parts of a message or an artifact (`parts`, any shape).
pub fn parts_of(holder: Option<&Value>) -> Vec<Part<'_>> {
    let list = holder
        .and_then(|h| h.get("parts"))
        .and_then(Value::as_array);
    list.map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .map(part)
        .collect()
}

/// A streamed chunk: text as text, data as JSON, file bytes as base64, a
/// file's URL as `text/uri-list`.
pub fn chunk(part: &Part<'_>) -> Option<Update> {
    let media = |default: &str| Some(part.media_type.unwrap_or(default).to_owned());
    let (data, content_type, base64) = match part.content {
        Content::Text(t) => (json!(t), media("text/plain"), false),
        Content::Data(d) => (d.clone(), media("application/json"), false),
        Content::Raw(r) => (json!(r), media("application/octet-stream"), true),
        Content::Url(u) => (json!(u), Some("text/uri-list".to_owned()), false),
        Content::Unknown => return None,
    };
    Some(Update::Chunk {
        data,
        content_type,
        base64,
    })
}

/// The text parts joined (`separator` between them), if there are any.
pub fn text_of(parts: &[Part<'_>], separator: &str) -> Option<String> {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p.content {
            Content::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join(separator))
}

/// What a message answers: its text (parts joined by newlines), or its one
/// data part's value, or `{"parts": [...]}` (1.0 shape) when they mix.
pub fn message_value(parts: &[Part<'_>]) -> Value {
    if parts.is_empty() {
        return Value::Null;
    }
    if parts.iter().all(|p| matches!(p.content, Content::Text(_))) {
        return json!(text_of(parts, "\n").unwrap_or_default());
    }
    if let [Part {
        content: Content::Data(d),
        ..
    }] = parts
    {
        return (*d).clone();
    }
    json!({ "parts": parts.iter().map(normalized).collect::<Vec<_>>() })
}

/// A part in the 1.0 shape (how mixed outputs are given to LMOS).
pub fn normalized(part: &Part<'_>) -> Value {
    let mut out = Map::new();
    match part.content {
        Content::Text(t) => out.insert("text".into(), json!(t)),
        Content::Data(d) => out.insert("data".into(), d.clone()),
        Content::Raw(r) => out.insert("raw".into(), json!(r)),
        Content::Url(u) => out.insert("url".into(), json!(u)),
        Content::Unknown => None,
    };
    if let Some(m) = part.media_type {
        out.insert("mediaType".into(), json!(m));
    }
    if let Some(f) = part.filename {
        out.insert("filename".into(), json!(f));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_read_alike() {
        let v1 = [
            json!({"text": "hi"}),
            json!({"data": {"a": 1}}),
            json!({"raw": "AAE=", "mediaType": "image/png", "filename": "x.png"}),
            json!({"url": "https://x/y.pdf", "mediaType": "application/pdf"}),
        ];
        let v03 = [
            json!({"kind": "text", "text": "hi"}),
            json!({"kind": "data", "data": {"a": 1}}),
            json!({"kind": "file", "file": {"bytes": "AAE=", "mimeType": "image/png", "name": "x.png"}}),
            json!({"kind": "file", "file": {"uri": "https://x/y.pdf", "mimeType": "application/pdf"}}),
        ];
        for (a, b) in v1.iter().zip(v03.iter()) {
            assert_eq!(part(a), part(b), "{a} {b}");
        }
        assert_eq!(part(&v1[2]).content, Content::Raw("AAE="));
        assert_eq!(part(&v1[2]).filename, Some("x.png"));
    }

    #[test]
    fn unreadable_parts_are_unknown() {
        for p in [
            json!(null),
            json!(3),
            json!({}),
            json!({"kind": "text"}),
            json!({"kind": "video"}),
            json!({"kind": "file"}),
        ] {
            assert_eq!(part(&p).content, Content::Unknown, "{p}");
            assert_eq!(chunk(&part(&p)), None);
        }
    }

    #[test]
    fn chunks_carry_media_types() {
        let text = chunk(&part(&json!({"text": "a"}))).unwrap();
        assert_eq!(
            text,
            Update::Chunk {
                data: json!("a"),
                content_type: Some("text/plain".into()),
                base64: false
            }
        );
        let md = chunk(&part(&json!({"text": "# a", "mediaType": "text/markdown"}))).unwrap();
        assert!(
            matches!(md, Update::Chunk { content_type: Some(ref c), .. } if c == "text/markdown")
        );
        let data = chunk(&part(&json!({"kind": "data", "data": [1]}))).unwrap();
        assert_eq!(
            data,
            Update::Chunk {
                data: json!([1]),
                content_type: Some("application/json".into()),
                base64: false
            }
        );
        let raw = chunk(&part(&json!({"raw": "AAE="}))).unwrap();
        assert_eq!(
            raw,
            Update::Chunk {
                data: json!("AAE="),
                content_type: Some("application/octet-stream".into()),
                base64: true
            }
        );
    }

    #[test]
    fn a_messages_value() {
        let m = json!({"parts": [{"text": "a"}, {"kind": "text", "text": "b"}]});
        assert_eq!(message_value(&parts_of(Some(&m))), json!("a\nb"));
        let d = json!({"parts": [{"data": {"x": 1}}]});
        assert_eq!(message_value(&parts_of(Some(&d))), json!({"x": 1}));
        let mixed = json!({"parts": [{"text": "a"}, {"raw": "AA==", "mediaType": "image/png"}]});
        assert_eq!(
            message_value(&parts_of(Some(&mixed))),
            json!({"parts": [{"text": "a"}, {"raw": "AA==", "mediaType": "image/png"}]})
        );
        assert_eq!(message_value(&parts_of(None)), Value::Null);
        assert_eq!(
            message_value(&parts_of(Some(&json!({"parts": "no"})))),
            Value::Null
        );
    }
}
