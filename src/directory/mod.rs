//! The Thing Description directory: agents register their TDs (Agent
//! Description Format), the sidecar validates them, rewrites their forms so
//! every affordance is reachable through the sidecar, and serves them the
//! WoT Discovery way. No I/O here; `http/directory.rs` serves it.

pub mod affordances;
mod budget;
mod durable;
pub mod forms;
mod service;
pub mod validate;

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

pub use budget::TdLimits;
pub use forms::Endpoints;

/// For tests: endpoints on host `h` (WebSocket and HTTP on 8080, MQTT on
/// 1883), value topics on, no extra schemes.
#[cfg(test)]
pub(crate) fn test_endpoints(topics: crate::topics::Topics) -> Endpoints {
    Endpoints {
        websocket: "ws://h:8080/lmos".into(),
        mqtt: "mqtt://h:1883".into(),
        http: "http://h:8080".into(),
        topics,
        value_topics: true,
        http_schemes: Vec::new(),
        mqtt_password: false,
    }
}
pub use service::DirectoryService;
pub use validate::{TdError, TdValidator, Violation};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    #[error(transparent)]
    Td(#[from] TdError),
    #[error("the Thing Description's `id` is `{found}`, but it was sent for `{expected}`")]
    IdMismatch { expected: String, found: String },
    #[error("an anonymous Thing Description must not have an `id`; use PUT /things/{{id}} to register `{0}`")]
    HasId(String),
    #[error("no Thing Description with id `{0}`")]
    NotFound(String),
    #[error("the Thing Description has {size} bytes; this directory accepts at most {max} (discovery.max_td_size)")]
    TooLarge { size: usize, max: usize },
    #[error("the directory holds {total} bytes of Thing Descriptions, as many as it may (discovery.max_total_td_bytes = {max}); delete some first")]
    Full { total: u64, max: u64 },
    #[error(transparent)]
    Quota(#[from] crate::quotas::Exceeded),
}

impl DirectoryError {
    /// The LMOS error kind for a TD refused over WebSocket or MQTT (LMOS
    /// has no 507: a full directory is a limit reached, 429).
    pub fn problem_kind(&self) -> crate::lmos::ProblemKind {
        use crate::lmos::ProblemKind;
        match self {
            DirectoryError::TooLarge { .. } => ProblemKind::MessageTooLarge,
            DirectoryError::Full { .. } | DirectoryError::Quota(_) => ProblemKind::TooManyRequests,
            DirectoryError::NotFound(_) => ProblemKind::NotFound,
            _ => ProblemKind::InvalidData,
        }
    }
}

/// What a registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Created,
    Updated,
}

/// The registered TDs, as served (forms rewritten), by id.
#[derive(Debug)]
pub struct Directory {
    things: BTreeMap<String, Value>,
    /// Things registered elsewhere, learnt from their retained TD on the
    /// bus (another sidecar's, through the cluster, or an MQTT agent's).
    /// A registration here takes precedence over them.
    remote: HashSet<String>,
    validator: TdValidator,
    endpoints: Endpoints,
    budget: budget::Budget,
}

impl Directory {
    pub fn new(endpoints: Endpoints) -> Directory {
        Directory {
            things: BTreeMap::new(),
            remote: HashSet::new(),
            validator: TdValidator::new(),
            endpoints,
            budget: budget::Budget::default(),
        }
    }

    /// Byte limits on what is registered, and per-principal quotas.
    pub fn with_limits(
        mut self,
        limits: TdLimits,
        quotas: std::sync::Arc<crate::quotas::Quotas>,
        metrics: crate::telemetry::metrics::Metrics,
    ) -> Directory {
        self.budget = budget::Budget::new(limits, quotas, metrics);
        self
    }

