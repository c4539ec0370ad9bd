//! Backup and restore of the ledger and its checkpoints as plain files.
//!
//! ```text
//! backup   ATL_LEDGER, ATL_CHECKPOINTS ─ordered consumers─▶ DIR/<stream>.jsonl
//!          {"seq", "subject", "data": base64 of the exact bytes} per line, then DIR/manifest.json
//!          (counts, last sequences, each file's SHA-256, the ledger's Merkle root) — written last,
//!          so a directory without a manifest is an unfinished backup
//! restore  manifest + files checked (SHA-256, sequences 1..n without gaps, the recomputed root)
//!          ─▶ target streams must exist (toolledger init) and be empty ─▶ each message published to
//!          its subject with Nats-Expected-Last-Sequence = seq − 1, so the restored stream has the same
//!          sequences and bytes ─▶ `toolledger verify` passes with the same verifier key
//! ```
//!
//! The witnesses' cosignatures (ATL_COSIGNATURES, `docs/witnesses.md`) are backed up beside the
//! checkpoints when the deployment has them (`cosignatures` in the manifest; a restorer that does not
//! know the field restores without them, as before).
//!
//! A partitioned ledger (`docs/scaling.md`) backs up every partition's stream after the checkpoints,
//! each with its Merkle root (`partitions`), and the directory (`directory`) as far as a backed-up
//! directory checkpoint signs it, so every directory entry in the backup names checkpoints that are
//! in it too; its manifest is `toolledger-backup/2`.
//!
//! The bytes are what the tree commits to, so a restored ledger has the same leaves and root and the
//! backed-up signed checkpoints verify against it. Keys are not in the backup: the checkpoint signing
//! key and the scrubber's HMAC key live in the data directory and are backed up with it.

use std::io::{BufRead, Write};
use std::path::Path;

use async_nats::jetstream;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolledger_merkle::CompactRange;

use crate::{Error, Result, hex};
use toolledger_ledger::{OrderedReader, ReadSpec};

/// The manifest's format name (a single ledger's).
pub const BACKUP_FORMAT: &str = "toolledger-backup/1";
/// The manifest's format name for a partitioned ledger: `partitions` and `directory` too (a
/// restorer that knows only /1 would leave them out, so it must refuse these).
pub const BACKUP_FORMAT_PARTITIONED: &str = "toolledger-backup/2";

/// One backed-up stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamBackup {
    /// The stream's name.
    pub stream: String,
    /// The file, relative to the backup directory.
    pub file: String,
    /// Messages in it (sequences 1..=messages).
    pub messages: u64,
    /// Lowercase hex SHA-256 of the file.
    pub sha256: String,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`BACKUP_FORMAT`].
    pub format: String,
    /// When the backup finished (RFC 3339).
    pub created_at: String,
    /// The ledger stream's backup.
    pub ledger: StreamBackup,
    /// The checkpoint stream's backup.
    pub checkpoints: StreamBackup,
    /// Hex Merkle root over every backed-up ledger entry.
    pub ledger_root: String,
    /// The partitions after p0 (p0 is `ledger`), each with its root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionBackup>,
    /// The directory, as far as a backed-up directory checkpoint signs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<StreamBackup>,
    /// The witnesses' cosignatures of the checkpoints, when the deployment keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosignatures: Option<StreamBackup>,
}

/// One further partition's stream in a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionBackup {
    /// Its stream's backup.
    #[serde(flatten)]
    pub stream: StreamBackup,
    /// Hex Merkle root over its entries.
    pub root: String,
}

/// What to back up besides the ledger stream and the checkpoints: a partitioned ledger's further
/// partitions' streams and its directory.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// The ledger streams of the partitions after p0.
    pub partitions: Vec<String>,
    /// The directory's stream, when the ledger has one.
    pub directory: Option<String>,
    /// The cosignatures' stream, when the deployment has one.
    pub cosignatures: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Line {
    seq: u64,
    subject: String,
    data: String,
}

fn io_error(path: &Path, error: impl std::fmt::Display) -> Error {
    Error::Backup {
        reason: format!("{}: {error}", path.display()),
    }
}

