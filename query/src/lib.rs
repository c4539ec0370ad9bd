//! The read side: the `/v1` HTTP API and the CLI's queries over the projector's SQLite and the ledger.
//!
//! ```text
//! <data_dir>/projections/current ─▶ Reader (read-only connections, blocking threads)
//!     ─▶ reconstruct | sessions | session_timeline | search | counts | stats | catalog   (this crate's library)
//!            │                                   │
//!            ▼                                   ▼
//!     api (axum, bearer tokens, JSON/NDJSON)   toolledger show/session/search/stats (no server)
//! payload refs ─▶ payloads::check ─▶ blob store (fetch + commitment check; missing/erased reported)
//! ATL_LEDGER / ATL_CHECKPOINTS (NATS) ─▶ replay, checkpoints, proofs, bundles (toolledger_verify)
//! analysts' SQL ─▶ toolledger_projector::run_sql (tenant views, authorizer, limits) ─▶ POST /v1/sql
//! every read of invocation/session data ─▶ access ─▶ atl.in._system.toolledger.access.read
//! ```
//!
//! Modules:
//! - [`reader`]: pooled read-only connections to the current generation; reopened after a rebuild.
//! - [`params`]: checks of everything a caller sends (ids, tenants, RFC 3339 ranges, page sizes,
//!   tamper-checked cursors, bucket widths) so bad input is a 400 naming the parameter.
//! - [`auth`]: bearer tokens stored as SHA-256, compared in constant time; tenant scopes.
//! - [`reconstruct`]: one invocation — timeline, inputs and mutation diffs, permissions, hooks,
//!   progress, results, error with retry guidance, native ids, anomalies, payload refs.
//! - [`listing`]: sessions (filtered by their invocations' tool and state), a session's timeline,
//!   invocation search and its matches counted by state, error class or tool; cursor pagination,
//!   each list read in order from an index ([`listing::query_plan`] shows the plan).
//! - [`stats`]: per tool and time bucket, outcome rates and exact latency percentiles.
//! - [`catalog`]: tools, versions, lifecycle, surfaces, deferred state.
//! - [`payloads`]: fetches offloaded payloads and checks them against their commitments.
//! - [`replay`]: a session's entries in ledger order at their original pace (scaled), and
//!   re-publication under `atl.replay.<tenant>.>` only.
//! - [`api`]: the HTTP routes, error bodies, `/healthz` and `/metrics`; its submodules serve
//!   `POST /v1/sql` (slots per tenant and per server; [`serve`] stops running statements when it
//!   stops), session replay as NDJSON/SSE, signed checkpoints, inclusion and consistency proofs (an
//!   inclusion proof only for a tenant the token holds) and evidence bundles.
//! - `web`: the web view's static assets (ES modules, CSS; compiled in), served at `/` and `/ui/…`;
//!   the page reads only `/v1` with the token the user signs in with.
//! - `health`: what `/healthz` and `/metrics` check before answering — the projection's
//!   readability, the projector's heartbeat, the access log's publishing.
//! - [`access`]: every API read of invocation or session data published as
//!   `toolledger.access.read` to `atl.in._system.…`, so ingest appends it to the ledger; a tenant's
//!   records hold only its own ids and text ([`Reads`]).
//!
//! Every query is tenant-scoped (a tenant is mandatory unless the caller is admin) and uses bound
//! parameters only. `docs/query.md` describes the API and CLI; `docs/openapi.json` is the contract.
#![warn(missing_docs)]

pub mod access;
pub mod api;
pub mod auth;
pub mod catalog;
mod error;
mod health;
pub mod listing;
pub mod params;
pub mod payloads;
pub mod reader;
pub mod reconstruct;
pub mod replay;
mod rows;
pub mod stats;
mod web;

pub use access::{AccessLog, AccessQueue, AccessRead, Reads};
pub use api::{ApiOptions, LedgerAccess, serve};
pub use auth::{Access, Principal, Tokens, token_digest};
pub use catalog::{Tool, catalog};
pub use error::{Error, Result};
pub use listing::{
    CountGroup, Counts, GroupBy, InvocationSummary, Page, PlannedRead, SearchFilter, SessionFilter,
    SessionSummary, SessionTimeline, counts, query_plan, search, session_timeline, sessions,
};
pub use reader::{Reader, Readers};
pub use reconstruct::{Reconstruction, reconstruct};
pub use stats::{Stats, StatsFilter, StatsRow, stats};
