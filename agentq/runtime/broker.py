"""The Celery broker of a deployment: its URL in kombu's terms and its transport options
(docs/architecture.md#runtime--the-only-place-that-knows-celery, docs/monitoring.md).

- Redis (`redis://`, `rediss://`, `unix://`): the Redis transport options of `app.broker_transport_options`
  (visibility timeout, the sweep for a dead worker's unacknowledged tasks).
- Redis through Sentinel: the same URL form as the state store, `redis+sentinel://h1:26379,h2:26379/<master>/<db>`;
  kombu's sentinel transport gets the sentinels as `sentinel://h1:26379;sentinel://h2:26379/<db>` and the
  master's name as the `master_name` transport option, plus the Redis options.
- RabbitMQ (`amqp://`, `amqps://`, `pyamqp://`): publisher confirms, so a call's task is on the broker before
  the dispatcher moves on.
- A Redis Cluster is never the broker: kombu has no transport for it. With a cluster state store
  (`AGENTQ_REDIS_CLUSTER=true`) `AGENTQ_BROKER_URL` must name a plain Redis or RabbitMQ; `broker_of` refuses a
  broker URL that is missing or names the store's node, and `refuse_cluster_broker` (run by every worker as it
  starts) asks a Redis broker whether it is a cluster node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from agentq.errors import ConfigurationError
from agentq.settings import Settings
from agentq.store.connect import is_sentinel_url, parse_sentinel_url, redact_password, scheme_of

REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+socket"})
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp", "librabbitmq"})
NO_CLUSTER_BROKER = ("kombu has no Redis Cluster transport, so with AGENTQ_REDIS_CLUSTER=true set AGENTQ_BROKER_URL "
                     "to a plain Redis (redis://host:6379/0, or redis+sentinel://...) or to RabbitMQ (amqp://...)")


@dataclass(frozen=True)
class Broker:
    """What the Celery app is given: kombu's broker URL and transport options."""

    url: str
    transport_options: dict[str, Any] = field(default_factory=dict)
    kind: str = "redis"  # redis | sentinel | amqp | other


def broker_of(settings: Settings, *, redis_options: dict[str, Any]) -> Broker:
    """The broker of `settings` (`AGENTQ_BROKER_URL`, else the state store's URL); `redis_options` are the
    transport options of a Redis broker. A `ConfigurationError` names what cannot work."""
    url = settings.effective_broker_url
    scheme = scheme_of(url)
    if settings.redis_cluster and (settings.broker_url is None or _same_server(url, settings.redis_url)):
        raise ConfigurationError(f"the state store is a Redis Cluster and the broker would be its node "
                                 f"{redact_password(url)!r}: {NO_CLUSTER_BROKER}")
    if scheme == "sentinel":
        raise ConfigurationError(
            f"broker URL {redact_password(url)!r}: name a Sentinel group with agentq's form "
            f"redis+sentinel://host:26379[,host:26379...]/<master name>/<db> (it carries the master's name)")
    if is_sentinel_url(url):
        return _sentinel_broker(url, redis_options)
    if scheme in REDIS_SCHEMES:
        return Broker(url, dict(redis_options), kind="redis")
    if scheme in AMQP_SCHEMES:
        return Broker(url, {"confirm_publish": True}, kind="amqp")
    return Broker(url, {}, kind="other")


def _sentinel_broker(url: str, redis_options: dict[str, Any]) -> Broker:
    parsed = parse_sentinel_url(url)
    auth = ""
    if parsed.password is not None or parsed.username is not None:
        auth = f"{quote(parsed.username or '', safe='')}:{quote(parsed.password or '', safe='')}@"
    kombu_url = ";".join(f"sentinel://{auth}{_host(host)}:{port}/{parsed.db}" for host, port in parsed.sentinels)
    options: dict[str, Any] = {**redis_options, "master_name": parsed.master}
    if parsed.sentinel_password:
        options["sentinel_kwargs"] = {"password": parsed.sentinel_password}
    return Broker(kombu_url, options, kind="sentinel")


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _same_server(a: str, b: str) -> bool:
    """Both URLs name the same Redis host and port."""
    if scheme_of(a) not in REDIS_SCHEMES or scheme_of(b) not in REDIS_SCHEMES:
        return False
    try:
        first, second = urlsplit(a), urlsplit(b)
        return (first.hostname, first.port or 6379) == (second.hostname, second.port or 6379)
    except ValueError:
        return False


def refuse_cluster_broker(settings: Settings, *, timeout_s: float = 5.0) -> None:
    """With a cluster state store, ask a Redis broker whether it is a cluster node (`INFO cluster`) and refuse
    it with a `ConfigurationError`; nothing to do otherwise, and a broker that does not answer is left to Celery's
    own connection retries."""
    if not settings.redis_cluster or scheme_of(settings.effective_broker_url) not in REDIS_SCHEMES:
        return
    import redis

    client = redis.Redis.from_url(settings.effective_broker_url, socket_connect_timeout=timeout_s,
                                  socket_timeout=timeout_s)
    try:
        enabled = client.info("cluster").get("cluster_enabled")
    except redis.RedisError:
        return
    finally:
        client.close()
    if str(enabled) == "1":
        raise ConfigurationError(f"the broker {redact_password(settings.effective_broker_url)!r} is a Redis "
                                 f"Cluster node: {NO_CLUSTER_BROKER}")
