use std::fmt;
use std::str::FromStr;

/// The LMOS message types: the fifteen of the draft's table, plus
/// `propertyReadings` and `event`, which the draft uses without listing them,
/// plus `actionInput`, this sidecar's binding of the draft's Request-Stream
/// (a consumer's stream of input to a running invocation, see
/// [`crate::lmos::stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    ReadProperty,
    WriteProperty,
    WriteMultipleProperties,
    PropertyReading,
    PropertyReadings,
    ObserveProperty,
    UnobserveProperty,
    InvokeAction,
    QueryAction,
    CancelAction,
    ActionInput,
    ActionStatus,
    SubscribeEvent,
    UnsubscribeEvent,
    SubscribeAllEvents,
    UnsubscribeAllEvents,
    Event,
    Error,
}

/// Who normally sends a message type: consumers send requests, Things
/// (agents) send what consumers receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ConsumerToThing,
    ThingToConsumer,
}

impl MessageType {
    pub const ALL: [MessageType; 18] = [
        MessageType::ReadProperty,
        MessageType::WriteProperty,
        MessageType::WriteMultipleProperties,
        MessageType::PropertyReading,
        MessageType::PropertyReadings,
        MessageType::ObserveProperty,
        MessageType::UnobserveProperty,
        MessageType::InvokeAction,
        MessageType::QueryAction,
        MessageType::CancelAction,
        MessageType::ActionInput,
        MessageType::ActionStatus,
        MessageType::SubscribeEvent,
        MessageType::UnsubscribeEvent,
        MessageType::SubscribeAllEvents,
        MessageType::UnsubscribeAllEvents,
        MessageType::Event,
        MessageType::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::ReadProperty => "readProperty",
            MessageType::WriteProperty => "writeProperty",
            MessageType::WriteMultipleProperties => "writeMultipleProperties",
            MessageType::PropertyReading => "propertyReading",
            MessageType::PropertyReadings => "propertyReadings",
            MessageType::ObserveProperty => "observeProperty",
            MessageType::UnobserveProperty => "unobserveProperty",
            MessageType::InvokeAction => "invokeAction",
            MessageType::QueryAction => "queryAction",
            MessageType::CancelAction => "cancelAction",
            MessageType::ActionInput => "actionInput",
            MessageType::ActionStatus => "actionStatus",
            MessageType::SubscribeEvent => "subscribeEvent",
            MessageType::UnsubscribeEvent => "unsubscribeEvent",
            MessageType::SubscribeAllEvents => "subscribeAllEvents",
            MessageType::UnsubscribeAllEvents => "unsubscribeAllEvents",
            MessageType::Event => "event",
            MessageType::Error => "error",
        }
    }

    pub fn direction(self) -> Direction {
        match self {
            MessageType::PropertyReading
            | MessageType::PropertyReadings
            | MessageType::ActionStatus
            | MessageType::Event
            | MessageType::Error => Direction::ThingToConsumer,
            _ => Direction::ConsumerToThing,
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown messageType `{0}`")]
pub struct UnknownMessageType(pub String);

impl FromStr for MessageType {
    type Err = UnknownMessageType;

    /// Exact spelling only: the draft's names are camelCase and a lenient
    /// match (e.g. the Kotlin library's `subscribeevent`) would hide client bugs
    /// behind behaviour that differs between implementations.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MessageType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownMessageType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_name() {
        for t in MessageType::ALL {
            assert_eq!(t.as_str().parse::<MessageType>().unwrap(), t);
        }
    }

    #[test]
    fn the_summary_table_typo_is_not_a_type() {
        assert!("observerProperty".parse::<MessageType>().is_err());
        assert!("subscribeevent".parse::<MessageType>().is_err());
    }
}
