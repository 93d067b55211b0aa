//! Resolving an Agent Card's interface URL against the card's own URL
//! (RFC 3986 section 5.2, for the forms cards use: absolute, `//host…`,
//! `/path`, `path`, `?query`). Pure; the result must be http(s).

use hyper::Uri;

/// `reference` resolved against `base`, as an absolute http(s) URL.
pub fn resolve(base: &str, reference: &str) -> Result<String, String> {
    let reference = reference.trim();
    let resolved = if has_scheme(reference) {
        reference.to_owned()
    } else {
        let uri: Uri = base.parse().map_err(|e| format!("the card's URL: {e}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err("the card's URL is not absolute".into());
        };
        let base_path = uri.path();
        if let Some(rest) = reference.strip_prefix("//") {
            format!("{scheme}://{rest}")
        } else if reference.is_empty() {
            format!("{scheme}://{authority}{}", path_and_query(&uri))
        } else if reference.starts_with('?') {
            format!("{scheme}://{authority}{base_path}{reference}")
        } else if reference.starts_with('#') {
            format!("{scheme}://{authority}{}", path_and_query(&uri))
        } else {
            let (path, tail) = split_tail(reference);
            let merged = if path.starts_with('/') {
                path.to_owned()
            } else {
                // Relative to the card's "directory": up to its last `/`.
                let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
                format!("{}{path}", if dir.is_empty() { "/" } else { dir })
            };
            format!("{scheme}://{authority}{}{tail}", remove_dots(&merged))
        }
    };
    let lower = resolved.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err("not an http:// or https:// URL".into());
    }
    // The fragment is the client's own; it is never sent.
    let resolved = resolved.split('#').next().unwrap_or_default().to_owned();
    resolved.parse::<Uri>().map_err(|e| e.to_string())?;
    Ok(resolved)
}

fn has_scheme(reference: &str) -> bool {
    match reference.find(':') {
        Some(i) if i > 0 => {
            let scheme = &reference[..i];
            let first = scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic());
            first
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        _ => false,
    }
}

fn path_and_query(uri: &Uri) -> &str {
    uri.path_and_query().map_or("/", |pq| pq.as_str())
}

/// `(path, "?query#fragment")`.
fn split_tail(reference: &str) -> (&str, &str) {
    let at = reference.find(['?', '#']).unwrap_or(reference.len());
    reference.split_at(at)
}

/// RFC 3986 5.2.4: `.` and `..` segments taken out.
fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    out.pop();
                }
                // A trailing dot segment leaves a directory: `a/b/..` is `a/`.
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::resolve;

    const CARD: &str = "http://127.0.0.1:8080/agents/weather/.well-known/agent-card.json";

    #[test]
    fn absolute_urls_stay() {
        assert_eq!(
            resolve(CARD, "https://a.example/rpc").unwrap(),
            "https://a.example/rpc"
        );
        assert_eq!(
            resolve(CARD, "http://a.example").unwrap(),
            "http://a.example"
        );
    }

    #[test]
    fn relative_forms_resolve_against_the_card() {
        assert_eq!(resolve(CARD, "/").unwrap(), "http://127.0.0.1:8080/");
        assert_eq!(
            resolve(CARD, "/a2a/v1").unwrap(),
            "http://127.0.0.1:8080/a2a/v1"
        );
        assert_eq!(
            resolve(CARD, "rpc").unwrap(),
            "http://127.0.0.1:8080/agents/weather/.well-known/rpc"
        );
        assert_eq!(
            resolve(CARD, "../rpc").unwrap(),
            "http://127.0.0.1:8080/agents/weather/rpc"
        );
        assert_eq!(resolve(CARD, "../../..").unwrap(), "http://127.0.0.1:8080/");
        assert_eq!(resolve(CARD, "//other:9/x").unwrap(), "http://other:9/x");
        assert_eq!(
            resolve(CARD, "rpc?t=1#f").unwrap(),
            "http://127.0.0.1:8080/agents/weather/.well-known/rpc?t=1"
        );
        assert_eq!(resolve(CARD, "").unwrap(), CARD);
    }

    #[test]
    fn other_schemes_and_garbage_are_refused() {
        assert!(resolve(CARD, "grpc://a.example:50051").is_err());
        assert!(resolve(CARD, "mailto:x@y").is_err());
        assert!(resolve("not a url", "/rpc").is_err());
        assert!(resolve(CARD, "http://bad host/").is_err());
    }
}
