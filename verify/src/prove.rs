//! Inclusion and consistency proofs as JSON documents that anyone holding the verifier key can check
//! offline, with `toolledger_merkle` functions alone.
//!
//! ```text
//! prove_inclusion(seq, size?)  ─▶ signed checkpoint of size S ─▶ audit path from tiles (or from the
//!                                 │                               ledger when tiles are missing)
//!                                 └▶ entry bytes: its bundle when it proves, else the ledger ─leaf_hash─
//!                                    ─▶ InclusionOutput ─check()─▶ ok
//! prove_consistency(A, B)      ─▶ signed checkpoint of size B (and A when signed) ─▶ ConsistencyOutput
//! ```
//!
//! Proofs come from the tiles when the tiles agree with the signed root, else from the ledger itself
//! (the tiles are a cache). Every output is checked before it is returned.

use async_nats::jetstream;
use serde::{Deserialize, Serialize};
use toolledger_ledger::cosignatures::cosigned_note;
use toolledger_merkle::{
    Checkpoint, Hash, TileReader, TileStore, TiledLog, Verifiers, WitnessPolicy, WitnessVerdict, leaf_hash,
};

use std::sync::Arc;

use crate::verify::{Signed, Trust};
use crate::{Error, Result, hex, parse_hash};
use toolledger_ledger::{OrderedReader, ReadSpec, last_sequence};

/// Where proofs come from.
#[derive(Debug, Clone)]
pub struct ProveSource {
    /// The ledger stream.
    pub ledger_stream: String,
    /// The checkpoint stream.
    pub checkpoint_stream: String,
    /// The keys whose checkpoints are trusted.
    pub verifiers: Verifiers,
    /// The log's origin; `None` takes the first trusted checkpoint's.
    pub origin: Option<String>,
    /// The tiles, when available (proofs are recomputed from the ledger otherwise).
    pub tiles: Option<TileStore>,
    /// The trusted checkpoints read so far (shared by the source's clones): a signed checkpoint
    /// never changes, so each is read and its signature checked once, and a proof reads only the
    /// checkpoints signed since the last one.
    pub trusted: TrustedCache,
}

impl ProveSource {
    /// The source of one log: its stream, the stream of its checkpoints, the keys trusted to sign
    /// them, their origin and its tiles (when there are some); nothing read yet.
    pub fn new(
        ledger_stream: String,
        checkpoint_stream: String,
        verifiers: Verifiers,
        origin: String,
        tiles: Option<TileStore>,
    ) -> Self {
        Self {
            ledger_stream,
            checkpoint_stream,
            verifiers,
            origin: Some(origin),
            tiles,
            trusted: TrustedCache::default(),
        }
    }
}

/// The trusted checkpoints a [`ProveSource`] has read; empty at first ([`Default`]).
#[derive(Debug, Clone, Default)]
pub struct TrustedCache(Arc<tokio::sync::Mutex<Option<Trust>>>);

/// Proof that a ledger entry is in a signed tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InclusionOutput {
    /// The entry's ledger sequence.
    pub ledger_seq: u64,
    /// Its leaf index in the tree (`ledger_seq - 1`).
    pub leaf_index: u64,
    /// The size of the signed tree.
    pub tree_size: u64,
    /// The entry's canonical bytes (RFC 8785 JSON text), exactly as the ledger holds them.
    pub entry: String,
    /// `SHA-256(0x00 || entry)`, hex.
    pub leaf_hash: String,
    /// The audit path, bottom-up, hex.
    pub proof: Vec<String>,
    /// The signed root, hex (also in the checkpoint).
    pub root: String,
    /// The C2SP signed checkpoint note of size `tree_size`.
    pub checkpoint: String,
}

/// Proof that a tree is a prefix of a later signed tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistencyOutput {
    /// The older size.
    pub old_size: u64,
    /// The newer size.
    pub new_size: u64,
    /// The older root, hex.
    pub old_root: String,
    /// The newer root, hex.
    pub new_root: String,
    /// The consistency path (RFC 6962 order), hex.
    pub proof: Vec<String>,
    /// The signed checkpoint of the older size, when one was published.
    pub old_checkpoint: Option<String>,
    /// The signed checkpoint of the newer size.
    pub new_checkpoint: String,
}

