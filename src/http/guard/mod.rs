//! What a browser could be made to send, checked for the whole HTTP port
//! before any handler (and before authentication, so a refused page costs
//! no password check):
//!
//! - the `Host` a request names: on a loopback listener only loopback names
//!   and addresses (and `http.allowed_hosts`, `discovery.public_host`), so a
//!   page whose DNS name was rebound to 127.0.0.1 is not served (421);
//! - the `Origin` of a WebSocket handshake and of every state-changing
//!   request: the sidecar's own origins and `http.allowed_origins` only
//!   (403). A request without `Origin` is not from a browser's page and
//!   passes (curl, node-wot, MQTT tools, the CLI);
//! - the `Content-Type` of a state-changing body: JSON only (415). A page
//!   may send `text/plain`, a form or `multipart/form-data` to any origin
//!   without asking first; a JSON type needs a CORS preflight, which this
//!   port never grants (it sends no `Access-Control-Allow-*` header);
//! - the site a browser says a request comes from (`Sec-Fetch-Site`, sent
//!   on every request, `<img src>` and no-cors fetches included, which carry
//!   no `Origin`), on every request that can reach an agent or change state:
//!   `cross-site`, or `same-site` (another port of localhost is the same
//!   site but another origin) from an origin that is not the sidecar's own
//!   or in `http.allowed_origins`, is refused (403) before it reaches an
//!   agent. A page cannot read a cross-origin answer, but without this the
//!   agent would still work for it (issue 43): read a property, stream an
//!   event. `same-origin` and `none` (typed in the address bar) pass, and so
//!   does a request without the header (curl, node-wot, the CLI, SDKs).
//!
//! Which requests the site rule leaves alone: `GET`/`HEAD` of what reaches
//! no agent and changes nothing, i.e. the TD directory (`/things`,
//! `/things/{id}`), `/.well-known/*` and A2A agent cards, `/console` and its
//! assets and state, `/metrics`, `/healthz`, `/readyz`. Their answers are
//! the sidecar's own, a page on another site cannot read them (no CORS), and
//! a cross-site `<img src=/readyz>` costs a lookup, no agent's work; leaving
//! them open keeps links and monitoring dashboards that embed or open them
//! working. Everything else is checked, unknown paths included: what reaches
//! an agent must be listed nowhere to be protected.

mod names;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::warn;

pub use names::{Authority, Host, Origin, Pattern};

use crate::config::HttpConfig;
use crate::telemetry::metrics::{self, Metrics};

const JSON: &str = "application/json";
const TD_JSON: &str = "application/td+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// The rules, built once from the configuration and the bound address.
#[derive(Clone)]
pub struct Guard(Arc<Rules>);

struct Rules {
    /// Host names served besides IP addresses; `None`: any.
    names: Option<Vec<Pattern>>,
    /// Names whose origins on `port` are the sidecar's own: the served
    /// names, or (when any is served) localhost and the public host.
    own: Vec<Pattern>,
    origins: Vec<Origin>,
    any_origin: bool,
    null_origin: bool,
    /// The listener's port: an origin on a served name and this port is
    /// the sidecar's own.
    port: u16,
    metrics: Metrics,
    logged: [Throttle; 4],
}

/// Checks each `http.allowed_hosts` and `http.allowed_origins` entry;
/// `Err` names the key and what is wrong.
pub fn validate(config: &HttpConfig) -> Result<(), (&'static str, String)> {
    for entry in &config.allowed_hosts {
        if entry != "*" {
            Pattern::parse(entry).map_err(|e| ("http.allowed_hosts", e))?;
        }
    }
    for entry in &config.allowed_origins {
        if entry != "*" && entry != "null" {
            Origin::parse(entry).map_err(|e| ("http.allowed_origins", e))?;
        }
    }
    Ok(())
}

impl Guard {
    /// `bound`: the address the HTTP port listens on; `public_host`:
    /// `discovery.public_host`. Entries that do not parse were refused by
    /// [`validate`] at load and are skipped here.
    pub fn new(
        config: &HttpConfig,
        public_host: &str,
        bound: std::net::SocketAddr,
        metrics: Metrics,
    ) -> Guard {
        let listed = &config.allowed_hosts;
        let own: Vec<Pattern> = ["localhost", "*.localhost", public_host]
            .into_iter()
            .chain(listed.iter().map(String::as_str))
            .filter_map(|h| Pattern::parse(h).ok())
            .collect();
        let any =
            listed.iter().any(|h| h == "*") || (listed.is_empty() && !bound.ip().is_loopback());
        let origins = &config.allowed_origins;
        Guard(Arc::new(Rules {
            names: (!any).then(|| own.clone()),
            own,
            origins: origins
                .iter()
                .filter_map(|o| Origin::parse(o).ok())
                .collect(),
            any_origin: origins.iter().any(|o| o == "*"),
            null_origin: origins.iter().any(|o| o == "null"),
            port: bound.port(),
            metrics,
            logged: Default::default(),
        }))
    }

