"""The front-end event parts (seed 004) as pydantic models: `ActivityOutputPart` (with its `ToolCall`,
`ToolResult`, `DisplayInfo`, `TechnicalDetails`) and `TextOutputPart`.

agentq keeps and sends parts as plain JSON dicts (`events.py` builds them); these models validate the parts that
come from elsewhere (an activity's own, `events.complete_part`) and describe the shape for users (`parse_part`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class ToolCall(BaseModel):
    """One tool call of a `tool_request` / `tool_call` activity."""

    name: str
    arguments: dict[str, Any]
    id: str


class ToolResult(BaseModel):
    """One tool result of a `tool_result` / `tool_call` activity."""

    name: str
    content: str
    is_error: bool
    call_id: str


class DisplayInfo(BaseModel):
    """UI metadata; extra keys (e.g. ``skill_display_info``) are kept."""

    model_config = ConfigDict(extra="allow")

    id: str
    friendly_name: str
    description: str | None = None
    icon: str | None = None
    category: str | None = None
    color: str | None = None


class TechnicalDetails(BaseModel):
    """Raw execution data: stored with the job, never sent to a front end."""

    function_name: str
    arguments: dict[str, Any]
    raw_result: Any = None
    execution_time_ms: float
    timestamp: str
    status: Literal["success", "error"]
    error_message: str | None = None


class ActivityOutputPart(BaseModel):
    """An agent activity in a stream or history ``parts`` array (unknown keys are dropped)."""

    type: Literal["activity"] = "activity"
    activity_type: str
    source: str
    content: str | None = None
    timestamp: str
    tools: list[ToolCall] | None = None
    results: list[ToolResult] | None = None
    display_info: DisplayInfo | None = None
    technical_details: TechnicalDetails | None = None


class TextOutputPart(BaseModel):
    """Text: ``text_output_stream`` while streaming, ``text_output`` in history."""

    type: Literal["text_output", "text_output_stream"]
    text: str


def parse_part(part: dict) -> ActivityOutputPart | TextOutputPart:
    """Validate a part dict into its model (by ``type``)."""
    if part.get("type") == "activity":
        return ActivityOutputPart.model_validate(part)
    return TextOutputPart.model_validate(part)



__all__ = ["ActivityOutputPart", "DisplayInfo", "TechnicalDetails", "TextOutputPart", "ToolCall", "ToolResult",
           "parse_part"]
