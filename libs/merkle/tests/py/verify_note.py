"""Verify a C2SP signed note with an Ed25519 verifier key, written from the specifications alone.

This is the independent check on the Rust signer and witness: it shares no code with them.

    verify_note.py <verifier key string> <note file> [<witness vkey> ...]

Exit status 0 when a signature by the key verifies (and the text parses as a tlog checkpoint) and,
for each witness vkey given (signature type 0x04), a cosignature/v1 line by that witness verifies;
1 when the note is rejected (the reason goes to stderr), 2 on bad usage. Prints
`ok <origin> <size> <root>`, then `cosigned <witness name> <timestamp>` per witness.
References: c2sp.org/signed-note, c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature.
"""

import base64
import hashlib
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

EM_DASH_PREFIX = "\u2014 "


class Rejected(Exception):
    pass


def parse_verifier_key(vkey):
    name, key_id_hex, key_b64 = vkey.strip().split("+", 2)
    typed = base64.b64decode(key_b64, validate=True)
    if len(typed) != 33 or typed[0] != 0x01:
        raise Rejected("verifier key is not an ed25519 key")
    public = typed[1:]
    key_id = hashlib.sha256(name.encode() + b"\n" + b"\x01" + public).digest()[:4]
    if key_id.hex() != key_id_hex:
        raise Rejected("verifier key id does not match its key")
    return name, key_id, Ed25519PublicKey.from_public_bytes(public)


def parse_cosigner_key(vkey):
    """A tlog-cosignature Ed25519 vkey: name+hex key id+base64(0x04 || public key)."""
    name, key_id_hex, key_b64 = vkey.strip().split("+", 2)
    typed = base64.b64decode(key_b64, validate=True)
    if len(typed) != 33 or typed[0] != 0x04:
        raise Rejected("witness key is not a cosignature/v1 ed25519 key")
    public = typed[1:]
    key_id = hashlib.sha256(name.encode() + b"\n" + b"\x04" + public).digest()[:4]
    if key_id.hex() != key_id_hex:
        raise Rejected("witness key id does not match its key")
    return name, key_id, Ed25519PublicKey.from_public_bytes(public)


def verify_cosignature(vkey, text, sig_block):
    """The timestamp of the cosignature by the witness `vkey` on the note `text`."""
    name, key_id, public = parse_cosigner_key(vkey)
    timestamp = None
    for line in sig_block[:-1].split("\n"):
        sig_name, _, sig_b64 = line[len(EM_DASH_PREFIX) :].partition(" ")
        blob = base64.b64decode(sig_b64, validate=True)
        if sig_name != name or blob[:4] != key_id:
            continue
        # Python ignores the unused bits of a final base64 group: insist on the one true encoding.
        if base64.b64encode(blob).decode() != sig_b64:
            raise Rejected(f"cosignature by {name} is not canonical base64")
        # timestamped_signature: u64 big-endian timestamp, then the 64-byte Ed25519 signature.
        if len(blob) != 4 + 8 + 64:
            raise Rejected(f"cosignature by {name} has the wrong length")
        ts = int.from_bytes(blob[4:12], "big")
        if ts > 2**63 - 1:
            raise Rejected(f"cosignature by {name} has an out-of-range timestamp")
        message = b"cosignature/v1\n" + f"time {ts}\n".encode() + text.encode("utf-8")
        try:
            public.verify(blob[12:], message)
        except InvalidSignature:
            raise Rejected(f"cosignature by {name} does not verify")
        if timestamp is None:
            timestamp = ts
    if timestamp is None:
        raise Rejected(f"no cosignature by witness {name}")
    return name, timestamp


def verify(vkey, note_bytes, witness_vkeys=()):
    name, key_id, public = parse_verifier_key(vkey)
    try:
        note = note_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("note is not utf-8")
    if any(ord(c) < 0x20 and c != "\n" for c in note):
        raise Rejected("control character in note")
    split = note.rfind("\n\n")
    if split < 0:
        raise Rejected("no blank line before signatures")
    text, sig_block = note[: split + 1], note[split + 2 :]
    if not sig_block.endswith("\n"):
        raise Rejected("signature block does not end in a newline")
    verified = False
    for line in sig_block[:-1].split("\n"):
        if not line.startswith(EM_DASH_PREFIX):
            raise Rejected("bad signature line")
        sig_name, _, sig_b64 = line[len(EM_DASH_PREFIX) :].partition(" ")
        blob = base64.b64decode(sig_b64, validate=True)
        if sig_name != name or blob[:4] != key_id:
            continue  # unknown key: ignored, as the spec requires
        try:
            public.verify(blob[4:], text.encode("utf-8"))
        except InvalidSignature:
            raise Rejected("signature by the trusted key does not verify")
        verified = True
    if not verified:
        raise Rejected("no signature by the trusted key")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not lines[0] or not lines[1].isdigit():
        raise Rejected("text is not a tlog checkpoint")
    if len(base64.b64decode(lines[2], validate=True)) != 32:
        raise Rejected("checkpoint root is not 32 bytes")
    cosigned = [verify_cosignature(w, text, sig_block) for w in witness_vkeys]
    return lines[0], int(lines[1]), lines[2], cosigned


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2], "rb") as f:
        note_bytes = f.read()
    try:
        origin, size, root, cosigned = verify(sys.argv[1], note_bytes, sys.argv[3:])
    except (Rejected, ValueError) as e:
        print(f"rejected: {e}", file=sys.stderr)
        return 1
    print(f"ok {origin} {size} {root}")
    for name, timestamp in cosigned:
        print(f"cosigned {name} {timestamp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
