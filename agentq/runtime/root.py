"""The composition root: Settings → stores, Celery app, routing, dispatcher, job service, module library, and for
a process that runs calls the LLM, the executor and its tasks.

This is the one place parts are built and wired, each once per process from the settings it is given; the
shells (`Client`, `AsyncClient`, the CLI, the HTTP API, embedded mode, workers) start here and none builds a part
itself. Registries come in explicitly: a worker gets the activities and tools it serves from its caller (`agentq
worker -m` passes the ones its modules filled), never from a module-level default.

    connect(settings)                 Parts: what a process needs to submit and follow jobs
    Runtime(settings=..., activities=..., tools=...)
                                      Parts plus the LLM and the executor, and the tasks a worker serves
    open_store                        the state store alone (`store.aio.open_async_store`: its asyncio view)

It sits above the engine and the Celery glue (`runtime/app.py`), which never import it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agentq import telemetry
from agentq.engine.batch import BatchLane, BatchPoller, BatchRound, Lane, ReplayLane, TaskWaker
from agentq.engine.budget import BudgetGate
from agentq.engine.executor import Executor
from agentq.engine.hooks import CallMetrics, Hook, Hooks
from agentq.engine.limits import ModelLimiter
from agentq.engine.modules import ModuleLibrary
from agentq.engine.outages import PatientStore
from agentq.engine.rollout_stats import RolloutStats
from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.errors import LLMError
from agentq.llm.batch import BatchClient
from agentq.llm.factory import api_key, create_llm, recorder, replay_provider, uses_anthropic
from agentq.llm.prices import LivePrices, PriceTable, load_prices, priced
from agentq.llm.sdk import make_client
from agentq.metrics import Metrics, metered
from agentq.metrics.llm import count_request
from agentq.metrics.tenants import TenantLabels
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.admission import Admission
from agentq.runtime.app import Dispatcher, create_app, register_activity_tasks, register_engine_tasks
from agentq.runtime.fleet_config import FleetConfig, seeds
from agentq.runtime.pushed import PushedTasks, broker_is_store
from agentq.runtime.redis_transport import STORE_RECOVERS_CALLS
from agentq.runtime.rollouts import Rollouts
from agentq.runtime.schedules import Schedules
from agentq.runtime.service import JobService
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.batches import BatchQueue
from agentq.store.companions import batch_queue, config_store, rollout_store, schedule_store, sync_reads
from agentq.store.contracts import (
    BudgetStore,
    CallStore,
    FleetPart,
    LeaseStore,
    LimitStore,
    StatsStore,
    TenantLimitStore,
    WebhookStore,
)
from agentq.store.fleet import RedisFleet
from agentq.store.fleet_stats import RedisStats
from agentq.store.limits import RedisLimits
from agentq.store.state import StateStore
from agentq.store.sync_reads import SyncReads
from agentq.store.tenants import RedisTenants
from agentq.store.webhooks import WebhookKeys
from agentq.telemetry import jobs as job_traces

if TYPE_CHECKING:
    from agentq.llm.base import LLM

log = logging.getLogger("agentq.runtime")


@dataclass
class Parts:
    """What a process needs to submit, follow and run jobs against one deployment."""

    settings: Settings
    store: Store  # a job's state machine: the job-step store, for the parts that take several of its contracts
    # its parts handed alone to the engine's parts that take that one contract (`store/state.py`)
    budgets: BudgetStore  # `store.jobs`: the budget gate's
    leases: LeaseStore  # `store.calls`: the lease keeper's
    calls: CallStore  # `store.calls`: the batch lane's task waker's
    # the store's fleet-wide parts, each over the store's connection (`store/part.py`; a new part: a field here and
    # its construction in `connect`)
    fleet: FleetPart  # workers, activities, tools, the task-signing key, node names
    limits: LimitStore  # the models' rate limits and learned context windows
    tenants: TenantLimitStore  # the tenants' job limits
    stats: StatsStore  # the metrics' scrape-time figures
    webhooks: WebhookStore  # watched jobs and their webhook deliveries (docs/webhooks.md)
    reads: SyncReads  # a job's status, record and events over the store's connection (the client's reads)
    app: Any  # the Celery app
    routing: Routing
    dispatcher: Dispatcher
    jobs: JobService
    modules: ModuleLibrary
    metrics: Metrics  # this process's counters, rendered by `metrics.render_metrics(parts)`
    batches: BatchQueue  # the batch lane's state in the store (`store/batches.py`)
    rollouts: Rollouts  # the tools' rollout rules and their report (docs/rollouts.md)
    # the `tenant` labels of the counters (`metrics/tenants.py`): the fleet's tenants and the tokens files'
    tenant_labels: TenantLabels
    # the fleet's shared settings (tenants, prices, model limits, webhook allowlist), read once per heartbeat
    config: FleetConfig
    schedules: Schedules  # the schedules (docs/schedules.md), as an admin sees them; fired by `schedule_loop`

    def close(self) -> None:
        try:
            if self.dispatcher.admission is not None:
                self.dispatcher.admission.close()
            self.store.close()
        finally:
            self.app.close()


def open_store(settings: Settings) -> StateStore:
    """The state store alone, for processes that need nothing else (`agentq healthcheck`, run every few
    seconds by container runtimes, stays light: no Celery app)."""
    return StateStore(settings.redis_url, cluster=settings.redis_cluster, namespace=settings.namespace,
                      max_connections=settings.redis_max_connections)


def open_fleet(store: StateStore) -> FleetPart:
    """The fleet part over `store`'s connection (`agentq healthcheck` reads the announcements with it)."""
    return RedisFleet(store)


