//! Validation of events against the project's JSON Schemas.
