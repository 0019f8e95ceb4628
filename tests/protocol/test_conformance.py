"""Every public conformance vector (../shared/conformance/references.json) through `resolve` (SPEC §1, §5, §6)."""

import json
from pathlib import Path

import pytest

from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VECTORS_FILE = SHARED / "conformance" / "references.json"


NOT_FOUND = f"../shared/conformance/references.json was not found (looked for {VECTORS_FILE})"


def _vectors() -> list:
    if not VECTORS_FILE.is_file():
        return [pytest.param(None, id="references.json-not-found", marks=pytest.mark.skip(reason=NOT_FOUND))]
    vectors = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))["vectors"]
    return [pytest.param(vector, id=vector["id"]) for vector in vectors]


VECTORS = _vectors()


def _check(vector: dict, value) -> None:
    if vector["expect"].get("missing"):
        assert value is MISSING, vector["note"]
    else:
        assert value is not MISSING, vector["note"]
        assert value == vector["expect"]["value"], vector["note"]


def test_vectors_present():
    if not VECTORS_FILE.is_file():
        pytest.skip(NOT_FOUND)
    assert VECTORS, "references.json holds no vectors"


@pytest.mark.parametrize("vector", VECTORS)
def test_vector(vector):
    _check(vector, resolve(vector["log"], vector["expression"], vector["instance"]))


@pytest.mark.parametrize("vector", VECTORS)
def test_vector_incrementally(vector):
    """The same answer from one index fed message by message and queried after every append."""
    index = LogIndex()
    for message in vector["log"]:
        index.append(message)
        resolve(index, vector["expression"], vector["instance"])
    _check(vector, resolve(index, vector["expression"], vector["instance"]))
