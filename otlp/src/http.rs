//! OTLP/HTTP: `POST /v1/traces`, binary protobuf or JSON, identity or gzip; the response in the
//! request's encoding, and errors as a `google.rpc.Status` (OTLP spec, "OTLP/HTTP Response").

use std::io::Read;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::{Receiver, Refusal};

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// Serves `receiver` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    receiver: Arc<Receiver>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The handler reads the body itself, up to the limit, so an oversize request gets the OTLP
    // error response rather than axum's plain-text one.
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .layer(DefaultBodyLimit::disable())
        .with_state(receiver);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

async fn traces(State(receiver): State<Arc<Receiver>>, headers: HeaderMap, body: Body) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let encoding = match content_type.as_deref() {
        Some(PROTOBUF) => Encoding::Protobuf,
        Some(JSON) => Encoding::Json,
        other => {
            let why = format!(
                "Content-Type {} is neither {PROTOBUF} nor {JSON}",
                other.unwrap_or("(none)")
            );
            return refuse(Encoding::Json, StatusCode::UNSUPPORTED_MEDIA_TYPE, 3, &why, None);
        }
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let limit = receiver.max_request_bytes;
    let outcome = match axum::body::to_bytes(body, limit).await {
        Err(_) => Err(Refusal::TooLarge(limit)),
        Ok(body) => match decode(&headers, &body, limit, encoding) {
            Ok(request) => receiver.export(bearer, &request).await,
            Err(refusal) => Err(refusal),
        },
    };
    match outcome {
        Ok(response) => {
            let body = match encoding {
                Encoding::Protobuf => response.encode_to_vec(),
                Encoding::Json => serde_json::to_vec(&response).unwrap_or_default(),
            };
            ok(encoding, body)
        }
        Err(refusal) => {
            let message = refusal.message();
            let retry = receiver.retry_after.as_secs().max(1);
            match refusal {
                Refusal::Unauthenticated => refuse(encoding, StatusCode::UNAUTHORIZED, 16, &message, None),
                Refusal::Malformed(_) | Refusal::TooLarge(_) => {
                    let status = if matches!(refusal, Refusal::TooLarge(_)) {
                        StatusCode::PAYLOAD_TOO_LARGE
                    } else {
                        StatusCode::BAD_REQUEST
                    };
                    refuse(encoding, status, 3, &message, None)
                }
                Refusal::Busy { full: true, .. } => {
                    refuse(encoding, StatusCode::TOO_MANY_REQUESTS, 8, &message, Some(retry))
                }
                Refusal::Busy { full: false, .. } => refuse(
                    encoding,
                    StatusCode::SERVICE_UNAVAILABLE,
                    14,
                    &message,
                    Some(retry),
                ),
            }
        }
    }
}

/// The request, decompressed (gzip, at most `limit` bytes) and decoded.
fn decode(
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
    encoding: Encoding,
) -> Result<ExportTraceServiceRequest, Refusal> {
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let inflated;
    let bytes = match content_encoding.as_deref() {
        None | Some("identity") => body,
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body)
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| Refusal::Malformed(format!("gzip: {e}")))?;
            if out.len() > limit {
                return Err(Refusal::TooLarge(limit));
            }
            inflated = out;
            &inflated[..]
        }
        Some(other) => {
            return Err(Refusal::Malformed(format!(
                "Content-Encoding {other} is not supported (gzip or identity)"
            )));
        }
    };
    match encoding {
        Encoding::Protobuf => {
            ExportTraceServiceRequest::decode(bytes).map_err(|e| Refusal::Malformed(e.to_string()))
        }
        Encoding::Json => serde_json::from_slice(bytes).map_err(|e| Refusal::Malformed(e.to_string())),
    }
}

fn content_type(encoding: Encoding) -> HeaderValue {
    HeaderValue::from_static(match encoding {
        Encoding::Protobuf => PROTOBUF,
        Encoding::Json => JSON,
    })
}

fn ok(encoding: Encoding, body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, content_type(encoding))], body).into_response()
}

/// A `google.rpc.Status` body with `code` (a gRPC code) and `message`, and `Retry-After` seconds.
fn refuse(
    encoding: Encoding,
    status: StatusCode,
    code: i32,
    message: &str,
    retry_after: Option<u64>,
) -> Response {
    let rpc = tonic_types::Status {
        code,
        message: message.to_owned(),
        details: Vec::new(),
    };
    let body = match encoding {
        Encoding::Protobuf => rpc.encode_to_vec(),
        Encoding::Json => {
            serde_json::to_vec(&serde_json::json!({ "code": code, "message": message })).unwrap_or_default()
        }
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type(encoding))], body).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
