//! `invoke --save FILE`: a streamed answer's data, the chunks put together
//! (the WeatherAgent's voice: a WAV file), written once the invocation
//! ends. No I/O until [`Saving::write`].

use std::path::PathBuf;

use serde_json::Value;

use super::ClientError;
use crate::lmos::stream::Reassembler;

/// What `invoke --save` collects.
pub struct Saving {
    path: PathBuf,
    reader: Reassembler,
    media: Option<String>,
}

impl Saving {
    pub fn new(path: PathBuf) -> Saving {
        Saving {
            path,
            reader: Reassembler::default(),
            media: None,
        }
    }

    /// One message of the invocation.
    pub fn feed(&mut self, m: &Value) {
        if self.media.is_none() {
            self.media = m["stream"]["contentType"].as_str().map(str::to_owned);
        }
        // A malformed chunk is shown by the printed line; it adds nothing.
        let _ = self.reader.feed(m);
    }

    /// Writes what came; says what it wrote.
    pub fn write(self) -> Result<String, ClientError> {
        std::fs::write(&self.path, &self.reader.payload).map_err(|e| {
            ClientError::Output(format!("cannot write {}: {e}", self.path.display()))
        })?;
        let gaps = match self.reader.gaps.len() {
            0 => String::new(),
            n => format!(", {n} gaps"),
        };
        Ok(format!(
            "Saved {} bytes of {} ({} chunks{gaps}) to {}.",
            self.reader.payload.len(),
            self.media.as_deref().unwrap_or("data"),
            self.reader.chunks,
            self.path.display()
        ))
    }
}
