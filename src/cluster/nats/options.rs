//! `[cluster]` as NATS connection options: the nodes, authentication, TLS,
//! pings and reconnection waits.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{ConnectOptions, ServerAddr};

use crate::config::ClusterConfig;

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("`cluster.url` must be nats://host:port (or tls://), or several separated by commas, not `{0}`")]
    Url(String),
    #[error("`cluster.{key}` names {var}, which is not set")]
    Env { key: &'static str, var: String },
    #[error("cannot read `cluster.creds_file` {path}: {error}")]
    Creds { path: String, error: std::io::Error },
    #[error("`cluster.tls_cert` and `cluster.tls_key` go together")]
    HalfCertificate,
    #[error("`cluster.{0}` is for `cluster.mode = \"nats\"`")]
    NotMqtt(&'static str),
}

/// The nodes of `cluster.url`, in order.
pub fn nodes(url: &str) -> Result<Vec<ServerAddr>, OptionsError> {
    url.split(',')
        .map(str::trim)
        .map(|u| {
            let known = ["nats://", "tls://"].iter().any(|s| u.starts_with(s));
            known
                .then(|| u.parse::<ServerAddr>().ok())
                .flatten()
                .filter(|a| !a.host().is_empty())
                .ok_or_else(|| OptionsError::Url(u.to_owned()))
        })
        .collect()
}

fn env(key: &'static str, var: &str) -> Result<String, OptionsError> {
    std::env::var(var).map_err(|_| OptionsError::Env {
        key,
        var: var.to_owned(),
    })
}

/// The keys only `nats` mode reads, refused in `mqtt` mode rather than
/// silently ignored.
pub fn check_mqtt_mode(config: &ClusterConfig) -> Result<(), OptionsError> {
    for (key, value) in [
        ("token_env", &config.token_env),
        ("creds_file", &config.creds_file),
        ("tls_ca", &config.tls_ca),
        ("tls_cert", &config.tls_cert),
        ("tls_key", &config.tls_key),
    ] {
        if !value.is_empty() {
            return Err(OptionsError::NotMqtt(key));
        }
    }
    Ok(())
}

/// Connection options for `config`; `name` is the connection's name in
/// the servers' monitoring.
pub async fn connect_options(
    config: &ClusterConfig,
    name: &str,
) -> Result<ConnectOptions, OptionsError> {
    let mut options = ConnectOptions::new()
        // Loop avoidance: NATS does not deliver this connection's own
        // publications back to it, so what this sidecar sends never
        // returns to its broker.
        .no_echo()
        .name(name)
        // The sidecar starts (and serves locally) whether or not the
        // cluster answers; the client keeps trying in the background.
        .retry_on_initial_connect()
        // `cluster.url`'s nodes in the order given, as the MQTT bridge
        // tries them (the client would shuffle them).
        .retain_servers_order()
        .max_reconnects(None)
        .ping_interval(Duration::from_secs(config.keep_alive_s.max(1)))
        .client_capacity(config.buffer.max(1))
        .subscription_capacity(config.buffer.max(1024));
    let max = Duration::from_millis(config.reconnect_max_ms.max(100));
    options = options.reconnect_delay_callback(move |attempts| {
        // Doubling from 100 ms, as the MQTT bridge does.
        let doublings = attempts.saturating_sub(1).min(16) as u32;
        (Duration::from_millis(100) * 2u32.pow(doublings)).min(max)
    });
    if !config.username.is_empty() {
        let password = match config.password_env.as_str() {
            "" => String::new(),
            var => env("password_env", var)?,
        };
        options = options.user_and_password(config.username.clone(), password);
    }
    if !config.token_env.is_empty() {
        options = options.token(env("token_env", &config.token_env)?);
    }
    if !config.creds_file.is_empty() {
        options = options
            .credentials_file(&config.creds_file)
            .await
            .map_err(|error| OptionsError::Creds {
                path: config.creds_file.clone(),
                error,
            })?;
    }
    if !config.tls_ca.is_empty() {
        options = options
            .require_tls(true)
            .add_root_certificates(PathBuf::from(&config.tls_ca));
    }
    match (config.tls_cert.as_str(), config.tls_key.as_str()) {
        ("", "") => {}
        ("", _) | (_, "") => return Err(OptionsError::HalfCertificate),
        (cert, key) => {
            options = options.add_client_certificate(PathBuf::from(cert), PathBuf::from(key));
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_nats_nodes() {
        let n = nodes("nats://a:4222, tls://b:4223").unwrap();
        assert_eq!((n[0].host(), n[0].port()), ("a", 4222));
        assert!(n[1].tls_required());
        assert!(nodes("mqtt://a:1883").is_err());
        assert!(nodes("nats://a:1,b:2")
            .unwrap_err()
            .to_string()
            .contains("`b:2`"));
    }

    #[tokio::test]
    async fn credentials_come_from_the_environment_and_files() {
        let config = ClusterConfig {
            username: "u".into(),
            password_env: "LMOS_TEST_SURELY_UNSET_PASSWORD".into(),
            ..ClusterConfig::default()
        };
        let e = connect_options(&config, "n").await.unwrap_err();
        assert!(
            e.to_string().contains("LMOS_TEST_SURELY_UNSET_PASSWORD"),
            "{e}"
        );
        let config = ClusterConfig {
            creds_file: "/nonexistent/x.creds".into(),
            ..ClusterConfig::default()
        };
        assert!(matches!(
            connect_options(&config, "n").await,
            Err(OptionsError::Creds { .. })
        ));
        let config = ClusterConfig {
            tls_cert: "c.pem".into(),
            ..ClusterConfig::default()
        };
        assert!(matches!(
            connect_options(&config, "n").await,
            Err(OptionsError::HalfCertificate)
        ));
        assert!(check_mqtt_mode(&config).is_err());
    }
}
