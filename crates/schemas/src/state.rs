//! The invocation state machine shared by the projector and the exporter.
