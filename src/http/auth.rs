//! Who is calling: the `Authorization` header checked against the schemes
//! the HTTP port requires (`http.authentication`), else the connection's
//! client certificate (`http.tls_client_ca`).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tracing::{debug, info};

use crate::auth::{Access, Authority, Credentials, Principal, Refused};
use crate::config::HttpScheme;
use crate::telemetry::metrics::{self, Metrics};
use crate::tls::identity::Certified;

/// What the port requires, shared with every handler.
#[derive(Debug, Clone)]
pub struct HttpAuth {
    pub authority: Authority,
    pub schemes: Vec<HttpScheme>,
    pub metrics: Metrics,
}

const REALM: &str = "lmos-sidecar";

impl HttpAuth {
    /// As [`HttpAuth::authenticate_from`], for a caller whose address is
    /// not known (all such callers share one failure count per name) and
    /// who presented no client certificate.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Response> {
        self.authenticate_from(headers, None, None).await
    }

    /// The caller's principal, or the refusal to answer (401, or 429/503
    /// when the credentials were not even checked).
    ///
    /// An `Authorization` header the port checks (`http.authentication`)
    /// wins; without one, the connection's client certificate
    /// (`certified`, verified against `http.tls_client_ca`) names the
    /// principal, even where no scheme is required: a port that asks for
    /// certificates authenticates by them. Neither: the anonymous principal
    /// where no scheme is required, else 401.
    pub async fn authenticate_from(
        &self,
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
        certified: Option<&Certified>,
    ) -> Result<Principal, Response> {
        let header = !self.schemes.is_empty() && headers.contains_key(header::AUTHORIZATION);
        match certified {
            Some(certified) if !header => self.certified(certified),
            _ if self.schemes.is_empty() => Ok(self.authority.anonymous()),
            _ => self.credentials(headers, peer).await,
        }
    }

    /// The principal a client certificate names, or 401 (no entry of that
    /// name: refused like bad credentials).
    #[allow(clippy::result_large_err)]
    fn certified(&self, certified: &Certified) -> Result<Principal, Response> {
        if let Some(principal) = self.authority.certificate(certified.name()) {
            return Ok(principal);
        }
        self.metrics.auth_failure(metrics::HTTP, "certificate");
        debug!(identity = ?certified.name(), "Refused a client certificate naming no principal.");
        Err(self.unauthorized(
            "The client certificate names no principal of this sidecar ([[auth.principals]]).",
        ))
    }

    /// The `Authorization` header's credentials, checked.
    async fn credentials(
        &self,
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Result<Principal, Response> {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '));
        let Some((scheme, credentials)) = given else {
            self.metrics.auth_failure(metrics::HTTP, "missing");
            return Err(self.unauthorized("This port requires authentication."));
        };
        let credentials = credentials.trim();
        let wants = |s| self.schemes.contains(&s);
        let decoded;
        let presented = if scheme.eq_ignore_ascii_case("basic") && wants(HttpScheme::Basic) {
            decoded = base64::engine::general_purpose::STANDARD
                .decode(credentials)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            decoded
                .as_deref()
                .and_then(|d| d.split_once(':'))
                .map(|(name, password)| Credentials::Password {
                    name,
                    password: password.as_bytes(),
                })
        } else if scheme.eq_ignore_ascii_case("bearer") && wants(HttpScheme::Bearer) {
            Some(Credentials::Token(credentials.as_bytes()))
        } else {
            self.metrics.auth_failure(metrics::HTTP, "scheme");
            return Err(self.unauthorized("This port does not accept that authentication scheme."));
        };
        let Some(presented) = presented else {
            self.metrics.auth_failure(metrics::HTTP, "invalid");
            debug!(scheme, "Refused malformed Basic credentials.");
            return Err(self.unauthorized("The credentials are not valid."));
        };
        let addr = peer.map(|p| p.ip());
        self.authority
            .verify(addr, presented)
            .await
            .map_err(|refused| self.refused(scheme, refused))
    }

    /// Counted here; logged by the verifier, once per flood.
    fn refused(&self, scheme: &str, refused: Refused) -> Response {
        debug!(scheme, ?refused, "Refused credentials.");
        let (status, reason, text) = match refused {
            Refused::Invalid | Refused::Expired => {
                self.metrics.auth_failure(metrics::HTTP, refused.reason());
                return self.unauthorized("The credentials are not valid.");
            }
            Refused::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "The sidecar is checking too many credentials at once; yours were not checked. Try again shortly.",
            ),
            Refused::Throttled(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "throttled",
                "Too many failed attempts from this address for this name; the credentials were not checked. Try again after the time in Retry-After.",
            ),
        };
        self.metrics.auth_failure(metrics::HTTP, reason);
        let mut response = (status, format!("{text}\n")).into_response();
        // Whole seconds, rounded up: a client retrying on time is let in.
        let wait = refused.retry_after().unwrap_or_default();
        let seconds = wait.as_millis().div_ceil(1000).max(1);
        if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }

    fn unauthorized(&self, text: &'static str) -> Response {
        let mut response = (StatusCode::UNAUTHORIZED, format!("{text}\n")).into_response();
        for scheme in &self.schemes {
            let challenge = match scheme {
                HttpScheme::Basic => format!("Basic realm=\"{REALM}\", charset=\"UTF-8\""),
                HttpScheme::Bearer => format!("Bearer realm=\"{REALM}\""),
            };
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                response.headers_mut().append(header::WWW_AUTHENTICATE, v);
            }
        }
        response
    }
}

/// The authenticated caller of a handler.
pub struct Caller {
    pub principal: Principal,
    auth: HttpAuth,
}

impl Caller {
    /// `Ok` when the caller may; else the 403 to answer, counted and logged.
    #[allow(clippy::result_large_err)]
    pub fn may(&self, access: Access, thing: &str) -> Result<(), Response> {
        if self.principal.may(access, thing) {
            return Ok(());
        }
        self.auth.metrics.denied(metrics::HTTP, access.as_str());
        info!(
            principal = self.principal.name(),
            access = access.as_str(),
            "Denied a directory request."
        );
        let detail = format!(
            "`{}` needs `{access}` access to `{thing}` for this, which [auth] does not grant.",
            self.principal.name()
        );
        Err(forbidden(detail))
    }
}

/// An RFC 9457 problem, as the directory's other errors.
fn forbidden(detail: String) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": detail,
    });
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let auth = parts
            .extensions
            .get::<HttpAuth>()
            .cloned()
            .expect("the router adds HttpAuth to every request");
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer);
        let certified = parts.extensions.get::<Certified>();
        let principal = auth
            .authenticate_from(&parts.headers, peer, certified)
            .await?;
        Ok(Caller { principal, auth })
    }
}
