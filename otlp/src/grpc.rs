//! OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, gzip accepted; a
//! refused inbox is `RESOURCE_EXHAUSTED` (full) or `UNAVAILABLE` with a `RetryInfo`: as a status
//! detail (`grpc-status-details-bin`, the gRPC convention) and as `google.rpc.retryinfo-bin`
//! trailing metadata (where the Python SDK's exporter reads it).

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic_types::{ErrorDetails, StatusExt};

use crate::{Receiver, Refusal};

struct Service(Arc<Receiver>);

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|v| v.trim().to_owned());
        match self.0.export(bearer.as_deref(), request.get_ref()).await {
            Ok(response) => Ok(tonic::Response::new(response)),
            Err(refusal) => {
                let message = refusal.message();
                let delay = self.0.retry_after.max(std::time::Duration::from_secs(1));
                let retryable = |code| {
                    tonic::Status::with_error_details_and_metadata(
                        code,
                        message.clone(),
                        ErrorDetails::with_retry_info(Some(delay)),
                        retry_info_metadata(delay),
                    )
                };
                Err(match refusal {
                    Refusal::Unauthenticated => tonic::Status::unauthenticated(message),
                    Refusal::Malformed(_) | Refusal::TooLarge(_) => tonic::Status::invalid_argument(message),
                    Refusal::Busy { full: true, .. } => retryable(tonic::Code::ResourceExhausted),
                    Refusal::Busy { full: false, .. } => retryable(tonic::Code::Unavailable),
                })
            }
        }
    }
}

/// `google.rpc.retryinfo-bin`: a serialized `google.rpc.RetryInfo` of `delay`.
fn retry_info_metadata(delay: std::time::Duration) -> tonic::metadata::MetadataMap {
    let info = tonic_types::pb::RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
        }),
    };
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert_bin(
        "google.rpc.retryinfo-bin",
        tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&info)),
    );
    metadata
}

/// Serves `receiver` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    receiver: Arc<Receiver>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let limit = receiver.max_request_bytes;
    let service = TraceServiceServer::new(Service(receiver))
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(limit);
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), shutdown)
        .await
}
