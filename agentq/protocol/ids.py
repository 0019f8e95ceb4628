"""Time-ordered ids such as `call_01JD8X3...`: a prefix and a ULID (docs/protocol.md#calls).

A ULID is 26 Crockford base32 characters: 48 bits of Unix time in milliseconds, then 80 random bits. Ids made
in one process are strictly increasing: within one millisecond the random part is incremented (the ULID
monotonic variant), so sorting ids sorts them by creation.
"""

from __future__ import annotations

import re
import secrets
import threading
import time

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32: no I, L, O, U

_RANDOM_BITS = 80
_lock = threading.Lock()
_last = (0, 0)  # (milliseconds, random part) of the previous id


def new_id(prefix: str) -> str:
    """`<prefix>_<ULID>`, e.g. `new_id("job")` → `job_01JD8X3Q6ZP4W1V7N0K5R2T9YB`."""
    global _last
    with _lock:
        ms = max(time.time_ns() // 1_000_000, _last[0])
        rand = _last[1] + 1 if ms == _last[0] else secrets.randbits(_RANDOM_BITS)
        if rand >> _RANDOM_BITS:  # the random part overflowed within one millisecond: borrow the next one
            ms, rand = ms + 1, secrets.randbits(_RANDOM_BITS)
        _last = (ms, rand)
    return f"{prefix}_{encode_ulid(ms, rand)}"


_PAIRS = tuple(a + b for a in ALPHABET for b in ALPHABET)  # every 10-bit group as its two characters
_PAIR_SHIFTS = tuple(range(120, -1, -10))


def encode_ulid(ms: int, rand: int) -> str:
    """The 26-character ULID of a millisecond timestamp and an 80-bit random part."""
    value = (ms << _RANDOM_BITS) | rand
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])


def ulid_time_ms(identifier: str) -> int:
    """The creation time (Unix milliseconds) of an id made by `new_id`."""
    value = 0
    for char in identifier[-26:]:
        value = value * 32 + ALPHABET.index(char)
    return value >> _RANDOM_BITS


JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def job_id_problem(job_id: object) -> str | None:
    """Why a sender-chosen job id cannot be used (docs/architecture.md#runtime--the-only-place-that-knows-celery), or
    None when it can.

    The id becomes part of every key of the job (`agentq:{<id>}:...`), so braces, spaces and anything else
    that would change a key's hash slot or meaning are refused before a key is written."""
    if not isinstance(job_id, str):
        return f"a job id must be a string, got {type(job_id).__name__}"
    if not JOB_ID_PATTERN.fullmatch(job_id):  # not `match`: its `$` also matches before a final newline
        return (f"job id {job_id[:140]!r} is not allowed: use 1 to 128 letters, digits and _ . : -, "
                "starting with a letter or digit")
    return None
