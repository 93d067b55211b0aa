//! Input streams (the draft's Request-Stream): a consumer's `actionInput`
//! chunks for one of its running invocations, checked for order and
//! forwarded to the agent with the invocation's route as `correlationID`
//! (see [`crate::lmos::stream`]). Per invocation the router keeps one
//! [`crate::lmos::stream::Sequencer`] (two integers), dropped with the invocation.

use super::{Consumer, Effect, Requests};
use crate::lmos::stream::{Chunk, Order};
use crate::lmos::{Message, Problem, ProblemKind};

impl Requests {
    /// One chunk of input; what to send where.
    pub(super) fn input(
        &mut self,
        consumer: Consumer,
        message: Message,
        action: String,
    ) -> Vec<Effect> {
        let refuse = |kind, detail: String| {
            let m = Problem::new(kind, detail)
                .to_message(&message.thing_id, Some(message.reply_correlation_id()));
            vec![Effect::ToConsumer(consumer.clone(), m.to_json())]
        };
        let Some(route) = self.find_invocation(&consumer, &message, &action) else {
            return self.no_invocation(consumer, &message, &action);
        };
        if !self.routes.contains_key(&route) {
            return self.no_invocation(consumer, &message, &action);
        }
        // A grant of stream credit, not a chunk of input (`credit.rs`):
        // taken after the invocation ended too, for what is still held.
        if let Some(credit) = message.extra.get(super::credit::CREDIT) {
            if message.extra.contains_key(crate::lmos::stream::MEMBER) {
                return refuse(
                    ProblemKind::ConflictingMembers,
                    "An actionInput either grants stream credit (`credit`) or carries a chunk of input (`stream`), not both.".into(),
                );
            }
            return match super::credit::granted(Some(credit)) {
                Ok(n) => self.grant(consumer, message, route, n.unwrap_or(0)),
                Err(e) => refuse(ProblemKind::InvalidMember, e),
            };
        }
        let Some(p) = self.routes.get(&route) else {
            return self.no_invocation(consumer, &message, &action);
        };
        if p.finished {
            return refuse(
                ProblemKind::NotFound,
                format!("The invocation of `{action}` has ended; it takes no more input."),
            );
        }
        let thing = p.thing.clone();
        let chunk = match Chunk::of(&message.extra) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return refuse(
                    ProblemKind::MissingMember,
                    "An actionInput carries one chunk of input in its `stream` member: \
                     {\"seq\": n, \"data\": ...} or {\"seq\": n, \"end\": true}."
                        .into(),
                )
            }
            Err(e) => return refuse(ProblemKind::InvalidMember, e.to_string()),
        };
        let Some(host) = self.hosts.get(&thing).copied() else {
            return refuse(
                ProblemKind::Unavailable,
                format!("No agent hosting the Thing `{thing}` is connected to this sidecar."),
            );
        };
        let order = self
            .inputs
            .entry(route.clone())
            .or_default()
            .check(&chunk, false);
        match order {
            Order::Next { .. } => {
                let text = message.with_correlation_id(route).to_json();
                vec![self.to_host(host, &thing, "actionInput", text)]
            }
            Order::Gap { expected, got } | Order::Stale { expected, got } => refuse(
                ProblemKind::InvalidMember,
                format!("Input chunk `seq` {got} is out of order: the next one is {expected}. Nothing was forwarded; resend from {expected}."),
            ),
            Order::AfterEnd => refuse(
                ProblemKind::InvalidMember,
                "The input stream of this invocation has ended (a chunk with `end: true` came before); nothing was forwarded.".into(),
            ),
        }
    }

    /// Input streams whose order is being kept (for tests and stats).
    pub fn input_streams(&self) -> usize {
        self.inputs.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value};

    use super::super::*;

    const T: &str = "urn:t";

    fn router() -> Requests {
        let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 10);
        r.claim(1, &[T.to_owned()]).unwrap();
        r
    }

    fn send(r: &mut Requests, v: Value) -> Vec<Effect> {
        r.request(
            Consumer::WebSocket(2),
            Message::from_value(v).unwrap(),
            None,
        )
    }

    /// Invokes `a` as `inv`; the route it reaches agent 1 under.
    fn invoke(r: &mut Requests) -> String {
        let invoke = json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv"});
        match &send(r, invoke)[..] {
            [Effect::ToAgent(1, text)] => serde_json::from_str::<Value>(text).unwrap()
                ["correlationID"]
                .as_str()
                .unwrap()
                .to_owned(),
            other => panic!("{other:?}"),
        }
    }

    fn chunk(seq: u64, end: bool) -> Value {
        let stream = if end {
            json!({"seq": seq, "end": true})
        } else {
            json!({"seq": seq, "data": format!("c{seq}")})
        };
        json!({"thingID": T, "messageID": "m", "messageType": "actionInput", "action": "a", "correlationID": "inv", "stream": stream})
    }

    /// (to the agent: its correlation and seq) or (to the consumer: status, correlation).
    fn outcome(effects: &[Effect]) -> (String, Value) {
        match effects {
            [Effect::ToAgent(1, text)] => {
                let v: Value = serde_json::from_str(text).unwrap();
                (
                    format!("agent {}", v["correlationID"].as_str().unwrap()),
                    v["stream"]["seq"].clone(),
                )
            }
            [Effect::ToConsumer(Consumer::WebSocket(2), text)] => {
                let v: Value = serde_json::from_str(text).unwrap();
                (
                    format!("consumer {}", v["correlationID"].as_str().unwrap()),
                    v["status"].clone(),
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn input_chunks_reach_the_agent_in_order_with_the_route() {
        let mut r = router();
        let route = invoke(&mut r);
        let to_agent = format!("agent {route}");
        assert_eq!(
            outcome(&send(&mut r, chunk(0, false))),
            (to_agent.clone(), json!(0))
        );
        assert_eq!(
            outcome(&send(&mut r, chunk(2, false))),
            ("consumer inv".into(), json!("400")),
            "a gap"
        );
        assert_eq!(
            outcome(&send(&mut r, chunk(0, false))),
            ("consumer inv".into(), json!("400")),
            "a repeat"
        );
        assert_eq!(
            outcome(&send(&mut r, chunk(1, false))),
            (to_agent.clone(), json!(1))
        );
        assert_eq!(outcome(&send(&mut r, chunk(2, true))), (to_agent, json!(2)));
        assert_eq!(
            outcome(&send(&mut r, chunk(3, false))),
            ("consumer inv".into(), json!("400")),
            "after the end"
        );
        assert_eq!(r.input_streams(), 1);
        let done = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "completed", "correlationID": route});
        r.reply(T, &Message::from_value(done).unwrap(), None)
            .unwrap();
        assert_eq!(
            outcome(&send(&mut r, chunk(3, false))),
            ("consumer inv".into(), json!("404")),
            "ended"
        );
    }

    #[tokio::test]
    async fn input_for_no_invocation_gets_a_404_and_no_chunk_a_400() {
        let mut r = router();
        assert_eq!(
            outcome(&send(&mut r, chunk(0, false))),
            ("consumer inv".into(), json!("404"))
        );
        send(
            &mut r,
            json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv"}),
        );
        let mut bare = chunk(0, false);
        bare.as_object_mut().unwrap().remove("stream");
        assert_eq!(
            outcome(&send(&mut r, bare)),
            ("consumer inv".into(), json!("400"))
        );
        assert_eq!(r.input_streams(), 0, "nothing kept for a refused chunk");
    }

    #[tokio::test]
    async fn forgotten_invocations_drop_their_input_order() {
        let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), 0);
        r.claim(1, &[T.to_owned()]).unwrap();
        let route = invoke(&mut r);
        send(&mut r, chunk(0, false));
        assert_eq!(r.input_streams(), 1);
        let done = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "completed", "correlationID": route});
        r.reply(T, &Message::from_value(done).unwrap(), None)
            .unwrap();
        assert_eq!(r.input_streams(), 0, "bounded by the running invocations");
    }
}