    /// Whether requests naming `host` are served. IP addresses always are:
    /// DNS rebinding needs a name.
    fn serves(&self, host: &Host) -> bool {
        match (&self.0.names, host) {
            (None, _) | (_, Host::Ip(_)) => true,
            (Some(names), host) => names.iter().any(|p| p.matches(host)),
        }
    }

    /// The sidecar's own origins: the server the request itself names, or
    /// a name it serves (an address on loopback) on its own port.
    fn is_own(&self, origin: &Origin, host: Option<&Authority>) -> bool {
        if host.is_some_and(|h| origin.is_same_server(h)) {
            return true;
        }
        let named = origin.host.is_loopback() || self.0.own.iter().any(|p| p.matches(&origin.host));
        named && origin.port == self.0.port
    }

    fn admits_origin(&self, value: &str, host: Option<&Authority>) -> bool {
        let rules = &self.0;
        if value == "null" {
            return rules.null_origin;
        }
        match Origin::parse(value) {
            Ok(origin) => {
                rules.any_origin || rules.origins.contains(&origin) || self.is_own(&origin, host)
            }
            Err(_) => rules.any_origin,
        }
    }

    /// The refusal for a request the rules do not admit, if any.
    fn check(&self, request: &Request) -> Option<Response> {
        let headers = request.headers();
        let host = request.uri().authority().map(|a| a.as_str()).or_else(|| {
            let value = headers.get(header::HOST)?;
            Some(value.to_str().unwrap_or("(not text)"))
        });
        // No Host at all (HTTP/1.0) is no browser's.
        let authority = match host {
            None => None,
            Some(text) => match Authority::parse(text) {
                Some(a) if self.serves(&a.host) => Some(a),
                _ => return Some(self.misdirected(text)),
            },
        };
        let changes_state = !matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        );
        if changes_state || headers.contains_key(header::UPGRADE) {
            if let Some(origin) = headers.get(header::ORIGIN) {
                let text = origin.to_str().unwrap_or("(not text)");
                if !self.admits_origin(text, authority.as_ref()) {
                    return Some(self.foreign(text));
                }
            }
        }
        let read_only = matches!(*request.method(), Method::GET | Method::HEAD)
            && !headers.contains_key(header::UPGRADE)
            && reaches_no_agent(request.uri().path());
        if !read_only {
            if let Some(site) = headers.get(SEC_FETCH_SITE) {
                let origin = headers.get(header::ORIGIN);
                if !self.admits_site(site, origin, authority.as_ref()) {
                    return Some(self.cross_site(request, site, origin));
                }
            }
        }
        if changes_state && has_body(headers) {
            let accepted = accepted_types(request.method(), request.uri().path());
            let given = headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap_or("(not text)"));
            if !given.is_some_and(|g| accepted.contains(&media_type(g).as_str())) {
                return Some(self.unsupported(request, given, accepted));
            }
        }
        None
    }

    /// Whether a browser's request from `site` may reach an agent: from the
    /// page's own origin or typed by the user; from another page only when
    /// its `Origin` is the sidecar's own or listed (with `*` listed, any
    /// page, even one that sends no `Origin`).
    fn admits_site(
        &self,
        site: &HeaderValue,
        origin: Option<&HeaderValue>,
        host: Option<&Authority>,
    ) -> bool {
        if matches!(site.as_bytes(), b"same-origin" | b"none") {
            return true;
        }
        match origin {
            Some(o) => self.admits_origin(o.to_str().unwrap_or("(not text)"), host),
            None => self.0.any_origin,
        }
    }

    fn cross_site(
        &self,
        request: &Request,
        site: &HeaderValue,
        origin: Option<&HeaderValue>,
    ) -> Response {
        self.0.metrics.limit_hit(metrics::HTTP, "allowed_origins");
        let site = site.to_str().unwrap_or("(not text)");
        let origin = origin.map(|o| o.to_str().unwrap_or("(not text)"));
        if self.0.logged[3].due() {
            warn!(sec_fetch_site = ?site, origin = ?origin, path = ?request.uri().path(), "Refused a browser's request from another site before it reached an agent (Sec-Fetch-Site, http.allowed_origins). Logged at most once a minute.");
        }
        let from = match origin {
            Some(o) => format!("a web page at `{o}`"),
            None => {
                "a web page that did not say its origin (an `<img>`, a no-cors fetch)".to_owned()
            }
        };
        problem(
            StatusCode::FORBIDDEN,
            format!(
                "The browser says this request comes from another site (`Sec-Fetch-Site: {site}`), from {from}: pages of other origins may not make this sidecar call an agent or change state. If that page is yours, add its origin to http.allowed_origins."
            ),
        )
    }

    fn misdirected(&self, host: &str) -> Response {
        self.0.metrics.limit_hit(metrics::HTTP, "allowed_hosts");
        if self.0.logged[0].due() {
            warn!(host = ?host, "Refused a request for a host name this sidecar does not serve (http.allowed_hosts); a DNS-rebinding page looks like this. Logged at most once a minute.");
        }
        problem(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "This sidecar does not serve the host name `{host}` on this port: it answers to localhost, IP addresses, discovery.public_host and the names in http.allowed_hosts, so that a web page whose DNS name was pointed at it cannot use it. If clients reach the sidecar by this name, add it to http.allowed_hosts."
            ),
        )
    }

    fn foreign(&self, origin: &str) -> Response {
        self.0.metrics.limit_hit(metrics::HTTP, "allowed_origins");
        if self.0.logged[1].due() {
            warn!(origin = ?origin, "Refused a request from a web page of another origin (http.allowed_origins). Logged at most once a minute.");
        }
        let detail = if origin == "null" {
            "A browser sent `Origin: null` (a sandboxed frame, a local file or a redirect across origins): such pages may not open WebSockets or change state here. Add \"null\" to http.allowed_origins to allow them (any page can claim it).".to_owned()
        } else {
            format!("A web page at `{origin}` may not open WebSockets or change state on this sidecar: only its own origin may. If that page is yours, add its origin to http.allowed_origins.")
        };
        problem(StatusCode::FORBIDDEN, detail)
    }

    fn unsupported(&self, request: &Request, given: Option<&str>, accepted: &[&str]) -> Response {
        self.0.metrics.limit_hit(metrics::HTTP, "content_type");
        if self.0.logged[2].due() {
            warn!(content_type = ?given, path = ?request.uri().path(), "Refused a request body that is not JSON. Logged at most once a minute.");
        }
        let given = match given {
            Some(g) => format!("says `{g}`"),
            None => "has no Content-Type".to_owned(),
        };
        let detail = format!(
            "The body of `{} {}` must be JSON, with Content-Type {} (a `; charset=utf-8` may follow); this request {given}.",
            request.method(),
            request.uri().path(),
            accepted
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(" or "),
        );
        // A2A's JSON-RPC clients read a JSON-RPC error (-32005).
        if request.method() == Method::POST && request.uri().path().starts_with("/a2a/") {
            return crate::http::a2a::content_type_refused(&detail);
        }
        let mut response = problem(StatusCode::UNSUPPORTED_MEDIA_TYPE, detail);
        if request.method() == Method::PATCH {
            if let Ok(v) = HeaderValue::from_str(&accepted.join(", ")) {
                response.headers_mut().insert("accept-patch", v);
            }
        }
        response
    }
}

