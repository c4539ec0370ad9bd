//! Proof outputs verify with the Merkle library alone, and stop verifying after a one-bit change.

use toolledger_merkle::{Checkpoint, Hash, leaf_hash, verify_consistency, verify_inclusion};
use toolledger_verify::{ProveSource, prove_consistency, prove_inclusion};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use crate::common::{EVERY, TestLedger, generated_entries, verifiers};

fn source(ledger: &TestLedger, with_tiles: bool) -> ProveSource {
    ProveSource {
        ledger_stream: LEDGER.to_owned(),
        checkpoint_stream: CHECKPOINTS.to_owned(),
        verifiers: verifiers(),
        origin: None,
        tiles: with_tiles.then(|| ledger.tiles()),
        trusted: Default::default(),
    }
}

fn unhex(text: &str) -> Hash {
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect();
    bytes.try_into().unwrap()
}

/// Checks an inclusion proof's JSON with `toolledger_merkle` alone: the signed checkpoint, the entry's
/// leaf hash, the audit path.
fn check_inclusion_json(json: &serde_json::Value) -> bool {
    let Ok(checkpoint) = Checkpoint::open(json["checkpoint"].as_str().unwrap(), &verifiers()) else {
        return false;
    };
    let leaf = leaf_hash(json["entry"].as_str().unwrap().as_bytes());
    let proof: Vec<Hash> = json["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| unhex(h.as_str().unwrap()))
        .collect();
    leaf == unhex(json["leaf_hash"].as_str().unwrap())
        && checkpoint.size == json["tree_size"].as_u64().unwrap()
        && verify_inclusion(
            &leaf,
            json["leaf_index"].as_u64().unwrap(),
            checkpoint.size,
            &proof,
            &checkpoint.root,
        )
        .is_ok()
}

fn check_consistency_json(json: &serde_json::Value) -> bool {
    let Ok(new) = Checkpoint::open(json["new_checkpoint"].as_str().unwrap(), &verifiers()) else {
        return false;
    };
    let Ok(old) = Checkpoint::open(json["old_checkpoint"].as_str().unwrap(), &verifiers()) else {
        return false;
    };
    let proof: Vec<Hash> = json["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| unhex(h.as_str().unwrap()))
        .collect();
    verify_consistency(old.size, new.size, &proof, &old.root, &new.root).is_ok()
}

/// Flips the lowest bit of the hex digit at `at` in `text`.
fn flip_hex_bit(text: &str, at: usize) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let digit = chars[at].to_digit(16).unwrap() ^ 1;
    chars[at] = std::char::from_digit(digit, 16).unwrap();
    chars.into_iter().collect()
}

#[tokio::test]
async fn inclusion_proofs_verify_with_the_library_alone_and_fail_after_one_bit() {
    let ledger = TestLedger::build(generated_entries(450)).await;
    let n = ledger.entries.len() as u64;
    for (seq, size) in [(1, None), (123, None), (123, Some(2 * EVERY)), (n, None)] {
        let output = prove_inclusion(&ledger.js, &source(&ledger, true), seq, size)
            .await
            .unwrap();
        // From the ledger alone (no tiles) the proof is the same.
        let from_ledger = prove_inclusion(&ledger.js, &source(&ledger, false), seq, size)
            .await
            .unwrap();
        assert_eq!(output, from_ledger);
        output.check(&verifiers()).unwrap();
        let json: serde_json::Value = serde_json::from_str(&serde_json::to_string(&output).unwrap()).unwrap();
        assert_eq!(json["ledger_seq"], seq);
        assert!(check_inclusion_json(&json), "seq {seq}");

        if let Some(first) = json["proof"][0].as_str() {
            let mut bad = json.clone();
            bad["proof"][0] = flip_hex_bit(first, 5).into();
            assert!(!check_inclusion_json(&bad), "a flipped proof bit verified");
        }
        let mut bad = json.clone();
        let entry = json["entry"].as_str().unwrap();
        let at = entry.find("generator").unwrap();
        bad["entry"] = format!("{}f{}", &entry[..at], &entry[at + 1..]).into();
        assert!(!check_inclusion_json(&bad), "an altered entry verified");
        let mut bad = json.clone();
        let note = json["checkpoint"].as_str().unwrap();
        let size_line = note.lines().nth(1).unwrap();
        bad["checkpoint"] = note
            .replacen(
                &format!("\n{size_line}\n"),
                &format!("\n{}\n", size_line.parse::<u64>().unwrap() ^ 1),
                1,
            )
            .into();
        assert!(!check_inclusion_json(&bad), "an altered checkpoint verified");
    }
    assert!(
        prove_inclusion(&ledger.js, &source(&ledger, true), n + 1, None)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_proof_takes_its_entry_from_the_bundle_that_proves_and_reads_the_ledger_otherwise() {
    let ledger = TestLedger::build(generated_entries(600)).await;
    // A source whose ledger stream is gone: whatever it proves came from the tiles and bundles.
    let bundles_only = ProveSource {
        ledger_stream: "ATL_GONE".to_owned(),
        ..source(&ledger, true)
    };
    for seq in [1, 200, 512] {
        let output = prove_inclusion(&ledger.js, &bundles_only, seq, None)
            .await
            .unwrap();
        assert_eq!(
            output.entry.as_bytes(),
            ledger.entries[seq as usize - 1].bytes.as_ref()
        );
        output.check(&verifiers()).unwrap();
    }
    // Entries past the last full bundle (512) are only in the ledger.
    assert!(
        prove_inclusion(&ledger.js, &bundles_only, 513, None)
            .await
            .is_err()
    );

    // A bundle holding other entries (256 of them, decodable) is never served: the ledger is read.
    let mut shuffled = ledger.entry_bytes()[..256].to_vec();
    shuffled.reverse();
    ledger.tiles().write_bundle(0, &shuffled).await.unwrap();
    assert!(prove_inclusion(&ledger.js, &bundles_only, 1, None).await.is_err());
    let output = prove_inclusion(&ledger.js, &source(&ledger, true), 1, None)
        .await
        .unwrap();
    assert_eq!(output.entry.as_bytes(), ledger.entries[0].bytes.as_ref());
    // So is one that does not decode.
    std::fs::write(ledger.tiles_dir.path().join("bundle/001"), b"not zstd").unwrap();
    let output = prove_inclusion(&ledger.js, &source(&ledger, true), 300, None)
        .await
        .unwrap();
    assert_eq!(output.entry.as_bytes(), ledger.entries[299].bytes.as_ref());
}

#[tokio::test]
async fn consistency_proofs_verify_with_the_library_alone_and_fail_after_one_bit() {
    let ledger = TestLedger::build(generated_entries(450)).await;
    let n = ledger.entries.len() as u64;
    for (from, to) in [(EVERY, n), (2 * EVERY, 3 * EVERY), (EVERY, EVERY)] {
        let output = prove_consistency(&ledger.js, &source(&ledger, true), from, to)
            .await
            .unwrap();
        assert_eq!(
            output,
            prove_consistency(&ledger.js, &source(&ledger, false), from, to)
                .await
                .unwrap()
        );
        output.check(&verifiers()).unwrap();
        let json: serde_json::Value = serde_json::from_str(&serde_json::to_string(&output).unwrap()).unwrap();
        assert!(check_consistency_json(&json), "{from}..{to}");
        if let Some(first) = json["proof"][0].as_str() {
            let mut bad = json.clone();
            bad["proof"][0] = flip_hex_bit(first, 63).into();
            assert!(!check_consistency_json(&bad), "a flipped proof bit verified");
            let mut parsed = output.clone();
            parsed.proof[0] = flip_hex_bit(&parsed.proof[0], 0);
            assert!(parsed.check(&verifiers()).is_err());
        }
    }
    // The newer size must be signed.
    assert!(
        prove_consistency(&ledger.js, &source(&ledger, true), EVERY, EVERY + 1)
            .await
            .is_err()
    );
}

/// A source keeps the checkpoints it read: proofs after the ledger grew see the checkpoints signed
/// since, and proofs in the older signed trees still come out the same.
#[tokio::test]
async fn a_source_takes_in_checkpoints_signed_after_its_first_proof() {
    let entries = generated_entries(450);
    let (first, later) = entries.split_at(300);
    let mut ledger = TestLedger::build(first.to_vec()).await;
    let source = source(&ledger, true);
    let before = prove_inclusion(&ledger.js, &source, 10, None).await.unwrap();
    assert_eq!(before.tree_size, 300);

    let mut appender = toolledger_ingest::append::Appender::open(ledger.js.clone(), LEDGER)
        .await
        .unwrap();
    let mut checkpointer = ledger.checkpointer(appender.last_seq()).await;
    for batch in later.chunks(50) {
        let seqs = appender.append(batch).await.unwrap();
        checkpointer.appended(&seqs, batch).await.unwrap();
    }
    checkpointer.checkpoint().await.unwrap();
    ledger.entries.extend_from_slice(later);

    let after = prove_inclusion(&ledger.js, &source, 420, None).await.unwrap();
    assert_eq!(after.tree_size, 450);
    let json = serde_json::to_value(&after).unwrap();
    assert!(check_inclusion_json(&json));
    // A proof in an older signed tree is still served from the same list.
    let older = prove_inclusion(&ledger.js, &source, 10, Some(300)).await.unwrap();
    assert_eq!(older, before);
}
