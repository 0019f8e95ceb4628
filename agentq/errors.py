"""The one error hierarchy of agentq.

Every exception agentq raises on purpose derives from :class:`AgentQError`::

    AgentQError
    ├── ProtocolError                  bad protocol input, detected without I/O
    │   ├── ReferenceSyntaxError       malformed `†kind.path` / `||` / `&&` expression
    │   ├── UnknownMethodError         output method outside set/merge/assign/push/concat
    │   ├── MessageError               a context message that is not text/data/error
    │   ├── ToolSchemaError            a tool schema that is not a valid tool
    │   ├── RegistrationError          registry misuse
    │   │   └── DuplicateRegistrationError
    │   ├── UnknownToolError           a Call for a tool nobody registered
    │   ├── InvalidJobIdError          a job id that cannot name a job's keys
    │   ├── WriteError                 e.g. `push` onto a value that is not an array
    │   └── InvalidInputError          carries `problems`: every problem, each with a JSON pointer
    │       ├── CallValidationError    a Call that does not match its composed tool schema
    │       ├── ScopeError             `_scopes` / `_imports` outside what the tool allows
    │       ├── ReferenceCycleError    Calls that wait on each other
    │       ├── JobValidationError     a job rejected as a whole before anything is written
    │       │   └── JobExistsError     a job with the id asked for exists already
    │       ├── RolloutRuleError       a tool's rollout rule refused (docs/rollouts.md), nothing written
    │       ├── ConfigValueError       a fleet setting refused (`agentq config set`), nothing written
    │       ├── ScheduleError          a schedule refused (docs/schedules.md), nothing written
    │       └── ModuleError            a saved module (docs/protocol.md#modules) that cannot be used; `ref` names it
    │           ├── ModuleRefused      a reference that leaves its folder, a URL scheme or host not allowed
    │           ├── ModuleNotFound     no such module in any module folder (the message lists them), or a 404
    │           ├── ModuleInvalid      a module file that is not UTF-8, not JSON or not a valid module
    │           └── ModuleUnavailable  a module URL that could not be fetched now (network, 5xx): retryable
    ├── ConfigurationError             settings or environment that cannot work
    ├── StoreError                     the state store is unreachable or holds something unexpected
    │   ├── StoreUnavailableError      Redis cannot be reached (connection refused, timeout)
    │   ├── JobNotFoundError
    │   ├── ScheduleNotFoundError      no schedule of that name (for this tenant)
    │   └── CallNotFoundError          a job exists but has no such call
    ├── ConflictError                  a request that the call's or job's state forbids (e.g. approving a
    │                                  call that is not awaiting approval)
    ├── JobTimeoutError                waiting for a job took longer than asked
    ├── CallFailedError                raised by a call's Celery task once the call's failure is committed, so
    │                                  monitoring (Flower) shows the task as FAILURE
    ├── LLMError                       the model could not give an answer (after its retries)
    │   ├── LLMNotConfigured           no provider: latent calls, modules and agent ticks cannot run
    │   ├── ReplayUnmatched            a replay file has no answer for the request (it names the file and the ask)
    │   ├── BudgetExceeded             the job's budget does not allow the request: it was not sent
    │   ├── ModelStopped               the model answered, but not with an answer agentq can use (`usage`)
    │   │   ├── ModelRefused           it declined (stop_reason `refusal`): never retried
    │   │   ├── ModelOutputTruncated   its answers keep stopping at `max_tokens`
    │   │   ├── ContextWindowExceeded  the request does not fit its context window, even compacted once
    │   │   └── UnknownStopReason      a stop reason agentq does not know (the message names it)
    │   └── LLMRetryableError          rate limit, overload, 5xx, an error mid-stream: ask again later
    └── NonRetryableError              raise from an activity to fail at once, skipping retries

`InvalidInputError.problems` is a list of :class:`Problem` so a caller can show every problem at once.

`ModuleError` is the one `InvalidInputError` found by reading something (a module folder or an allowed URL):
a module reference and the file it names are input to the protocol, so a bad one fails its Call as a
structural error; only `ModuleUnavailable` may succeed when tried again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class AgentQError(Exception):
    """Base class of every error agentq raises on purpose."""


class ProtocolError(AgentQError):
    """Input that breaks a protocol rule; found without any I/O."""


class ReferenceSyntaxError(ProtocolError):
    """A malformed reference or expression such as `†state..a` or `†state.a ||`."""


class UnknownMethodError(ProtocolError):
    """An `_outputMethod` other than set, merge, assign, push or concat."""


class MessageError(ProtocolError):
    """A context message that is not a valid text, data or error message."""


class ToolSchemaError(ProtocolError):
    """A tool schema rejected at registration; the message names the tool and the keyword (also set apart, for
    callers that want them, where the check knows them)."""

    tool: str | None = None
    keyword: str | None = None
    pointer: str | None = None


class RegistrationError(ProtocolError):
    """Misuse of a tool or activity registry."""


class DuplicateRegistrationError(RegistrationError):
    """A second registration under a name that is already taken."""


class UnknownToolError(ProtocolError):
    """A Call names a tool that is not registered or not part of the job."""


class InvalidJobIdError(ProtocolError):
    """A job id that does not match `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`
    (docs/architecture.md#runtime--the-only-place-that-knows-celery)."""


class WriteError(ProtocolError):
    """An output write that cannot be applied, e.g. `push` onto a non-array."""


@dataclass(frozen=True)
class Problem:
    """One problem in some input: where (a JSON pointer, "" for the whole document) and what."""

    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"pointer": self.pointer, "message": self.message}


