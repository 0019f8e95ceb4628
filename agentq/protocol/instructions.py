"""The system texts of every model request (docs/protocol.md#what-the-model-is-sent): agentq's instructions to the
planner of an agent job (`PROTOCOL_INSTRUCTIONS`) or to the executor of a latent call (`LATENT_INSTRUCTIONS`), then the
job's own
``system`` texts; and the name and description of the one ``solution`` tool every answer calls.

Pure: no I/O, no provider. The texts are identical bytes on every request, so a provider's prompt cache keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentq.protocol.views import LogIndex, as_index

SOLUTION_TOOL_NAME = "solution"
SOLUTION_TOOL_DESCRIPTION = (
    "Your answer. Always answer by calling this tool exactly once; its input must match the schema."
)

PROTOCOL_INSTRUCTIONS = """\
You are the planner of agentq, a task queue that executes tool calls for you. Answer every request by \
calling the `solution` tool exactly once with {"calls": [...], "output": ...}.

Calls
- Each element of "calls" is one call of a tool described in the solution schema: "_tool" names the tool, \
the fields without a leading "_" are its parameters, and "_reasoningForCall" says in a sentence why you make \
the call (the user sees it).
- Calls start as soon as you finish writing them and run in parallel unless one needs another's result. \
Write each call completely before starting the next.
- A parameter whose whole value is a reference such as "†state.user.email" or "†input.city" (the dagger, \
a kind of data, then a dot-separated path; a number indexes an array) is replaced by that value before the \
call runs, and the call waits for every call of the same solution that could write it. "A || B" takes the \
first reference that exists; "A && B" needs all of them and gives the last.
- "_outputPath" is where a call's result is written, e.g. "†state.weather". "A && B" writes the result to \
every path. "A || B" declares alternative outcomes: a success goes to the first, and a failure is written to \
the last as {"error": {"type", "message"}} while the work continues. A call without an output path is \
fire-and-forget: it runs, but its result is not written anywhere. "_outputMethod" says how the result \
combines with what is there: set (the default), merge, assign, push (append one item) or concat (append \
items).
- "_instance" runs a call for one instance (e.g. one employee among several): it reads that instance's data, \
falling back to the shared data, and writes its result for that instance. Calls of different instances run \
in parallel.
- "_scopes" and "_imports", where a tool lets you choose, list the kinds of context the call may see.

Context
- The context comes as blocks: "## Text" (instructions and messages), "## Data: ¶kind [instance]" (the current \
value of that kind of data, with its description and schema; kind "input" is the job's input, "state" the \
work done so far) and "## Error" (a call that failed).
- After each solution, a tool_result reports what each of its calls wrote (the output path, the method and \
the value) and which of them failed, followed by any context added meanwhile. The data shown before, with \
these writes applied in order, is the current data. When your solution was invalid, the tool_result is an \
error listing each problem with its JSON pointer: answer again with a corrected solution.

Ending
- Keep "output" null while work remains. A non-null "output" is the final answer of the job and ends it: \
give it, matching the output schema, once you have what it needs, usually with no further calls."""

LATENT_INSTRUCTIONS = """\
You are executing one tool call for agentq. Below come the context the tool may see, the call's parameters \
(the "## Data: ¶input" block) and the tool's description. Do what the tool describes and answer by calling \
the `solution` tool exactly once, with the tool's result in "output", matching its schema. When "output" \
offers alternatives, each with a "path", choose the one that describes the outcome and put the result in \
its "value"."""


def job_system_texts(log_or_index: LogIndex | Sequence[Any]) -> tuple[str, ...]:
    """The texts of the job's ``system`` text messages, in log order."""
    index = as_index(log_or_index)
    return tuple(str(m.get("text", "")) for m in index.text_messages() if m.get("role") == "system")


def system_blocks(job_system: Iterable[str] = (), *, purpose: str = "tick") -> tuple[str, ...]:
    """agentq's instructions (the latent ones for ``purpose="latent"``), then the job's system texts."""
    instructions = LATENT_INSTRUCTIONS if purpose == "latent" else PROTOCOL_INSTRUCTIONS
    return (instructions, *(t for t in job_system if t))


def latent_system(job_system: Iterable[str] = ()) -> tuple[str, ...]:
    """The system texts of a latent call's request."""
    return system_blocks(job_system, purpose="latent")


__all__ = [
    "LATENT_INSTRUCTIONS",
    "PROTOCOL_INSTRUCTIONS",
    "SOLUTION_TOOL_DESCRIPTION",
    "SOLUTION_TOOL_NAME",
    "job_system_texts",
    "latent_system",
    "system_blocks",
]
