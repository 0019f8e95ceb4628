"""The public conformance vectors (views, references, expressions, output methods, instancing).

Every clone runs the copy shipped in `tests/data/conformance/references.json`. When the shared folder beside the
project holds a copy too (`../shared/conformance/`, or the folder named by `AGENTQ_TEST_SHARED_CONFORMANCE`), its
vectors that are new or differ from the shipped ones run as well, named `shared/<id>`: a newer published set is
checked at once, before the shipped copy is refreshed, and a clone without it loses nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

BUNDLED_FILE = Path(__file__).resolve().parent / "data" / "conformance" / "references.json"
SHARED_ENV = "AGENTQ_TEST_SHARED_CONFORMANCE"
DEFAULT_SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "conformance"


@dataclass(frozen=True)
class Vector:
    """One vector: `name` is its test id (`<id>` shipped, `shared/<id>` from the shared copy)."""

    name: str
    data: dict


def shared_file() -> Path:
    """Where the shared copy would be: `$AGENTQ_TEST_SHARED_CONFORMANCE/references.json`, else beside the project."""
    folder = os.environ.get(SHARED_ENV)
    return (Path(folder) if folder else DEFAULT_SHARED_DIR) / "references.json"


def _read(path: Path) -> list[dict]:
    vectors = json.loads(path.read_text(encoding="utf-8"))["vectors"]
    if not vectors:
        raise AssertionError(f"{path} holds no vectors")
    return vectors


def load_vectors(shared: Path | None = None) -> list[Vector]:
    """The shipped vectors, then the shared copy's vectors that are new or differ (none when it is absent)."""
    bundled = _read(BUNDLED_FILE)
    vectors = [Vector(v["id"], v) for v in bundled]
    shared = shared_file() if shared is None else shared
    if shared.is_file():
        known = {v["id"]: v for v in bundled}
        vectors += [Vector(f"shared/{v['id']}", v) for v in _read(shared) if known.get(v["id"]) != v]
    return vectors