fn hashes(hexes: &[String]) -> Result<Vec<Hash>> {
    hexes
        .iter()
        .map(|h| {
            parse_hash(h).ok_or_else(|| Error::MalformedProof {
                reason: format!("{h:?} is not a hex hash"),
            })
        })
        .collect()
}

fn hash(h: &str, what: &str) -> Result<Hash> {
    parse_hash(h).ok_or_else(|| Error::MalformedProof {
        reason: format!("{what} {h:?} is not a hex hash"),
    })
}

fn open_checkpoint(note: &str, size: u64, root: &Hash, verifiers: &Verifiers) -> Result<Checkpoint> {
    let checkpoint = Checkpoint::open(note, verifiers)?;
    if checkpoint.size != size || checkpoint.root != *root {
        return Err(Error::MalformedProof {
            reason: format!(
                "checkpoint is for size {} root {}, the proof for size {size} root {}",
                checkpoint.size,
                hex(&checkpoint.root),
                hex(root)
            ),
        });
    }
    Ok(checkpoint)
}

impl InclusionOutput {
    /// Checks the proof offline: the checkpoint's signature, the entry's leaf hash, and the audit path
    /// from the leaf to the signed root.
    pub fn check(&self, verifiers: &Verifiers) -> Result<()> {
        let root = hash(&self.root, "root")?;
        open_checkpoint(&self.checkpoint, self.tree_size, &root, verifiers)?;
        let leaf = hash(&self.leaf_hash, "leaf hash")?;
        if leaf_hash(self.entry.as_bytes()) != leaf {
            return Err(Error::MalformedProof {
                reason: "the entry does not hash to the leaf hash".to_owned(),
            });
        }
        if self.leaf_index + 1 != self.ledger_seq {
            return Err(Error::MalformedProof {
                reason: "leaf index is not ledger seq - 1".to_owned(),
            });
        }
        toolledger_merkle::verify_inclusion(
            &leaf,
            self.leaf_index,
            self.tree_size,
            &hashes(&self.proof)?,
            &root,
        )?;
        Ok(())
    }
}

impl ConsistencyOutput {
    /// Checks the proof offline: the signatures and the consistency path between the two roots.
    pub fn check(&self, verifiers: &Verifiers) -> Result<()> {
        let old_root = hash(&self.old_root, "old root")?;
        let new_root = hash(&self.new_root, "new root")?;
        open_checkpoint(&self.new_checkpoint, self.new_size, &new_root, verifiers)?;
        if let Some(old) = &self.old_checkpoint {
            open_checkpoint(old, self.old_size, &old_root, verifiers)?;
        }
        toolledger_merkle::verify_consistency(
            self.old_size,
            self.new_size,
            &hashes(&self.proof)?,
            &old_root,
            &new_root,
        )?;
        Ok(())
    }
}

/// A reader over a tree of `size` whose root is `root`: the tiles when they agree, else tiles
/// rebuilt in memory from the ledger's first `size` entries.
pub(crate) async fn tree_reader(
    js: &jetstream::Context,
    source: &ProveSource,
    size: u64,
    root: &Hash,
) -> Result<TileReader> {
    if let Some(tiles) = &source.tiles {
        let reader = TileReader::new(tiles.clone());
        match reader.root(size).await {
            Ok(found) if found == *root => return Ok(reader),
            Ok(_) => tracing::warn!(
                size,
                "tiles disagree with the signed root; proving from the ledger"
            ),
            Err(error) => tracing::warn!(%error, size, "tiles unusable; proving from the ledger"),
        }
    }
    let mut reader = OrderedReader::open(js, &source.ledger_stream, ReadSpec::to_tail(1)).await?;
    let mut leaves = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    while (leaves.len() as u64) < size {
        let Some(message) = reader.next().await? else {
            return Err(Error::NoSuchEntry {
                seq: size,
                last: leaves.len() as u64,
            });
        };
        leaves.push(leaf_hash(&message.payload));
    }
    let store = TileStore::in_memory();
    TiledLog::rebuild(store.clone(), leaves).await?;
    Ok(TileReader::new(store))
}

