"""The activity registry: handlers and their options (docs/protocol.md#activities, seed 000).

An activity is a Python callable ``handler(call, tool, context)``, sync or ``async``. It may declare fewer
parameters; :func:`invoke_handler` passes what it declares. How a handler is called is worked out once, at
registration (`handlers.py`), so a handler that cannot be called is refused then with :class:`RegistrationError`,
never at run time.

Registration only records an :class:`ActivitySpec` in the registry object: no broker, no Celery task, no
global side effect. The runtime builds Celery tasks from :meth:`ActivityRegistry.specs`.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard, TypeVar

from agentq.errors import DuplicateRegistrationError, RegistrationError
from agentq.protocol.handlers import is_async_handler, plan_invocation
from agentq.protocol.tools import is_valid_name, next_version, unknown_name

__all__ = ["Activity", "ActivityRegistry", "ActivitySpec", "activity_key", "invoke_handler", "split_key"]

_RATE_LIMIT_RE = re.compile(r"^\d+(\.\d+)?/(s|m|h)$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
DEFAULT_VERSION = "1"


def activity_key(name: str, version: str = DEFAULT_VERSION) -> str:
    """The registry and fleet key of an activity's version: its name for version "1" (today's names stay), else
    `<name>@<version>` (its task `agentq.activity.<name>@<version>`, its queue of the same name)."""
    return name if version == DEFAULT_VERSION else f"{name}@{version}"


def split_key(key: str) -> tuple[str, str]:
    """`(name, version)` of an activity key: `sendEmail@2` -> ("sendEmail", "2"), `sendEmail` -> (.., "1")."""
    name, _, version = key.partition("@")
    return name, version or DEFAULT_VERSION


def version_problem(version: object) -> str | None:
    """Why `version` cannot be an activity version (None: it can)."""
    if isinstance(version, str) and _VERSION_RE.match(version):
        return None
    return f"a version is 1 to 32 letters, digits, '.', '_' or '-' starting with a letter or digit, got {version!r}"

F = TypeVar("F", bound=Callable[..., Any])


def _fail(name: object, option: str, message: str) -> RegistrationError:
    return RegistrationError(f"activity {name!r}: option {option!r} {message}")


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_options(
    name: object,
    retries: object,
    retry_backoff: object,
    timeout: object,
    queue: object,
    rate_limit: object,
) -> None:
    base, version = split_key(name) if isinstance(name, str) else (name, DEFAULT_VERSION)
    if (problem := version_problem(version)) is not None:
        raise _fail(base, "version", problem.replace("a version is", "must be", 1))
    if not is_valid_name(base):
        raise RegistrationError(
            f"invalid activity name {name!r}: use a letter followed by letters, digits, '_' or '-' (max 128)"
        )
    _check_retries(name, retries, retry_backoff, timeout)
    _check_routing(name, queue, rate_limit)


def _check_retries(name: object, retries: object, retry_backoff: object, timeout: object) -> None:
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise _fail(name, "retries", f"must be an integer >= 0, got {retries!r}")
    if not _is_number(retry_backoff) or retry_backoff <= 0:
        raise _fail(name, "retry_backoff", f"must be a number of seconds > 0, got {retry_backoff!r}")
    if timeout is not None and (not _is_number(timeout) or timeout <= 0):
        raise _fail(name, "timeout", f"must be None or a number of seconds > 0, got {timeout!r}")


def _check_routing(name: object, queue: object, rate_limit: object) -> None:
    if queue is not None and (not isinstance(queue, str) or not queue or any(c.isspace() for c in queue)):
        raise _fail(name, "queue", f"must be None or a non-empty queue name without spaces, got {queue!r}")
    if rate_limit is not None and (not isinstance(rate_limit, str) or not _RATE_LIMIT_RE.match(rate_limit)):
        raise _fail(name, "rate_limit",
                    f"must be None or Celery syntax like '10/s', '100/m', '0.5/h', got {rate_limit!r}")


@dataclass(frozen=True)
class ActivitySpec:
    """One registered activity: its handler and options. Constructing one validates everything.

    `name` is the activity's key: its name, or `<name>@<version>` for a version other than "1" (docs/rollouts.md
    rollouts; `activity` and `version` are its parts)."""

    name: str
    handler: Callable[..., Any]
    retries: int = 0
    retry_backoff: float = 1.0
    timeout: float | None = None
    queue: str | None = None
    rate_limit: str | None = None
    idempotent: bool = False  # running it twice for one call is harmless: see `ActivityRegistry.register`
    is_async: bool = field(init=False)
    _invocation: tuple[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_options(self.name, self.retries, self.retry_backoff, self.timeout, self.queue, self.rate_limit)
        if not isinstance(self.idempotent, bool):
            raise _fail(self.name, "idempotent", f"must be True or False, got {self.idempotent!r}")
        object.__setattr__(self, "_invocation", plan_invocation(self.name, self.handler))
        object.__setattr__(self, "is_async", is_async_handler(self.handler))

    @property
    def activity(self) -> str:
        """The activity's name without its version."""
        return split_key(self.name)[0]

    @property
    def version(self) -> str:
        """The activity's version ("1" unless registered with another)."""
        return split_key(self.name)[1]

    @property
    def parameters(self) -> tuple[str, ...]:
        """What the handler receives, in order: a subset of ``("call", "tool", "context")``."""
        return self._invocation[1]

    def to_announcement(self) -> dict[str, Any]:
        """A JSON-able description for the worker announcement (no handler; the runtime adds its task, queue
        and hostname)."""
        return {
            "name": self.name,
            "activity": self.activity,
            "version": self.version,
            "queue": self.queue,
            "retries": self.retries,
            "retry_backoff": float(self.retry_backoff),
            "timeout": None if self.timeout is None else float(self.timeout),
            "rate_limit": self.rate_limit,
            "is_async": self.is_async,
            "idempotent": self.idempotent,
        }


