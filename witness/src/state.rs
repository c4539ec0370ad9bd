//! The latest cosigned checkpoint per log, on disk.
//!
//! One file per origin, `<state dir>/<hex SHA-256(origin)>.checkpoint`, holding the checkpoint note as
//! the log signed it followed by the witness's own cosignature line: what the witness vouched for, in
//! a form anyone can check. It is replaced atomically:
//!
//! ```text
//! write <name>.tmp ─▶ fsync file ─▶ rename over <name> ─▶ fsync the directory
//! ```
//!
//! so after a crash or `kill -9` at any point the file holds either the previous checkpoint or the
//! new one, never a torn mix, and a cosignature is only returned after the new one is on disk.
//!
//! Why files and not SQLite: the state is one small note per log, written at checkpoint cadence
//! (seconds apart) and only under the origin's in-process lock, so a database's concurrency and
//! queries buy nothing, while a plain note can be read and checked by an operator with `cat` and any
//! C2SP verifier.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use toolledger_merkle::note::Note;
use toolledger_merkle::{Checkpoint, Hash};

use crate::{Error, Result};

/// What the witness last cosigned for one log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latest {
    /// The checkpoint's size.
    pub size: u64,
    /// The checkpoint's root.
    pub root: Hash,
    /// The note as stored: the log's checkpoint and the witness's cosignature.
    pub note: String,
}

/// The state file of `origin` in `dir`.
pub fn state_file(dir: &Path, origin: &str) -> PathBuf {
    let digest = Sha256::digest(origin.as_bytes());
    let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{name}.checkpoint"))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::StateFile {
        path: path.display().to_string(),
        source,
    }
}

/// Reads the latest checkpoint of `origin` from `path`; `None` when the witness never cosigned one.
pub fn load(path: &Path, origin: &str) -> Result<Option<Latest>> {
    let note = match std::fs::read_to_string(path) {
        Ok(note) => note,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error(path)(error)),
    };
    let corrupt = |reason: String| Error::CorruptState {
        path: path.display().to_string(),
        reason,
    };
    let parsed = Note::parse(&note).map_err(|e| corrupt(e.to_string()))?;
    let checkpoint = Checkpoint::parse_body(&parsed.text).map_err(|e| corrupt(e.to_string()))?;
    if checkpoint.origin != origin {
        return Err(corrupt(format!(
            "holds a checkpoint of {:?}, not {origin:?}",
            checkpoint.origin
        )));
    }
    Ok(Some(Latest {
        size: checkpoint.size,
        root: checkpoint.root,
        note,
    }))
}

/// Replaces the file at `path` with `note`, durably and atomically (see the module doc).
pub fn store(path: &Path, note: &str) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::Config {
        reason: format!("state file {} has no directory", path.display()),
    })?;
    let tmp = path.with_extension("checkpoint.tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_error(&tmp))?;
    file.write_all(note.as_bytes()).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io_error(path))?;
    // The rename is durable only once the directory entry is.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolledger_merkle::NoteSigner;

    #[test]
    fn stores_replace_and_survive_a_leftover_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = NoteSigner::generate("example.com/log").unwrap();
        let path = state_file(dir.path(), "example.com/log");
        assert_eq!(load(&path, "example.com/log").unwrap(), None);
        for size in [3, 7] {
            let note = Checkpoint::new("example.com/log", size, [size as u8; 32])
                .sign(&[&log])
                .unwrap();
            store(&path, &note).unwrap();
            let latest = load(&path, "example.com/log").unwrap().unwrap();
            assert_eq!((latest.size, latest.note), (size, note));
        }
        // A crash between writing the temp file and the rename leaves the old checkpoint in force.
        std::fs::write(path.with_extension("checkpoint.tmp"), "torn").unwrap();
        assert_eq!(load(&path, "example.com/log").unwrap().unwrap().size, 7);
        assert!(matches!(
            load(&path, "other.example/log"),
            Err(Error::CorruptState { .. })
        ));
        std::fs::write(&path, "not a note").unwrap();
        assert!(matches!(
            load(&path, "example.com/log"),
            Err(Error::CorruptState { .. })
        ));
    }
}
