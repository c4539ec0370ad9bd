//! Secret scrubbing (DESIGN §5): secrets never reach the ledger.
//!
//! ```text
//! event JSON ─▶ Scrubber::scrub ─▶ event JSON with {"$scrubbed": "hmac-sha256:<hex>"} markers
//!                 │                 and [scrubbed:hmac-sha256:<16 hex>] inside strings
//!                 │  └─▶ sorted JSON Pointers of the replaced values  (ledger.scrubbed_paths)
//!                 └─ tool.declared ─▶ SensitivityRegistry (tenant, tool_id) → sensitive fields
//! ```
//!
//! A scrubbed value is replaced by `{"$scrubbed": "hmac-sha256:<hex>"}`, the HMAC-SHA256 of the value's
//! RFC 8785 bytes under a key kept outside the ledger ([`ScrubKey`], a file under the data directory,
//! created once with mode 0600 and never overwritten). Equal secrets give equal markers, so an auditor
//! can tell that two calls used the same credential without learning it; without the key a marker
//! reveals nothing (the key is random, 256 bits).
//!
//! **A secret inside a longer string** (a command line, a URL, a result's text) is replaced in place by
//! the textual marker `[scrubbed:hmac-sha256:<16 hex>]`: the first 16 hex digits of the HMAC of the
//! secret as a JSON string, so it is the prefix of the whole-value marker the same secret would get.
//! The rest of the string stays: `curl -H 'Authorization: Bearer [scrubbed:…]' https://api…` still says
//! what was called, which is what the ledger is for, where replacing the whole string would erase the
//! call's meaning along with its credential. The string's pointer is listed like any other. Strings
//! that must stay strings (extension attributes, `source`) take a textual marker even when the whole
//! value is the secret. 64 bits of the HMAC tell equal secrets apart as well as 256 in practice, and
//! keep the text readable.
//!
//! What is secret, all under the event's `data` unless said otherwise:
//! - **OTC context**: in any object that has a `context` object (an Open Tool Calling tool request
//!   anywhere in `data`, e.g. a `call_input`), the values of `context.authorization` and
//!   `context.secrets`, each replaced whole.
//! - **Bearer tokens**: any string that is `Bearer <token>` (case-insensitive, token at least 8
//!   characters), wherever it sits, replaced whole.
//! - **Credential headers**: in any headers-like object (the value of a key whose name ends in
//!   `headers`, case-insensitive: `headers`, `request_headers`, `requestHeaders`), the values of
//!   credential-shaped names ([`is_credential_header`]: `authorization`, `proxy-authorization`, `cookie`,
//!   `x-api-key`, names with `token`, `secret`, `password`, …), also when the headers are a list of
//!   `{name, value}` pairs; replaced whole.
//! - **Credential names**: any property whose name says it holds a credential
//!   ([`shapes::is_credential_name`]: `password`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`,
//!   `clientSecret`, `GITHUB_TOKEN`, … — in `env` objects and anywhere else), replaced whole when the
//!   value is a non-empty string or a number; an object or array under such a name is walked, not
//!   replaced, because a declaration's input schema names its properties that way too.
//! - **Shapes inside strings**: every string is searched by the detectors of [`shapes`] (`Bearer`/`Basic`
//!   credentials, header lines, `NAME=value` assignments and query parameters, quoted `"name": "value"`
//!   members, `name: value` config lines, URL userinfo, known token prefixes, PEM private keys); only the
//!   secret's span is replaced.
//! - **Attributes**: the event's extension attributes other than the ones the ledger reads
//!   ([`toolledger_wire::decode::CONTRACT_EXTENSIONS`]: `tenant`, `sessionid`, `invocationid`, `toolid`,
//!   `traceparent`, `tracestate`) are scrubbed like properties (a credential name → the whole value; a
//!   string → its shapes), and `source` by the shapes (`https://user:password@host` keeps
//!   `https://[scrubbed:…]@host`). The other core attributes are left as they are: `id`, `type`,
//!   `specversion`, `time`, `datacontenttype` are validated shapes, `subject` and `dataschema` name
//!   things the projections key on. `source` is part of the event's identity: ingest computes the
//!   identity from the scrubbed `source`, the one the entry holds, so the identity index rebuilt from
//!   the ledger agrees with the one built while appending.
//! - **Envelope fields** ([`Scrubber::scrub_envelope_fields`]): an agenttool-event's fields with no
//!   CloudEvents counterpart, kept in the entry's `ledger.envelope_fields`, are scrubbed by the rules
//!   above (they are that origin's extension attributes); their pointers are listed as
//!   `/ledger/envelope_fields/…`, which no event pointer can be (extension values are scalars).
//! - **Configured paths**: JSON Pointers into the whole event from the deployment config
//!   ([`ScrubConfig::paths`]); a `*` segment matches any key or index.
//! - **Declared sensitive fields**: the `input_contract.sensitive_fields` of the tool's latest
//!   `tool.declared` event, applied to the invocation inputs (`model_input`, `observable_input`,
//!   `permission_input`, `call_input`, `updated_input`, and the same keys inside `input_mutations` and
//!   `suggested_updates` items) of events of that tenant whose tool id is known (the `toolid` extension,
//!   `data.tool_id`, or the tool of an invocation id seen earlier). A plain name matches a property of
//!   that name at any depth of the input; a JSON Pointer (`/headers/authorization`) is taken from the
//!   input's root.
//!
//! **Ordering caveat.** Declared sensitivity is only as good as what the scrubber has seen: an
//! invocation that arrives before its tool's declaration (or after a restart, before the registry is
//! rebuilt from the ledger with [`Scrubber::observe`]) is not scrubbed by declaration sensitivity. The
//! other rules do not depend on order. Deployments that cannot guarantee declarations first should list
//! such fields as configured paths too.
//!
//! Markers are opaque: a value that already is a marker, or a string that already holds a textual
//! marker, is left as it is and listed, wherever it is, so scrubbing is idempotent (same event, same
//! paths). (A producer's own text that looks like a textual marker is listed too: it is text, and
//! refusing it would refuse a tool result that quotes the ledger.)

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

