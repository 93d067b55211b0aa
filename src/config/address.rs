//! Listen addresses as people write them: `IP:PORT`, or a host name that
//! resolves (`localhost:18080`). The standard parser says only "invalid
//! socket address syntax" for both a host name and port 80800; these
//! errors say which part is wrong and what to write instead.

use std::net::{SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Deserializer};

/// `IP:PORT` (`[IPv6]:PORT`), or `HOST:PORT` with a host name that
/// resolves; of a name's addresses the first IPv4 one is taken (what
/// `localhost` means to most people), else the first.
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "`{text}` has no port; write IP:PORT, e.g. 127.0.0.1:8080"
        ));
    };
    let port: u16 = match port.parse::<u64>() {
        Ok(p) if p <= u64::from(u16::MAX) => p as u16,
        Ok(p) => return Err(format!("port {p} is out of range (0 to 65535)")),
        Err(_) => {
            return Err(format!(
                "`{port}` is not a port number; write IP:PORT, e.g. 127.0.0.1:8080"
            ))
        }
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!(
            "`{text}` has no host; write IP:PORT, e.g. 127.0.0.1:{port} (0.0.0.0:{port} for every interface)"
        ));
    }
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{host}` ({e}); use IP:PORT, e.g. 127.0.0.1:{port}"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| {
            format!("`{host}` resolves to no address; use IP:PORT, e.g. 127.0.0.1:{port}")
        })
}

/// For `#[serde(deserialize_with)]` on the listen keys: the same rules in
/// the file and the environment as on the command line.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen_addr(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_and_port_pass_through() {
        assert_eq!(
            parse_listen_addr("127.0.0.1:18080").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 18080))
        );
        assert!(parse_listen_addr("[::1]:0").unwrap().is_ipv6());
    }

    #[test]
    fn localhost_resolves_to_loopback() {
        let addr = parse_listen_addr("localhost:18080").unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(addr.port(), 18080);
    }

    #[test]
    fn each_mistake_is_named() {
        let e = parse_listen_addr("127.0.0.1:80800").unwrap_err();
        assert!(e.contains("port 80800 is out of range"), "{e}");
        let e = parse_listen_addr("127.0.0.1").unwrap_err();
        assert!(e.contains("no port") && e.contains("IP:PORT"), "{e}");
        let e = parse_listen_addr("127.0.0.1:http").unwrap_err();
        assert!(e.contains("not a port number"), "{e}");
        let e = parse_listen_addr(":8080").unwrap_err();
        assert!(e.contains("no host"), "{e}");
        let e = parse_listen_addr("no-such-host.invalid:8080").unwrap_err();
        assert!(
            e.contains("cannot resolve") && e.contains("use IP:PORT"),
            "{e}"
        );
    }
}
