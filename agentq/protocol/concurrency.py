"""Job concurrency keys (docs/tenants.md): `options.concurrency`, a list of `{"key": <string>, "limit": <integer >=
1>}`.

At most `limit` jobs of one tenant holding `key` run at once (keys are per tenant: tenant A's `"acct-42"` is not
tenant B's). A job over a key's limit is accepted and waits (`JobStatus.WAITING`) until it fits under every one of
its keys, first come first served per key. The checks and the parsed form live here; the store keeps who holds
and who waits (`store/concurrency.py`, `store/lua/concurrency.lua`).
"""

from __future__ import annotations

from typing import Any

from agentq.errors import Problem

MAX_KEY_CHARS = 200  # a key becomes part of Redis keys
MAX_KEYS = 32  # keys one job may hold

#: a job's keys and their limits, in the order it gave them
ConcurrencyKeys = tuple[tuple[str, int], ...]


def concurrency_problems(value: Any, pointer: str = "/options/concurrency") -> list[Problem]:
    """Every problem of an `options.concurrency` value, each with its JSON pointer ([] when it is valid)."""
    if not isinstance(value, list):
        return [Problem(pointer, f'expected an array of {{"key": string, "limit": integer >= 1}}, got {value!r}')]
    problems: list[Problem] = []
    if len(value) > MAX_KEYS:
        problems.append(Problem(pointer, f"{len(value)} keys; a job holds at most {MAX_KEYS}"))
    seen: dict[str, int] = {}
    for index, item in enumerate(value):
        at = f"{pointer}/{index}"
        if not isinstance(item, dict):
            problems.append(Problem(at, f'expected an object {{"key": string, "limit": integer >= 1}}, got {item!r}'))
            continue
        problems.extend(Problem(f"{at}/{extra}", "unknown field; the fields are key and limit")
                        for extra in sorted(set(item) - {"key", "limit"}))
        problems.extend(_key_problems(item.get("key"), f"{at}/key", seen, pointer, index))
        limit = item.get("limit")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            problems.append(Problem(f"{at}/limit", f"expected a positive integer, got {limit!r}"))
    return problems


def _key_problems(key: Any, at: str, seen: dict[str, int], pointer: str, index: int) -> list[Problem]:
    if not isinstance(key, str) or not key:
        return [Problem(at, f"expected a non-empty string, got {key!r}")]
    if len(key) > MAX_KEY_CHARS:
        return [Problem(at, f"a key is at most {MAX_KEY_CHARS} characters, got {len(key)}")]
    if key in seen:
        return [Problem(at, f"duplicate key {key!r} (also at {pointer}/{seen[key]})")]
    seen[key] = index
    return []


def concurrency_keys(raw: Any) -> ConcurrencyKeys:
    """The keys of a stored, valid `options.concurrency` (an absent one: none)."""
    if not isinstance(raw, list):
        return ()
    return tuple((str(item["key"]), int(item["limit"])) for item in raw)
