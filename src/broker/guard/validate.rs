//! What a client may send at all, before any policy: packet types that only
//! a server sends, the fixed header's reserved flags, topic names and topic
//! filters as MQTT 3.1.1 §4.7 and MQTT 5 §4.7 define them. Pure functions.
//! (A SUBSCRIBE's reserved options bits are refused by rumqttd's decoder,
//! patched for it: see `packet::subscribe`.)
//!
//! rumqttd 0.20 trusted its clients on every one of these points: a CONNACK
//! or UNSUBACK from an MQTT 5 client panicked its connection task (patches
//! 16 and 25); malformed filters are granted; `$`-filters disconnect. The
//! guard answers them all here so the broker never sees them. These checks
//! stay the guard's, not rumqttd's decoder's: the fixed header is checked
//! for every packet, PUBLISH and the acknowledgements included, which the
//! guard reads without rumqttd's decoder (see `packet.rs`), and a bad
//! filter gets its own SUBACK code where a decoder could only refuse the
//! whole packet.

use super::packet::{self, Version};

/// Why the connection must close, as an MQTT 5 reason code (MQTT 3.1.1
/// just closes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// 0x81: reserved flags, a reserved QoS, a length that cannot be.
    Malformed,
    /// 0x82: a packet only a server sends, or one out of place.
    Protocol,
    /// 0x90: a PUBLISH topic with wildcards, or empty without an alias.
    TopicName,
}

impl Violation {
    pub fn reason(self) -> u8 {
        match self {
            Violation::Malformed => 0x81,
            Violation::Protocol => 0x82,
            Violation::TopicName => 0x90,
        }
    }
}

/// Checks a packet's type, flags and, where fixed, its length. PUBLISH
/// flags are checked here too (QoS 3; DUP at QoS 0).
pub fn fixed_header(version: Version, first: u8, remaining: usize) -> Result<(), Violation> {
    let flags = first & 0x0F;
    let kind = first >> 4;
    let expected_flags = match kind {
        packet::PUBLISH => {
            let qos = (flags >> 1) & 0x03;
            return match (qos, flags & 0x08 != 0) {
                (3, _) | (0, true) => Err(Violation::Malformed),
                _ => Ok(()),
            };
        }
        packet::PUBREL | packet::SUBSCRIBE | packet::UNSUBSCRIBE => 0b0010,
        packet::PUBACK
        | packet::PUBREC
        | packet::PUBCOMP
        | packet::PINGREQ
        | packet::DISCONNECT => 0,
        // AUTH: rumqttd has no enhanced authentication, so no CONNECT the
        // guard forwards names an authentication method; an AUTH is then a
        // protocol error (MQTT 5 §4.12).
        // A second CONNECT; reserved 0, CONNACK, SUBACK, UNSUBACK,
        // PINGRESP: server packets.
        _ => return Err(Violation::Protocol),
    };
    if flags != expected_flags {
        return Err(Violation::Malformed);
    }
    let length_ok = match (kind, version) {
        (packet::PINGREQ, _) => remaining == 0,
        (packet::DISCONNECT, Version::V4) => remaining == 0,
        (packet::PUBACK | packet::PUBREC | packet::PUBREL | packet::PUBCOMP, Version::V4) => {
            remaining == 2
        }
        (packet::PUBACK | packet::PUBREC | packet::PUBREL | packet::PUBCOMP, Version::V5) => {
            remaining >= 2
        }
        _ => true,
    };
    if length_ok {
        Ok(())
    } else {
        Err(Violation::Malformed)
    }
}

/// A topic name a client publishes to: no wildcards. Empty only where an
/// MQTT 5 Topic Alias stands for it (the caller knows).
pub fn topic_name(topic: &str) -> bool {
    !topic.contains(['+', '#'])
}

