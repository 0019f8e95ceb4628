"""Standard Webhooks signatures: `webhook-signature` is `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`.

The secret (`AGENTQ_WEBHOOK_SECRET`) is given in the convention's form, `whsec_<base64 of the key>`, or as any
other string, whose UTF-8 bytes are the key. Several secrets separated by spaces each sign (a space-separated list
of signatures), so a receiver can move to a new secret without missing a delivery.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from agentq.errors import ConfigurationError

PREFIX = "whsec_"


def secret_keys(secret: str) -> list[bytes]:
    """The HMAC keys of `AGENTQ_WEBHOOK_SECRET` (raises `ConfigurationError` for a `whsec_` one that is not
    base64, naming the variable, never the value)."""
    keys = []
    for item in secret.split():
        if item.startswith(PREFIX):
            try:
                keys.append(base64.b64decode(item[len(PREFIX):], validate=True))
            except binascii.Error:
                raise ConfigurationError("AGENTQ_WEBHOOK_SECRET: a whsec_ secret must be base64 after its "
                                         "prefix") from None
        else:
            keys.append(item.encode())
    return keys


def signature(keys: list[bytes], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header of one attempt: one `v1,<base64>` per key, separated by spaces."""
    content = f"{message_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
                    for key in keys)


def message_id(job_id: str, event_key: str) -> str:
    """The stable `webhook-id` of one event of a job (the same for every attempt and every process that finds
    the event): `msg_` and a digest, so it never holds the `.` the signed content separates on, whatever the
    job's id."""
    digest = hashlib.sha256(f"{job_id}\n{event_key}".encode()).digest()[:20]
    return "msg_" + base64.b32encode(digest).decode().lower().rstrip("=")
