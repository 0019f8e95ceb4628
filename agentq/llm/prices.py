"""Model prices (docs/rate-limits.md#cost): what a request's usage costs, per model, in USD per million tokens.

agentq ships Anthropic's list prices for current Claude models (`SHIPPED`, from the pricing page of
platform.claude.com, November 2026); the fleet's `llm_prices` (`agentq config set llm_prices FILE`, seeded from
the file `AGENTQ_LLM_PRICES=<file>` names) adds to them or replaces them, model by model. The file is JSON::

    {"claude-sonnet-4-6": {"input": 3, "output": 15, "cache_write_5m": 3.75, "cache_write_1h": 6,
                           "cache_read": 0.3, "batch_discount": 0.5},
     "my-proxy-model": {"input": 1, "output": 5},
     "*": {"input": 3, "output": 15}}

`input` and `output` are required; the cache prices default to Anthropic's multipliers of `input` (a 5-minute
write 1.25×, a 1-hour write 2×, a read 0.1×), `batch_discount` (the Message Batches API's) to 0.5. An entry may
price long prompts apart: `"long_prompt": {"above_tokens": 200000, "input": 6, "output": 22.5, ...}` applies to
every token of a request whose prompt (uncached input, cache writes and reads) is longer.

A model is found by its exact name, then without a date or `-latest` suffix (`claude-haiku-4-5-20251001` →
`claude-haiku-4-5`), then as `"*"`. A model none of them names has no price: its requests' cost is null in the
job record (and uncounted in `agentq_llm_cost_usd_total`), a warning is logged once per process and model, and a
job with `max_cost_usd` cannot send it (its budget could not be enforced).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentq.errors import ConfigurationError, ModelStopped
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall, Usage

log = logging.getLogger("agentq.llm")

_RATES = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
_SUFFIX = re.compile(r"-(\d{8}|latest)$")
NANOS_PER_TOKEN_PER_USD_PER_MTOK = 1000  # $1 per million tokens is 1,000 nano-dollars per token


@dataclass(frozen=True)
class Rates:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    def prompt_rate(self, cache_ttl: str) -> float:
        """The most a prompt token may cost (uncached, or written to the cache with `cache_ttl`)."""
        return max(self.input, self.cache_write_1h if cache_ttl == "1h" else self.cache_write_5m)


@dataclass(frozen=True)
class Price:
    """A model's price: its rates, those of long prompts (above `long_above` prompt tokens), the batch discount."""

    rates: Rates
    batch_discount: float = 0.5
    long_rates: Rates | None = None
    long_above: int = 0

    def rates_for(self, prompt_tokens: int) -> Rates:
        return self.long_rates if self.long_rates is not None and prompt_tokens > self.long_above else self.rates

    def cost_nanousd(self, usage: Usage, cache_ttl: str, *, batch: bool = False) -> int:
        """What `usage` of one request costs, in nano-dollars. Cache writes the API did not split by TTL were
        made with the request's `cache_ttl` (every breakpoint of an agentq request has the same one)."""
        rates = self.rates_for(usage.prompt_tokens)
        written_1h, written_5m = usage.ephemeral_1h_input_tokens, usage.ephemeral_5m_input_tokens
        unsplit = max(0, usage.cache_creation_input_tokens - written_1h - written_5m)
        if cache_ttl == "1h":
            written_1h += unsplit
        else:
            written_5m += unsplit
        per_million = (usage.input_tokens * rates.input + usage.output_tokens * rates.output
                       + written_5m * rates.cache_write_5m + written_1h * rates.cache_write_1h
                       + usage.cache_read_input_tokens * rates.cache_read)
        if batch:
            per_million *= 1 - self.batch_discount
        return round(per_million * NANOS_PER_TOKEN_PER_USD_PER_MTOK)


def _rates(input: float, output: float, write_5m: float | None = None, write_1h: float | None = None,
           read: float | None = None) -> Rates:
    return Rates(input, output, input * 1.25 if write_5m is None else write_5m,
                 input * 2 if write_1h is None else write_1h, input * 0.1 if read is None else read)


_OPUS_45 = Price(_rates(5, 25, 6.25, 10, 0.5))
_OPUS_4 = Price(_rates(15, 75, 18.75, 30, 1.5))
_SONNET_4 = Price(_rates(3, 15, 3.75, 6, 0.3), long_rates=_rates(6, 22.5, 7.5, 12, 0.6), long_above=200_000)
_SONNET_46 = Price(_rates(3, 15, 3.75, 6, 0.3))
_FABLE = Price(_rates(10, 50, 12.5, 20, 1))
_FABLE_51 = Price(_rates(10, 50, 12.5, 20, 0.25))

