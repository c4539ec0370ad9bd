//! The CloudEvents NATS protocol binding: the one edge where `cloudevents-sdk` is used.
//!
//! ```text
//! decode: (headers, payload) ─▶ NatsMessage::new (case-insensitive names, percent-decoding, checks)
//!           ─▶ NatsMessage::encoding ─▶ binary: into_binary_event (ce-* headers ─▶ Event attributes)
//!                                      structured / plain body: the caller parses the payload once
//! encode: Event ─▶ SDK event ─▶ BinaryDeserializer / StructuredDeserializer
//!           ─▶ NatsBinaryWriter / NatsStructuredWriter ─▶ (HeaderMap, Bytes)
//! ```
//!
//! Binary mode puts every attribute and extension in a `ce-<name>` header whose value is
//! percent-encoded as the CloudEvents HTTP binding prescribes (space, `"`, `%`, controls and non-ASCII),
//! including `ce-datacontenttype`; the payload is the data. Structured mode sends the whole event as
//! JSON with `content-type: application/cloudevents+json`. Decoding matches header names without
//! regard to case (async-nats compares custom names case-sensitively, so headers are iterated), takes
//! an unprefixed `content-type` as the data content type in binary mode, and never builds a header
//! value with a panicking constructor.

use std::borrow::Cow;

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use bytes::Bytes;
use chrono::SecondsFormat;
use cloudevents::event::SpecVersion;
use cloudevents::message::{
    BinaryDeserializer, BinarySerializer, MessageAttributeValue, StructuredDeserializer, StructuredSerializer,
};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use serde::Deserialize;

use crate::event::{Event, ExtensionValue, parse_dataschema, parse_time};
use crate::{Error, Result};

/// The content type of a structured-mode CloudEvent.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";

/// The prefix of binary-mode attribute headers.
pub const CE_PREFIX: &str = "ce-";

/// Characters the CloudEvents HTTP binding requires percent-encoded in header values (non-ASCII bytes
/// are always encoded).
const HEADER_VALUE_ESCAPES: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'%');

/// Which CloudEvents content mode a message uses on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Attributes in `ce-*` headers, data as the payload.
    Binary,
    /// The whole event as JSON, `content-type: application/cloudevents+json`.
    Structured,
}

impl std::str::FromStr for Mode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "binary" => Ok(Self::Binary),
            "structured" => Ok(Self::Structured),
            other => Err(Error::Encode {
                reason: format!("unknown mode `{other}` (binary or structured)"),
            }),
        }
    }
}

/// How an inbound message carries its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `content-type: application/cloudevents+json`: the payload is the whole event.
    Structured,
    /// `ce-specversion` present: attributes in headers, the payload is the data.
    Binary,
    /// Neither: a plain JSON body (an agenttool-event envelope, or a structured event without its
    /// content type).
    Unknown,
}

/// Whether `name` is a valid CloudEvents attribute or extension name: lowercase ASCII letters and digits.
pub fn is_attribute_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether a content type is JSON (`application/json`, `text/json`, `…+json`, with parameters).
pub fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence == "text/json" || essence.ends_with("+json")
}

/// An inbound NATS message read as a CloudEvents message: header names folded to lowercase,
/// `ce-*` values percent-decoded and checked. Names and values are borrowed from the headers
/// unless folding or decoding changed them.
#[derive(Debug, Clone)]
pub struct NatsMessage<'a> {
    /// `(attribute name, decoded value)` from `ce-*` headers, `specversion` excluded.
    attributes: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    specversion: Option<Cow<'a, str>>,
    content_type: Option<String>,
    payload: &'a [u8],
}

