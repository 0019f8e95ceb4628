"""Example activity packages served by `agentq worker` (default: this package): order and document pipelines."""
