//! Validation of events against the project's JSON Schemas (`schemas/` at the repository root).
//!
//! The schemas are compiled into the binary with `include_str!` and resolved from memory, so
//! validation never touches the network or the file system:
//!
//! ```text
//! structured CloudEvent ─▶ envelope + `type` ─▶ events/<class>.schema.json
//!                                                 ├─ $ref cloudevent.schema.json   (attributes, extensions)
//!                                                 └─ $ref objects|ledger/<kind>    (data)
//! ```
//!
//! Every violation is reported, each with the JSON Pointer of the offending value and a reason; a `type`
//! that names no class is a distinct outcome ([`EventError::UnknownClass`]). [`validate_stream`] reads
//! one JSON document, a JSON array of them, or NDJSON, and reports per document, for `toolledger validate`.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::sync::{Arc, OnceLock};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Retrieve, Uri, ValidationError, Validator};
use serde::Serialize;
use serde_json::Value;

use crate::class::{EventClass, UnknownClass};
use crate::contract::{DataObject, contract};

/// Where the project's schemas live; every `$id` is under it.
pub const SCHEMA_BASE: &str = "https://toolledger.dev/schemas/v1/";

macro_rules! embedded {
    ($($path:literal),* $(,)?) => {
        /// Every schema file under `schemas/`, by path relative to [`SCHEMA_BASE`], with its text.
        pub const SCHEMA_FILES: &[(&str, &str)] = &[
            $(($path, include_str!(concat!("../", $path))),)*
        ];
    };
}

embedded! {
    "cloudevent.schema.json",
    "objects/tool-declaration.schema.json",
    "objects/tool-interface.schema.json",
    "objects/tool-surface.schema.json",
    "objects/invocation.schema.json",
    "objects/permission-profile.schema.json",
    "objects/permission-decision.schema.json",
    "objects/input-mutation.schema.json",
    "objects/hook.schema.json",
    "objects/scheduler-policy.schema.json",
    "objects/deferred-tool.schema.json",
    "objects/result.schema.json",
    "objects/result-persistence.schema.json",
    "objects/progress.schema.json",
    "objects/execution-profile.schema.json",
    "objects/agenttool-event.schema.json",
    "ledger/permission-request.schema.json",
    "ledger/access-read.schema.json",
    "ledger/quarantine-recorded.schema.json",
    "ledger/erasure-completed.schema.json",
    "ledger/partitions-recorded.schema.json",
    "ledger/payload-ref.schema.json",
    "ledger/upload-ref.schema.json",
    "ledger/scrubbed.schema.json",
    "events/tool.declared.schema.json",
    "events/tool.surface.created.schema.json",
    "events/tool.surface.updated.schema.json",
    "events/tool.deferred.discovered.schema.json",
    "events/tool.deferred.loaded.schema.json",
    "events/tool.invocation.planned.schema.json",
    "events/tool.invocation.selected.schema.json",
    "events/tool.invocation.arguments_ready.schema.json",
    "events/tool.invocation.validation_failed.schema.json",
    "events/tool.hook.pre.started.schema.json",
    "events/tool.hook.pre.completed.schema.json",
    "events/tool.permission.requested.schema.json",
    "events/tool.permission.decided.schema.json",
    "events/tool.invocation.queued.schema.json",
    "events/tool.invocation.started.schema.json",
    "events/tool.invocation.progress.schema.json",
    "events/tool.invocation.partial_result.schema.json",
    "events/tool.hook.post.started.schema.json",
    "events/tool.hook.post.completed.schema.json",
    "events/tool.result.persisted.schema.json",
    "events/tool.invocation.yielded.schema.json",
    "events/tool.invocation.succeeded.schema.json",
    "events/tool.invocation.failed.schema.json",
    "events/tool.invocation.canceled.schema.json",
    "events/tool.invocation.timed_out.schema.json",
    "events/tool.result.created.schema.json",
    "events/tool.result.redacted.schema.json",
    "events/toolledger.access.read.schema.json",
    "events/toolledger.quarantine.recorded.schema.json",
    "events/toolledger.erasure.completed.schema.json",
    "events/toolledger.partitions.recorded.schema.json",
}

/// The ledger's in-event reference shapes: not event data, but values ingest writes (`$payload`,
/// `$scrubbed`) or reads (`$upload`) inside an event's `data`.
pub const REFERENCE_SCHEMAS: &[&str] = &[
    "ledger/payload-ref.schema.json",
    "ledger/upload-ref.schema.json",
    "ledger/scrubbed.schema.json",
];

