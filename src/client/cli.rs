//! The command line: the sidecar's own flags and the client subcommands.
//! In the library, not in `main.rs`, so a test can parse every command the
//! docs show (`tests/process/docs_commands.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use crate::config::parse_listen_addr;

const ABOUT: &str = "Publish-subscribe sidecar for LMOS agents: an embedded MQTT broker, an \
`lmosprotocol` WebSocket gateway, a Thing Description directory and a console, \
and a command-line client for any `lmosprotocol` endpoint.";

const EXAMPLES: &str = "\
Examples:
  lmos-sidecar                                   run the sidecar on its defaults
  lmos-sidecar --config config/lmos-sidecar.toml --http-addr 0.0.0.0:8080
  lmos-sidecar demo-agent                        the draft's WeatherAgent, served through the sidecar
  lmos-sidecar raw                               JSON lines to ws://127.0.0.1:8080/lmos, replies back
  lmos-sidecar things                            the Things in the directory
  lmos-sidecar sub --thing +                     every Thing's events and property changes

Then open http://127.0.0.1:8080/console. Client commands read credentials from
LMOS_TOKEN, or LMOS_USER and LMOS_PASSWORD, and the endpoint from LMOS_URL
(default ws://127.0.0.1:8080/lmos). Reference: docs/cli.md.";

/// The Thing the README's examples use, in the subcommands' examples too.
macro_rules! weather {
    () => {
        "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77"
    };
}

#[derive(Debug, Parser)]
#[command(name = "lmos-sidecar", version, about = ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    /// TOML configuration file (see config/lmos-sidecar.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// MQTT listener (3.1.1 and 5), e.g. 127.0.0.1:1883 (port 0: any free
    /// port; a host name is resolved).
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_listen_addr)]
    pub mqtt_addr: Option<SocketAddr>,
    /// The second MQTT listener, also 3.1.1 and 5, e.g. 127.0.0.1:1884.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_listen_addr)]
    pub mqtt5_addr: Option<SocketAddr>,
    /// HTTP listener: WebSocket clients connect to ws://HOST:PORT/lmos, the
    /// console is at http://HOST:PORT/console.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_listen_addr)]
    pub http_addr: Option<SocketAddr>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Print the effective configuration as TOML and exit (same as the
    /// `config` subcommand).
    #[arg(long)]
    pub print_config: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the effective configuration (defaults < file < environment <
    /// flags) as TOML and exit.
    Config,
    /// Send JSON lines from standard input to an lmosprotocol endpoint and
    /// print each message it sends back as one line (like websocat).
    #[command(after_help = concat!("Example (paste a line, or pipe a file):\n  echo '{\"thingID\":\"", weather!(), "\",\"messageID\":\"m1\",\"messageType\":\"readProperty\",\"name\":\"modelConfiguration\"}' | lmos-sidecar raw\n\nAfter standard input ends, replies are printed until none came for --idle seconds."))]
    Raw {
        /// The lmosprotocol endpoint.
        #[arg(long, env = "LMOS_URL", default_value = "ws://127.0.0.1:8080/lmos")]
        url: String,
        /// After standard input ends: stop once no message came for this
        /// many seconds (0: wait until the endpoint closes or Ctrl-C).
        #[arg(long, value_name = "SECONDS", default_value_t = 3)]
        idle: u64,
    },
    /// Print a Thing's events and property changes as they come (every
    /// event and every observable property when neither --event nor
    /// --property is given).
    #[command(after_help = concat!("Examples:\n  lmos-sidecar sub --thing ", weather!(), "\n  lmos-sidecar sub --thing ", weather!(), " --event userFeedbackReceived --count 1\n  lmos-sidecar sub --thing + --mqtt mqtt://127.0.0.1:1883    every Thing, over MQTT\n\nRuns until Ctrl-C, --count messages, or the reader of its output goes away (| head -1);\nwhen the sidecar goes away it says so and exits with 2."))]
    // `sub` alone takes `+` for the Thing.
    #[command(mut_arg("thing", |a| a
        .help("The Thing's ID, or `+`: every Thing (over MQTT those that connect later too).")
        .value_parser(clap::builder::NonEmptyStringValueParser::new())))]
    Sub {
        #[command(flatten)]
        to: Target,
        /// An event to subscribe to (repeatable).
        #[arg(long = "event", value_name = "EVENT")]
        events: Vec<String>,
        /// A property to observe (repeatable).
        #[arg(long = "property", value_name = "PROPERTY")]
        properties: Vec<String>,
        /// Stop after this many messages.
        #[arg(long, value_name = "N")]
        count: Option<usize>,
        /// Subscribe over MQTT instead (e.g. mqtt://127.0.0.1:1883), on the
        /// sidecar's topics.
        #[arg(long, value_name = "URL")]
        mqtt: Option<String>,
        /// Topic prefix, with --mqtt.
        #[arg(long, default_value = "lmos")]
        prefix: String,
    },
    /// Read a property.
    #[command(after_help = concat!("Example:\n  lmos-sidecar read --thing ", weather!(), " modelConfiguration"))]
    Read {
        #[command(flatten)]
        to: Target,
        /// The property's name, as in the Thing Description.
        #[arg(value_name = "PROPERTY")]
        name: String,
    },
    /// Write a property: the value given replaces the whole value (an
    /// object is not merged with the one the Thing has).
    #[command(after_help = concat!("Example:\n  lmos-sidecar write --thing ", weather!(), " modelConfiguration '{\"modelName\":\"o3\",\"temperature\":0.2,\"maxTokens\":500}'\n\nThe draft's writeProperty sends the property's new value: members left out of an\nobject are gone afterwards (read it first, change it, write it whole). Prints the\nvalue the Thing confirms, as `read` prints it."))]
    Write {
        #[command(flatten)]
        to: Target,
        /// The property's name, as in the Thing Description.
        #[arg(value_name = "PROPERTY")]
        name: String,
        /// The new value, whole, as JSON; a bare word is taken as a string.
        #[arg(value_name = "VALUE")]
        value: String,
    },
    /// Invoke an action and print its actionStatus stream (Ctrl-C asks the
    /// agent to cancel it).
    #[command(after_help = concat!("Example:\n  lmos-sidecar invoke --thing ", weather!(), " getWeather '{\"question\":\"Weather in Oslo?\",\"interactionMode\":\"text\"}' --stream"))]
    Invoke {
        #[command(flatten)]
        to: Target,
        /// The action's name, as in the Thing Description.
        #[arg(value_name = "ACTION")]
        action: String,
        /// The input, as JSON; a bare word is taken as a string.
        #[arg(value_name = "INPUT")]
        input: Option<String>,
        /// Names the invocation, so that `query` and `cancel` (from any
        /// connection of the same principal) can find it; default: the
        /// request's messageID.
        #[arg(long, value_name = "ID")]
        correlation_id: Option<String>,
        /// Ask for a streamed answer ("stream": true) and print its chunks
        /// as they come.
        #[arg(long)]
        stream: bool,
        /// Write the streamed answer's data, its chunks put together, to
        /// FILE once it ends (the WeatherAgent's voice: a WAV file); asks
        /// for a stream.
        #[arg(long, value_name = "FILE")]
        save: Option<std::path::PathBuf>,
    },
    /// The latest status of an invocation.
    #[command(after_help = concat!("Example:\n  lmos-sidecar query --thing ", weather!(), " getWeather --correlation-id my-forecast"))]
    Query {
        #[command(flatten)]
        to: Target,
        /// The action's name.
        #[arg(value_name = "ACTION")]
        action: String,
        /// The invocation's correlation ID (as given to `invoke`).
        #[arg(long, value_name = "ID")]
        correlation_id: Option<String>,
    },
    /// Cancel an invocation: exit code 0 when the Thing cancelled it, 1 when
    /// it could not (unknown, or already ended).
    #[command(after_help = concat!("Example:\n  lmos-sidecar cancel --thing ", weather!(), " getWeather --correlation-id my-forecast"))]
    Cancel {
        #[command(flatten)]
        to: Target,
        /// The action's name.
        #[arg(value_name = "ACTION")]
        action: String,
        /// The invocation's correlation ID (as given to `invoke`).
        #[arg(long, value_name = "ID")]
        correlation_id: Option<String>,
    },
    /// List the Thing Descriptions in a directory.
    #[command(after_help = "Example:\n  lmos-sidecar things --url http://127.0.0.1:8080 --json")]
    Things {
        /// The directory, e.g. http://127.0.0.1:8080
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Each Thing Description as one line of JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Read a password from standard input and print its Argon2 hash, for
    /// `password_hash` in [[auth.principals]].
    #[command(after_help = "Example:\n  printf '%s\\n' 's3cret' | lmos-sidecar hash-password")]
    HashPassword,
    /// Print a new random bearer token and, for `token_sha256` in
    /// [[auth.principals]], its SHA-256.
    NewToken,
    /// Check that an lmosprotocol WebSocket endpoint behaves as the draft asks.
    #[command(after_help = "Example:\n  lmos-sidecar check ws://127.0.0.1:8080/lmos")]
    Check {
        /// The endpoint to check.
        #[arg(env = "LMOS_URL", default_value = "ws://127.0.0.1:8080/lmos")]
        url: String,
    },
    /// Run the LMOS draft's WeatherAgent (a demo agent, deterministic, no
    /// LLM) through a sidecar, until Ctrl-C; it connects again whenever the
    /// sidecar restarts.
    #[command(after_help = concat!("Example:\n  lmos-sidecar demo-agent\n\nIt hosts ", weather!(), ": property modelConfiguration,\naction getWeather (progress statuses 0.3 s apart, a streamed answer on request),\nevent userFeedbackReceived after each forecast. Credentials as for the client\ncommands (LMOS_TOKEN, or LMOS_USER and LMOS_PASSWORD)."))]
    DemoAgent {
        /// The sidecar's lmosprotocol endpoint.
        #[arg(long, env = "LMOS_URL", default_value = "ws://127.0.0.1:8080/lmos")]
        url: String,
    },
}

