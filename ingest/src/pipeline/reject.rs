//! The original a rejection keeps in ATL_QUARANTINE: scrubbed the way the accepted event would have
//! been, credential-shaped headers replaced by their markers.

use std::sync::{Mutex, PoisonError};

use crate::quarantine::Original;
use crate::scrub::Scrubber;

/// The original as quarantine may keep it: a JSON body scrubbed like an accepted event would be,
/// credential-shaped headers replaced by their markers.
pub(crate) fn scrubbed_original(original: &Original, scrubber: &Mutex<Scrubber>) -> Original {
    let scrubber = scrubber.lock().unwrap_or_else(PoisonError::into_inner);
    let mut copy = original.clone();
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&original.payload)
        && let Some(scrubbed) = scrub_payload(json, original.headers.as_ref(), &scrubber)
        && let Ok(bytes) = serde_json::to_vec(&scrubbed)
    {
        copy.payload = bytes.into();
    }
    if let Some(headers) = &original.headers {
        let mut kept = async_nats::HeaderMap::new();
        for (name, values) in headers.iter() {
            let credential = crate::scrub::is_credential_header(name.as_ref());
            for value in values {
                if credential {
                    let marker = scrubber.marker(&serde_json::Value::String(value.to_string()));
                    if let Ok(value) = marker["$scrubbed"]
                        .as_str()
                        .unwrap_or_default()
                        .parse::<async_nats::header::HeaderValue>()
                    {
                        kept.append(name.clone(), value);
                    }
                } else {
                    kept.append(name.clone(), value.clone());
                }
            }
        }
        copy.headers = Some(kept);
    }
    copy
}

/// A parsed original payload scrubbed as the event it would be; `None` when nothing was a secret.
///
/// A structured event or an envelope is scrubbed as it is. A binary-mode payload is the event's `data`
/// with the attributes in `ce-*` headers: it is scrubbed inside an event rebuilt from those headers, so
/// declared sensitive fields (found through the tenant and tool id attributes) and `/data/…` paths
/// apply to it as they would have to the accepted event.
fn scrub_payload(
    mut json: serde_json::Value,
    headers: Option<&async_nats::HeaderMap>,
    scrubber: &Scrubber,
) -> Option<serde_json::Value> {
    let binary = headers.is_some_and(|h| h.get("ce-specversion").is_some());
    if !binary {
        return (!scrubber.scrub_only(&mut json).is_empty()).then_some(json);
    }
    let mut event = serde_json::Map::new();
    for (name, values) in headers.into_iter().flat_map(|h| h.iter()) {
        let name = name.to_string();
        if let (Some(attribute), Some(value)) = (name.strip_prefix("ce-"), values.first()) {
            event.insert(attribute.to_owned(), serde_json::Value::String(value.to_string()));
        }
    }
    event.insert("data".to_owned(), json);
    let mut event = serde_json::Value::Object(event);
    if scrubber.scrub_only(&mut event).is_empty() {
        return None;
    }
    event.get_mut("data").map(serde_json::Value::take)
}