macro_rules! object_kinds {
    ($($variant:ident => $file:literal, $official:expr, $doc:literal;)*) => {
        /// A kind of object an event carries as `data`: the spec's objects and the ledger's own shapes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[non_exhaustive]
        pub enum ObjectKind {
            $(#[doc = $doc] $variant,)*
        }

        impl ObjectKind {
            /// Every kind: the spec's fifteen, then the ledger's own five.
            pub const ALL: &'static [ObjectKind] = &[$(ObjectKind::$variant,)*];

            /// The project's schema file, relative to [`SCHEMA_BASE`].
            pub const fn schema_path(self) -> &'static str {
                match self { $(ObjectKind::$variant => $file,)* }
            }

            /// The official Agent Tool schema's file name, `None` for the ledger's own shapes.
            pub const fn official_file(self) -> Option<&'static str> {
                match self { $(ObjectKind::$variant => $official,)* }
            }
        }
    };
}

object_kinds! {
    ToolDeclaration => "objects/tool-declaration.schema.json", Some("agenttool-tool-declaration.schema.json"), "A tool declaration.";
    ToolInterface => "objects/tool-interface.schema.json", Some("agenttool-tool-interface.schema.json"), "A tool interface.";
    ToolSurface => "objects/tool-surface.schema.json", Some("agenttool-tool-surface.schema.json"), "A tool surface.";
    Invocation => "objects/invocation.schema.json", Some("agenttool-invocation.schema.json"), "A tool invocation snapshot.";
    PermissionProfile => "objects/permission-profile.schema.json", Some("agenttool-permission-profile.schema.json"), "A permission profile.";
    PermissionDecision => "objects/permission-decision.schema.json", Some("agenttool-permission-decision.schema.json"), "A permission decision.";
    InputMutation => "objects/input-mutation.schema.json", Some("agenttool-input-mutation.schema.json"), "An input mutation.";
    Hook => "objects/hook.schema.json", Some("agenttool-hook.schema.json"), "A hook run.";
    SchedulerPolicy => "objects/scheduler-policy.schema.json", Some("agenttool-scheduler-policy.schema.json"), "A scheduler policy.";
    DeferredTool => "objects/deferred-tool.schema.json", Some("agenttool-deferred-tool.schema.json"), "A deferred tool reference.";
    ToolResult => "objects/result.schema.json", Some("agenttool-result.schema.json"), "A tool result envelope.";
    ResultPersistence => "objects/result-persistence.schema.json", Some("agenttool-result-persistence.schema.json"), "A result persistence decision.";
    Progress => "objects/progress.schema.json", Some("agenttool-progress.schema.json"), "A progress update.";
    ExecutionProfile => "objects/execution-profile.schema.json", Some("agenttool-execution-profile.schema.json"), "An execution profile.";
    AgentToolEvent => "objects/agenttool-event.schema.json", Some("agenttool-event.schema.json"), "The spec's own event envelope (`agenttool-event`).";
    PermissionRequest => "ledger/permission-request.schema.json", None, "The ledger's permission request (`tool.permission.requested`).";
    AccessRead => "ledger/access-read.schema.json", None, "The ledger's access record (`toolledger.access.read`).";
    QuarantineRecorded => "ledger/quarantine-recorded.schema.json", None, "The ledger's quarantine receipt (`toolledger.quarantine.recorded`).";
    ErasureCompleted => "ledger/erasure-completed.schema.json", None, "The ledger's erasure record (`toolledger.erasure.completed`).";
    PartitionsRecorded => "ledger/partitions-recorded.schema.json", None, "The ledger's partition rule (`toolledger.partitions.recorded`).";
}

impl ObjectKind {
    /// The object a class carries as `data`, from the contract table ([`crate::contract`]).
    pub fn for_class(class: EventClass) -> ObjectKind {
        contract(class).data.into()
    }

    /// The schema's `$id`.
    pub fn schema_id(self) -> String {
        format!("{SCHEMA_BASE}{}", self.schema_path())
    }
}

impl From<DataObject> for ObjectKind {
    fn from(object: DataObject) -> ObjectKind {
        match object {
            DataObject::ToolDeclaration => ObjectKind::ToolDeclaration,
            DataObject::ToolSurface => ObjectKind::ToolSurface,
            DataObject::DeferredTool => ObjectKind::DeferredTool,
            DataObject::Invocation => ObjectKind::Invocation,
            DataObject::Hook => ObjectKind::Hook,
            DataObject::PermissionRequest => ObjectKind::PermissionRequest,
            DataObject::PermissionDecision => ObjectKind::PermissionDecision,
            DataObject::Progress => ObjectKind::Progress,
            DataObject::Result => ObjectKind::ToolResult,
            DataObject::ResultPersistence => ObjectKind::ResultPersistence,
            DataObject::AccessRead => ObjectKind::AccessRead,
            DataObject::QuarantineRecorded => ObjectKind::QuarantineRecorded,
            DataObject::ErasureCompleted => ObjectKind::ErasureCompleted,
            DataObject::PartitionsRecorded => ObjectKind::PartitionsRecorded,
        }
    }
}