/// Where a client subcommand goes and how it prints.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The Thing's ID.
    #[arg(long, value_name = "ID", value_parser = one_thing)]
    pub thing: String,
    /// The lmosprotocol endpoint.
    #[arg(long, env = "LMOS_URL", default_value = "ws://127.0.0.1:8080/lmos")]
    pub url: String,
    /// Print each message as it came, one JSON object per line, instead of
    /// a line of text.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for each answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub timeout: u64,
}

/// One Thing's ID: `+` (every Thing) is `sub`'s alone, and a request to
/// a Thing called `+` would only come back as a 503.
fn one_thing(id: &str) -> Result<String, String> {
    match id {
        "" => Err("a Thing's ID cannot be empty".into()),
        "+" => Err("`+` (every Thing) is for `sub` only; this command addresses one Thing: give its ID (`lmos-sidecar things` lists them)".into()),
        _ => Ok(id.to_owned()),
    }
}

impl Target {
    pub fn output(&self) -> super::Output {
        if self.json {
            super::Output::Json
        } else {
            super::Output::Human
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn addresses_get_clear_errors() {
        let e = Cli::try_parse_from(["lmos-sidecar", "--http-addr", "127.0.0.1:80800"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("port 80800 is out of range"), "{e}");
        let cli = Cli::try_parse_from(["lmos-sidecar", "--http-addr", "localhost:18080"]).unwrap();
        assert!(cli.http_addr.unwrap().ip().is_loopback());
    }

    #[test]
    fn plus_is_every_thing_for_sub_and_an_error_elsewhere() {
        let sub = Cli::try_parse_from(["lmos-sidecar", "sub", "--thing", "+"]);
        assert!(sub.is_ok(), "{sub:?}");
        for command in ["read", "write", "invoke", "query", "cancel"] {
            let mut argv = vec!["lmos-sidecar", command, "--thing", "+", "x"];
            if command == "write" {
                argv.push("1");
            }
            let e = Cli::try_parse_from(&argv).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{command}"
            );
            assert!(e.to_string().contains("is for `sub` only"), "{e}");
        }
        let help = |name: &str| {
            let mut root = Cli::command();
            let command = root.find_subcommand_mut(name).unwrap();
            command.render_help().to_string()
        };
        assert!(help("sub").contains("or `+`: every Thing"));
        for command in ["read", "write", "invoke", "query", "cancel"] {
            assert!(!help(command).contains('+'), "{command}: {}", help(command));
        }
    }

    #[test]
    fn every_argument_is_described() {
        let mut missing = Vec::new();
        let root = Cli::command();
        for command in std::iter::once(&root).chain(root.get_subcommands()) {
            for arg in command.get_arguments() {
                if arg.get_help().is_none() && !["help", "version"].contains(&arg.get_id().as_str())
                {
                    missing.push(format!("{} {}", command.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