pub mod shapes;

/// The key of a scrubbed marker object.
pub const SCRUBBED_KEY: &str = "$scrubbed";

/// The prefix of a marker's value.
pub const MARKER_PREFIX: &str = "hmac-sha256:";

/// The start of a textual marker, `[scrubbed:hmac-sha256:<16 hex>]`, which replaces a secret inside a
/// string.
pub const TEXT_MARKER_PREFIX: &str = "[scrubbed:hmac-sha256:";

/// How many hex digits of the HMAC a textual marker keeps.
const TEXT_MARKER_HEX: usize = 16;

/// The key file's name under the data directory.
pub const KEY_FILE_NAME: &str = "scrub-hmac.key";

/// The invocation inputs declared sensitivity applies to.
const INPUT_KEYS: &[&str] = &[
    "model_input",
    "observable_input",
    "permission_input",
    "call_input",
    "updated_input",
];

/// How many invocation → tool mappings the scrubber remembers (for events that name only the invocation).
/// Bounded so a long-running ingest does not grow without limit; an evicted invocation falls back to the
/// event's own tool id.
const REMEMBERED_INVOCATIONS: usize = 100_000;

/// The HMAC key scrubbing uses; never stored in the ledger.
#[derive(Clone)]
pub struct ScrubKey([u8; 32]);

impl std::fmt::Debug for ScrubKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScrubKey(..)")
    }
}

impl ScrubKey {
    /// A key from raw bytes (tests, or a key management system).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Error::ScrubKey {
            path: PathBuf::new(),
            reason: format!("random: {e}"),
        })?;
        Ok(Self(bytes))
    }

    /// Loads the key from `path` (64 hex digits), or creates it there (mode 0600, create-only) when
    /// the file does not exist. An existing file is never overwritten: a changed key would make equal
    /// secrets give different markers across restarts.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        let err = |reason: String| Error::ScrubKey {
            path: path.to_owned(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse(text.trim()).map_err(err),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e.to_string())),
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
        }
        let key = Self::generate()?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                let text = format!("{}\n", toolledger_wire::entry::hex(&key.0));
                file.write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| err(e.to_string()))?;
                Ok(key)
            }
            // Another process created it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
                Self::parse(text.trim()).map_err(err)
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// A fingerprint that tells keys apart and reveals nothing of them: the first 16 bytes of
    /// HMAC-SHA256 under the key of a fixed label, hex.
    pub fn fingerprint(&self) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"toolledger scrub-hmac.key fingerprint");
        toolledger_wire::entry::hex(&mac.finalize().into_bytes()[..16])
    }

    fn parse(text: &str) -> std::result::Result<Self, String> {
        if text.len() != 64 || !text.is_ascii() {
            return Err(format!("expected 64 hex digits, found {} characters", text.len()));
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| "not hex".to_owned())?;
        }
        Ok(Self(bytes))
    }
}

/// Deployment configuration of the scrubber.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubConfig {
    /// JSON Pointers into the whole event (`/data/call_input/password`) whose values are always
    /// scrubbed; a `*` segment matches any key or index.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// Sensitive fields of one tool declaration: property names and JSON Pointers into an input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SensitiveFields {
    /// Property names, matched at any depth of an input.
    pub names: BTreeSet<String>,
    /// JSON Pointers from an input's root, as reference-token lists.
    pub pointers: BTreeSet<Vec<String>>,
}

impl SensitiveFields {
    /// Reads `input_contract.sensitive_fields` of a declaration; entries that are not strings are
    /// ignored (the official schema does not constrain the field).
    pub fn from_declaration(declaration: &Value) -> Self {
        let mut fields = Self::default();
        let Some(list) = declaration
            .pointer("/input_contract/sensitive_fields")
            .and_then(Value::as_array)
        else {
            return fields;
        };
        for entry in list.iter().filter_map(Value::as_str) {
            if entry.starts_with('/') {
                fields.pointers.insert(pointer_tokens(entry));
            } else if !entry.is_empty() {
                fields.names.insert(entry.to_owned());
            }
        }
        fields
    }

