"""A soak of the whole fleet under seeded faults, its invariants checked from records kept outside the store.

Run (from the repository root)::

    python benchmarks/soak.py --duration 180 --seed 7 [--workers 4] [--report soak.json]

It starts its own redis-server (append-only file, `appendfsync everysec`), the fake Messages API, worker
processes (prefork and threads), two dispatchers and `agentq api`; drives a mixed load through the API for
`--duration` seconds while it injects faults on a schedule drawn from the seed; then stops the load and the
faults, gives every job `--drain` seconds to end, and checks the invariants (docs/design/soak.md). It prints a
Markdown report, writes the JSON one to `--report` and a picture to `--plot` (SVG, or PNG through headless
chromium), and exits 1 when an invariant was violated. The same seed gives the same jobs and the same faults in
the same order (their timing follows the machine). After the faults, acme makes a burst of jobs and globex's short
jobs beside it are held to a bound (the fairness check).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.soaking import plot  # noqa: E402
from benchmarks.soaking.faults import KINDS  # noqa: E402
from benchmarks.soaking.report import as_json, markdown  # noqa: E402
from benchmarks.soaking.run import SoakConfig, run_soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load and faults (default 180)")
    parser.add_argument("--seed", type=int, default=None, help="the seed of the jobs and faults (default: random)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes, prefork and threads alternately")
    parser.add_argument("--open-jobs", type=int, default=24, help="jobs kept in flight (default 24)")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds every job gets to end after the faults")
    parser.add_argument("--gap", type=float, nargs=2, default=(4.0, 10.0), metavar=("MIN", "MAX"),
                        help="seconds between two faults, drawn from the seed (default 4 10)")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help=f"the fault kinds, comma-separated: {', '.join(KINDS)}")
    parser.add_argument("--burst-jobs", type=int, default=12,
                        help="acme's burst after the faults, in jobs of 10 calls (0: none; default 12)")
    parser.add_argument("--outage-scale", type=float, default=1.0,
                        help="multiply each outage's drawn length (Redis pause, model, receiver) by this (default 1)")
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report there")
    parser.add_argument("--plot", type=Path, default=None,
                        help="write the run's picture there: SVG, or PNG when the name ends in .png (drawn by "
                        "headless chromium; without it the SVG is written beside it, and said)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the ledger and logs there")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    if unknown := sorted(set(kinds) - set(KINDS)):
        parser.error(f"unknown fault kind(s) {unknown}; choose from {', '.join(KINDS)}")
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    print(f"soak: seed {seed} (replay with --seed {seed})", file=sys.stderr, flush=True)
    result = run_soak(SoakConfig(duration_s=args.duration, seed=seed, workers=args.workers, open_jobs=args.open_jobs,
                                 drain_s=args.drain, gap_s=tuple(args.gap), kinds=kinds,
                                 outage_scale=args.outage_scale, burst_jobs=args.burst_jobs,
                                 workdir=args.workdir))
    print(markdown(result))
    if args.report is not None:
        args.report.write_text(as_json(result))
    if args.plot is not None:
        for note in plot.write(result, args.plot):
            print(note, file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
