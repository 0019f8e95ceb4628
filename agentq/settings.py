"""Typed settings, read once from `AGENTQ_*` environment variables by the shells and passed down.

Every setting is documented in `config/README.md`; keep the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class Settings(BaseSettings):
    """agentq's settings. Construct with keywords to override the environment (tests do)."""

    model_config = SettingsConfigDict(env_prefix="AGENTQ_", extra="ignore", frozen=True)

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
    # a warm shutdown (SIGTERM) lets running calls finish this long, then hands the rest back to the broker
    shutdown_grace_s: float = Field(default=900.0, ge=0)
    task_events: bool = True  # Celery task events (Flower, `celery events`): sent by workers and producers
    # Redis broker: how often live workers look for the unacknowledged tasks of dead ones (None: a quarter of
    # the visibility timeout, between 0.5 and 60 s)
    unacked_restore_s: float | None = Field(default=None, gt=0)

    # outages and poison messages: a worker retries a store step this long while the store is unreachable (an
    # activity's result is held meanwhile), and a call fails once the process running it died on this many
    # deliveries (0: no limit)
    store_retry_s: float = Field(default=120.0, ge=0)
    max_deliveries: int = Field(default=5, ge=0)

    tools_dirs: list[Path] = Field(default_factory=list)

    # the LLM (SPEC §13): the provider is `anthropic` (the default when ANTHROPIC_API_KEY is set) or
    # `replay:<file>`; `llm_record` writes a replay file from real runs
    llm: str | None = None
    llm_record: Path | None = None
    llm_timeout_s: float = Field(default=600.0, gt=0)
    model: str = "claude-sonnet-4-6"  # a job's `options.model` overrides it
    llm_max_attempts: int = Field(default=5, ge=1)  # per request: 429, 5xx, overload, a broken stream
    llm_max_tokens: int = Field(default=8192, gt=0)

    # activities (SPEC §3): an activity stays known this long after its last announcement
    activity_memory_s: float = Field(default=7 * 24 * 3600, gt=0)

    # modules (SPEC §8): saved requests by name under these folders (the packaged examples come last);
    # http(s) module URLs only for these hosts; nesting depth of module calls
    module_dirs: list[Path] = Field(default_factory=lambda: [Path("config/modules")])
    module_url_allowlist: list[str] = Field(default_factory=list)
    max_module_depth: int = Field(default=4, ge=1, le=32)

    # the HTTP API (SPEC §14): bearer tokens, comma-separated in AGENTQ_API_TOKENS (none: `agentq api` makes one)
    api_tokens: Annotated[list[str], NoDecode] = Field(default_factory=list, repr=False)
    api_sse_retry_ms: int = Field(default=2000, ge=0)  # the reconnection delay an event stream advises

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [token.strip() for token in value.split(",") if token.strip()]
        return value

    # metrics (SPEC §15): where workers keep their Prometheus counters (one folder per host inside; default
    # `<temp>/agentq-metrics-<uid>`), and the bearer token `agentq metrics` asks for
    metrics_dir: Path | None = None
    metrics_token: str | None = Field(default=None, repr=False)

    @property
    def redis_url_is_set(self) -> bool:
        """True when the Redis URL was given (environment or keyword), not the default."""
        return "redis_url" in self.model_fields_set

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or self.redis_url
