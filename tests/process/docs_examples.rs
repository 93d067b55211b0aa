//! The docs' command examples, run (issue 47): every ```` ```console ````
//! block of README.md and docs/cli.md is a session, `$ ` starting each
//! command (a here-document's lines and `EOF` belong to it) and the lines
//! after it what it prints. They run in order, in `bash`, with the binary
//! on the PATH as `lmos-sidecar`, against a real sidecar and `lmos-sidecar
//! demo-agent`; what they print must match: `…` in a line stands for any
//! text, a line that is only `…` for any lines. The sidecar's real ports
//! stand in for the documented defaults, in the commands and back in what
//! they print; `LMOS_URL` gives the default endpoint to the commands that
//! name none.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use lmos_testkit as common;
use lmos_testkit::weather_agent::THING_ID;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_lmos-sidecar");
const FILES: [&str; 2] = ["README.md", "docs/cli.md"];
/// The longest an example may take (`raw` waits 3 s after its input).
const EXAMPLE_WAIT: Duration = Duration::from_secs(30);

/// One command of a ```` ```console ```` block and what it prints.
#[derive(Debug)]
struct Example {
    place: String,
    command: String,
    expected: Vec<String>,
}

/// The examples of one markdown file, in order.
fn examples(file: &str, text: &str) -> Vec<Example> {
    let mut found: Vec<Example> = Vec::new();
    let (mut inside, mut heredoc) = (false, None::<String>);
    for (n, line) in text.lines().enumerate() {
        if !inside {
            inside = line.trim_end() == "```console";
            continue;
        }
        if heredoc.is_none() && line.starts_with("```") {
            inside = false;
            continue;
        }
        if let Some(end) = &heredoc {
            let example = found.last_mut().expect("a here-document follows a command");
            example.command.push('\n');
            example.command.push_str(line);
            if line == end {
                heredoc = None;
            }
        } else if let Some(command) = line.strip_prefix("$ ") {
            heredoc = command
                .split_once("<<")
                .map(|(_, rest)| rest.trim().trim_matches(['\'', '"']).to_owned());
            found.push(Example {
                place: format!("{file}:{}", n + 1),
                command: command.to_owned(),
                expected: Vec::new(),
            });
        } else if let Some(example) = found.last_mut() {
            example.expected.push(line.to_owned());
        }
    }
    found
}

/// Whether `line` matches `pattern`, in which `…` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == line;
    };
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    // The leftmost place for each part is never worse for the next.
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Whether `actual` matches `expected`, in which a line `…` stands for any
/// lines.
fn lines_match(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((any, rest)) if any == "…" => {
            (0..=actual.len()).any(|n| lines_match(rest, &actual[n..]))
        }
        Some((pattern, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(pattern, line) && lines_match(rest, more)),
    }
}

/// The documented defaults and where the sidecar under test listens.
struct Addresses(Vec<(&'static str, String)>);

impl Addresses {
    fn for_test(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (doc, real)| t.replace(doc, real))
    }

    fn as_documented(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (doc, real)| t.replace(real, doc))
    }
}

/// Runs `script` in bash, standard error into standard output as a
/// terminal shows both: the exit code and what it printed.
async fn shell(dir: &Path, path: &str, url: &str, script: &str) -> (Option<i32>, String) {
    let child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -o pipefail\nexec 2>&1\n{script}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("LMOS_URL", url)
        .env_remove("LMOS_TOKEN")
        .env_remove("LMOS_USER")
        .env_remove("LMOS_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash");
    let out = tokio::time::timeout(EXAMPLE_WAIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the example did not end within {EXAMPLE_WAIT:?}:\n{script}"))
        .expect("its output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn the_docs_command_examples_print_what_the_docs_show() {
    let mut all = Vec::new();
    for file in FILES {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).expect(file);
        all.extend(examples(file, &text));
    }
    let in_readme = all.iter().filter(|e| e.place.starts_with("README")).count();
    assert!(
        in_readme >= 2 && all.len() >= 9,
        "only {} examples: {all:#?}",
        all.len()
    );

    // `lmos-sidecar` on the PATH, as after `cargo install`.
    let dir = common::process::DataDir::new("docs-examples");
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("lmos-sidecar")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let sidecar = common::process::Started::start(&mut lmos_testkit::sidecar_command!());
    let url = format!("ws://{}/lmos", sidecar.http);
    let _agent = common::process::Running(
        std::process::Command::new(BIN)
            .arg("demo-agent")
            .env("LMOS_URL", &url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_the_agent(sidecar.http).await;
    let addresses = Addresses(vec![
        ("127.0.0.1:8080", sidecar.http.to_string()),
        ("127.0.0.1:1883", sidecar.mqtt.to_string()),
        ("127.0.0.1:1884", sidecar.mqtt5.to_string()),
    ]);

    // Variables set by one example hold for the later ones.
    let mut preamble = String::new();
    let mut wrong = Vec::new();
    for example in &all {
        let command = addresses.for_test(&example.command);
        let (code, printed) = shell(&dir.0, &path, &url, &format!("{preamble}{command}")).await;
        let printed = addresses.as_documented(&printed);
        let lines: Vec<&str> = printed.lines().collect();
        if code != Some(0) || !lines_match(&example.expected, &lines) {
            wrong.push(format!(
                "{}: $ {}\n  exit code {code:?}; expected:\n{}\n  printed:\n{printed}",
                example.place,
                example.command,
                example.expected.join("\n")
            ));
        }
        let assignment = command.split_once('=').is_some_and(|(name, value)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !value.contains(' ')
        });
        if assignment {
            preamble.push_str(&command);
            preamble.push('\n');
        }
    }
    assert!(
        wrong.is_empty(),
        "examples that print otherwise:\n\n{}",
        wrong.join("\n\n")
    );
}

/// Until the directory serves the WeatherAgent's description.
async fn wait_for_the_agent(http: std::net::SocketAddr) {
    let path = format!("/things/{}", common::urlencode(THING_ID));
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while common::http(http, "GET", &path, None, b"").await.status != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the demo agent did not register"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn examples_are_read_with_their_here_documents_and_output() {
    let text = "x\n```console\n$ T=1\n$ cat <<'EOF'\na\nEOF\na\n$ echo b\nb\n```\n$ not this\n";
    let found = examples("f.md", text);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(found[1].command, "cat <<'EOF'\na\nEOF");
    assert_eq!(found[1].expected, ["a"]);
    assert_eq!(found[2].place, "f.md:8");
}

#[test]
fn an_ellipsis_stands_for_any_text_or_lines() {
    assert!(line_matches(
        "urn:uuid:6f1d… getWeather pending",
        "urn:uuid:6f1d3a getWeather pending"
    ));
    assert!(line_matches(
        "{\"a\":…,\"s\":\"x\",…}",
        "{\"a\":1,\"b\":2,\"s\":\"x\",\"c\":3}"
    ));
    assert!(!line_matches("a…b", "ba"));
    assert!(!line_matches("exact", "exactly"));
    let expected = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(lines_match(
        &expected(&["a", "…", "d"]),
        &["a", "b", "c", "d"]
    ));
    assert!(lines_match(&expected(&["a", "…", "d"]), &["a", "d"]));
    assert!(!lines_match(&expected(&["a", "d"]), &["a", "b", "d"]));
}
