"""Large values of an event move to the tenant's payload bucket (`ATL_PAYLOADS_<tenant>`) and the event
carries a `{"$upload": {bucket, name, sha256, size, content_type}}` reference in their place
(schemas/README.md, producer uploads); ingest copies the object into its blob store, puts a `$payload`
reference there, and deletes the object once the entry is in the ledger.

    emit ─▶ extract(data) ─▶ data with references + [(Upload, bytes)]   (no network: emit stays offline)
         ─▶ Spool.append: each value's bytes to a durable sidecar, then the record
    sender ─▶ ObjectStore.put(name, sidecar bytes) unless the object is already there with that digest
           ─▶ publish the record ─▶ acked: the sidecars are deleted

Which values move (`extract`):
1. every value in `data` whose compact JSON is over `threshold` bytes, deepest first: a long string is
   moved on its own; an object or array is moved whole only when it is still over `threshold` once its
   large members were moved (and then it goes with its original members, never with references inside);
2. while the event is still over its budget (`max_event_bytes` less the headers), the largest value that
   holds no reference and is at least `MIN_UPLOAD_BYTES`, one at a time.

A string travels as its UTF-8 text (`text/plain; charset=utf-8`); any other value as its compact JSON
(`application/json`: the bytes are the field's JSON value). The object name is
`<event id>/<JSON Pointer from the event root>`, percent-encoded outside `[A-Za-z0-9._~/-]`: the same
event always names the same objects with the same bytes, so re-putting after a retry or a restart is
harmless.
"""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Tuple

from .spool import Upload
from .wire import InvalidEvent, dumps

#: The default size above which a value travels through the payload bucket: a quarter of the default
#: `max_event_bytes`, so that a few large values never push an event over it.
DEFAULT_UPLOAD_THRESHOLD = 256 * 1024
#: Values smaller than this are never moved to make an event fit: ids and small fields stay inline.
MIN_UPLOAD_BYTES = 1024
#: Ingest's limit on one upload (it holds one in memory while checking and copying it).
MAX_UPLOAD_BYTES = 256 * 1024 * 1024

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~/-")


def bucket_of(tenant: str) -> str:
    """`ATL_PAYLOADS_<tenant>`: the bucket a tenant's producers upload to."""
    return f"ATL_PAYLOADS_{tenant}"


def object_name(event_id: str, pointer: str) -> str:
    """`<event id><pointer>` (the pointer starts with `/`), percent-encoded outside a safe set."""
    raw = (event_id + pointer).encode()
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and ("$upload" in value or "$payload" in value)


class _Extraction:
    def __init__(self, event_id: str, bucket: str):
        self.event_id = event_id
        self.bucket = bucket
        self.uploads: List[Tuple[Upload, bytes]] = []

    def reference(self, value: Any, pointer: str) -> Tuple[dict, int]:
        if isinstance(value, str):
            content, content_type = value.encode(), TEXT
        else:
            content, content_type = dumps(value), JSON
        if len(content) > MAX_UPLOAD_BYTES:
            raise InvalidEvent(f"event {self.event_id}: {pointer} is {len(content)} bytes, over the "
                               f"{MAX_UPLOAD_BYTES}-byte limit ingest sets for one upload")
        upload = Upload(self.bucket, object_name(self.event_id, pointer), hashlib.sha256(content).hexdigest(),
                        len(content), content_type)
        self.uploads.append((upload, content))
        ref = {"$upload": {"bucket": upload.bucket, "name": upload.name, "sha256": upload.sha256,
                           "size": upload.size, "content_type": upload.content_type}}
        return ref, len(dumps(ref))

    def over_threshold(self, value: Any, pointer: str, threshold: int, root: bool) -> Tuple[Any, int]:
        """`value` with every member over `threshold` moved, and its compact JSON size."""
        mark = len(self.uploads)
        if _is_reference(value):
            return value, len(dumps(value))
        if isinstance(value, dict):
            out = {}
            size = 2 + max(0, len(value) - 1)
            for key, child in value.items():
                out[key], child_size = self.over_threshold(child, f"{pointer}/{_escape(key)}", threshold, False)
                size += len(dumps(key)) + 1 + child_size
        elif isinstance(value, list):
            out = []  # type: ignore[assignment]
            size = 2 + max(0, len(value) - 1)
            for i, child in enumerate(value):
                moved, child_size = self.over_threshold(child, f"{pointer}/{i}", threshold, False)
                out.append(moved)  # type: ignore[attr-defined]
                size += child_size
        else:
            out, size = value, len(dumps(value))
        if root or size <= threshold:
            return out, size
        # Still too large with its large members moved: it goes whole, with its original members.
        del self.uploads[mark:]
        return self.reference(value, pointer)


def _largest_candidate(value: Any, pointer: str, root: bool) -> Tuple[Optional[Tuple[int, str]], int, bool]:
    """The largest movable value under `value` as (size, pointer), `value`'s size, and whether it
    holds a reference."""
    if _is_reference(value):
        return None, len(dumps(value)), True
    best: Optional[Tuple[int, str]] = None
    holds = False
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        size = 2 + max(0, len(value) - 1)
        for key, child in items:
            child_best, child_size, child_holds = _largest_candidate(
                child, f"{pointer}/{_escape(key) if isinstance(key, str) else key}", False)
            size += child_size + (len(dumps(key)) + 1 if isinstance(value, dict) else 0)
            holds = holds or child_holds
            if child_best is not None and (best is None or child_best[0] > best[0]):
                best = child_best
    else:
        size = len(dumps(value))
    if not root and not holds and size >= MIN_UPLOAD_BYTES and (best is None or size > best[0]):
        best = (size, pointer)
    return best, size, holds


def _replace(value: Any, parts: List[str], new: Any) -> Any:
    if not parts:
        return new
    key = parts[0]
    if isinstance(value, list):
        copy = list(value)
        copy[int(key)] = _replace(value[int(key)], parts[1:], new)
        return copy
    copy = dict(value)
    copy[key] = _replace(value[key], parts[1:], new)
    return copy


def _get(value: Any, parts: List[str]) -> Any:
    for key in parts:
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def extract(data: Any, *, event_id: str, bucket: str, threshold: int,
            budget: int) -> Tuple[Any, List[Tuple[Upload, bytes]]]:
    """`data` (the event's, at `/data`) with its large values replaced by upload references, and each
    upload with its bytes. `budget` is the most the encoded `data` may take. The input is not changed.
    Raises `InvalidEvent` when no value can be moved to make the event fit."""
    extraction = _Extraction(event_id, bucket)
    out, size = extraction.over_threshold(data, "/data", threshold, True)
    while size > budget:
        best, _, _ = _largest_candidate(out, "/data", True)
        if best is None:
            raise InvalidEvent(
                f"event {event_id}: data is {size} bytes, over the budget of {budget}, and no value of at "
                f"least {MIN_UPLOAD_BYTES} bytes is left to upload"
            )
        parts = [_unescape(p) for p in best[1].split("/")[2:]]
        ref, _ = extraction.reference(_get(out, parts), best[1])
        out = _replace(out, parts, ref)
        size = len(dumps(out))
    return out, extraction.uploads
