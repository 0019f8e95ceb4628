"""The soak (`benchmarks/soak.py`): a whole fleet of real processes under a mixed load and seeded faults, whose
invariants are checked from records kept outside the store (docs/design/soak.md).

- `activities`: the tools and activities the soak's workers serve; each run appends to the activity ledger.
- `fleet`: the processes (redis-server with its append-only file, workers, dispatchers, `agentq api`).
- `model`: the fake Messages API's answers for the soak's agent jobs, and its outage windows.
- `hooks`: the webhook receiver, which can be taken down and brought back on its port.
- `jobs`: the job kinds of the load; `load`: the submitter, the approval bot and the end watcher.
- `faults`: the seeded fault schedule and what each fault does; `checks`: the invariants; `report`: the figures.
- `run`: one soak from start to report.
"""
