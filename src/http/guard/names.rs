//! Host names and origins as the guard compares them: parsed once from the
//! configuration, and from each request's `Host` and `Origin` headers.

use std::net::IpAddr;

/// A host name (lower case, without a trailing dot) or an IP address, and
/// the port if one was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: Host,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    fn parse(text: &str) -> Option<Host> {
        if let Some(inner) = text.strip_prefix('[') {
            return inner
                .strip_suffix(']')?
                .parse::<std::net::Ipv6Addr>()
                .ok()
                .map(|ip| Host::Ip(ip.into()));
        }
        if let Ok(ip) = text.parse::<std::net::Ipv4Addr>() {
            return Some(Host::Ip(ip.into()));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        valid.then_some(Host::Name(name))
    }

    /// `localhost` and its subdomains (RFC 6761: always loopback; browsers
    /// resolve them without asking DNS, so no page can rebind them).
    pub fn is_localhost(&self) -> bool {
        matches!(self, Host::Name(n) if n == "localhost" || n.ends_with(".localhost"))
    }

    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Ip(ip) => ip.is_loopback(),
            Host::Name(_) => self.is_localhost(),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Authority {
    /// `host`, `host:port`, `[v6]` or `[v6]:port`, as in a `Host` header.
    pub fn parse(text: &str) -> Option<Authority> {
        let text = text.trim();
        let (host, port) = match text.rfind(':') {
            // A colon inside brackets belongs to an IPv6 address.
            Some(i) if !text[i..].contains(']') => {
                let port = text[i + 1..].parse::<u16>().ok()?;
                (&text[..i], Some(port))
            }
            _ => (text, None),
        };
        Some(Authority {
            host: Host::parse(host)?,
            port,
        })
    }
}

/// A web origin: scheme, host and port (the scheme's default when the
/// origin does not say one), as browsers send it in `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: Host,
    pub port: u16,
}

impl Origin {
    /// `scheme://host[:port]`, nothing after it but an optional `/`.
    pub fn parse(text: &str) -> Result<Origin, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("`{text}` is not an origin (scheme://host[:port])"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(format!("`{text}`: the scheme must be http or https")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}` is not an origin: no path, query or user part"
            ));
        }
        let authority =
            Authority::parse(rest).ok_or_else(|| format!("`{text}`: not a valid host[:port]"))?;
        Ok(Origin {
            scheme,
            host: authority.host,
            port: authority.port.unwrap_or(default),
        })
    }

    /// Whether this origin names the server that `authority` (a request's
    /// `Host`) names: the same host, and the same port (a `Host` without a
    /// port means the default port of the origin's scheme).
    pub fn is_same_server(&self, authority: &Authority) -> bool {
        let default = if self.scheme == "https" { 443 } else { 80 };
        self.host == authority.host && self.port == authority.port.unwrap_or(default)
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// An entry of `http.allowed_hosts`: a name, `*.` and a domain (its
/// subdomains, not the domain itself), or an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Exact(Host),
    Subdomains(String),
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let (wildcard, name) = match text.strip_prefix("*.") {
            Some(domain) => (true, domain),
            None => (false, text),
        };
        let authority = Authority::parse(name)
            .filter(|a| a.port.is_none())
            .ok_or_else(|| {
                format!("`{text}` is not a host name (a name, `*.` and a domain, or an IP address; no scheme, no port)")
            })?;
        match (wildcard, authority.host) {
            (false, host) => Ok(Pattern::Exact(host)),
            (true, Host::Name(domain)) => Ok(Pattern::Subdomains(format!(".{domain}"))),
            (true, Host::Ip(_)) => Err(format!("`{text}`: `*.` goes with a domain name")),
        }
    }

    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (Pattern::Exact(h), host) => h == host,
            (Pattern::Subdomains(suffix), Host::Name(n)) => n.ends_with(suffix.as_str()),
            (Pattern::Subdomains(_), Host::Ip(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Host {
        Host::Name(n.into())
    }

    #[test]
    fn host_headers_parse_with_and_without_port() {
        let a = Authority::parse("LocalHost.:8080").unwrap();
        assert_eq!((a.host, a.port), (name("localhost"), Some(8080)));
        let a = Authority::parse("[::1]:9").unwrap();
        assert_eq!(a.host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(a.port, Some(9));
        assert_eq!(Authority::parse("[::1]").unwrap().port, None);
        assert_eq!(
            Authority::parse("127.0.0.1").unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        for bad in ["", "a b", "host:port", "[::1", "evil.example:99999", "a/b"] {
            assert_eq!(Authority::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn origins_compare_by_scheme_host_and_effective_port() {
        let o = Origin::parse("HTTPS://Console.Example.com").unwrap();
        assert_eq!(o.to_string(), "https://console.example.com:443");
        assert!(o.is_same_server(&Authority::parse("console.example.com").unwrap()));
        assert!(o.is_same_server(&Authority::parse("console.example.com:443").unwrap()));
        assert!(!o.is_same_server(&Authority::parse("console.example.com:8080").unwrap()));
        let local = Origin::parse("http://127.0.0.1:8080/").unwrap();
        assert!(local.is_same_server(&Authority::parse("127.0.0.1:8080").unwrap()));
        assert!(!local.is_same_server(&Authority::parse("localhost:8080").unwrap()));
        for bad in [
            "null",
            "file:///etc",
            "http://a.example/path",
            "http://u@a.example",
            "ws://a.example",
            "https://",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_patterns_match_names_subdomains_and_addresses() {
        let p = Pattern::parse("*.Example.com").unwrap();
        assert!(p.matches(&name("a.example.com")));
        assert!(p.matches(&name("a.b.example.com")));
        assert!(!p.matches(&name("example.com")));
        assert!(!p.matches(&name("evilexample.com")));
        let ip = Pattern::parse("[::1]").unwrap();
        assert!(ip.matches(&Host::Ip("::1".parse().unwrap())));
        for bad in ["", "sidecar:8080", "http://sidecar", "*.10.0.0.1", "a b"] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
        assert!(name("app.localhost").is_localhost());
        assert!(!name("localhost.evil.example").is_localhost());
    }
}
