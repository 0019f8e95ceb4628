"""The pure protocol layer: decides, never performs I/O (no Redis, Celery, Anthropic or FastAPI).

    from agentq.protocol import resolve, compose, validate_call, MISSING

    resolve(log, "†state.user.name || †input.name")      # a value, or MISSING
    schema = compose(tools, live_activities=["weatherCheck"])
    validate_call({"_tool": "weatherCheck", "location": "Paris"}, schema)
"""

from agentq.errors import AgentQError
from agentq.protocol.activities import Activity, ActivityRegistry, ActivitySpec
from agentq.protocol.compose import compose, compose_tool, solution_bytes
from agentq.protocol.expressions import Expression, Ref, is_reference, parse_expression
from agentq.protocol.messages import normalize_message
from agentq.protocol.tools import Tool, ToolRegistry
from agentq.protocol.validation import validate_call
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve, resolve_params

__all__ = [
    "MISSING",
    "Activity",
    "ActivityRegistry",
    "ActivitySpec",
    "AgentQError",
    "Expression",
    "LogIndex",
    "Ref",
    "Tool",
    "ToolRegistry",
    "compose",
    "compose_tool",
    "is_reference",
    "normalize_message",
    "parse_expression",
    "resolve",
    "resolve_params",
    "solution_bytes",
    "validate_call",
]
