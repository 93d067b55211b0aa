//! What the client reads from the Thing Description directory: the list
//! (`things`), and for `sub` a Thing's observable properties and the Things
//! `--thing +` covers. Plain HTTP/1.1 on one connection, enough for the
//! sidecar's own directory (no TLS here: against `https://`, `sub` says so
//! and subscribes to events only).

use serde_json::Value;
use tokio::net::TcpStream;

use super::{out, ClientError, Credentials, Output};

/// `GET {base}{path}`: the status and the body.
async fn http_get(base: &str, path: &str) -> Result<(u16, String), ClientError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| ClientError::Usage("the directory URL must start with http://".into()))?;
    let host = rest.trim_end_matches('/');
    let mut stream = TcpStream::connect(host)
        .await
        .map_err(|e| ClientError::Http(format!("{host}: {e}")))?;
    let authorization = Credentials::from_env()
        .map(|c| format!("Authorization: {}\r\n", c.header()))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{authorization}\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ClientError::Http(format!("not an HTTP response from {host}")))?;
    Ok((status, body.to_owned()))
}

/// `GET /things` from the directory at `base` (e.g. `http://127.0.0.1:8080`).
pub async fn things(base: &str, output: Output) -> Result<bool, ClientError> {
    let (status, body) = http_get(base, "/things").await?;
    if status != 200 {
        return Err(ClientError::Http(format!(
            "{base}/things answered {status}: {body}"
        )));
    }
    let list: Value = serde_json::from_str(&body)
        .map_err(|e| ClientError::Http(format!("not a TD list: {e}")))?;
    for td in list.as_array().into_iter().flatten() {
        if output == Output::Json {
            out::line(&td.to_string())?;
            continue;
        }
        let names = |k: &str| {
            td[k]
                .as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        };
        out::line(&format!(
            "{} {} ({}) properties=[{}] actions=[{}] events=[{}]",
            td["id"].as_str().unwrap_or("?"),
            td["title"].as_str().unwrap_or("?"),
            td["@type"],
            names("properties"),
            names("actions"),
            names("events"),
        ))?;
    }
    Ok(true)
}

/// The directory beside a gateway: `ws://host:port/lmos` → `http://host:port`.
pub fn directory_of(ws_url: &str) -> Result<String, ClientError> {
    let rest = ws_url.strip_prefix("ws://").ok_or_else(|| {
        ClientError::Usage(format!(
            "cannot read the directory beside {ws_url} (only ws:// endpoints)"
        ))
    })?;
    let host = rest.split('/').next().unwrap_or(rest);
    Ok(format!("http://{host}"))
}

/// A Thing ID as one path segment.
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The observable properties in a Thing's TD.
pub async fn observable(ws_url: &str, thing: &str) -> Result<Vec<String>, ClientError> {
    let base = directory_of(ws_url)?;
    let (status, body) = http_get(&base, &format!("/things/{}", segment(thing))).await?;
    if status != 200 {
        return Err(ClientError::Http(format!("no TD for {thing} ({status})")));
    }
    let td: Value =
        serde_json::from_str(&body).map_err(|e| ClientError::Http(format!("not a TD: {e}")))?;
    Ok(td["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, p)| p["observable"] == true)
        .map(|(name, _)| name.clone())
        .collect())
}

/// The IDs of the Things in the directory beside a gateway.
pub async fn ids(ws_url: &str) -> Result<Vec<String>, ClientError> {
    let (status, body) = http_get(&directory_of(ws_url)?, "/things").await?;
    if status != 200 {
        return Err(ClientError::Http(format!(
            "the directory answered {status}"
        )));
    }
    let list: Value = serde_json::from_str(&body)
        .map_err(|e| ClientError::Http(format!("not a TD list: {e}")))?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|td| td["id"].as_str().map(str::to_owned))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_beside_the_gateway() {
        assert_eq!(
            directory_of("ws://127.0.0.1:8080/lmos").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(directory_of("wss://h/lmos").is_err());
        assert_eq!(segment("urn:uuid:1 2/3"), "urn:uuid:1%202%2F3");
    }
}