/// A topic filter: at least one character, `#` alone in the last level,
/// `+` alone in its level; `$share/{group}/{filter}` with a group free of
/// wildcards and a valid filter after it.
pub fn topic_filter(filter: &str) -> bool {
    let filter = match filter.strip_prefix("$share/") {
        Some(rest) => match rest.split_once('/') {
            Some((group, filter)) if !group.is_empty() && !group.contains(['+', '#']) => filter,
            _ => return false,
        },
        None => filter,
    };
    if filter.is_empty() {
        return false;
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let last = levels.peek().is_none();
        match level {
            "#" if last => {}
            "+" => {}
            _ if level.contains(['+', '#']) => return false,
            _ => {}
        }
    }
    true
}

/// Filters rumqttd would answer by disconnecting the client: those under
/// `$` other than shared subscriptions (`$SYS/#` and the like, which this
/// broker does not serve).
pub fn reserved_filter(filter: &str) -> bool {
    filter.starts_with('$') && !filter.starts_with("$share/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_client_packets_pass() {
        for v in [Version::V4, Version::V5] {
            assert_eq!(fixed_header(v, 0x30, 5), Ok(()));
            assert_eq!(fixed_header(v, 0x3B, 5), Ok(()), "DUP QoS 1 retained");
            assert_eq!(fixed_header(v, 0x62, 2), Ok(()));
            assert_eq!(fixed_header(v, 0x82, 5), Ok(()));
            assert_eq!(fixed_header(v, 0xA2, 5), Ok(()));
            assert_eq!(fixed_header(v, 0xC0, 0), Ok(()));
            assert_eq!(fixed_header(v, 0xE0, 0), Ok(()));
            // Server packets and reserved types.
            for first in [0x00, 0x20, 0x90, 0xB0, 0xD0, 0xF0, 0x10] {
                assert_eq!(
                    fixed_header(v, first, 2),
                    Err(Violation::Protocol),
                    "{first:#x}"
                );
            }
            // Reserved flags.
            for first in [0x80, 0x83, 0xA0, 0x60, 0x41, 0xC1, 0xE8, 0x3E, 0x38] {
                assert_eq!(
                    fixed_header(v, first, 2),
                    Err(Violation::Malformed),
                    "{first:#x}"
                );
            }
            assert_eq!(fixed_header(v, 0xC0, 1), Err(Violation::Malformed));
        }
        assert_eq!(
            fixed_header(Version::V4, 0x40, 3),
            Err(Violation::Malformed)
        );
        assert_eq!(fixed_header(Version::V5, 0x40, 3), Ok(()));
        assert_eq!(
            fixed_header(Version::V5, 0x40, 1),
            Err(Violation::Malformed)
        );
        assert_eq!(
            fixed_header(Version::V4, 0xE0, 1),
            Err(Violation::Malformed)
        );
        assert_eq!(fixed_header(Version::V5, 0xE0, 1), Ok(()));
    }

    #[test]
    fn filters_follow_the_wildcard_rules() {
        for good in [
            "#",
            "+",
            "a",
            "a/#",
            "+/+",
            "a/+/b",
            "/",
            "a//b",
            "/#",
            "+/#",
            "$share/g/a/#",
            "$share/g/+",
            "sport/tennis/#",
        ] {
            assert!(topic_filter(good), "{good}");
        }
        for bad in [
            "",
            "a+/#",
            "l#",
            "x/#+",
            "a/#/b",
            "#/",
            "a/b#",
            "++",
            "$share/g",
            "$share//a",
            "$share/g+/a",
            "$share/g/",
        ] {
            assert!(!topic_filter(bad), "{bad}");
        }
    }

    #[test]
    fn topic_names_have_no_wildcards() {
        assert!(topic_name("a/b"));
        assert!(topic_name("$SYS/x"));
        assert!(!topic_name("a/+"));
        assert!(!topic_name("a/#"));
        assert!(!topic_name("a+b"));
    }

    #[test]
    fn dollar_filters_other_than_shared_are_reserved() {
        assert!(reserved_filter("$SYS/#"));
        assert!(!reserved_filter("$share/g/a"));
        assert!(!reserved_filter("a/$b"));
    }
}
