//! toolledger-wire's integration tests, one binary:
//!
//! - `codec`: property tests for the binding and canonicalization;
//! - `decoding`: decode cases and the typed reasons, ledger entry bytes;
//! - `vectors`: RFC 8785 vectors from `$TOOLLEDGER_VECTORS` and the I-JSON refusals;
//! - `producers`: independent Python producers against a real nats-server; ATL_INBOUND dedupes nothing.

mod codec;
mod decoding;
mod producers;
mod vectors;

use async_nats::HeaderMap;
use bytes::Bytes;

/// The tenant every test event belongs to.
pub const TENANT: &str = "acme";

/// Headers from `(name, value)` pairs, built with the fallible constructors.
pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name: async_nats::header::HeaderName = name.parse().expect("header name");
        let value: async_nats::HeaderValue = value.parse().expect("header value");
        map.append(name, value);
    }
    map
}

/// A payload from text.
pub fn body(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}