/// The trusted checkpoints, in growing size order: the source's cache, with the checkpoints signed
/// since it was last read taken in (the stream's tail is one request; a stream that shrank, made
/// again, is read from the start).
pub(crate) async fn checkpoints(js: &jetstream::Context, source: &ProveSource) -> Result<Arc<Vec<Signed>>> {
    let mut cache = source.trusted.0.lock().await;
    let last = last_sequence(js, &source.checkpoint_stream).await?;
    let origin = source.origin.as_deref();
    let trust = cache.get_or_insert_with(|| Trust::new(origin));
    if last < trust.last_seq {
        *trust = Trust::new(origin);
    }
    if last > trust.last_seq {
        let spec = ReadSpec::range(trust.last_seq + 1, last);
        let mut reader = OrderedReader::open(js, &source.checkpoint_stream, spec).await?;
        while let Some(message) = reader.next().await? {
            trust.take(&message, &source.verifiers);
        }
    }
    Ok(Arc::clone(&trust.trusted))
}

/// A trusted signed checkpoint, as a checkpoint endpoint serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedCheckpoint {
    /// Its sequence in the checkpoint stream.
    pub checkpoint_seq: u64,
    /// The log's origin.
    pub origin: String,
    /// The tree size.
    pub size: u64,
    /// The root, hex.
    pub root: String,
    /// The C2SP signed note, verbatim.
    pub note: String,
}

impl From<&Signed> for SignedCheckpoint {
    fn from(signed: &Signed) -> Self {
        Self {
            checkpoint_seq: signed.seq,
            origin: signed.checkpoint.origin.clone(),
            size: signed.checkpoint.size,
            root: hex(&signed.checkpoint.root),
            note: signed.note.clone(),
        }
    }
}

/// How many of the newest checkpoints are looked at for one that meets a witness policy (witnesses
/// cosign within seconds of a checkpoint, so the newest few are the candidates).
const WITNESSED_CANDIDATES: usize = 16;

/// A trusted checkpoint with the cosignatures ATL_COSIGNATURES holds for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessedCheckpoint {
    /// The checkpoint; its `note` carries the witnesses' lines.
    pub checkpoint: SignedCheckpoint,
    /// What the policy found on it.
    pub verdict: WitnessVerdict,
}

/// The newest trusted checkpoint of size at least `covering` whose cosignatures meet `policy`
/// (among the newest few), else the newest one of that size with the cosignatures it has (its
/// verdict then says the quorum is not met). `None` when no trusted checkpoint is that large.
pub async fn witnessed_checkpoint(
    js: &jetstream::Context,
    source: &ProveSource,
    policy: Option<&WitnessPolicy>,
    covering: u64,
) -> Result<Option<WitnessedCheckpoint>> {
    let trusted = checkpoints(js, source).await?;
    Ok(witnessed_in(js, &trusted, policy, covering, &mut Vec::new())
        .await?
        .map(|(signed, note, verdict)| WitnessedCheckpoint {
            checkpoint: SignedCheckpoint {
                note,
                ..SignedCheckpoint::from(signed)
            },
            verdict,
        }))
}

