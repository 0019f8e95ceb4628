"""The numbers the store's Lua steps share with Python, each defined once here.

`script_runner.lua_source` puts `lua_constants()` in front of every script (after the statuses' preamble), so a
script reads `HEADROOM_MS` as a global defined from this module: no number is copied by hand into `lua/`.
"""

from __future__ import annotations

# A minute, the unit of every rate limit (a model's per-minute limits, a tenant's jobs_per_minute), in ms.
MINUTE_MS = 60_000

# A take from a full rate-limit bucket starts its refill this much later (`_buckets.lua`, `llm_take.lua`). The
# API's own bucket starts refilling when the first request reaches it, some time after its take (the request is
# built and sent meanwhile, up to this long): refilled from the take, the bucket would run ahead of the API's and
# let requests through early.
HEADROOM_MS = 1000

# A deferred model request's ticket nobody came back for is dropped this long after it was due (`llm_take.lua`).
TICKET_MAX_AGE_MS = 600_000

# Parked calls of one priority that admission looks at for a concurrency key with room (`admission.lua`).
LOOKED_AT = 32

# After a restart of the store, a running call whose lease lapsed is not taken over during its lease plus this
# long (`claim.lua`): its holder may hold a result it could not commit (the store retries of `engine/outages.py`
# wait at most this long between tries).
RESTART_GRACE_MS = 2000

# A commit that finds its call held by another attempt (which took it over after this one's lease lapsed) reads
# and deletes the lease in one command, then gives that attempt its lease back a whole lease long: the caller's
# (`AGENTQ_LEASE_S`, as the holder's), else this long, the default lease (`commit.lua`); its holder's renewals,
# every third of a lease, set their own.
LEASE_KEPT_MS = 30_000

# Task-sent events per `task.multi` message: of the calls an admission step admits, pushing their tasks itself
# (`admission.lua`), as of the tasks a dispatch publishes (`runtime/messages.py`).
EVENTS_GROUP = 32

STEP_CONSTANTS: dict[str, int] = {"MINUTE_MS": MINUTE_MS, "HEADROOM_MS": HEADROOM_MS,
                                  "TICKET_MAX_AGE_MS": TICKET_MAX_AGE_MS, "LOOKED_AT": LOOKED_AT,
                                  "RESTART_GRACE_MS": RESTART_GRACE_MS, "LEASE_KEPT_MS": LEASE_KEPT_MS,
                                  "EVENTS_GROUP": EVENTS_GROUP}


def lua_constants() -> str:
    """Lua that defines `STEP_CONSTANTS` for a script, one `local` each."""
    return "".join(f"local {name} = {value}\n" for name, value in STEP_CONSTANTS.items())
