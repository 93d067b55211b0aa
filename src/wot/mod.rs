//! What the sidecar does for W3C WoT consumers that do not speak LMOS
//! (node-wot and the like): value-only MQTT topics their TD forms can point
//! at. The HTTP forms live with the HTTP port (`crate::http::things`).

pub mod values;
