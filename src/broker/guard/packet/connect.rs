//! CONNECT, read and written with rumqttd's codec (patch 24: binary
//! passwords, a missing user name told from an empty one, the flags
//! checked).

use bytes::Bytes;
use rumqttd::protocol as wire;

use super::codec::{decode, encode};
use super::{frame, has_control, PacketError, Reader, Version};

/// A CONNECT as rumqttd's codec reads it, 3.1.1 or 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub version: Version,
    /// Clean Session (3.1.1) / Clean Start (5).
    pub clean: bool,
    /// Seconds; 0 turns keep-alive off.
    pub keep_alive: u16,
    pub client_id: String,
    /// MQTT 5 only.
    pub properties: Option<wire::ConnectProperties>,
    pub will: Option<Will>,
    /// User name and password, each there when its flag is (patch 24).
    pub login: Option<wire::Login>,
}

/// A CONNECT's last will.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// The will's topic, a checked topic (rumqttd reads it as bytes).
    pub topic: String,
    pub will: wire::LastWill,
    /// MQTT 5 only.
    pub properties: Option<wire::LastWillProperties>,
}

impl Connect {
    /// A clean MQTT 5 CONNECT of the guard's own, without will or
    /// credentials.
    pub fn own(client_id: &str) -> Connect {
        Connect {
            version: Version::V5,
            clean: true,
            keep_alive: 60,
            client_id: client_id.to_owned(),
            properties: None,
            will: None,
            login: None,
        }
    }

    pub fn username(&self) -> Option<&str> {
        self.login.as_ref()?.username.as_deref()
    }

    pub fn password(&self) -> Option<&[u8]> {
        self.login.as_ref()?.password.as_deref()
    }
}

/// The MQTT version a CONNECT body names, read ahead of rumqttd's decoder
/// to pick the codec (and to name another protocol in the log).
fn protocol(body: &[u8]) -> Result<Version, PacketError> {
    let mut r = Reader::new(body, "CONNECT");
    let name = r.binary()?;
    match (name, r.u8()?) {
        (b"MQTT", 4) => Ok(Version::V4),
        (b"MQTT", 5) => Ok(Version::V5),
        (_, level) => Err(PacketError::Protocol {
            name: String::from_utf8_lossy(name).into_owned(),
            level,
        }),
    }
}

/// Decodes a whole CONNECT packet (`raw`, fixed header included).
pub fn connect(raw: &[u8]) -> Result<Connect, PacketError> {
    let header = frame(raw, usize::MAX)?.ok_or(PacketError::Malformed("CONNECT"))?;
    let version = protocol(&raw[header.header_len..header.size()])?;
    let wire::Packet::Connect(c, properties, will, will_properties, login) =
        decode(version, &raw[..header.size()], "CONNECT")?
    else {
        return Err(PacketError::Malformed("CONNECT"));
    };
    let will = match will {
        None => None,
        Some(will) => {
            // A topic like any other (see `Reader::topic`).
            let topic = std::str::from_utf8(&will.topic)
                .ok()
                .filter(|t| !has_control(t))
                .ok_or(PacketError::Malformed("CONNECT"))?;
            Some(Will {
                topic: topic.to_owned(),
                will,
                properties: will_properties,
            })
        }
    };
    Ok(Connect {
        version,
        clean: c.clean_session,
        keep_alive: c.keep_alive,
        client_id: c.client_id,
        properties,
        will,
        login,
    })
}

/// The MQTT 5 CONNECT the broker gets for a client's (3.1.1 or 5): the
/// same client, will and credentials, with the clean start, keep-alive and
/// properties the guard chose.
pub fn encode_connect(
    c: &Connect,
    clean: bool,
    keep_alive: u16,
    properties: Option<wire::ConnectProperties>,
) -> Result<Bytes, PacketError> {
    let connect = wire::Connect {
        keep_alive,
        client_id: c.client_id.clone(),
        clean_session: clean,
    };
    let (will, will_properties) = match &c.will {
        Some(w) => (Some(w.will.clone()), w.properties.clone()),
        None => (None, None),
    };
    let packet = wire::Packet::Connect(connect, properties, will, will_properties, c.login.clone());
    encode(packet, "CONNECT")
}

#[cfg(test)]
#[path = "connect_tests.rs"]
mod tests;
