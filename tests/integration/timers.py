"""The fleet's due timers as tests look at them: a wait's, a deadline's, a scheduled job's start, without the
`@unstarted` check written with every job whose first tasks its submitter sends (it stays until a lease after the
job's write, whether or not the job ended meanwhile, and then finds the job started or ended and is dropped)."""

from __future__ import annotations

from typing import Any

TIMERS = "agentq:{timers}:due"


def due_timers(redis: Any) -> list[str]:
    """The members of the timers' sorted set, the jobs' `@unstarted` checks left out."""
    return [m for m in redis.zrange(TIMERS, 0, -1) if not str(m).endswith(" @unstarted")]