    /// True when nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.pointers.is_empty()
    }
}

/// An invocation as the registry remembers it: the first 16 bytes of SHA-256 over the
/// length-prefixed tenant and invocation id. A remembered invocation costs ~50 bytes instead of four
/// owned strings (~300 bytes), which was most of ingest's RSS growth in the soak: the registry fills
/// towards [`REMEMBERED_INVOCATIONS`] for about a quarter of an hour at 1,000 events/s.
type InvocationKey = [u8; 16];

fn invocation_key(tenant: &str, invocation: &str) -> InvocationKey {
    let mut hasher = Sha256::new();
    for field in [tenant, invocation] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    let digest = hasher.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// What each tool's latest declaration lists as sensitive, per tenant. Not `Clone`: the shared tool ids
/// are freed by reference count, which a clone would hold up.
#[derive(Debug, Default)]
pub struct SensitivityRegistry {
    /// Tenant → tool id → its sensitive fields: nested, so looking one up takes the names as they
    /// are, without owned copies (every event with a tool id is looked up).
    tools: HashMap<String, HashMap<String, SensitiveFields>>,
    /// Invocation → the tool id it named, shared from [`Self::tool_ids`].
    invocations: HashMap<InvocationKey, Arc<str>>,
    invocation_order: VecDeque<InvocationKey>,
    /// Every tool id an invocation named, once (as many as there are tools, not invocations).
    tool_ids: HashSet<Arc<str>>,
}

impl SensitivityRegistry {
    /// Records a `tool.declared` event's sensitive fields (a later declaration replaces an earlier one),
    /// and remembers which tool an invocation id belongs to. Other events are ignored. Returns true
    /// when the event was a declaration.
    pub fn observe(&mut self, event: &Value) -> bool {
        let Some(tenant) = event.get("tenant").and_then(Value::as_str) else {
            return false;
        };
        let data = event.get("data").unwrap_or(&Value::Null);
        if event.get("type").and_then(Value::as_str) == Some("tool.declared") {
            let Some(tool_id) = data
                .get("tool_id")
                .or_else(|| event.get("toolid"))
                .and_then(Value::as_str)
            else {
                return false;
            };
            let fields = SensitiveFields::from_declaration(data);
            self.tools
                .entry(tenant.to_owned())
                .or_default()
                .insert(tool_id.to_owned(), fields);
            return true;
        }
        let invocation = event
            .get("invocationid")
            .or_else(|| data.get("invocation_id"))
            .and_then(Value::as_str);
        let tool = event
            .get("toolid")
            .or_else(|| data.get("tool_id"))
            .and_then(Value::as_str);
        if let (Some(invocation), Some(tool)) = (invocation, tool) {
            let key = invocation_key(tenant, invocation);
            let tool = match self.tool_ids.get(tool) {
                Some(known) => Arc::clone(known),
                None => {
                    let new: Arc<str> = Arc::from(tool);
                    self.tool_ids.insert(Arc::clone(&new));
                    new
                }
            };
            match self.invocations.insert(key, tool) {
                Some(previous) => self.release(previous),
                None => self.invocation_order.push_back(key),
            }
            while self.invocation_order.len() > REMEMBERED_INVOCATIONS {
                if let Some(old) = self.invocation_order.pop_front()
                    && let Some(tool) = self.invocations.remove(&old)
                {
                    self.release(tool);
                }
            }
        }
        false
    }

    /// Drops a remembered invocation's tool id; the last invocation naming a tool takes its id along.
    fn release(&mut self, tool: Arc<str>) {
        // Held by `tool_ids` and by `tool`, nobody else.
        if Arc::strong_count(&tool) == 2 {
            self.tool_ids.remove(&tool);
        }
    }

    /// How many invocations and distinct tool ids the registry remembers.
    pub fn remembered(&self) -> (usize, usize) {
        (self.invocations.len(), self.tool_ids.len())
    }

    /// The sensitive fields of `tool_id` in `tenant`, if it was declared.
    pub fn fields(&self, tenant: &str, tool_id: &str) -> Option<&SensitiveFields> {
        self.tools.get(tenant)?.get(tool_id)
    }

    /// The sensitive fields that apply to `event`, found through its tool id.
    fn for_event(&self, event: &Value) -> Option<&SensitiveFields> {
        let tenant = event.get("tenant").and_then(Value::as_str)?;
        let data = event.get("data").unwrap_or(&Value::Null);
        let tool = event
            .get("toolid")
            .or_else(|| data.get("tool_id"))
            .and_then(Value::as_str)
            .or_else(|| {
                let invocation = event
                    .get("invocationid")
                    .or_else(|| data.get("invocation_id"))
                    .and_then(Value::as_str)?;
                self.invocations
                    .get(&invocation_key(tenant, invocation))
                    .map(|tool| &**tool)
            })?;
        self.fields(tenant, tool).filter(|f| !f.is_empty())
    }
}

/// Replaces secrets in events by HMAC markers.
#[derive(Debug)]
pub struct Scrubber {
    /// The HMAC keyed once: each marker starts from a copy instead of hashing the key again.
    mac: Hmac<Sha256>,
    paths: Vec<Vec<String>>,
    registry: SensitivityRegistry,
    /// Whether credential names, shapes inside strings, attributes and envelope fields are scrubbed
    /// (always, but for the benchmark that prices them).
    shapes: bool,
    /// The key's [`ScrubKey::fingerprint`]: the key this scrubber holds, whatever the file says now.
    fingerprint: String,
}

/// What a walk found: values to replace whole, strings with secrets inside, strings already holding
/// textual markers.
#[derive(Default)]
struct Targets {
    whole: BTreeSet<Vec<String>>,
    spans: Vec<(Vec<String>, Vec<Range<usize>>)>,
    marked: Vec<Vec<String>>,
}

impl Scrubber {
    /// A scrubber with `key` and the deployment's configured paths.
    pub fn new(key: ScrubKey, config: &ScrubConfig) -> Self {
        Self {
            fingerprint: key.fingerprint(),
            mac: <Hmac<Sha256> as Mac>::new_from_slice(&key.0)
                .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length")),
            paths: config.paths.iter().map(|p| pointer_tokens(p)).collect(),
            registry: SensitivityRegistry::default(),
            shapes: true,
        }
    }

    /// A scrubber whose key is `<data_dir>/scrub-hmac.key` (created on first use).
    pub fn open(data_dir: &Path, config: &ScrubConfig) -> Result<Self> {
        Ok(Self::new(
            ScrubKey::load_or_create(&data_dir.join(KEY_FILE_NAME))?,
            config,
        ))
    }

    /// This scrubber without credential names, shapes inside strings, attributes and envelope fields:
    /// the rules as they were before issue 28. Only for `examples/scrub_cost.rs`, which prices them.
    #[doc(hidden)]
    pub fn without_shapes(mut self) -> Self {
        self.shapes = false;
        self
    }

    /// The fingerprint of the key this scrubber marks secrets with.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The registry of declared sensitive fields.
    pub fn registry(&self) -> &SensitivityRegistry {
        &self.registry
    }

    /// Feeds an already-ingested event (a ledger entry's `event`) to the registry without scrubbing:
    /// how ingest rebuilds declared sensitivity from the ledger at startup.
    pub fn observe(&mut self, event: &Value) {
        self.registry.observe(event);
    }

    /// Scrubs an accepted event in place (after validation) and learns from it: a `tool.declared`
    /// updates the registry first. Returns the scrubbed JSON Pointers, sorted and unique, for
    /// `ledger.scrubbed_paths`.
    pub fn scrub(&mut self, event: &mut Value) -> Vec<String> {
        self.registry.observe(event);
        self.scrub_only(event)
    }

    /// [`Self::scrub`] for an event ingest's check accepted, which holds no marker: check refuses
    /// any `$scrubbed` object in `data` (`reserved_marker`), and attributes are never objects. So
    /// the walk for markers already there, which would find none, is left out; everything else is
    /// [`Self::scrub`]'s.
    pub(crate) fn scrub_accepted(&mut self, event: &mut Value) -> Vec<String> {
        self.registry.observe(event);
        self.scrub_with(event, false)
    }

    /// Scrubs without learning: for quarantined originals, which must not change the registry.
    pub fn scrub_only(&self, event: &mut Value) -> Vec<String> {
        self.scrub_with(event, true)
    }

    /// [`Self::scrub_only`]; `markers` says whether to look for markers already in the event.
    fn scrub_with(&self, event: &mut Value, markers: bool) -> Vec<String> {
        // Attributes first: one replaced whole takes whatever was under it along.
        let mut scrubbed = BTreeSet::new();
        if self.shapes {
            self.scrub_attributes(event, &mut scrubbed);
        }
        let mut targets = Targets::default();
        if let Value::Object(_) = event {
            // Values scrubbed before (a re-scrub, or a stored entry) stay listed: scrubbing is idempotent.
            if markers {
                find_markers(event, &mut Vec::new(), &mut targets.whole);
            }
            // Configured paths address the whole event.
            for pattern in &self.paths {
                expand_pattern(event, pattern, &mut Vec::new(), &mut targets.whole);
            }
            if let Some(data) = event.get("data") {
                let mut at = vec![Cow::Borrowed("data")];
                find_generic(data, self.shapes, &mut at, &mut targets);
                if let Some(fields) = self.registry.for_event(event) {
                    find_declared(data, fields, &mut at, &mut targets.whole);
                }
            }
        }
        scrubbed.extend(self.apply(event, targets));
        scrubbed.iter().map(|t| to_pointer(t)).collect()
    }

    /// Scrubs an agenttool-event's envelope fields (the entry's `ledger.envelope_fields`) by the
    /// rules that apply under `data`; returns the pointers, `/ledger/envelope_fields/…`, sorted.
    pub fn scrub_envelope_fields(&self, fields: &mut Map<String, Value>) -> Vec<String> {
        if !self.shapes {
            return Vec::new();
        }
        let mut value = Value::Object(std::mem::take(fields));
        let mut targets = Targets::default();
        find_markers(&value, &mut Vec::new(), &mut targets.whole);
        find_generic(&value, true, &mut Vec::new(), &mut targets);
        let scrubbed = self.apply(&mut value, targets);
        if let Value::Object(map) = value {
            *fields = map;
        }
        scrubbed
            .iter()
            .map(|t| format!("/ledger/envelope_fields{}", to_pointer(t)))
            .collect()
    }

    /// Replaces what a walk found; returns the paths of everything scrubbed (found before or now).
    fn apply(&self, root: &mut Value, targets: Targets) -> BTreeSet<Vec<String>> {
        // Replace outermost first; a target under an already replaced one is covered by it.
        let mut done: Vec<Vec<String>> = Vec::new();
        for target in targets.whole {
            if done.iter().any(|d| target.starts_with(d)) {
                continue;
            }
            if let Some(slot) = pointer_mut(root, &target) {
                if !is_marker(slot) {
                    *slot = self.marker(slot);
                }
                done.push(target);
            }
        }
        let covered = |path: &[String], done: &[Vec<String>]| done.iter().any(|d| path.starts_with(d));
        let mut scrubbed: BTreeSet<Vec<String>> = BTreeSet::new();
        for path in targets.marked {
            if !covered(&path, &done) {
                scrubbed.insert(path);
            }
        }
        for (path, ranges) in targets.spans {
            if covered(&path, &done) {
                continue;
            }
            if let Some(Value::String(text)) = pointer_mut(root, &path) {
                *text = self.replace_spans(text, &ranges);
                scrubbed.insert(path);
            }
        }
        scrubbed.extend(done);
        scrubbed
    }

    /// Extension attributes and `source` (module doc): top-level members that must stay strings.
    fn scrub_attributes(&self, event: &mut Value, scrubbed: &mut BTreeSet<Vec<String>>) {
        let Value::Object(map) = event else {
            return;
        };
        for (name, value) in map.iter_mut() {
            let extension = is_scrubbed_extension(name);
            if !(extension || name == "source") {
                continue;
            }
            let whole = extension && shapes::is_credential_name(name);
            let replaced = match value {
                Value::String(text) if whole && !text.is_empty() => {
                    if !is_text_marker(text) {
                        *text = self.text_marker(text);
                    }
                    true
                }
                Value::String(text) => match self.scrub_text(text) {
                    Cow::Owned(clean) => {
                        *text = clean;
                        true
                    }
                    Cow::Borrowed(_) => text.contains(TEXT_MARKER_PREFIX),
                },
                Value::Number(number) if whole => {
                    *value = Value::String(self.text_marker(&number.to_string()));
                    true
                }
                // Only in a quarantined body: no CloudEvent holds an object attribute.
                Value::Object(_) | Value::Array(_) if whole => {
                    if !is_marker(value) {
                        *value = self.marker(value);
                    }
                    true
                }
                _ => false,
            };
            if replaced {
                scrubbed.insert(vec![name.clone()]);
            }
        }
    }

    /// `text` with every secret the [`shapes`] detectors find replaced by its textual marker;
    /// borrowed when there was none. What a quarantined body that does not parse keeps, and what
    /// header values of quarantined originals keep.
    pub fn scrub_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let found = shapes::find(text);
        if found.is_empty() {
            return Cow::Borrowed(text);
        }
        let ranges: Vec<Range<usize>> = found.into_iter().map(|f| f.range).collect();
        Cow::Owned(self.replace_spans(text, &ranges))
    }

    /// `text` with `ranges` replaced by their markers, then with whatever the detectors find in the
    /// result, until they find nothing: a marker can end a run a detector stopped short of before
    /// (`Basic <base64>-----BEGIN PRIVATE KEY…` is a `Basic` credential once the key is a marker), and
    /// a second scrub must change nothing. Each round replaces text outside markers, so it ends.
    fn replace_spans(&self, text: &str, ranges: &[Range<usize>]) -> String {
        let mut out = self.replace_once(text, ranges);
        for _ in 0..64 {
            let more: Vec<Range<usize>> = shapes::find(&out).into_iter().map(|f| f.range).collect();
            if more.is_empty() {
                break;
            }
            out = self.replace_once(&out, &more);
        }
        out
    }

    fn replace_once(&self, text: &str, ranges: &[Range<usize>]) -> String {
        let mut out = String::with_capacity(text.len() + ranges.len() * 40);
        let mut at = 0;
        for range in ranges {
            out.push_str(&text[at..range.start]);
            out.push_str(&self.text_marker(&text[range.clone()]));
            at = range.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// The textual marker of `secret`: `[scrubbed:hmac-sha256:<16 hex>]`, the first hex digits of the
    /// marker the string `secret` would get whole.
    pub fn text_marker(&self, secret: &str) -> String {
        let mut bytes = Vec::with_capacity(secret.len() + 2);
        toolledger_wire::jcs::write_string(&mut bytes, secret);
        let hex = toolledger_wire::entry::hex(&self.hmac(&bytes)[..TEXT_MARKER_HEX / 2]);
        format!("{TEXT_MARKER_PREFIX}{hex}]")
    }

    /// The marker that replaces `value`: `{"$scrubbed": "hmac-sha256:<hex>"}`.
    pub fn marker(&self, value: &Value) -> Value {
        let bytes = toolledger_wire::jcs::to_vec(value)
            .unwrap_or_else(|_| serde_json::to_vec(value).unwrap_or_default());
        let mut marker = Map::new();
        marker.insert(
            SCRUBBED_KEY.to_owned(),
            Value::String(format!(
                "{MARKER_PREFIX}{}",
                toolledger_wire::entry::hex(&self.hmac(&bytes))
            )),
        );
        Value::Object(marker)
    }

    fn hmac(&self, bytes: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(bytes);
        mac.finalize().into_bytes().into()
    }
}

/// True for a string that is exactly one textual marker.
fn is_text_marker(text: &str) -> bool {
    text.strip_prefix(TEXT_MARKER_PREFIX)
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|hex| hex.len() == TEXT_MARKER_HEX && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// True for `{"$scrubbed": "hmac-sha256:…"}`.
pub fn is_marker(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.len() == 1
                && map
                    .get(SCRUBBED_KEY)
                    .and_then(Value::as_str)
                    .is_some_and(|s| s.starts_with(MARKER_PREFIX))
        }
        _ => false,
    }
}

/// Whether the attribute `name` is an extension that scrubbing reads: not a core attribute (`id`,
/// `type`, `source`, …, `data`) and not one the ledger reads ([`toolledger_wire::decode::CONTRACT_EXTENSIONS`]:
/// `tenant`, `sessionid`, `invocationid`, `toolid`, `traceparent`, `tracestate`).
fn is_scrubbed_extension(name: &str) -> bool {
    !toolledger_wire::event::ATTRIBUTES.contains(&name)
        && !toolledger_wire::decode::CONTRACT_EXTENSIONS.contains(&name)
        && name != "data"
}

/// Whether an event attribute (`apikey`, `authorization`; lowercase, as CloudEvents names are) holds
/// a credential whole: an extension scrubbing reads, with a credential-shaped name. The rule
/// [`Scrubber::scrub`] applies to attributes, for where an attribute travels on its own: a binary-mode
/// `ce-*` header of a quarantined original.
pub fn is_credential_attribute(name: &str) -> bool {
    is_scrubbed_extension(name) && shapes::is_credential_name(name)
}

/// True for header names that carry credentials (case-insensitive).
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase().replace('_', "-");
    const EXACT: &[&str] = &[
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "apikey",
        "x-amz-security-token",
        "x-goog-api-key",
    ];
    const PARTS: &[&str] = &[
        "token",
        "secret",
        "password",
        "passwd",
        "api-key",
        "apikey",
        "credential",
        "auth",
        "session",
        "signature",
    ];
    EXACT.contains(&name.as_str()) || PARTS.iter().any(|p| name.contains(p))
}