def connect(settings: Settings, *, tools: ToolRegistry | None = None, activities: ActivityRegistry | None = None,
            local_activities_are_live: bool = False, metrics: Metrics | None = None) -> Parts:
    """Wire the parts for `settings`. Nothing connects yet: Redis and the broker are reached on first use.

    `tools` are tool schemas this process knows besides those the fleet published (a submitter's `-m`
    modules, `--tools` folders); `activities` the ones it serves; `metrics` the counters this process counts
    into (new ones unless given: parts that share them count into one registry)."""
    metrics = metrics if metrics is not None else Metrics()
    telemetry.configure(settings)  # OpenTelemetry traces when the OTEL_* variables ask for them (docs/tracing.md)
    store = open_store(settings)
    job_traces.bind(store.jobs)  # where the first process tracing a job nobody traced yet stores its context
    app = create_app(settings)
    fleet = open_fleet(store)
    limits, tenants, stats = RedisLimits(store), RedisTenants(store), RedisStats(store)
    webhooks = WebhookKeys(store, keep_s=settings.webhook_retry_s + settings.job_ttl_s)
    rollout_rules = rollout_store(store, ttl_s=settings.heartbeat_s)
    environment = seeds(settings)  # this process's AGENTQ_* values of the shared settings: they seed unset ones
    config = FleetConfig(config_store(store, ttl_s=settings.heartbeat_s, seeds=environment), environment)
    routing = Routing.from_settings(settings, rules=rollout_rules.rules)
    admission = Admission(store, settings, config.tenant_limits, fleet=fleet)
    dispatcher = Dispatcher(app, routing, TaskSigner(fleet.task_signing_key), admission)
    dispatcher.start_timeouts = store.job_timers.set_start_timeouts  # docs/waits.md#start-timeouts
    admission.publisher = dispatcher.publish  # places of ended calls are given back in groups, off the call's path
    admission.sent_again = metrics.count_sent_again  # a dead worker's call sent again counts as a redelivery
    if broker_is_store(settings, app, store):
        admission.pushed = PushedTasks(dispatcher)  # the step pushes the tasks it admits
        if settings.prefetch_multiplier == 1:  # a task is taken only for a free slot: never held long unclaimed
            # the admission's sweep sends a call's task again when its process died: it is not noted unacknowledged
            app.conf.broker_transport_options = {**app.conf.broker_transport_options, STORE_RECOVERS_CALLS: True}
    modules = ModuleLibrary.from_settings(settings)
    tenant_labels = TenantLabels.of(settings, config.tenant_limits)
    jobs = JobService(store, dispatcher, settings=settings, routing=routing, tools=tools, activities=activities,
                      local_activities_are_live=local_activities_are_live, module_loader=modules.loader,
                      hooks=Hooks([CallMetrics(metrics, tenant_labels.label)]),
                      webhooks=webhooks, config=config, fleet=fleet, tenants=tenants)
    return Parts(settings=settings, store=store, budgets=store.jobs, leases=store.calls, calls=store.calls,
                 fleet=fleet, limits=limits, tenants=tenants, stats=stats, webhooks=webhooks, reads=sync_reads(store),
                 app=app, routing=routing, dispatcher=dispatcher, jobs=jobs, modules=modules, metrics=metrics,
                 batches=batch_queue(store), rollouts=Rollouts(rollout_rules, jobs), tenant_labels=tenant_labels,
                 config=config, schedules=Schedules(schedule_store(store), jobs))


def open_llm(settings: Settings, metrics: Metrics, prices: PriceTable | None = None) -> LLM | None:
    """The LLM `settings` ask for (None: none configured), its answers priced by `prices` (default: the price
    table of `AGENTQ_LLM_PRICES`) and counted into `metrics`."""
    table = prices if prices is not None else load_prices(settings.llm_prices)
    return metered(priced(create_llm(settings), table), metrics)