/// The project's schema file for a class, relative to [`SCHEMA_BASE`].
pub fn class_schema_path(class: EventClass) -> String {
    format!("events/{}.schema.json", class.as_str())
}

/// One reason a document is invalid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// JSON Pointer (RFC 6901) of the offending value in the document; for a missing required
    /// property, where that property should be (e.g. `/data/tool_id`); for a badly named attribute,
    /// the attribute.
    pub pointer: String,
    /// The JSON Schema keyword that failed (`required`, `type`, `enum`, `const`, `pattern`, …), or
    /// `contract` when an attribute disagrees with the data field it repeats (e.g. `subject`).
    pub keyword: String,
    /// What is wrong, for a producer to act on.
    pub reason: String,
    /// Where in the project's schemas the rule lives (keyword location).
    pub schema_path: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The empty pointer is the whole document ("/" would name the key "").
        let pointer = if self.pointer.is_empty() {
            "(document)"
        } else {
            &self.pointer
        };
        write!(f, "{pointer}: {}", self.reason)
    }
}

/// Why an event is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event's `type` names no known class (quarantined as `unknown_class`).
    #[error(transparent)]
    UnknownClass(#[from] UnknownClass),
    /// The event breaks its class's schema; every violation is listed.
    #[error("{} schema violation(s): {}", .violations.len(), join(.violations))]
    SchemaViolation {
        /// The class, when `type` named one.
        class: Option<EventClass>,
        /// Every violation found.
        violations: Vec<Violation>,
    },
}

/// A bare object breaks its kind's schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {} schema violation(s): {}", .violations.len(), join(.violations))]
pub struct ObjectError {
    /// The kind validated against.
    pub kind: ObjectKind,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

fn join(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A project schema that does not load; only possible if `schemas/` itself is broken.
#[derive(Debug, Clone, thiserror::Error)]
#[error("schema {path} does not load: {reason}")]
pub struct SchemaLoadError {
    /// The file, relative to [`SCHEMA_BASE`].
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Resolves `$ref`s among the embedded schemas; anything else is refused (validation stays offline).
struct EmbeddedRetriever {
    by_uri: Arc<HashMap<String, Value>>,
}

impl Retrieve for EmbeddedRetriever {
    fn retrieve(&self, uri: &Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        self.by_uri
            .get(uri.as_str())
            .cloned()
            .ok_or_else(|| format!("{uri} is not one of toolledger's embedded schemas").into())
    }
}

/// The project's schemas, compiled: one validator per class and per object kind.
pub struct SchemaSet {
    envelope: Validator,
    classes: HashMap<EventClass, Validator>,
    objects: HashMap<ObjectKind, Validator>,
}

impl fmt::Debug for SchemaSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaSet")
            .field("classes", &self.classes.len())
            .field("objects", &self.objects.len())
            .finish()
    }
}

impl SchemaSet {
    /// Compiles every embedded schema.
    pub fn load() -> Result<SchemaSet, SchemaLoadError> {
        let mut by_uri = HashMap::new();
        for (path, text) in SCHEMA_FILES {
            let value: Value = serde_json::from_str(text).map_err(|e| SchemaLoadError {
                path: (*path).to_owned(),
                reason: e.to_string(),
            })?;
            by_uri.insert(format!("{SCHEMA_BASE}{path}"), value);
        }
        let by_uri = Arc::new(by_uri);
        let compile = |path: &str| -> Result<Validator, SchemaLoadError> {
            let err = |reason: String| SchemaLoadError {
                path: path.to_owned(),
                reason,
            };
            let schema = by_uri
                .get(&format!("{SCHEMA_BASE}{path}"))
                .ok_or_else(|| err("not embedded".to_owned()))?;
            jsonschema::options()
                .should_validate_formats(true)
                .with_retriever(EmbeddedRetriever {
                    by_uri: Arc::clone(&by_uri),
                })
                .build(schema)
                .map_err(|e| err(e.to_string()))
        };
        let envelope = compile("cloudevent.schema.json")?;
        let mut classes = HashMap::new();
        for class in EventClass::ALL {
            classes.insert(*class, compile(&class_schema_path(*class))?);
        }
        let mut objects = HashMap::new();
        for kind in ObjectKind::ALL {
            objects.insert(*kind, compile(kind.schema_path())?);
        }
        Ok(SchemaSet {
            envelope,
            classes,
            objects,
        })
    }

