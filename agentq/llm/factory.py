"""Choosing the LLM provider from the settings (docs/protocol.md#what-the-model-is-sent)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentq.errors import ConfigurationError
from agentq.llm.base import LLM

if TYPE_CHECKING:
    from agentq.llm.replay import Recorder
    from agentq.settings import Settings

REPLAY_PREFIX = "replay:"


def create_llm(settings: Settings) -> LLM | None:
    """The provider ``settings`` ask for, or ``None`` when there is none (agent ticks, latent calls and
    modules then fail with ``LLMNotConfigured``).

    ``settings.llm``: ``"anthropic"``; ``"replay:<file>"`` (or a folder of ``*.jsonl`` files); or unset, which
    means ``anthropic`` when ``ANTHROPIC_API_KEY`` is set and no provider otherwise. ``settings.llm_record`` wraps
    the provider in a recorder that appends every exchange to that file. Anything else is a ``ConfigurationError``.
    """
    choice = (getattr(settings, "llm", None) or "").strip()
    provider: LLM | None
    if not choice:
        provider = _anthropic(settings) if api_key(settings) else None
    elif choice.lower() == "anthropic":
        provider = _anthropic(settings)
    elif choice.startswith(REPLAY_PREFIX):
        provider = replay_provider(settings)
    else:
        raise ConfigurationError(f"AGENTQ_LLM={choice!r} is not a provider: use 'anthropic' or 'replay:<file>'")
    record = getattr(settings, "llm_record", None)
    if provider is not None and record:
        from agentq.llm.replay import RecordingLLM

        provider = RecordingLLM(provider, record)
    return provider


def replay_provider(settings: Settings) -> LLM | None:
    """The bare replay `settings` ask for (``AGENTQ_LLM=replay:<file>``; not recorded, priced or metered: the batch
    lane answers from it at the batch price), None for any other provider."""
    choice = (getattr(settings, "llm", None) or "").strip()
    if not choice.startswith(REPLAY_PREFIX):
        return None
    path = choice[len(REPLAY_PREFIX):].strip()
    if not path:
        raise ConfigurationError("AGENTQ_LLM=replay:<file> needs a file name after 'replay:'")
    from agentq.llm.replay import ReplayLLM

    return ReplayLLM.from_file(path)


def recorder(settings: Settings) -> Recorder | None:
    """What appends exchanges to ``AGENTQ_LLM_RECORD``'s file (None: unset): the batch lane records its answers
    with it, as the recording provider does a streamed request's."""
    record = getattr(settings, "llm_record", None)
    if not record:
        return None
    from agentq.llm.replay import Recorder

    return Recorder(record)


def uses_anthropic(settings: Settings) -> bool:
    """Whether `settings` ask for the Anthropic provider (the one with a Message Batches API: the batch lane)."""
    choice = (getattr(settings, "llm", None) or "").strip()
    return choice.lower() == "anthropic" or (not choice and api_key(settings) is not None)


def api_key(settings: Settings) -> str | None:
    """The Anthropic API key of `settings` (`ANTHROPIC_API_KEY`), None when unset or empty."""
    secret = getattr(settings, "anthropic_api_key", None)
    return (secret.get_secret_value() if secret is not None else None) or None


def _anthropic(settings: Settings) -> LLM:
    from agentq.llm.anthropic import AnthropicLLM

    return AnthropicLLM(api_key=api_key(settings), timeout_s=float(getattr(settings, "llm_timeout_s", 600.0)),
                        connections=int(getattr(settings, "engine_concurrency", 100)))


__all__ = ["api_key", "create_llm", "recorder", "replay_provider", "uses_anthropic"]