/// [`witnessed_checkpoint`] over `trusted`: the checkpoint, its cosigned note, and the verdict
/// (empty without a policy). A candidate on which a listed witness's line does not verify counts
/// for nothing here and is added to `bad` (its checkpoint sequence and why): `verify` reports it.
pub(crate) async fn witnessed_in<'a>(
    js: &jetstream::Context,
    trusted: &'a [Signed],
    policy: Option<&WitnessPolicy>,
    covering: u64,
    bad: &mut Vec<(u64, String)>,
) -> Result<Option<(&'a Signed, String, WitnessVerdict)>> {
    let covering: Vec<&Signed> = trusted
        .iter()
        .rev()
        .take_while(|s| s.checkpoint.size >= covering)
        .take(WITNESSED_CANDIDATES)
        .collect();
    let Some(&newest) = covering.first() else {
        return Ok(None);
    };
    let mut verdict_of = |signed: &Signed, note: &str| match policy {
        Some(policy) => policy.check(note).unwrap_or_else(|error| {
            bad.push((signed.seq, error.to_string()));
            WitnessVerdict {
                cosigned_by: Vec::new(),
                quorum: policy.quorum(),
                of: policy.cosigners().keys().len(),
            }
        }),
        None => WitnessVerdict::default(),
    };
    let newest_note = cosigned_note(js, &newest.subject, &newest.note, newest.checkpoint.size).await?;
    let newest_verdict = verdict_of(newest, &newest_note);
    if policy.is_none() || newest_verdict.met() {
        return Ok(Some((newest, newest_note, newest_verdict)));
    }
    for &candidate in &covering[1..] {
        let note = cosigned_note(js, &candidate.subject, &candidate.note, candidate.checkpoint.size).await?;
        let verdict = verdict_of(candidate, &note);
        if verdict.met() {
            return Ok(Some((candidate, note, verdict)));
        }
    }
    Ok(Some((newest, newest_note, newest_verdict)))
}

/// The newest trusted checkpoint, or the trusted checkpoint of tree size `size`. Every signature is
/// checked (once, see [`TrustedCache`]) and untrusted or out-of-order notes are never served.
pub async fn signed_checkpoint(
    js: &jetstream::Context,
    source: &ProveSource,
    size: Option<u64>,
) -> Result<SignedCheckpoint> {
    let trusted = checkpoints(js, source).await?;
    let found = match size {
        Some(size) => trusted.iter().find(|s| s.checkpoint.size == size),
        None => trusted.last(),
    };
    found
        .map(SignedCheckpoint::from)
        .ok_or_else(|| Error::NoCheckpoint {
            wanted: size.map_or_else(|| "at all".to_owned(), |size| format!("of size {size}")),
        })
}

/// Proves that the entry at ledger `seq` is in the signed tree of `checkpoint_size`, or in the
/// newest signed tree when no size is given.
pub async fn prove_inclusion(
    js: &jetstream::Context,
    source: &ProveSource,
    seq: u64,
    checkpoint_size: Option<u64>,
) -> Result<InclusionOutput> {
    let trusted = checkpoints(js, source).await?;
    // The ledger's tail is asked for only when no trusted checkpoint covers `seq`: to say which.
    if seq == 0 || trusted.last().is_none_or(|s| s.checkpoint.size < seq) {
        let last = last_sequence(js, &source.ledger_stream).await?;
        if seq == 0 || seq > last {
            return Err(Error::NoSuchEntry { seq, last });
        }
    }
    let signed = match checkpoint_size {
        Some(size) => trusted
            .iter()
            .find(|s| s.checkpoint.size == size && size >= seq)
            .ok_or_else(|| Error::NoCheckpoint {
                wanted: format!("of size {size} covering seq {seq}"),
            })?,
        None => trusted
            .last()
            .filter(|s| s.checkpoint.size >= seq)
            .ok_or_else(|| Error::NoCheckpoint {
                wanted: format!("covering seq {seq}"),
            })?,
    };
    let reader = tree_reader(js, source, signed.checkpoint.size, &signed.checkpoint.root).await?;
    inclusion_in(js, source, &reader, signed, seq).await
}

