use super::*;
use axum::body::Body;

fn guard(listen: &str, hosts: &[&str], origins: &[&str], public_host: &str) -> Guard {
    let config = HttpConfig {
        allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
        allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
        ..HttpConfig::default()
    };
    Guard::new(
        &config,
        public_host,
        listen.parse().unwrap(),
        Metrics::default(),
    )
}

fn loopback() -> Guard {
    guard("127.0.0.1:8080", &[], &[], "")
}

/// The status of the refusal, or 0 when the request passes.
fn status(guard: &Guard, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request.body(Body::empty()).unwrap();
    guard.check(&request).map_or(0, |r| r.status().as_u16())
}

const ACTION: &str = "/things/urn:x/actions/go";

#[test]
fn a_loopback_listener_serves_loopback_names_and_addresses_only() {
    let g = loopback();
    for host in [
        "localhost",
        "localhost:8080",
        "app.localhost:8080",
        "127.0.0.1:8080",
        "127.0.0.2",
        "[::1]:8080",
        "10.1.2.3:8080",
    ] {
        assert_eq!(status(&g, "GET", "/readyz", &[("host", host)]), 0, "{host}");
    }
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
        "a b",
    ] {
        assert_eq!(
            status(&g, "GET", "/readyz", &[("host", host)]),
            421,
            "{host}"
        );
        assert_eq!(
            status(
                &g,
                "GET",
                "/lmos",
                &[("host", host), ("upgrade", "websocket")]
            ),
            421
        );
    }
    // HTTP/1.0 without Host is no browser's.
    assert_eq!(status(&g, "GET", "/readyz", &[]), 0);
}

#[test]
fn configured_and_public_names_are_served_and_any_name_off_loopback() {
    let g = guard("127.0.0.1:8080", &["*.corp.example"], &[], "sidecar.lan");
    assert_eq!(status(&g, "GET", "/", &[("host", "a.corp.example")]), 0);
    assert_eq!(status(&g, "GET", "/", &[("host", "sidecar.lan:8080")]), 0);
    assert_eq!(status(&g, "GET", "/", &[("host", "corp.example")]), 421);
    let open = guard("0.0.0.0:8080", &[], &[], "");
    assert_eq!(status(&open, "GET", "/", &[("host", "evil.example")]), 0);
    let listed = guard("0.0.0.0:8080", &["sidecar.internal"], &[], "");
    assert_eq!(
        status(&listed, "GET", "/", &[("host", "evil.example")]),
        421
    );
    assert_eq!(status(&listed, "GET", "/", &[("host", "10.0.0.7:8080")]), 0);
    let star = guard("127.0.0.1:8080", &["*"], &[], "");
    assert_eq!(status(&star, "GET", "/", &[("host", "evil.example")]), 0);
}

#[test]
fn only_own_and_listed_origins_may_upgrade_or_change_state() {
    let g = guard("127.0.0.1:8080", &[], &["https://console.example.com"], "");
    let host = ("host", "127.0.0.1:8080");
    let ws = ("upgrade", "websocket");
    let own = [
        "http://127.0.0.1:8080",
        "http://localhost:8080",
        "http://app.localhost:8080",
        "https://console.example.com",
        "https://console.example.com:443",
    ];
    for origin in own {
        let o = ("origin", origin);
        assert_eq!(status(&g, "GET", "/lmos", &[host, ws, o]), 0, "{origin}");
        assert_eq!(status(&g, "POST", ACTION, &[host, o]), 0, "{origin}");
    }
    let foreign = [
        "http://127.0.0.1:3000",
        "http://localhost:3000",
        "https://evil.example",
        "http://console.example.com",
        "null",
        "garbage",
    ];
    for origin in foreign {
        let o = ("origin", origin);
        assert_eq!(status(&g, "GET", "/lmos", &[host, ws, o]), 403, "{origin}");
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(status(&g, method, ACTION, &[host, o]), 403, "{origin}");
        }
        // Reading is not changing: no CORS header lets the page see it.
        assert_eq!(status(&g, "GET", "/things", &[host, o]), 0, "{origin}");
    }
    // Without Origin: not a page.
    assert_eq!(status(&g, "GET", "/lmos", &[host, ws]), 0);
    assert_eq!(status(&g, "DELETE", ACTION, &[host]), 0);
}

