"""Signed webhooks (docs/webhooks.md): `options.webhook` checked at submission (`targets.py`), events found by a watcher
(`watcher.py`), deliveries kept in Redis (`store.py`, `records.py`) and attempted by the delivery loop of worker
and dispatcher processes (`loop.py`, `sender.py`), signed as Standard Webhooks (`signing.py`).

Importing this package loads nothing heavy; `sender.py` and `loop.py` load httpx2 and are imported by the
processes that deliver."""
