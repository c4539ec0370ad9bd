"""Verify toolledger evidence bundles, written from docs/evidence-bundles.md alone.

An independent check on the Rust verifier: it shares no code with it and uses only the standard
library (hashlib, json, base64) and `cryptography` for Ed25519.

    verify_bundle.py KEY BUNDLE_FILE...

KEY is a verifier key string `<name>+<key id>+<key>` or a file of such keys (one per line, blank lines
and `#` comments skipped). For each bundle file one line is printed on stdout, in order:
`ok <entries> <tree size>` when the bundle verifies, `rejected: <reason>` when it does not.
Exit status 0 when every bundle verifies, 1 when any is rejected, 2 on bad usage.
"""

import base64
import binascii
import hashlib
import json
import os
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "toolledger-evidence-bundle/1"
EM_DASH = "\u2014"
NONCE_LEN = 32


class Rejected(Exception):
    pass


def require(condition, reason):
    if not condition:
        raise Rejected(reason)


# --- encodings (§1) ---------------------------------------------------------------------------------


def b64(text, what):
    require(isinstance(text, str), f"{what} is not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as e:
        raise Rejected(f"{what} is not base64: {e}")
    require(base64.b64encode(raw).decode("ascii") == text, f"{what} is not canonical base64")
    return raw


def hash_hex(text, what):
    require(isinstance(text, str) and len(text) == 64, f"{what} is not a 64-digit hex hash")
    require(all(c in "0123456789abcdef" for c in text), f"{what} is not lowercase hex")
    return bytes.fromhex(text)


def hash_list(value, what):
    require(isinstance(value, list), f"{what} is not an array")
    return [hash_hex(h, what) for h in value]


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def members(obj, required, optional, what):
    require(isinstance(obj, dict), f"{what} is not an object")
    keys = set(obj)
    missing = set(required) - keys
    require(not missing, f"{what} lacks {sorted(missing)}")
    unknown = keys - set(required) - set(optional)
    require(not unknown, f"{what} has unknown members {sorted(unknown)}")


def no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise Rejected(f"duplicate member {key!r}")
        seen[key] = value
    return seen


def parse_file(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Rejected(f"not UTF-8: {e}")
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise Rejected(f"not JSON: {e}")
    canonical = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"
    require(canonical.encode("utf-8") == data, "not the RFC 8785 form of its document and one line feed")
    return doc


# --- keys, signed notes, checkpoints (§3) -----------------------------------------------------------


def is_control(c):
    """Unicode category Cc: U+0000-U+001F and U+007F-U+009F."""
    return ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F


def valid_name(name):
    return name != "" and not any(c.isspace() or c == "+" or is_control(c) for c in name)


def parse_key(line):
    parts = line.split("+", 2)
    require(len(parts) == 3, "a verifier key is name+id+key")
    name, key_id_hex, key_b64 = parts
    require(valid_name(name), "bad key name")
    require(len(key_id_hex) == 8 and all(c in "0123456789abcdef" for c in key_id_hex), "bad key id")
    typed = b64(key_b64, "verifier key")
    require(len(typed) == 33 and typed[0] == 0x01, "the verifier key is not an Ed25519 key")
    public = typed[1:]
    key_id = hashlib.sha256(name.encode("utf-8") + b"\n\x01" + public).digest()[:4]
    require(key_id.hex() == key_id_hex, "the key id does not match the key")
    return (name, key_id), Ed25519PublicKey.from_public_bytes(public)


def load_keys(arg):
    text = open(arg, encoding="utf-8").read() if os.path.isfile(arg) else arg
    keys = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            ident, key = parse_key(line)
            keys[ident] = key
    require(keys, "no verifier key")
    return keys


def open_note(note, keys, what):
    """Verifies a signed note; returns its text and the names of the trusted keys that signed it."""
    require(isinstance(note, str), f"{what} is not a string")
    require(not any(is_control(c) and c != "\n" for c in note),
            f"{what} contains a control character")
    split = note.rfind("\n\n")
    require(split >= 0, f"{what} has no blank line before its signatures")
    text, block = note[: split + 1], note[split + 2:]
    require(block != "" and block.endswith("\n"), f"{what}: bad signature block")
    signed_by = []
    for line in block[:-1].split("\n"):
        require(line.startswith(EM_DASH + " "), f"{what}: a signature line must start with an em dash")
        rest = line[2:]
        require(" " in rest, f"{what}: a signature line is name and signature")
        name, sig_b64 = rest.split(" ", 1)
        require(valid_name(name), f"{what}: bad key name in a signature line")
        sig = b64(sig_b64, f"{what} signature")
        require(len(sig) >= 5, f"{what}: signature too short")
        key = keys.get((name, sig[:4]))
        if key is None:
            continue  # another key's signature: ignored (C2SP)
        require(len(sig) == 4 + 64, f"{what}: signature by {name} is not 64 bytes")
        try:
            key.verify(sig[4:], text.encode("utf-8"))
        except InvalidSignature:
            raise Rejected(f"{what}: the signature by {name} does not verify")
        signed_by.append(name)
    require(signed_by, f"{what}: no signature by a trusted key")
    return text, signed_by


def parse_checkpoint(text, what):
    require(text.endswith("\n"), f"{what}: text must end with a line feed")
    lines = text[:-1].split("\n")
    require(len(lines) >= 3, f"{what}: needs origin, size and root")
    origin, size, root = lines[0], lines[1], lines[2]
    require(origin != "", f"{what}: empty origin")
    require(size.isascii() and size.isdigit() and (size == "0" or not size.startswith("0")),
            f"{what}: bad tree size")
    root = b64(root, f"{what} root")
    require(len(root) == 32, f"{what}: the root is not 32 bytes")
    require(all(line != "" for line in lines[3:]), f"{what}: empty extension line")
    return origin, int(size), root


# --- Merkle proofs (§4.1, §4.3, §4.6) ---------------------------------------------------------------


def leaf_hash(entry):
    return hashlib.sha256(b"\x00" + entry).digest()


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def inclusion_ok(leaf, index, size, proof, root):
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node(p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def consistency_ok(m, n, proof, old_root, new_root):
    if m > n:
        return False
    if m == n:
        return not proof and old_root == new_root
    if m == 0:
        return not proof and old_root == hashlib.sha256(b"").digest()
    path = [old_root] + proof if m & (m - 1) == 0 else list(proof)
    if not path:
        return False
    fn, sn = m - 1, n - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = node(c, fr)
            sr = node(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


# --- the bundle (§2, §4) ----------------------------------------------------------------------------


def first_string(*candidates):
    for value in candidates:
        if isinstance(value, str):
            return value
    return None


def check_selection(selection, event, seq):
    kind = selection["kind"]
    if kind == "entries":
        return
    require(event.get("tenant") == selection["tenant"], f"seq {seq}: tenant is not the selection's")
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    if kind == "invocation":
        found = first_string(event.get("invocationid"), data.get("invocation_id"), event.get("subject"))
    else:
        found = first_string(event.get("sessionid"), data.get("session_id"))
    require(found == selection["id"], f"seq {seq}: not part of {kind} {selection['id']!r}")


def check_entry(item, size, root, selection):
    members(item, ["seq", "entry", "inclusion_proof", "payloads"], [], "an entry")
    seq = item["seq"]
    require(is_int(seq), "seq is not an integer")
    require(1 <= seq <= size, f"seq {seq} is outside the tree of size {size}")
    entry = b64(item["entry"], f"entry {seq}")
    proof = hash_list(item["inclusion_proof"], f"inclusion proof of seq {seq}")
    require(inclusion_ok(leaf_hash(entry), seq - 1, size, proof, root),
            f"seq {seq} is not included under the signed root")
    try:
        parsed = json.loads(entry.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Rejected(f"seq {seq}: the entry is not JSON: {e}")
    require(isinstance(parsed, dict) and isinstance(parsed.get("event"), dict)
            and isinstance(parsed.get("ledger"), dict), f"seq {seq}: not a ledger entry")
    check_selection(selection, parsed["event"], seq)

    refs = parsed["ledger"].get("payload_refs", [])
    require(isinstance(refs, list), f"seq {seq}: payload_refs is not an array")
    by_id = {}
    for ref in refs:
        require(isinstance(ref, dict) and isinstance(ref.get("blob_id"), str), f"seq {seq}: bad payload ref")
        by_id[ref["blob_id"]] = ref
    payloads = item["payloads"]
    require(isinstance(payloads, list), f"seq {seq}: payloads is not an array")
    seen = set()
    for payload in payloads:
        members(payload, ["blob_id", "blob"], [], "a payload")
        blob_id = payload["blob_id"]
        require(isinstance(blob_id, str), "blob_id is not a string")
        ref = by_id.get(blob_id)
        require(ref is not None, f"seq {seq}: blob {blob_id!r} is not one of the entry's payload refs")
        require(blob_id not in seen, f"seq {seq}: blob {blob_id!r} included twice")
        seen.add(blob_id)
        blob = b64(payload["blob"], f"blob {blob_id}")
        require("sha256:" + hashlib.sha256(blob).hexdigest() == ref.get("commitment"),
                f"seq {seq}: blob {blob_id!r} does not match its commitment")
        require(len(blob) >= NONCE_LEN and len(blob) - NONCE_LEN == ref.get("size"),
                f"seq {seq}: blob {blob_id!r} has the wrong size")
    return seq


def verify(data, keys):
    doc = parse_file(data)
    members(doc, ["format", "selection", "checkpoint", "entries"], ["consistency", "directory"], "the bundle")
    require(doc["format"] == FORMAT, "unknown format")

    selection = doc["selection"]
    require(isinstance(selection, dict), "selection is not an object")
    kind = selection.get("kind")
    if kind == "entries":
        members(selection, ["kind"], [], "selection")
    else:
        require(kind in ("invocation", "session"), "unknown selection kind")
        members(selection, ["kind", "tenant", "id"], [], "selection")
        require(isinstance(selection["tenant"], str) and isinstance(selection["id"], str),
                "selection tenant and id must be strings")

    text, _ = open_note(doc["checkpoint"], keys, "checkpoint")
    origin, size, root = parse_checkpoint(text, "checkpoint")

    entries = doc["entries"]
    require(isinstance(entries, list) and entries, "entries must be a non-empty array")
    previous = 0
    for item in entries:
        seq = check_entry(item, size, root, selection)
        require(seq > previous, "entries are not in strictly increasing seq order")
        previous = seq

    if "consistency" in doc:
        consistency = doc["consistency"]
        members(consistency, ["old_checkpoint", "proof"], [], "consistency")
        old_text, _ = open_note(consistency["old_checkpoint"], keys, "old checkpoint")
        old_origin, old_size, old_root = parse_checkpoint(old_text, "old checkpoint")
        require(old_origin == origin, "the old checkpoint is of another log")
        require(old_size <= size, "the old checkpoint is larger than the bundle's")
        proof = hash_list(consistency["proof"], "consistency proof")
        require(consistency_ok(old_size, size, proof, old_root, root),
                "the consistency proof does not verify")
    if "directory" in doc:
        check_directory(doc["directory"], keys, origin, size, root)
    return len(entries), size


def check_directory(directory, keys, origin, size, root):
    """§4.8: a signed directory checkpoint commits to the bundle's checkpoint."""
    members(directory, ["checkpoint", "seq", "entry", "inclusion_proof", "consistency"], [], "directory")
    text, _ = open_note(directory["checkpoint"], keys, "directory checkpoint")
    dir_origin, dir_size, dir_root = parse_checkpoint(text, "directory checkpoint")
    seq = directory["seq"]
    require(is_int(seq) and 1 <= seq <= dir_size, "the directory entry is outside the directory's tree")
    entry = b64(directory["entry"], "directory entry")
    proof = hash_list(directory["inclusion_proof"], "directory inclusion proof")
    require(inclusion_ok(leaf_hash(entry), seq - 1, dir_size, proof, dir_root),
            "the directory entry is not included under the directory's root")
    parsed = json.loads(entry.decode("utf-8"), object_pairs_hook=no_duplicates)
    members(parsed, ["partitions", "recorded_at"], [], "the directory entry")
    require(isinstance(parsed["recorded_at"], str), "the directory entry's recorded_at is not a string")
    references = parsed["partitions"]
    require(isinstance(references, list) and len(references) >= 2, "the directory entry names under two partitions")
    for index, reference in enumerate(references):
        members(reference, ["checkpoint_seq", "origin", "partition", "root", "size"], [], "a directory reference")
        require(all(is_int(reference[k]) and reference[k] >= 0 for k in ("checkpoint_seq", "partition", "size"))
                and isinstance(reference["origin"], str) and isinstance(reference["root"], str),
                "a directory reference is malformed")
        ledger_origin = references[0]["origin"]
        expected = ledger_origin if index == 0 else f"{ledger_origin}/p{index}"
        require(reference["partition"] == index and reference["origin"] == expected,
                "the directory entry does not name every partition in order under its origin")
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    require(canonical == entry, "the directory entry is not in its canonical form (RFC 8785)")
    require(dir_origin == references[0]["origin"] + "/directory",
            "the directory checkpoint is not the directory of this ledger")
    named = [r for r in references if r["origin"] == origin]
    require(len(named) == 1, "the directory entry does not name the bundle's log")
    named_size = named[0]["size"]
    named_root = b64(named[0]["root"], "the directory entry's root")
    require(len(named_root) == 32, "the directory entry's root is not 32 bytes")
    require(named_size >= size, "the directory names an older checkpoint of the bundle's log")
    path = hash_list(directory["consistency"], "directory consistency proof")
    require(consistency_ok(size, named_size, path, root, named_root),
            "the bundle's tree is not a prefix of the one the directory names")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        keys = load_keys(argv[1])
    except (Rejected, OSError) as e:
        print(f"bad key: {e}", file=sys.stderr)
        return 2
    status = 0
    for path in argv[2:]:
        with open(path, "rb") as f:
            data = f.read()
        try:
            count, size = verify(data, keys)
            print(f"ok {count} {size}")
        except Rejected as e:
            print(f"rejected: {e}")
            status = 1
        except Exception as e:  # anything unexpected in a hostile file is a rejection, named
            print(f"rejected: {type(e).__name__}: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
