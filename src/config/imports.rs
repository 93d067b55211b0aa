//! `[imports]`: MCP servers and A2A agents the sidecar brings onto the bus,
//! each as a Thing of its own (see [`crate::imports`] and docs/imports.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImportsConfig {
    /// `[[imports.mcp]]`: MCP servers, by URL (Streamable HTTP) or started
    /// by the sidecar (stdio).
    pub mcp: Vec<ImportConfig>,
    /// `[[imports.a2a]]`: A2A agents, by their Agent Card's URL.
    pub a2a: Vec<ImportConfig>,
}

/// One upstream: an MCP server (`url` or `command`) or an A2A agent
/// (`card_url`). One struct for both lists, so that a misspelt key is
/// refused like anywhere else in the configuration (serde cannot refuse
/// unknown keys through a flattened part).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImportConfig {
    /// Names the upstream in logs, metrics, errors and the derived Thing ID:
    /// letters, digits, `.`, `_`, `-`; unique among all imports.
    pub name: String,
    /// MCP: the server's Streamable HTTP endpoint (`http://` or `https://`).
    pub url: Option<String>,
    /// MCP: or a program and its arguments, started by the sidecar and
    /// spoken to over stdio; restarted with back-off when it exits, stopped
    /// at shutdown.
    pub command: Vec<String>,
    /// MCP `command`: environment variables added to the sidecar's own.
    pub env: BTreeMap<String, String>,
    /// MCP `command`: its working directory (default: the sidecar's).
    pub cwd: Option<PathBuf>,
    /// A2A: where the Agent Card is (e.g.
    /// `https://agent.example/.well-known/agent-card.json`).
    pub card_url: Option<String>,
    /// `tool` (`lmos:Tool`) or `agent` (`lmos:Agent`); default: `tool` for
    /// MCP, `agent` for A2A.
    #[serde(rename = "type")]
    pub thing_type: Option<ThingType>,
    /// The Thing's ID; empty: `urn:lmos:import:{name}`, the same at every
    /// start.
    pub thing_id: String,
    /// Extra HTTP headers on every request to the upstream.
    pub headers: BTreeMap<String, String>,
    /// A bearer token sent as `Authorization: Bearer …`, read from this
    /// file (trimmed) …
    pub bearer_token_file: Option<PathBuf>,
    /// … or from this environment variable.
    pub bearer_token_env: Option<String>,
    /// PEM file of CA certificates trusted for `https://` upstreams (besides
    /// the built-in roots).
    pub tls_ca_file: Option<PathBuf>,
    /// How long connecting (TCP, TLS, the MCP handshake, the card) may
    /// take, in milliseconds.
    pub connect_timeout_ms: u64,
    /// How long a request may wait for the upstream's answer (a call: for
    /// its next sign of life, progress or a status update), in milliseconds.
    pub timeout_ms: u64,
    /// Largest JSON-RPC message (result, notification, SSE event, stdio
    /// line) read from the upstream, in bytes; a larger one fails that call.
    pub max_message_bytes: usize,
    /// Progress and status updates passed on per second per call; beyond,
    /// they are dropped (the final answer never is).
    pub max_updates_per_second: u32,
    /// How often the upstream's reachability is probed while it is up
    /// (MCP `ping`, A2A the card), in milliseconds.
    pub probe_interval_ms: u64,
    /// Back-off between reconnection attempts (and restarts of a
    /// `command`): from `retry_min_ms`, doubling up to `retry_max_ms`.
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThingType {
    Tool,
    Agent,
}

impl Default for ImportConfig {
    fn default() -> Self {
        ImportConfig {
            name: String::new(),
            url: None,
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            card_url: None,
            thing_type: None,
            thing_id: String::new(),
            headers: BTreeMap::new(),
            bearer_token_file: None,
            bearer_token_env: None,
            tls_ca_file: None,
            connect_timeout_ms: 10_000,
            timeout_ms: 60_000,
            max_message_bytes: 4 * 1024 * 1024,
            max_updates_per_second: 100,
            probe_interval_ms: 15_000,
            retry_min_ms: 500,
            retry_max_ms: 30_000,
        }
    }
}

/// Why `[imports]` cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImportsError {
    #[error("imports: `{0}` is not a valid name (letters, digits, `.`, `_`, `-`; 1 to 64)")]
    Name(String),
    #[error("imports: the name `{0}` is used twice")]
    Duplicate(String),
    #[error("imports `{0}`: an [[imports.mcp]] takes `url` or `command` (one of them), an [[imports.a2a]] `card_url`")]
    Where(String),
    #[error("imports `{0}`: `{1}` is not an http:// or https:// URL")]
    Url(String, String),
    #[error("imports `{0}`: give `bearer_token_file` or `bearer_token_env`, not both")]
    Token(String),
    #[error("imports `{0}`: the Thing ID `{1}` is used twice")]
    ThingId(String, String),
}

