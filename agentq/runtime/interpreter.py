"""The garbage collector of an engine on threads (`worker.serve`; its switch interval is `pool_choice.switch_interval`).

An engine's threads make a few hundred container objects per model request, nearly all freed by their reference
counts. At Python's default (a young collection every 700 net new ones) the collector ran every two or three
requests, its middle collections walking what the thousand threads' work left alive, and every full one all the
objects the process loaded (some 200,000: modules, classes, the SDK's types), which are never garbage. In
`benchmarks/engine.py` (200 jobs), the collector's CPU was 0.4 ms per model request; with `engine_gc`, 0.1.
"""

from __future__ import annotations

import gc

ENGINE_GC_THRESHOLD = 10_000
"""Net new container objects between the collector's young collections in an engine on threads (Python's: 700)."""


def engine_gc(*, engine: bool, pool: str) -> bool:
    """For an engine on threads, once its code is loaded (its model provider prepared): the objects alive now are
    moved out of the collector's reach (`gc.freeze`) and its young generation waits for `ENGINE_GC_THRESHOLD`
    objects; Python's defaults otherwise. Whether it was done."""
    if not (engine and pool == "threads"):
        return False
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(ENGINE_GC_THRESHOLD, middle, old)
    return True


__all__ = ["ENGINE_GC_THRESHOLD", "engine_gc"]
