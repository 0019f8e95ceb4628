"""Typed settings, read once from `AGENTQ_*` environment variables by the shells and passed down.

This module is the one place agentq reads its environment: `load_settings()` for a process that was given no
settings, `Settings(...)` with keywords to override it (tests do).

Every setting is documented in `config/README.md`; keep the two in step.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_origin

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agentq.errors import ConfigurationError
from agentq.protocol.budgets import budget_problems
from agentq.protocol.limits import ModelLimits, limits_problems, parse_limits
from agentq.protocol.tenants import TenantLimits, parse_tenants, tenants_problems

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
ENV_PREFIX = "AGENTQ_"

_Item = TypeVar("_Item")
# A list setting: its environment value is read by `parse_list` (a JSON array or comma-separated), never
# decoded as JSON by pydantic-settings on its own.
EnvList = Annotated[list[_Item], NoDecode]


def parse_list(variable: str, raw: str) -> list[str]:
    """The items of a list setting's environment value: a JSON array of strings (`["a", "b"]`) or
    comma-separated (`a,b`). Items are stripped and empty ones dropped, in both forms.

    A value that starts with `[` is always read as JSON: one that is not a JSON array of strings raises
    `ConfigurationError` naming `variable` and the accepted forms (never the value: it may hold a token).
    """
    text = raw.strip()
    items = _json_strings(text, variable) if text.startswith("[") else text.split(",")
    return [item.strip() for item in items if item.strip()]


def _json_strings(text: str, variable: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON ({error.msg} at column {error.colno})"
    else:
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        problem = "is not a JSON array of strings"
    raise ConfigurationError(f"{variable} starts with '[' but {problem}; give a JSON array of strings "
                             f"({variable}='[\"a\", \"b\"]') or comma-separated values ({variable}=a,b)")


class Settings(BaseSettings):
    """agentq's settings. Construct with keywords to override the environment (tests do)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # the state store: `redis://`, a Sentinel group `redis+sentinel://h1:26379,h2:26379/<master>/<db>`, or with
    # `redis_cluster` any node of a Redis Cluster; the broker: Redis (also through Sentinel) or RabbitMQ `amqp://`
    redis_url: str = DEFAULT_REDIS_URL
    redis_cluster: bool = False
    broker_url: str | None = Field(default=None, description="Celery broker; defaults to redis_url")
    namespace: str = Field(default="agentq", pattern=r"^[A-Za-z0-9_.-]+$")

    job_ttl_s: int = Field(default=7 * 24 * 3600, gt=0)
    max_job_bytes: int = Field(default=1_000_000, gt=0)
    max_calls: int = Field(default=10_000, gt=0)
    max_depth: int = Field(default=64, ge=2, le=500)  # nesting of a submitted job's JSON
    max_result_bytes: int = Field(default=1_000_000, gt=0)  # an activity's result, as JSON
    default_timeout_s: float = Field(default=900.0, gt=0)  # for activities that declare no timeout

    engine_queue: str = "agentq.engine"
    visibility_timeout_s: float = Field(default=3600.0, gt=0)
    lease_s: float = Field(default=30.0, gt=0)
    heartbeat_s: float = Field(default=10.0, gt=0)
    prefetch_multiplier: int = Field(default=1, ge=1)  # with late acks: a worker holds only what it runs
    # admission of ready calls (docs/tenants.md): calls admitted and not ended per activity queue; 0: the slots of the
    # live workers serving the queue plus `admission_prefetch`
    admission_window: int = Field(default=0, ge=0)
    admission_prefetch: int = Field(default=16, ge=1)
    # an admitted call still ready (never claimed) this long after its admission is published again
    admission_republish_s: float = Field(default=300.0, gt=0)
    # `agentq dispatcher`: the threads of its engine pool, each holding one engine task (a tick or a latent call
    # waiting on its model stream); a waiting stream holds a thread, not a process (one dispatcher holds 1,000
    # streams: docs/design/dispatcher.md)
    engine_concurrency: int = Field(default=1024, ge=1)
    # connections of one process to the state store (one server or a Sentinel group's master; per node of a
    # cluster): beyond it a command waits for a free connection, it does not fail
    redis_max_connections: int = Field(default=128, ge=1)
    # a warm shutdown (SIGTERM) lets running calls finish this long, then hands the rest back to the broker
    shutdown_grace_s: float = Field(default=900.0, ge=0)
    task_events: bool = True  # Celery task events (Flower, `celery events`): sent by workers and producers
    # Celery remote control obeyed by workers: `read` (inspection, Flower, revoke), `all` (also shutdown, pools,
    # consumers, limits; see runtime/remote_control.py)
    remote_control: str = Field(default="read", pattern=r"^(read|all)$")
    # Redis broker: how often live workers look for the unacknowledged tasks of dead ones (None: a quarter of
    # the visibility timeout, between 0.5 and 60 s)
    unacked_restore_s: float | None = Field(default=None, gt=0)

    # outages and poison messages: a worker retries a store step this long while the store is unreachable (an
    # activity's result is held meanwhile), and a call fails once the process running it died on this many
    # deliveries (0: no limit)
    store_retry_s: float = Field(default=120.0, ge=0)
    max_deliveries: int = Field(default=5, ge=0)

    # list settings (`EnvList`): a JSON array or comma-separated in the environment, see `parse_list`
    tools_dirs: EnvList[Path] = Field(default_factory=list)

    # the LLM (docs/protocol.md#what-the-model-is-sent): the provider is `anthropic` (the default when ANTHROPIC_API_KEY
    # is set) or `replay:<file>`; `llm_record` writes a replay file from real runs
    llm: str | None = None
    # the Anthropic API key, read from ANTHROPIC_API_KEY (the SDK's own variable, no AGENTQ_ prefix)
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="anthropic_api_key", repr=False)
    llm_record: Path | None = None
    llm_timeout_s: float = Field(default=600.0, gt=0)
    model: str = "claude-sonnet-4-6"  # a job's `options.model` overrides it
    llm_max_attempts: int = Field(default=5, ge=1)  # per request: 429, 5xx, overload, a broken stream
    llm_max_tokens: int = Field(default=8192, gt=0)
    # model governance (docs/rate-limits.md#cost): a JSON price file whose entries replace the shipped prices model by
    # model (agentq/llm/prices.py; it seeds the fleet's `llm_prices`, docs/config.md), and the budget of jobs
    # that name none (JSON `{"max_cost_usd": 5, ...}`, as `options.budget`)
    llm_prices: Path | None = None
    default_budget: Annotated[dict[str, Any] | None, NoDecode] = None
    # fleet-wide model rate limits: JSON `{"<model>" | "*": {"requests_per_minute": N, "input_tokens_per_minute":
    # N, "output_tokens_per_minute": N}}`, any subset (agentq/protocol/limits.py); seeds the fleet's `llm_limits`
    llm_limits: Annotated[dict[str, Any] | None, NoDecode] = None
    # the batch lane (`options.priority: "batch"`, docs/batch.md): requests wait in Redis until this many are due or the
    # oldest is this old, then go to the Message Batches API as one batch; dispatchers poll open batches this often
    batch_max_requests: int = Field(default=10_000, ge=1, le=100_000)
    batch_max_bytes: int = Field(default=200_000_000, ge=1_000, le=256_000_000)
    batch_max_age_s: float = Field(default=60.0, ge=0)
    batch_poll_s: float = Field(default=30.0, gt=0)
    timer_poll_s: float = Field(default=0.25, gt=0, le=1)  # how often a dispatcher takes the due waits (docs/waits.md)
    # tenants' limits (docs/tenants.md): JSON, or `@/path` of a JSON file, `{"<tenant>": {"jobs_per_minute": N, ...}}`;
    # this and the other fleet settings (llm_prices, llm_limits, webhook_allowlist) only seed the store's values
    # (`agentq config`, agentq/runtime/fleet_config.py)
    tenants: Annotated[dict[str, Any] | None, NoDecode] = None

    # activities (docs/protocol.md#activities): an activity stays known this long after its last announcement
    activity_memory_s: float = Field(default=7 * 24 * 3600, gt=0)

    # modules (docs/protocol.md#modules): saved requests by name under these folders (the packaged examples come last);
    # http(s) module URLs only for these hosts; nesting depth of module calls
    module_dirs: EnvList[Path] = Field(default_factory=lambda: [Path("config/modules")])
    module_url_allowlist: EnvList[str] = Field(default_factory=list)
    max_module_depth: int = Field(default=4, ge=1, le=32)

    # webhooks (docs/webhooks.md): the hosts deliveries may reach (names, `*.domain`, addresses, networks; see
    # agentq/webhooks/targets.py), the signing secret (`whsec_<base64>` or any string; several separated by spaces
    # while one is rotated: each signs), how long a delivery is retried (exponential backoff from
    # `webhook_backoff_s`, each wait at most an hour), an attempt's timeout, and how often processes look for due work
    webhook_allowlist: EnvList[str] = Field(default_factory=list)
    webhook_secret: SecretStr | None = Field(default=None, repr=False)
    webhook_retry_s: float = Field(default=24 * 3600.0, gt=0)
    webhook_backoff_s: float = Field(default=5.0, gt=0)
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    webhook_poll_s: float = Field(default=1.0, gt=0)
    webhook_concurrency: int = Field(default=4, ge=1)  # attempts one process makes at once

    # the HTTP API (README.md#the-http-api-and-the-web-page): bearer tokens in AGENTQ_API_TOKENS (none: `agentq api`
    # makes one)
    api_tokens: EnvList[str] = Field(default_factory=list, repr=False)
    api_sse_retry_ms: int = Field(default=2000, ge=0)  # the reconnection delay an event stream advises

    # metrics (docs/metrics.md): where workers keep their Prometheus counters (one folder per host inside; default
    # `<temp>/agentq-metrics-<uid>-<fleet>`, `<fleet>` a hash of broker, store and namespace: metrics/files.py), and
    # the bearer token `agentq metrics` asks for
    metrics_dir: Path | None = None
    # prometheus_client's own variable PROMETHEUS_MULTIPROC_DIR (no AGENTQ_ prefix): set by the operator, the
    # folder worker processes count into, used as it is (see metrics/files.py)
    prometheus_multiproc_dir: Path | None = Field(default=None, validation_alias="prometheus_multiproc_dir")
    metrics_token: str | None = Field(default=None, repr=False)

    # OpenTelemetry traces (docs/tracing.md, the `otel` extra): the standard OTEL_* variables (no AGENTQ_ prefix) turn
    # them on; without an exporter or endpoint among them no provider is installed and nothing is sent. The SDK
    # reads them (and the exporter's other OTEL_EXPORTER_OTLP_* variables) itself; agentq reads them to decide.
    otel_traces_exporter: str | None = Field(default=None, validation_alias="otel_traces_exporter")
    otel_exporter_otlp_endpoint: str | None = Field(default=None, validation_alias="otel_exporter_otlp_endpoint")
    otel_exporter_otlp_traces_endpoint: str | None = Field(default=None,
                                                           validation_alias="otel_exporter_otlp_traces_endpoint")
    otel_exporter_otlp_protocol: str | None = Field(default=None, validation_alias="otel_exporter_otlp_protocol")
    otel_service_name: str | None = Field(default=None, validation_alias="otel_service_name")
    # parameter values of calls as span attributes (never the ones a tool marks x-sensitive)
    otel_capture_params: bool = False

    @field_validator("prometheus_multiproc_dir", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:
        """An empty variable is an unset one (prometheus_client reads it so)."""
        return None if value == "" else value

    @field_validator("webhook_secret")
    @classmethod
    def _whsec_is_base64(cls, value: SecretStr | None) -> SecretStr | None:
        """A `whsec_` secret (Standard Webhooks' form) must be base64 after its prefix: checked at start, never
        shown."""
        for item in (value.get_secret_value() if value is not None else "").split():
            if item.startswith("whsec_"):
                try:
                    base64.b64decode(item[len("whsec_"):], validate=True)
                except binascii.Error:
                    raise ValueError("a whsec_ secret must be base64 after its prefix") from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _parse_lists(cls, values: Any) -> Any:
        """Every list setting given as a string goes through `parse_list`; all broken ones are named at once."""
        if not isinstance(values, dict):
            return values
        parsed, problems = dict(values), []
        for name in cls._list_settings():
            raw = values.get(name)
            if isinstance(raw, str):
                try:
                    parsed[name] = parse_list(f"{ENV_PREFIX}{name.upper()}", raw)
                except ConfigurationError as error:
                    problems.append(str(error))
        if problems:
            raise ConfigurationError("invalid settings: " + "; ".join(problems))
        return parsed

    @model_validator(mode="before")
    @classmethod
    def _parse_json_settings(cls, values: Any) -> Any:
        """The JSON settings (`_JSON_SETTINGS`): unset or set empty, none; a broken one is named with every problem."""
        if not isinstance(values, dict):
            return values
        parsed = dict(values)
        for name, (problems_of, from_file) in _JSON_SETTINGS.items():
            raw = parsed.get(name)
            if raw is None or raw == "":
                parsed.pop(name, None)
                continue
            variable = f"{ENV_PREFIX}{name.upper()}"
            if isinstance(raw, str):
                raw = _json_setting(variable, _file_text(variable, raw[1:]) if from_file and raw.startswith("@")
                                    else raw)
            problems = problems_of(raw)
            if problems:
                raise ConfigurationError(f"invalid settings: {variable}: " + "; ".join(str(p) for p in problems))
            parsed[name] = raw
        return parsed

    @property
    def tenant_limits(self) -> dict[str, TenantLimits]:
        """`AGENTQ_TENANTS` by tenant."""
        return parse_tenants(self.tenants or {})

    @property
    def model_limits(self) -> dict[str, ModelLimits]:
        """`AGENTQ_LLM_LIMITS` by model (`"*"` for every other model)."""
        return parse_limits(self.llm_limits or {})

    @classmethod
    def _list_settings(cls) -> list[str]:
        return [name for name, field in cls.model_fields.items() if get_origin(field.annotation) is list]

    @property
    def redis_url_is_set(self) -> bool:
        """True when the Redis URL was given (environment or keyword), not the default."""
        return "redis_url" in self.model_fields_set

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or self.redis_url

    @property
    def tracing_requested(self) -> bool:
        """The OTEL_* variables ask for traces: an exporter other than `none`, or an OTLP endpoint."""
        exporter = (self.otel_traces_exporter or "").strip().lower()
        if exporter:
            return exporter != "none"
        return bool(self.otel_exporter_otlp_endpoint or self.otel_exporter_otlp_traces_endpoint)


def load_settings() -> Settings:
    """This process's settings, read from the environment; a `ConfigurationError` names each invalid variable
    (never its value: it may hold a token)."""
    try:
        return Settings()
    except ValidationError as error:
        problems = "; ".join(_variable(e["loc"]) + f": {e['msg']}" for e in error.errors())
        raise ConfigurationError(f"invalid settings: {problems}") from None


def _variable(loc: tuple[int | str, ...]) -> str:
    name = "_".join(str(part) for part in loc)
    return name.upper() if name in _UNPREFIXED else f"{ENV_PREFIX}{name.upper()}"


_UNPREFIXED = frozenset({"anthropic_api_key", "prometheus_multiproc_dir", "otel_traces_exporter",
                         "otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint",
                         "otel_exporter_otlp_protocol", "otel_service_name"})  # other tools' own variables



# the JSON settings: field -> (every problem of a value, whether `@/path` of a file holding it is taken too)
_JSON_SETTINGS: dict[str, tuple[Callable[[Any], Sequence[object]], bool]] = {
    "default_budget": (lambda raw: budget_problems(raw, ""), False),  # AGENTQ_DEFAULT_BUDGET, as options.budget
    "llm_limits": (limits_problems, False),  # AGENTQ_LLM_LIMITS
    "tenants": (tenants_problems, True),  # AGENTQ_TENANTS
}

def _file_text(variable: str, path: str) -> str:
    """The text of the file a setting names (`@/path`)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(f"invalid settings: {variable}: cannot read {path}: "
                                 f"{error.strerror or error}") from None


def _json_setting(variable: str, text: str) -> Any:
    """A JSON setting's value; one line naming the variable and where the JSON broke when it does not parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}" if error.lineno > 1 else f"column {error.colno}"
        raise ConfigurationError(f"invalid settings: {variable} is not valid JSON ({error.msg} at {where})") from None
