//! The durable spool: every event is on local disk before `emit` returns, and leaves it only once
//! ATL_INBOUND has acked it. The format is shared by the Python, TypeScript and Rust SDKs and
//! specified in `docs/sdk/spool.md` (format 1); the Python SDK's `spool.py` is the reference.
//!
//! ```text
//! emit   ─▶ Spool::append ─▶ record appended to the active segment (one write(2), O_APPEND),
//!                            fdatasync per policy ─▶ index: (segment, start, end, emitted_at)
//! sender ─▶ Spool::head(n) ─▶ records read back (pread, CRC checked) ─▶ publish ─▶ acks
//!        ─▶ Spool::ack(k) ─▶ `ack` = (segment, offset) past the k-th record (ack.tmp + rename)
//!                         ─▶ every segment wholly before the ack position deleted (compaction)
//! open   ─▶ lock (flock) ─▶ read `ack` ─▶ delete acked segments ─▶ scan the rest (a torn or corrupt
//!           tail is truncated: it was never reported durable) ─▶ index ─▶ a fresh active segment
//! ```
//!
//! Uploads (values too large for a NATS message, see [`crate::uploads`]): [`Spool::append_with`] first
//! writes each value's bytes to a sidecar file `uploads/<32 random hex>` (0600, in a 0700 directory)
//! and fdatasyncs it and the directory, under both fsync policies, then appends the record, whose meta
//! names the sidecars. The sender puts them into the tenant's payload bucket before it publishes the
//! record; they are deleted after the ack position that covers the record is written. A sidecar no
//! unacked record names (emit died before its record, or a crash fell between an ack and the deletion)
//! is deleted at open. Sidecar bytes count toward `max_bytes`.
//!
//! The directory is 0700 and every file 0600: records hold events before ingest scrubs them, so raw
//! secrets. `flock(LOCK_EX | LOCK_NB)` on `lock` (std's `File::try_lock`) keeps a second producer off a
//! spool in use; the kernel drops it when the holder dies, kill -9 included.
//!
//! Full disk (`max_bytes`, the segment files' and unacked sidecars' total size): [`FullPolicy::Block`] makes `append` wait
//! for the sender to free room, then fail with [`Error::SpoolFull`]; [`FullPolicy::Fail`] fails at
//! once. An event is never dropped silently.
//!
//! Every method here does blocking file I/O; the producer calls them from `spawn_blocking` or its own
//! threads, never on an async worker.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::{Error, Result};

/// First 8 bytes of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"TLSPOOL1";
/// First 8 bytes of the ack file.
pub const ACK_MAGIC: &[u8; 8] = b"TLSPACK1";
/// A record's frame: payload length (u32be), CRC-32 of (length ‖ payload) (u32be).
pub const FRAME_BYTES: usize = 8;
/// The largest payload a record may claim; a bigger length is a corrupt frame, not a record.
pub const MAX_RECORD: u64 = 64 * 1024 * 1024;
/// The ack file's size: magic, segment, offset, CRC.
const ACK_BYTES: usize = 28;
/// The subdirectory holding upload sidecars.
pub const UPLOADS_DIR: &str = "uploads";

/// When appended records are made durable with `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before `append` (and so `emit`) returns: survives a process crash and a power loss.
    EveryEvent,
    /// By a background thread at most this long after `append` returns: survives a process crash; a
    /// power loss or kernel crash can lose that window.
    Interval(Duration),
}

/// The largest record [`Spool::try_append`] writes on the calling task; bigger ones go to a blocking
/// thread (copying and writing them costs more than a hop).
pub const TRY_APPEND_MAX_BYTES: u64 = 64 * 1024;

/// What `append` does when the event does not fit in `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// Wait up to this long for the sender to free room, then fail with [`Error::SpoolFull`].
    Block(Duration),
    /// Fail with [`Error::SpoolFull`] at once.
    Fail,
}

/// The spool's bounds and policies (defaults as docs/sdk/spool.md states them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Bound on the total size of the segment files and upload sidecars (256 MiB).
    pub max_bytes: u64,
    /// A segment rolls when the next record would take it past this (8 MiB).
    pub segment_bytes: u64,
    /// `EveryEvent` by default.
    pub fsync: FsyncPolicy,
    /// `Block(30 s)` by default.
    pub when_full: FullPolicy,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024 * 1024,
            segment_bytes: 8 * 1024 * 1024,
            fsync: FsyncPolicy::EveryEvent,
            when_full: FullPolicy::Block(Duration::from_secs(30)),
        }
    }
}

/// One value of an event that travels through the tenant's payload bucket: the object `name` in
/// `bucket`, with the `sha256`, `size` and `content_type` of the event's `{"$upload": …}` reference.
/// `file` is its sidecar, relative to the spool directory (`uploads/<hex>`); the spool sets it when
/// it appends the record.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Upload {
    /// `ATL_PAYLOADS_<tenant>`.
    pub bucket: String,
    /// The object name (`<event id>/<JSON Pointer>`, percent-encoded).
    pub name: String,
    /// SHA-256 of the bytes, 64 lowercase hex digits.
    pub sha256: String,
    /// Size of the bytes.
    pub size: u64,
    /// `text/plain; charset=utf-8` (a string's text) or `application/json`.
    pub content_type: String,
    /// The sidecar holding the bytes, relative to the spool directory.
    #[serde(default)]
    pub file: String,
}

/// What goes on the wire for one event, as a record stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `atl.in.<tenant>.<event class>`.
    pub subject: String,
    /// Header name → value, exactly as published (ce-* values already percent-encoded).
    pub headers: Vec<(String, String)>,
    /// The payload: the event's `data` as JSON.
    pub body: Vec<u8>,
    /// Unix milliseconds when emit accepted the event.
    pub emitted_at_ms: u64,
    /// The values the body references with `{"$upload": …}`, in the order they are put: each must be
    /// in its bucket before the message is published (empty for most events).
    pub uploads: Vec<Upload>,
}

