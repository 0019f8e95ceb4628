"""Every public conformance vector through `resolve` (views, references, expressions, output methods,
instancing). The vectors ship with the project (tests/data/conformance); see tests/conformance_vectors.py for
how a shared copy beside the project joins them."""

import json

import pytest

from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve
from tests.conformance_vectors import BUNDLED_FILE, SHARED_ENV, load_vectors, shared_file

VECTORS = [pytest.param(vector.data, id=vector.name) for vector in load_vectors()]


def _check(vector: dict, value) -> None:
    if vector["expect"].get("missing"):
        assert value is MISSING, vector["note"]
    else:
        assert value is not MISSING, vector["note"]
        assert value == vector["expect"]["value"], vector["note"]


def test_vectors_ship_with_the_project(tmp_path, monkeypatch):
    """A clone without the shared folder runs every shipped vector: none is skipped, none is lost."""
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "absent"))
    assert shared_file() == tmp_path / "absent" / "references.json"
    names = [vector.name for vector in load_vectors()]
    assert len(names) >= 20, names
    assert len(set(names)) == len(names)
    assert not [name for name in names if name.startswith("shared/")]
    assert BUNDLED_FILE.is_file()


def test_a_shared_copy_adds_its_new_and_changed_vectors(tmp_path, monkeypatch):
    shipped = json.loads(BUNDLED_FILE.read_text(encoding="utf-8"))["vectors"]
    changed = {**shipped[0], "expect": {"missing": True}}
    added = {**shipped[1], "id": "only-in-the-shared-copy"}
    (tmp_path / "references.json").write_text(json.dumps({"vectors": [changed, shipped[1], added]}), "utf-8")
    monkeypatch.setenv(SHARED_ENV, str(tmp_path))

    vectors = load_vectors()
    assert [v.name for v in vectors[len(shipped):]] == [f"shared/{shipped[0]['id']}", "shared/only-in-the-shared-copy"]
    assert vectors[len(shipped)].data == changed


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