    /// The process-wide set, compiled on first use.
    pub fn global() -> &'static SchemaSet {
        static SET: OnceLock<SchemaSet> = OnceLock::new();
        // The schemas are compiled into the binary and a unit test loads them, so this cannot fail
        // at run time unless the build itself is broken.
        SET.get_or_init(|| SchemaSet::load().expect("embedded schemas compile"))
    }

    /// Validates a structured CloudEvent (envelope and its class's data); returns its class.
    pub fn validate_event(&self, event: &Value) -> Result<EventClass, EventError> {
        let class = match event.get("type").and_then(Value::as_str) {
            Some(name) => name.parse::<EventClass>()?,
            None => {
                return Err(EventError::SchemaViolation {
                    class: None,
                    violations: collect(&self.envelope, event),
                });
            }
        };
        let validator = match self.classes.get(&class) {
            Some(v) => v,
            None => return Err(UnknownClass(class.as_str().to_owned()).into()),
        };
        let mut violations = collect(validator, event);
        contract_violations(class, event, &mut violations);
        if violations.is_empty() {
            Ok(class)
        } else {
            Err(EventError::SchemaViolation {
                class: Some(class),
                violations,
            })
        }
    }

    /// Validates either form a producer may publish (DESIGN.md §3): a structured CloudEvent, or the
    /// spec's own `agenttool-event` envelope as a plain JSON body (recognized by `event_type` without
    /// `specversion`).
    pub fn validate_document(&self, document: &Value) -> Result<EventClass, EventError> {
        if document.get("specversion").is_none() && document.get("event_type").is_some() {
            self.validate_agenttool_event(document)
        } else {
            self.validate_event(document)
        }
    }

    /// Validates an `agenttool-event` envelope and its `data` against the object its `event_type`
    /// carries; pointers into the data start with `/data`.
    pub fn validate_agenttool_event(&self, document: &Value) -> Result<EventClass, EventError> {
        let mut violations = self
            .objects
            .get(&ObjectKind::AgentToolEvent)
            .map(|v| collect(v, document))
            .unwrap_or_default();
        let class = match document.get("event_type").and_then(Value::as_str) {
            Some(name) => name.parse::<EventClass>()?,
            None => {
                return Err(EventError::SchemaViolation {
                    class: None,
                    violations,
                });
            }
        };
        let kind = ObjectKind::for_class(class);
        match document.get("data") {
            Some(data) => {
                if let Some(validator) = self.objects.get(&kind) {
                    violations.extend(collect(validator, data).into_iter().map(|mut v| {
                        v.pointer = format!("/data{}", v.pointer);
                        v
                    }));
                }
                let subject = contract(class).subject;
                let pairs = [
                    ("subject", subject.field(), subject.read(data)),
                    ("invocation_id", "invocation_id", str_at(data, "invocation_id")),
                    ("tool_id", "tool_id", str_at(data, "tool_id")),
                ];
                mismatches(document, &pairs, &mut violations);
            }
            None => violations.push(Violation {
                pointer: "/data".to_owned(),
                keyword: "required".to_owned(),
                reason: format!("missing required property `data` ({class} carries {kind:?})"),
                schema_path: String::new(),
            }),
        }
        if violations.is_empty() {
            Ok(class)
        } else {
            Err(EventError::SchemaViolation {
                class: Some(class),
                violations,
            })
        }
    }

    /// Validates a bare object against its kind's schema.
    pub fn validate_object(&self, kind: ObjectKind, value: &Value) -> Result<(), ObjectError> {
        let violations = self
            .objects
            .get(&kind)
            .map(|v| collect(v, value))
            .unwrap_or_default();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ObjectError { kind, violations })
        }
    }
}

/// What JSON Schema cannot say: attributes that must repeat a field of `data` (DESIGN.md §3) must
/// equal it when both are present. Keyword `contract`.
fn contract_violations(class: EventClass, event: &Value, out: &mut Vec<Violation>) {
    let data = &event["data"];
    let subject = contract(class).subject;
    let pairs = [
        ("subject", subject.field(), subject.read(data)),
        ("invocationid", "invocation_id", str_at(data, "invocation_id")),
        ("toolid", "tool_id", str_at(data, "tool_id")),
    ];
    mismatches(event, &pairs, out);
}

fn str_at<'v>(value: &'v Value, field: &str) -> Option<&'v str> {
    value.get(field).and_then(Value::as_str)
}

