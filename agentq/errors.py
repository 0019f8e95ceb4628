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
    │       └── JobValidationError     a job rejected as a whole before anything is written
    ├── ConfigurationError             settings or environment that cannot work
    ├── StoreError                     the state store is unreachable or holds something unexpected
    │   ├── StoreUnavailableError      Redis cannot be reached (connection refused, timeout)
    │   └── JobNotFoundError
    ├── JobTimeoutError                waiting for a job took longer than asked
    ├── LLMError                       the model could not give an answer (after its retries)
    │   ├── LLMNotConfigured           no provider: latent calls, modules and agent ticks cannot run
    │   └── LLMRetryableError          rate limit, overload, 5xx, an error mid-stream: ask again later
    └── NonRetryableError              raise from an activity to fail at once, skipping retries

`InvalidInputError.problems` is a list of :class:`Problem` so a caller can show every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    """A tool schema rejected at registration; the message names the tool and the keyword."""


class RegistrationError(ProtocolError):
    """Misuse of a tool or activity registry."""


class DuplicateRegistrationError(RegistrationError):
    """A second registration under a name that is already taken."""


class UnknownToolError(ProtocolError):
    """A Call names a tool that is not registered or not part of the job."""


class InvalidJobIdError(ProtocolError):
    """A job id that does not match `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$` (SPEC §10)."""


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


class ConfigurationError(AgentQError):
    """Settings or an environment that cannot work (e.g. no Redis server can be started)."""


class StoreError(AgentQError):
    """The state store is unreachable or holds something unexpected."""


class StoreUnavailableError(StoreError):
    """The state store cannot be reached (connection refused, timed out); retrying later may work."""


class JobNotFoundError(StoreError):
    """No job with that id (never submitted, or expired with its TTL)."""


class JobTimeoutError(AgentQError):
    """A wait for a job's result took longer than the caller allowed."""


class LLMError(AgentQError):
    """The model provider failed in a way retrying will not fix (bad request, auth, invalid answer)."""


class LLMNotConfigured(LLMError):
    """No LLM provider is configured (set ANTHROPIC_API_KEY or AGENTQ_LLM)."""


class LLMRetryableError(LLMError):
    """A transient provider failure; `retry_after_s` is the wait the provider asked for, if any."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status


class NonRetryableError(AgentQError):
    """Raise from an activity to fail the Call at once, without using its retries."""

    def __init__(self, message: str, *, type: str | None = None):
        super().__init__(message)
        self.type = type or "NonRetryableError"


__all__ = [
    "AgentQError",
    "CallValidationError",
    "ConfigurationError",
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
    "NonRetryableError",
    "Problem",
    "ProtocolError",
    "ReferenceCycleError",
    "ReferenceSyntaxError",
    "RegistrationError",
    "ScopeError",
    "StoreError",
    "StoreUnavailableError",
    "ToolSchemaError",
    "UnknownMethodError",
    "UnknownToolError",
    "WriteError",
]
