"""Restarts of the state Redis that is also the broker, in the middle of bursts: does any job stall? (20 restarts.)

Run (from the repository root)::

    python benchmarks/store_restarts.py [--restarts 20]

Runs `tests/integration/test_store_restarts.py::test_restarts_in_the_middle_of_bursts_stall_no_job` with
`RESTART_ROUNDS` restarts (the suite runs 3): two worker processes of 4 threads serve a card charge that keeps its
own ledger file; the state Redis (append-only file, synced every second) is the broker too; each round submits 4
jobs of 40 charges and restarts the server once a quarter of them started. A job that does not end within 10 s of
the restart counts as stalled (a lost task would keep it waiting for `AGENTQ_ADMISSION_REPUBLISH_S`, 300 s). It
prints the figures the test measured (restarts, stalled jobs, the longest job end after a restart, the calls whose
lost tasks were published again, charges that ran twice, the total time) and exits with the test's status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rounds import run_rounds

TEST = "tests/integration/test_store_restarts.py::test_restarts_in_the_middle_of_bursts_stall_no_job"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=20)
    options = parser.parse_args(argv)
    return run_rounds(TEST, "RESTART_ROUNDS", options.restarts, "store restarts:")


if __name__ == "__main__":
    sys.exit(main())
