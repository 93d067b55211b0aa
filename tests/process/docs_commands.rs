//! What the README and `docs/` tell a newcomer to type stays true: every
//! `lmos-sidecar ...` (or `cargo run --release -- ...`) command in a code
//! block parses with the binary's own command line, every configuration
//! key named in the prose exists, and no sentence the first hour found
//! false comes back (issue 34).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;
use lmos_sidecar::client::cli::Cli;
use lmos_sidecar::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const T: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

fn documents() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs")).expect("docs/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.push(Path::new(ROOT).join("config/lmos-sidecar.toml"));
    files
}

/// Lines inside fenced code blocks.
fn code(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            fenced
        })
        .collect()
}

/// Shell words, as `sh` splits them: quotes kept together, a `#` outside
/// quotes starting a comment, a here-document or redirection ending it.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, '#') if word.is_empty() && !started => break,
            (None, '<' | '>' | '|' | '&' | '(') if word.is_empty() && !started => break,
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
        .into_iter()
        .map(|w| w.replace("$T", T).replace("${T}", T))
        .collect()
}

/// Where a line invokes this binary: at its start (after a `$ ` prompt in
/// a `console` block too), after a pipe or in a comment; `cargo run
/// --release -- ...` stands for it too.
fn invocations(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("lmos-sidecar") {
        let before = line[..at].trim_end();
        let prompt = before == "$";
        if !(before.is_empty() || prompt || before.ends_with('|') || before.ends_with('#')) {
            continue;
        }
        let rest = &line[at + "lmos-sidecar".len()..];
        if rest.is_empty() || rest.starts_with(' ') {
            found.push(rest.to_owned());
        }
    }
    let trimmed = line.trim_start_matches(['#', ' ']);
    if let Some(rest) = trimmed.strip_prefix("cargo run --release --") {
        if rest.starts_with(' ') && !rest.trim_start().starts_with("ARGS") {
            found.push(rest.to_owned());
        }
    }
    if trimmed == "cargo run --release" {
        found.push(String::new());
    }
    found
}

/// The command lines the docs show for this binary: in code blocks, and in
/// the prose's inline code.
fn commands() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("readable");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let inline: Vec<&str> = text
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| !s.contains('\n'))
            .collect();
        for line in code(&text).into_iter().chain(inline) {
            for rest in invocations(line) {
                let mut argv = vec!["lmos-sidecar".to_owned()];
                argv.extend(words(&rest));
                found.push((format!("{name}: {}", line.trim()), argv));
            }
        }
    }
    found
}

