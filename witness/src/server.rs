//! The witness service: its key, its known logs, and `POST /add-checkpoint`.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use nix::fcntl::{Flock, FlockArg};
use toolledger_merkle::note::Note;
use toolledger_merkle::{Checkpoint, CosignatureSigner, CosignatureVerifier, Verifiers, verify_consistency};

use crate::protocol::{AddCheckpoint, SIZE_CONTENT_TYPE};
use crate::state::{self, Latest};
use crate::{Error, Result};

/// The largest request body: a checkpoint is a few hundred bytes and a proof at most 63 lines, so this
/// leaves room for many log signatures while refusing anything that is not a checkpoint.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// A log the witness cosigns for: its origin line and the keys its checkpoints must be signed with.
#[derive(Clone, Debug)]
pub struct KnownLog {
    /// The checkpoint origin line.
    pub origin: String,
    /// The log's checkpoint verifier keys (during a rotation, the old and the new).
    pub verifiers: Verifiers,
}

struct LogSlot {
    verifiers: Verifiers,
    path: PathBuf,
    /// The latest cosigned checkpoint; held across the check and the write, so requests for one log
    /// are handled one at a time.
    latest: tokio::sync::Mutex<Option<Latest>>,
}

/// Why a checkpoint was not cosigned; each maps to the status tlog-witness names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// 400: the body is not an add-checkpoint request, or the checkpoint not a checkpoint.
    #[error("{0}")]
    Malformed(String),
    /// 404: the witness does not know this log.
    #[error("unknown log {0:?}")]
    UnknownLog(String),
    /// 403: no signature by the log's keys verifies.
    #[error("checkpoint not signed by a key trusted for {origin:?}: {reason}")]
    NotSigned {
        /// The log.
        origin: String,
        /// The verifier's reason.
        reason: String,
    },
    /// 400: the old size is past the checkpoint's size.
    #[error("old size {old_size} exceeds the checkpoint size {size}")]
    OldSizeTooLarge {
        /// The request's old size.
        old_size: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// 409: the old size is not the witness's latest size for the log.
    #[error("the witness's latest size is {size}")]
    Conflict {
        /// The latest cosigned size.
        size: u64,
    },
    /// 409: a checkpoint of the witness's latest size with another root: the log forked.
    #[error("checkpoint of size {size} has a different root than the one cosigned")]
    Fork {
        /// The latest cosigned size (equal to the checkpoint's).
        size: u64,
    },
    /// 422: the consistency proof does not verify.
    #[error("consistency proof from {old_size} to {size} does not verify")]
    Inconsistent {
        /// The old size.
        old_size: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// 500: the witness could not make or persist the cosignature.
    #[error("witness failure: {0}")]
    Internal(#[source] Error),
}

impl Refusal {
    /// The HTTP status tlog-witness prescribes.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Malformed(_) | Self::OldSizeTooLarge { .. } => StatusCode::BAD_REQUEST,
            Self::UnknownLog(_) => StatusCode::NOT_FOUND,
            Self::NotSigned { .. } => StatusCode::FORBIDDEN,
            Self::Conflict { .. } | Self::Fork { .. } => StatusCode::CONFLICT,
            Self::Inconsistent { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            // The body is the size alone, as clients parse it.
            Self::Conflict { size } | Self::Fork { size } => (
                StatusCode::CONFLICT,
                [(header::CONTENT_TYPE, SIZE_CONTENT_TYPE)],
                format!("{size}\n"),
            )
                .into_response(),
            other => (other.status(), format!("{other}\n")).into_response(),
        }
    }
}

/// A running witness's state: its key, the logs it knows and what it last cosigned for each.
pub struct Witness {
    signer: CosignatureSigner,
    logs: HashMap<String, LogSlot>,
    /// Held for the witness's life: a second process on the same directory could pass the old-size
    /// check against the same state and undo this one's writes.
    _lock: Flock<File>,
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witness")
            .field("signer", &self.signer)
            .field("logs", &self.logs.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| Error::StateFile {
        path: dir.display().to_string(),
        source,
    })
}

impl Witness {
    /// Opens the state directory (creating it), locks it and loads the latest checkpoint of each
    /// known log. A state file that cannot be read is an error, never a fresh start.
    pub fn open(state_dir: &Path, signer: CosignatureSigner, logs: Vec<KnownLog>) -> Result<Self> {
        if logs.is_empty() {
            return Err(Error::Config {
                reason: "no logs configured: add [[witness.logs]] with an origin and its keys".to_owned(),
            });
        }
        create_private_dir(state_dir)?;
        let lock_path = state_dir.join("lock");
        let io = |source| Error::StateFile {
            path: lock_path.display().to_string(),
            source,
        };
        let lock_file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io)?;
        let lock =
            Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|_| Error::StateLocked {
                path: state_dir.display().to_string(),
            })?;
        let mut slots = HashMap::new();
        for log in logs {
            if log.verifiers.keys().is_empty() {
                return Err(Error::Config {
                    reason: format!("log {:?} has no verifier keys", log.origin),
                });
            }
            let path = state::state_file(state_dir, &log.origin);
            let latest = state::load(&path, &log.origin)?;
            let slot = LogSlot {
                verifiers: log.verifiers,
                path,
                latest: tokio::sync::Mutex::new(latest),
            };
            if slots.insert(log.origin.clone(), slot).is_some() {
                return Err(Error::Config {
                    reason: format!("log {:?} is configured twice", log.origin),
                });
            }
        }
        Ok(Self {
            signer,
            logs: slots,
            _lock: lock,
        })
    }

    /// The witness's public key, for verifiers' witness policies.
    pub fn verifier(&self) -> CosignatureVerifier {
        self.signer.verifier()
    }

    /// The size of the latest checkpoint cosigned for `origin` (0 for none); `None` for an unknown log.
    pub async fn latest_size(&self, origin: &str) -> Option<u64> {
        let slot = self.logs.get(origin)?;
        Some(slot.latest.lock().await.as_ref().map_or(0, |l| l.size))
    }

    /// Checks a request, and when it passes records the checkpoint and returns the cosignature line.
    pub async fn add_checkpoint(&self, body: &str) -> std::result::Result<String, Refusal> {
        let request = AddCheckpoint::parse(body).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let note = Note::parse(&request.checkpoint).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let checkpoint = Checkpoint::parse_body(&note.text).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let slot = self
            .logs
            .get(&checkpoint.origin)
            .ok_or_else(|| Refusal::UnknownLog(checkpoint.origin.clone()))?;
        slot.verifiers
            .verify(&request.checkpoint)
            .map_err(|e| Refusal::NotSigned {
                origin: checkpoint.origin.clone(),
                reason: e.to_string(),
            })?;
        let (old_size, size) = (request.old_size, checkpoint.size);
        if old_size > size {
            return Err(Refusal::OldSizeTooLarge { old_size, size });
        }

        let mut latest = slot.latest.lock().await;
        let (latest_size, latest_root) = match latest.as_ref() {
            Some(l) => (l.size, l.root),
            None => (0, toolledger_merkle::empty_root()),
        };
        if old_size != latest_size {
            return Err(Refusal::Conflict { size: latest_size });
        }
        if size == latest_size && latest.is_some() && checkpoint.root != latest_root {
            tracing::warn!(
                origin = %checkpoint.origin,
                size,
                checkpoint = %request.checkpoint,
                "log signed two different trees of the same size: refused"
            );
            return Err(Refusal::Fork { size });
        }
        if verify_consistency(old_size, size, &request.proof, &latest_root, &checkpoint.root).is_err() {
            tracing::warn!(
                origin = %checkpoint.origin,
                old_size,
                size,
                checkpoint = %request.checkpoint,
                "checkpoint not consistent with the latest cosigned: refused"
            );
            return Err(Refusal::Inconsistent { old_size, size });
        }
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let line = self
            .signer
            .cosign(&note.text, timestamp)
            .map_err(|e| Refusal::Internal(e.into()))?;
        let stored = format!("{}{line}", request.checkpoint);
        let path = slot.path.clone();
        let note_to_store = stored.clone();
        // fsyncs take milliseconds: off the async workers, while the origin stays locked.
        tokio::task::spawn_blocking(move || state::store(&path, &note_to_store))
            .await
            .map_err(|e| {
                Refusal::Internal(Error::Config {
                    reason: format!("state writer panicked: {e}"),
                })
            })?
            .map_err(Refusal::Internal)?;
        *latest = Some(Latest {
            size,
            root: checkpoint.root,
            note: stored,
        });
        drop(latest);
        tracing::info!(origin = %checkpoint.origin, old_size, size, "cosigned");
        Ok(line)
    }
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: String) -> Response {
    match witness.add_checkpoint(&body).await {
        Ok(line) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            line,
        )
            .into_response(),
        Err(refusal) => {
            if let Refusal::Internal(error) = &refusal {
                tracing::error!(%error, "cosignature not recorded");
            }
            refusal.into_response()
        }
    }
}

