//! Configuration: defaults, then one TOML file, then `TOOLLEDGER_*` environment variables.
//!
//! Nested keys are separated by a double underscore in the environment:
//! `TOOLLEDGER_NATS__URL` sets `nats.url`, `TOOLLEDGER_TELEMETRY__METRICS_LISTEN` sets
//! `telemetry.metrics_listen`. Only variables whose first segment is a configuration section are read,
//! so unrelated `TOOLLEDGER_*` variables (the test suite's `TOOLLEDGER_VECTORS`, say) are left alone;
//! inside a section an unknown key is an error, so a misspelt override fails loudly instead of being
//! ignored. `docs/config.example.toml` documents every key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Environment variable that names the configuration file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "TOOLLEDGER_CONFIG";

/// The top-level sections and keys that may be set from the environment.
const ENV_KEYS: &[&str] = &[
    "data_dir",
    "nats",
    "telemetry",
    "ledger",
    "payloads",
    "api",
    "retention",
    "export",
    "witness",
];

/// The whole configuration of a toolledger process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where local state lives: the managed nats-server's store, key material, SQLite files.
    pub data_dir: PathBuf,
    /// How to reach NATS, or how to run a local server when none is configured.
    pub nats: NatsConfig,
    /// Logging and the `/metrics` + `/healthz` server.
    pub telemetry: TelemetryConfig,
    /// The ledger's tamper evidence: Merkle tiles, the checkpoint signing key, checkpoint cadence.
    #[serde(default)]
    pub ledger: LedgerConfig,
    /// Where payloads go and which fields move there or are scrubbed.
    #[serde(default)]
    pub payloads: PayloadsConfig,
    /// The query API (`toolledger serve`, `up`): where it listens and who may read what.
    #[serde(default)]
    pub api: ApiConfig,
    /// How long payload content is kept: legal holds and maximum ages per tenant.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// The Parquet archive `toolledger export` writes.
    #[serde(default)]
    pub export: ExportConfig,
    /// The OTLP traces receiver (`toolledger otlp`, and `up` when it has write tokens).
    #[serde(default)]
    pub otlp: OtlpConfig,
    /// A checkpoint witness (`toolledger witness`), usually run by another party than the ledger's.
    #[serde(default)]
    pub witness: WitnessConfig,
    /// The witnesses a reader trusts (`verify`, `bundle`, the query service's bundles): a checkpoint
    /// cosigned by fewer than `quorum` of them is a finding. Absent: cosignatures are not required.
    #[serde(default)]
    pub witness_policy: Option<WitnessPolicyConfig>,
}

/// A witness policy (`docs/witnesses.md`): these witnesses' verifier keys, at least `quorum` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessPolicyConfig {
    /// How many of `witnesses` must have cosigned. Default: a majority.
    pub quorum: Option<usize>,
    /// The witnesses' verifier keys (`<name>+<key id>+<key>`).
    pub witnesses: Vec<String>,
}

/// A C2SP tlog witness (`docs/witnesses.md`): its address, its key and state, and the logs it
/// cosigns for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WitnessConfig {
    /// Where `POST /add-checkpoint` is served; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The witness's name (a schema-less URL such as `witness.example.com/w1`), used to make its key
    /// on first start; afterwards the key file's name must match it.
    pub name: Option<String>,
    /// Where the latest cosigned checkpoint of each log is kept. Default `<data_dir>/witness`.
    pub state_dir: Option<PathBuf>,
    /// The cosigning key, made on first start. Default `<state_dir>/witness.key`.
    pub key_file: Option<PathBuf>,
    /// The logs it cosigns for; checkpoints of any other origin are refused (404).
    pub logs: Vec<WitnessLog>,
}

impl Default for WitnessConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7380)),
            name: None,
            state_dir: None,
            key_file: None,
            logs: Vec::new(),
        }
    }
}

/// One log a witness cosigns for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessLog {
    /// The log's checkpoint origin line (the ledger's `ledger.origin`).
    pub origin: String,
    /// The log's checkpoint verifier keys (`<name>+<key id>+<key>`, as `toolledger init` prints);
    /// during a key rotation, the old and the new.
    pub keys: Vec<String>,
}

