"""State-store outages, round after round: does any activity run twice? (10 rounds of 200 calls.)

Run (from the repository root)::

    python benchmarks/outage_rounds.py [--rounds 10]

Runs `tests/integration/test_outage_rounds.py::test_store_outages_round_after_round_run_no_activity_twice` with
`OUTAGE_ROUNDS` rounds (the suite runs 3): two worker processes serve a card charge that keeps its own ledger
file; in each round the state Redis (its own server, append-only file on) is stopped 2.5 s in the middle of a
job of 200 charges and started again, the broker being another Redis server; the lease (2 s) lapses during the
outage and the broker's visibility timeout (2 s) delivers a second copy of each held call. It prints the
figures the test measured (charges that ran twice, the longest job end after a restart, the total time) and
exits with the test's status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rounds import run_rounds

TEST = "tests/integration/test_outage_rounds.py::test_store_outages_round_after_round_run_no_activity_twice"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args(argv)
    return run_rounds(TEST, "OUTAGE_ROUNDS", options.rounds, "outage rounds:")


if __name__ == "__main__":
    sys.exit(main())