#[test]
fn null_and_star_are_explicit_choices() {
    let g = guard("127.0.0.1:8080", &[], &["null"], "");
    assert_eq!(status(&g, "POST", ACTION, &[("origin", "null")]), 0);
    assert_eq!(
        status(&g, "POST", ACTION, &[("origin", "http://a.example")]),
        403
    );
    let star = guard("127.0.0.1:8080", &[], &["*"], "");
    assert_eq!(
        status(&star, "POST", ACTION, &[("origin", "http://a.example")]),
        0
    );
    assert_eq!(status(&star, "POST", ACTION, &[("origin", "null")]), 403);
}

#[test]
fn the_same_server_behind_a_proxy_is_the_own_origin() {
    let g = guard("0.0.0.0:8080", &["console.example.com"], &[], "");
    let headers = [
        ("host", "console.example.com"),
        ("origin", "https://console.example.com"),
    ];
    assert_eq!(status(&g, "POST", ACTION, &headers), 0);
}

#[test]
fn state_changing_bodies_must_be_json() {
    let g = loopback();
    let with = |ct: &'static str| [("content-length", "2"), ("content-type", ct)];
    let json = ["application/json", "Application/JSON; charset=utf-8"];
    for ct in json {
        assert_eq!(status(&g, "POST", ACTION, &with(ct)), 0, "{ct}");
        assert_eq!(
            status(&g, "PUT", "/things/urn:x/properties/p", &with(ct)),
            0
        );
        assert_eq!(status(&g, "PUT", "/things/urn:x", &with(ct)), 0);
    }
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/td+json",
    ] {
        assert_eq!(status(&g, "POST", ACTION, &with(ct)), 415, "{ct}");
    }
    assert_eq!(
        status(&g, "POST", "/things", &with("application/td+json")),
        0
    );
    assert_eq!(status(&g, "POST", "/things", &with("text/plain")), 415);
    let patch = "/things/urn:x";
    assert_eq!(
        status(&g, "PATCH", patch, &with("application/merge-patch+json")),
        0
    );
    assert_eq!(status(&g, "PATCH", patch, &with("application/json")), 415);
    // A body without Content-Type is not JSON; chunked is a body.
    assert_eq!(status(&g, "POST", ACTION, &[("content-length", "2")]), 415);
    let chunked = [("transfer-encoding", "chunked")];
    assert_eq!(
        status(&g, "PUT", "/things/urn:x/properties/p", &chunked),
        415
    );
    // No body (node-wot's invokeAction without input): nothing to misread.
    assert_eq!(status(&g, "POST", ACTION, &[("content-length", "0")]), 0);
    assert_eq!(status(&g, "POST", ACTION, &[]), 0);
    assert_eq!(
        status(&g, "DELETE", ACTION, &[("content-type", "text/plain")]),
        0
    );
    // Reading is not checked.
    assert_eq!(status(&g, "GET", "/things", &with("text/plain")), 0);
}

#[test]
fn configuration_entries_are_validated_by_key() {
    let mut c = HttpConfig::default();
    assert!(validate(&c).is_ok());
    c.allowed_hosts = vec!["sidecar:8080".into()];
    assert_eq!(validate(&c).unwrap_err().0, "http.allowed_hosts");
    c.allowed_hosts = vec!["*".into(), "*.corp.example".into(), "[::1]".into()];
    assert!(validate(&c).is_ok());
    c.allowed_origins = vec!["https://a.example/app".into()];
    assert_eq!(validate(&c).unwrap_err().0, "http.allowed_origins");
    c.allowed_origins = vec!["null".into(), "*".into(), "http://a.example:3000".into()];
    assert!(validate(&c).is_ok());
}

#[test]
fn a_flood_of_refusals_logs_once() {
    let t = Throttle::default();
    assert!(t.due());
    assert!(!t.due());
}

