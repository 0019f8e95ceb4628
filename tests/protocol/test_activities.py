"""ActivityRegistry and ActivitySpec: both registration forms, option checks, handler arity, invocation."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json

import pytest

from agentq.errors import DuplicateRegistrationError, RegistrationError, UnknownToolError
from agentq.protocol.activities import Activity, ActivityRegistry, ActivitySpec, invoke_handler


@pytest.fixture
def registry() -> ActivityRegistry:
    return ActivityRegistry()


CALL = {"_tool": "weatherCheck", "location": "Paris"}
TOOL = {"type": "object", "properties": {}}
CONTEXT = {"state": {"x": 1}}


# ------------------------------------------------------------------------------------------ the forms


def test_decorator_form_returns_the_function_unchanged(registry: ActivityRegistry) -> None:
    @registry.register("weatherCheck", retries=3, timeout=10)
    async def weather_check(call, tool, context):
        return {"temperature": 21, "conditions": "sunny"}

    assert inspect.iscoroutinefunction(weather_check)
    assert weather_check.__name__ == "weather_check"
    spec = registry.get("weatherCheck")
    assert spec.handler is weather_check
    assert spec.retries == 3 and spec.timeout == 10 and spec.is_async
    assert asyncio.run(invoke_handler(spec, CALL, TOOL, CONTEXT)) == {"temperature": 21, "conditions": "sunny"}


def test_direct_form_returns_the_handler(registry: ActivityRegistry) -> None:
    def log_event(call):
        return "logged"

    assert registry.register("logEvent", log_event) is log_event
    spec = registry.get("logEvent")
    assert not spec.is_async
    assert spec.retries == 0 and spec.retry_backoff == 1.0 and spec.timeout is None
    assert spec.queue is None and spec.rate_limit is None
    assert invoke_handler(spec, CALL, TOOL, CONTEXT) == "logged"


def test_decorating_touches_only_its_registry(registry: ActivityRegistry) -> None:
    before = (Activity.version, Activity.names)

    @registry.register("localOnly")
    def handler(call):
        return None

    assert "localOnly" in registry
    assert (Activity.version, Activity.names) == before


def test_bare_decorator_is_a_clear_error(registry: ActivityRegistry) -> None:
    with pytest.raises(RegistrationError, match=r"needs a name.*register\('oops'\)"):
        @registry.register  # type: ignore[arg-type]
        def oops(call):
            return None


def test_default_instance() -> None:
    assert isinstance(Activity, ActivityRegistry)


# ------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("retries", -1),
        ("retries", 1.5),
        ("retries", True),
        ("retries", "3"),
        ("retry_backoff", 0),
        ("retry_backoff", -2.0),
        ("retry_backoff", float("nan")),
        ("retry_backoff", float("inf")),
        ("retry_backoff", "1"),
        ("timeout", 0),
        ("timeout", -1),
        ("timeout", "10"),
        ("queue", ""),
        ("queue", "two words"),
        ("queue", 5),
        ("rate_limit", "10/x"),
        ("rate_limit", "ten/s"),
        ("rate_limit", "10/sec"),
        ("rate_limit", "10"),
        ("rate_limit", 10),
    ],
)
def test_bad_options_name_activity_and_option(registry: ActivityRegistry, option: str, value: object) -> None:
    with pytest.raises(RegistrationError) as info:
        registry.register("weatherCheck", lambda call: None, **{option: value})  # type: ignore[arg-type]
    assert "'weatherCheck'" in str(info.value) and repr(option) in str(info.value)
    assert "weatherCheck" not in registry


def test_decorator_form_checks_options_before_decorating(registry: ActivityRegistry) -> None:
    with pytest.raises(RegistrationError, match="'retries'"):
        registry.register("x", retries=-1)


@pytest.mark.parametrize("rate", ["10/s", "100/m", "0.5/h", "1/s"])
def test_good_rate_limits(registry: ActivityRegistry, rate: str) -> None:
    registry.register("x", lambda call: None, rate_limit=rate)
    assert registry.get("x").rate_limit == rate


@pytest.mark.parametrize("name", ["", "has space", "a.b", None, 3])
def test_bad_names(registry: ActivityRegistry, name: object) -> None:
    with pytest.raises(RegistrationError, match="invalid activity name"):
        registry.register(name, lambda call: None)  # type: ignore[arg-type]


def test_announcement_carries_the_options_and_the_declared_queue(registry: ActivityRegistry) -> None:
    registry.register("a", lambda call: None)
    registry.register("b", lambda call: None, queue="io", retries=2, retry_backoff=0.5, timeout=3, rate_limit="5/s")
    assert registry.get("a").to_announcement()["queue"] is None  # the runtime routes it to its own queue
    announcement = registry.get("b").to_announcement()
    assert announcement == {
        "name": "b",
        "activity": "b",
        "version": "1",
        "queue": "io",
        "retries": 2,
        "retry_backoff": 0.5,
        "timeout": 3.0,
        "rate_limit": "5/s",
        "is_async": False,
        "idempotent": False,
    }
    assert json.loads(json.dumps(announcement)) == announcement
    assert "handler" not in registry.get("a").to_announcement()


def test_spec_is_frozen_and_validates_itself() -> None:
    spec = ActivitySpec("x", lambda call: 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.retries = 3  # type: ignore[misc]
    with pytest.raises(RegistrationError, match="'timeout'"):
        ActivitySpec("x", lambda call: 1, timeout=-1)


# ---------------------------------------------------------------------------------------- duplicates


def test_duplicates(registry: ActivityRegistry) -> None:
    def one(call):
        return 1

    def two(call):
        return 2

    registry.register("x", one)
    version = registry.version
    registry.register("x", one)  # same handler, same options: no-op
    assert registry.version == version
    with pytest.raises(DuplicateRegistrationError, match="'x'"):
        registry.register("x", two)
    with pytest.raises(DuplicateRegistrationError):
        registry.register("x", one, retries=1)
    assert registry.get("x").handler is one
    registry.register("x", two, replace=True)
    assert registry.get("x").handler is two
    assert registry.version > version


# -------------------------------------------------------------------------------------- lookups


def test_lookups(registry: ActivityRegistry) -> None:
    v0 = registry.version
    registry.register("weatherCheck", lambda call: None)
    registry.register("logEvent", lambda call: None)
    assert registry.names == frozenset({"weatherCheck", "logEvent"})
    assert registry.Names == registry.names
    assert isinstance(registry.names, frozenset)
    assert list(registry) == ["logEvent", "weatherCheck"]
    assert [s.name for s in registry.specs()] == ["logEvent", "weatherCheck"]
    assert len(registry) == 2 and "logEvent" in registry
    assert registry.version > v0
    with pytest.raises(UnknownToolError, match="unknown activity 'weatherChek'; did you mean 'weatherCheck'"):
        registry.get("weatherChek")
    registry.unregister("logEvent")
    assert registry.names == frozenset({"weatherCheck"})
    with pytest.raises(UnknownToolError):
        registry.unregister("logEvent")


def test_add_ready_made_spec(registry: ActivityRegistry) -> None:
    spec = ActivitySpec("x", lambda call: 1, retries=1)
    assert registry.add(spec) is spec
    assert registry.get("x") is spec


# ------------------------------------------------------------------------------------- handler arity


def _invoke(registry: ActivityRegistry, handler) -> object:
    registry.register("h", handler)
    return invoke_handler(registry.get("h"), "CALL", "TOOL", "CONTEXT")


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (lambda call: (call,), ("CALL",)),
        (lambda c: (c,), ("CALL",)),
        (lambda c, ctx: (c, ctx), ("CALL", "CONTEXT")),
        (lambda call, context: (call, context), ("CALL", "CONTEXT")),
        (lambda a, b, c: (a, b, c), ("CALL", "TOOL", "CONTEXT")),
        (lambda call, tool, context: (call, tool, context), ("CALL", "TOOL", "CONTEXT")),
        # by name, whatever the order
        (lambda context, call: (context, call), ("CONTEXT", "CALL")),
        (lambda call, tool: (call, tool), ("CALL", "TOOL")),
        (lambda tool: (tool,), ("TOOL",)),
        (lambda *, context, call: (context, call), ("CONTEXT", "CALL")),
        # positional mode with defaults / varargs
        (lambda c, x=None: (c, x), ("CALL", "CONTEXT")),
        (lambda a, b, c, d=0: (a, b, c, d), ("CALL", "TOOL", "CONTEXT", 0)),
        (lambda *args: args, ("CALL", "TOOL", "CONTEXT")),
        (lambda call, *args: (call, *args), ("CALL", "TOOL", "CONTEXT")),
        (lambda **kw: tuple(sorted(kw)), ("call", "context", "tool")),
        (lambda c, /: (c,), ("CALL",)),
        (lambda call, /, ctx: (call, ctx), ("CALL", "CONTEXT")),
    ],
)
def test_handler_arity(registry: ActivityRegistry, handler, expected) -> None:
    assert _invoke(registry, handler) == expected


def test_callable_objects_and_methods(registry: ActivityRegistry) -> None:
    class Handler:
        def __call__(self, call, context):
            return ("obj", call, context)

        def method(self, call):
            return ("method", call)

    class AsyncHandler:
        async def __call__(self, call):
            return ("async", call)

    h = Handler()
    registry.register("obj", h)
    registry.register("meth", h.method)
    registry.register("partial", functools.partial(lambda prefix, call: (prefix, call), "p"))
    registry.register("async", AsyncHandler())
    assert invoke_handler(registry.get("obj"), 1, 2, 3) == ("obj", 1, 3)
    assert invoke_handler(registry.get("meth"), 1, 2, 3) == ("method", 1)
    assert invoke_handler(registry.get("partial"), 1, 2, 3) == ("p", 1)
    spec = registry.get("async")
    assert spec.is_async
    result = invoke_handler(spec, 1, 2, 3)
    assert inspect.iscoroutine(result)
    assert asyncio.run(result) == ("async", 1)


def test_async_partial_is_async(registry: ActivityRegistry) -> None:
    async def handler(prefix, call):
        return prefix

    registry.register("x", functools.partial(handler, "p"))
    assert registry.get("x").is_async


@pytest.mark.parametrize(
    ("handler", "fragment"),
    [
        (lambda: None, "takes no parameters"),
        (lambda a, b, c, d: None, "at most 3"),
        (lambda call, *, extra: None, "keyword-only"),
        (lambda tool, x: None, "'tool' at position 1 would receive 'call'"),
        (lambda x, tool: None, "'tool' at position 2 would receive 'context'"),
        ("not callable", "must be callable"),
        (42, "must be callable"),
    ],
)
def test_unusable_handlers(registry: ActivityRegistry, handler, fragment: str) -> None:
    with pytest.raises(RegistrationError) as info:
        registry.register("bad", handler)
    assert "'bad'" in str(info.value) and "'handler'" in str(info.value) and fragment in str(info.value)
    assert "bad" not in registry
