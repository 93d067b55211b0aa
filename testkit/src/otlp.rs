//! An OTLP/gRPC collector inside the test: what sidecars export over the
//! real wire protocol, with the service that sent each span.

use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::mpsc;

struct Collector(mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

pub type Exports = mpsc::UnboundedReceiver<ExportTraceServiceRequest>;

/// A collector on an ephemeral loopback port.
pub async fn grpc_collector() -> (SocketAddr, Exports) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (addr, rx)
}

/// A span and the `service.name` of the process that exported it.
pub struct Exported {
    pub service: String,
    pub span: Span,
}

/// Everything received until the exporters have been quiet for a moment.
pub async fn received(rx: &mut Exports) -> Vec<Exported> {
    let mut spans = Vec::new();
    while let Ok(Some(request)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await
    {
        for rs in request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Exported {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    spans
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
