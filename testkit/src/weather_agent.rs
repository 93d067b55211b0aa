//! The LMOS draft's WeatherAgent for the tests and benches: the sidecar's
//! own demo agent (`lmos_sidecar::demo_agent`, which `lmos-sidecar
//! demo-agent` and `examples/weather_agent.rs` run), started in-process.

pub use lmos_sidecar::demo_agent::{
    serve, serve_reconnecting, serve_with_token, FIRST_BACKOFF, MAX_BACKOFF, THING_DESCRIPTION,
    THING_ID,
};

/// A sidecar on the test configuration with the WeatherAgent connected,
/// its TD registered.
pub async fn start_sidecar() -> crate::TestSidecar {
    crate::start_with_agent(crate::test_config(), THING_ID, |url| async move {
        serve(&url).await.map_err(|e| e.to_string())
    })
    .await
}