def create_executor(parts: Parts, activities: ActivityRegistry, *, llm: LLM | None,
                    prices: PriceTable | None = None) -> Executor:
    """The executor running calls of `activities` over `parts`; its hooks count calls into the metrics and hold
    every model request to its job's budget (costed with `prices`, default: the fleet's prices as read now), then
    to its model's fleet-wide rate limits (the fleet's `llm_limits`, read once per heartbeat)."""
    settings = parts.settings
    table = prices if prices is not None else LivePrices(parts.config.prices)
    budget = BudgetGate(cast(BudgetStore, PatientStore(parts.budgets, settings.store_retry_s)), table)
    # after the budget: a refused request takes nothing
    limiter = ModelLimiter(PatientStore(parts.limits, settings.store_retry_s), parts.config.model_limits)
    counted = functools.partial(count_request, parts.metrics)
    saved = recorder(settings)
    record = saved.record if saved is not None else None
    lane: Lane | None = None
    if uses_anthropic(settings):
        lane = BatchLane(parts.batches, table, max_attempts=settings.llm_max_attempts,
                         recheck_s=max(settings.batch_poll_s * 4, 10.0), counted=counted, record=record)
    elif (replay := replay_provider(settings)) is not None:  # no Message Batches API: the lane answers from the replay
        lane = ReplayLane(replay, table, counted=counted, record=record)
    return Executor(parts.store, activities, parts.dispatcher, settings=settings, llm=llm, routing=parts.routing,
                    known_activities=parts.jobs.known_activities_for, modules=parts.modules,
                    submit_child=parts.jobs.submit_child, signer=parts.dispatcher.signer,
                    hooks=Hooks([CallMetrics(parts.metrics, parts.tenant_labels.label),
                                 RolloutStats(parts.rollouts.store), budget, limiter, *tracing_hooks()]), batch=lane,
                    limits=parts.limits, leases=parts.leases)


def tracing_hooks() -> list[Hook]:
    """A `chat {model}` span per model request sent, while tracing is on (last: it sees only what is sent)."""
    if not telemetry.enabled():
        return []
    from agentq.telemetry.hook import TracingHook

    return [TracingHook()]


def batch_poller(parts: Parts) -> BatchPoller | None:
    """The batch lane's round for a dispatcher (`engine/batch.py`): None unless the provider is Anthropic."""
    settings = parts.settings
    if not uses_anthropic(settings):
        return None
    queue = parts.batches

    def make_round() -> BatchRound:
        client = make_client(api_key=api_key(settings), base_url=None, timeout_s=settings.llm_timeout_s,
                             max_retries=2, connections=4)
        return BatchRound(queue, BatchClient(client), TaskWaker(parts.calls, parts.dispatcher),
                          max_requests=settings.batch_max_requests, max_bytes=settings.batch_max_bytes,
                          max_age_s=settings.batch_max_age_s)

    return BatchPoller(queue, make_round, interval_s=settings.batch_poll_s)


@dataclass
class Runtime:
    """One process's agentq runtime: the parts (`connect`), the LLM and the executor for the activities it
    serves, and the registration of the tasks this process serves."""

    settings: Settings
    activities: ActivityRegistry
    tools: ToolRegistry
    local_activities_are_live: bool = False  # embedded mode: this process's activities count as live
    metrics: Metrics | None = None  # the counters to count into (default: new ones, `parts.metrics`)
    parts: Parts = field(init=False)
    executor: Executor = field(init=False)

    def __post_init__(self) -> None:
        self.parts = connect(self.settings, tools=self.tools, activities=self.activities,
                             local_activities_are_live=self.local_activities_are_live, metrics=self.metrics)
        try:
            prices = LivePrices(self.parts.config.prices)  # the fleet's, as read now
            llm = open_llm(self.settings, self.parts.metrics, prices)
            self.executor = create_executor(self.parts, self.activities, llm=llm, prices=prices)
        except BaseException:
            self.parts.close()
            raise

    @property
    def app(self) -> Any:
        return self.parts.app

    @property
    def store(self) -> Store:
        return self.parts.store

    @property
    def dispatcher(self) -> Dispatcher:
        return self.parts.dispatcher

    @property
    def service(self) -> JobService:
        return self.parts.jobs

    @property
    def routing(self) -> Routing:
        return self.parts.routing

    def register_activity_tasks(self) -> list[str]:
        """One task per activity, named `agentq.activity.<name>`; returns the queues to consume."""
        return register_activity_tasks(self.app, self.executor, self.activities, self.routing,
                                       store_retry_s=self.settings.store_retry_s, redeliveries=self.parts.metrics)

    def register_engine_tasks(self) -> list[str]:
        """Engine tasks: submission by task name, latent and module calls, agent ticks."""
        return register_engine_tasks(self.app, self.executor, self.service, self.routing,
                                     redeliveries=self.parts.metrics)

    def prepare_llm(self) -> None:
        """Load the model provider's client before the first request (see `AnthropicLLM.prepare`)."""
        prepare = getattr(self.executor.llm, "prepare", None)
        if prepare is None:
            return
        try:
            prepare()
        except LLMError as error:  # the requests will fail with it: their jobs say so
            log.warning("the model provider is not ready: %s", error)

    def batch_poller(self) -> BatchPoller | None:
        """The batch lane's round for this process when it is a dispatcher (None: the provider has no batches)."""
        return batch_poller(self.parts)

    def close(self) -> None:
        self.executor.leases.stop()
        self.parts.close()
