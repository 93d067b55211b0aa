//! `[auth.jwt.grants]`: the rights a value of `grants_claim` (a scope, a
//! role) brings, `{principal}` in a pattern standing for the token's
//! principal name (`host = ["agent-{principal}"]`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::JwtSetupError;
use crate::auth::Rules;
use crate::config::Grants;

const PLACEHOLDER: &str = "{principal}";

pub(super) struct GrantMap(BTreeMap<String, Grants>);

impl GrantMap {
    /// Checked as `[[auth.principals]]` patterns are, with a name put in
    /// for `{principal}` (which [`super::usable_name`] keeps free of `*`,
    /// so substituting cannot widen a pattern).
    pub(super) fn new(config: &BTreeMap<String, Grants>) -> Result<GrantMap, JwtSetupError> {
        for (value, g) in config {
            for (key, patterns) in [
                ("host", &g.host),
                ("consume", &g.consume),
                ("operate", &g.operate),
            ] {
                for p in patterns {
                    let p2 = p.replace(PLACEHOLDER, "x");
                    if p2.is_empty() || p2.trim_end_matches('*').contains('*') || p2.ends_with("**")
                    {
                        return Err(JwtSetupError::Pattern {
                            value: value.clone(),
                            key,
                            pattern: p.clone(),
                        });
                    }
                }
            }
        }
        Ok(GrantMap(config.clone()))
    }

    /// The union of the grants of `values`, for `principal`.
    pub(super) fn rules(&self, values: &[String], principal: &str) -> Rules {
        let mut all = Grants::default();
        for g in values.iter().filter_map(|v| self.0.get(v)) {
            let put = |into: &mut Vec<String>, from: &[String]| {
                into.extend(from.iter().map(|p| p.replace(PLACEHOLDER, principal)));
            };
            put(&mut all.host, &g.host);
            put(&mut all.consume, &g.consume);
            put(&mut all.operate, &g.operate);
        }
        Rules::new(&all.host, &all.consume, &all.operate)
    }
}

/// The values of the grants claim: a space-separated string (`scope`) or
/// an array of strings (roles); anything else brings none.
pub(super) fn values(claim: Option<&Value>) -> Vec<String> {
    match claim {
        Some(Value::String(s)) => s.split_ascii_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}