impl Message {
    /// The value of header `name` (exact name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A record's bytes: frame (length, CRC), then `u32be meta length ‖ meta JSON ‖ body`. The meta JSON is
/// written as the Python SDK writes it (compact, keys in this order, non-ASCII kept), so both SDKs
/// store the same message as the same bytes.
pub fn encode_record(message: &Message) -> Vec<u8> {
    let mut meta = String::from("{\"subject\":");
    push_json_string(&message.subject, &mut meta);
    meta.push_str(",\"headers\":{");
    for (i, (name, value)) in message.headers.iter().enumerate() {
        if i > 0 {
            meta.push(',');
        }
        push_json_string(name, &mut meta);
        meta.push(':');
        push_json_string(value, &mut meta);
    }
    meta.push_str("},\"emitted_at_ms\":");
    meta.push_str(&message.emitted_at_ms.to_string());
    if !message.uploads.is_empty() {
        meta.push_str(",\"uploads\":[");
        for (i, upload) in message.uploads.iter().enumerate() {
            if i > 0 {
                meta.push(',');
            }
            for (j, (key, value)) in [
                ("file", &upload.file),
                ("bucket", &upload.bucket),
                ("name", &upload.name),
                ("sha256", &upload.sha256),
            ]
            .into_iter()
            .enumerate()
            {
                meta.push_str(if j == 0 { "{\"" } else { ",\"" });
                meta.push_str(key);
                meta.push_str("\":");
                push_json_string(value, &mut meta);
            }
            meta.push_str(",\"size\":");
            meta.push_str(&upload.size.to_string());
            meta.push_str(",\"content_type\":");
            push_json_string(&upload.content_type, &mut meta);
            meta.push('}');
        }
        meta.push(']');
    }
    meta.push('}');
    let payload_len = 4 + meta.len() + message.body.len();
    let mut record = Vec::with_capacity(FRAME_BYTES + payload_len);
    let length = u32::try_from(payload_len).unwrap_or(u32::MAX).to_be_bytes();
    record.extend_from_slice(&length);
    record.extend_from_slice(&[0; 4]);
    record.extend_from_slice(&u32::try_from(meta.len()).unwrap_or(u32::MAX).to_be_bytes());
    record.extend_from_slice(meta.as_bytes());
    record.extend_from_slice(&message.body);
    let crc = record_crc(&length, &record[FRAME_BYTES..]);
    record[4..8].copy_from_slice(&crc.to_be_bytes());
    record
}

fn push_json_string(s: &str, out: &mut String) {
    // serde_json escapes exactly what Python's json.dumps(ensure_ascii=False) does: `"`, `\`, the
    // named controls, other controls as lowercase \u00XX.
    out.push_str(&serde_json::Value::from(s).to_string());
}

fn record_crc(length: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(length);
    hasher.update(payload);
    hasher.finalize()
}

#[derive(Deserialize)]
struct Meta {
    subject: String,
    headers: OrderedHeaders,
    #[serde(default)]
    emitted_at_ms: u64,
    #[serde(default)]
    uploads: Vec<Upload>,
}

/// A JSON object of string values, in the order it was written.
struct OrderedHeaders(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedHeaders {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OrderedHeaders;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of header names and string values")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut headers = Vec::new();
                while let Some(entry) = map.next_entry::<String, String>()? {
                    headers.push(entry);
                }
                Ok(OrderedHeaders(headers))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// The message of a record's payload (what follows the frame).
pub fn decode_payload(payload: &[u8]) -> std::result::Result<Message, String> {
    let len_bytes: [u8; 4] = payload
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or("payload shorter than its meta length")?;
    let meta_len = usize::try_from(u32::from_be_bytes(len_bytes)).map_err(|e| e.to_string())?;
    let meta = payload.get(4..4 + meta_len).ok_or("meta runs past the payload")?;
    let meta: Meta = serde_json::from_slice(meta).map_err(|e| format!("meta: {e}"))?;
    Ok(Message {
        subject: meta.subject,
        headers: meta.headers.0,
        body: payload[4 + meta_len..].to_vec(),
        emitted_at_ms: meta.emitted_at_ms,
        uploads: meta.uploads,
    })
}

fn segment_name(number: u64) -> String {
    format!("{number:020}.seg")
}

/// A fresh sidecar path: random, so two records never share one (the same event emitted twice gets
/// two), and deleting one record's sidecars never touches another's.
fn new_sidecar_name() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| Error::Io {
        path: PathBuf::from(UPLOADS_DIR),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(format!("{UPLOADS_DIR}/{}", crate::wire::hex(&b)))
}

#[derive(Debug, Clone)]
struct Entry {
    segment: u64,
    start: u64,
    end: u64,
    emitted_at_ms: u64,
    /// The sidecars of the record's uploads (paths relative to the spool directory) and their sizes.
    sidecars: Vec<(String, u64)>,
}

struct State {
    index: VecDeque<Entry>,
    /// Segment number → bytes on disk.
    sizes: BTreeMap<u64, u64>,
    /// Bytes of the segments and of the sidecars of unacked records.
    used: u64,
    active: u64,
    file: Option<Arc<File>>,
    dirty: bool,
    closed: bool,
    lock: Option<File>,
}

struct Shared {
    dir: PathBuf,
    config: SpoolConfig,
    state: Mutex<State>,
    readers: Mutex<HashMap<u64, Arc<File>>>,
    space: Condvar,
    queued: watch::Sender<u64>,
}

/// An append-only, checksummed, segmented spool in one directory. `append` from any thread; `head`
/// and `ack` from one sender.
pub struct Spool {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    recovered: u64,
    corrupt_segments: Vec<PathBuf>,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool")
            .field("dir", &self.shared.dir)
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Spool {
    /// Opens (creating it when missing) the spool in `dir`: lock, recover, start a new segment.
    pub fn open(dir: impl AsRef<Path>, config: SpoolConfig) -> Result<Self> {
        if config.max_bytes < 2 * SEGMENT_MAGIC.len() as u64
            || config.segment_bytes <= SEGMENT_MAGIC.len() as u64
        {
            return Err(Error::InvalidConfig(
                "max_bytes and segment_bytes are too small".into(),
            ));
        }
        if let FsyncPolicy::Interval(every) = config.fsync
            && every.is_zero()
        {
            return Err(Error::InvalidConfig("the fsync interval must be positive".into()));
        }
        let dir = std::path::absolute(dir.as_ref()).map_err(io(dir.as_ref()))?;
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io(&dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(Error::SpoolLocked { dir }),
            Err(TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        std::fs::set_permissions(&lock_path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(&lock_path))?;

        let ack = read_ack(&dir);
        let mut recovery = Recovery {
            dir: &dir,
            index: VecDeque::new(),
            sizes: BTreeMap::new(),
            corrupt: Vec::new(),
            highest: 0,
        };
        recovery.run(ack)?;
        let Recovery {
            index,
            sizes,
            corrupt,
            highest,
            ..
        } = recovery;
        let sidecar_bytes = remove_orphan_sidecars(&dir, &index)?;
        let active = highest.max(ack.0) + 1;
        let recovered = index.len() as u64;
        let (queued, _) = watch::channel(recovered);
        let state = State {
            index,
            used: sizes.values().sum::<u64>() + sidecar_bytes,
            sizes,
            active,
            file: None,
            dirty: false,
            closed: false,
            lock: Some(lock),
        };
        let shared = Arc::new(Shared {
            dir,
            config,
            state: Mutex::new(state),
            readers: Mutex::new(HashMap::new()),
            space: Condvar::new(),
            queued,
        });
        {
            let mut state = shared.lock_state();
            shared.create_segment(&mut state, active)?;
        }
        let syncer = match shared.config.fsync {
            FsyncPolicy::Interval(every) => {
                let shared = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("toolledger-spool-sync".into())
                        .spawn(move || shared.sync_loop(every))
                        .map_err(io(Path::new("<spool sync thread>")))?,
                )
            }
            FsyncPolicy::EveryEvent => None,
        };
        if !corrupt.is_empty() {
            tracing::error!(dir = %shared.dir.display(), segments = ?corrupt, "spool segments set aside as corrupt");
        }
        Ok(Self {
            shared,
            syncer: Mutex::new(syncer),
            recovered,
            corrupt_segments: corrupt,
        })
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Records found unacked at open.
    pub fn recovered(&self) -> u64 {
        self.recovered
    }

    /// Segments set aside at open as `<name>.corrupt` (never deleted).
    pub fn corrupt_segments(&self) -> &[PathBuf] {
        &self.corrupt_segments
    }

    /// Records not yet acked.
    pub fn queued(&self) -> u64 {
        *self.shared.queued.borrow()
    }

    /// Watches the number of records not yet acked.
    pub fn watch_queued(&self) -> watch::Receiver<u64> {
        self.shared.queued.subscribe()
    }

    /// Bytes of segment files and upload sidecars on disk.
    pub fn used_bytes(&self) -> u64 {
        self.shared.lock_state().used
    }

    /// When the oldest unacked record was emitted (Unix ms).
    pub fn oldest_emitted_at_ms(&self) -> Option<u64> {
        self.shared.lock_state().index.front().map(|e| e.emitted_at_ms)
    }

    /// Appends one record; returns once it is written and, under [`FsyncPolicy::EveryEvent`],
    /// fdatasync'ed. Fails with [`Error::SpoolFull`] by the full policy; then nothing was stored.
    pub fn append(&self, message: &Message) -> Result<()> {
        self.append_or_wait(message, &[], true).map(drop)
    }

    /// [`Spool::append`] of a record with uploads: `contents` are the bytes of `message.uploads`, in
    /// order. Each goes to a fresh sidecar (its `file` is set here) that is fdatasync'ed, and the
    /// directory fsync'ed, under both policies, before the record is written.
    pub fn append_with(&self, message: &Message, contents: &[Vec<u8>]) -> Result<()> {
        self.append_or_wait(message, contents, true).map(drop)
    }

    /// [`Spool::append`] for an async task: only ever one `write(2)` of a small record. `Ok(false)`,
    /// with nothing stored, when it would have to do more — wait for room (the `fail` policy still
    /// fails), wait for the spool's lock (another thread may be syncing or rolling under it), roll to
    /// a new segment (fdatasyncs), or write a record over [`TRY_APPEND_MAX_BYTES`]; the caller then
    /// appends on a blocking thread.
    pub fn try_append(&self, message: &Message) -> Result<bool> {
        self.append_or_wait(message, &[], false)
    }

    /// The fsync policy.
    pub fn fsync(&self) -> FsyncPolicy {
        self.shared.config.fsync
    }

    fn append_or_wait(&self, message: &Message, contents: &[Vec<u8>], may_wait: bool) -> Result<bool> {
        let shared = &*self.shared;
        if contents.len() != message.uploads.len() {
            return Err(Error::invalid(
                "/data",
                format!(
                    "{} uploads but {} contents: one content per upload",
                    message.uploads.len(),
                    contents.len()
                ),
            ));
        }
        let named;
        let message = if contents.is_empty() {
            message
        } else {
            let mut copy = message.clone();
            for upload in &mut copy.uploads {
                upload.file = new_sidecar_name()?;
            }
            named = copy;
            &named
        };
        let sidecar_bytes: u64 = contents.iter().map(|c| c.len() as u64).sum();
        let record = encode_record(message);
        let len = record.len() as u64;
        let needed = len + sidecar_bytes;
        let magic = SEGMENT_MAGIC.len() as u64;
        if len + magic > MAX_RECORD || needed + magic > shared.config.max_bytes {
            return Err(shared.full(0, format!("an event of {needed} bytes can never fit this spool")));
        }
        if !may_wait && len > TRY_APPEND_MAX_BYTES {
            return Ok(false);
        }
        let mut state = if may_wait {
            shared.lock_state()
        } else {
            match shared.state.try_lock() {
                Ok(state) => state,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
            }
        };
        let mut deadline: Option<Instant> = None;
        loop {
            if state.closed {
                return Err(Error::Closed);
            }
            if state.used + needed <= shared.config.max_bytes {
                break;
            }
            if active_fully_acked(&state) && state.sizes.get(&state.active).copied() > Some(8) {
                if !may_wait {
                    return Ok(false);
                }
                shared.roll(&mut state)?;
                continue;
            }
            let wait = match shared.config.when_full {
                FullPolicy::Fail => {
                    return Err(shared.full(state.used, "the full policy is fail".into()));
                }
                FullPolicy::Block(wait) => wait,
            };
            if !may_wait {
                return Ok(false);
            }
            let now = Instant::now();
            let until = *deadline.get_or_insert(now + wait);
            if now >= until {
                return Err(shared.full(
                    state.used,
                    format!("it stayed full for {wait:?}: is NATS reachable?"),
                ));
            }
            state = shared
                .space
                .wait_timeout(state, until - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
        let active_size = state.sizes.get(&state.active).copied().unwrap_or(0);
        if active_size + len > shared.config.segment_bytes && active_size > SEGMENT_MAGIC.len() as u64 {
            if !may_wait {
                return Ok(false);
            }
            shared.roll(&mut state)?;
        }
        let active = state.active;
        let path = shared.dir.join(segment_name(active));
        let file = state.file.clone().ok_or(Error::Closed)?;
        let start = state.sizes.get(&active).copied().unwrap_or(0);
        let mut sidecars = Vec::with_capacity(contents.len());
        for (upload, content) in message.uploads.iter().zip(contents) {
            if let Err(e) = shared.write_sidecar(&upload.file, content) {
                // Not named by any record: removed now, or at the next open if this fails too.
                for (file, _) in &sidecars {
                    let _ = std::fs::remove_file(shared.dir.join(file));
                }
                return Err(e);
            }
            sidecars.push((upload.file.clone(), content.len() as u64));
        }
        // One write(2) of the whole record on an O_APPEND file (write_all loops only on a short
        // write, which a regular file gives only when the disk is full).
        if let Err(e) = (&*file).write_all(&record) {
            // A partial record may be on disk: it is a torn tail, truncated at the next open; nothing
            // after it may be appended to this segment, so start a new one.
            let _ = shared.roll(&mut state);
            for (file, _) in &sidecars {
                let _ = std::fs::remove_file(shared.dir.join(file));
            }
            return Err(io(&path)(e));
        }
        state.sizes.insert(active, start + len);
        state.used += needed;
        state.index.push_back(Entry {
            segment: active,
            start,
            end: start + len,
            emitted_at_ms: message.emitted_at_ms,
            sidecars,
        });
        shared.queued.send_replace(state.index.len() as u64);
        match shared.config.fsync {
            FsyncPolicy::EveryEvent => file.sync_data().map_err(io(&path))?,
            FsyncPolicy::Interval(_) => state.dirty = true,
        }
        Ok(true)
    }

    /// The first `limit` unacked records, oldest first.
    pub fn head(&self, limit: usize) -> Result<Vec<Message>> {
        let shared = &*self.shared;
        let entries: Vec<Entry> = {
            let state = shared.lock_state();
            if state.closed {
                return Err(Error::Closed);
            }
            state.index.iter().take(limit).cloned().collect()
        };
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let corrupt = |reason: String| Error::CorruptRecord {
                dir: shared.dir.clone(),
                segment: entry.segment,
                offset: entry.start,
                reason,
            };
            let path = shared.dir.join(segment_name(entry.segment));
            let file = {
                let mut readers = shared
                    .readers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match readers.get(&entry.segment) {
                    Some(file) => Arc::clone(file),
                    None => {
                        let file = Arc::new(File::open(&path).map_err(io(&path))?);
                        readers.insert(entry.segment, Arc::clone(&file));
                        file
                    }
                }
            };
            let len = usize::try_from(entry.end - entry.start).map_err(|e| corrupt(e.to_string()))?;
            let mut raw = vec![0; len];
            file.read_exact_at(&mut raw, entry.start).map_err(io(&path))?;
            let (frame, payload) = raw.split_at(FRAME_BYTES);
            if !frame_ok(frame, payload) {
                return Err(corrupt("it fails its checksum".into()));
            }
            out.push(decode_payload(payload).map_err(corrupt)?);
        }
        Ok(out)
    }

    /// Whether `upload`'s sidecar is on disk.
    pub fn has_upload(&self, upload: &Upload) -> bool {
        self.shared.dir.join(&upload.file).exists()
    }

    /// The bytes of `upload`'s sidecar, checked against its size and SHA-256 (a mismatch is
    /// [`Error::CorruptUpload`]).
    pub fn read_upload(&self, upload: &Upload) -> Result<Vec<u8>> {
        let path = self.shared.dir.join(&upload.file);
        if upload.file.is_empty() || Path::new(&upload.file).is_absolute() || upload.file.contains("..") {
            return Err(Error::CorruptUpload {
                path,
                reason: format!("{:?} is not a sidecar of this spool", upload.file),
            });
        }
        let content = std::fs::read(&path).map_err(io(&path))?;
        if content.len() as u64 != upload.size || crate::wire::hex(&Sha256::digest(&content)) != upload.sha256
        {
            return Err(Error::CorruptUpload {
                path,
                reason: format!("its bytes do not match the size and sha256 of {}", upload.name),
            });
        }
        Ok(content)
    }

    /// Marks the first `count` unacked records acked: writes the ack position, deletes every
    /// segment wholly before it and the sidecars of the records acked.
    pub fn ack(&self, count: usize) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let shared = &*self.shared;
        let mut state = shared.lock_state();
        let mut last = None;
        let mut acked_sidecars = Vec::new();
        for _ in 0..count {
            match state.index.pop_front() {
                Some(mut entry) => {
                    acked_sidecars.append(&mut entry.sidecars);
                    last = Some(entry);
                }
                None => break,
            }
        }
        let Some(last) = last else { return Ok(()) };
        let mut raw = Vec::with_capacity(ACK_BYTES);
        raw.extend_from_slice(ACK_MAGIC);
        raw.extend_from_slice(&last.segment.to_be_bytes());
        raw.extend_from_slice(&last.end.to_be_bytes());
        let crc = crc32fast::hash(&raw);
        raw.extend_from_slice(&crc.to_be_bytes());
        let tmp = shared.dir.join("ack.tmp");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        file.write_all(&raw).map_err(io(&tmp))?;
        drop(file);
        // Not fsynced: an ack position lost in a crash only resends events the ledger has (duplicates,
        // dropped by ingest); the records themselves are what must not be lost.
        let ack = shared.dir.join("ack");
        std::fs::rename(&tmp, &ack).map_err(io(&ack))?;
        // After the ack position: a crash in between leaves sidecars no unacked record names, which
        // the next open deletes.
        for (file, size) in &acked_sidecars {
            let path = shared.dir.join(file);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "upload sidecar not deleted");
            }
            state.used = state.used.saturating_sub(*size);
        }
        if !acked_sidecars.is_empty() {
            shared.space.notify_all();
        }
        shared.compact(&mut state);
        shared.queued.send_replace(state.index.len() as u64);
        Ok(())
    }

    /// Syncs and closes; unacked records stay for the next open. Idempotent.
    pub fn close(&self) -> Result<()> {
        {
            let shared = &*self.shared;
            let mut state = shared.lock_state();
            if state.closed {
                return Ok(());
            }
            state.closed = true;
            let mut result = Ok(());
            if let Some(file) = state.file.take() {
                result = file
                    .sync_data()
                    .map_err(io(&shared.dir.join(segment_name(state.active))));
            }
            if active_fully_acked(&state) {
                let active = state.active;
                shared.delete(&mut state, active);
            }
            shared
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
            if let Ok(ack) = File::open(shared.dir.join("ack")) {
                let _ = ack.sync_all();
            }
            state.lock = None;
            shared.space.notify_all();
            result?;
        }
        if let Some(syncer) = self
            .syncer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = syncer.join();
        }
        Ok(())
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(dir = %self.shared.dir.display(), error = %e, "closing the spool failed");
        }
    }
}

fn active_fully_acked(state: &State) -> bool {
    state.index.back().is_none_or(|e| e.segment != state.active)
}

fn frame_ok(frame: &[u8], payload: &[u8]) -> bool {
    let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    let crc = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    u64::from(length) == payload.len() as u64 && record_crc(&frame[..4], payload) == crc
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn full(&self, used: u64, reason: String) -> Error {
        Error::SpoolFull {
            dir: self.dir.clone(),
            used,
            max: self.config.max_bytes,
            reason,
        }
    }

    /// Creates segment `number` (magic written, fdatasync'ed, directory fsync'ed) as the active one.
    fn create_segment(&self, state: &mut State, number: u64) -> Result<()> {
        let path = self.dir.join(segment_name(number));
        let mut file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        file.write_all(SEGMENT_MAGIC).map_err(io(&path))?;
        file.sync_data().map_err(io(&path))?;
        sync_dir(&self.dir)?;
        state.sizes.insert(number, SEGMENT_MAGIC.len() as u64);
        state.used += SEGMENT_MAGIC.len() as u64;
        state.active = number;
        state.file = Some(Arc::new(file));
        state.dirty = false;
        Ok(())
    }

    /// Seals the active segment (synced) and starts the next; deletes the old one if wholly acked.
    fn roll(&self, state: &mut State) -> Result<()> {
        if let Some(file) = state.file.take() {
            file.sync_data()
                .map_err(io(&self.dir.join(segment_name(state.active))))?;
        }
        let old = state.active;
        self.create_segment(state, old + 1)?;
        self.compact(state);
        if active_fully_acked(state) && state.index.front().is_none_or(|e| e.segment > old) {
            self.delete(state, old);
        }
        Ok(())
    }

    fn compact(&self, state: &mut State) {
        let first_live = state.index.front().map_or(state.active, |e| e.segment);
        let dead: Vec<u64> = state
            .sizes
            .keys()
            .copied()
            .filter(|n| *n < first_live && *n != state.active)
            .collect();
        for number in dead {
            self.delete(state, number);
        }
    }

    fn delete(&self, state: &mut State, number: u64) {
        self.readers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&number);
        let path = self.dir.join(segment_name(number));
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "spool segment not deleted");
        }
        if let Some(size) = state.sizes.remove(&number) {
            state.used -= size;
        }
        self.space.notify_all();
    }

    /// Writes an upload's bytes to `rel` (O_EXCL, 0600) and makes file and name durable before the
    /// record that names it exists: a record on disk never names a sidecar a crash could lose.
    fn write_sidecar(&self, rel: &str, content: &[u8]) -> Result<()> {
        let uploads = self.dir.join(UPLOADS_DIR);
        if !uploads.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&uploads)
                .map_err(io(&uploads))?;
            std::fs::set_permissions(&uploads, std::fs::Permissions::from_mode(0o700))
                .map_err(io(&uploads))?;
            sync_dir(&self.dir)?;
        }
        let path = self.dir.join(rel);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        if let Err(e) = file.write_all(content).and_then(|()| file.sync_data()) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(io(&path)(e));
        }
        drop(file);
        sync_dir(&uploads)
    }

    fn sync_loop(&self, every: Duration) {
        loop {
            std::thread::sleep(every);
            let file = {
                let mut state = self.lock_state();
                if state.closed {
                    return;
                }
                if !state.dirty {
                    continue;
                }
                state.dirty = false;
                state.file.clone()
            };
            // Synced outside the lock, so appends go on meanwhile; a roll syncs what it seals itself.
            if let Some(file) = file
                && let Err(e) = file.sync_data()
            {
                tracing::error!(dir = %self.dir.display(), error = %e, "spool fdatasync failed");
                self.lock_state().dirty = true;
            }
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Deletes every sidecar no unacked record in `index` names (emit died after writing it and before its
/// record, which was then never reported emitted; or a crash fell between an ack and the deletion);
/// returns the bytes of the sidecars the unacked records name.
fn remove_orphan_sidecars(dir: &Path, index: &VecDeque<Entry>) -> Result<u64> {
    let live: HashMap<&str, u64> = index
        .iter()
        .flat_map(|e| e.sidecars.iter().map(|(file, size)| (file.as_str(), *size)))
        .collect();
    let uploads = dir.join(UPLOADS_DIR);
    match std::fs::read_dir(&uploads) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(io(&uploads))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !live.contains_key(format!("{UPLOADS_DIR}/{name}").as_str()) {
                    tracing::info!(dir = %dir.display(), sidecar = %name, "orphaned upload sidecar removed");
                    let path = entry.path();
                    std::fs::remove_file(&path).map_err(io(&path))?;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&uploads)(e)),
    }
    for file in live.keys() {
        if !dir.join(file).exists() {
            // Never by this SDK: a sidecar is durable before its record is written. The sender keeps
            // retrying the record (its object may already be in the bucket) and reports the error.
            tracing::error!(dir = %dir.display(), sidecar = %file, "upload sidecar of an unacked record is missing");
        }
    }
    Ok(live.values().sum())
}

fn read_ack(dir: &Path) -> (u64, u64) {
    let Ok(raw) = std::fs::read(dir.join("ack")) else {
        return (0, 0);
    };
    if raw.len() == ACK_BYTES && &raw[..8] == ACK_MAGIC {
        let crc = u32::from_be_bytes([raw[24], raw[25], raw[26], raw[27]]);
        if crc32fast::hash(&raw[..24]) == crc {
            let segment = u64::from_be_bytes(raw[8..16].try_into().unwrap_or_default());
            let offset = u64::from_be_bytes(raw[16..24].try_into().unwrap_or_default());
            return (segment, offset);
        }
    }
    // Losing the ack position only resends acked events, which the ledger drops as duplicates.
    tracing::warn!(dir = %dir.display(), "spool ack file unreadable; unacked state rebuilt from the segments");
    (0, 0)
}

struct Recovery<'a> {
    dir: &'a Path,
    index: VecDeque<Entry>,
    sizes: BTreeMap<u64, u64>,
    corrupt: Vec<PathBuf>,
    /// The highest segment number found, whatever became of it: numbers are never reused.
    highest: u64,
}

