//! The text log's fields with every control character escaped.
//!
//! Log lines carry strings a client chose: a `?host=` thingID, a topic, a
//! principal's name, an error from a parser quoting its input. The default
//! text formatter writes `%`-formatted values and the message verbatim, so
//! `?host=urn:x%0A<forged line>%1B[2J` wrote a second, forged log line and
//! a terminal escape sequence. Here every field (message included) has its
//! control characters written as Rust escapes (`\n`, `\u{1b}`), so one
//! event is always one line and nothing reaches the terminal but text. The
//! JSON format escapes by itself.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// `FormatFields` for the text log: `message key=value ...`, as the default
/// formatter writes them, with control characters escaped.
#[derive(Debug, Default, Clone, Copy)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = Visitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_, '_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        let name = field.name();
        self.result = if name == "message" {
            write!(self.writer, "{separator}")
        } else {
            write!(self.writer, "{separator}{}=", name.trim_start_matches("r#"))
        }
        .and_then(|()| write_escaped(self.writer, value));
    }
}

impl Visit for Visitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, value);
        } else {
            // Quoted as the default formatter does.
            self.write(field, &format!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// `text` with each control character as its escape.
pub fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    if !text.chars().any(char::is_control) {
        return out.write_str(text);
    }
    for c in text.chars() {
        if c.is_control() {
            write!(out, "{}", c.escape_default())?;
        } else {
            out.write_char(c)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_client_string_cannot_forge_a_line_or_reach_the_terminal() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .finish();
        let hostile = "urn:x\n2026-01-01T00:00:00Z  INFO forged line\u{1b}[2J\r";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(thing = %hostile, quoted = hostile, "Refused {hostile}.");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        assert!(
            text.contains(r"thing=urn:x\n2026-01-01T00:00:00Z  INFO forged line\u{1b}[2J\r"),
            "{text}"
        );
        assert!(text.contains(r#"quoted="urn:x\n"#), "{text}");
        assert!(text.contains(r"Refused urn:x\n"), "{text}");
    }

    #[test]
    fn ordinary_text_is_written_as_is() {
        let mut out = String::new();
        write_escaped(&mut out, "urn:uuid:6f1d3a7a ünïcödé").unwrap();
        assert_eq!(out, "urn:uuid:6f1d3a7a ünïcödé");
    }
}