/// The middleware: the request goes on only if the rules admit it.
pub async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard.check(&request) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}

/// A body is announced by a non-zero `Content-Length` or by any
/// `Transfer-Encoding` (chunked: its length is unknown until read). An
/// empty body carries nothing to misread, whatever its Content-Type says;
/// node-wot invokes an action without input so, with no Content-Type.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// `type/subtype` in lower case, without parameters.
fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether `path` is one of the read-only routes the site rule leaves
/// alone (see the module doc): it reaches no agent.
fn reaches_no_agent(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        segments.as_slice(),
        [""] | ["healthz"]
            | ["readyz"]
            | ["metrics"]
            | ["things"]
            | ["things", _]
            | [".well-known", ..]
            | ["console"]
            | ["console", ..]
            | ["a2a", _, ".well-known", _]
    )
}

/// The media types a state-changing body may have: a JSON merge patch for
/// `PATCH /things/{id}`, a TD for the rest of the directory, JSON for the
/// HTTP binding.
fn accepted_types(method: &Method, path: &str) -> &'static [&'static str] {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["things", _] if *method == Method::PATCH => &[MERGE_PATCH],
        ["things"] | ["things", _] => &[TD_JSON, JSON],
        _ => &[JSON],
    }
}

/// RFC 9457 problem details with the status's own title.
fn problem(status: StatusCode, detail: String) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or_default(),
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// A warning that repeats at most once a minute, however many requests
/// cause it.
#[derive(Default)]
pub struct Throttle(Mutex<Option<Instant>>);

impl Throttle {
    const EVERY: Duration = Duration::from_secs(60);

    pub fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= Self::EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests;
