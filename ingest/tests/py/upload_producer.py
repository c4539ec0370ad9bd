"""An independent producer of sensitive and large payloads, written from the project's JSON Schemas.

It declares a tool whose input contract lists sensitive fields (the shape of
`schemas/objects/tool-declaration.schema.json#/$defs/sensitive_fields`), plans an invocation that
carries a secret in those fields, uploads a 100 KiB and a 5 MiB result into the tenant's NATS object
store bucket `ATL_PAYLOADS_<tenant>` and references them from `tool.result.created` events with the
`{"$upload": ...}` shape of `schemas/ledger/upload-ref.schema.json`. Both shapes are validated against
the schemas before anything is published. Only nats-py and jsonschema: no toolledger code.

Usage: upload_producer.py NATS_URL TENANT SCHEMAS_DIR SECRET
Prints one JSON line: {"uploads": [{"name", "sha256", "size"}, ...]}.
"""

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import jsonschema
import nats

TOOL = "vault.read"
INVOCATION = "inv-py-upload-1"
SIZES = [100 * 1024, 5 * 1024 * 1024]


def schema(schemas_dir: Path, relative: str) -> dict:
    return json.loads((schemas_dir / relative).read_text())


def content(size: int, seed: int) -> bytes:
    return bytes((i * 7 + seed * 13 + i // 97) % 26 + 97 for i in range(size))


def event(tenant: str, event_id: str, event_type: str, subject: str, data: dict) -> bytes:
    body = {
        "specversion": "1.0",
        "id": event_id,
        "source": "urn:python-producer",
        "type": event_type,
        "tenant": tenant,
        "subject": subject,
        "datacontenttype": "application/json",
        "data": dict(data, schema_version="0.2.0"),
    }
    return json.dumps(body).encode()


async def main() -> None:
    url, tenant, schemas_dir, secret = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    declaration_schema = schema(schemas_dir, "objects/tool-declaration.schema.json")
    sensitive_schema = dict(declaration_schema["$defs"]["sensitive_fields"])
    upload_schema = schema(schemas_dir, "ledger/upload-ref.schema.json")

    sensitive = ["api_key", "/headers/x-session-token"]
    jsonschema.Draft202012Validator(sensitive_schema).validate(sensitive)

    nc = await nats.connect(url)
    js = nc.jetstream()
    headers = {"content-type": "application/cloudevents+json"}

    async def publish(event_type: str, body: bytes) -> None:
        ack = await js.publish(f"atl.in.{tenant}.{event_type}", body, headers=headers)
        assert ack.seq > 0

    await publish("tool.declared", event(tenant, "py-decl-1", "tool.declared", TOOL, {
        "tool_id": TOOL, "namespace": "vault", "name": "read", "description": "reads a secret",
        "lifecycle": "available", "tool_kind": "function", "version": "1",
        "input_contract": {"sensitive_fields": sensitive},
    }))
    await publish("tool.invocation.planned", event(tenant, "py-planned-1", "tool.invocation.planned", INVOCATION, {
        "invocation_id": INVOCATION, "tool_id": TOOL, "status": "planned",
        "created_at": "2026-05-08T09:00:00Z",
        "model_input": {"path": "db/prod", "api_key": secret,
                        "headers": {"x-session-token": secret + "-session", "accept": "text/plain"}},
    }))

    bucket = f"ATL_PAYLOADS_{tenant}"
    objects = await js.object_store(bucket)
    uploads = []
    for index, size in enumerate(SIZES):
        payload = content(size, index)
        name = f"py-result-{index}/data/content/0/text"
        await objects.put(name, payload)
        reference = {"$upload": {"bucket": bucket, "name": name,
                                 "sha256": hashlib.sha256(payload).hexdigest(), "size": size,
                                 "content_type": "text/plain"}}
        jsonschema.Draft202012Validator(upload_schema).validate(reference)
        await publish("tool.result.created", event(tenant, f"py-result-{index}", "tool.result.created", INVOCATION, {
            "result_id": f"res-py-{index}", "invocation_id": INVOCATION, "status": "succeeded",
            "is_error": False, "created_at": "2026-05-08T09:00:01Z",
            "content": [{"type": "text", "text": reference}],
        }))
        uploads.append({"name": name, "sha256": reference["$upload"]["sha256"], "size": size})
    await nc.close()
    print(json.dumps({"uploads": uploads}), flush=True)


asyncio.run(main())