/// The OTLP traces receiver (`docs/otlp.md`): where it listens and who may write for which tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    /// OTLP/HTTP (`POST /v1/traces`, protobuf or JSON); port 0 picks a free port.
    pub http_listen: SocketAddr,
    /// OTLP/gRPC (`TraceService/Export`); port 0 picks a free port.
    pub grpc_listen: SocketAddr,
    /// Who may write. Empty: `toolledger otlp` refuses to start and `up` does not run the receiver.
    pub tokens: Vec<OtlpToken>,
    /// The largest request body, after decompression.
    pub max_request_bytes: usize,
    /// Tool spans remembered per tenant, so a nested span exported in a later request joins its
    /// call's invocation.
    pub recent_spans: usize,
    /// Seconds a refused exporter is asked to wait before it retries (`Retry-After`, RetryInfo).
    pub retry_after_secs: u64,
    /// Seconds a server-side tool span (an MCP server's `tools/call`) waits for its caller's span
    /// to join it before it is recorded on its own.
    pub caller_grace_secs: u64,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        Self {
            http_listen: SocketAddr::from(([127, 0, 0, 1], 4318)),
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 4317)),
            tokens: Vec::new(),
            max_request_bytes: 8 * 1024 * 1024,
            recent_spans: 100_000,
            retry_after_secs: 1,
            caller_grace_secs: 30,
        }
    }
}

/// One write token of the OTLP receiver: confined to one tenant, and publishing as that tenant's
/// producer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpToken {
    /// Who holds it (logged with each refused request).
    pub name: String,
    /// Lowercase hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    pub sha256: String,
    /// The one tenant its spans are recorded for.
    pub tenant: String,
    /// The NATS URL (with the tenant's producer credentials, `nats://producer-acme:…@host`) its
    /// events are published with; default `nats.url` (or `up`'s local server).
    #[serde(default)]
    pub nats_url: Option<String>,
}

/// The Parquet exporter (DESIGN §6, `docs/parquet.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// The archive: a directory, `file:///dir` or `s3://bucket/prefix` (`AWS_*` variables for
    /// credentials and endpoint). Default `<data_dir>/parquet`.
    pub prefix: Option<String>,
    /// Close a file range after this many ledger entries.
    pub rows_per_file: u64,
    /// Close a file range when its oldest entry has waited this many milliseconds.
    pub max_delay_ms: u64,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            prefix: None,
            rows_per_file: 250_000,
            max_delay_ms: 60_000,
            row_group_rows: 50_000,
        }
    }
}

impl Config {
    /// The Parquet archive's location (`export.prefix`, else `<data_dir>/parquet`).
    pub fn export_prefix(&self) -> String {
        self.export
            .prefix
            .clone()
            .unwrap_or_else(|| self.data_dir.join("parquet").display().to_string())
    }
}

/// Retention of payload content (DESIGN §5: the fact of a call is never erased, its content can be).
/// Ages count from when the ledger took the entry (`ingested_at`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Seconds between runs of the retention job inside `up`; 0 (default) never runs it. Deployments
    /// run `toolledger erase --retention` from a timer (deploy/systemd).
    pub interval_secs: u64,
    /// Applies to tenants not listed in `tenants`.
    pub default: TenantRetention,
    /// Per tenant.
    pub tenants: std::collections::BTreeMap<String, TenantRetention>,
}

/// One tenant's retention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantRetention {
    /// Legal hold: content younger than this many days is not erased unless an admin forces it with
    /// a reason.
    pub min_days: Option<u32>,
    /// Content older than this many days is erased by the retention job.
    pub max_days: Option<u32>,
}

impl RetentionConfig {
    /// The retention that applies to `tenant`.
    pub fn for_tenant(&self, tenant: &str) -> TenantRetention {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }
}

