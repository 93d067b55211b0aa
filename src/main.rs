use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use lmos_sidecar::auth::credentials;
use lmos_sidecar::config::{Config, LogFormat, Overrides};
use lmos_sidecar::{client, telemetry, Application};

/// Publish-subscribe sidecar for LMOS agents: an embedded MQTT broker and an
/// `lmosprotocol` WebSocket gateway.
#[derive(Debug, Parser)]
#[command(name = "lmos-sidecar", version)]
struct Cli {
    /// TOML configuration file (see config/lmos-sidecar.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// MQTT 3.1.1 listener, e.g. 127.0.0.1:1883 (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT")]
    mqtt_addr: Option<SocketAddr>,
    /// MQTT 5 listener, e.g. 127.0.0.1:1884.
    #[arg(long, value_name = "HOST:PORT")]
    mqtt5_addr: Option<SocketAddr>,
    /// HTTP listener; WebSocket clients connect to ws://HOST:PORT/lmos.
    #[arg(long, value_name = "HOST:PORT")]
    http_addr: Option<SocketAddr>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Print the effective configuration as TOML and exit (same as the
    /// `config` subcommand).
    #[arg(long)]
    print_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the effective configuration (defaults < file < environment <
    /// flags) as TOML and exit.
    Config,
    /// Print a Thing's events and property changes as they come.
    Sub {
        #[command(flatten)]
        to: Target,
        /// Events to subscribe to; none: all events.
        #[arg(long = "event")]
        events: Vec<String>,
        /// Properties to observe.
        #[arg(long = "property")]
        properties: Vec<String>,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<usize>,
        /// Subscribe over MQTT instead (e.g. mqtt://127.0.0.1:1883), on the
        /// sidecar's topics.
        #[arg(long)]
        mqtt: Option<String>,
        /// Topic prefix, with --mqtt.
        #[arg(long, default_value = "lmos")]
        prefix: String,
    },
    /// Read a property.
    Read {
        #[command(flatten)]
        to: Target,
        name: String,
    },
    /// Write a property (VALUE is JSON; a bare word is taken as a string).
    Write {
        #[command(flatten)]
        to: Target,
        name: String,
        value: String,
    },
    /// Invoke an action and print its actionStatus stream.
    Invoke {
        #[command(flatten)]
        to: Target,
        action: String,
        /// The input (JSON).
        input: Option<String>,
        /// Names the invocation for later query/cancel.
        #[arg(long)]
        correlation_id: Option<String>,
    },
    /// The latest status of an invocation.
    Query {
        #[command(flatten)]
        to: Target,
        action: String,
        #[arg(long)]
        correlation_id: Option<String>,
    },
    /// Cancel an invocation.
    Cancel {
        #[command(flatten)]
        to: Target,
        action: String,
        #[arg(long)]
        correlation_id: Option<String>,
    },
    /// List the Thing Descriptions in a directory.
    Things {
        /// The directory, e.g. http://127.0.0.1:8080
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        #[arg(long)]
        json: bool,
    },
    /// Read a password from standard input and print its Argon2 hash, for
    /// `password_hash` in [[auth.principals]].
    HashPassword,
    /// Print a new random bearer token and, for `token_sha256` in
    /// [[auth.principals]], its SHA-256.
    NewToken,
    /// Check that an lmosprotocol WebSocket endpoint behaves as the draft asks.
    Check {
        /// e.g. ws://127.0.0.1:8080/lmos
        url: String,
    },
}

/// Where a client subcommand goes and how it prints.
#[derive(Debug, clap::Args)]
struct Target {
    /// The Thing's ID.
    #[arg(long)]
    thing: String,
    /// The lmosprotocol endpoint.
    #[arg(long, default_value = "ws://127.0.0.1:8080/lmos")]
    url: String,
    /// One JSON message per line instead of text.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for each answer.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

impl Target {
    fn output(&self) -> client::Output {
        if self.json {
            client::Output::Json
        } else {
            client::Output::Human
        }
    }
}

fn json_arg(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

/// Runs a client subcommand; the exit code says how it went: 0 success,
/// 1 the Thing answered with an error or a failed action, 2 no answer.
fn run_client(command: Command) -> std::process::ExitCode {
    use serde_json::json;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        let ask = |to: &Target, message_type: &str, members: serde_json::Value| {
            let request = client::message(&to.thing, message_type, members);
            (
                to.url.clone(),
                request,
                to.output(),
                std::time::Duration::from_secs(to.timeout),
            )
        };
        // An action, and the correlation ID that names the invocation.
        let named = |action: &str, c: Option<String>| {
            let mut members = c.map_or(json!({}), |c| json!({"correlationID": c}));
            members["action"] = json!(action);
            members
        };
        let (url, request, output, timeout) = match command {
            Command::Sub {
                to,
                events,
                properties,
                count,
                mqtt: Some(mqtt),
                prefix,
            } => {
                let topics = lmos_sidecar::topics::Topics::new(&prefix)
                    .map_err(|e| client::ClientError::Usage(e.to_string()))?;
                let mut filters: Vec<String> =
                    events.iter().map(|e| topics.event(&to.thing, e)).collect();
                filters.extend(properties.iter().map(|p| topics.property(&to.thing, p)));
                if filters.is_empty() {
                    filters.push(topics.thing_events_filter(&to.thing));
                }
                return client::subscribe_mqtt(&mqtt, filters, to.output(), count).await;
            }
            Command::Sub {
                to,
                events,
                properties,
                count,
                ..
            } => {
                let mut requests = Vec::new();
                if events.is_empty() && properties.is_empty() {
                    requests.push(client::message(&to.thing, "subscribeAllEvents", json!({})));
                }
                for e in events {
                    requests.push(client::message(
                        &to.thing,
                        "subscribeEvent",
                        json!({"event": e}),
                    ));
                }
                for p in properties {
                    requests.push(client::message(
                        &to.thing,
                        "observeProperty",
                        json!({"name": p}),
                    ));
                }
                return client::subscribe(&to.url, requests, to.output(), count).await;
            }
            Command::Things { url, json } => {
                let output = if json {
                    client::Output::Json
                } else {
                    client::Output::Human
                };
                return client::things(&url, output).await;
            }
            Command::Check { url } => {
                let report = client::check::run(&url).await;
                print!("{}", client::check::table(&report));
                return Ok(report.iter().all(|c| c.passed));
            }
            Command::Read { to, name } => ask(&to, "readProperty", json!({"name": name})),
            Command::Write { to, name, value } => ask(
                &to,
                "writeProperty",
                json!({"name": name, "data": json_arg(&value)}),
            ),
            Command::Invoke {
                to,
                action,
                input,
                correlation_id,
            } => {
                let mut members = named(&action, correlation_id);
                if let Some(input) = input {
                    members["input"] = json_arg(&input);
                }
                ask(&to, "invokeAction", members)
            }
            Command::Query {
                to,
                action,
                correlation_id,
            } => ask(&to, "queryAction", named(&action, correlation_id)),
            Command::Cancel {
                to,
                action,
                correlation_id,
            } => ask(&to, "cancelAction", named(&action, correlation_id)),
            Command::Config | Command::HashPassword | Command::NewToken => {
                unreachable!("handled before")
            }
        };
        client::request(&url, request, output, timeout).await
    });
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    match cli.command.take() {
        Some(Command::Config) => cli.print_config = true,
        Some(Command::HashPassword) => return hash_password(),
        Some(Command::NewToken) => {
            let token = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            println!("token        = {token}");
            println!(
                "token_sha256 = \"{}\"",
                credentials::sha256_hex(token.as_bytes())
            );
            return std::process::ExitCode::SUCCESS;
        }
        Some(client_command) => return run_client(client_command),
        None => {}
    }
    if let Err(e) = run(cli) {
        // One line with the whole chain of causes, not a backtrace.
        eprintln!("Error: {e:#}");
        return std::process::ExitCode::from(1);
    }
    std::process::ExitCode::SUCCESS
}

fn hash_password() -> std::process::ExitCode {
    let mut password = String::new();
    if std::io::stdin().read_line(&mut password).is_err() {
        eprintln!("Error: cannot read the password from standard input.");
        return std::process::ExitCode::from(2);
    }
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        eprintln!("Error: the password is empty.");
        return std::process::ExitCode::from(2);
    }
    println!(
        "password_hash = \"{}\"",
        credentials::hash_password(password)
    );
    std::process::ExitCode::SUCCESS
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let overrides = Overrides {
        mqtt_listen: cli.mqtt_addr,
        mqtt5_listen: cli.mqtt5_addr,
        http_listen: cli.http_addr,
    };
    let mut config =
        Config::load(cli.config.as_deref(), &overrides).context("invalid configuration")?;
    if let Some(format) = cli.log_format.as_deref() {
        config.log.format = if format == "json" {
            LogFormat::Json
        } else {
            LogFormat::Text
        };
    }
    if cli.print_config {
        print!("{}", config.to_toml());
        return Ok(());
    }
    telemetry::init(&config.log).context("cannot set up logging")?;
    match telemetry::memory::raise_open_files_limit() {
        // Connections the caps allow, against descriptors (see
        // `raise_open_files_limit`): said once, so an operator knows why
        // connections fail past it.
        Ok((soft, hard)) => {
            let needed =
                config.http.max_connections as u64 + config.mqtt.max_connections as u64 + 64;
            if soft < needed {
                tracing::warn!(open_files = soft, hard_limit = hard, needed, "The open-files limit is below what http.max_connections and mqtt.max_connections allow (one descriptor per WebSocket or MQTT client); connections past it will fail. Raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower the caps.");
            } else {
                tracing::info!(open_files = soft, hard_limit = hard, "Open-files limit.");
            }
        }
        Err(e) => tracing::warn!(error = %e, "Could not read or raise the open-files limit."),
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let app = Application::build(config)
            .await
            .context("cannot start the sidecar")?;
        app.run(shutdown_signal())
            .await
            .context("the sidecar failed")
    })?;
    // rumqttd's threads never stop; leaving main ends them with the process.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
