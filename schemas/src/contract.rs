//! The contract table of DESIGN.md §3: class → data object → subject → effect.
//!
//! [`contract`] is the table as an exhaustive `match`, so a new [`EventClass`] does not compile until
//! its row is written. [`Data::decode`] turns an event's `data` into the typed object its class names,
//! and [`Data::subject`] reads the field that must equal the CloudEvents `subject`.

use crate::class::EventClass;
use crate::model::{
    AccessRead, DeferredToolRef, ErasureCompleted, PartitionsRecorded, PermissionRequest, QuarantineRecorded,
    ToolDeclaration, ToolHook, ToolInvocation, ToolPermissionDecision, ToolProgress, ToolResult,
    ToolResultPersistence, ToolSurface, UnknownValue, UnknownValues,
};
use crate::state::InvocationState;
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// The kind of object an event's `data` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DataObject {
    /// `tool_declaration`.
    ToolDeclaration,
    /// `tool_surface`.
    ToolSurface,
    /// `deferred_tool_ref`.
    DeferredTool,
    /// `tool_invocation` (on validation_failed, failed and the like it may carry an `error`).
    Invocation,
    /// `tool_hook`.
    Hook,
    /// The ledger's own permission request ([`PermissionRequest`]).
    PermissionRequest,
    /// `tool_permission_decision`.
    PermissionDecision,
    /// `tool_progress`.
    Progress,
    /// `tool_result`.
    Result,
    /// `tool_result_persistence`.
    ResultPersistence,
    /// The ledger's own [`AccessRead`].
    AccessRead,
    /// The ledger's own [`QuarantineRecorded`].
    QuarantineRecorded,
    /// The ledger's own [`ErasureCompleted`].
    ErasureCompleted,
    /// The ledger's own [`PartitionsRecorded`].
    PartitionsRecorded,
}

impl DataObject {
    /// Every object kind an event can carry.
    pub const ALL: &'static [DataObject] = &[
        DataObject::ToolDeclaration,
        DataObject::ToolSurface,
        DataObject::DeferredTool,
        DataObject::Invocation,
        DataObject::Hook,
        DataObject::PermissionRequest,
        DataObject::PermissionDecision,
        DataObject::Progress,
        DataObject::Result,
        DataObject::ResultPersistence,
        DataObject::AccessRead,
        DataObject::QuarantineRecorded,
        DataObject::ErasureCompleted,
        DataObject::PartitionsRecorded,
    ];

    /// A short stable name, e.g. `invocation`, `permission-request`: the official schema's file stem
    /// without `agenttool-`, or the ledger shape's name.
    pub const fn name(self) -> &'static str {
        match self {
            DataObject::ToolDeclaration => "tool-declaration",
            DataObject::ToolSurface => "tool-surface",
            DataObject::DeferredTool => "deferred-tool",
            DataObject::Invocation => "invocation",
            DataObject::Hook => "hook",
            DataObject::PermissionRequest => "permission-request",
            DataObject::PermissionDecision => "permission-decision",
            DataObject::Progress => "progress",
            DataObject::Result => "result",
            DataObject::ResultPersistence => "result-persistence",
            DataObject::AccessRead => "access-read",
            DataObject::QuarantineRecorded => "quarantine-recorded",
            DataObject::ErasureCompleted => "erasure-completed",
            DataObject::PartitionsRecorded => "partitions-recorded",
        }
    }

    /// The official schema's file name in `agenttool-schemas/`, e.g. `agenttool-invocation.schema.json`;
    /// `None` for the ledger's own shapes, which the spec does not define.
    pub const fn official_schema(self) -> Option<&'static str> {
        match self {
            DataObject::ToolDeclaration => Some("agenttool-tool-declaration.schema.json"),
            DataObject::ToolSurface => Some("agenttool-tool-surface.schema.json"),
            DataObject::DeferredTool => Some("agenttool-deferred-tool.schema.json"),
            DataObject::Invocation => Some("agenttool-invocation.schema.json"),
            DataObject::Hook => Some("agenttool-hook.schema.json"),
            DataObject::PermissionDecision => Some("agenttool-permission-decision.schema.json"),
            DataObject::Progress => Some("agenttool-progress.schema.json"),
            DataObject::Result => Some("agenttool-result.schema.json"),
            DataObject::ResultPersistence => Some("agenttool-result-persistence.schema.json"),
            DataObject::PermissionRequest
            | DataObject::AccessRead
            | DataObject::QuarantineRecorded
            | DataObject::ErasureCompleted
            | DataObject::PartitionsRecorded => None,
        }
    }

    /// Whether the ledger defines this shape (no official schema).
    pub const fn is_ledger_shape(self) -> bool {
        self.official_schema().is_none()
    }
}