/// The `/v1` query API: listen address and bearer tokens (stored as SHA-256, never in clear).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the API listens; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Who may call it. Empty: `serve` refuses to start unless `--insecure-local` is given.
    pub tokens: Vec<ApiToken>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tokens: Vec::new(),
        }
    }
}

/// One bearer token of the query API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Who holds it; recorded as the principal of every read.
    pub name: String,
    /// Lowercase hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    pub sha256: String,
    /// The tenants it may read.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Whether it may read every tenant.
    #[serde(default)]
    pub admin: bool,
}

/// Payload offloading and secret scrubbing (DESIGN §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PayloadsConfig {
    /// The blob store: a directory, `file:///dir`, `s3://bucket/prefix` (`AWS_*` variables for
    /// credentials and endpoint) or `memory://`. Default `<data_dir>/blobs`.
    pub blob_store: Option<String>,
    /// Options of the blob store's client, overriding the `AWS_*` variables: `endpoint`,
    /// `allow_http`, `region`, `access_key_id`, `secret_access_key`, … (object_store's names).
    pub blob_store_options: std::collections::BTreeMap<String, String>,
    /// A payload field whose serialized JSON is larger than this many bytes moves to the blob store.
    pub offload_threshold_bytes: usize,
    /// JSON Pointers into the event (`/data/call_input`, `*` matches any segment) whose values always
    /// move to the blob store, so they can be erased later.
    pub erasable_paths: Vec<String>,
    /// JSON Pointers into the event whose values are always scrubbed, besides the built-in secret
    /// shapes and the fields tool declarations list as sensitive.
    pub scrub_paths: Vec<String>,
    /// The largest upload ingest copies in from `ATL_PAYLOADS_<tenant>`.
    pub max_upload_bytes: u64,
}

impl Default for PayloadsConfig {
    fn default() -> Self {
        Self {
            blob_store: None,
            blob_store_options: std::collections::BTreeMap::new(),
            offload_threshold_bytes: 32 * 1024,
            erasable_paths: Vec::new(),
            scrub_paths: Vec::new(),
            max_upload_bytes: 256 * 1024 * 1024,
        }
    }
}

/// The ledger's Merkle tiles and signed checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerConfig {
    /// The log's identity in every checkpoint; the signing key's name (`toolledger init --key-name`)
    /// should be the same.
    pub origin: String,
    /// Where the tiles live: a directory, `file:///dir` or `s3://bucket/prefix`. Default
    /// `<data_dir>/tiles`.
    pub tiles: Option<String>,
    /// The checkpoint signing key made by `toolledger init`. Default `<data_dir>/keys/checkpoint.key`.
    pub key_file: Option<PathBuf>,
    /// Sign a checkpoint after this many entries.
    pub checkpoint_every: u64,
    /// Sign a checkpoint when this many milliseconds passed since the last and the tree grew.
    pub checkpoint_interval_ms: u64,
    /// Witnesses ingest asks to cosign each new checkpoint (`docs/witnesses.md`); their cosignatures
    /// go to ATL_COSIGNATURES.
    pub witnesses: Vec<LedgerWitness>,
    /// How many of `witnesses` a checkpoint should gather; fewer is logged and reported by `doctor`.
    /// Default: a majority of them.
    pub witness_quorum: Option<usize>,
    /// How many partitions the ledger has (1 to 64; DESIGN §8): each its own ledger stream, single
    /// writer, Merkle tree and checkpoint origin; a tenant lives in one, by a fixed rule. Fixed when
    /// the ledger is made (`toolledger init --partitions`): another count would move tenants.
    pub partitions: u16,
}

/// A witness the ledger asks to cosign its checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerWitness {
    /// The witness's submission prefix (`https://witness.example.com`; the request goes to
    /// `<url>/add-checkpoint`).
    pub url: String,
    /// The witness's verifier key (`<name>+<key id>+<key>`, as `toolledger witness` prints it).
    pub key: String,
}

