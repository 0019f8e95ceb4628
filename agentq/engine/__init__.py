"""The work: call intake, the call runner, the one job-progress step, the agent loop, latent calls, module
delegation and relay, finalization, and the hook point for cross-cutting work. Knows the store, the protocol and
the LLM interface, never Celery (docs/architecture.md)."""
