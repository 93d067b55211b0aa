use super::*;
use crate::config::Grants;

fn config(issuer: &str) -> Config {
    let mut config = Config::default();
    config.auth.jwt.issuer = issuer.to_owned();
    config
        .auth
        .jwt
        .grants
        .insert("weather:read".to_owned(), Grants::default());
    config
        .auth
        .jwt
        .grants
        .insert("weather:operate".to_owned(), Grants::default());
    config
}

fn resource(config: &Config) -> Arc<OAuthResource> {
    OAuthResource::new(config, "http://localhost:8080/mcp".to_owned()).unwrap()
}

#[test]
fn no_issuer_no_resource_server() {
    assert!(OAuthResource::new(&config(""), "http://x/mcp".to_owned()).is_none());
}

#[test]
fn metadata_defaults_to_the_issuer_and_the_grants_keys() {
    let oauth = resource(&config("https://id.example"));
    let m = oauth.metadata();
    assert_eq!(m["resource"], "http://localhost:8080/mcp");
    assert_eq!(
        m["authorization_servers"],
        serde_json::json!(["https://id.example"])
    );
    assert_eq!(
        m["scopes_supported"],
        serde_json::json!(["weather:operate", "weather:read"])
    );
    assert_eq!(m["bearer_methods_supported"], serde_json::json!(["header"]));
}

#[test]
fn configured_servers_and_scopes_win() {
    let mut c = config("https://id.example");
    c.mcp.oauth.authorization_servers = vec!["https://as.example".to_owned()];
    c.mcp.oauth.scopes_supported = vec!["mcp".to_owned()];
    c.mcp.oauth.required_scopes = vec!["mcp".to_owned()];
    let oauth = resource(&c);
    assert_eq!(
        oauth.metadata()["authorization_servers"][0],
        "https://as.example"
    );
    assert_eq!(
        oauth.metadata()["scopes_supported"],
        serde_json::json!(["mcp"])
    );
    assert_eq!(
        oauth.challenge(None),
        "Bearer resource_metadata=\"http://localhost:8080/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\""
    );
}

#[test]
fn the_metadata_url_is_path_inserted() {
    assert_eq!(
        metadata_url("https://h.example:8443/mcp"),
        "https://h.example:8443/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        metadata_url("https://h.example/tenant/mcp/"),
        "https://h.example/.well-known/oauth-protected-resource/tenant/mcp"
    );
    assert_eq!(
        metadata_url("https://h.example"),
        "https://h.example/.well-known/oauth-protected-resource"
    );
}

#[test]
fn challenges_name_the_metadata_scopes_and_error() {
    let oauth = resource(&config("https://id.example"));
    let c = oauth.challenge(Some("invalid_token"));
    assert!(c.starts_with("Bearer resource_metadata=\"http://localhost:8080/.well-known/oauth-protected-resource/mcp\""));
    assert!(c.contains("scope=\"weather:operate weather:read\""));
    assert!(c.ends_with("error=\"invalid_token\""));
    let s = oauth.insufficient_scope("weather:operate");
    assert!(s.starts_with("Bearer error=\"insufficient_scope\", scope=\"weather:operate\""));
}

#[test]
fn a_401_gets_the_challenge_other_answers_do_not() {
    let oauth = resource(&config("https://id.example"));
    let r = oauth.on_unauthorized(StatusCode::UNAUTHORIZED.into_response(), true);
    let v = r.headers().get(header::WWW_AUTHENTICATE).unwrap();
    assert!(v.to_str().unwrap().contains("error=\"invalid_token\""));
    let r = oauth.on_unauthorized(StatusCode::UNAUTHORIZED.into_response(), false);
    let v = r.headers().get(header::WWW_AUTHENTICATE).unwrap();
    assert!(!v.to_str().unwrap().contains("error="));
    let r = oauth.on_unauthorized(StatusCode::TOO_MANY_REQUESTS.into_response(), true);
    assert!(r.headers().get(header::WWW_AUTHENTICATE).is_none());
}

#[test]
fn principals_without_a_token_pass_as_before() {
    let mut c = config("https://id.example");
    c.mcp.oauth.required_scopes = vec!["mcp".to_owned()];
    let oauth = resource(&c);
    assert_eq!(oauth.admit(&Principal::unrestricted("alice")), Ok(()));
    let denied = oauth.step_up(&Principal::unrestricted("alice"), |_| true);
    assert!(denied.is_none());
}

#[test]
fn a_scope_grants_what_its_patterns_say() {
    let mut c = config("https://id.example");
    let g = c.auth.jwt.grants.get_mut("weather:operate").unwrap();
    g.operate = vec!["weather*".to_owned(), "home-{principal}".to_owned()];
    let oauth = resource(&c);
    assert!(oauth.scope_grants("weather:operate", "bob", Access::Operate, "weather-1"));
    assert!(oauth.scope_grants("weather:operate", "bob", Access::Operate, "home-bob"));
    assert!(!oauth.scope_grants("weather:operate", "bob", Access::Operate, "home-eve"));
    assert!(!oauth.scope_grants("weather:operate", "bob", Access::Consume, "weather-1"));
    assert!(!oauth.scope_grants("weather:read", "bob", Access::Operate, "weather-1"));
    assert!(!oauth.scope_grants("nope", "bob", Access::Operate, "weather-1"));
}