impl LedgerConfig {
    /// How many witness cosignatures a checkpoint should gather: `witness_quorum`, else a majority
    /// of the witnesses (0 without witnesses).
    pub fn witness_quorum(&self) -> usize {
        self.witness_quorum
            .unwrap_or(self.witnesses.len() / 2 + usize::from(!self.witnesses.is_empty()))
    }
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            origin: "toolledger/ATL_LEDGER".to_owned(),
            tiles: None,
            key_file: None,
            checkpoint_every: 1000,
            checkpoint_interval_ms: 10_000,
            witnesses: Vec::new(),
            witness_quorum: None,
            partitions: 1,
        }
    }
}

/// How to reach NATS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// URL of an existing NATS deployment (`nats://host:4222`). When absent, `toolledger up` starts a
    /// local nats-server with JetStream under `data_dir/nats`.
    pub url: Option<String>,
    /// The nats-server binary for the local server (a path, or a name looked up on `PATH`).
    pub server_bin: PathBuf,
    /// Where the local server listens for clients.
    pub listen: SocketAddr,
    /// Tenants of the local server: each gets a producer identity (`producer_<tenant>`, allowed
    /// only its own `atl.in.<tenant>.tool.>`) and an upload bucket. The tenants of `[[otlp.tokens]]`
    /// get one too, and `up --demo` adds its demo tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
}

/// Logging and the observability endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Address of the HTTP server for `/metrics` and `/healthz`; port 0 picks a free port.
    pub metrics_listen: SocketAddr,
    /// A `tracing` filter directive such as `info` or `toolledger_ingest=debug,info`.
    pub log_filter: String,
    /// `text` for people, `json` for log collectors.
    pub log_format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("data"),
            nats: NatsConfig {
                url: None,
                server_bin: PathBuf::from("nats-server"),
                listen: SocketAddr::from(([127, 0, 0, 1], 4222)),
                tenants: Vec::new(),
            },
            telemetry: TelemetryConfig {
                metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
                log_filter: "info".to_owned(),
                log_format: LogFormat::Text,
            },
            ledger: LedgerConfig::default(),
            payloads: PayloadsConfig::default(),
            api: ApiConfig::default(),
            retention: RetentionConfig::default(),
            export: ExportConfig::default(),
            otlp: OtlpConfig::default(),
            witness: WitnessConfig::default(),
            witness_policy: None,
        }
    }
}