/// Writes `stream` to `dir/<stream>.jsonl` (through `until` when given); returns its record and its
/// Merkle root.
async fn backup_stream(
    js: &jetstream::Context,
    stream: &str,
    until: Option<u64>,
    dir: &Path,
    progress: &mut (dyn FnMut(&str, u64, u64) + Send),
) -> Result<(StreamBackup, String)> {
    let file = format!("{stream}.jsonl");
    let path = dir.join(&file);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).map_err(|e| io_error(&path, e))?);
    let mut hash = Sha256::new();
    let mut range = CompactRange::new();
    // A gap fails the read itself: a stream with a hole cannot be backed up faithfully.
    let spec = match until {
        Some(0) => None,
        Some(last) => Some(ReadSpec::range(1, last)),
        None => Some(ReadSpec::to_tail(1)),
    };
    let mut reader = match spec {
        Some(spec) => Some(OrderedReader::open(js, stream, spec).await?),
        None => None,
    };
    let Some(reader) = reader.as_mut() else {
        // Nothing to back up: an empty file.
        out.flush().map_err(|e| io_error(&path, e))?;
        out.get_ref().sync_all().map_err(|e| io_error(&path, e))?;
        return Ok((
            StreamBackup {
                stream: stream.to_owned(),
                file,
                messages: 0,
                sha256: hex(&Sha256::digest(b"")),
            },
            hex(&range.root()),
        ));
    };
    let total = reader.last().unwrap_or(0);
    let mut expected = 1;
    while let Some(message) = reader.next().await? {
        let (seq, subject, payload) = (message.seq, message.subject.to_string(), message.payload);
        expected = seq + 1;
        range.append(toolledger_merkle::leaf_hash(&payload));
        let mut line = serde_json::to_vec(&Line {
            seq,
            subject,
            data: base64::engine::general_purpose::STANDARD.encode(&payload),
        })
        .map_err(|e| io_error(&path, e))?;
        line.push(b'\n');
        hash.update(&line);
        out.write_all(&line).map_err(|e| io_error(&path, e))?;
        if seq % 1024 == 0 || seq == total {
            progress(stream, seq, total);
        }
    }
    out.flush().map_err(|e| io_error(&path, e))?;
    out.get_ref().sync_all().map_err(|e| io_error(&path, e))?;
    Ok((
        StreamBackup {
            stream: stream.to_owned(),
            file,
            messages: expected - 1,
            sha256: hex(&hash.finalize()),
        },
        hex(&range.root()),
    ))
}

/// Backs up `ledger` and `checkpoints` (and `extra`'s streams) into `dir` (created; must not hold a
/// backup already). `progress(stream, done, total)` is called every 1024 messages.
pub async fn backup(
    js: &jetstream::Context,
    ledger: &str,
    checkpoints: &str,
    extra: &Extra,
    dir: &Path,
    progress: &mut (dyn FnMut(&str, u64, u64) + Send),
) -> Result<Manifest> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let manifest_path = dir.join("manifest.json");
    if manifest_path.exists() {
        return Err(Error::Backup {
            reason: format!("{} already holds a backup", dir.display()),
        });
    }
    // Checkpoints first: every checkpoint then covers a ledger prefix that the ledger backup holds.
    let (checkpoints_backup, _) = backup_stream(js, checkpoints, None, dir, progress).await?;
    // Whole: a cosignature of a checkpoint signed after the checkpoints' backup is joined to no note.
    let cosignatures = match &extra.cosignatures {
        Some(stream) => Some(backup_stream(js, stream, None, dir, progress).await?.0),
        None => None,
    };
    let (ledger, ledger_root) = backup_stream(js, ledger, None, dir, progress).await?;
    let mut partitions = Vec::new();
    for stream in &extra.partitions {
        let (stream, root) = backup_stream(js, stream, None, dir, progress).await?;
        partitions.push(PartitionBackup { stream, root });
    }
    let directory = match &extra.directory {
        Some(stream) => {
            // There even when nothing of it is signed yet: a missing directory is an error.
            toolledger_ledger::last_sequence(js, stream).await?;
            // As far as the newest directory checkpoint in the backup signs it: a later entry could
            // name partition checkpoints the backup does not hold.
            let signed = signed_directory_size(js, checkpoints, checkpoints_backup.messages).await?;
            Some(backup_stream(js, stream, Some(signed), dir, progress).await?.0)
        }
        None => None,
    };
    let partitioned = !partitions.is_empty() || directory.is_some();
    let manifest = Manifest {
        format: if partitioned {
            BACKUP_FORMAT_PARTITIONED
        } else {
            BACKUP_FORMAT
        }
        .to_owned(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ledger,
        checkpoints: checkpoints_backup,
        ledger_root,
        partitions,
        directory,
        cosignatures,
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| io_error(&manifest_path, e))?;
    let partial = dir.join("manifest.json.partial");
    std::fs::write(&partial, text).map_err(|e| io_error(&partial, e))?;
    std::fs::rename(&partial, &manifest_path).map_err(|e| io_error(&manifest_path, e))?;
    Ok(manifest)
}

/// The size the newest directory checkpoint among `checkpoints`' first `through` messages signs (0
/// when there is none).
async fn signed_directory_size(js: &jetstream::Context, checkpoints: &str, through: u64) -> Result<u64> {
    if through == 0 {
        return Ok(0);
    }
    let spec = ReadSpec::range(1, through).subjects(toolledger_wire::directory::CHECKPOINT_SUBJECT);
    let mut reader = OrderedReader::open(js, checkpoints, spec).await?;
    let mut size = 0;
    while let Some(message) = reader.next().await? {
        let note = String::from_utf8_lossy(&message.payload);
        if let Some((body, _)) = note.split_once("\n\n")
            && let Ok(checkpoint) = toolledger_merkle::Checkpoint::parse_body(&format!("{body}\n"))
        {
            size = checkpoint.size;
        }
    }
    Ok(size)
}