class InvalidInputError(ProtocolError):
    """Input with one or more located problems; `problems` lists all of them."""

    def __init__(self, summary: str, problems: list[Problem] | tuple[Problem, ...] = ()):
        self.summary = summary
        self.problems: list[Problem] = list(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.problems:
            return self.summary
        if len(self.problems) == 1:
            return f"{self.summary}: {self.problems[0]}"
        lines = "\n".join(f"  {p}" for p in self.problems)
        return f"{self.summary} ({len(self.problems)} problems):\n{lines}"

    @property
    def pointer(self) -> str:
        """Pointer of the first problem (convenient when there is only one)."""
        return self.problems[0].pointer if self.problems else ""

    def to_dict(self) -> dict:
        return {
            "type": type(self).__name__,
            "message": self.summary,
            "problems": [p.to_dict() for p in self.problems],
        }


class CallValidationError(InvalidInputError):
    """A Call that does not validate against its composed tool schema."""


class ScopeError(InvalidInputError):
    """A `_scopes` or `_imports` value outside the tool's declared enum or const."""


class ReferenceCycleError(InvalidInputError):
    """Calls whose references wait on each other's output paths."""


class JobValidationError(InvalidInputError):
    """A job rejected before anything was written; `problems` names every problem."""


class RolloutRuleError(InvalidInputError):
    """A tool's rollout rule refused (docs/rollouts.md): `problems` names every problem; nothing was written."""


class ConfigValueError(InvalidInputError):
    """A fleet setting refused (`agentq config set`, `PUT /v1/config/{name}`): an unknown name, or `problems` names
    every problem of the value; nothing was written."""


class ScheduleError(InvalidInputError):
    """A schedule refused (docs/schedules.md): `problems` names every problem with its pointer; nothing was written."""


class JobExistsError(JobValidationError):
    """A submission named the id of a job that exists already (nothing was written)."""


class ConfigurationError(AgentQError):
    """Settings or an environment that cannot work (e.g. no Redis server can be started)."""


class StoreError(AgentQError):
    """The state store is unreachable or holds something unexpected."""


class StoreUnavailableError(StoreError):
    """The state store cannot be reached (connection refused, timed out); retrying later may work."""


class JobNotFoundError(StoreError):
    """No job with that id (never submitted, or expired with its TTL)."""


class JobExpiredError(JobNotFoundError):
    """The job was submitted, but its data expired with its `ttl_s` (HTTP 410): what continuing, resuming or
    forking it needs is gone."""


class ScheduleNotFoundError(StoreError):
    """No schedule of that name, or one another tenant's token may not see."""


class CallNotFoundError(StoreError):
    """The job exists but has no call with that id."""


class RateLimited(AgentQError):
    """A tenant's limit (`AGENTQ_TENANTS`: jobs per minute, active jobs) refused a job, and nothing was written:
    submit it again after `retry_after_s` (the HTTP API answers 429 with `Retry-After`)."""

    def __init__(self, message: str, *, tenant: str, retry_after_s: float):
        super().__init__(message)
        self.tenant, self.retry_after_s = tenant, retry_after_s


class ConflictError(AgentQError):
    """What was asked conflicts with the state of the call or job (HTTP 409)."""


class JobTimeoutError(AgentQError):
    """A wait for a job's result took longer than the caller allowed."""


class CallFailedError(AgentQError):
    """A call failed after its retries. Its failure is already recorded in the job; a call's Celery task raises
    this afterwards so the task's state is FAILURE. Its one argument is a string (the message, with sensitive
    parameters masked): safe to serialize as JSON and to pickle across a prefork pool."""


class LLMError(AgentQError):
    """The model provider failed in a way retrying will not fix (bad request, auth, invalid answer)."""


class LLMNotConfigured(LLMError):
    """No LLM provider is configured (set ANTHROPIC_API_KEY or AGENTQ_LLM)."""


class ReplayUnmatched(LLMError):
    """The replay file (`AGENTQ_LLM=replay:<file>`) holds no answer for a model request: the message names the file
    and what the request asked. Never retried: the job fails rather than get another request's answer."""


class BudgetExceeded(LLMError):
    """A model request the job's budget (`options.budget`, docs/rate-limits.md#budgets) does not allow: it was not sent,
    and the job fails with this error; the message names what ran out."""


class ModelStopped(LLMError):
    """The model answered, but its answer cannot be used as it is (docs/protocol.md#thinking-and-stop-reasons); `usage`
    is the request's token usage (`agentq.llm.base.Usage`) when the API reported it, so it is still counted."""

    def __init__(self, message: str, *, usage: Any = None, stop_reason: str | None = None):
        super().__init__(message)
        self.usage = usage
        self.stop_reason = stop_reason


class ModelRefused(ModelStopped):
    """The model declined the request (stop_reason `refusal`); the message is the model's own text. Asking again
    would only be refused again: the job fails at once."""


class ModelOutputTruncated(ModelStopped):
    """The model's answer stopped at `max_tokens` again after agentq asked for the rest of a cut solution."""


class ContextWindowExceeded(ModelStopped):
    """The request does not fit the model's context window (stop_reason `model_context_window_exceeded`, or the
    API's 400 "prompt is too long"), and compacting the conversation once did not make it fit. `window` and
    `prompt_tokens` are what the API's refusal said ("N tokens > M maximum"), None when it said nothing."""

    def __init__(self, message: str, *, usage: Any = None, stop_reason: str | None = None,
                 window: int | None = None, prompt_tokens: int | None = None):
        super().__init__(message, usage=usage, stop_reason=stop_reason)
        self.window = window
        self.prompt_tokens = prompt_tokens


class UnknownStopReason(ModelStopped):
    """The model stopped for a reason agentq does not know; the message names it (never a silent success)."""


class LLMRetryableError(LLMError):
    """A transient provider failure; `retry_after_s` is the wait the provider asked for, if any."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, status: int | None = None,
                 rate_limits: Any = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status
        self.rate_limits = rate_limits  # what the answer said of the account's limits (`llm.base.RateLimits`)


class ModelDeferred(LLMRetryableError):
    """A model request the fleet-wide rate limits (`AGENTQ_LLM_LIMITS`, a pause after a 429, docs/rate-limits.md) hold
    back: it was not sent; it keeps its place, and goes when asked again after `retry_after_s`."""


class NonRetryableError(AgentQError):
    """Raise from an activity to fail the Call at once, without using its retries."""

    def __init__(self, message: str, *, type: str | None = None):
        super().__init__(message)
        self.type = type or "NonRetryableError"


class ModuleError(InvalidInputError):
    """A saved module (docs/protocol.md#modules) that cannot be loaded; `ref` is the reference as given, `source` the
    file or URL read (when one was), `problems` every problem of an invalid module file with its JSON pointer."""

    def __init__(self, summary: str, problems: list[Problem] | tuple[Problem, ...] = (), *, ref: str = "",
                 source: str | None = None):
        self.ref = ref
        self.source = source
        super().__init__(summary, problems)


class ModuleRefused(ModuleError):
    """A module reference that is not allowed: an absolute path, a `..` segment, a backslash, a symlink or path
    that resolves outside its folder, a URL scheme other than http(s), a host not in the allow-list."""


class ModuleNotFound(ModuleError):
    """No module of that name in any module folder (the message lists the folders searched), or a URL that
    answered 404/410."""


class ModuleInvalid(ModuleError):
    """A module file that is not UTF-8, not JSON, too large, or not `{context, tools?, output?, input?}` with
    valid messages, tools and JSON Schemas; `problems` names each with its JSON pointer."""


class ModuleUnavailable(ModuleError):
    """A module URL that could not be fetched right now (connection, timeout, 429 or 5xx); retrying may work."""


__all__ = [
    "AgentQError",
    "BudgetExceeded",
    "CallFailedError",
    "CallValidationError",
    "ConfigValueError",
    "ConfigurationError",
    "ContextWindowExceeded",
    "DuplicateRegistrationError",
    "InvalidInputError",
    "InvalidJobIdError",
    "JobNotFoundError",
    "JobTimeoutError",
    "JobValidationError",
    "LLMError",
    "LLMNotConfigured",
    "LLMRetryableError",
    "MessageError",
    "ModelDeferred",
    "ModelOutputTruncated",
    "ModelRefused",
    "ModelStopped",
    "ModuleError",
    "ModuleInvalid",
    "ModuleNotFound",
    "ModuleRefused",
    "ModuleUnavailable",
    "NonRetryableError",
    "Problem",
    "ProtocolError",
    "ReferenceCycleError",
    "ReferenceSyntaxError",
    "RegistrationError",
    "ReplayUnmatched",
    "RolloutRuleError",
    "ScopeError",
    "StoreError",
    "StoreUnavailableError",
    "ToolSchemaError",
    "UnknownMethodError",
    "UnknownStopReason",
    "UnknownToolError",
    "WriteError",
]
