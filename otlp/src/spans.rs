//! OTLP's span messages as the mapper takes them: ids in hex, attribute values as JSON, the
//! resource's `service.name` beside each span.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{span, status};
use serde_json::{Map, Value, json};
use toolledger_import::otlp::{Span, SpanKind, SpanStatus};

/// Every span of `request`, with its resource's service name. A span whose trace or span id is not
/// 16 and 8 bytes is returned in `malformed` (by position) rather than mapped.
pub fn spans_of(request: &ExportTraceServiceRequest) -> (Vec<Span>, Vec<String>) {
    let mut spans = Vec::new();
    let mut malformed = Vec::new();
    for resource_spans in &request.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|resource| {
            resource
                .attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match json_of(kv.value.as_ref()) {
                    Value::String(name) if !name.is_empty() => Some(name),
                    _ => None,
                })
        });
        for scope_spans in &resource_spans.scope_spans {
            for otlp in &scope_spans.spans {
                if otlp.trace_id.len() != 16 || otlp.span_id.len() != 8 {
                    malformed.push(format!(
                        "span `{}`: trace_id must be 16 bytes and span_id 8 (got {} and {})",
                        otlp.name.chars().take(64).collect::<String>(),
                        otlp.trace_id.len(),
                        otlp.span_id.len()
                    ));
                    continue;
                }
                spans.push(Span {
                    trace_id: hex(&otlp.trace_id),
                    span_id: hex(&otlp.span_id),
                    parent_span_id: (otlp.parent_span_id.len() == 8).then(|| hex(&otlp.parent_span_id)),
                    trace_flags: (otlp.flags & 0xff) as u8,
                    name: otlp.name.clone(),
                    kind: match span::SpanKind::try_from(otlp.kind) {
                        Ok(span::SpanKind::Server) => SpanKind::Server,
                        Ok(span::SpanKind::Client) => SpanKind::Client,
                        Ok(span::SpanKind::Producer | span::SpanKind::Consumer) => SpanKind::Messaging,
                        _ => SpanKind::Internal,
                    },
                    start_unix_nanos: otlp.start_time_unix_nano,
                    end_unix_nanos: otlp.end_time_unix_nano,
                    attributes: attributes(&otlp.attributes),
                    service_name: service_name.clone(),
                    status: match otlp.status.as_ref() {
                        Some(s) if s.code == status::StatusCode::Error as i32 => {
                            SpanStatus::Error(s.message.clone())
                        }
                        Some(s) if s.code == status::StatusCode::Ok as i32 => SpanStatus::Ok,
                        _ => SpanStatus::Unset,
                    },
                    exceptions: otlp
                        .events
                        .iter()
                        .filter(|event| event.name == "exception")
                        .map(|event| {
                            let attrs = attributes(&event.attributes);
                            let text = |key: &str| attrs.get(key).and_then(Value::as_str).map(str::to_owned);
                            (text("exception.type"), text("exception.message"))
                        })
                        .collect(),
                });
            }
        }
    }
    (spans, malformed)
}

fn attributes(pairs: &[KeyValue]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|kv| (kv.key.clone(), json_of(kv.value.as_ref())))
        .collect()
}

/// An attribute value as JSON: bytes as hex, a non-finite double as null.
fn json_of(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
        }
        Some(any_value::Value::ArrayValue(array)) => {
            Value::Array(array.values.iter().map(|v| json_of(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(list)) => Value::Object(attributes(&list.values)),
        Some(any_value::Value::BytesValue(bytes)) => json!(hex(bytes)),
        _ => Value::Null,
    }
}

fn hex(bytes: &[u8]) -> String {
    toolledger_wire::entry::hex(bytes)
}