/// One `contract` violation per attribute whose value differs from the data field it repeats.
fn mismatches(document: &Value, pairs: &[(&str, &str, Option<&str>)], out: &mut Vec<Violation>) {
    for (attribute, field, expected) in pairs {
        if let (Some(actual), Some(expected)) = (str_at(document, attribute), expected)
            && actual != *expected
        {
            out.push(Violation {
                pointer: format!("/{attribute}"),
                keyword: "contract".to_owned(),
                reason: format!("`{attribute}` is `{actual}` but data.{field} is `{expected}`"),
                schema_path: String::new(),
            });
        }
    }
}

fn collect(validator: &Validator, instance: &Value) -> Vec<Violation> {
    // Nearly every instance is valid: `is_valid` stops at nothing and builds no errors, about half
    // the cost of walking `iter_errors` to its empty end.
    if validator.is_valid(instance) {
        return Vec::new();
    }
    let mut out: Vec<Violation> = validator.iter_errors(instance).map(violation).collect();
    out.sort_by(|a, b| (&a.pointer, &a.keyword).cmp(&(&b.pointer, &b.keyword)));
    out.dedup();
    out
}

fn violation(error: ValidationError<'_>) -> Violation {
    let mut pointer = error.instance_path().as_str().to_owned();
    let reason = match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            pointer.push('/');
            pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
            format!("missing required property `{name}`")
        }
        ValidationErrorKind::PropertyNames { error } => {
            // Point at the offending attribute itself, not at the object holding it.
            let name = error.instance().as_str().unwrap_or_default().to_owned();
            pointer.push('/');
            pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
            format!("attribute name is not allowed: {}", rule(error.kind()))
        }
        kind => rule(kind),
    };
    Violation {
        pointer,
        keyword: error.kind().keyword().to_owned(),
        reason: shorten(reason),
        schema_path: error.schema_path().as_str().to_owned(),
    }
}

/// The rule a value broke, in the schema's terms only. Never the value itself: reasons go into
/// quarantine receipts, which the immutable ledger keeps, and a rejected value may be a secret.
fn rule(kind: &ValidationErrorKind) -> String {
    use ValidationErrorKind as K;
    match kind {
        K::Type { kind } => {
            let types: Vec<String> = match kind {
                jsonschema::error::TypeKind::Single(one) => vec![one.to_string()],
                jsonschema::error::TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect(),
            };
            format!("is not of type {}", types.join(" or "))
        }
        K::Enum { .. } => "is not one of the values the schema allows".to_owned(),
        K::Constant { .. } => "is not the value the schema requires".to_owned(),
        K::MinLength { limit } => format!("is shorter than {limit} characters"),
        K::MaxLength { limit } => format!("is longer than {limit} characters"),
        K::Pattern { pattern } => format!("does not match the pattern `{pattern}`"),
        K::Format { format } => format!("is not a valid `{format}`"),
        K::Minimum { limit } => format!("is less than {limit}"),
        K::Maximum { limit } => format!("is greater than {limit}"),
        K::ExclusiveMinimum { limit } => format!("is not greater than {limit}"),
        K::ExclusiveMaximum { limit } => format!("is not less than {limit}"),
        K::MinItems { limit } => format!("has fewer than {limit} items"),
        K::MaxItems { limit } => format!("has more than {limit} items"),
        K::MinProperties { limit } => format!("has fewer than {limit} properties"),
        K::MaxProperties { limit } => format!("has more than {limit} properties"),
        K::UniqueItems => "has repeated items".to_owned(),
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            // Property names, like the pointer, are the document's structure, not its values.
            format!(
                "has properties the schema does not allow: {}",
                unexpected.join(", ")
            )
        }
        K::OneOfNotValid { .. } => "matches none of the schema's alternatives".to_owned(),
        K::OneOfMultipleValid { .. } => "matches more than one of the schema's alternatives".to_owned(),
        K::AnyOf { .. } => "matches none of the schema's alternatives".to_owned(),
        K::Not { .. } => "matches a shape the schema forbids".to_owned(),
        K::FalseSchema => "is not allowed here".to_owned(),
        other => format!("fails the schema's `{}` rule", other.keyword()),
    }
}

/// Longest reason kept.
const MAX_REASON: usize = 400;

fn shorten(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push_str(" …");
    }
    reason
}

/// Validates a structured CloudEvent with the process-wide [`SchemaSet`]; returns its class.
pub fn validate_event(event: &Value) -> Result<EventClass, EventError> {
    SchemaSet::global().validate_event(event)
}

/// Validates a structured CloudEvent or a plain `agenttool-event` body with the process-wide
/// [`SchemaSet`]; returns its class.
pub fn validate_document(document: &Value) -> Result<EventClass, EventError> {
    SchemaSet::global().validate_document(document)
}

