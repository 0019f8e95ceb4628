"""agentq: a distributed task-queue backend for LLM agents."""