    /// Where consumers reach this sidecar, as its forms say.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    pub fn validator(&self) -> &TdValidator {
        &self.validator
    }

    /// Registers (or replaces) a TD under its own `id`, or under `id` when
    /// given, which must then match it, on no principal's quota (start-up
    /// files). Returns the TD as served.
    pub fn put(
        &mut self,
        id: Option<&str>,
        text: &[u8],
    ) -> Result<(Registered, Value), DirectoryError> {
        self.put_as(None, id, text)
    }

    /// [`Directory::put`] by a principal, on its quota.
    pub fn put_as(
        &mut self,
        owner: Option<&str>,
        id: Option<&str>,
        text: &[u8],
    ) -> Result<(Registered, Value), DirectoryError> {
        self.budget.check_size(text.len())?;
        let mut td = self.validator.parse(text)?;
        let own = td["id"].as_str().map(str::to_owned);
        let id = match (id, own) {
            (Some(expected), Some(found)) if expected != found => {
                return Err(DirectoryError::IdMismatch {
                    expected: expected.to_owned(),
                    found,
                })
            }
            (Some(id), _) => id.to_owned(),
            (None, Some(found)) => found,
            (None, None) => {
                return Err(DirectoryError::Td(TdError::Invalid(vec![Violation {
                    pointer: "/id".into(),
                    message: "a Thing Description registered this way needs an `id`".into(),
                }])))
            }
        };
        td["id"] = Value::String(id.clone());
        self.store(id, td, owner)
    }

    /// Registers an anonymous TD under a fresh `urn:uuid:` id, on `owner`'s
    /// quota.
    pub fn post(
        &mut self,
        owner: Option<&str>,
        text: &[u8],
    ) -> Result<(String, Value), DirectoryError> {
        self.budget.check_size(text.len())?;
        let mut td = self.validator.parse(text)?;
        if let Some(id) = td["id"].as_str() {
            return Err(DirectoryError::HasId(id.to_owned()));
        }
        let id = format!("urn:uuid:{}", uuid::Uuid::new_v4());
        td["id"] = Value::String(id.clone());
        let (_, served) = self.store(id.clone(), td, owner)?;
        Ok((id, served))
    }

    /// Applies a JSON merge patch (RFC 7396) and checks the result; the TD
    /// is then on `owner`'s quota.
    pub fn patch(
        &mut self,
        owner: Option<&str>,
        id: &str,
        patch: &[u8],
    ) -> Result<Value, DirectoryError> {
        self.budget.check_size(patch.len())?;
        let current = self
            .things
            .get(id)
            .ok_or_else(|| DirectoryError::NotFound(id.to_owned()))?;
        let patch: Value = serde_json::from_slice(patch).map_err(|e| {
            DirectoryError::Td(TdError::Json {
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
        })?;
        let mut td = current.clone();
        validate::merge_patch(&mut td, &patch);
        td["id"] = Value::String(id.to_owned());
        self.validator.check(&td)?;
        Ok(self.store(id.to_owned(), td, owner)?.1)
    }

    /// A TD as this directory served it before a restart, back on its
    /// owner's quota: checked again (the schema, the budgets and quotas as
    /// configured now) and its forms written for the endpoints of now. Its
    /// size as sent is not checked again: served, it holds the sidecar's
    /// forms too.
    pub fn restore(
        &mut self,
        owner: Option<&str>,
        id: &str,
        text: &[u8],
    ) -> Result<Value, DirectoryError> {
        let td = self.validator.parse(text)?;
        if td["id"].as_str() != Some(id) {
            return Err(DirectoryError::IdMismatch {
                expected: id.to_owned(),
                found: td["id"].as_str().unwrap_or_default().to_owned(),
            });
        }
        Ok(self.store(id.to_owned(), td, owner)?.1)
    }

    /// Who registered the TD, when a principal did.
    pub fn owner_of(&self, id: &str) -> Option<&str> {
        self.budget.owner(id)
    }

    /// Keeps a checked TD, as served, if the budgets have room for it.
    fn store(
        &mut self,
        id: String,
        mut td: Value,
        owner: Option<&str>,
    ) -> Result<(Registered, Value), DirectoryError> {
        forms::rewrite(&mut td, &self.endpoints);
        let bytes = budget::json_len(&td);
        self.budget.admit(&id, owner, bytes)?;
        self.budget.record(&id, owner, bytes);
        self.remote.remove(&id);
        let registered = match self.things.insert(id, td.clone()) {
            Some(_) => Registered::Updated,
            None => Registered::Created,
        };
        Ok((registered, td))
    }

    /// Bytes of all registered TDs as served, and whether
    /// `discovery.max_total_td_bytes` turned a registration away since the
    /// total was last below it.
    pub fn bytes(&self) -> (u64, bool) {
        (self.budget.total(), self.budget.is_full())
    }

    /// TDs and their bytes registered by one principal.
    pub fn usage(&self, principal: &str) -> (u64, u64) {
        self.budget.usage(principal)
    }

    pub fn get(&self, id: &str) -> Option<&Value> {
        self.things.get(id)
    }

    /// A TD published retained on `{prefix}/{id}/td` by someone else; an
    /// empty payload withdraws it. Registrations made here win, and are not
    /// changed: the bus echoes them back. Returns whether anything changed.
    pub fn learn(&mut self, id: &str, text: &[u8]) -> Result<bool, DirectoryError> {
        let local = self.things.contains_key(id) && !self.remote.contains(id);
        if local {
            return Ok(false);
        }
        if text.is_empty() {
            let known = self.remote.remove(id);
            if known {
                self.things.remove(id);
                self.budget.release(id);
            }
            return Ok(known);
        }
        self.budget.check_size(text.len())?;
        let td = self.validator.parse(text)?;
        match td["id"].as_str() {
            Some(found) if found == id => {}
            found => {
                return Err(DirectoryError::IdMismatch {
                    expected: id.to_owned(),
                    found: found.unwrap_or_default().to_owned(),
                })
            }
        }
        self.store(id.to_owned(), td, None)?;
        self.remote.insert(id.to_owned());
        Ok(true)
    }

    /// Whether the Thing's TD was learnt from the bus rather than
    /// registered here.
    pub fn is_remote(&self, id: &str) -> bool {
        self.remote.contains(id)
    }

    pub fn delete(&mut self, id: &str) -> Result<(), DirectoryError> {
        self.remote.remove(id);
        self.budget.release(id);
        self.things
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| DirectoryError::NotFound(id.to_owned()))
    }

    /// One page, in id order, and the total count.
    pub fn list(&self, offset: usize, limit: usize) -> (Vec<&Value>, usize) {
        (
            self.things.values().skip(offset).take(limit).collect(),
            self.things.len(),
        )
    }

    pub fn len(&self) -> usize {
        self.things.len()
    }

    pub fn is_empty(&self) -> bool {
        self.things.is_empty()
    }
}

#[cfg(test)]
mod tests;