/// Validates a bare object by kind with the process-wide [`SchemaSet`].
pub fn validate_object(kind: ObjectKind, value: &Value) -> Result<(), ObjectError> {
    SchemaSet::global().validate_object(kind, value)
}

/// Where a document sits in a validated stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentAt {
    /// The input was one JSON document.
    Whole,
    /// Element of a top-level JSON array (0-based).
    Index(usize),
    /// Line of NDJSON input (1-based).
    Line(usize),
}

impl fmt::Display for DocumentAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocumentAt::Whole => f.write_str("document"),
            DocumentAt::Index(i) => write!(f, "[{i}]"),
            DocumentAt::Line(n) => write!(f, "line {n}"),
        }
    }
}

/// What validation found for one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Valid under its class's schema.
    Valid {
        /// The class.
        class: String,
    },
    /// Not valid; every violation.
    Invalid {
        /// The class, when `type` named one.
        class: Option<String>,
        /// Every violation.
        violations: Vec<Violation>,
    },
    /// `type` names no known class.
    UnknownClass {
        /// The `type` given.
        class: String,
    },
    /// Not JSON.
    Unparseable {
        /// The parser's reason.
        reason: String,
    },
    /// Refused by a rule of the ledger's own that ingest applies before any schema (an id outside
    /// the id grammar: `bad_id`), as the caller of [`validate_stream_with`] judged it.
    Refused {
        /// The quarantine reason ingest files it under (`bad_id`).
        reason: String,
        /// What ingest's receipt says: where and which rule, never the value.
        detail: String,
    },
}

/// One document's result in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocumentReport {
    /// Where it is in the input.
    pub at: DocumentAt,
    /// The event's `id`, when it has a string one.
    pub id: Option<String>,
    /// What was found.
    pub outcome: Outcome,
}

impl DocumentReport {
    /// Whether the document is valid.
    pub fn is_valid(&self) -> bool {
        matches!(self.outcome, Outcome::Valid { .. })
    }
}

/// The result of validating a stream of events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// One entry per document, in input order.
    pub documents: Vec<DocumentReport>,
}

impl Report {
    /// Whether every document is valid (an empty input is valid).
    pub fn is_ok(&self) -> bool {
        self.documents.iter().all(DocumentReport::is_valid)
    }

    /// How many documents are valid.
    pub fn valid(&self) -> usize {
        self.documents.iter().filter(|d| d.is_valid()).count()
    }

    /// How many documents are not.
    pub fn invalid(&self) -> usize {
        self.documents.len() - self.valid()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for doc in &self.documents {
            let id = doc.id.as_deref().unwrap_or("-");
            match &doc.outcome {
                Outcome::Valid { class } => writeln!(f, "{} id={id}: ok ({class})", doc.at)?,
                Outcome::Invalid { class, violations } => {
                    let class = class.as_deref().unwrap_or("?");
                    writeln!(f, "{} id={id}: invalid ({class})", doc.at)?;
                    for v in violations {
                        writeln!(f, "  {v}")?;
                    }
                }
                Outcome::UnknownClass { class } => {
                    writeln!(f, "{} id={id}: unknown event class `{class}`", doc.at)?
                }
                Outcome::Unparseable { reason } => writeln!(f, "{} id={id}: not JSON: {reason}", doc.at)?,
                Outcome::Refused { reason, detail } => {
                    writeln!(f, "{} id={id}: refused ({reason}): {detail}", doc.at)?
                }
            }
        }
        writeln!(
            f,
            "{} document(s): {} valid, {} invalid",
            self.documents.len(),
            self.valid(),
            self.invalid()
        )
    }
}

/// Validates a stream of events — structured CloudEvents or plain `agenttool-event` bodies — given as
/// one JSON document, a JSON array of documents, or NDJSON (one document per line, blank lines skipped). Every document is reported with every
/// violation. Only a failure to read is an error; bad documents are entries in the report.
pub fn validate_stream(reader: impl Read) -> std::io::Result<Report> {
    validate_stream_with(reader, |_| None)
}

