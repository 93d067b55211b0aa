//! Binary stream chunks (audio, images) as MCP content (issue 48 item 3):
//! a tool call whose agent streams binary data answers with it as `audio`,
//! `image` or embedded `resource` blocks after the output's own, one block
//! per media type in the order first streamed. Held until the call ends,
//! within `mcp.max_media_bytes` per call and `mcp.max_total_media_bytes`
//! for every call together; past either, what was held is let go and the
//! result says so in a `text` block instead. No I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::Engine;
use serde_json::{json, Value};

/// Media held by every call together.
#[derive(Debug)]
pub struct MediaBudget {
    per_call: usize,
    total: usize,
    held: Arc<AtomicUsize>,
}

impl MediaBudget {
    pub fn new(per_call: usize, total: usize) -> MediaBudget {
        MediaBudget {
            per_call,
            total,
            held: Arc::default(),
        }
    }

    /// A collector for one call.
    pub fn collector(&self) -> Media {
        Media {
            blocks: Vec::new(),
            held: 0,
            per_call: self.per_call,
            total: self.total,
            all: self.held.clone(),
            over: None,
        }
    }

    /// What every call holds now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// One call's streamed media.
#[derive(Debug)]
pub struct Media {
    /// Each media type's bytes, in the order first streamed.
    blocks: Vec<(String, Vec<u8>)>,
    held: usize,
    per_call: usize,
    total: usize,
    all: Arc<AtomicUsize>,
    /// Why the media was let go: the bytes streamed so far.
    over: Option<usize>,
}

impl Media {
    /// Takes `status`'s chunk if it is binary; `true` when it was (it is
    /// then no progress text).
    pub fn take(&mut self, status: &Value) -> bool {
        let Some(stream) = status.get("stream") else {
            return false;
        };
        if stream["contentEncoding"] != "base64" {
            return false;
        }
        let Some(data) = stream["data"].as_str() else {
            return true;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            return true;
        };
        if let Some(streamed) = &mut self.over {
            *streamed += bytes.len();
            return true;
        }
        let fits_call = self.held + bytes.len() <= self.per_call;
        let before = self.all.fetch_add(bytes.len(), Ordering::Relaxed);
        if !fits_call || before + bytes.len() > self.total {
            self.all.fetch_sub(bytes.len(), Ordering::Relaxed);
            self.over = Some(self.held + bytes.len());
            self.release();
            return true;
        }
        self.held += bytes.len();
        let media = stream["contentType"]
            .as_str()
            .unwrap_or("application/octet-stream");
        match self.blocks.iter_mut().find(|(m, _)| m == media) {
            Some((_, held)) => held.extend_from_slice(&bytes),
            None => self.blocks.push((media.to_owned(), bytes)),
        }
        true
    }

    /// The result's blocks for what was streamed; `uri` names an embedded
    /// resource that is neither image nor audio.
    pub fn blocks(&self, uri: &str) -> Vec<Value> {
        if let Some(streamed) = self.over {
            let text = format!(
                "The agent streamed {streamed} bytes of media or more, past mcp.max_media_bytes ({}) or what all calls may hold (mcp.max_total_media_bytes, {}); it is not in this result.",
                self.per_call, self.total
            );
            return vec![json!({"type": "text", "text": text})];
        }
        self.blocks
            .iter()
            .map(|(media, bytes)| {
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                super::content::media_block(media, data, uri)
            })
            .collect()
    }

    fn release(&mut self) {
        self.all.fetch_sub(self.held, Ordering::Relaxed);
        self.held = 0;
        self.blocks = Vec::new();
    }
}

impl Drop for Media {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seq: u64, media: &str, bytes: &[u8]) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        json!({"status": "running", "stream": {"seq": seq, "data": data,
            "contentType": media, "contentEncoding": "base64"}})
    }

    #[test]
    fn binary_chunks_become_one_block_per_media_type_text_chunks_do_not() {
        let budget = MediaBudget::new(100, 1000);
        let mut media = budget.collector();
        assert!(!media.take(&json!({"status": "running", "stream": {"seq": 0, "data": "The "}})));
        assert!(!media.take(&json!({"status": "running", "output": {"progress": "x"}})));
        assert!(media.take(&chunk(1, "audio/wav", b"RIFF")));
        assert!(media.take(&chunk(2, "image/png", b"PNG")));
        assert!(media.take(&chunk(3, "audio/wav", b"data")));
        assert!(media.take(&chunk(4, "application/pdf", b"%PDF")));
        assert_eq!(budget.held(), 15);
        let blocks = media.blocks("lmos://t/actions/a");
        assert_eq!(
            blocks[0],
            json!({"type": "audio", "data": "UklGRmRhdGE=", "mimeType": "audio/wav"})
        );
        assert_eq!(blocks[1]["type"], "image");
        assert_eq!(blocks[2]["type"], "resource");
        assert_eq!(blocks[2]["resource"]["uri"], "lmos://t/actions/a");
        drop(media);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn past_either_budget_the_media_is_let_go_and_the_result_says_so() {
        let budget = MediaBudget::new(10, 15);
        let mut a = budget.collector();
        assert!(a.take(&chunk(0, "audio/wav", &[0; 8])));
        assert!(a.take(&chunk(1, "audio/wav", &[0; 8])));
        assert_eq!(budget.held(), 0, "over its own budget: let go");
        let text = a.blocks("u")[0]["text"].as_str().unwrap().to_owned();
        assert!(text.contains("16 bytes"), "{text}");
        let mut b = budget.collector();
        let mut c = budget.collector();
        assert!(b.take(&chunk(0, "audio/wav", &[0; 10])));
        assert!(c.take(&chunk(0, "audio/wav", &[0; 6])));
        assert_eq!(c.blocks("u")[0]["type"], "text", "over the total");
        assert_eq!(b.blocks("u")[0]["type"], "audio");
        assert_eq!(budget.held(), 10);
    }
}