def invoke_handler(spec: ActivitySpec, call: Any, tool: Any, context: Any) -> Any:
    """Call ``spec.handler`` with the arguments it declares; return its result (possibly an awaitable).

    Callers ``await`` the result when ``spec.is_async`` or ``inspect.isawaitable(result)``.
    """
    mode, names = spec._invocation
    values = {"call": call, "tool": tool, "context": context}
    if mode == "named":
        return spec.handler(**{n: values[n] for n in names})
    return spec.handler(*(values[n] for n in names))


class ActivityRegistry:
    """Activity specs by name. Decorator and direct registration forms; thread-safe."""

    def __init__(self) -> None:
        self._specs: dict[str, ActivitySpec] = {}
        self._lock = threading.RLock()
        self._version = next_version()

    def register(
        self,
        name: str,
        handler: Callable[..., Any] | None = None,
        *,
        retries: int = 0,
        retry_backoff: float = 1.0,
        timeout: float | None = None,
        queue: str | None = None,
        rate_limit: str | None = None,
        idempotent: bool = False,
        replace: bool = False,
        version: str = DEFAULT_VERSION,
    ) -> Any:
        """Register an activity.

        ``idempotent=True`` says that running the handler twice for one call is harmless (it reads, or its
        writes are keyed by the call). A worker then runs such a call as soon as its task arrives and records
        the claim and the outcome in one store step afterwards, instead of claiming it first (one round trip
        less per call). The price: two deliveries of the same task (a redelivery while the first still runs,
        a duplicate) may both run the handler; exactly one outcome is still recorded, and a call whose job was
        canceled while it ran is canceled, its outcome dropped. Only tasks signed by agentq's dispatcher take
        that path (see `FleetStore.task_signing_key`), and only for calls that read nothing from the log.

        Direct form ``register("x", fn, ...)`` returns ``fn``; decorator form ``@register("x", ...)`` returns
        the decorated function unchanged. Options are checked immediately (in the decorator form, before the
        function is even defined). Registering the same handler with the same options again is a no-op; any
        other second registration under a name raises :class:`DuplicateRegistrationError` unless
        ``replace=True``.

        ``version`` (default "1") registers a version of the activity (docs/rollouts.md rollouts): a worker may serve
        several versions of one activity; each is its own task and queue (`<name>@<version>`, see
        :func:`activity_key`), and a tool's rollout rule decides which calls go to it.
        """
        if handler is None and callable(name):
            raise RegistrationError(
                f"Activity.register needs a name: write @Activity.register({getattr(name, '__name__', 'name')!r})"
            )
        if (problem := version_problem(version)) is not None:
            raise _fail(name, "version", problem.replace("a version is", "must be", 1))
        if isinstance(name, str) and version != DEFAULT_VERSION:
            name = activity_key(split_key(name)[0], version)
        _check_options(name, retries, retry_backoff, timeout, queue, rate_limit)
        options = dict(retries=retries, retry_backoff=retry_backoff, timeout=timeout, queue=queue,
                       rate_limit=rate_limit, idempotent=idempotent)

        def attach(fn: F) -> F:
            spec = ActivitySpec(name, fn, **options)  # type: ignore[arg-type]
            self._add(spec, replace)
            return fn

        if handler is not None:
            return attach(handler)
        return attach

    def add(self, spec: ActivitySpec, *, replace: bool = False) -> ActivitySpec:
        """Register a ready-made :class:`ActivitySpec`."""
        if not isinstance(spec, ActivitySpec):
            raise RegistrationError(f"expected an ActivitySpec, got {type(spec).__name__}")
        self._add(spec, replace)
        return spec

    def _add(self, spec: ActivitySpec, replace: bool) -> None:
        with self._lock:
            current = self._specs.get(spec.name)
            if current is not None and not replace:
                if current == spec:  # same handler, same options: idempotent
                    return
                raise DuplicateRegistrationError(
                    f"activity {spec.name!r} is already registered (handler {_qualname(current.handler)}); "
                    f"pass replace=True to replace it or unregister it first"
                )
            self._specs[spec.name] = spec
            self._version = next_version()

    def unregister(self, name: str) -> None:
        """Remove activity ``name`` (:class:`UnknownToolError` if it is not registered)."""
        with self._lock:
            self.get(name)
            del self._specs[name]
            self._version = next_version()

    def get(self, name: str) -> ActivitySpec:
        """The spec of ``name``; :class:`UnknownToolError` with a "did you mean" hint if absent."""
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            raise unknown_name("activity", name, self._specs) from None

    def specs(self) -> tuple[ActivitySpec, ...]:
        """All specs, sorted by name."""
        with self._lock:
            return tuple(self._specs[n] for n in sorted(self._specs))

    @property
    def names(self) -> frozenset[str]:
        """The registered activity names."""
        return frozenset(self._specs)

    @property
    def Names(self) -> frozenset[str]:
        """Alias of :attr:`names`, spelled as in the seed documents."""
        return self.names

    @property
    def version(self) -> int:
        """Bumped on every change; unique across registries (shares the tool registries' counter)."""
        return self._version

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"ActivityRegistry({len(self)} activities, version={self._version})"


def _qualname(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', type(fn).__name__)}"


#: The default activity registry (``from agentq.protocol.activities import Activity``).
Activity = ActivityRegistry()
