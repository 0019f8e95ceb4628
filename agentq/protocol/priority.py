"""A job's `options.priority` (SPEC §16): which lane its model requests take (pure).

`"batch"`: every model request of the job (its ticks, its latent calls, its module child jobs' ticks) goes through
the Message Batches API at the batch price, grouped with other jobs' requests, answered within hours at worst
(docs/batch.md). Unset: the streamed lane. `LANES` names the values accepted today; numeric priorities may join
them (`priority_problem` is where they would be checked).
"""

from __future__ import annotations

from typing import Any

from agentq.errors import Problem

BATCH = "batch"
LANES = (BATCH,)


def priority_problem(value: Any, pointer: str) -> Problem | None:
    """What is wrong with `value` as `options.priority`, or None."""
    if value is None or value in LANES:
        return None
    return Problem(pointer, f"expected \"batch\" (the job's model requests go through the Message Batches API at "
                            f"half price), got {value!r}")


def is_batch(priority: Any) -> bool:
    return priority == BATCH


__all__ = ["BATCH", "LANES", "is_batch", "priority_problem"]