/// [`validate_stream`], with `refuse` asked first of every parsed document: an outcome it returns
/// (an [`Outcome::Refused`]) stands for the document instead of its schema check, as a rule that
/// ingest applies while decoding stands before its schema check. How `toolledger validate` reports
/// the id grammar, which lives with the wire formats above this crate.
pub fn validate_stream_with(
    mut reader: impl Read,
    refuse: impl Fn(&Value) -> Option<Outcome>,
) -> std::io::Result<Report> {
    // A refused document's id is not repeated: it may be the id refused (a control character
    // would act on the terminal), as ingest's receipt of a `bad_id` carries none either.
    let judge = |set: &SchemaSet, at: DocumentAt, value: &Value| match refuse(value) {
        Some(outcome) => DocumentReport {
            at,
            id: None,
            outcome,
        },
        None => check(set, at, value),
    };
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    let set = SchemaSet::global();
    let mut report = Report::default();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                report.documents.push(judge(set, DocumentAt::Index(i), item));
            }
        }
        Ok(value) => report.documents.push(judge(set, DocumentAt::Whole, &value)),
        Err(whole) => {
            let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
            let non_blank = lines
                .iter()
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .count();
            if non_blank == 0 {
                return Ok(report);
            }
            if non_blank == 1 {
                // A single (possibly broken) document: the whole-input error is the useful one.
                report.documents.push(DocumentReport {
                    at: DocumentAt::Whole,
                    id: None,
                    outcome: Outcome::Unparseable {
                        reason: whole.to_string(),
                    },
                });
                return Ok(report);
            }
            for (n, line) in lines.iter().enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let at = DocumentAt::Line(n + 1);
                match serde_json::from_slice::<Value>(line) {
                    Ok(value) => report.documents.push(judge(set, at, &value)),
                    Err(e) => report.documents.push(DocumentReport {
                        at,
                        id: None,
                        outcome: Outcome::Unparseable {
                            reason: e.to_string(),
                        },
                    }),
                }
            }
        }
    }
    Ok(report)
}

