//! Reason codes as numbers: rumqttc decodes them into enums whose
//! discriminants are not the codes on the wire (MQTT 5, 2.4), and keeps
//! its own tables private.

use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode as C, PubAckReason, PubCompReason, PubRecReason, PubRelReason,
    SubscribeReasonCode as S,
};

pub fn connect(code: C) -> u8 {
    match code {
        C::Success => 0x00,
        C::RefusedProtocolVersion => 0x01,
        C::BadClientId => 0x02,
        C::ServiceUnavailable => 0x03,
        C::UnspecifiedError => 0x80,
        C::MalformedPacket => 0x81,
        C::ProtocolError => 0x82,
        C::ImplementationSpecificError => 0x83,
        C::UnsupportedProtocolVersion => 0x84,
        C::ClientIdentifierNotValid => 0x85,
        C::BadUserNamePassword => 0x86,
        C::NotAuthorized => 0x87,
        C::ServerUnavailable => 0x88,
        C::ServerBusy => 0x89,
        C::Banned => 0x8A,
        C::BadAuthenticationMethod => 0x8C,
        C::TopicNameInvalid => 0x90,
        C::PacketTooLarge => 0x95,
        C::QuotaExceeded => 0x97,
        C::PayloadFormatInvalid => 0x99,
        C::RetainNotSupported => 0x9A,
        C::QoSNotSupported => 0x9B,
        C::UseAnotherServer => 0x9C,
        C::ServerMoved => 0x9D,
        C::ConnectionRateExceeded => 0x9F,
    }
}

/// PUBACK and PUBREC share their codes.
macro_rules! publication_ack {
    ($name:ident, $t:ident) => {
        pub fn $name(reason: $t) -> u8 {
            match reason {
                $t::Success => 0x00,
                $t::NoMatchingSubscribers => 0x10,
                $t::UnspecifiedError => 0x80,
                $t::ImplementationSpecificError => 0x83,
                $t::NotAuthorized => 0x87,
                $t::TopicNameInvalid => 0x90,
                $t::PacketIdentifierInUse => 0x91,
                $t::QuotaExceeded => 0x97,
                $t::PayloadFormatInvalid => 0x99,
            }
        }
    };
}

publication_ack!(puback, PubAckReason);
publication_ack!(pubrec, PubRecReason);

pub fn pubrel(reason: PubRelReason) -> u8 {
    match reason {
        PubRelReason::Success => 0x00,
        PubRelReason::PacketIdentifierNotFound => 0x92,
    }
}

pub fn pubcomp(reason: PubCompReason) -> u8 {
    match reason {
        PubCompReason::Success => 0x00,
        PubCompReason::PacketIdentifierNotFound => 0x92,
    }
}

pub fn subscribe(code: S) -> u8 {
    match code {
        S::Success(qos) => qos as u8,
        S::Failure | S::Unspecified => 0x80,
        S::ImplementationSpecific => 0x83,
        S::NotAuthorized => 0x87,
        S::TopicFilterInvalid => 0x8F,
        S::PkidInUse => 0x91,
        S::QuotaExceeded => 0x97,
        S::SharedSubscriptionsNotSupported => 0x9E,
        S::SubscriptionIdNotSupported => 0xA1,
        S::WildcardSubscriptionsNotSupported => 0xA2,
    }
}
