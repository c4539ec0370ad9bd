//! The Agent Tool v0.2.0 objects as typed, round-trippable Rust values.
//!
//! One type per core object of the spec, shaped after its official JSON Schema
//! (`agenttool-schemas/`), plus the data of the ledger's own classes ([`PermissionRequest`],
//! [`AccessRead`], [`QuarantineRecorded`], [`ErasureCompleted`], [`PartitionsRecorded`]).
//!
//! The rule every type here keeps: **JSON → type → JSON is the identity** for any document valid under
//! the official schema. That is why
//! - unknown fields land in `extra` (flattened) and are written back;
//! - optional fields are `Option` and skipped when absent, lists are `Option<Vec<_>>` so an absent list
//!   and an empty one stay different;
//! - fields the schema leaves untyped (`{}`) are `Option<Value>` decoded with [`present`], so an explicit
//!   `null` survives;
//! - numbers are `serde_json::Number`, so `50` stays `50` and `1.0` stays `1.0`;
//! - objects the official schemas do not describe (tool_error, input/output contracts, external
//!   mappings, decision reasons) are wrapped in [`Loose`]: typed when they have the expected shape, kept
//!   raw otherwise — the schema allows any object there, so decoding must not fail on one;
//! - fields the spec mentions but its schemas do not declare (`retry_of`, `attempt`, `session_id`,
//!   `input_mutations`, `error` on an invocation) stay in `extra` and are read through accessors, so a
//!   producer's differently-typed value never makes a valid document undecodable.
//!
//! Vocabularies ([`vocab`]) are closed where the schemas close them and open (`Other(String)`) where the
//! spec lists "initial values". [`UnknownValues::unknown_values`] lists the JSON Pointers of every `Other`
//! in an object — the ledger's `unknown_value` anomalies.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod ledger;
mod objects;
#[cfg(test)]
mod tests;
pub mod vocab;

pub use ledger::{
    AccessRead, ErasureCompleted, PartitionLayout, PartitionsRecorded, PermissionRequest, QuarantineRecorded,
};
pub use objects::{
    DecisionReason, DeferredToolRef, ExternalMapping, InputContract, InputMutation, OutputContract,
    ToolDeclaration, ToolError, ToolEvent, ToolExecutionProfile, ToolFilter, ToolHook, ToolInterface,
    ToolInvocation, ToolNamespace, ToolPermissionDecision, ToolPermissionProfile, ToolProgress, ToolResult,
    ToolResultPersistence, ToolSchedulerPolicy, ToolSurface,
};
pub use vocab::{
    ArgumentMode, BlockedReason, ContextModifierPolicy, DecisionReasonType, ErrorClass, ExecutionKind,
    HookEvent, InterruptBehavior, InvocationStatus, Lifecycle, LoadingState, MutationSourceType,
    OrderingPolicy, PermissionBehavior, PersistenceStrategy, ProgressStatus, ResultStatus, RiskLevel,
    RuleSource, SchemaVisibility, SiblingFailurePolicy, SurfaceScope, ToolKind, YieldPolicy,
};

/// A JSON object, as the schemas' `"type": "object", "additionalProperties": true`.
pub type Object = serde_json::Map<String, Value>;

/// A value outside a typed open vocabulary, found in an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnknownValue {
    /// Where it is: a JSON Pointer (RFC 6901) into the object, e.g. `/status` or `/error/error_class`.
    pub path: String,
    /// Which vocabulary it is outside of, e.g. `invocation_status`, `tool_kind`.
    pub vocabulary: String,
    /// The value, verbatim.
    pub value: String,
}

/// Objects and values that can hold open-vocabulary values.
pub trait UnknownValues {
    /// Appends the unknown values at or below `at` (a JSON Pointer prefix, `""` for the root).
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>);

    /// Every value outside a typed open vocabulary, with its JSON Pointer, in field order.
    fn unknown_values(&self) -> Vec<UnknownValue> {
        let mut out = Vec::new();
        self.collect_unknown("", &mut out);
        out
    }
}

impl<T: UnknownValues> UnknownValues for Option<T> {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        if let Some(value) = self {
            value.collect_unknown(at, out);
        }
    }
}

impl<T: UnknownValues> UnknownValues for Vec<T> {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        for (index, value) in self.iter().enumerate() {
            value.collect_unknown(&format!("{at}/{index}"), out);
        }
    }
}

/// An object the official schemas leave open (`"type": "object"` with no properties): typed when it has
/// the shape the spec describes, kept raw when it does not, so decoding never fails on a valid document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Loose<T> {
    /// It has the expected shape.
    Typed(T),
    /// It does not (a field of another type); kept verbatim.
    Raw(Value),
}

impl<T> Loose<T> {
    /// The typed view, when the value has the expected shape.
    pub fn typed(&self) -> Option<&T> {
        match self {
            Loose::Typed(value) => Some(value),
            Loose::Raw(_) => None,
        }
    }
}

impl<T: UnknownValues> UnknownValues for Loose<T> {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        if let Loose::Typed(value) = self {
            value.collect_unknown(at, out);
        }
    }
}

/// A safety fact the interface schema types as `boolean | string`: a fixed answer, or a rule that
/// computes it per input (e.g. `"classifier:command_read_only"`, `"same_as:is_read_only"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SafetyFlag {
    /// A fixed answer.
    Fixed(bool),
    /// A rule evaluated per input.
    Computed(String),
}

/// Decodes a field the schema leaves untyped so that an explicit `null` is kept (`Some(Value::Null)`),
/// distinct from an absent field (`None`, by `#[serde(default)]`).
pub fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Implements [`UnknownValues`] for a struct by listing its fields that hold open vocabularies.
macro_rules! unknown_values_in {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        impl $crate::model::UnknownValues for $ty {
            #[allow(unused_variables, reason = "objects without open vocabularies list no fields")]
            fn collect_unknown(&self, at: &str, out: &mut Vec<$crate::model::UnknownValue>) {
                $(
                    $crate::model::UnknownValues::collect_unknown(
                        &self.$field,
                        &format!("{}/{}", at, stringify!($field)),
                        out,
                    );
                )*
            }
        }
    };
}
pub(crate) use unknown_values_in;
