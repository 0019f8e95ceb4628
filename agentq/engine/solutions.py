"""What an agent tick makes of the model's answer (docs/protocol.md#jobs): the solution's parts, every problem of it by
pointer, the final output as text, and the structural error a problem becomes once the solution was already sent back.

Pure: no store, no model.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.errors import Problem
from agentq.llm.base import LLMAnswer
from agentq.protocol.digests import now_iso
from agentq.protocol.records import JobInfo
from agentq.protocol.ticks import TickPlan, output_problems

NO_SOLUTION_PROBLEM = "you answered without calling the `solution` tool: answer by calling it exactly once"


def solution_part(solution: Any, key: str) -> Any:
    """The solution's `calls` or `output` (None for a solution that is no JSON object)."""
    return solution.get(key) if isinstance(solution, dict) else None


def solution_problems(plan: TickPlan, answer: LLMAnswer, output_schema: dict[str, Any]) -> list[Problem]:
    """Every problem of the model's solution, by pointer: its calls' (found as they streamed in), its JSON's, its
    output's; an answer without the solution tool (thinking on) is one problem."""
    problems = list(plan.problems)
    if not answer.tool_use_id:
        problems.insert(0, Problem("", NO_SOLUTION_PROBLEM))
    elif answer.solution is None:
        problems.insert(0, Problem("", f"the solution is not valid JSON: {answer.raw[:200]!r}"))
    else:
        problems += output_problems(answer.solution, output_schema)
    return sorted(problems, key=lambda p: p.pointer)


def answer_text(output: Any) -> str:
    """The final output as text: a string as it is, anything else as indented JSON."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, indent=2)


def structural_error(problem: Problem, calls: Any, info: JobInfo) -> dict:
    """An error message for a problem of a solution that was already sent back once (docs/protocol.md#jobs)."""
    parts = problem.pointer.split("/")
    call: dict[str, Any] = {}
    if len(parts) > 2 and parts[1] == "calls" and isinstance(calls, list) and parts[2].isdigit():
        position = int(parts[2])
        if position < len(calls) and isinstance(calls[position], dict):
            call = calls[position]
    return {"type": "error", "data": {"call": call, "error": {
        "type": "StructuralError", "message": f"{problem.pointer or '/'}: {problem.message}"}}, "_date": now_iso()}


__all__ = ["NO_SOLUTION_PROBLEM", "answer_text", "solution_part", "solution_problems", "structural_error"]