fn check(set: &SchemaSet, at: DocumentAt, value: &Value) -> DocumentReport {
    let id = value.get("id").and_then(Value::as_str).map(str::to_owned);
    let outcome = match set.validate_document(value) {
        Ok(class) => Outcome::Valid {
            class: class.as_str().to_owned(),
        },
        Err(EventError::UnknownClass(UnknownClass(class))) => Outcome::UnknownClass { class },
        Err(EventError::SchemaViolation { class, violations }) => Outcome::Invalid {
            class: class.map(|c| c.as_str().to_owned()),
            violations,
        },
    };
    DocumentReport { at, id, outcome }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_embedded_schema_compiles_and_every_class_has_one() {
        let set = SchemaSet::load().expect("schemas load");
        assert_eq!(set.classes.len(), EventClass::ALL.len());
        assert_eq!(set.objects.len(), ObjectKind::ALL.len());
        let files: Vec<&str> = SCHEMA_FILES.iter().map(|(p, _)| *p).collect();
        for class in EventClass::ALL {
            assert!(files.contains(&class_schema_path(*class).as_str()), "{class}");
        }
        assert_eq!(
            files.len(),
            1 + EventClass::ALL.len() + ObjectKind::ALL.len() + REFERENCE_SCHEMAS.len(),
            "no stray schema files"
        );
        for path in REFERENCE_SCHEMAS {
            let (_, text) = SCHEMA_FILES.iter().find(|(p, _)| p == path).expect("embedded");
            let schema: Value = serde_json::from_str(text).expect("json");
            let validator = jsonschema::validator_for(&schema).expect("compiles");
            for example in schema["examples"].as_array().into_iter().flatten() {
                assert!(validator.is_valid(example), "{path}: {example}");
            }
        }
    }

    #[test]
    fn class_schemas_follow_the_contract_table() {
        for class in EventClass::ALL {
            let path = class_schema_path(*class);
            let text = SCHEMA_FILES
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, t)| *t)
                .expect("class schema");
            let v: Value = serde_json::from_str(text).expect("json");
            assert_eq!(v["properties"]["type"]["const"], json!(class.as_str()));
            let kind = ObjectKind::for_class(*class);
            assert_eq!(
                v["properties"]["data"]["$ref"],
                json!(format!("../{}", kind.schema_path())),
                "{class}"
            );
            // The contract's name for the object is the schema file's stem.
            let stem = format!("/{}.schema.json", contract(*class).data.name());
            assert!(kind.schema_path().ends_with(&stem), "{class}: {stem}");
        }
    }

    #[test]
    fn ids_match_paths() {
        for (path, text) in SCHEMA_FILES {
            let v: Value = serde_json::from_str(text).expect("json");
            assert_eq!(v["$id"], json!(format!("{SCHEMA_BASE}{path}")), "{path}");
        }
    }

    #[test]
    fn attributes_must_repeat_data_fields() {
        let e = json!({"specversion": "1.0", "id": "1", "source": "s", "type": "tool.invocation.planned",
            "tenant": "t", "subject": "inv_2", "invocationid": "inv_3", "toolid": "fs.read",
            "data": {"schema_version": "0.2.0", "invocation_id": "inv_1", "tool_id": "fs.read",
                "status": "planned", "created_at": "c"}});
        let Err(EventError::SchemaViolation { violations, .. }) = validate_event(&e) else {
            panic!("mismatch accepted");
        };
        let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(pointers, ["/subject", "/invocationid"]);
        assert!(violations.iter().all(|v| v.keyword == "contract"));
    }

    #[test]
    fn agenttool_event_bodies_are_validated_with_their_data() {
        let good = json!({"schema_version": "0.2.0", "event_id": "e1", "event_type": "tool.invocation.started",
            "source": "urn:rt", "time": "2026-05-08T00:00:00Z", "invocation_id": "inv_1", "tool_id": "t",
            "data": {"schema_version": "0.2.0", "invocation_id": "inv_1", "tool_id": "t", "status": "running",
                "created_at": "c"}});
        assert_eq!(validate_document(&good), Ok(EventClass::InvocationStarted));
        let mut bad = good.clone();
        bad["data"]["status"] = json!(7);
        bad["tool_id"] = json!("other");
        bad.as_object_mut().expect("object").remove("time");
        let Err(EventError::SchemaViolation { violations, .. }) = validate_document(&bad) else {
            panic!("bad body accepted");
        };
        let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(pointers, ["/time", "/data/status", "/tool_id"]);
        let mut unknown = good;
        unknown["event_type"] = json!("tool.exploded");
        assert!(matches!(
            validate_document(&unknown),
            Err(EventError::UnknownClass(_))
        ));
    }

    #[test]
    fn reasons_quoting_huge_values_are_shortened() {
        let e = json!({"specversion": "1.0", "id": "1", "source": "s", "type": "tool.result.created",
            "tenant": "t", "data": {"schema_version": "0.2.0", "result_id": "r", "invocation_id": "i",
                "status": "succeeded", "created_at": "c", "content": "é".repeat(40_000)}});
        let Err(EventError::SchemaViolation { violations, .. }) = validate_event(&e) else {
            panic!("string content accepted");
        };
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].pointer, "/data/content");
        assert!(violations[0].reason.len() <= MAX_REASON + 4);
    }

    #[test]
    fn unknown_class_is_distinct() {
        let e =
            json!({"specversion": "1.0", "id": "1", "source": "s", "type": "tool.exploded", "tenant": "t"});
        assert_eq!(
            validate_event(&e),
            Err(EventError::UnknownClass(UnknownClass("tool.exploded".into())))
        );
    }

    #[test]
    fn missing_type_is_an_envelope_violation() {
        let e = json!({"specversion": "1.0", "id": "1", "source": "s", "tenant": "t"});
        match validate_event(&e) {
            Err(EventError::SchemaViolation {
                class: None,
                violations,
            }) => {
                assert!(
                    violations
                        .iter()
                        .any(|v| v.pointer == "/type" && v.keyword == "required")
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn ndjson_array_and_single_document() {
        let good = json!({"specversion": "1.0", "id": "a", "source": "s", "type": "tool.declared",
            "tenant": "acme", "data": {"schema_version": "0.2.0", "tool_id": "t", "namespace": "n",
            "name": "n", "description": "d", "lifecycle": "available", "tool_kind": "function"}});
        let bad = json!({"specversion": "1.0", "id": "b", "source": "s", "type": "tool.declared",
            "tenant": "-bad", "data": {"tool_id": 3}});
        let ndjson = format!("{good}\n\n{bad}\nnot json\n");
        let report = validate_stream(ndjson.as_bytes()).expect("read");
        assert_eq!(report.documents.len(), 3);
        assert_eq!(report.documents[0].at, DocumentAt::Line(1));
        assert!(report.documents[0].is_valid());
        assert_eq!(report.documents[1].at, DocumentAt::Line(3));
        match &report.documents[1].outcome {
            Outcome::Invalid { violations, .. } => {
                let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
                for p in [
                    "/tenant",
                    "/data/tool_id",
                    "/data/lifecycle",
                    "/data/schema_version",
                ] {
                    assert!(pointers.contains(&p), "{p} in {pointers:?}");
                }
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(report.documents[2].outcome, Outcome::Unparseable { .. }));

        let array = json!([good, bad]).to_string();
        let report = validate_stream(array.as_bytes()).expect("read");
        assert_eq!(report.documents[1].at, DocumentAt::Index(1));
        assert_eq!((report.valid(), report.invalid()), (1, 1));

        let pretty = serde_json::to_string_pretty(&good).expect("json");
        let report = validate_stream(pretty.as_bytes()).expect("read");
        assert_eq!(report.documents.len(), 1);
        assert!(report.is_ok(), "{report}");
    }
}
