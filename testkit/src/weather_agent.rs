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

/// The WeatherAgent connected to `sidecar` under its principal's `token`,
/// in the background, once a caller sending `authorization` (an
/// `Authorization` header value) can read its TD.
pub async fn start_with_token(sidecar: &crate::TestSidecar, token: &str, authorization: &str) {
    let url = sidecar.ws_url();
    let token = token.to_owned();
    tokio::spawn(async move {
        serve_with_token(&url, Some(&token))
            .await
            .map_err(|e| e.to_string())
    });
    crate::wait_for_td_as(sidecar, THING_ID, &[("Authorization", authorization)]).await;
}