impl Recovery<'_> {
    fn run(&mut self, (ack_segment, ack_offset): (u64, u64)) -> Result<()> {
        let mut numbers: Vec<u64> = std::fs::read_dir(self.dir)
            .map_err(io(self.dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let stem = name.strip_suffix(".seg")?;
                if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                stem.parse().ok()
            })
            .collect();
        numbers.sort_unstable();
        self.highest = numbers.last().copied().unwrap_or(0);
        for number in numbers {
            let path = self.dir.join(segment_name(number));
            if number < ack_segment {
                // Wholly acked; its deletion was interrupted.
                std::fs::remove_file(&path).map_err(io(&path))?;
                continue;
            }
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io(&path))?;
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io(&path))?;
            let mut data = Vec::new();
            file.read_to_end(&mut data).map_err(io(&path))?;
            if !data.starts_with(SEGMENT_MAGIC) {
                if data.len() < SEGMENT_MAGIC.len() && SEGMENT_MAGIC.starts_with(&data) {
                    // Created, header torn: it held nothing.
                    drop(file);
                    std::fs::remove_file(&path).map_err(io(&path))?;
                    continue;
                }
                drop(file);
                let aside = self.dir.join(format!("{}.corrupt", segment_name(number)));
                std::fs::rename(&path, &aside).map_err(io(&path))?;
                self.corrupt.push(aside);
                continue;
            }
            let mut offset = SEGMENT_MAGIC.len();
            while offset < data.len() {
                let frame = data.get(offset..offset + FRAME_BYTES);
                let length = frame.map_or(0, |f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]));
                let end = offset + FRAME_BYTES + length as usize;
                let whole = frame.is_some()
                    && (4..=MAX_RECORD).contains(&u64::from(length))
                    && end <= data.len()
                    && frame.is_some_and(|f| frame_ok(f, &data[offset + FRAME_BYTES..end]));
                if !whole {
                    // A torn or garbled tail: written but never made durable, so never reported
                    // emitted under every_event (interval: within the stated window).
                    tracing::warn!(segment = number, offset, dir = %self.dir.display(), "spool segment truncated (torn tail)");
                    file.set_len(offset as u64).map_err(io(&path))?;
                    file.sync_all().map_err(io(&path))?;
                    break;
                }
                if !(number == ack_segment && end as u64 <= ack_offset) {
                    let (emitted_at_ms, sidecars) = decode_payload(&data[offset + FRAME_BYTES..end])
                        .map(|m| {
                            let sidecars = m.uploads.into_iter().map(|u| (u.file, u.size)).collect();
                            (m.emitted_at_ms, sidecars)
                        })
                        .unwrap_or_default();
                    self.index.push_back(Entry {
                        segment: number,
                        start: offset as u64,
                        end: end as u64,
                        emitted_at_ms,
                        sidecars,
                    });
                }
                offset = end;
            }
            self.sizes.insert(number, offset.min(data.len()) as u64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::os::unix::fs::MetadataExt;

    fn msg(n: u64, size: usize) -> Message {
        let mut body = vec![b'x'; size];
        body.extend_from_slice(n.to_string().as_bytes());
        Message {
            subject: "atl.in.acme.tool.invocation.planned".into(),
            headers: vec![
                ("ce-id".into(), format!("e{n}")),
                ("Nats-Msg-Id".into(), format!("m{n}")),
            ],
            body,
            emitted_at_ms: 1_700_000_000_000 + n,
            uploads: Vec::new(),
        }
    }

    fn ids(spool: &Spool, n: usize) -> Vec<String> {
        spool
            .head(n)
            .unwrap()
            .iter()
            .map(|m| m.header("ce-id").unwrap().to_owned())
            .collect()
    }

    fn segments(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".seg"))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_format_is_as_documented_and_as_python_writes_it() {
        let record = encode_record(&msg(7, 3));
        let length = u32::from_be_bytes(record[..4].try_into().unwrap()) as usize;
        assert_eq!(length, record.len() - 8);
        let crc = u32::from_be_bytes(record[4..8].try_into().unwrap());
        let mut h = crc32fast::Hasher::new();
        h.update(&record[..4]);
        h.update(&record[8..]);
        assert_eq!(crc, h.finalize());
        let meta_len = u32::from_be_bytes(record[8..12].try_into().unwrap()) as usize;
        // The exact bytes Python's `encode_record` writes for this message.
        assert_eq!(
            std::str::from_utf8(&record[12..12 + meta_len]).unwrap(),
            r#"{"subject":"atl.in.acme.tool.invocation.planned","headers":{"ce-id":"e7","Nats-Msg-Id":"m7"},"emitted_at_ms":1700000000007}"#
        );
        assert_eq!(&record[12 + meta_len..], b"xxx7");
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        spool.append(&msg(7, 3)).unwrap();
        let seg = dir.path().join(segments(dir.path()).pop().unwrap());
        let mut want = SEGMENT_MAGIC.to_vec();
        want.extend_from_slice(&record);
        assert_eq!(std::fs::read(seg).unwrap(), want);
        assert_eq!(spool.head(1).unwrap(), vec![msg(7, 3)]);
    }

    #[test]
    fn records_round_trip_and_restart_resumes_after_the_ack() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        for n in 0..10 {
            spool.append(&msg(n, 100)).unwrap();
        }
        assert_eq!(ids(&spool, 3), ["e0", "e1", "e2"]);
        spool.ack(4).unwrap();
        drop(spool);
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!((spool.recovered(), spool.queued()), (6, 6));
        let head = spool.head(100).unwrap();
        assert_eq!(head.len(), 6);
        assert_eq!(head[0], msg(4, 100));
        assert_eq!(spool.oldest_emitted_at_ms(), Some(1_700_000_000_004));
    }

    #[test]
    fn a_torn_tail_is_truncated_and_what_came_before_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        for n in 0..3 {
            spool.append(&msg(n, 100)).unwrap();
        }
        let path = dir.path().join(segments(dir.path()).pop().unwrap());
        drop(spool);
        let whole = encode_record(&msg(3, 100));
        let size = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&whole[..whole.len() / 2]).unwrap(); // a write cut short by a crash
        drop(f);
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(spool.queued(), 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        spool.append(&msg(4, 100)).unwrap();
        assert_eq!(ids(&spool, 10), ["e0", "e1", "e2", "e4"]);
    }

    #[test]
    fn a_bad_checksum_or_zeros_end_the_segment_there() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        for n in 0..3 {
            spool.append(&msg(n, 100)).unwrap();
        }
        let path = dir.path().join(segments(dir.path()).pop().unwrap());
        drop(spool);
        let mut data = std::fs::read(&path).unwrap();
        let at = data.windows(2).rposition(|w| w == b"e2").unwrap();
        data[at] = b'E';
        data.extend_from_slice(&[0; 64]);
        std::fs::write(&path, data).unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(ids(&spool, 10), ["e0", "e1"], "a garbled record was read");
    }

    #[test]
    fn a_segment_without_the_magic_is_set_aside_and_a_torn_header_deleted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(segment_name(5)), b"not a spool").unwrap();
        std::fs::write(dir.path().join(segment_name(6)), b"TLSP").unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(spool.corrupt_segments().len(), 1);
        assert!(dir.path().join("00000000000000000005.seg.corrupt").exists());
        assert!(!dir.path().join(segment_name(6)).exists());
        assert_eq!(segments(dir.path()), [segment_name(7)]);
    }

    #[test]
    fn files_are_0600_and_the_directory_0700() {
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let spool = Spool::open(&spool_dir, SpoolConfig::default()).unwrap();
        spool.append(&msg(0, 10)).unwrap();
        spool.ack(1).unwrap();
        spool.append(&msg(1, 10)).unwrap();
        assert_eq!(std::fs::metadata(&spool_dir).unwrap().mode() & 0o777, 0o700);
        for entry in std::fs::read_dir(&spool_dir).unwrap() {
            let entry = entry.unwrap();
            let mode = entry.metadata().unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{:?}", entry.file_name());
        }
    }

    #[test]
    fn a_second_open_of_a_spool_in_use_fails() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert!(matches!(
            Spool::open(dir.path(), SpoolConfig::default()),
            Err(Error::SpoolLocked { .. })
        ));
        drop(spool);
        Spool::open(dir.path(), SpoolConfig::default()).unwrap();
    }

    #[test]
    fn segments_roll_and_acked_ones_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = SpoolConfig {
            segment_bytes: 1024,
            ..SpoolConfig::default()
        };
        let spool = Spool::open(dir.path(), config.clone()).unwrap();
        for n in 0..40 {
            spool.append(&msg(n, 100)).unwrap();
        }
        let before = segments(dir.path());
        assert!(before.len() >= 8, "{before:?}");
        spool.ack(30).unwrap();
        let live = segments(dir.path());
        assert!(live.len() <= 4 && live[0] > before[0], "{before:?} {live:?}");
        let on_disk: u64 = live
            .iter()
            .map(|n| std::fs::metadata(dir.path().join(n)).unwrap().len())
            .sum();
        assert_eq!(spool.used_bytes(), on_disk);
        spool.ack(10).unwrap();
        spool.append(&msg(99, 100)).unwrap();
        assert_eq!(ids(&spool, 5), ["e99"]);
        drop(spool);
        let spool = Spool::open(dir.path(), config).unwrap();
        assert_eq!(spool.queued(), 1);
        drop(spool);
        // Everything acked and closed: no segment is left behind.
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        spool.ack(1).unwrap();
        drop(spool);
        assert_eq!(segments(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn fail_policy_refuses_at_once_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let config = SpoolConfig {
            max_bytes: 4096,
            segment_bytes: 1024,
            when_full: FullPolicy::Fail,
            ..SpoolConfig::default()
        };
        let spool = Spool::open(dir.path(), config).unwrap();
        let mut appended = 0;
        let err = loop {
            match spool.append(&msg(appended, 100)) {
                Ok(()) => appended += 1,
                Err(e) => break e,
            }
            assert!(appended < 100, "never full");
        };
        assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
        assert!(appended >= 10 && spool.queued() == appended);
        assert!(spool.used_bytes() <= 4096);
        spool.ack(usize::try_from(appended).unwrap()).unwrap();
        spool.append(&msg(101, 100)).unwrap(); // room again
        let huge = msg(0, 5000);
        assert!(matches!(spool.append(&huge), Err(Error::SpoolFull { .. })));
    }

    #[test]
    fn block_policy_waits_for_room_then_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let config = SpoolConfig {
            max_bytes: 4096,
            segment_bytes: 1024,
            when_full: FullPolicy::Block(Duration::from_millis(300)),
            ..SpoolConfig::default()
        };
        let spool = Arc::new(Spool::open(dir.path(), config).unwrap());
        let mut n = 0;
        let started = loop {
            let t0 = Instant::now();
            if spool.append(&msg(n, 100)).is_err() {
                break t0;
            }
            n += 1;
        };
        assert!(started.elapsed() >= Duration::from_millis(300), "did not block");
        let acker = {
            let spool = Arc::clone(&spool);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let queued = usize::try_from(spool.queued()).unwrap();
                spool.ack(queued).unwrap();
            })
        };
        let t0 = Instant::now();
        spool.append(&msg(1000, 100)).unwrap(); // blocks until the acks free a segment
        assert!(t0.elapsed() >= Duration::from_millis(50));
        acker.join().unwrap();
        assert_eq!(ids(&spool, 1), ["e1000"]);
    }

    #[test]
    fn a_lost_ack_file_means_resending_not_losing() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        for n in 0..5 {
            spool.append(&msg(n, 10)).unwrap();
        }
        spool.ack(2).unwrap();
        drop(spool);
        std::fs::remove_file(dir.path().join("ack")).unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(ids(&spool, 10), ["e0", "e1", "e2", "e3", "e4"]);
    }

    /// `msg(n, size)` with one upload of `content`.
    fn with_upload(n: u64, content: &[u8]) -> (Message, Vec<Vec<u8>>) {
        let mut message = msg(n, 10);
        message.uploads.push(Upload {
            bucket: "ATL_PAYLOADS_acme".into(),
            name: format!("e{n}/data/x"),
            sha256: crate::wire::hex(&Sha256::digest(content)),
            size: content.len() as u64,
            content_type: "text/plain; charset=utf-8".into(),
            file: String::new(),
        });
        (message, vec![content.to_vec()])
    }

    fn sidecars(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir.join(UPLOADS_DIR))
            .map(|d| d.map(|e| e.unwrap().file_name().into_string().unwrap()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    #[test]
    fn upload_meta_is_written_as_python_writes_it_and_read_back() {
        let mut message = msg(1, 0);
        message.subject = "atl.in.acme.tool.result.created".into();
        message.headers = vec![("ce-id".into(), "e1".into()), ("Nats-Msg-Id".into(), "m1".into())];
        message.body = b"{}".to_vec();
        message.uploads.push(Upload {
            bucket: "ATL_PAYLOADS_acme".into(),
            name: "e1/data/x".into(),
            sha256: "ab".repeat(32),
            size: 5,
            content_type: "text/plain; charset=utf-8".into(),
            file: "uploads/00112233445566778899aabbccddeeff".into(),
        });
        let record = encode_record(&message);
        let meta_len = u32::from_be_bytes(record[8..12].try_into().unwrap()) as usize;
        // The exact bytes Python's `encode_record` writes for this message.
        assert_eq!(
            std::str::from_utf8(&record[12..12 + meta_len]).unwrap(),
            r#"{"subject":"atl.in.acme.tool.result.created","headers":{"ce-id":"e1","Nats-Msg-Id":"m1"},"emitted_at_ms":1700000000001,"uploads":[{"file":"uploads/00112233445566778899aabbccddeeff","bucket":"ATL_PAYLOADS_acme","name":"e1/data/x","sha256":"abababababababababababababababababababababababababababababababab","size":5,"content_type":"text/plain; charset=utf-8"}]}"#
        );
        assert_eq!(decode_payload(&record[8..]).unwrap(), message);
    }

    #[test]
    fn sidecars_are_0600_in_a_0700_directory_named_by_the_record_and_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        let (message, contents) = with_upload(0, b"hello");
        spool.append_with(&message, &contents).unwrap();
        // The same event twice: two sidecars.
        spool.append_with(&message, &contents).unwrap();
        let uploads = dir.path().join(UPLOADS_DIR);
        assert_eq!(std::fs::metadata(&uploads).unwrap().mode() & 0o777, 0o700);
        let names = sidecars(dir.path());
        assert_eq!(names.len(), 2);
        for name in &names {
            assert_eq!(name.len(), 32);
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            let meta = std::fs::metadata(uploads.join(name)).unwrap();
            assert_eq!(meta.mode() & 0o777, 0o600);
        }
        let head = spool.head(10).unwrap();
        let files: BTreeSet<&str> = head.iter().map(|m| m.uploads[0].file.as_str()).collect();
        let want: BTreeSet<String> = names.iter().map(|n| format!("uploads/{n}")).collect();
        assert_eq!(files, want.iter().map(String::as_str).collect());
        assert!(spool.has_upload(&head[0].uploads[0]));
        assert_eq!(spool.read_upload(&head[0].uploads[0]).unwrap(), b"hello");
        std::fs::write(dir.path().join(&head[1].uploads[0].file), b"hellO").unwrap();
        assert!(matches!(
            spool.read_upload(&head[1].uploads[0]),
            Err(Error::CorruptUpload { .. })
        ));
        // Contents must match the uploads.
        assert!(spool.append_with(&message, &[]).is_err());
    }

    #[test]
    fn sidecar_bytes_count_toward_max_bytes_and_go_with_the_ack() {
        let dir = tempfile::tempdir().unwrap();
        let config = SpoolConfig {
            max_bytes: 8192,
            when_full: FullPolicy::Fail,
            ..SpoolConfig::default()
        };
        let spool = Spool::open(dir.path(), config.clone()).unwrap();
        let empty = spool.used_bytes();
        let (message, contents) = with_upload(0, &[b'a'; 3000]);
        spool.append_with(&message, &contents).unwrap();
        let record = encode_record(&spool.head(1).unwrap()[0]).len() as u64;
        assert_eq!(spool.used_bytes(), empty + record + 3000);
        spool.append_with(&message, &contents).unwrap();
        assert!(matches!(
            spool.append_with(&message, &contents),
            Err(Error::SpoolFull { .. })
        ));
        // A single event that can never fit, counting its sidecar.
        let (huge, huge_contents) = with_upload(1, &[b'b'; 9000]);
        assert!(matches!(
            spool.append_with(&huge, &huge_contents),
            Err(Error::SpoolFull { .. })
        ));
        assert_eq!(sidecars(dir.path()).len(), 2, "a refused event left a sidecar");
        // Reopened: the sidecars of unacked records are counted again.
        drop(spool);
        let spool = Spool::open(dir.path(), config).unwrap();
        let on_disk: u64 = segments(dir.path())
            .iter()
            .map(|n| std::fs::metadata(dir.path().join(n)).unwrap().len())
            .sum();
        assert_eq!(spool.used_bytes(), on_disk + 2 * 3000);
        spool.ack(1).unwrap();
        assert_eq!(
            sidecars(dir.path()).len(),
            1,
            "the acked record's sidecar is deleted"
        );
        spool.ack(1).unwrap();
        assert_eq!(sidecars(dir.path()), Vec::<String>::new());
        assert!(spool.used_bytes() < 3000);
        spool.append_with(&message, &contents).unwrap(); // room again
    }

    #[test]
    fn orphaned_sidecars_are_removed_at_open_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        for n in 0..3 {
            let (message, contents) = with_upload(n, format!("value {n}").as_bytes());
            spool.append_with(&message, &contents).unwrap();
        }
        spool.ack(1).unwrap();
        let live = sidecars(dir.path());
        assert_eq!(live.len(), 2);
        drop(spool);
        // An emit that died between its sidecar and its record, and an ack whose deletion a crash
        // interrupted (the acked record's sidecar is back).
        std::fs::write(dir.path().join("uploads/0123456789abcdef0123456789abcdef"), b"x").unwrap();
        std::fs::write(dir.path().join("uploads/fedcba9876543210fedcba9876543210"), b"y").unwrap();
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(sidecars(dir.path()), live);
        assert_eq!(spool.queued(), 2);
        let head = spool.head(10).unwrap();
        assert_eq!(spool.read_upload(&head[0].uploads[0]).unwrap(), b"value 1");
        assert_eq!(spool.read_upload(&head[1].uploads[0]).unwrap(), b"value 2");
    }

    #[test]
    fn the_interval_policy_syncs_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let config = SpoolConfig {
            fsync: FsyncPolicy::Interval(Duration::from_millis(10)),
            ..SpoolConfig::default()
        };
        let spool = Spool::open(dir.path(), config).unwrap();
        spool.append(&msg(0, 10)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!spool.shared.lock_state().dirty, "never synced");
        drop(spool);
        let spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        assert_eq!(spool.queued(), 1);
    }
}
