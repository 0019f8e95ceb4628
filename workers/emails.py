"""Example activity with two versions, for docs/rollouts.md: `sendEmail` version 1 (today's provider) and
version 2 (a new one), and the `sendEmail` tool.

Importing this module registers the tool on the default `Tool` registry and both versions on the default
`Activity` registry, so `agentq worker -m workers.emails` serves `sendEmail` and `sendEmail@2`. The rule and the
job that docs/rollouts.md uses are in `workers/rollouts/`. Nothing is sent anywhere: each version answers with a
message id made from the call, the provider that would have sent it, and its version.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentq.errors import NonRetryableError
from agentq.protocol.activities import Activity
from agentq.protocol.tools import Tool

__all__ = ["SEND_EMAIL", "send_email_v1", "send_email_v2"]

SEND_EMAIL: dict[str, Any] = {
    "type": "object",
    "description": "Sends an e-mail to one recipient.",
    "properties": {
        "_tool": {"type": "string", "const": "sendEmail"},
        "to": {"type": "string", "description": "the recipient's address"},
        "subject": {"type": "string"},
        "body": {"type": "string"},
        "_output": {"type": "object", "properties": {
            "messageId": {"type": "string"}, "provider": {"type": "string"}, "version": {"type": "string"}}},
    },
    "required": ["to", "subject"],
}


class InvalidRecipientError(NonRetryableError):
    """An address without an `@`: no retry will make it deliverable."""


def _sent(call: dict, provider: str, version: str) -> dict[str, str]:
    to = str(call.get("to", ""))
    if "@" not in to:
        raise InvalidRecipientError(f"not an e-mail address: {to!r}")
    digest = hashlib.sha256(f"{provider}|{to}|{call.get('subject', '')}".encode()).hexdigest()[:16]
    return {"messageId": f"<{digest}@{provider}>", "provider": provider, "version": version}


def send_email_v1(call: dict) -> dict[str, str]:
    """Version 1: today's provider."""
    return _sent(call, "smtp.example.com", "1")


def send_email_v2(call: dict) -> dict[str, str]:
    """Version 2: the new provider the rollout tries on a share of the calls."""
    return _sent(call, "api.mail.example.net", "2")


Tool.register("sendEmail", SEND_EMAIL, replace=True)
Activity.register("sendEmail", send_email_v1, replace=True)
Activity.register("sendEmail", send_email_v2, version="2", replace=True)
