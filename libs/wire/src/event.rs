//! The CloudEvent as toolledger holds it: typed attributes and extensions and one `data` value.
//!
//! ```text
//! structured body ─▶ ijson::parse ─▶ Value ─▶ Event::from_json ──┐   (data moved, never copied)
//! binary headers + payload ─▶ binding::NatsMessage ─▶ Event ─────┤
//! agenttool-event body ─▶ envelope::map_agenttool_event ─▶ Event ┘
//!          Event ─▶ write_canonical (RFC 8785, straight from the fields)
//!          Event ─▶ into_json ─▶ Value ─▶ (validate, scrub, offload) ─▶ LedgerEntry::seal_json
//!                                                          (or ─▶ Event::from_json, when an attribute changed)
//! ```
//!
//! The stages that work on the event as JSON (schema validation, scrubbing, offloading) take it with
//! [`Event::into_json`], which moves `data` and the attributes rather than copy them; the entry is
//! written from that value ([`crate::LedgerEntry::seal_json`]), the same bytes
//! [`Event::write_canonical`] writes for the event, and [`Event::from_json`] takes it back when a
//! stage may have made it something no CloudEvent is. The forms are the CloudEvents JSON format
//! with times normalized to UTC (`…Z`, as many fractional digits as needed) and `dataschema` as its
//! parsed URL, which is exactly what the ledger's entries have always held.
//!
//! `cloudevents-sdk` stays at the binding edge ([`crate::binding`] encodes events for producers);
//! nothing here depends on it.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::binding::{is_attribute_name, is_json_content_type};
use crate::ijson::JsonError;
use crate::jcs;
use crate::{Error, Result};

/// The CloudEvents version every event has.
pub const SPEC_VERSION: &str = "1.0";

/// The context attributes CloudEvents 1.0 defines (the rest are extensions).
pub const ATTRIBUTES: &[&str] = &[
    "specversion",
    "id",
    "type",
    "source",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
];

/// An extension attribute's value: CloudEvents allows strings, booleans and integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtensionValue {
    /// A string.
    String(String),
    /// A boolean.
    Boolean(bool),
    /// An integer.
    Integer(i64),
}

impl ExtensionValue {
    /// The string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    fn into_json(self) -> Value {
        match self {
            Self::String(s) => Value::String(s),
            Self::Boolean(b) => Value::Bool(b),
            Self::Integer(i) => Value::from(i),
        }
    }

    fn from_json(name: &str, value: Value) -> Result<Self> {
        match value {
            Value::String(s) => Ok(Self::String(s)),
            Value::Bool(b) => Ok(Self::Boolean(b)),
            Value::Number(n) => n
                .as_i64()
                .map(Self::Integer)
                .ok_or_else(|| Error::bad_envelope(name, "an extension number must be an integer")),
            _ => Err(Error::bad_envelope(
                name,
                "an extension is a string, a boolean or an integer",
            )),
        }
    }
}

impl fmt::Display for ExtensionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(s) => f.write_str(s),
            Self::Boolean(b) => write!(f, "{b}"),
            Self::Integer(i) => write!(f, "{i}"),
        }
    }
}

impl From<&str> for ExtensionValue {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

/// A CloudEvents 1.0 event whose data, when present, is JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `id`.
    pub id: String,
    /// `type`: the event class.
    pub ty: String,
    /// `source`.
    pub source: String,
    /// `datacontenttype`.
    pub datacontenttype: Option<String>,
    /// `dataschema`, as its parsed URL.
    pub dataschema: Option<String>,
    /// `subject`.
    pub subject: Option<String>,
    /// `time`, in UTC.
    pub time: Option<DateTime<Utc>>,
    /// Extension attributes by name (`tenant`, `sessionid`, …).
    pub extensions: BTreeMap<String, ExtensionValue>,
    /// `data`.
    pub data: Option<Value>,
}

/// `time` as every entry writes it: UTC, `Z`, as many fractional digits as needed.
pub fn format_time(time: &DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// An RFC 3339 `time` attribute, normalized to UTC.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::bad_envelope("time", format!("not an RFC 3339 time: {e}")))
}

/// A `dataschema` attribute as its parsed, absolute URL.
pub fn parse_dataschema(text: &str) -> Result<String> {
    url::Url::parse(text)
        .map(String::from)
        .map_err(|e| Error::bad_envelope("dataschema", format!("not a URI: {e}")))
}

