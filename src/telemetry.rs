//! Logging set-up, in one place.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter `{filter}`: {reason}")]
    Filter { filter: String, reason: String },
    #[error("a global logger is already installed")]
    AlreadyInstalled,
}

/// Installs the global subscriber: `RUST_LOG` when set, else `log.filter`.
pub fn init(config: &LogConfig) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => f,
        _ => config.filter.clone(),
    };
    let env_filter = EnvFilter::try_new(&filter).map_err(|e| TelemetryError::Filter {
        filter: filter.clone(),
        reason: e.to_string(),
    })?;
    let registry = tracing_subscriber::registry().with(env_filter);
    let result = match config.format {
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer()).try_init(),
        LogFormat::Json => registry
            .with(tracing_subscriber::fmt::layer().json().flatten_event(true))
            .try_init(),
    };
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}
