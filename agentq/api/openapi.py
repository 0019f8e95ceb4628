"""The API's OpenAPI document as a contract for generated clients (clients/openapi.json, clients/typescript).

FastAPI writes the document from the routes; `contract` then makes it what a generator turns into good code, the
same way for every route, the ones added later included:

- operation ids are the route functions' names in camelCase (`submit_job` -> `submitJob`), set by
  `operation_id` (the app's `generate_unique_id_function`);
- named schemas: pydantic models lose their `Model` suffix (`JobRecordModel` -> `JobRecord`), and a request body
  whose schema has a `title` becomes a component of that name (`Job`, `RejectBody`, `RolloutRule`, ...);
- errors: every error answer carries the one error body (`Error`: `{"error": {"type", "message", "problems"}}`),
  FastAPI's own validation-error schema replaced by it; every route behind a token may answer 401, every route
  500; a 2xx FastAPI added by default beside the route's declared one is dropped.

`python3 dev.py openapi` writes `document()` to clients/openapi.json (and regenerates the TypeScript types from it);
a test fails while the served document differs from that copy.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from agentq.api.models import EXTRA_MODELS, ErrorModel

_REF = "#/components/schemas/"
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")


def operation_id(route: APIRoute) -> str:
    """A route's operation id: its function's name (or `name=`) in camelCase, e.g. `approveCall`."""
    head, *rest = [word for word in re.split(r"[^0-9A-Za-z]+", route.name) if word]
    return head.lower() + "".join(word[:1].upper() + word[1:] for word in rest)


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The app's document as `contract` makes it (built once per app)."""
    cached: dict[str, Any] | None = getattr(app.state, "openapi_contract", None)
    if cached is None:
        cached = contract(app.openapi())
        app.state.openapi_contract = cached
    return cached


def contract(generated: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document made into the contract the module docstring describes (a new dict)."""
    document = copy.deepcopy(generated)
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    models: tuple[type[BaseModel], ...] = (ErrorModel, *EXTRA_MODELS)
    for model in models:
        found = model.model_json_schema(ref_template=_REF + "{model}")
        schemas.update(found.pop("$defs", {}))
        schemas[model.__name__] = found
    for name in _FASTAPI_VALIDATION:
        schemas.pop(name, None)
    for operation in _operations(document):
        _name_request_body(operation, schemas)
        _declare_errors(operation)
    renames = {name: name.removesuffix("Model") for name in schemas
               if name.endswith("Model") and name.removesuffix("Model") not in schemas}
    document["components"]["schemas"] = {renames.get(name, name): schema for name, schema in sorted(schemas.items())}
    return _renamed_refs(document, renames)


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [operation for methods in document.get("paths", {}).values() for operation in methods.values()
            if isinstance(operation, dict)]


def _name_request_body(operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    """A request body schema with a `title` becomes the component of that name."""
    for media in operation.get("requestBody", {}).get("content", {}).values():
        schema = media.get("schema")
        if isinstance(schema, dict) and isinstance(schema.get("title"), str):
            schema = copy.deepcopy(schema)
            for name, nested in schema.pop("$defs", {}).items():
                schemas.setdefault(name, nested)
            schemas.setdefault(schema["title"], _local_refs(schema))
            media["schema"] = {"$ref": _REF + schema["title"]}


def _declare_errors(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    if operation.get("security"):
        responses.setdefault("401", {"description": "no or a wrong token"})
    responses.setdefault("500", {"description": "a failure of agentq's own (logged by the API, never a user's "
                                                "mistake)"})
    declared = [status for status in responses if status.startswith("2") and status != "200"]
    if declared and responses.get("200", {}).get("description") == "Successful Response":
        del responses["200"]  # FastAPI's default beside the answer the route declares
    error = {"application/json": {"schema": {"$ref": _REF + ErrorModel.__name__}}}
    for status, response in responses.items():
        if status[0] in "45":
            response["content"] = copy.deepcopy(error)


def _local_refs(schema: Any) -> Any:
    """Refs of a standalone schema (`#/$defs/X`) pointed at the document's components."""
    if isinstance(schema, dict):
        return {key: (value.replace("#/$defs/", _REF) if key == "$ref" and isinstance(value, str)
                      else _local_refs(value)) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_local_refs(item) for item in schema]
    return schema


def _renamed_refs(value: Any, renames: dict[str, str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str) and item.startswith(_REF):
                name = item.removeprefix(_REF)
                item = _REF + renames.get(name, name)
            out[key] = _renamed_refs(item, renames)
        return out
    if isinstance(value, list):
        return [_renamed_refs(item, renames) for item in value]
    return value


def render(document: dict[str, Any]) -> str:
    """The checked-in text of a document: sorted keys, two-space indents, a final newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