SHIPPED: dict[str, Price] = {
    "claude-fable-5-1": _FABLE_51, "claude-mythos-5-1": _FABLE_51,
    "claude-fable-5": _FABLE, "claude-mythos-5": _FABLE,
    "claude-opus-5-5": Price(_rates(4, 20, 5, 8, 0.2)),
    "claude-opus-5": _OPUS_45, "claude-opus-4-8": _OPUS_45, "claude-opus-4-7": _OPUS_45,
    "claude-opus-4-6": _OPUS_45, "claude-opus-4-5": _OPUS_45,
    "claude-opus-4-1": _OPUS_4, "claude-opus-4-0": _OPUS_4, "claude-opus-4": _OPUS_4,
    "claude-sonnet-5-5": Price(_rates(2, 10, 2.5, 4, 0.1)),
    "claude-sonnet-5": Price(_rates(2, 10, 2.5, 4, 0.2)),
    "claude-sonnet-4-6": _SONNET_46, "claude-sonnet-4-5": _SONNET_4, "claude-sonnet-4-0": _SONNET_4,
    "claude-sonnet-4": _SONNET_4, "claude-3-7-sonnet": _SONNET_46,
    "claude-haiku-5-5": Price(_rates(0.1, 0.5, 0.125, 0.2, 0.01), long_rates=_rates(0.5, 2.5, 0.625, 1, 0.05),
                              long_above=100_000),
    "claude-haiku-4-5": Price(_rates(1, 5, 1.25, 2, 0.1)),
    "claude-3-5-haiku": Price(_rates(0.8, 4, 1, 1.6, 0.08)),
    "claude-3-haiku": Price(_rates(0.25, 1.25, 0.3, 0.5, 0.03)),
}


class PriceTable:
    """Prices by model: the shipped ones, then a file's entries over them (see the module's docstring)."""

    def __init__(self, prices: Mapping[str, Price] | None = None):
        self.prices = dict(SHIPPED if prices is None else prices)
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def price(self, model: str) -> Price | None:
        """The price of `model`: its own, its undated name's, the `"*"` entry's, else None."""
        return self.prices.get(model) or self.prices.get(_SUFFIX.sub("", model)) or self.prices.get("*")

    def cost_nanousd(self, request: LLMRequest, usage: Usage, *, batch: bool = False) -> int | None:
        """What `usage` of `request` cost (None: no price for its model, warned once per process and model);
        `batch`: sent through the Message Batches API, at the model's batch discount."""
        price = self.price(request.model)
        if price is not None:
            return price.cost_nanousd(usage, request.cache_ttl, batch=batch)
        with self._lock:
            first = request.model not in self._warned
            self._warned.add(request.model)
        if first:
            log.warning("no price for model %r: the cost of its requests is not known (give it, or a \"*\" entry, "
                        "in the fleet's prices: agentq config set llm_prices FILE)", request.model)
        return None


class PricedLLM:
    """An `LLM` whose answers' usage carries its cost (`Usage.cost_nanousd`) by `table`."""

    def __init__(self, llm: LLM, table: PriceTable):
        self.llm = llm
        self.table = table

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        try:
            answer = self.llm.solve(request, on_call=on_call)
        except ModelStopped as stopped:  # an answer that cannot be used (a refusal, ...) was still paid for
            if isinstance(stopped.usage, Usage):
                stopped.usage = replace(stopped.usage, cost_nanousd=self.table.cost_nanousd(request, stopped.usage))
            raise
        cost = self.table.cost_nanousd(request, answer.usage)
        return replace(answer, usage=replace(answer.usage, cost_nanousd=cost))

    def __getattr__(self, name: str) -> Any:  # anything else of the provider (e.g. a replay's bookkeeping)
        return getattr(self.llm, name)


def priced(llm: LLM | None, table: PriceTable) -> LLM | None:
    return PricedLLM(llm, table) if llm is not None else None


# ------------------------------------------------------------------------------------ the prices file


def load_prices(path: Path | None) -> PriceTable:
    """The shipped prices with the entries of the file `path` (AGENTQ_LLM_PRICES) over them. A file that cannot
    be read or is not a valid price list is a `ConfigurationError` naming the setting, the file and every problem
    with its JSON pointer."""
    return PriceTable() if path is None else price_table(read_price_file(path))


