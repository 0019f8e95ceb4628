"""Example activity packages served by `agentq worker` (default: this package): order and document pipelines.

Importing the package registers both pipelines' activities on the default `Activity` registry; their tool
schemas are the JSON files in `TOOLS_DIR` (`workers/tools/`). `workers/jobs/` holds example jobs
(`demo_order.json` is what `agentq demo` runs). Both folders are package data: they ship in the wheel.
"""

from workers import documents, orders  # importing them registers their activities
from workers.orders import TOOLS_DIR

__all__ = ["TOOLS_DIR", "documents", "orders"]
