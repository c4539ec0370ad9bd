//! The event classes: the 27 of Agent Tool v0.2.0 and the ledger's own `toolledger.*` classes.
//!
//! A CloudEvent's `type` is its class. Anything else is quarantined as `unknown_class`.

use std::fmt;
use std::str::FromStr;

macro_rules! event_classes {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// An event class: what happened, and so which object the event carries.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventClass {
            $(#[doc = $doc] $variant,)*
        }

        impl EventClass {
            /// Every class, in the order the spec lists them, then the ledger's own.
            pub const ALL: &'static [EventClass] = &[$(EventClass::$variant,)*];

            /// The wire name, the CloudEvents `type`.
            pub const fn as_str(self) -> &'static str {
                match self { $(EventClass::$variant => $name,)* }
            }
        }

        impl FromStr for EventClass {
            type Err = UnknownClass;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok(EventClass::$variant),)*
                    other => Err(UnknownClass(other.to_owned())),
                }
            }
        }
    };
}

event_classes! {
    ToolDeclared => "tool.declared", "A tool declaration, new or a new version.";
    SurfaceCreated => "tool.surface.created", "A tool surface was created.";
    SurfaceUpdated => "tool.surface.updated", "A tool surface changed.";
    DeferredDiscovered => "tool.deferred.discovered", "A deferred tool became discoverable.";
    DeferredLoaded => "tool.deferred.loaded", "A deferred tool's schema was loaded.";
    InvocationPlanned => "tool.invocation.planned", "An invocation was planned.";
    InvocationSelected => "tool.invocation.selected", "An invocation's tool was selected.";
    InvocationArgumentsReady => "tool.invocation.arguments_ready", "An invocation's arguments were parsed.";
    InvocationValidationFailed => "tool.invocation.validation_failed", "An invocation failed validation.";
    HookPreStarted => "tool.hook.pre.started", "A pre-tool hook started.";
    HookPreCompleted => "tool.hook.pre.completed", "A pre-tool hook completed.";
    PermissionRequested => "tool.permission.requested", "A permission decision was requested.";
    PermissionDecided => "tool.permission.decided", "A permission decision was made.";
    InvocationQueued => "tool.invocation.queued", "An invocation was queued.";
    InvocationStarted => "tool.invocation.started", "An invocation started running.";
    InvocationProgress => "tool.invocation.progress", "An invocation reported progress.";
    InvocationPartialResult => "tool.invocation.partial_result", "An invocation produced a partial result.";
    HookPostStarted => "tool.hook.post.started", "A post-tool hook started.";
    HookPostCompleted => "tool.hook.post.completed", "A post-tool hook completed.";
    ResultPersisted => "tool.result.persisted", "A result persistence decision was made.";
    InvocationYielded => "tool.invocation.yielded", "An invocation yielded.";
    InvocationSucceeded => "tool.invocation.succeeded", "An invocation succeeded (terminal).";
    InvocationFailed => "tool.invocation.failed", "An invocation failed (terminal).";
    InvocationCanceled => "tool.invocation.canceled", "An invocation was canceled (terminal).";
    InvocationTimedOut => "tool.invocation.timed_out", "An invocation timed out (terminal).";
    ResultCreated => "tool.result.created", "A result was created.";
    ResultRedacted => "tool.result.redacted", "A result was redacted by its producer.";
    AccessRead => "toolledger.access.read", "The ledger's own: someone read invocation or session data.";
    QuarantineRecorded => "toolledger.quarantine.recorded", "The ledger's own: a message was quarantined.";
    ErasureCompleted => "toolledger.erasure.completed", "The ledger's own: content was erased.";
    PartitionsRecorded => "toolledger.partitions.recorded", "The ledger's own: how tenants map to the ledger's partitions.";
}

impl EventClass {
    /// Whether this is one of the ledger's own classes, which producers may not publish.
    pub fn is_ledger_own(self) -> bool {
        self.as_str().starts_with("toolledger.")
    }

    /// The classes of Agent Tool v0.2.0 (the first 27).
    pub fn agent_tool() -> impl Iterator<Item = EventClass> {
        Self::ALL.iter().copied().filter(|c| !c.is_ledger_own())
    }
}

impl fmt::Display for EventClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialized as its wire name, so stored records (an invocation fold's transitions) read like the
/// ledger they come from.
impl serde::Serialize for EventClass {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for EventClass {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A `type` that names no known class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event class `{0}`")]
pub struct UnknownClass(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_seven_spec_classes_and_three_of_our_own() {
        assert_eq!(EventClass::agent_tool().count(), 27);
        assert_eq!(EventClass::ALL.iter().filter(|c| c.is_ledger_own()).count(), 4);
        for class in EventClass::ALL {
            assert_eq!(class.as_str().parse::<EventClass>(), Ok(*class));
        }
        assert!("tool.invocation.exploded".parse::<EventClass>().is_err());
    }
}
