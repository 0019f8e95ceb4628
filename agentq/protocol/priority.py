"""A job's `options.priority` (docs/rate-limits.md, docs/tenants.md) (pure).

`1`, `2` or `3`: the order in which the job's ready calls are admitted to their queues against the same tenant's
other calls waiting there (1 first; unset: 2). Across tenants, admission is round-robin by weight whatever the
priority (`runtime/admission.py`).

`"batch"`: every model request of the job (its ticks, its latent calls, its module child jobs' ticks) goes through
the Message Batches API at the batch price, grouped with other jobs' requests, answered within hours at worst
(docs/batch.md). Its calls are admitted at the default priority. Unset: the streamed lane.
"""

from __future__ import annotations

from typing import Any

from agentq.errors import Problem

BATCH = "batch"
LANES = (BATCH,)
LEVELS = (1, 2, 3)
DEFAULT_LEVEL = 2


def priority_problem(value: Any, pointer: str) -> Problem | None:
    """What is wrong with `value` as `options.priority`, or None (null is refused: the option left out is the
    default)."""
    if value in LANES or (type(value) is int and value in LEVELS):
        return None
    return Problem(pointer, f"expected 1, 2 or 3 (the order of the job's calls against its tenant's others, 1 "
                            f"first; default 2) or \"batch\" (the job's model requests go through the Message "
                            f"Batches API at half price), got {'null' if value is None else repr(value)}")


def is_batch(priority: Any) -> bool:
    return priority == BATCH


def admission_level(priority: Any) -> int:
    """The admission priority of a job's calls: its `options.priority` when it is 1, 2 or 3, else 2."""
    text = str(priority)  # a job's stored options give it as text (`JobOptions.priority`)
    return int(text) if text in ("1", "2", "3") else DEFAULT_LEVEL


__all__ = ["BATCH", "DEFAULT_LEVEL", "LANES", "LEVELS", "admission_level", "is_batch", "priority_problem"]
