"""The price table (docs/rate-limits.md#cost): the shipped prices, a price file over them, and what a request's usage
costs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agentq.errors import ConfigurationError
from agentq.llm.base import LLMAnswer, LLMRequest, Usage
from agentq.llm.prices import SHIPPED, PricedLLM, PriceTable, load_prices


def request(model: str = "claude-sonnet-4-6", cache_ttl: str = "5m") -> LLMRequest:
    return LLMRequest(model=model, system=(), messages=(), solution_schema={}, max_tokens=100, cache_ttl=cache_ttl)


def test_shipped_prices_follow_anthropics_list_and_its_multipliers():
    sonnet = SHIPPED["claude-sonnet-4-6"].rates
    assert (sonnet.input, sonnet.output, sonnet.cache_write_5m, sonnet.cache_write_1h, sonnet.cache_read) == (
        3, 15, 3.75, 6, 0.3)
    haiku = SHIPPED["claude-haiku-4-5"].rates
    assert (haiku.input, haiku.output, haiku.cache_write_5m, haiku.cache_write_1h, haiku.cache_read) == (
        1, 5, 1.25, 2, 0.1)
    assert SHIPPED["claude-opus-4-1"].rates.output == 75 and SHIPPED["claude-opus-4-6"].rates.output == 25
    assert all(price.batch_discount == 0.5 for price in SHIPPED.values())


def test_a_model_is_found_by_name_then_without_its_date_then_as_star():
    table = PriceTable()
    assert table.price("claude-haiku-4-5-20251001") is SHIPPED["claude-haiku-4-5"]
    assert table.price("claude-3-5-haiku-latest") is SHIPPED["claude-3-5-haiku"]
    assert table.price("my-model") is None
    star = PriceTable({**SHIPPED, "*": SHIPPED["claude-opus-4-6"]})
    assert star.price("my-model") is SHIPPED["claude-opus-4-6"]


def test_usage_is_priced_by_kind_and_cache_writes_by_their_ttl():
    price = SHIPPED["claude-sonnet-4-6"]
    usage = Usage(requests=1, input_tokens=1000, output_tokens=200, cache_creation_input_tokens=3000,
                  cache_read_input_tokens=10_000)
    # 1000 × $3 + 200 × $15 + 3000 × $3.75 (a 5-minute write) + 10,000 × $0.30, per million tokens
    assert price.cost_nanousd(usage, "5m") == 1000 * 3000 + 200 * 15000 + 3000 * 3750 + 10_000 * 300
    # the same writes made with a 1-hour TTL cost $6 per million
    assert price.cost_nanousd(usage, "1h") == 1000 * 3000 + 200 * 15000 + 3000 * 6000 + 10_000 * 300
    # when the API splits the writes by TTL, the split decides whatever the request's TTL
    split = Usage(requests=1, cache_creation_input_tokens=3000, ephemeral_5m_input_tokens=1000,
                  ephemeral_1h_input_tokens=2000)
    assert price.cost_nanousd(split, "5m") == price.cost_nanousd(split, "1h") == 1000 * 3750 + 2000 * 6000
    assert price.cost_nanousd(usage, "5m", batch=True) == price.cost_nanousd(usage, "5m") // 2


def test_a_long_prompt_is_priced_at_its_tiers_rates():
    price = SHIPPED["claude-sonnet-4-5"]  # above 200,000 prompt tokens: $6 / $22.50
    short = Usage(requests=1, input_tokens=200_000, output_tokens=1000)
    long = Usage(requests=1, input_tokens=150_000, cache_read_input_tokens=60_000, output_tokens=1000)
    assert price.cost_nanousd(short, "5m") == 200_000 * 3000 + 1000 * 15000
    assert price.cost_nanousd(long, "5m") == 150_000 * 6000 + 60_000 * 600 + 1000 * 22500


def test_the_priced_llm_puts_the_cost_in_the_usage_and_warns_once_of_an_unpriced_model(caplog):
    class Fixed:
        def solve(self, req, *, on_call=None):
            return LLMAnswer({"output": 1}, "{}", "toolu_1", Usage(requests=1, input_tokens=10, output_tokens=10),
                             "tool_use")

    llm = PricedLLM(Fixed(), PriceTable())
    assert llm.solve(request()).usage.cost_nanousd == 10 * 3000 + 10 * 15000
    with caplog.at_level(logging.WARNING, logger="agentq.llm"):
        assert llm.solve(request("mine")).usage.cost_nanousd is None
        assert llm.solve(request("mine")).usage.cost_nanousd is None
    assert [r.getMessage() for r in caplog.records].count(
        "no price for model 'mine': the cost of its requests is not known (give it, or a \"*\" entry, in the "
        "fleet's prices: agentq config set llm_prices FILE)") == 1


def test_a_price_file_replaces_entries_model_by_model(tmp_path: Path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"claude-sonnet-4-6": {"input": 2, "output": 10},
                                "mine": {"input": 1, "output": 2, "cache_read": 0.05, "batch_discount": 0.4,
                                         "long_prompt": {"above_tokens": 1000, "input": 9, "output": 9}},
                                "*": {"input": 7, "output": 7}}), encoding="utf-8")
    table = load_prices(path)
    sonnet = table.prices["claude-sonnet-4-6"].rates
    assert (sonnet.input, sonnet.cache_write_5m, sonnet.cache_write_1h, sonnet.cache_read) == (2, 2.5, 4, 0.2)
    assert table.prices["claude-haiku-4-5"] is SHIPPED["claude-haiku-4-5"]  # the others stay shipped
    mine = table.prices["mine"]
    assert (mine.rates.cache_read, mine.batch_discount, mine.long_above) == (0.05, 0.4, 1000)
    fallback = table.price("unknown")
    assert fallback is not None and fallback.rates.input == 7
    assert load_prices(None).prices == SHIPPED


@pytest.mark.parametrize(("content", "problems"), [
    ("{", ["not a JSON file"]),
    ("[]", ["/: expected an object of prices by model"]),
    ('{"m": {"input": 1}}', ["/m/output: required"]),
    ('{"m": {"input": -1, "output": "x", "cache_read": true}}',
     ["/m/input: expected a number >= 0", "/m/output: expected a number >= 0", "/m/cache_read: expected a number"]),
    ('{"m": {"input": 1, "output": 1, "batch_discount": 2, "colour": "red"}}',
     ["/m/colour: unknown field", "/m/batch_discount: expected a number from 0 to 1"]),
    ('{"a/b": 3}', ["/a~1b: expected an object"]),
    ('{"m": {"input": 1, "output": 1, "long_prompt": {"input": 2, "output": 2}}}',
     ["/m/long_prompt/above_tokens: expected an integer > 0"]),
])
def test_a_broken_price_file_is_one_line_naming_the_setting_and_every_problem(tmp_path: Path, content: str,
                                                                             problems: list[str]):
    path = tmp_path / "prices.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_prices(path)
    message = str(caught.value)
    assert message.startswith(f"AGENTQ_LLM_PRICES={path}: ") and "\n" not in message
    for problem in problems:
        assert problem in message, message


def test_a_missing_price_file_is_named(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"AGENTQ_LLM_PRICES=.*nope\.json: cannot read the file"):
        load_prices(tmp_path / "nope.json")
