"""The fake Messages API's prompt cache (`tests/fake_prompt_cache.py`) counts as the real API documents it: a prefix
up to a breakpoint is written once it is long enough, a later request reads the longest live prefix within 20 blocks
before one of its breakpoints, per model, for the breakpoint's TTL; `cache_control` is not part of the content."""

from __future__ import annotations

from tests.fake_prompt_cache import PromptCache

SYSTEM = [{"type": "text", "text": "x" * 8000, "cache_control": {"type": "ephemeral", "ttl": "5m"}}]


def body(turns: list[str], *, model: str = "m", ttl: str = "5m") -> dict:
    blocks: list[list[dict]] = [[{"type": "text", "text": t}] for t in turns]
    blocks[-1][-1]["cache_control"] = {"type": "ephemeral", "ttl": ttl}
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": content} for i, content in enumerate(blocks)]
    return {"model": model, "system": SYSTEM, "messages": messages}


def test_a_longer_request_reads_the_earlier_prefix_and_writes_the_rest():
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    first = cache.usage(body(["hello " * 50]))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 2000
    second = cache.usage(body(["hello " * 50, "answer", "more " * 40]))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] > 0 and second["input_tokens"] == 0
    assert cache.usage(body(["hello " * 50], model="other"))["cache_read_input_tokens"] == 0  # per model
    assert cache.usage(body(["changed " * 50]))["cache_read_input_tokens"] > 0  # the system prefix only
    now[0] = 301.0  # past the 5-minute TTL since the last use
    assert cache.usage(body(["hello " * 50, "answer", "more " * 40]))["cache_read_input_tokens"] == 0


def test_the_lookback_is_twenty_blocks_and_short_prefixes_are_not_cached():
    cache = PromptCache()
    written = cache.usage(body(["start"]))["cache_creation_input_tokens"]
    near = ["start"] + [f"t{i}" for i in range(19)]
    assert cache.usage(body(near))["cache_read_input_tokens"] == written  # up to "start", 20 blocks back
    far = PromptCache()
    far.usage(body(["start"]))
    # 25 blocks on, "start" is out of reach: only the system prompt (its own breakpoint) is read
    assert far.usage(body(["start"] + [f"t{i}" for i in range(25)]))["cache_read_input_tokens"] < written
    short = PromptCache()
    tiny = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}
    assert short.usage(tiny)["cache_creation_input_tokens"] == 0 and short.usage(tiny)["cache_read_input_tokens"] == 0
