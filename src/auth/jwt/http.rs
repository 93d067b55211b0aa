//! Fetching `auth.jwt.jwks_url`: the sidecar's hyper client over rustls
//! (ring, the system's roots plus `jwks_ca_file`), `https://` or plain
//! `http://` to a loopback host only (keys fetched in the clear from
//! another host could be anyone's), each fetch within `jwks_timeout_ms`
//! and its answer within [`MAX_JWKS_BYTES`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use hyper::{StatusCode, Uri};
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::jwks::Fetch;
use super::JwtSetupError;

/// A JWK Set is a few KiB; a provider answering more is not one.
pub(crate) const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The fetch of `url`, checked now.
pub(crate) fn fetcher(url: &str, ca_file: &str, timeout: Duration) -> Result<Fetch, JwtSetupError> {
    let bad = |why: &str| JwtSetupError::Url(url.to_owned(), why.to_owned());
    let uri: Uri = url.parse().map_err(|_| bad("is no valid URL"))?;
    let host = uri.host().ok_or_else(|| bad("has no host"))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if loopback(host) => {}
        Some("http") => {
            return Err(bad(
                "is http:// to a host that is not loopback; use https://",
            ))
        }
        _ => return Err(bad("is neither https:// nor http://")),
    }
    let tls = tls_config(ca_file)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client: Client<_, Body> = Client::builder(TokioExecutor::new()).build(https);
    let client = Arc::new(client);
    Ok(Box::new(move || {
        let (client, uri) = (Arc::clone(&client), uri.clone());
        Box::pin(async move {
            let get = async {
                let mut request = hyper::Request::new(Body::empty());
                *request.uri_mut() = uri;
                request.headers_mut().insert(
                    hyper::header::ACCEPT,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                let response = client.request(request).await.map_err(|e| e.to_string())?;
                if response.status() != StatusCode::OK {
                    return Err(format!("the answer is {}", response.status()));
                }
                body_capped(Body::new(response.into_body()), MAX_JWKS_BYTES).await
            };
            tokio::time::timeout(timeout, get).await.map_err(|_| {
                format!(
                    "no answer within {} ms (auth.jwt.jwks_timeout_ms)",
                    timeout.as_millis()
                )
            })?
        })
    }))
}

fn loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

async fn body_capped(body: Body, max: usize) -> Result<Bytes, String> {
    let mut stream = body.into_data_stream();
    let mut whole = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if whole.len() + chunk.len() > max {
            return Err(format!("the answer is over {max} bytes"));
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(whole))
}

fn tls_config(ca_file: &str) -> Result<rustls::ClientConfig, JwtSetupError> {
    let file = (!ca_file.is_empty()).then(|| std::path::Path::new(ca_file));
    crate::tls::client_config(file).map_err(|e| JwtSetupError::CaFile(ca_file.to_owned(), e))
}
