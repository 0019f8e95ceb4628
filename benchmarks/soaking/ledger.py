"""Reading the activity ledger (`activities.py` writes it): each handler run, when it started and how it ended."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Run:
    tag: str
    run: str
    pid: int
    start: float
    account: str
    end: float | None = None  # its `end` or `fail` line's time
    failed: bool = False  # ended with a failure the job asked for

    @property
    def tenant(self) -> str:
        return self.tag.split("-", 1)[0]


def read_ledger(path: Path) -> dict[str, list[Run]]:
    """The runs of each tag, oldest first."""
    runs: dict[str, Run] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 5:
                continue
            if parts[0] == "start" and len(parts) >= 7:
                runs[parts[2]] = Run(parts[1], parts[2], int(parts[3]), float(parts[4]), parts[6])
            elif parts[0] in ("end", "fail") and parts[2] in runs:
                runs[parts[2]].end, runs[parts[2]].failed = float(parts[4]), parts[0] == "fail"
    by_tag: dict[str, list[Run]] = defaultdict(list)
    for run in runs.values():
        by_tag[run.tag].append(run)
    for tag_runs in by_tag.values():
        tag_runs.sort(key=lambda r: r.start)
    return dict(by_tag)


def most_at_once(intervals: list[tuple[float, float]]) -> tuple[int, float]:
    """The most intervals open at one instant, and when (an end at the instant another starts is not an overlap)."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda p: (p[0], p[1]))
    best, at, now = 0, 0.0, 0
    for when, step in points:
        now += step
        if now > best:
            best, at = now, when
    return best, at
