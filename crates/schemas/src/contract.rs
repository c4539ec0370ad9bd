//! The contract table of DESIGN.md §3: class → data object → subject → effect.