/// The witness's routes: `POST /add-checkpoint` (the submission prefix is the server's root).
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(witness)
}

/// Binds `listen` and serves until `shutdown` completes; returns the bound address and the server task.
pub async fn serve(
    witness: Witness,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let serve_error = |source| Error::Serve {
        addr: listen.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(serve_error)?;
    let bound = listener.local_addr().map_err(serve_error)?;
    let app = router(Arc::new(witness));
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "witness server stopped");
        }
    });
    Ok((bound, task))
}

/// The witness's cosigning key from `path`, or a new one named `name` written there (owner-only) with
/// its verifier key beside it (`.pub`) when there is none yet. Returns the key and whether it is new.
pub fn load_or_create_key(path: &Path, name: Option<&str>) -> Result<(CosignatureSigner, bool)> {
    if path.exists() {
        let signer = CosignatureSigner::load(path)?;
        if let Some(name) = name.filter(|n| *n != signer.name()) {
            return Err(Error::Config {
                reason: format!(
                    "key file {} is for witness {:?}, not {name:?}",
                    path.display(),
                    signer.name()
                ),
            });
        }
        return Ok((signer, false));
    }
    let name = name.ok_or_else(|| Error::Config {
        reason: format!(
            "no key at {} and no witness name to make one with (set witness.name)",
            path.display()
        ),
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    let signer = CosignatureSigner::generate(name)?;
    signer.save(path)?;
    let public = path.with_extension("pub");
    std::fs::write(&public, format!("{}\n", signer.verifier())).map_err(|source| Error::StateFile {
        path: public.display().to_string(),
        source,
    })?;
    Ok((signer, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolledger_merkle::{Cosigners, NoteSigner};

    fn witness(dir: &Path, log: &NoteSigner) -> Witness {
        let signer = CosignatureSigner::generate("witness.example/w").unwrap();
        let logs = vec![KnownLog {
            origin: "example.com/log".to_owned(),
            verifiers: Verifiers::new([log.verifier()]),
        }];
        Witness::open(dir, signer, logs).unwrap()
    }

    /// Trees of single-leaf steps small enough to prove by hand: sizes 0 → 1 → 2.
    #[tokio::test]
    async fn checks_in_the_order_the_spec_gives_and_keeps_state_locked() {
        let dir = tempfile::tempdir().unwrap();
        let log = NoteSigner::generate("example.com/log").unwrap();
        let w = witness(dir.path(), &log);
        // A second process (here: a second open) cannot take the same state directory.
        assert!(matches!(
            Witness::open(
                dir.path(),
                CosignatureSigner::generate("w2").unwrap(),
                vec![KnownLog {
                    origin: "example.com/log".to_owned(),
                    verifiers: Verifiers::new([log.verifier()]),
                }]
            ),
            Err(Error::StateLocked { .. })
        ));
        let a = toolledger_merkle::leaf_hash(b"a");
        let b = toolledger_merkle::leaf_hash(b"b");
        let root2 = toolledger_merkle::node_hash(&a, &b);
        let one = Checkpoint::new("example.com/log", 1, a).sign(&[&log]).unwrap();
        let two = Checkpoint::new("example.com/log", 2, root2)
            .sign(&[&log])
            .unwrap();
        let body = |old: u64, proof: Vec<[u8; 32]>, note: &str| {
            AddCheckpoint {
                old_size: old,
                proof,
                checkpoint: note.to_owned(),
            }
            .to_body()
        };
        let line = w.add_checkpoint(&body(0, vec![], &one)).await.unwrap();
        let cosigned = format!("{one}{line}");
        assert_eq!(Cosigners::new([w.verifier()]).verify(&cosigned).unwrap().len(), 1);
        let status = |r: std::result::Result<String, Refusal>| r.unwrap_err().status().as_u16();
        assert_eq!(status(w.add_checkpoint(&body(0, vec![], &two)).await), 409);
        assert_eq!(status(w.add_checkpoint(&body(3, vec![], &two)).await), 400);
        assert_eq!(status(w.add_checkpoint(&body(1, vec![a], &two)).await), 422);
        let stranger = NoteSigner::generate("example.com/log").unwrap();
        let forged = Checkpoint::new("example.com/log", 2, root2)
            .sign(&[&stranger])
            .unwrap();
        assert_eq!(status(w.add_checkpoint(&body(1, vec![b], &forged)).await), 403);
        let other = NoteSigner::generate("other.example/log").unwrap();
        let unknown = Checkpoint::new("other.example/log", 2, root2)
            .sign(&[&other])
            .unwrap();
        assert_eq!(status(w.add_checkpoint(&body(1, vec![b], &unknown)).await), 404);
        assert_eq!(status(w.add_checkpoint("old 1\n").await), 400);
        w.add_checkpoint(&body(1, vec![b], &two)).await.unwrap();
        // A fork of the latest size, validly signed, is refused.
        let fork = Checkpoint::new("example.com/log", 2, [7; 32])
            .sign(&[&log])
            .unwrap();
        assert!(matches!(
            w.add_checkpoint(&body(2, vec![], &fork)).await,
            Err(Refusal::Fork { size: 2 })
        ));
        // The same checkpoint again is cosigned again (a fresh timestamp, nothing rolled back).
        w.add_checkpoint(&body(2, vec![], &two)).await.unwrap();
        assert_eq!(w.latest_size("example.com/log").await, Some(2));
        drop(w);
        // Reopened: the latest size survives.
        let again = witness(dir.path(), &log);
        assert_eq!(again.latest_size("example.com/log").await, Some(2));
        assert_eq!(status(again.add_checkpoint(&body(1, vec![b], &two)).await), 409);
    }

    #[test]
    fn the_key_is_made_once_privately_and_its_name_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/witness.key");
        assert!(load_or_create_key(&path, None).is_err());
        let (made, created) = load_or_create_key(&path, Some("witness.example/w1")).unwrap();
        assert!(created);
        let (loaded, created) = load_or_create_key(&path, Some("witness.example/w1")).unwrap();
        assert!(!created);
        assert_eq!(loaded.verifier(), made.verifier());
        assert!(load_or_create_key(&path, Some("someone.else/w")).is_err());
        let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
        assert_eq!(CosignatureVerifier::parse(&public).unwrap(), made.verifier());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
