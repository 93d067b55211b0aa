//! The connection caps against the open-files limit. Every WebSocket or
//! MQTT client holds a descriptor, so caps past the limit are connections
//! that would fail at accept. The defaults (10 000 each) are a size, not a
//! promise: on a machine whose limit is lower they are sized to it, quietly
//! (a common hard limit is 20 000, which the defaults' 20 064 just miss). A
//! cap the operator set is kept, and a warning says it cannot be met.

use super::{Config, HttpConfig, MqttConfig};

/// Descriptors kept for everything else: listeners, the broker's own
/// link, log and trace exporters, files.
pub const RESERVED: u64 = 64;

/// What [`fit_connection_caps`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// The limit covers the caps.
    Enough,
    /// Default caps were lowered to fit; the new values.
    Lowered { http: usize, mqtt: usize },
    /// Caps the operator set need more descriptors than the limit allows.
    Short { needed: u64 },
}

/// Sizes default caps to `open_files`; caps that differ from the defaults
/// count as set by the operator and are left alone.
pub fn fit_connection_caps(config: &mut Config, open_files: u64) -> Fit {
    let (http, mqtt) = (config.http.max_connections, config.mqtt.max_connections);
    let needed = http as u64 + mqtt as u64 + RESERVED;
    if open_files >= needed {
        return Fit::Enough;
    }
    let http_default = http == HttpConfig::default().max_connections;
    let mqtt_default = mqtt == MqttConfig::default().max_connections;
    let defaults = u64::from(http_default) + u64::from(mqtt_default);
    let set_by_operator =
        if http_default { 0 } else { http as u64 } + if mqtt_default { 0 } else { mqtt as u64 };
    let room = open_files.saturating_sub(RESERVED + set_by_operator);
    if defaults == 0 || room < defaults {
        return Fit::Short { needed };
    }
    let share = usize::try_from(room / defaults).unwrap_or(usize::MAX);
    if http_default {
        config.http.max_connections = share.min(http);
    }
    if mqtt_default {
        config.mqtt.max_connections = share.min(mqtt);
    }
    Fit::Lowered {
        http: config.http.max_connections,
        mqtt: config.mqtt.max_connections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_a_common_limit_without_a_warning() {
        let mut c = Config::default();
        let fit = fit_connection_caps(&mut c, 20_000);
        assert_eq!(
            fit,
            Fit::Lowered {
                http: 9_968,
                mqtt: 9_968
            }
        );
        let mut c = Config::default();
        assert_eq!(fit_connection_caps(&mut c, 1_048_576), Fit::Enough);
        assert_eq!(c.http.max_connections, 10_000);
    }

    #[test]
    fn a_cap_the_operator_set_is_kept_and_reported() {
        let mut c = Config::default();
        c.http.max_connections = 50_000;
        assert_eq!(
            fit_connection_caps(&mut c, 20_000),
            Fit::Short { needed: 60_064 }
        );
        assert_eq!(c.http.max_connections, 50_000);
        // One set, one default: the default makes room for the other.
        let mut c = Config::default();
        c.mqtt.max_connections = 15_000;
        let fit = fit_connection_caps(&mut c, 20_000);
        assert_eq!(
            fit,
            Fit::Lowered {
                http: 4_936,
                mqtt: 15_000
            }
        );
    }
}
