//! Signed checkpoints: checked by an independent Python verifier written from the C2SP specs, key
//! files, and key rotation.

use std::path::Path;
use std::process::Command;

use toolledger_merkle::{Checkpoint, Error, NoteSigner, NoteVerifier, Verifiers, leaf_hash};

/// Runs `tests/py/verify_note.py` with the project venv's Python; true when it accepts the note.
fn python_accepts(verifier_key: &str, note: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let note_path = dir.path().join("checkpoint.note");
    std::fs::write(&note_path, note).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/verify_note.py");
    let out = Command::new(toolledger_testkit::python())
        .arg(script)
        .arg(verifier_key)
        .arg(&note_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => true,
        Some(1) => {
            assert!(stderr.contains("rejected"), "unexpected stderr: {stderr}");
            false
        }
        other => panic!("verify_note.py failed to run ({other:?}): {stderr}"),
    }
}

#[test]
fn python_verifies_our_checkpoints_and_rejects_any_one_byte_change() {
    let signer = NoteSigner::generate("toolledger.example/ledger/p0").unwrap();
    let vkey = signer.verifier().to_string();
    let checkpoint = Checkpoint::new("toolledger.example/ledger/p0", 1_234_567, leaf_hash(b"root"));
    let note = checkpoint.sign(&[&signer]).unwrap();
    assert!(python_accepts(&vkey, note.as_bytes()), "python rejected:\n{note}");

    let bytes = note.as_bytes();
    let sig_line = note.find('\u{2014}').unwrap();
    let sig_start = note[sig_line..].find(' ').unwrap() + sig_line;
    let sig_b64 = note[sig_start..].rfind(' ').unwrap() + sig_start + 1;
    // One changed byte in the origin, the size, the root, and the signature.
    for (what, at) in [
        ("origin", 0),
        ("size", note.find('\n').unwrap() + 3),
        ("root", note.find("=\n").unwrap() - 5),
        ("signature", sig_b64 + 20),
    ] {
        let mut changed = bytes.to_vec();
        changed[at] = if changed[at] == b'A' { b'B' } else { b'A' };
        assert!(
            !python_accepts(&vkey, &changed),
            "python accepted a changed {what}"
        );
        let changed = String::from_utf8(changed).unwrap();
        assert!(
            Checkpoint::open(&changed, &Verifiers::new([signer.verifier()])).is_err(),
            "rust accepted a changed {what}"
        );
    }
    // A stranger's key with the same name is not trusted.
    let stranger = NoteSigner::generate("toolledger.example/ledger/p0").unwrap();
    assert!(!python_accepts(&stranger.verifier().to_string(), bytes));
}

#[test]
fn rotation_keeps_old_checkpoints_verifiable() {
    let origin = "toolledger.example/ledger/p0";
    let old = NoteSigner::generate(origin).unwrap();
    let new = NoteSigner::generate(origin).unwrap();
    let cp1 = Checkpoint::new(origin, 10, leaf_hash(b"ten"));
    let cp2 = Checkpoint::new(origin, 20, leaf_hash(b"twenty"));
    let note1 = cp1.sign(&[&old]).unwrap();
    // During the handover the log signs with both keys.
    let note2 = cp2.sign(&[&old, &new]).unwrap();
    let note3 = cp2.sign(&[&new]).unwrap();

    let both = Verifiers::parse(&format!(
        "# retired\n{}\n# current\n{}\n",
        old.verifier(),
        new.verifier()
    ))
    .unwrap();
    assert_eq!(Verifiers::parse(&both.to_string()).unwrap(), both);
    assert_eq!(Checkpoint::open(&note1, &both).unwrap(), cp1);
    assert_eq!(Checkpoint::open(&note2, &both).unwrap(), cp2);
    assert_eq!(Checkpoint::open(&note3, &both).unwrap(), cp2);
    assert_eq!(Checkpoint::open_for(&note3, origin, &both).unwrap(), cp2);
    assert!(matches!(
        Checkpoint::open_for(&note3, "other.example/log", &both),
        Err(Error::WrongOrigin { .. })
    ));
    assert_eq!(both.verify(&note2).unwrap().signatures.len(), 2);

    let only_new = Verifiers::new([new.verifier()]);
    assert!(matches!(
        Checkpoint::open(&note1, &only_new),
        Err(Error::UnknownSigner)
    ));
    assert_eq!(Checkpoint::open(&note2, &only_new).unwrap(), cp2);

    // Revoking the old key: its signatures are then ignored, not trusted.
    let mut revoked = both.clone();
    revoked.remove(origin, old.key_id());
    assert!(Checkpoint::open(&note1, &revoked).is_err());

    // A forged signature by a trusted key rejects the note even beside a good one.
    let forged = note2.replacen("\n20\n", "\n21\n", 1);
    assert!(matches!(both.verify(&forged), Err(Error::BadSignature { .. })));
}

#[test]
fn key_files_round_trip_privately_and_are_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.key");
    let signer = NoteSigner::generate("toolledger.example/ledger/p0").unwrap();
    signer.save(&path).unwrap();
    let loaded = NoteSigner::load(&path).unwrap();
    assert_eq!(loaded.verifier(), signer.verifier());
    assert_eq!(loaded.to_private_key_string(), signer.to_private_key_string());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    assert!(matches!(
        NoteSigner::generate("other").unwrap().save(&path),
        Err(Error::KeyFile { .. })
    ));
    assert!(!format!("{signer:?}").contains(&signer.to_private_key_string()[20..]));
    assert_eq!(
        NoteVerifier::parse(&signer.verifier().to_string()).unwrap(),
        signer.verifier()
    );
    assert!(matches!(
        NoteSigner::load(&dir.path().join("absent.key")),
        Err(Error::KeyFile { .. })
    ));
}
