"""Verify a C2SP signed note with an Ed25519 verifier key, written from the specifications alone.

This is the independent check on the Rust signer: it shares no code with it.

    verify_note.py <verifier key string> <note file>

Exit status 0 when a signature by the key verifies (and the text parses as a tlog checkpoint),
1 when the note is rejected (the reason goes to stderr), 2 on bad usage.
References: c2sp.org/signed-note, c2sp.org/tlog-checkpoint.
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


def verify(vkey, note_bytes):
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
    return lines[0], int(lines[1]), lines[2]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2], "rb") as f:
        note_bytes = f.read()
    try:
        origin, size, root = verify(sys.argv[1], note_bytes)
    except (Rejected, ValueError) as e:
        print(f"rejected: {e}", file=sys.stderr)
        return 1
    print(f"ok {origin} {size} {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
