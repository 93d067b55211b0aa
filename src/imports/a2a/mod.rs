//! A2A agents as upstreams (see `super::upstream`). (A stub until the A2A
//! client lands.)

use std::future::Future;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::upstream::*;
use crate::config::ImportConfig;
use crate::telemetry::TraceContext;

pub struct A2aUpstream;

impl A2aUpstream {
    pub fn new(_config: &ImportConfig) -> Result<A2aUpstream, UpstreamError> {
        Err(UpstreamError::Unreachable("not built yet".into()))
    }
}

impl Upstream for A2aUpstream {
    fn protocol(&self) -> &'static str {
        "a2a"
    }
    fn target(&self) -> &str {
        ""
    }
    fn connect(&self) -> impl Future<Output = Result<Offer, UpstreamError>> + Send {
        async { Err(UpstreamError::Unreachable(String::new())) }
    }
    fn offer(&self) -> impl Future<Output = Result<Offer, UpstreamError>> + Send {
        async { Err(UpstreamError::Unreachable(String::new())) }
    }
    fn call(
        &self,
        _call: Call,
        _updates: mpsc::Sender<Update>,
        _cancel: CancellationToken,
    ) -> impl Future<Output = Result<Outcome, UpstreamError>> + Send {
        async { Err(UpstreamError::Unreachable(String::new())) }
    }
    fn read(
        &self,
        _property: &str,
        _trace: Option<TraceContext>,
    ) -> impl Future<Output = Result<Value, UpstreamError>> + Send {
        async { Err(UpstreamError::Unreachable(String::new())) }
    }
    fn probe(&self) -> impl Future<Output = Result<(), UpstreamError>> + Send {
        async { Ok(()) }
    }
    fn changed(&self) -> impl Future<Output = Change> + Send {
        std::future::pending()
    }
    fn close(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
