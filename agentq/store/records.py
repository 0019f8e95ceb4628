"""The job record of SPEC §12, built from a job's hash fields and its log."""

from __future__ import annotations

import json

from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex


def state_views(log: list[dict] | LogIndex) -> tuple[dict, dict[str, dict]]:
    """The merged global `state` view and each instance's merged `state` view."""
    index = log if isinstance(log, LogIndex) else LogIndex(log)
    state = _as_object(index.view("state"))
    instances = {i: _as_object(index.view("state", i)) for i in index.instances("state")}
    return state, instances


def job_record(fields: dict[str, str], log: list[dict] | LogIndex, *, result: object = None,
               error: dict | None = None) -> dict:
    state, instances = state_views(log)
    saved_error = json.loads(fields["error"]) if fields.get("error") else None
    return {
        "id": fields["id"],
        "status": fields["status"],
        "result": result,
        "state": state,
        "instances": instances,
        "error": error if error is not None else saved_error,
        "usage": json.loads(fields.get("usage") or '{"requests": 0, "input_tokens": 0, "output_tokens": 0}'),
        "created_at": fields.get("created_at"),
        "finished_at": fields.get("finished_at") or None,
    }


def _as_object(view: object) -> object:
    """A view that was never written is `{}` in a record (MISSING is not JSON)."""
    return {} if view is MISSING else view

