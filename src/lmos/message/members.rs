//! Each type's own members, taken out of a parsed object and written
//! into one: the wire form of a [`Body`], apart from the model.

use serde_json::{Map, Value};

use super::{Body, ErrorBody};
use crate::lmos::member;
use crate::lmos::message_type::MessageType;
use crate::lmos::rejection::RejectionKind;

impl Body {
    pub(super) fn take_from(
        message_type: MessageType,
        map: &mut Map<String, Value>,
    ) -> Result<Body, RejectionKind> {
        use member::{any, name, object, optional_string, timestamp};
        Ok(match message_type {
            MessageType::ReadProperty => Body::ReadProperty {
                name: name(map, "name")?,
            },
            MessageType::WriteProperty => Body::WriteProperty {
                name: name(map, "name")?,
                data: any(map, "data")?,
            },
            MessageType::WriteMultipleProperties => Body::WriteMultipleProperties {
                data: object(map, "data")?,
            },
            MessageType::PropertyReading => Body::PropertyReading {
                name: name(map, "name")?,
                value: any(map, "value")?,
                timestamp: timestamp(map, "timestamp")?,
            },
            MessageType::PropertyReadings => Body::PropertyReadings {
                data: object(map, "data")?,
                timestamp: timestamp(map, "timestamp")?,
            },
            MessageType::ObserveProperty => Body::ObserveProperty {
                name: name(map, "name")?,
            },
            MessageType::UnobserveProperty => Body::UnobserveProperty {
                name: name(map, "name")?,
            },
            MessageType::InvokeAction => Body::InvokeAction {
                action: name(map, "action")?,
                input: map.remove("input"),
            },
            MessageType::QueryAction => Body::QueryAction {
                action: name(map, "action")?,
            },
            MessageType::CancelAction => Body::CancelAction {
                action: name(map, "action")?,
                reason: optional_string(map, "reason")?,
            },
            MessageType::ActionInput => Body::ActionInput {
                action: name(map, "action")?,
            },
            MessageType::ActionStatus => Body::ActionStatus {
                action: name(map, "action")?,
                status: name(map, "status")?,
                output: map.remove("output"),
            },
            MessageType::SubscribeEvent => Body::SubscribeEvent {
                event: name(map, "event")?,
            },
            MessageType::UnsubscribeEvent => Body::UnsubscribeEvent {
                event: name(map, "event")?,
            },
            MessageType::SubscribeAllEvents => Body::SubscribeAllEvents,
            MessageType::UnsubscribeAllEvents => Body::UnsubscribeAllEvents,
            MessageType::Event => Body::Event {
                event: name(map, "event")?,
                data: any(map, "data")?,
                timestamp: timestamp(map, "timestamp")?,
            },
            MessageType::Error => Body::Error(ErrorBody {
                error_type: member::string(map, "type")?,
                title: member::string(map, "title")?,
                status: member::status(map, "status")?,
                detail: member::string(map, "detail")?,
                instance: member::string(map, "instance")?,
            }),
        })
    }

    pub(super) fn write_into(&self, map: &mut Map<String, Value>) {
        let mut put = |k: &str, v: Value| {
            map.insert(k.to_owned(), v);
        };
        match self {
            Body::ReadProperty { name }
            | Body::ObserveProperty { name }
            | Body::UnobserveProperty { name } => put("name", name.as_str().into()),
            Body::WriteProperty { name, data } => {
                put("name", name.as_str().into());
                put("data", data.clone());
            }
            Body::WriteMultipleProperties { data } => put("data", Value::Object(data.clone())),
            Body::PropertyReading {
                name,
                value,
                timestamp,
            } => {
                put("name", name.as_str().into());
                put("value", value.clone());
                put("timestamp", timestamp.as_str().into());
            }
            Body::PropertyReadings { data, timestamp } => {
                put("data", Value::Object(data.clone()));
                put("timestamp", timestamp.as_str().into());
            }
            Body::InvokeAction { action, input } => {
                put("action", action.as_str().into());
                if let Some(input) = input {
                    put("input", input.clone());
                }
            }
            Body::QueryAction { action } | Body::ActionInput { action } => {
                put("action", action.as_str().into())
            }
            Body::CancelAction { action, reason } => {
                put("action", action.as_str().into());
                if let Some(reason) = reason {
                    put("reason", reason.as_str().into());
                }
            }
            Body::ActionStatus {
                action,
                status,
                output,
            } => {
                put("action", action.as_str().into());
                put("status", status.as_str().into());
                if let Some(output) = output {
                    put("output", output.clone());
                }
            }
            Body::SubscribeEvent { event } | Body::UnsubscribeEvent { event } => {
                put("event", event.as_str().into())
            }
            Body::SubscribeAllEvents | Body::UnsubscribeAllEvents => {}
            Body::Event {
                event,
                data,
                timestamp,
            } => {
                put("event", event.as_str().into());
                put("data", data.clone());
                put("timestamp", timestamp.as_str().into());
            }
            Body::Error(e) => {
                put("type", e.error_type.as_str().into());
                put("title", e.title.as_str().into());
                put("status", e.status.as_str().into());
                put("detail", e.detail.as_str().into());
                put("instance", e.instance.as_str().into());
            }
        }
    }
}
