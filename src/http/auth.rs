//! Who is calling: the `Authorization` header checked against the schemes
//! the HTTP port requires (`http.authentication`).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tracing::info;

use crate::auth::{Access, Authority, Principal};
use crate::config::HttpScheme;
use crate::telemetry::metrics::{self, Metrics};

/// What the port requires, shared with every handler.
#[derive(Debug, Clone)]
pub struct HttpAuth {
    pub authority: Authority,
    pub schemes: Vec<HttpScheme>,
    pub metrics: Metrics,
}

const REALM: &str = "lmos-sidecar";

impl HttpAuth {
    /// The caller's principal, or the 401 to answer. Without required
    /// schemes every caller is the anonymous principal.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Response> {
        if self.schemes.is_empty() {
            return Ok(self.authority.anonymous());
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '));
        let Some((scheme, credentials)) = given else {
            self.metrics.auth_failure(metrics::HTTP, "missing");
            return Err(self.unauthorized("This port requires authentication."));
        };
        let credentials = credentials.trim().to_owned();
        let authority = self.authority.clone();
        let wants = |s| self.schemes.contains(&s);
        let found = if scheme.eq_ignore_ascii_case("basic") && wants(HttpScheme::Basic) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(credentials)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|d| d.split_once(':')) {
                // Argon2 is slow by design; keep it off the async threads.
                Some((name, password)) => {
                    let (name, password) = (name.to_owned(), password.to_owned());
                    tokio::task::spawn_blocking(move || {
                        authority.password(&name, password.as_bytes())
                    })
                    .await
                    .ok()
                    .flatten()
                }
                None => None,
            }
        } else if scheme.eq_ignore_ascii_case("bearer") && wants(HttpScheme::Bearer) {
            authority.token(credentials.as_bytes())
        } else {
            self.metrics.auth_failure(metrics::HTTP, "scheme");
            return Err(self.unauthorized("This port does not accept that authentication scheme."));
        };
        found.ok_or_else(|| {
            self.metrics.auth_failure(metrics::HTTP, "invalid");
            info!(scheme, "Refused invalid credentials.");
            self.unauthorized("The credentials are not valid.")
        })
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
        let principal = auth.authenticate(&parts.headers).await?;
        Ok(Caller { principal, auth })
    }
}