impl Config {
    /// Loads defaults, then `file` (or the file named by `TOOLLEDGER_CONFIG`) if any, then the
    /// environment, and validates the result.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_FILE_ENV).map(PathBuf::from));
        Self::from_figment(Self::figment(file.as_deref(), Env::prefixed("TOOLLEDGER_")))
    }

    fn figment(file: Option<&Path>, env: Env) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        figment.merge(env.split("__").filter(|key| is_env_key(key.as_str())))
    }

    fn from_figment(figment: Figment) -> Result<Self> {
        let config: Config = figment.extract().map_err(config_error)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what serde cannot: values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if let Some(url) = &self.nats.url {
            validate_nats_url(url).map_err(|reason| invalid("nats.url", reason))?;
        }
        if self.nats.server_bin.as_os_str().is_empty() {
            return Err(invalid("nats.server_bin", "must not be empty"));
        }
        if self.ledger.origin.is_empty() || self.ledger.origin.contains('\n') {
            return Err(invalid("ledger.origin", "must be one non-empty line"));
        }
        if self.ledger.checkpoint_every == 0 {
            return Err(invalid("ledger.checkpoint_every", "must be at least 1"));
        }
        if !(1..=64).contains(&self.ledger.partitions) {
            return Err(invalid("ledger.partitions", "must be 1 to 64"));
        }
        if self.ledger.checkpoint_interval_ms == 0 {
            return Err(invalid("ledger.checkpoint_interval_ms", "must be at least 1"));
        }
        if let Some(bad) = self.ledger.witnesses.iter().find(|w| {
            !(w.url.starts_with("http://") || w.url.starts_with("https://")) || w.key.trim().is_empty()
        }) {
            return Err(invalid(
                "ledger.witnesses",
                format!("{:?} needs an http(s) url and a verifier key", bad.url),
            ));
        }
        let mut keys: Vec<&str> = self.ledger.witnesses.iter().map(|w| w.key.trim()).collect();
        keys.sort_unstable();
        if let Some(twice) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(invalid(
                "ledger.witnesses",
                format!("the key {} is listed twice: one witness counts once", twice[0]),
            ));
        }
        let quorum = self.ledger.witness_quorum();
        if self.ledger.witness_quorum.is_some() && (quorum == 0 || quorum > self.ledger.witnesses.len()) {
            return Err(invalid(
                "ledger.witness_quorum",
                format!(
                    "must be between 1 and the {} witnesses",
                    self.ledger.witnesses.len()
                ),
            ));
        }
        for (key, paths) in [
            ("payloads.erasable_paths", &self.payloads.erasable_paths),
            ("payloads.scrub_paths", &self.payloads.scrub_paths),
        ] {
            if let Some(bad) = paths.iter().find(|p| !p.starts_with('/')) {
                return Err(invalid(
                    key,
                    format!("`{bad}` is not a JSON Pointer (must start with /)"),
                ));
            }
        }
        for token in &self.api.tokens {
            if !is_sha256_hex(&token.sha256) {
                return Err(invalid(
                    "api.tokens",
                    format!("token `{}`: sha256 must be 64 hex digits", token.name),
                ));
            }
            if !token.admin && token.tenants.is_empty() {
                return Err(invalid(
                    "api.tokens",
                    format!("token `{}` reads no tenant (set tenants or admin)", token.name),
                ));
            }
        }
        for token in &self.otlp.tokens {
            if !is_sha256_hex(&token.sha256) {
                return Err(invalid(
                    "otlp.tokens",
                    format!("token `{}`: sha256 must be 64 hex digits", token.name),
                ));
            }
            if token.tenant.is_empty() {
                return Err(invalid(
                    "otlp.tokens",
                    format!("token `{}` names no tenant", token.name),
                ));
            }
        }
        if self.otlp.max_request_bytes == 0 {
            return Err(invalid("otlp.max_request_bytes", "must be at least 1"));
        }
        for (tenant, retention) in std::iter::once(("default", &self.retention.default))
            .chain(self.retention.tenants.iter().map(|(t, r)| (t.as_str(), r)))
        {
            if let (Some(min), Some(max)) = (retention.min_days, retention.max_days)
                && max < min
            {
                return Err(invalid(
                    "retention",
                    format!("{tenant}: max_days {max} is below the legal hold min_days {min}"),
                ));
            }
        }
        if self.export.rows_per_file == 0 || self.export.row_group_rows == 0 {
            return Err(invalid(
                "export.rows_per_file",
                "rows_per_file and row_group_rows must be at least 1",
            ));
        }
        if let Some(name) = &self.witness.name
            && (name.is_empty()
                || name
                    .chars()
                    .any(|c| c.is_whitespace() || c == '+' || c.is_control()))
        {
            return Err(invalid("witness.name", "must be non-empty with no spaces or '+'"));
        }
        for log in &self.witness.logs {
            if log.origin.is_empty() || log.origin.contains('\n') {
                return Err(invalid("witness.logs", "each origin must be one non-empty line"));
            }
            if log.keys.is_empty() {
                return Err(invalid(
                    "witness.logs",
                    format!("log `{}` has no verifier keys", log.origin),
                ));
            }
        }
        if self.payloads.offload_threshold_bytes == 0 {
            return Err(invalid("payloads.offload_threshold_bytes", "must be at least 1"));
        }
        tracing_subscriber::EnvFilter::try_new(&self.telemetry.log_filter)
            .map_err(|e| invalid("telemetry.log_filter", e.to_string()))?;
        Ok(())
    }

    /// Where the ledger's tiles live (`ledger.tiles`, else `<data_dir>/tiles`).
    pub fn tiles_location(&self) -> String {
        self.ledger
            .tiles
            .clone()
            .unwrap_or_else(|| self.data_dir.join("tiles").display().to_string())
    }

    /// The blob store's URL (`payloads.blob_store`, else `file://<data_dir>/blobs`); a bare path
    /// becomes a `file://` URL of its absolute form.
    pub fn blob_store_url(&self) -> String {
        let location = self
            .payloads
            .blob_store
            .clone()
            .unwrap_or_else(|| self.data_dir.join("blobs").display().to_string());
        if location.contains("://") {
            return location;
        }
        let path = Path::new(&location);
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        format!("file://{}", path.display())
    }

    /// The checkpoint signing key file (`ledger.key_file`, else `<data_dir>/keys/checkpoint.key`).
    pub fn checkpoint_key_file(&self) -> PathBuf {
        self.ledger
            .key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("keys/checkpoint.key"))
    }

    /// The checkpoint verifier key file beside the signing key (`checkpoint.pub`).
    pub fn checkpoint_verifier_file(&self) -> PathBuf {
        self.checkpoint_key_file().with_extension("pub")
    }

    /// The witness's state directory (`witness.state_dir`, else `<data_dir>/witness`).
    pub fn witness_state_dir(&self) -> PathBuf {
        self.witness
            .state_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("witness"))
    }

    /// The witness's cosigning key (`witness.key_file`, else `<state dir>/witness.key`).
    pub fn witness_key_file(&self) -> PathBuf {
        self.witness
            .key_file
            .clone()
            .unwrap_or_else(|| self.witness_state_dir().join("witness.key"))
    }

    /// The local nats-server's JetStream store directory.
    pub fn nats_store_dir(&self) -> PathBuf {
        self.data_dir.join("nats")
    }
}

