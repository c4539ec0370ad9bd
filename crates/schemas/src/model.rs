//! The Agent Tool v0.2.0 objects as typed, round-trippable Rust values.
