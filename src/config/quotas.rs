//! `[quotas]`: per-principal shares of what the sidecar holds, below its
//! global caps, so one principal's load cannot deny another's (see
//! [`crate::quotas`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per-principal defaults and overrides; 0 = no per-principal limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasConfig {
    /// Invocations one principal may have running at once, over all its
    /// connections, HTTP calls and MQTT requests.
    pub running_invocations: u64,
    /// Property reads and writes of one principal waiting for an agent's
    /// answer (invocations count under `running_invocations`).
    pub pending_requests: u64,
    /// WebSocket subscriptions (events, all events, observed properties) one
    /// principal may hold over all its connections.
    pub subscriptions: u64,
    /// Thing Descriptions one principal may have registered.
    pub things: u64,
    /// Bytes of registered Thing Descriptions (as served, forms included)
    /// one principal may have.
    pub td_bytes: u64,
    /// MQTT retained messages one principal may have the broker keep (the
    /// last publisher of a topic owns its retained message).
    pub retained: u64,
    /// Bytes of those retained messages (topic, properties and payload).
    pub retained_bytes: u64,
    /// Bytes of the last wills (topic, properties and payload) of one
    /// principal's open MQTT connections.
    pub will_bytes: u64,
    /// Bytes the publications queued for one principal's kept MQTT
    /// sessions may take on disk, over all of them (counted as
    /// `mqtt.max_queued_bytes_per_session` counts them); past it their
    /// newest publications are not written to disk. An eighth of the
    /// default `mqtt.max_queued_bytes`.
    pub queued_bytes: u64,
    /// Finished invocations of one principal remembered for `queryAction`
    /// (and kept on disk); past it the principal's own oldest is forgotten,
    /// so another's flood cannot push them out of
    /// `requests.finished_invocations`.
    pub finished_invocations: u64,
    /// Per principal (`[quotas.principals.<name>]`): any of the keys above,
    /// instead of the default. Names must be `[[auth.principals]]` names or
    /// `anonymous`.
    pub principals: BTreeMap<String, QuotaOverrides>,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        QuotasConfig {
            running_invocations: 1_000,
            pending_requests: 1_000,
            subscriptions: 10_000,
            things: 1_000,
            td_bytes: 8 * 1024 * 1024,
            retained: 10_000,
            retained_bytes: 32 * 1024 * 1024,
            will_bytes: 16 * 1024 * 1024,
            queued_bytes: 256 * 1024 * 1024,
            finished_invocations: 100,
            principals: BTreeMap::new(),
        }
    }
}

/// One principal's own quotas; what is absent is the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_invocations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriptions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub things: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub td_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retained: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retained_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub will_bytes: Option<u64>,
    pub queued_bytes: Option<u64>,
    pub finished_invocations: Option<u64>,
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, PrincipalConfig};

    #[test]
    fn overrides_must_name_a_principal() {
        let text = "[[auth.principals]]\nname = \"bob\"\n[quotas.principals.bob]\nthings = 5\n[quotas.principals.anonymous]\nsubscriptions = 0\n";
        let c: Config = toml::from_str(text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.quotas.principals["bob"].things, Some(5));
        let mut typo = c.clone();
        typo.auth.principals = vec![PrincipalConfig {
            name: "bobby".into(),
            ..PrincipalConfig::default()
        }];
        let e = typo.validate().unwrap_err().to_string();
        assert!(
            e.contains("quotas.principals") && e.contains("`bob`"),
            "{e}"
        );
        let unknown = toml::from_str::<Config>("[quotas.principals.bob]\nthing = 5\n");
        assert!(unknown.unwrap_err().to_string().contains("thing"));
    }
}