impl ImportsConfig {
    /// Checks what serde cannot: names, one location per upstream, URLs.
    pub fn check(&self) -> Result<(), ImportsError> {
        let mut names = std::collections::HashSet::new();
        let mut things = std::collections::HashSet::new();
        for (i, protocol) in self.all() {
            let name = &i.name;
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !valid {
                return Err(ImportsError::Name(name.clone()));
            }
            if !names.insert(name.clone()) {
                return Err(ImportsError::Duplicate(name.clone()));
            }
            if i.bearer_token_file.is_some() && i.bearer_token_env.is_some() {
                return Err(ImportsError::Token(name.clone()));
            }
            if !things.insert(i.thing_id()) {
                return Err(ImportsError::ThingId(name.clone(), i.thing_id()));
            }
            match (protocol, &i.url, i.command.is_empty(), &i.card_url) {
                (Protocol::Mcp, Some(url), true, None) => check_url(name, url)?,
                (Protocol::Mcp, None, false, None) => {}
                (Protocol::A2a, None, true, Some(url)) => check_url(name, url)?,
                _ => return Err(ImportsError::Where(name.clone())),
            }
        }
        Ok(())
    }

    /// Every upstream, with the protocol it speaks.
    pub fn all(&self) -> impl Iterator<Item = (&ImportConfig, Protocol)> {
        let mcp = self.mcp.iter().map(|i| (i, Protocol::Mcp));
        mcp.chain(self.a2a.iter().map(|i| (i, Protocol::A2a)))
    }
}

/// What an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Mcp,
    A2a,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Mcp => "mcp",
            Protocol::A2a => "a2a",
        }
    }
}

fn check_url(name: &str, url: &str) -> Result<(), ImportsError> {
    let ok = url.starts_with("http://") || url.starts_with("https://");
    if ok && url.parse::<hyper::Uri>().is_ok() {
        Ok(())
    } else {
        Err(ImportsError::Url(name.to_owned(), url.to_owned()))
    }
}

impl ImportConfig {
    /// The Thing's ID: as configured, or derived from the name.
    pub fn thing_id(&self) -> String {
        if self.thing_id.is_empty() {
            format!("urn:lmos:import:{}", self.name)
        } else {
            self.thing_id.clone()
        }
    }

    /// `lmos:Tool` or `lmos:Agent`: as configured, else by protocol.
    pub fn thing_type(&self, protocol: Protocol) -> ThingType {
        self.thing_type.unwrap_or(match protocol {
            Protocol::Mcp => ThingType::Tool,
            Protocol::A2a => ThingType::Agent,
        })
    }

    pub fn connect_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms)
    }

    /// The bearer token, read now from its file or variable.
    pub fn bearer_token(&self) -> std::io::Result<Option<String>> {
        if let Some(file) = &self.bearer_token_file {
            return Ok(Some(std::fs::read_to_string(file)?.trim().to_owned()));
        }
        if let Some(var) = &self.bearer_token_env {
            return std::env::var(var).map(Some).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the environment variable {var} is not set"),
                )
            });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<ImportsConfig, String> {
        let config: ImportsConfig = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        config.check().map_err(|e| e.to_string())?;
        Ok(config)
    }

    #[test]
    fn each_upstream_names_where_it_is_and_gets_a_stable_thing_id() {
        let config = parse(
            r#"
            [[mcp]]
            name = "calc"
            url = "http://127.0.0.1:8000/mcp"
            [[mcp]]
            name = "files"
            command = ["python3", "files.py"]
            type = "agent"
            [[a2a]]
            name = "travel"
            card_url = "https://travel.example/.well-known/agent-card.json"
            thing_id = "urn:acme:travel"
            "#,
        )
        .expect("valid");
        let all: Vec<_> = config
            .all()
            .map(|(i, p)| (i.thing_id(), p, i.thing_type(p)))
            .collect();
        assert_eq!(
            all,
            [
                (
                    "urn:lmos:import:calc".to_owned(),
                    Protocol::Mcp,
                    ThingType::Tool
                ),
                (
                    "urn:lmos:import:files".to_owned(),
                    Protocol::Mcp,
                    ThingType::Agent
                ),
                (
                    "urn:acme:travel".to_owned(),
                    Protocol::A2a,
                    ThingType::Agent
                ),
            ]
        );
        assert_eq!(config.mcp[0].timeout_ms, 60_000);
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_import() {
        let refused = [
            (
                r#"[[mcp]]
                name = "x"
                url = "http://a/mcp"
                command = ["y"]"#,
                "`x`",
            ),
            (
                r#"[[mcp]]
                name = "x""#,
                "`x`",
            ),
            (
                r#"[[a2a]]
                name = "x"
                url = "http://a/""#,
                "`x`",
            ),
            (
                r#"[[mcp]]
                name = "x"
                url = "ftp://a/""#,
                "ftp://a/",
            ),
            (
                r#"[[mcp]]
                name = "a b"
                url = "http://a/""#,
                "`a b`",
            ),
            (
                r#"[[mcp]]
                name = "x"
                url = "http://a/"
                [[a2a]]
                name = "x"
                card_url = "http://b/""#,
                "twice",
            ),
            (
                r#"[[mcp]]
                name = "x"
                url = "http://a/"
                timeout_msec = 5"#,
                "timeout_msec",
            ),
        ];
        for (text, says) in refused {
            let error = parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