const PROPERTY: &str = "/things/urn:x/properties/p";

#[test]
fn cross_site_requests_never_reach_an_agent() {
    let g = loopback();
    let host = ("host", "127.0.0.1:8080");
    let cross = ("sec-fetch-site", "cross-site");
    let ws = ("upgrade", "websocket");
    let evil = ("origin", "http://evil.example");
    // An `<img src>` (no Origin), a no-cors fetch, a form: none reaches an
    // agent or changes state.
    for (method, path) in [
        ("GET", PROPERTY),
        ("GET", "/things/urn:x/properties"),
        ("GET", "/things/urn:x/actions/go/inv-1"),
        ("POST", ACTION),
        ("POST", "/mcp"),
        ("GET", "/mcp"),
        ("POST", "/a2a/urn:x"),
        ("PUT", "/things/urn:x"),
        ("GET", "/no/such/page"),
    ] {
        assert_eq!(
            status(&g, method, path, &[host, cross]),
            403,
            "{method} {path}"
        );
        assert_eq!(
            status(&g, method, path, &[host, cross, evil]),
            403,
            "{method} {path}"
        );
    }
    assert_eq!(status(&g, "GET", "/lmos", &[host, ws, cross]), 403);
    // Other ports of localhost are the same site, not the same origin.
    let same_site = ("sec-fetch-site", "same-site");
    let dev_server = ("origin", "http://localhost:3000");
    assert_eq!(status(&g, "GET", PROPERTY, &[host, same_site]), 403);
    assert_eq!(
        status(&g, "GET", PROPERTY, &[host, same_site, dev_server]),
        403
    );
    let own = ("origin", "http://localhost:8080");
    assert_eq!(status(&g, "GET", PROPERTY, &[host, same_site, own]), 0);
    // The page's own, the address bar, and no header at all pass.
    for site in ["same-origin", "none"] {
        assert_eq!(
            status(&g, "GET", PROPERTY, &[host, ("sec-fetch-site", site)]),
            0
        );
        assert_eq!(
            status(&g, "POST", ACTION, &[host, ("sec-fetch-site", site)]),
            0
        );
    }
    assert_eq!(status(&g, "GET", PROPERTY, &[host]), 0);
    // Read-only routes that reach no agent stay open.
    for path in [
        "/",
        "/readyz",
        "/healthz",
        "/metrics",
        "/things",
        "/things/urn:x",
        "/.well-known/wot",
        "/.well-known/agent-card.json",
        "/a2a/urn:x/.well-known/agent-card.json",
        "/console",
        "/console/console.js",
        "/console/state",
    ] {
        assert_eq!(status(&g, "GET", path, &[host, cross]), 0, "{path}");
        assert_eq!(status(&g, "HEAD", path, &[host, cross]), 0, "{path}");
    }
    assert_eq!(status(&g, "DELETE", "/things/urn:x", &[host, cross]), 403);
}

#[test]
fn listed_origins_may_reach_agents_across_sites() {
    let g = guard(
        "127.0.0.1:8080",
        &[],
        &["https://app.example", "http://localhost:3000"],
        "",
    );
    let host = ("host", "127.0.0.1:8080");
    let cross = ("sec-fetch-site", "cross-site");
    let app = ("origin", "https://app.example");
    assert_eq!(status(&g, "GET", PROPERTY, &[host, cross, app]), 0);
    assert_eq!(status(&g, "POST", ACTION, &[host, cross, app]), 0);
    let dev = [
        host,
        ("sec-fetch-site", "same-site"),
        ("origin", "http://localhost:3000"),
    ];
    assert_eq!(status(&g, "GET", PROPERTY, &dev), 0);
    // Without an Origin the page is unknown: not one of those listed.
    assert_eq!(status(&g, "GET", PROPERTY, &[host, cross]), 403);
    let star = guard("127.0.0.1:8080", &[], &["*"], "");
    assert_eq!(status(&star, "GET", PROPERTY, &[host, cross]), 0);
}
