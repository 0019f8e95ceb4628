"""Fixtures of the LLM tests: the fake Messages API server (tests/fake_anthropic.py)."""

from tests.fake_anthropic import anthropic_env, fake_anthropic

__all__ = ["anthropic_env", "fake_anthropic"]
