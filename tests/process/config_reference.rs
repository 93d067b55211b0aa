//! The configuration reference cannot drift from the configuration: every
//! key the structs have (as `Config::default()` serializes them) has a row
//! in `docs/configuration.md`'s table with the same default, and every row
//! names a key that exists. (`src/config.rs` checks that the commented
//! default file, `config/lmos-sidecar.toml`, parses to the same defaults.)

use std::collections::BTreeMap;

use lmos_sidecar::Config;

/// The reference: `docs/configuration.md`.
fn reference() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .expect("docs/configuration.md")
}

/// Key path → default, from the structs. Tables are walked; arrays and
/// empty tables are values.
fn flatten(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, toml::Value>) {
    match value {
        toml::Value::Table(t) if !t.is_empty() => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        v => {
            out.insert(prefix.to_owned(), v.clone());
        }
    }
}

/// What a default looks like in the table: strings without quotes, other
/// values as TOML writes them.
fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) if t.is_empty() => "empty".to_owned(),
        other => other.to_string(),
    }
}

/// Key path → the default the table gives, from each row's first two cells.
/// A row may name several keys (`a.b`, `a.c` or `a.b`, `.c`: the same
/// table), which share its default.
fn rows(reference: &str) -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    for line in reference.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let (keys, default) = (cells[0].trim_start_matches("| "), cells[1]);
        // The default's first backticked token (`["*"]` each), or the word.
        let default = match default.split('`').nth(1) {
            Some(d) => d.trim_matches('"').to_owned(),
            None => default.trim().to_owned(),
        };
        let mut table = String::new();
        for key in keys.split(", ") {
            let key = key.trim_matches('`');
            let key = if let Some(short) = key.strip_prefix('.') {
                format!("{table}.{short}")
            } else {
                table = key.rsplit_once('.').map_or("", |(t, _)| t).to_owned();
                key.to_owned()
            };
            rows.insert(key, default.clone());
        }
    }
    rows
}

#[test]
fn every_key_is_documented_with_its_default_and_every_row_is_a_key() {
    let defaults = toml::Value::try_from(Config::default()).expect("the defaults serialize");
    let mut keys = BTreeMap::new();
    flatten("", &defaults, &mut keys);
    let documented = rows(&reference());
    assert!(
        documented.len() > 40,
        "the table was not found: {documented:?}"
    );

    let mut problems = Vec::new();
    for (key, value) in &keys {
        match documented.get(key) {
            None => problems.push(format!("`{key}` (default {value}) has no row")),
            Some(shown_default) if *shown_default != shown(value) => problems.push(format!(
                "`{key}`: the table says {shown_default}, the default is {}",
                shown(value)
            )),
            Some(_) => {}
        }
    }
    // Keys that default to nothing serialize to nothing; the shipped file
    // and the structs' deserializer know them.
    for key in documented.keys().filter(|k| !keys.contains_key(*k)) {
        let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
        let probe = format!("[{table}]\n{name} = \"\"\n");
        let unknown = toml::from_str::<Config>(&probe)
            .err()
            .is_some_and(|e| e.to_string().contains("unknown field"));
        if unknown {
            problems.push(format!("`{key}` has a row but is no configuration key"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md and src/config.rs disagree:\n{}",
        problems.join("\n")
    );
}
