"""A webhook delivery as it is stored and listed (`GET /v1/jobs/{id}/deliveries`, `agentq deliveries ID`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

MAX_ATTEMPTS_KEPT = 50  # the listing keeps the first attempt and the latest ones


class DeliveryState(StrEnum):
    PENDING = "pending"  # not delivered yet: an attempt is due at `next_attempt_at`
    DELIVERED = "delivered"  # a 2xx answer
    FAILED = "failed"  # given up: retried for AGENTQ_WEBHOOK_RETRY_S, or the receiver answered 410 Gone


@dataclass(frozen=True)
class Attempt:
    """One attempt: when, the answer's status (None: no answer) or what went wrong, how long it took."""

    at: float
    status: int | None
    error: str | None
    duration_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"at": iso(self.at), "status": self.status, "error": self.error, "duration_ms": self.duration_ms}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        return cls(at=unix(data["at"]), status=data.get("status"), error=data.get("error"),
                   duration_ms=float(data.get("duration_ms") or 0))


@dataclass(frozen=True)
class Delivery:
    """One event of a job for its webhook: `id` is its stable `webhook-id`."""

    id: str
    job_id: str
    type: str
    url: str
    created_at: float
    state: DeliveryState = DeliveryState.PENDING
    next_attempt_at: float | None = None
    attempts: tuple[Attempt, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """The listed (and stored) form."""
        return {"id": self.id, "job_id": self.job_id, "type": self.type, "url": self.url,
                "created_at": iso(self.created_at), "state": self.state.value,
                "next_attempt_at": iso(self.next_attempt_at) if self.next_attempt_at is not None else None,
                "attempts": [a.to_dict() for a in self.attempts]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Delivery:
        next_at = data.get("next_attempt_at")
        return cls(id=data["id"], job_id=data["job_id"], type=data["type"], url=data["url"],
                   created_at=unix(data["created_at"]), state=DeliveryState(data["state"]),
                   next_attempt_at=unix(next_at) if next_at else None,
                   attempts=tuple(Attempt.from_dict(a) for a in data.get("attempts") or ()))

    def attempted(self, attempt: Attempt, *, state: DeliveryState, next_at: float | None) -> Delivery:
        """This delivery after `attempt` (the first attempt and the latest ones are kept)."""
        attempts = (*self.attempts, attempt)
        if len(attempts) > MAX_ATTEMPTS_KEPT:
            attempts = (attempts[0], *attempts[-(MAX_ATTEMPTS_KEPT - 1):])
        return replace(self, attempts=attempts, state=state, next_attempt_at=next_at)


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def unix(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