#[test]
fn every_command_in_the_docs_parses() {
    let commands = commands();
    assert!(
        commands.len() >= 25,
        "only {} commands found",
        commands.len()
    );
    let mut wrong = Vec::new();
    for (place, argv) in &commands {
        if let Err(e) = Cli::try_parse_from(argv) {
            // `--help` and `--version` "fail" with their text.
            if !matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                wrong.push(format!(
                    "{place}\n  {}",
                    e.render().to_string().lines().next().unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "commands that do not parse:\n{}",
        wrong.join("\n")
    );
}

/// Every key path `section.key` the configuration has.
fn keys() -> BTreeSet<String> {
    let value: toml::Value = toml::from_str(&Config::default().to_toml()).expect("TOML");
    let mut keys = BTreeSet::new();
    fn walk(prefix: &str, v: &toml::Value, keys: &mut BTreeSet<String>) {
        if let toml::Value::Table(t) = v {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                keys.insert(key.clone());
                walk(&key, v, keys);
            }
        }
    }
    walk("", &value, &mut keys);
    keys
}

#[test]
fn every_configuration_key_the_docs_name_exists() {
    let keys = keys();
    let sections: BTreeSet<&str> = keys
        .iter()
        .filter(|k| !k.contains('.'))
        .map(String::as_str)
        .collect();
    let mut unknown = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("readable");
        for (i, quoted) in text.split('`').enumerate() {
            // Odd pieces are inside backticks; a key is `section.key`
            // (`section.key = value` too), nothing else.
            if i % 2 == 0 {
                continue;
            }
            let key = quoted.split([' ', '=']).next().unwrap_or_default();
            let Some((section, rest)) = key.split_once('.') else {
                continue;
            };
            let plain = |s: &str| {
                !s.is_empty()
                    && s.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.'
                    })
            };
            let file_name = [".rs", ".md", ".toml", ".json", ".yaml", ".redb"]
                .iter()
                .any(|e| key.ends_with(e));
            // Span attributes, and members of the LMOS messages' `a2a`
            // member, that share a section's name.
            let attribute = [
                "mcp.method.name",
                "mcp.session.id",
                "mcp.protocol.version",
                "a2a.agent",
                "a2a.message",
                "a2a.artifacts",
            ]
            .contains(&key);
            if !sections.contains(section)
                || !plain(rest)
                || key.ends_with('.')
                || file_name
                || attribute
            {
                continue;
            }
            // `quotas.*`-style families and sub-tables of arrays
            // (`auth.principals.name`) are named by their first levels.
            let known = keys.contains(key)
                || key.starts_with("auth.principals.")
                || key.starts_with("cluster.nats.")
                || keys.iter().any(|k| k.starts_with(&format!("{key}.")));
            if !known {
                unknown.push(format!(
                    "{}: `{key}`",
                    file.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "keys named in the docs that do not exist:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn sentences_found_false_do_not_come_back() {
    let false_ones = [
        ("docs/cli.md", "address invocations of their own connection"),
        ("docs/requests.md", "port 1884 for MQTT 5"),
        ("config/lmos-sidecar.toml", "README's Clustering"),
        ("docs/configuration.md", "(see above)"),
        ("docs/tracing.md", "(issue 16,"),
        ("README.md", "websocat --protocol"),
        ("README.md", "before issue 16 (the first"),
        // Issue 47's first hour.
        ("README.md", "the event, then completed"),
        ("README.md", "--example weather_agent"),
        ("docs/tracing.md", "about a second apart"),
        ("docs/tracing.md", "--example weather_agent"),
        ("docs/cli.md", "[stream #10 end]"),
    ];
    for (file, sentence) in false_ones {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).expect(file);
        assert!(!text.contains(sentence), "{file} says again: {sentence}");
    }
    // Without Docker means without Docker.
    let tracing = std::fs::read_to_string(Path::new(ROOT).join("docs/tracing.md")).unwrap();
    let without = tracing
        .split("Without Docker")
        .nth(1)
        .expect("a Without Docker part");
    let part = without.split("\n#").next().unwrap_or_default();
    assert!(
        !part.contains("docker run"),
        "docs/tracing.md runs docker without Docker"
    );
    // The compose file gives the console its trace links.
    let compose = std::fs::read_to_string(Path::new(ROOT).join("deploy/compose.yaml")).unwrap();
    assert!(
        compose.contains("LMOS_SIDECAR_TRACING__JAEGER_UI_URL"),
        "compose.yaml"
    );
}

#[test]
fn the_docker_build_context_leaves_target_out() {
    // `docker build -f deploy/Dockerfile .` reads deploy/Dockerfile.dockerignore
    // (BuildKit) or else .dockerignore at the context's root: both the same.
    let beside = std::fs::read_to_string(Path::new(ROOT).join("deploy/Dockerfile.dockerignore"))
        .expect("deploy/Dockerfile.dockerignore");
    let root =
        std::fs::read_to_string(Path::new(ROOT).join(".dockerignore")).expect(".dockerignore");
    assert_eq!(beside, root, "the two ignore files differ");
    let patterns: Vec<&str> = beside
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    for must in ["target", ".git"] {
        assert!(
            patterns.iter().any(|p| p.trim_matches('/') == must),
            "{must} is sent as build context"
        );
    }
    // What the build needs stays in.
    for needed in [
        "src",
        "testkit",
        "vendor",
        "examples",
        "Cargo.lock",
        "benches",
    ] {
        assert!(
            !patterns.iter().any(|p| p.trim_matches('/') == needed),
            "{needed} is needed by the build"
        );
    }
}

#[test]
fn every_example_in_the_help_parses() {
    use clap::CommandFactory;
    let root = Cli::command();
    let mut examples = Vec::new();
    for command in std::iter::once(&root).chain(root.get_subcommands()) {
        let Some(help) = command.get_after_help() else {
            continue;
        };
        for line in help.to_string().lines() {
            for rest in invocations(line.trim()) {
                // The examples' explanations follow two or more spaces.
                let rest = rest.split("   ").next().unwrap_or_default();
                let mut argv = vec!["lmos-sidecar".to_owned()];
                argv.extend(words(rest));
                examples.push((line.to_owned(), argv));
            }
        }
    }
    assert!(examples.len() >= 12, "only {} examples", examples.len());
    for (line, argv) in examples {
        if let Err(e) = Cli::try_parse_from(&argv) {
            panic!("`{line}` does not parse: {e}");
        }
    }
}
