//! Integration tests of the schemas crate's validation and generator: conformance of the project's
//! schemas with the official Agent Tool schemas, violation reporting, and the generator's promises.

#[path = "schemas/samples.rs"]
mod samples;

#[path = "schemas/conformance.rs"]
mod conformance;

#[path = "schemas/validation.rs"]
mod validation;

#[path = "schemas/generator.rs"]
mod generator;