/// True for `Bearer <token>` strings.
fn is_bearer(text: &str) -> bool {
    let text = text.trim_start();
    let Some(prefix) = text.get(..7) else {
        return false;
    };
    if !prefix.eq_ignore_ascii_case("bearer ") {
        return false;
    }
    let token = text[7..].trim();
    token.len() >= 8 && !token.contains(char::is_whitespace)
}

/// `headers`, `request_headers`, `response-headers`, `requestHeaders`: any name ending in `headers`.
fn is_headers_key(key: &str) -> bool {
    key.len() >= 7 && key.as_bytes()[key.len() - 7..].eq_ignore_ascii_case(b"headers")
}

/// A location being walked: keys borrowed from the value (or the pattern), array indices written
/// out. Made owned only for a hit.
type Walk<'a> = Vec<Cow<'a, str>>;

fn owned(at: &[Cow<'_, str>]) -> Vec<String> {
    at.iter().map(|token| token.to_string()).collect()
}

/// OTC context, bearer tokens and credential headers, anywhere under `value`; with `shapes`, also
/// credential names and secrets inside strings.
fn find_generic<'a>(value: &'a Value, shapes: bool, at: &mut Walk<'a>, out: &mut Targets) {
    if is_marker(value) {
        return;
    }
    match value {
        Value::String(s) if is_bearer(s) => {
            out.whole.insert(owned(at));
        }
        Value::String(s) if shapes => {
            let scan = shapes::scan(s);
            if !scan.found.is_empty() {
                out.spans
                    .push((owned(at), scan.found.into_iter().map(|f| f.range).collect()));
            } else if scan.marked {
                out.marked.push(owned(at));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Cow::Owned(i.to_string()));
                find_generic(item, shapes, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            if let Some(Value::Object(context)) = map.get("context") {
                for key in ["authorization", "secrets"] {
                    if context.contains_key(key) {
                        let mut path = owned(at);
                        path.push("context".to_owned());
                        path.push(key.to_owned());
                        out.whole.insert(path);
                    }
                }
            }
            for (key, child) in map {
                at.push(Cow::Borrowed(key));
                if shapes && shapes::is_credential_name(key) && holds_a_secret(child) {
                    // Replaced whole: nothing under it needs a look.
                    out.whole.insert(owned(at));
                    at.pop();
                    continue;
                }
                if is_headers_key(key) {
                    find_credential_headers(child, at, &mut out.whole);
                }
                find_generic(child, shapes, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Whether a credential-named value is replaced whole: a non-empty string or a number. An object or
/// an array is walked instead, its members judged by their own names and shapes: a declaration's
/// input schema names its properties `api_key` and `password` too (`{"api_key": {"type": "string"}}`).
/// Null, booleans (`has_password`) and empty strings hide nothing.
fn holds_a_secret(value: &Value) -> bool {
    match value {
        Value::String(s) => !s.is_empty(),
        Value::Number(_) => true,
        _ => false,
    }
}

/// Every marker already in `value`.
fn find_markers<'a>(value: &'a Value, at: &mut Walk<'a>, out: &mut BTreeSet<Vec<String>>) {
    if is_marker(value) {
        out.insert(owned(at));
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                at.push(Cow::Borrowed(key));
                find_markers(child, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push(Cow::Owned(i.to_string()));
                find_markers(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Credential-shaped entries of a headers-like value: an object, or a list of `{name, value}` pairs.
fn find_credential_headers(headers: &Value, at: &[Cow<'_, str>], out: &mut BTreeSet<Vec<String>>) {
    let mut add = |tail: &[&str]| {
        let mut path = owned(at);
        path.extend(tail.iter().map(|s| (*s).to_owned()));
        out.insert(path);
    };
    match headers {
        Value::Object(map) => {
            for key in map.keys().filter(|k| is_credential_header(k)) {
                add(&[key.as_str()]);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let name = item
                    .get("name")
                    .or_else(|| item.get("key"))
                    .and_then(Value::as_str);
                if name.is_some_and(is_credential_header) && item.get("value").is_some() {
                    add(&[i.to_string().as_str(), "value"]);
                }
            }
        }
        _ => {}
    }
}

/// Declared sensitive fields, inside every invocation input of `data`.
fn find_declared<'a>(
    data: &'a Value,
    fields: &'a SensitiveFields,
    at: &mut Walk<'a>,
    out: &mut BTreeSet<Vec<String>>,
) {
    let Value::Object(map) = data else {
        return;
    };
    for key in INPUT_KEYS.iter().chain(&["input"]) {
        if let Some(input) = map.get(*key) {
            at.push(Cow::Borrowed(*key));
            find_in_input(input, fields, at, out);
            at.pop();
        }
    }
    for list in ["input_mutations", "suggested_updates"] {
        let Some(Value::Array(items)) = map.get(list) else {
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            let Value::Object(item) = item else {
                continue;
            };
            for (key, input) in item {
                if INPUT_KEYS.contains(&key.as_str()) || key == "input" || key.ends_with("_input") {
                    at.extend([
                        Cow::Borrowed(list),
                        Cow::Owned(i.to_string()),
                        Cow::Borrowed(key.as_str()),
                    ]);
                    find_in_input(input, fields, at, out);
                    at.truncate(at.len() - 3);
                }
            }
        }
    }
}

fn find_in_input<'a>(
    input: &'a Value,
    fields: &'a SensitiveFields,
    at: &mut Walk<'a>,
    out: &mut BTreeSet<Vec<String>>,
) {
    for pointer in &fields.pointers {
        expand_pattern_from(input, pointer, at, out);
    }
    find_names(input, &fields.names, at, out);
}

fn find_names<'a>(
    value: &'a Value,
    names: &BTreeSet<String>,
    at: &mut Walk<'a>,
    out: &mut BTreeSet<Vec<String>>,
) {
    if names.is_empty() || is_marker(value) {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                at.push(Cow::Borrowed(key));
                if names.contains(key) {
                    out.insert(owned(at));
                } else {
                    find_names(child, names, at, out);
                }
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Cow::Owned(i.to_string()));
                find_names(item, names, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Every existing location under the event root matching `pattern` (`*` = any key or index).
fn expand_pattern<'a>(
    root: &'a Value,
    pattern: &'a [String],
    at: &mut Walk<'a>,
    out: &mut BTreeSet<Vec<String>>,
) {
    expand_pattern_from(root, pattern, at, out);
}

fn expand_pattern_from<'a>(
    value: &'a Value,
    pattern: &'a [String],
    at: &mut Walk<'a>,
    out: &mut BTreeSet<Vec<String>>,
) {
    let Some((head, rest)) = pattern.split_first() else {
        out.insert(owned(at));
        return;
    };
    if is_marker(value) {
        return;
    }
    let mut step = |key: Cow<'a, str>, child: &'a Value, at: &mut Walk<'a>| {
        at.push(key);
        expand_pattern_from(child, rest, at, out);
        at.pop();
    };
    match value {
        Value::Object(map) => {
            if head == "*" {
                for (k, child) in map {
                    step(Cow::Borrowed(k), child, at);
                }
            } else if let Some(child) = map.get(head) {
                step(Cow::Borrowed(head), child, at);
            }
        }
        Value::Array(items) => {
            if head == "*" {
                for (i, child) in items.iter().enumerate() {
                    step(Cow::Owned(i.to_string()), child, at);
                }
            } else if let Some(child) = array_index(head).and_then(|i| items.get(i)) {
                step(Cow::Borrowed(head), child, at);
            }
        }
        _ => {}
    }
}

fn array_index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

fn pointer_mut<'a>(value: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens.iter().try_fold(value, |v, token| match v {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => array_index(token).and_then(move |i| items.get_mut(i)),
        _ => None,
    })
}

/// The reference tokens of a JSON Pointer (RFC 6901), unescaped.
pub(crate) fn pointer_tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// A JSON Pointer from reference tokens.
pub(crate) fn to_pointer(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_event_scrubs_as_any_event_does() {
        // The bench's workload, with secrets in data and attributes: no marker in any of them, as
        // in every event check accepts.
        let mut events = toolledger_schemas::generator::workload(&["acme", "globex"], 400, 1);
        for (i, event) in events.iter_mut().enumerate().filter(|(i, _)| i % 3 == 0) {
            event["source"] = Value::from(format!("https://bot:s3cretPassw0rd{i}@ci.example.com"));
            event["apikey"] = Value::from("apikey-0123456789abcdef");
            event["data"]["context"] = serde_json::json!({"authorization": "Bearer abcdefgh12345678"});
        }
        let config = ScrubConfig {
            paths: vec!["/data/*/token".to_owned()],
        };
        let mut any = Scrubber::new(ScrubKey::from_bytes([7; 32]), &config);
        let mut accepted = Scrubber::new(ScrubKey::from_bytes([7; 32]), &config);
        for event in events {
            let (mut a, mut b) = (event.clone(), event);
            assert_eq!(accepted.scrub_accepted(&mut a), any.scrub(&mut b));
            assert_eq!(a, b);
        }
    }

    #[test]
    fn pointers_round_trip_escapes() {
        let tokens = pointer_tokens("/a~1b/c~0d/0");
        assert_eq!(tokens, vec!["a/b", "c~d", "0"]);
        assert_eq!(to_pointer(&tokens), "/a~1b/c~0d/0");
    }

    #[test]
    fn remembered_invocations_stay_bounded_and_take_their_tool_ids_along() {
        let mut registry = SensitivityRegistry::default();
        let event = |tenant: &str, invocation: String, tool: String| {
            serde_json::json!({"tenant": tenant, "type": "tool.invocation.started",
                "invocationid": invocation, "toolid": tool, "data": {}})
        };
        let extra = 50;
        for i in 0..REMEMBERED_INVOCATIONS + extra {
            // Every invocation names a tool of its own: the worst case for the tool ids too.
            registry.observe(&event("acme", format!("inv-{i}"), format!("tool-{i}")));
        }
        assert_eq!(
            registry.remembered(),
            (REMEMBERED_INVOCATIONS, REMEMBERED_INVOCATIONS),
            "the oldest invocations and their tools are forgotten"
        );
        // The same invocation id in another tenant is another invocation.
        registry.observe(&event(
            "globex",
            format!("inv-{}", REMEMBERED_INVOCATIONS),
            "other".into(),
        ));
        let newest = format!("inv-{}", REMEMBERED_INVOCATIONS + extra - 1);
        assert_eq!(
            registry
                .invocations
                .get(&invocation_key("acme", &newest))
                .map(|t| t.to_string()),
            Some(format!("tool-{}", REMEMBERED_INVOCATIONS + extra - 1))
        );
        assert!(
            !registry
                .invocations
                .contains_key(&invocation_key("acme", "inv-0"))
        );
        // An invocation that names another tool later replaces it and frees the old id.
        let (_, tools) = registry.remembered();
        registry.observe(&event("acme", newest, "shared".into()));
        assert_eq!(registry.remembered().1, tools, "one id freed, one added");
    }

    #[test]
    fn bearer_needs_a_token() {
        assert!(is_bearer("Bearer abcdefgh123"));
        assert!(is_bearer("  bearer abcdefgh123"));
        assert!(!is_bearer("Bearer tokens are short-lived credentials"));
        assert!(!is_bearer("Bearer x"));
    }

    #[test]
    fn key_file_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k").join(KEY_FILE_NAME);
        let a = ScrubKey::load_or_create(&path).unwrap();
        let b = ScrubKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "garbage").unwrap();
        assert!(
            ScrubKey::load_or_create(&path).is_err(),
            "a bad key file is an error, not replaced"
        );
    }
}
