use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use lmos_sidecar::config::{Config, LogFormat, Overrides};
use lmos_sidecar::{telemetry, Application};

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
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        // One line with the whole chain of causes, not a backtrace.
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
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
    if cli.print_config || matches!(cli.command, Some(Command::Config)) {
        print!("{}", config.to_toml());
        return Ok(());
    }
    telemetry::init(&config.log).context("cannot set up logging")?;

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
