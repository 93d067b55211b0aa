//! A2A agents as upstreams (see `super::upstream`): an `[[imports.a2a]]`
//! entry's Agent Card is the Thing's offer (its skills the actions), a call
//! is a message to the agent over JSON-RPC, streamed when the card says
//! the agent streams.
//!
//! - [`card`]: the card read as an [`Offer`] and the endpoint to call;
//! - [`message`]: a call as an A2A request; [`task`]: the answers as our
//!   updates and outcome; [`parts`]: A2A parts in either wire shape (all
//!   pure);
//! - `link`: the bytes (card, requests, bounds); `call`: one call driven to
//!   its end (rate of updates, cancel, polling).
//!
//! A2A has no properties: [`Upstream::read`] is always `NotFound`. Changes
//! are noticed by [`Upstream::probe`] (the card fetched again differs).

mod call;
pub mod card;
mod link;
pub mod message;
pub mod parts;
pub mod task;
mod url;

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use self::card::{read_card, Card, Endpoint};
use self::link::Link;
use super::upstream::{Call, Change, Offer, Outcome, Update, Upstream, UpstreamError};
use crate::config::ImportConfig;
use crate::telemetry::TraceContext;

/// One imported A2A agent.
#[derive(Debug)]
pub struct A2aUpstream {
    card_url: String,
    link: Arc<Link>,
    known: Mutex<Known>,
    /// Told when a probe finds the card changed.
    news: Notify,
}

/// What the last card read said.
#[derive(Debug, Default)]
struct Known {
    endpoint: Option<Endpoint>,
    /// The card as read (less its signatures), to notice a change.
    card: Option<Value>,
}

impl A2aUpstream {
    /// An agent by its `card_url` (nothing is fetched yet). Must be called
    /// inside a Tokio runtime (the HTTP client's pool lives there).
    pub fn new(config: &ImportConfig) -> Result<A2aUpstream, UpstreamError> {
        let Some(card_url) = config.card_url.clone() else {
            let message = format!("imports `{}`: an A2A agent needs a card_url", config.name);
            return Err(UpstreamError::Unreachable(message));
        };
        Ok(A2aUpstream {
            card_url,
            link: Arc::new(Link::new(config)?),
            known: Mutex::new(Known::default()),
            news: Notify::new(),
        })
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        // Nothing in `Known` can be left half-written: a poisoned lock's
        // content is as good as any.
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fetches and reads the card, remembers its endpoint; with whether it
    /// differs from the one read before.
    async fn fetch(&self) -> Result<(Card, bool), UpstreamError> {
        let value = self.link.card(&self.card_url).await?;
        let card = read_card(&value, &self.card_url)?;
        let seen = fingerprint(value);
        let mut known = self.known();
        let changed = known.card.as_ref().is_some_and(|before| *before != seen);
        known.card = Some(seen);
        known.endpoint = Some(card.endpoint.clone());
        Ok((card, changed))
    }
}

/// The card less `signatures`: a card signed anew at every request (a
/// randomized algorithm such as ES256) has not changed.
fn fingerprint(mut card: Value) -> Value {
    if let Some(card) = card.as_object_mut() {
        card.remove("signatures");
    }
    card
}

impl Upstream for A2aUpstream {
    fn protocol(&self) -> &'static str {
        "a2a"
    }

    fn target(&self) -> &str {
        &self.card_url
    }

    async fn connect(&self) -> Result<Offer, UpstreamError> {
        Ok(self.fetch().await?.0.offer)
    }

    async fn offer(&self) -> Result<Offer, UpstreamError> {
        Ok(self.fetch().await?.0.offer)
    }

    async fn call(
        &self,
        call: Call,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> Result<Outcome, UpstreamError> {
        let known = self.known().endpoint.clone();
        let endpoint = match known {
            Some(endpoint) => endpoint,
            None => self.fetch().await?.0.endpoint,
        };
        call::Run::new(self.link.clone(), endpoint, call, updates, cancel)
            .run()
            .await
    }

    async fn read(
        &self,
        property: &str,
        _trace: Option<TraceContext>,
    ) -> Result<Value, UpstreamError> {
        Err(UpstreamError::NotFound(property.to_owned()))
    }

    async fn probe(&self) -> Result<(), UpstreamError> {
        let (_, changed) = self.fetch().await?;
        if changed {
            self.news.notify_one();
        }
        Ok(())
    }

    async fn changed(&self) -> Change {
        self.news.notified().await;
        Change::Lists
    }

    async fn close(&self) {
        // Nothing is held open between calls; the next call reads the
        // card again.
        self.known().endpoint = None;
    }
}

#[cfg(test)]
mod fixture_tests;

#[cfg(test)]
mod hostile_tests;