def read_price_file(path: Path) -> dict[str, Any]:
    """The price list of the file `path` (AGENTQ_LLM_PRICES), checked (see `load_prices`)."""
    where = f"AGENTQ_LLM_PRICES={path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigurationError(f"{where}: cannot read the file: {error.strerror or error}") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise ConfigurationError(f"{where}: not a JSON file: {error}") from None
    _, problems = parse_prices(data)
    if problems:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return data


def price_table(data: Mapping[str, Any] | None) -> PriceTable:
    """The shipped prices with a valid price list's entries over them (None: the shipped prices alone)."""
    return PriceTable() if data is None else PriceTable({**SHIPPED, **parse_prices(data)[0]})


class LivePrices(PriceTable):
    """The price table `current()` gives each time a price is asked for: the fleet's prices (`agentq config`), which
    change while the process runs. Its warnings of unpriced models are its own, once per process and model."""

    def __init__(self, current: Callable[[], PriceTable]):
        super().__init__({})
        self.current = current

    @property  # type: ignore[override]
    def prices(self) -> dict[str, Price]:
        return self.current().prices

    @prices.setter
    def prices(self, _value: dict[str, Price]) -> None:  # `PriceTable.__init__` sets it: the current table rules
        pass

    def price(self, model: str) -> Price | None:
        return self.current().price(model)


def parse_prices(data: Any) -> tuple[dict[str, Price], list[str]]:
    """The prices of a price list's JSON, and its problems (`<pointer>: <what>`)."""
    if not isinstance(data, dict) or not data:
        return {}, ['/: expected an object of prices by model, e.g. {"claude-sonnet-4-6": {"input": 3, "output": 15}}']
    prices: dict[str, Price] = {}
    problems: list[str] = []
    for model, entry in data.items():
        found = _entry_problems(entry, f"/{_escape(model)}")
        problems += found
        if not found:
            long = entry.get("long_prompt")
            prices[model] = Price(_entry_rates(entry), batch_discount=float(entry.get("batch_discount", 0.5)),
                                  long_rates=_entry_rates(long) if long else None,
                                  long_above=int(long["above_tokens"]) if long else 0)
    return prices, problems


def _entry_rates(entry: Mapping[str, Any]) -> Rates:
    def rate(key: str) -> float | None:
        return float(entry[key]) if key in entry else None

    return _rates(float(entry["input"]), float(entry["output"]), rate("cache_write_5m"), rate("cache_write_1h"),
                  rate("cache_read"))


def _entry_problems(entry: Any, pointer: str, *, nested: bool = False) -> list[str]:
    """The problems of one model's price (`nested`: its `long_prompt` tier)."""
    if not isinstance(entry, dict):
        return [f"{pointer}: expected an object with {', '.join(_RATES)} (USD per million tokens)"]
    allowed = {*_RATES, "above_tokens"} if nested else {*_RATES, "batch_discount", "long_prompt"}
    problems = [f"{pointer}/{_escape(k)}: unknown field; a price has {', '.join(sorted(allowed))}"
                for k in entry if k not in allowed]
    problems += _rate_problems(entry, pointer)
    if nested and not _is_count(entry.get("above_tokens")):
        problems.append(f"{pointer}/above_tokens: expected an integer > 0 (prompt tokens)")
    if "long_prompt" in entry:
        problems += _entry_problems(entry["long_prompt"], f"{pointer}/long_prompt", nested=True)
    return problems


def _rate_problems(entry: dict, pointer: str) -> list[str]:
    problems = [f"{pointer}/{k}: required" for k in ("input", "output") if k not in entry]
    problems += [f"{pointer}/{k}: expected a number >= 0 (USD per million tokens), got {entry[k]!r}"
                 for k in _RATES if k in entry and not _amount(entry[k])]
    if "batch_discount" in entry and not (_amount(entry["batch_discount"]) and entry["batch_discount"] <= 1):
        problems.append(f"{pointer}/batch_discount: expected a number from 0 to 1, got {entry['batch_discount']!r}")
    return problems


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


__all__ = ["SHIPPED", "LivePrices", "Price", "PriceTable", "PricedLLM", "Rates", "load_prices", "parse_prices",
           "price_table", "priced", "read_price_file"]