impl Event {
    /// An event with the required attributes and nothing else.
    pub fn new(id: impl Into<String>, ty: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ty: ty.into(),
            source: source.into(),
            datacontenttype: None,
            dataschema: None,
            subject: None,
            time: None,
            extensions: BTreeMap::new(),
            data: None,
        }
    }

    /// `id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `type`.
    pub fn ty(&self) -> &str {
        &self.ty
    }

    /// `source`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `subject`.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// `time`.
    pub fn time(&self) -> Option<&DateTime<Utc>> {
        self.time.as_ref()
    }

    /// `datacontenttype`.
    pub fn datacontenttype(&self) -> Option<&str> {
        self.datacontenttype.as_deref()
    }

    /// An extension attribute.
    pub fn extension(&self, name: &str) -> Option<&ExtensionValue> {
        self.extensions.get(name)
    }

    /// A string extension attribute (`tenant`, `sessionid`, `invocationid`, `toolid`, …).
    pub fn extension_str(&self, name: &str) -> Option<&str> {
        self.extensions.get(name).and_then(ExtensionValue::as_str)
    }

    /// Sets an extension attribute.
    pub fn set_extension(&mut self, name: &str, value: impl Into<ExtensionValue>) {
        self.extensions.insert(name.to_owned(), value.into());
    }

    /// `data`.
    pub fn data(&self) -> Option<&Value> {
        self.data.as_ref()
    }

    /// An event from its CloudEvents JSON form (structured mode), taking the value apart: `data`
    /// moves into the event. Attributes must have their CloudEvents types; `null` attributes and
    /// extensions are absent; `data` must be JSON (`datacontenttype` JSON or absent, no `data_base64`).
    pub fn from_json(body: Value) -> Result<Self> {
        let Value::Object(object) = body else {
            return Err(Error::bad_envelope("body", "not a JSON object"));
        };
        Self::from_map(object)
    }

    /// [`Self::from_json`] from the object's members.
    pub fn from_map(mut object: Map<String, Value>) -> Result<Self> {
        match object.remove("specversion") {
            Some(Value::String(v)) if v == SPEC_VERSION => {}
            Some(_) => {
                return Err(Error::bad_envelope("specversion", "must be \"1.0\""));
            }
            None => return Err(Error::bad_envelope("specversion", "missing")),
        }
        let required = |object: &mut Map<String, Value>, name: &str| match object.remove(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s),
            Some(Value::String(_)) => Err(Error::bad_envelope(name, "empty")),
            Some(_) => Err(Error::bad_envelope(name, "must be a string")),
            None => Err(Error::bad_envelope(name, "missing")),
        };
        let id = required(&mut object, "id")?;
        let ty = required(&mut object, "type")?;
        let source = required(&mut object, "source")?;
        let optional = |object: &mut Map<String, Value>, name: &str| match object.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Error::bad_envelope(name, "must be a string")),
        };
        let subject = optional(&mut object, "subject")?;
        let datacontenttype = optional(&mut object, "datacontenttype")?;
        let dataschema = optional(&mut object, "dataschema")?;
        let time = optional(&mut object, "time")?;
        if datacontenttype
            .as_deref()
            .is_some_and(|ct| !is_json_content_type(ct))
        {
            return Err(Error::bad_envelope(
                "datacontenttype",
                "must name JSON (`application/json`, `text/json` or `…+json`): data must be JSON",
            ));
        }
        if object.contains_key("data_base64") {
            return Err(Error::bad_envelope(
                "data_base64",
                "data must be JSON, not base64",
            ));
        }
        let time = time.as_deref().map(parse_time).transpose()?;
        let dataschema = dataschema.as_deref().map(parse_dataschema).transpose()?;
        let data = object.remove("data");
        let mut extensions = BTreeMap::new();
        for (name, value) in object {
            if !is_attribute_name(&name) {
                return Err(Error::bad_envelope(
                    name.as_str(),
                    "not a CloudEvents extension name (a-z, 0-9)",
                ));
            }
            if value.is_null() {
                continue;
            }
            let value = ExtensionValue::from_json(&name, value)?;
            extensions.insert(name, value);
        }
        Ok(Self {
            id,
            ty,
            source,
            datacontenttype,
            dataschema,
            subject,
            time,
            extensions,
            data,
        })
    }

    /// The event in its CloudEvents JSON form, taken apart: `data` moves into the value.
    pub fn into_json(self) -> Value {
        let mut object = Map::new();
        object.insert("specversion".to_owned(), Value::from(SPEC_VERSION));
        object.insert("id".to_owned(), Value::String(self.id));
        object.insert("type".to_owned(), Value::String(self.ty));
        object.insert("source".to_owned(), Value::String(self.source));
        let optional = [
            ("datacontenttype", self.datacontenttype),
            ("dataschema", self.dataschema),
            ("subject", self.subject),
            ("time", self.time.as_ref().map(format_time)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                object.insert(name.to_owned(), Value::String(value));
            }
        }
        for (name, value) in self.extensions {
            object.insert(name, value.into_json());
        }
        if let Some(data) = self.data {
            object.insert("data".to_owned(), data);
        }
        Value::Object(object)
    }

    /// A copy of the event in its CloudEvents JSON form.
    pub fn to_json(&self) -> Value {
        self.clone().into_json()
    }

    /// Runs `f` on the event's JSON form and takes the event back from what `f` left: how the stages
    /// that work on JSON (validation, scrubbing) change an event in place. `data` moves, never copies.
    /// Fails when `f` left something that is no longer a CloudEvent (a scrubbed attribute).
    pub fn with_json<R>(self, f: impl FnOnce(&mut Value) -> R) -> Result<(Self, R)> {
        let mut json = self.into_json();
        let out = f(&mut json);
        Ok((Self::from_json(json)?, out))
    }

    /// Appends the event's RFC 8785 bytes to `out`, written straight from the fields: members sorted
    /// by UTF-16 code units (attribute and extension names are ASCII, so bytes order them), times and
    /// strings as [`jcs`] writes them.
    pub fn write_canonical(&self, out: &mut Vec<u8>) -> std::result::Result<(), JsonError> {
        enum Member<'a> {
            Text(&'a str),
            Owned(String),
            Extension(&'a ExtensionValue),
            Data(&'a Value),
        }
        let time = self.time.as_ref().map(format_time);
        let mut members: Vec<(&str, Member<'_>)> = Vec::with_capacity(9 + self.extensions.len());
        members.push(("specversion", Member::Text(SPEC_VERSION)));
        members.push(("id", Member::Text(&self.id)));
        members.push(("type", Member::Text(&self.ty)));
        members.push(("source", Member::Text(&self.source)));
        if let Some(v) = &self.datacontenttype {
            members.push(("datacontenttype", Member::Text(v)));
        }
        if let Some(v) = &self.dataschema {
            members.push(("dataschema", Member::Text(v)));
        }
        if let Some(v) = &self.subject {
            members.push(("subject", Member::Text(v)));
        }
        if let Some(v) = time {
            members.push(("time", Member::Owned(v)));
        }
        for (name, value) in &self.extensions {
            members.push((name, Member::Extension(value)));
        }
        if let Some(data) = &self.data {
            members.push(("data", Member::Data(data)));
        }
        members.sort_by(|(a, _), (b, _)| jcs::key_order(a, b));
        out.push(b'{');
        for (index, (name, member)) in members.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            jcs::write_string(out, name);
            out.push(b':');
            match member {
                Member::Text(text) => jcs::write_string(out, text),
                Member::Owned(text) => jcs::write_string(out, text),
                Member::Extension(ExtensionValue::String(text)) => jcs::write_string(out, text),
                Member::Extension(ExtensionValue::Boolean(b)) => {
                    out.extend_from_slice(if *b { b"true" } else { b"false" });
                }
                Member::Extension(ExtensionValue::Integer(i)) => {
                    jcs::write_into(out, &Value::from(*i)).map_err(|e| e.under(&format!("/{name}")))?;
                }
                Member::Data(data) => jcs::write_into(out, data).map_err(|e| e.under("/data"))?,
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// The event's RFC 8785 bytes.
    pub fn canonical_bytes(&self) -> std::result::Result<Vec<u8>, JsonError> {
        let mut out = Vec::with_capacity(256);
        self.write_canonical(&mut out)?;
        Ok(out)
    }
}