impl<'a> NatsMessage<'a> {
    /// Reads the headers. Fails with `bad_envelope` naming the attribute when a `ce-*` name is no
    /// CloudEvents name, a value is not percent-encoded UTF-8, or an attribute is given twice with
    /// different values.
    pub fn new(headers: Option<&'a HeaderMap>, payload: &'a [u8]) -> Result<Self> {
        let mut message = Self {
            attributes: Vec::new(),
            specversion: None,
            content_type: None,
            payload,
        };
        let Some(headers) = headers else {
            return Ok(message);
        };
        let mut ce: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::with_capacity(headers.len());
        for (name, values) in headers.iter() {
            let name: &'a str = name.as_ref();
            let lower: Cow<'a, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                Cow::Owned(name.to_ascii_lowercase())
            } else {
                Cow::Borrowed(name)
            };
            for value in values {
                let raw = value.as_str();
                if lower == "content-type" {
                    message.content_type.get_or_insert_with(|| raw.trim().to_owned());
                    continue;
                }
                let attribute: Cow<'a, str> = match &lower {
                    Cow::Borrowed(lower) => match lower.strip_prefix(CE_PREFIX) {
                        Some(attribute) => Cow::Borrowed(attribute),
                        None => continue,
                    },
                    Cow::Owned(lower) => match lower.strip_prefix(CE_PREFIX) {
                        Some(attribute) => Cow::Owned(attribute.to_owned()),
                        None => continue,
                    },
                };
                if !is_attribute_name(&attribute) {
                    return Err(Error::bad_envelope(
                        name,
                        "not a CloudEvents attribute name (a-z, 0-9)",
                    ));
                }
                // Most values have nothing encoded: borrowed as they are, without the decoder's pass.
                let decoded = if raw.contains('%') {
                    percent_decode_str(raw).decode_utf8().map_err(|_| {
                        Error::bad_envelope(&*attribute, "header value is not percent-encoded UTF-8")
                    })?
                } else {
                    Cow::Borrowed(raw)
                };
                match ce.iter().find(|(a, _)| *a == attribute) {
                    Some((_, earlier)) if *earlier != decoded => {
                        return Err(Error::bad_envelope(
                            &*attribute,
                            "given more than once with different values",
                        ));
                    }
                    Some(_) => {}
                    None => ce.push((attribute, decoded)),
                }
            }
        }
        // HeaderMap iterates in hash order; sort so decoding does not depend on it.
        ce.sort();
        for (attribute, value) in ce {
            if attribute == "specversion" {
                message.specversion = Some(value);
            } else {
                message.attributes.push((attribute, value));
            }
        }
        Ok(message)
    }

    /// The unprefixed `content-type` header, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// The payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Whether a `ce-specversion` header was present.
    pub fn has_ce_headers(&self) -> bool {
        self.specversion.is_some()
    }

    /// Structured when `content-type` is `application/cloudevents+json` (any case, parameters allowed),
    /// binary when `ce-specversion` is present, unknown otherwise (a plain JSON body).
    pub fn encoding(&self) -> Encoding {
        let structured = self.content_type.as_deref().is_some_and(|ct| {
            ct.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case(STRUCTURED_CONTENT_TYPE)
        });
        if structured {
            Encoding::Structured
        } else if self.specversion.is_some() {
            Encoding::Binary
        } else {
            Encoding::Unknown
        }
    }

    /// The binary-mode event of the `ce-*` headers, without data: `specversion` 1.0, `id`, `source` and
    /// `type` present and not empty, `time` RFC 3339, `dataschema` a URL; every other header an
    /// extension (a string); an unprefixed `content-type` is the data content type when
    /// `ce-datacontenttype` is absent. The caller parses the payload as the data.
    pub fn into_binary_event(self) -> Result<Event> {
        match self.specversion.as_deref() {
            Some("1.0") => {}
            // Never the value: a rejection's text goes into the ledger's receipt.
            Some(_) => {
                return Err(Error::bad_envelope("specversion", "must be 1.0"));
            }
            None => return Err(Error::bad_envelope("specversion", "missing")),
        }
        let mut event = Event::new(String::new(), String::new(), String::new());
        for (attribute, value) in self.attributes {
            match &*attribute {
                "id" => event.id = value.into_owned(),
                "type" => event.ty = value.into_owned(),
                "source" => event.source = value.into_owned(),
                "datacontenttype" => event.datacontenttype = Some(value.into_owned()),
                "dataschema" => event.dataschema = Some(parse_dataschema(&value)?),
                "subject" => event.subject = Some(value.into_owned()),
                "time" => event.time = Some(parse_time(&value)?),
                _ => {
                    event
                        .extensions
                        .insert(attribute.into_owned(), ExtensionValue::String(value.into_owned()));
                }
            }
        }
        for (required, value) in [("id", &event.id), ("source", &event.source), ("type", &event.ty)] {
            if value.is_empty() {
                // A header given empty and a header not given read the same here; both are refused.
                return Err(Error::bad_envelope(required, "missing or empty"));
            }
        }
        if event.datacontenttype.is_none() {
            event.datacontenttype = self.content_type;
        }
        Ok(event)
    }
}

