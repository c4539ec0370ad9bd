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

/// The manifest's format name.
pub const BACKUP_FORMAT: &str = "toolledger-backup/1";

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

/// Writes `stream` to `dir/<stream>.jsonl`; returns its record and, for the ledger, the root.
async fn backup_stream(
    js: &jetstream::Context,
    stream: &str,
    dir: &Path,
    progress: &mut (dyn FnMut(&str, u64, u64) + Send),
) -> Result<(StreamBackup, String)> {
    let file = format!("{stream}.jsonl");
    let path = dir.join(&file);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).map_err(|e| io_error(&path, e))?);
    let mut hash = Sha256::new();
    let mut range = CompactRange::new();
    // A gap fails the read itself: a stream with a hole cannot be backed up faithfully.
    let mut reader = OrderedReader::open(js, stream, ReadSpec::to_tail(1)).await?;
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

/// Backs up `ledger` and `checkpoints` into `dir` (created; must not hold a backup already).
/// `progress(stream, done, total)` is called every 1024 messages.
pub async fn backup(
    js: &jetstream::Context,
    ledger: &str,
    checkpoints: &str,
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
    let (checkpoints, _) = backup_stream(js, checkpoints, dir, progress).await?;
    let (ledger, ledger_root) = backup_stream(js, ledger, dir, progress).await?;
    let manifest = Manifest {
        format: BACKUP_FORMAT.to_owned(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ledger,
        checkpoints,
        ledger_root,
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| io_error(&manifest_path, e))?;
    let partial = dir.join("manifest.json.partial");
    std::fs::write(&partial, text).map_err(|e| io_error(&partial, e))?;
    std::fs::rename(&partial, &manifest_path).map_err(|e| io_error(&manifest_path, e))?;
    Ok(manifest)
}

/// Reads and checks one backed-up stream: its SHA-256, sequences 1..=n; returns the lines.
fn read_stream(dir: &Path, record: &StreamBackup) -> Result<Vec<(u64, String, Vec<u8>)>> {
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
    if manifest.format != BACKUP_FORMAT {
        return Err(Error::Backup {
            reason: format!("unknown backup format {}", manifest.format),
        });
    }
    let entries = read_stream(dir, &manifest.ledger)?;
    let notes = read_stream(dir, &manifest.checkpoints)?;
    let mut range = CompactRange::new();
    for (_, _, data) in &entries {
        range.append(toolledger_merkle::leaf_hash(data));
    }
    if hex(&range.root()) != manifest.ledger_root {
        return Err(Error::Backup {
            reason: "the ledger file's Merkle root differs from the manifest's".to_owned(),
        });
    }
    for (stream, messages) in [(ledger, &entries), (checkpoints, &notes)] {
        let last = toolledger_ledger::last_sequence(js, stream).await?;
        if last != 0 {
            return Err(Error::Backup {
                reason: format!("{stream} already holds {last} messages: restore only into a fresh contract"),
            });
        }
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