impl fmt::Display for DataObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `data` field whose value is the CloudEvents `subject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubjectField {
    /// `data.tool_id`.
    ToolId,
    /// `data.surface_id`.
    SurfaceId,
    /// `data.invocation_id`.
    InvocationId,
    /// `data.access_id` (the ledger's access records).
    AccessId,
    /// `data.receipt_id` (the ledger's quarantine receipts).
    ReceiptId,
    /// `data.erasure_id` (the ledger's erasure records).
    ErasureId,
    /// `data.record_id` (the ledger's partition records).
    RecordId,
}

impl SubjectField {
    /// The field's name in `data`.
    pub const fn field(self) -> &'static str {
        match self {
            SubjectField::ToolId => "tool_id",
            SubjectField::SurfaceId => "surface_id",
            SubjectField::InvocationId => "invocation_id",
            SubjectField::AccessId => "access_id",
            SubjectField::ReceiptId => "receipt_id",
            SubjectField::ErasureId => "erasure_id",
            SubjectField::RecordId => "record_id",
        }
    }

    /// Reads the subject from raw `data`, before or without typed decoding.
    pub fn read(self, data: &Value) -> Option<&str> {
        data.get(self.field()).and_then(Value::as_str)
    }
}

/// The ledger's own records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LedgerRecord {
    /// An access record.
    Access,
    /// A quarantine receipt.
    Quarantine,
    /// An erasure.
    Erasure,
    /// The partition rule.
    Partitions,
}

/// What an event does to the projections (the table's "effect" column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Effect {
    /// Catalog: a declaration (a new version when `version` changes).
    CatalogDeclaration,
    /// Surfaces: a new revision.
    SurfaceRevision,
    /// Catalog: a deferred ref and its loading state.
    DeferredRef,
    /// The invocation moves to this state. Refinements by the data: `arguments_ready` becomes
    /// `schema_parse_failed` when data.status says so; a pre hook's `stop` makes it `blocked`.
    Transition(InvocationState),
    /// A permission decision: allow → approved, ask → awaiting_approval, deny → denied,
    /// passthrough → unchanged. `updated_input` is an input mutation.
    PermissionDecision,
    /// A progress record; data.status `needs_input` (or the spec's `waiting_for_input`) → needs_input.
    Progress,
    /// A result; status `denied` implies denied.
    Result,
    /// A result persistence decision and its refs.
    Persistence,
    /// The redaction state of a result (producer-side redaction).
    Redaction,
    /// One of the ledger's own records.
    LedgerOwn(LedgerRecord),
}

/// One row of the contract table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Contract {
    /// The class.
    pub class: EventClass,
    /// The object its `data` carries.
    pub data: DataObject,
    /// The `data` field that is the CloudEvents `subject`.
    pub subject: SubjectField,
    /// What it does.
    pub effect: Effect,
}

impl Contract {
    /// Whether events of this class belong to an invocation and go through the state machine
    /// ([`crate::state`]).
    pub const fn is_invocation_event(&self) -> bool {
        matches!(self.subject, SubjectField::InvocationId)
    }
}

/// The contract row of a class.
pub const fn contract(class: EventClass) -> Contract {
    use DataObject as D;
    use Effect as E;
    use EventClass as C;
    use InvocationState as S;
    use SubjectField as F;
    let (data, subject, effect) = match class {
        C::ToolDeclared => (D::ToolDeclaration, F::ToolId, E::CatalogDeclaration),
        C::SurfaceCreated | C::SurfaceUpdated => (D::ToolSurface, F::SurfaceId, E::SurfaceRevision),
        C::DeferredDiscovered | C::DeferredLoaded => (D::DeferredTool, F::ToolId, E::DeferredRef),
        C::InvocationPlanned => (D::Invocation, F::InvocationId, E::Transition(S::Planned)),
        C::InvocationSelected => (D::Invocation, F::InvocationId, E::Transition(S::Selected)),
        C::InvocationArgumentsReady => (D::Invocation, F::InvocationId, E::Transition(S::ArgumentsReady)),
        C::InvocationValidationFailed => (D::Invocation, F::InvocationId, E::Transition(S::ValidationFailed)),
        C::HookPreStarted | C::HookPreCompleted => {
            (D::Hook, F::InvocationId, E::Transition(S::PreHooksRunning))
        }
        C::PermissionRequested => (
            D::PermissionRequest,
            F::InvocationId,
            E::Transition(S::AwaitingApproval),
        ),
        C::PermissionDecided => (D::PermissionDecision, F::InvocationId, E::PermissionDecision),
        C::InvocationQueued => (D::Invocation, F::InvocationId, E::Transition(S::Queued)),
        C::InvocationStarted => (D::Invocation, F::InvocationId, E::Transition(S::Running)),
        C::InvocationProgress => (D::Progress, F::InvocationId, E::Progress),
        C::InvocationPartialResult => (D::Result, F::InvocationId, E::Transition(S::PartialResult)),
        C::HookPostStarted | C::HookPostCompleted => {
            (D::Hook, F::InvocationId, E::Transition(S::PostHooksRunning))
        }
        C::ResultPersisted => (D::ResultPersistence, F::InvocationId, E::Persistence),
        C::InvocationYielded => (D::Invocation, F::InvocationId, E::Transition(S::Yielded)),
        C::InvocationSucceeded => (D::Invocation, F::InvocationId, E::Transition(S::Succeeded)),
        C::InvocationFailed => (D::Invocation, F::InvocationId, E::Transition(S::Failed)),
        C::InvocationCanceled => (D::Invocation, F::InvocationId, E::Transition(S::Canceled)),
        C::InvocationTimedOut => (D::Invocation, F::InvocationId, E::Transition(S::TimedOut)),
        C::ResultCreated => (D::Result, F::InvocationId, E::Result),
        C::ResultRedacted => (D::Result, F::InvocationId, E::Redaction),
        C::AccessRead => (D::AccessRead, F::AccessId, E::LedgerOwn(LedgerRecord::Access)),
        C::QuarantineRecorded => (
            D::QuarantineRecorded,
            F::ReceiptId,
            E::LedgerOwn(LedgerRecord::Quarantine),
        ),
        C::ErasureCompleted => (
            D::ErasureCompleted,
            F::ErasureId,
            E::LedgerOwn(LedgerRecord::Erasure),
        ),
        C::PartitionsRecorded => (
            D::PartitionsRecorded,
            F::RecordId,
            E::LedgerOwn(LedgerRecord::Partitions),
        ),
    };
    Contract {
        class,
        data,
        subject,
        effect,
    }
}

/// The whole table, one row per class in [`EventClass::ALL`] order.
pub fn table() -> impl Iterator<Item = Contract> {
    EventClass::ALL.iter().map(|class| contract(*class))
}

/// An event's `data`, decoded into the object its class names.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Data {
    /// A declaration.
    ToolDeclaration(Box<ToolDeclaration>),
    /// A surface.
    ToolSurface(Box<ToolSurface>),
    /// A deferred tool.
    DeferredTool(Box<DeferredToolRef>),
    /// An invocation.
    Invocation(Box<ToolInvocation>),
    /// A hook.
    Hook(Box<ToolHook>),
    /// A permission request.
    PermissionRequest(Box<PermissionRequest>),
    /// A permission decision.
    PermissionDecision(Box<ToolPermissionDecision>),
    /// A progress record.
    Progress(Box<ToolProgress>),
    /// A result.
    Result(Box<ToolResult>),
    /// A result persistence decision.
    ResultPersistence(Box<ToolResultPersistence>),
    /// An access record.
    AccessRead(Box<AccessRead>),
    /// A quarantine receipt.
    QuarantineRecorded(Box<QuarantineRecorded>),
    /// An erasure.
    ErasureCompleted(Box<ErasureCompleted>),
    /// The partition rule.
    PartitionsRecorded(Box<PartitionsRecorded>),
}

impl Data {
    /// Decodes `data` as the object `object` names. Fails only when the value does not have that
    /// object's shape (a required field missing, a field of the wrong type, a closed-vocabulary value
    /// outside its enum) — which the official schema would reject too.
    pub fn decode(object: DataObject, data: &Value) -> Result<Data, serde_json::Error> {
        fn boxed<'a, T: Deserialize<'a>>(data: &'a Value) -> Result<Box<T>, serde_json::Error> {
            T::deserialize(data).map(Box::new)
        }
        Ok(match object {
            DataObject::ToolDeclaration => Data::ToolDeclaration(boxed(data)?),
            DataObject::ToolSurface => Data::ToolSurface(boxed(data)?),
            DataObject::DeferredTool => Data::DeferredTool(boxed(data)?),
            DataObject::Invocation => Data::Invocation(boxed(data)?),
            DataObject::Hook => Data::Hook(boxed(data)?),
            DataObject::PermissionRequest => Data::PermissionRequest(boxed(data)?),
            DataObject::PermissionDecision => Data::PermissionDecision(boxed(data)?),
            DataObject::Progress => Data::Progress(boxed(data)?),
            DataObject::Result => Data::Result(boxed(data)?),
            DataObject::ResultPersistence => Data::ResultPersistence(boxed(data)?),
            DataObject::AccessRead => Data::AccessRead(boxed(data)?),
            DataObject::QuarantineRecorded => Data::QuarantineRecorded(boxed(data)?),
            DataObject::ErasureCompleted => Data::ErasureCompleted(boxed(data)?),
            DataObject::PartitionsRecorded => Data::PartitionsRecorded(boxed(data)?),
        })
    }

    /// Decodes the `data` of an event of `class`.
    pub fn decode_for(class: EventClass, data: &Value) -> Result<Data, serde_json::Error> {
        Data::decode(contract(class).data, data)
    }

    /// The object kind.
    pub fn object(&self) -> DataObject {
        match self {
            Data::ToolDeclaration(_) => DataObject::ToolDeclaration,
            Data::ToolSurface(_) => DataObject::ToolSurface,
            Data::DeferredTool(_) => DataObject::DeferredTool,
            Data::Invocation(_) => DataObject::Invocation,
            Data::Hook(_) => DataObject::Hook,
            Data::PermissionRequest(_) => DataObject::PermissionRequest,
            Data::PermissionDecision(_) => DataObject::PermissionDecision,
            Data::Progress(_) => DataObject::Progress,
            Data::Result(_) => DataObject::Result,
            Data::ResultPersistence(_) => DataObject::ResultPersistence,
            Data::AccessRead(_) => DataObject::AccessRead,
            Data::QuarantineRecorded(_) => DataObject::QuarantineRecorded,
            Data::ErasureCompleted(_) => DataObject::ErasureCompleted,
            Data::PartitionsRecorded(_) => DataObject::PartitionsRecorded,
        }
    }

    /// The fields the object's type does not name, kept verbatim.
    pub fn extra(&self) -> &crate::model::Object {
        match self {
            Data::ToolDeclaration(d) => &d.extra,
            Data::ToolSurface(d) => &d.extra,
            Data::DeferredTool(d) => &d.extra,
            Data::Invocation(d) => &d.extra,
            Data::Hook(d) => &d.extra,
            Data::PermissionRequest(d) => &d.extra,
            Data::PermissionDecision(d) => &d.extra,
            Data::Progress(d) => &d.extra,
            Data::Result(d) => &d.extra,
            Data::ResultPersistence(d) => &d.extra,
            Data::AccessRead(d) => &d.extra,
            Data::QuarantineRecorded(d) => &d.extra,
            Data::ErasureCompleted(d) => &d.extra,
            Data::PartitionsRecorded(d) => &d.extra,
        }
    }

    /// The fields the ledger's own schema expects of this object that the data lacks, as JSON Pointers
    /// under `data`. The ledger's schemas require only what the official ones do, so a producer is
    /// never refused for leaving one of these out: its absence is a `missing_field` anomaly instead.
    /// Only the permission request has such fields; the spec's objects are held to their official
    /// schemas, and the ledger's own records are written by the ledger alone.
    pub fn missing_fields(&self) -> Vec<String> {
        match self {
            Data::PermissionRequest(d) => d.missing_fields(),
            _ => Vec::new(),
        }
    }

    /// `data.session_id`, when the producer gives one (no official schema declares it; DESIGN.md §3
    /// takes the session from it).
    pub fn session_id(&self) -> Option<&str> {
        self.extra().get("session_id").and_then(Value::as_str)
    }

    /// The value of the field that must be the CloudEvents `subject`. `None` for a hook without
    /// `invocation_id` (the hook schema does not require it).
    pub fn subject(&self) -> Option<&str> {
        match self {
            Data::ToolDeclaration(d) => Some(&d.tool_id),
            Data::ToolSurface(d) => Some(&d.surface_id),
            Data::DeferredTool(d) => Some(&d.tool_id),
            Data::Invocation(d) => Some(&d.invocation_id),
            Data::Hook(d) => d.invocation_id.as_deref(),
            Data::PermissionRequest(d) => d.invocation_id.as_deref(),
            Data::PermissionDecision(d) => Some(&d.invocation_id),
            Data::Progress(d) => Some(&d.invocation_id),
            Data::Result(d) => Some(&d.invocation_id),
            Data::ResultPersistence(d) => Some(&d.invocation_id),
            Data::AccessRead(d) => Some(&d.access_id),
            Data::QuarantineRecorded(d) => Some(&d.receipt_id),
            Data::ErasureCompleted(d) => Some(&d.erasure_id),
            Data::PartitionsRecorded(d) => Some(&d.record_id),
        }
    }
}

/// What every reader of the ledger works out first about an entry's CloudEvent: its class,
/// its data decoded as the contract says, the session and invocation it belongs to, and, when the
/// class or data cannot be read, why. The projector and the exporter share it so that both file an
/// entry under the same session and invocation.
#[derive(Debug, Clone)]
pub struct ClassifiedEvent {
    /// The event class, when `type` names a known one.
    pub class: Option<EventClass>,
    /// The data decoded for that class.
    pub decoded: Option<Data>,
    /// `sessionid`, else the data's session.
    pub session_id: Option<String>,
    /// `invocationid`, else, for an invocation class, the data's subject field or the event's `subject`.
    pub invocation_id: Option<String>,
    /// Why the class or the data could not be read.
    pub problem: Option<String>,
}

/// The CloudEvent attributes [`ClassifiedEvent::classify`] reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventAttributes<'a> {
    /// `type`.
    pub ty: Option<&'a str>,
    /// `subject`.
    pub subject: Option<&'a str>,
    /// The `sessionid` extension.
    pub sessionid: Option<&'a str>,
    /// The `invocationid` extension.
    pub invocationid: Option<&'a str>,
}

impl ClassifiedEvent {
    /// Classifies an event from the attributes that file it and its `data`.
    pub fn classify(attributes: EventAttributes<'_>, data: &Value) -> Self {
        let text = |value: Option<&str>| value.map(str::to_owned);
        let mut problem = None;
        let class = match attributes.ty.map(str::parse::<EventClass>) {
            Some(Ok(class)) => Some(class),
            Some(Err(error)) => {
                problem = Some(error.to_string());
                None
            }
            None => {
                problem = Some("the event has no type".to_owned());
                None
            }
        };
        let decoded = class.and_then(|class| match Data::decode_for(class, data) {
            Ok(decoded) => Some(decoded),
            Err(error) => {
                problem = Some(format!(
                    "data does not decode as {}: {error}",
                    contract(class).data
                ));
                None
            }
        });
        let session_id = text(attributes.sessionid)
            .or_else(|| decoded.as_ref().and_then(Data::session_id).map(str::to_owned));
        let is_invocation_event = class.is_some_and(|c| contract(c).is_invocation_event());
        let invocation_id = text(attributes.invocationid).or_else(|| {
            is_invocation_event
                .then(|| {
                    decoded
                        .as_ref()
                        .and_then(Data::subject)
                        .map(str::to_owned)
                        .or_else(|| text(attributes.subject))
                })
                .flatten()
        });
        Self {
            class,
            decoded,
            session_id,
            invocation_id,
            problem,
        }
    }
}

impl UnknownValues for Data {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        match self {
            Data::ToolDeclaration(d) => d.collect_unknown(at, out),
            Data::ToolSurface(d) => d.collect_unknown(at, out),
            Data::DeferredTool(d) => d.collect_unknown(at, out),
            Data::Invocation(d) => d.collect_unknown(at, out),
            Data::Hook(d) => d.collect_unknown(at, out),
            Data::PermissionRequest(d) => d.collect_unknown(at, out),
            Data::PermissionDecision(d) => d.collect_unknown(at, out),
            Data::Progress(d) => d.collect_unknown(at, out),
            Data::Result(d) => d.collect_unknown(at, out),
            Data::ResultPersistence(d) => d.collect_unknown(at, out),
            Data::AccessRead(d) => d.collect_unknown(at, out),
            Data::QuarantineRecorded(d) => d.collect_unknown(at, out),
            Data::ErasureCompleted(d) => d.collect_unknown(at, out),
            Data::PartitionsRecorded(d) => d.collect_unknown(at, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_a_row_and_every_object_is_used() {
        assert_eq!(table().count(), EventClass::ALL.len());
        for object in DataObject::ALL {
            assert!(
                table().any(|row| row.data == *object),
                "{object} is carried by no class"
            );
        }
    }

    #[test]
    fn rows_match_design_section_3() {
        let row = contract(EventClass::InvocationStarted);
        assert_eq!(
            row.data.official_schema(),
            Some("agenttool-invocation.schema.json")
        );
        assert_eq!(row.subject, SubjectField::InvocationId);
        assert_eq!(row.effect, Effect::Transition(InvocationState::Running));
        assert_eq!(contract(EventClass::ToolDeclared).subject, SubjectField::ToolId);
        assert_eq!(
            contract(EventClass::SurfaceUpdated).subject,
            SubjectField::SurfaceId
        );
        assert_eq!(contract(EventClass::DeferredLoaded).subject, SubjectField::ToolId);
        assert_eq!(
            contract(EventClass::PermissionRequested).data,
            DataObject::PermissionRequest
        );
        assert!(contract(EventClass::PermissionRequested).data.is_ledger_shape());
        assert_eq!(
            contract(EventClass::InvocationPartialResult).data,
            DataObject::Result
        );
        assert_eq!(contract(EventClass::ResultRedacted).effect, Effect::Redaction);
        for class in EventClass::ALL {
            let row = contract(*class);
            assert_eq!(
                row.is_invocation_event(),
                class.as_str().starts_with("tool.invocation.")
                    || class.as_str().starts_with("tool.hook.")
                    || class.as_str().starts_with("tool.permission.")
                    || class.as_str().starts_with("tool.result."),
                "{class}"
            );
            assert_eq!(
                matches!(row.effect, Effect::LedgerOwn(_)),
                class.is_ledger_own(),
                "{class}"
            );
        }
    }

    #[test]
    fn data_decodes_by_class_and_names_its_subject() {
        let data: Value =
            serde_json::from_str(include_str!("model/samples/invocation.full.json")).expect("JSON");
        let decoded = Data::decode_for(EventClass::InvocationStarted, &data).expect("decodes");
        assert_eq!(decoded.object(), DataObject::Invocation);
        assert_eq!(decoded.subject(), Some("inv_2"));
        assert_eq!(SubjectField::InvocationId.read(&data), Some("inv_2"));
        assert_eq!(decoded.session_id(), Some("sess_9"));
        assert_eq!(decoded.unknown_values().len(), 1);
        assert!(
            Data::decode_for(EventClass::ToolDeclared, &data).is_err(),
            "not a declaration"
        );

        let access: Value =
            serde_json::from_str(include_str!("model/samples/ledger.access-read.json")).expect("JSON");
        let decoded = Data::decode_for(EventClass::AccessRead, &access).expect("decodes");
        assert_eq!(decoded.subject(), Some("acc_1"));
        assert_eq!(SubjectField::AccessId.read(&access), Some("acc_1"));
    }
}
