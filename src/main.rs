use anyhow::Context;
use clap::Parser;
use lmos_sidecar::client::cli::{Cli, Command};
use lmos_sidecar::client::run::{print, run_client};
use lmos_sidecar::config::{Config, LogFormat, Overrides};
use lmos_sidecar::{telemetry, Application};

fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    match cli.command.take() {
        Some(Command::Config) => cli.print_config = true,
        Some(client_command) => return run_client(client_command),
        None => {}
    }
    if cli.print_config {
        return match load(&cli) {
            Ok(config) => print(&config.to_toml()),
            Err(e) => fail(&e),
        };
    }
    if let Err(e) = run(cli) {
        return fail(&e);
    }
    std::process::ExitCode::SUCCESS
}

/// One line with the whole chain of causes, not a backtrace.
fn fail(e: &anyhow::Error) -> std::process::ExitCode {
    eprintln!("Error: {e:#}");
    std::process::ExitCode::from(1)
}

/// Defaults < file < environment < flags.
fn load(cli: &Cli) -> anyhow::Result<Config> {
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
    Ok(config)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = load(&cli)?;
    telemetry::init(&config.log).context("cannot set up logging")?;
    open_files(&mut config);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Before anything starts: a SIGTERM during start-up (a deploy
        // rolling on) is a clean stop too, not a kill by the signal.
        let shutdown = shutdown_signal();
        let app = Application::build(config)
            .await
            .context("cannot start the sidecar")?;
        app.run(shutdown).await.context("the sidecar failed")
    })?;
    // rumqttd's threads never stop; leaving main ends them with the process.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

/// Raises the open-files limit and fits the connection caps to it (see
/// `config::descriptors`): said once, so an operator knows why connections
/// would fail past it.
fn open_files(config: &mut Config) {
    use lmos_sidecar::config::descriptors::{fit_connection_caps, Fit};
    match telemetry::memory::raise_open_files_limit() {
        Ok((soft, hard)) => match fit_connection_caps(config, soft) {
            Fit::Enough => tracing::info!(open_files = soft, hard_limit = hard, "Open-files limit."),
            Fit::Lowered { http, mqtt } => tracing::info!(
                open_files = soft,
                hard_limit = hard,
                http.max_connections = http,
                mqtt.max_connections = mqtt,
                "Connection caps sized to the open-files limit (raise it with ulimit -Hn or LimitNOFILE= for more)."
            ),
            Fit::Short { needed } => tracing::warn!(open_files = soft, hard_limit = hard, needed, "The open-files limit is below what http.max_connections and mqtt.max_connections allow (one descriptor per WebSocket or MQTT client); connections past it will fail. Raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower the caps."),
        },
        Err(e) => tracing::warn!(error = %e, "Could not read or raise the open-files limit."),
    }
}

/// Resolves on the first SIGINT or SIGTERM.
/// SIGINT or SIGTERM, with both handlers installed now (a signal that
/// arrives before the future is first polled still counts).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            let (Ok(mut interrupt), Ok(mut terminate)) = (interrupt, terminate) else {
                let _ = tokio::signal::ctrl_c().await;
                return;
            };
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
