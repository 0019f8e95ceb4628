"""The store contract for budgets (budget.lua): reserve before a model request, settle after, asserted the same on
`StateStore` on the session's private Redis and on a Redis Cluster."""

from __future__ import annotations

import threading

from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.store.replies import BudgetGranted, BudgetRefused
from tests.runtime.conftest import Backend
from tests.runtime.test_store_contract import submit


def ask(input_tokens: int = 1000, output_tokens: int = 4096, *, input_nanousd: int = 0, rate: float = 0.0,
        least: int = 256) -> BudgetAsk:
    return BudgetAsk(input_tokens, input_nanousd, output_tokens, least, rate)


def test_a_reservation_is_granted_within_the_limits_and_replayed_with_its_key(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    budget = Budget(max_requests=5, max_input_tokens=10_000, max_output_tokens=10_000)
    assert store.reserve_budget(plan.id, "k1", budget=budget, ask=ask()) == BudgetGranted(4096)
    # the same key again (a reply lost to an outage): the same grant, nothing held twice
    assert store.reserve_budget(plan.id, "k1", budget=budget, ask=ask()) == BudgetGranted(4096)
    # the output left is what the next request may write: 10000 - 4096 held
    assert store.reserve_budget(plan.id, "k2", budget=budget, ask=ask(output_tokens=8192)) == BudgetGranted(5904)


def test_settling_turns_what_was_held_into_what_was_spent_once(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    budget = Budget(max_output_tokens=5000)
    assert store.reserve_budget(plan.id, "k1", budget=budget, ask=ask(output_tokens=4000)) == BudgetGranted(4000)
    assert store.reserve_budget(plan.id, "k2", budget=budget, ask=ask(output_tokens=4000)) == BudgetGranted(1000)
    assert store.settle_budget(plan.id, "k1", Spend(requests=1, input_tokens=900, output_tokens=300))
    assert not store.settle_budget(plan.id, "k1", Spend(requests=1, input_tokens=900, output_tokens=300))  # once
    # 300 spent + 1000 held by k2: 3700 left
    assert store.reserve_budget(plan.id, "k3", budget=budget, ask=ask(output_tokens=4000)) == BudgetGranted(3700)
    assert store.settle_budget(plan.id, "k2", Spend())  # k2 failed: it spent nothing, its hold is released
    assert store.settle_budget(plan.id, "k3", Spend(requests=1, output_tokens=4000))
    assert store.reserve_budget(plan.id, "k4", budget=budget, ask=ask(output_tokens=4000)) == BudgetGranted(700)


def test_each_limit_refuses_the_request_that_would_cross_it_and_names_itself(backend: Backend):
    store = backend.store
    cases = [
        (Budget(max_requests=1), ask(), "max_requests: 1 of 1 model requests made or in flight"),
        (Budget(max_input_tokens=1500), ask(input_tokens=1000),
         "max_input_tokens: 1000 of 1500 input tokens used or held; the next request needs about 1000"),
        (Budget(max_output_tokens=4300), ask(output_tokens=4096),
         "max_output_tokens: 4096 of 4300 output tokens used or held; the next request needs at least 256"),
        # $0.01: 1000 input tokens at $3/MTok is 3,000,000 nano-dollars, 4096 output tokens at $15/MTok 61,440,000
        (Budget(max_cost_usd=0.07), ask(input_nanousd=3_000_000, rate=15_000.0),
         "max_cost_usd: $0.064440 of $0.070000 spent or held; the next request needs about $0.006840"),
    ]
    for budget, asked, message in cases:
        plan, _ = submit(store)
        assert isinstance(store.reserve_budget(plan.id, "a", budget=budget, ask=asked), BudgetGranted)
        assert store.reserve_budget(plan.id, "b", budget=budget, ask=asked) == BudgetRefused(message)
        # the budget stays exceeded: even a request that would fit now (its hold released) is refused
        assert store.settle_budget(plan.id, "a", Spend())
        assert store.reserve_budget(plan.id, "c", budget=budget, ask=ask(1, 256)) == BudgetRefused(message)


def test_the_cost_limit_lowers_what_a_request_may_write(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    budget = Budget(max_cost_usd=0.05)  # 50,000,000 nano-dollars
    granted = store.reserve_budget(plan.id, "k", budget=budget, ask=ask(input_nanousd=5_000_000, rate=15_000.0))
    assert granted == BudgetGranted(3000)  # (50M - 5M) / 15,000 per token


def test_a_gone_job_has_no_budget_left(backend: Backend):
    refused = backend.store.reserve_budget("job_gone", "k", budget=Budget(max_requests=3), ask=ask())
    assert isinstance(refused, BudgetRefused) and "gone" in refused.message


def test_concurrent_reservations_never_exceed_the_budget_together(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    budget = Budget(max_requests=7, max_output_tokens=1_000_000)
    replies: list[object] = []
    lock = threading.Lock()

    def reserve(i: int) -> None:
        reply = store.reserve_budget(plan.id, f"k{i}", budget=budget, ask=ask(output_tokens=1000))
        with lock:
            replies.append(reply)

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(isinstance(r, BudgetGranted) for r in replies) == 7
    assert sum(isinstance(r, BudgetRefused) for r in replies) == 13