/// Writes an event as binary-mode headers and payload.
#[derive(Debug, Default)]
pub struct NatsBinaryWriter {
    headers: HeaderMap,
}

impl NatsBinaryWriter {
    fn put(mut self, name: &str, value: &str) -> cloudevents::message::Result<Self> {
        let other = |reason: String| cloudevents::message::Error::Other {
            source: reason.into(),
        };
        if !is_attribute_name(name) {
            return Err(other(format!(
                "`{name}` is not a CloudEvents attribute name (a-z, 0-9)"
            )));
        }
        let header: HeaderName = format!("{CE_PREFIX}{name}")
            .parse()
            .map_err(|_| other(format!("bad header name for `{name}`")))?;
        let encoded = utf8_percent_encode(value, HEADER_VALUE_ESCAPES).to_string();
        // Percent-encoding removed CR and LF, so this cannot fail; it is fallible all the same.
        let value: HeaderValue = encoded
            .parse()
            .map_err(|_| other(format!("bad header value for `{name}`")))?;
        self.headers.insert(header, value);
        Ok(self)
    }
}

fn attribute_text(value: &MessageAttributeValue) -> String {
    match value {
        // RFC 3339 with `Z`, and only as many fraction digits as the time has.
        MessageAttributeValue::DateTime(time) => time.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        other => other.to_string(),
    }
}

impl BinarySerializer<(HeaderMap, Bytes)> for NatsBinaryWriter {
    fn set_spec_version(self, spec_version: SpecVersion) -> cloudevents::message::Result<Self> {
        self.put("specversion", spec_version.as_str())
    }

    fn set_attribute(self, name: &str, value: MessageAttributeValue) -> cloudevents::message::Result<Self> {
        self.put(name, &attribute_text(&value))
    }

    fn set_extension(self, name: &str, value: MessageAttributeValue) -> cloudevents::message::Result<Self> {
        self.put(name, &attribute_text(&value))
    }

    fn end_with_data(self, bytes: Vec<u8>) -> cloudevents::message::Result<(HeaderMap, Bytes)> {
        Ok((self.headers, Bytes::from(bytes)))
    }

    fn end(self) -> cloudevents::message::Result<(HeaderMap, Bytes)> {
        Ok((self.headers, Bytes::new()))
    }
}

/// Writes an event as a structured-mode message.
#[derive(Debug, Default)]
pub struct NatsStructuredWriter;

impl StructuredSerializer<(HeaderMap, Bytes)> for NatsStructuredWriter {
    fn set_structured_event(self, bytes: Vec<u8>) -> cloudevents::message::Result<(HeaderMap, Bytes)> {
        let mut headers = HeaderMap::new();
        let value: HeaderValue =
            STRUCTURED_CONTENT_TYPE
                .parse()
                .map_err(|_| cloudevents::message::Error::Other {
                    source: "content type".into(),
                })?;
        let name: HeaderName = "content-type"
            .parse()
            .map_err(|_| cloudevents::message::Error::Other {
                source: "content-type header".into(),
            })?;
        headers.insert(name, value);
        Ok((headers, Bytes::from(bytes)))
    }
}

/// Puts `event` on the wire in `mode`, through the SDK's message writers.
pub fn encode(event: &Event, mode: Mode) -> Result<(HeaderMap, Bytes)> {
    let encode_error = |e: cloudevents::message::Error| Error::Encode {
        reason: e.to_string(),
    };
    let sdk = cloudevents::Event::deserialize(event.to_json()).map_err(|e| Error::Encode {
        reason: format!("event: {e}"),
    })?;
    match mode {
        Mode::Binary => {
            BinaryDeserializer::deserialize_binary(sdk, NatsBinaryWriter::default()).map_err(encode_error)
        }
        Mode::Structured => {
            StructuredDeserializer::deserialize_structured(sdk, NatsStructuredWriter).map_err(encode_error)
        }
    }
}

/// The value of the first header named `name`, compared without regard to case.
pub fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| AsRef::<str>::as_ref(*n).eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(HeaderValue::as_str)
}