/// One backed-up message: its sequence, subject and bytes.
type Message = (u64, String, Vec<u8>);

/// Reads and checks one backed-up stream: its SHA-256, sequences 1..=n; returns the lines.
fn read_stream(dir: &Path, record: &StreamBackup) -> Result<Vec<Message>> {
    let path = dir.join(&record.file);
    let bytes = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
    let actual = hex(&Sha256::digest(&bytes));
    if actual != record.sha256 {
        return Err(Error::Backup {
            reason: format!(
                "{}: SHA-256 {actual}, the manifest says {}",
                path.display(),
                record.sha256
            ),
        });
    }
    let mut out = Vec::new();
    for (index, line) in bytes.lines().enumerate() {
        let line = line.map_err(|e| io_error(&path, e))?;
        let parsed: Line =
            serde_json::from_str(&line).map_err(|e| io_error(&path, format!("line {}: {e}", index + 1)))?;
        if parsed.seq != index as u64 + 1 {
            return Err(Error::Backup {
                reason: format!("{}: line {} holds seq {}", path.display(), index + 1, parsed.seq),
            });
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(parsed.data)
            .map_err(|e| io_error(&path, format!("line {}: {e}", index + 1)))?;
        out.push((parsed.seq, parsed.subject, data));
    }
    if out.len() as u64 != record.messages {
        return Err(Error::Backup {
            reason: format!(
                "{}: {} messages, the manifest says {}",
                path.display(),
                out.len(),
                record.messages
            ),
        });
    }
    Ok(out)
}

/// Restores a backup into empty `ledger` and `checkpoints` streams (made by `toolledger init` on the
/// target). Checks everything before publishing anything.
pub async fn restore(
    js: &jetstream::Context,
    dir: &Path,
    ledger: &str,
    checkpoints: &str,
    progress: &mut (dyn FnMut(&str, u64, u64) + Send),
) -> Result<Manifest> {
    let manifest_path = dir.join("manifest.json");
    let manifest: Manifest =
        serde_json::from_slice(&std::fs::read(&manifest_path).map_err(|e| io_error(&manifest_path, e))?)
            .map_err(|e| io_error(&manifest_path, e))?;
    if manifest.format != BACKUP_FORMAT && manifest.format != BACKUP_FORMAT_PARTITIONED {
        return Err(Error::Backup {
            reason: format!("unknown backup format {}", manifest.format),
        });
    }
    let root_of = |messages: &[Message]| {
        let mut range = CompactRange::new();
        for (_, _, data) in messages {
            range.append(toolledger_merkle::leaf_hash(data));
        }
        hex(&range.root())
    };
    let entries = read_stream(dir, &manifest.ledger)?;
    let notes = read_stream(dir, &manifest.checkpoints)?;
    if root_of(&entries) != manifest.ledger_root {
        return Err(Error::Backup {
            reason: "the ledger file's Merkle root differs from the manifest's".to_owned(),
        });
    }
    // Everything is checked before anything is published.
    let mut streams: Vec<(String, Vec<Message>)> =
        vec![(ledger.to_owned(), entries), (checkpoints.to_owned(), notes)];
    for partition in &manifest.partitions {
        let messages = read_stream(dir, &partition.stream)?;
        if root_of(&messages) != partition.root {
            return Err(Error::Backup {
                reason: format!(
                    "{}'s file's Merkle root differs from the manifest's",
                    partition.stream.stream
                ),
            });
        }
        streams.push((partition.stream.stream.clone(), messages));
    }
    if let Some(directory) = &manifest.directory {
        streams.push((directory.stream.clone(), read_stream(dir, directory)?));
    }
    if let Some(cosignatures) = &manifest.cosignatures {
        streams.push((cosignatures.stream.clone(), read_stream(dir, cosignatures)?));
    }
    // And every target stream is there and empty before any is written: a restore that stops
    // half-way would leave a target no retry can use.
    for (stream, _) in &streams {
        let last = toolledger_ledger::last_sequence(js, stream).await?;
        if last != 0 {
            return Err(Error::Backup {
                reason: format!("{stream} already holds {last} messages: restore only into a fresh contract"),
            });
        }
    }
    for (stream, messages) in &streams {
        let stream = stream.as_str();
        let total = messages.len() as u64;
        for (seq, subject, data) in messages {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Expected-Last-Sequence", (seq - 1).to_string().as_str());
            let failed = |e: &dyn std::fmt::Display| Error::Backup {
                reason: format!("{stream} seq {seq}: {e}"),
            };
            let ack = js
                .publish_with_headers(subject.clone(), headers, data.clone().into())
                .await
                .map_err(|e| failed(&e))?
                .await
                .map_err(|e| failed(&e))?;
            if ack.sequence != *seq {
                return Err(failed(&format!("stored as seq {}", ack.sequence)));
            }
            if seq % 1024 == 0 || *seq == total {
                progress(stream, *seq, total);
            }
        }
    }
    Ok(manifest)
}
