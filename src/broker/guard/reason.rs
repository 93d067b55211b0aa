//! The MQTT return and reason codes the guard answers with itself.

// MQTT 3.1.1 CONNACK return codes.
pub(super) const V4_UNACCEPTABLE_PROTOCOL: u8 = 1;
pub(super) const V4_IDENTIFIER_REJECTED: u8 = 2;
pub(super) const V4_SERVER_UNAVAILABLE: u8 = 3;
pub(super) const V4_BAD_CREDENTIALS: u8 = 4;
pub(super) const V4_NOT_AUTHORIZED: u8 = 5;
/// MQTT 3.1.1 SUBACK failure.
pub(super) const V4_FAILURE: u8 = 0x80;

// MQTT 5 reason codes.
pub(super) const UNSPECIFIED_ERROR: u8 = 0x80;
pub(super) const MALFORMED_PACKET: u8 = 0x81;
pub(super) const PROTOCOL_ERROR: u8 = 0x82;
pub(super) const CLIENT_IDENTIFIER_NOT_VALID: u8 = 0x85;
pub(super) const BAD_CREDENTIALS: u8 = 0x86;
pub(super) const NOT_AUTHORIZED: u8 = 0x87;
pub(super) const SERVER_UNAVAILABLE: u8 = 0x88;
pub(super) const SERVER_BUSY: u8 = 0x89;
pub(super) const CONNECTION_RATE_EXCEEDED: u8 = 0x9F;
pub(super) const MAXIMUM_CONNECT_TIME: u8 = 0xA0;
pub(super) const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
pub(super) const TOPIC_FILTER_INVALID: u8 = 0x8F;
pub(super) const PACKET_TOO_LARGE: u8 = 0x95;
pub(super) const QUOTA_EXCEEDED: u8 = 0x97;
pub(super) const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
pub(super) const TOPIC_ALIAS_INVALID: u8 = 0x94;
pub(super) const PAYLOAD_FORMAT_INVALID: u8 = 0x99;