/// Proves the entry at ledger `seq` is in the signed tree `signed`, with proofs from `reader` (a
/// reader over that tree). Shared by [`prove_inclusion`] and evidence bundles, which prove many
/// entries in one tree.
pub(crate) async fn inclusion_in(
    js: &jetstream::Context,
    source: &ProveSource,
    reader: &TileReader,
    signed: &Signed,
    seq: u64,
) -> Result<InclusionOutput> {
    let size = signed.checkpoint.size;
    let root = signed.checkpoint.root;
    if seq == 0 || seq > size {
        return Err(Error::NoCheckpoint {
            wanted: format!("of size {size} covering seq {seq}"),
        });
    }
    let proof = reader.inclusion_proof(seq - 1, size).await?;
    // The entry from its bundle when that proves against the signed root, else from the ledger
    // (which must prove): each entry is hashed and checked once.
    let bundled = bundled_entry(source, seq, size).await.and_then(|entry| {
        let leaf = leaf_hash(&entry);
        if proof.verify(&leaf, &root).is_ok() {
            return Some((entry, leaf));
        }
        tracing::warn!(
            seq,
            "entry bundle disagrees with the signed tree; reading the ledger"
        );
        None
    });
    let (entry, leaf) = match bundled {
        Some(proved) => proved,
        None => {
            let entry = toolledger_ledger::message(js, &source.ledger_stream, seq).await?;
            let leaf = leaf_hash(&entry);
            proof
                .verify(&leaf, &root)
                .map_err(|e| Error::ProofDoesNotVerify {
                    reason: e.to_string(),
                })?;
            (entry, leaf)
        }
    };
    Ok(InclusionOutput {
        ledger_seq: seq,
        leaf_index: seq - 1,
        tree_size: size,
        entry: String::from_utf8(entry.to_vec()).map_err(|_| Error::ProofDoesNotVerify {
            reason: format!("ledger seq {seq} is not UTF-8 text"),
        })?,
        leaf_hash: hex(&leaf),
        proof: proof.hashes.iter().map(|h| hex(h)).collect(),
        root: hex(&root),
        checkpoint: signed.note.clone(),
    })
}

/// Ledger entry `seq` from the source's entry bundles, unchecked; `None` when there are no tiles, its
/// bundle is not written or cannot be read, or it ends past `size` (the newest entries, whose bundle
/// is seldom full yet: no request is spent on it).
async fn bundled_entry(source: &ProveSource, seq: u64, size: u64) -> Option<bytes::Bytes> {
    let (index, _) = toolledger_merkle::bundle::bundle_of(seq);
    if (index + 1) * toolledger_merkle::bundle::BUNDLE_WIDTH > size {
        return None;
    }
    match source.tiles.as_ref()?.read_bundled_entry(seq).await {
        Ok(entry) => entry,
        Err(error) => {
            tracing::warn!(%error, seq, "entry bundle unreadable; reading the ledger");
            None
        }
    }
}

/// Proves that the tree of `from_size` is a prefix of the signed tree of `to_size`. The newer size
/// must be a signed checkpoint's; the older one's checkpoint is included when it was signed.
pub async fn prove_consistency(
    js: &jetstream::Context,
    source: &ProveSource,
    from_size: u64,
    to_size: u64,
) -> Result<ConsistencyOutput> {
    if from_size > to_size {
        return Err(Error::BadSizes {
            from: from_size,
            to: to_size,
        });
    }
    let trusted = checkpoints(js, source).await?;
    let find = |size: u64| trusted.iter().find(|s| s.checkpoint.size == size);
    let new = find(to_size).ok_or_else(|| Error::NoCheckpoint {
        wanted: format!("of size {to_size}"),
    })?;
    let old = find(from_size);
    let reader = tree_reader(js, source, to_size, &new.checkpoint.root).await?;
    let old_root = match old {
        Some(old) => old.checkpoint.root,
        None if from_size == 0 => toolledger_merkle::empty_root(),
        None => reader.root(from_size).await?,
    };
    let proof = consistency_in(&reader, from_size, to_size, &old_root, &new.checkpoint.root).await?;
    Ok(ConsistencyOutput {
        old_size: from_size,
        new_size: to_size,
        old_root: hex(&old_root),
        new_root: hex(&new.checkpoint.root),
        proof,
        old_checkpoint: old.map(|o| o.note.clone()),
        new_checkpoint: new.note.clone(),
    })
}

/// The consistency path (hex) from the tree of `from_size` with `old_root` to the tree of `to_size`
/// with `new_root`, read from `reader` (over the newer tree) and checked before it is returned.
pub(crate) async fn consistency_in(
    reader: &TileReader,
    from_size: u64,
    to_size: u64,
    old_root: &Hash,
    new_root: &Hash,
) -> Result<Vec<String>> {
    let proof = reader.consistency_proof(from_size, to_size).await?;
    proof
        .verify(old_root, new_root)
        .map_err(|e| Error::ProofDoesNotVerify {
            reason: e.to_string(),
        })?;
    Ok(proof.hashes.iter().map(|h| hex(h)).collect())
}