/// Whether an environment key (`NATS.URL` once figment has split it; case as the variable had it)
/// belongs to a configuration section.
fn is_env_key(key: &str) -> bool {
    let first = key.split('.').next().unwrap_or_default();
    ENV_KEYS.iter().any(|k| k.eq_ignore_ascii_case(first))
}

fn validate_nats_url(url: &str) -> std::result::Result<(), String> {
    for server in url.split(',') {
        let rest = server
            .split_once("://")
            .map(|(scheme, rest)| match scheme {
                "nats" | "tls" | "ws" | "wss" => Ok(rest),
                other => Err(format!(
                    "unsupported scheme `{other}` (expected nats, tls, ws or wss)"
                )),
            })
            .unwrap_or(Ok(server))?;
        let host_port = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
        let (host, port) = host_port
            .rsplit_once(':')
            .ok_or_else(|| format!("`{server}` has no port"))?;
        if host.is_empty() {
            return Err(format!("`{server}` has no host"));
        }
        port.trim_end_matches('/')
            .parse::<u16>()
            .map_err(|_| format!("`{server}` has no valid port"))?;
    }
    Ok(())
}

/// Whether `text` is a SHA-256 digest in hex, as token settings store them.
fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn invalid(key: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Turns figment's error into one that names the key and, for overrides, the variable.
fn config_error(error: figment::Error) -> Error {
    let mut key = error.path.join(".");
    if let Some(name) = error.metadata.as_ref().map(|m| m.name.to_string())
        && name.contains("environment")
    {
        let var = format!("TOOLLEDGER_{}", key.to_ascii_uppercase().replace('.', "__"));
        key = format!("{key} (from {var})");
    }
    if key.is_empty() {
        key = "<root>".to_owned();
    }
    Error::Config {
        key,
        reason: error.kind.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment's own large error
mod tests {
    use super::*;
    use figment::Jail;

    fn load_in(jail: &mut Jail, toml: &str) -> Result<Config> {
        jail.create_file("toolledger.toml", toml).unwrap();
        Config::load(Some(Path::new("toolledger.toml")))
    }

    #[test]
    fn defaults_are_valid() {
        Jail::expect_with(|jail| {
            assert_eq!(load_in(jail, "").unwrap(), Config::default());
            Ok(())
        });
    }

    #[test]
    fn file_then_environment_override() {
        Jail::expect_with(|jail| {
            jail.set_env("TOOLLEDGER_NATS__URL", "nats://b:4223");
            jail.set_env("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0");
            jail.set_env("TOOLLEDGER_VECTORS", "/somewhere/else");
            let config = load_in(
                jail,
                "data_dir = \"/var/lib/toolledger\"\n[nats]\nurl = \"nats://a:4222\"\n",
            )
            .unwrap();
            assert_eq!(config.data_dir, PathBuf::from("/var/lib/toolledger"));
            assert_eq!(config.nats.url.as_deref(), Some("nats://b:4223"));
            assert_eq!(config.telemetry.metrics_listen.port(), 0);
            Ok(())
        });
    }

    #[test]
    fn bad_environment_value_names_the_key_and_variable() {
        Jail::expect_with(|jail| {
            jail.set_env("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "not-an-address");
            let text = load_in(jail, "").unwrap_err().to_string();
            assert!(text.contains("telemetry.metrics_listen"), "{text}");
            assert!(text.contains("TOOLLEDGER_TELEMETRY__METRICS_LISTEN"), "{text}");
            Ok(())
        });
    }

    #[test]
    fn ledger_section_defaults_follow_data_dir_and_take_overrides() {
        Jail::expect_with(|jail| {
            jail.set_env("TOOLLEDGER_LEDGER__CHECKPOINT_EVERY", "5");
            let config = load_in(jail, "data_dir = \"/srv/tl\"\n").unwrap();
            assert_eq!(config.ledger.checkpoint_every, 5);
            assert_eq!(config.tiles_location(), "/srv/tl/tiles");
            assert_eq!(
                config.checkpoint_key_file(),
                PathBuf::from("/srv/tl/keys/checkpoint.key")
            );
            assert_eq!(
                config.checkpoint_verifier_file(),
                PathBuf::from("/srv/tl/keys/checkpoint.pub")
            );
            jail.set_env("TOOLLEDGER_LEDGER__CHECKPOINT_EVERY", "0");
            let text = load_in(jail, "").unwrap_err().to_string();
            assert!(text.contains("ledger.checkpoint_every"), "{text}");
            Ok(())
        });
    }

    #[test]
    fn witness_section_defaults_follow_data_dir_and_is_checked() {
        Jail::expect_with(|jail| {
            let config = load_in(
                jail,
                "data_dir = \"/srv/w\"\n[witness]\nname = \"witness.example/w1\"\n\n[[witness.logs]]\norigin = \"toolledger/ATL_LEDGER\"\nkeys = [\"k+00000000+AQ==\"]\n",
            )
            .unwrap();
            assert_eq!(config.witness_state_dir(), PathBuf::from("/srv/w/witness"));
            assert_eq!(
                config.witness_key_file(),
                PathBuf::from("/srv/w/witness/witness.key")
            );
            assert_eq!(config.witness.logs.len(), 1);
            let text = load_in(jail, "[[witness.logs]]\norigin = \"o\"\nkeys = []\n")
                .unwrap_err()
                .to_string();
            assert!(text.contains("witness.logs"), "{text}");
            let text = load_in(jail, "[witness]\nname = \"a b\"\n")
                .unwrap_err()
                .to_string();
            assert!(text.contains("witness.name"), "{text}");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_inside_a_section_is_refused() {
        Jail::expect_with(|jail| {
            let text = load_in(jail, "[nats]\nurll = \"x\"\n").unwrap_err().to_string();
            assert!(text.contains("urll"), "{text}");
            Ok(())
        });
    }

    #[test]
    fn bad_url_and_filter_name_their_keys() {
        Jail::expect_with(|jail| {
            let text = load_in(jail, "[nats]\nurl = \"http://x:1\"\n")
                .unwrap_err()
                .to_string();
            assert!(text.contains("nats.url"), "{text}");
            let text = load_in(jail, "[telemetry]\nlog_filter = \"[=\"\n")
                .unwrap_err()
                .to_string();
            assert!(text.contains("telemetry.log_filter"), "{text}");
            Ok(())
        });
    }
}
