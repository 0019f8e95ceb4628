#!/usr/bin/env python3
"""One-command set-up: `python3 dev.py demo` runs the demo job, `python3 dev.py test` runs the test suite
(`python3 dev.py lint` runs ruff and mypy, as CI does before the tests; `python3 dev.py floors` runs the LLM
tests and a representative set against the lowest versions pyproject.toml allows, as CI does after them;
`python3 dev.py openapi` writes the API's OpenAPI document to clients/openapi.json and regenerates the TypeScript
client's types from it).

Creates `.venv` next to this file on first use and installs into it what the command needs (`COMMAND_EXTRAS`):
agentq alone for `demo` and `agentq`, agentq with its test extras for `test` and `lint`. A stamp in the venv
records the extras installed, so a later command installs only what is missing (and everything again when
pyproject.toml changes); pip shows its progress. Needs nothing but Python 3.11+. Before the tests it installs
Debian's `chromium` package when it is missing (the web page test drives it; Playwright never downloads a
browser): with `apt-get`, as root or through `sudo`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".install-stamp"
# The extras the tests and lint need: the test tools, and the optional features the suite tests (otel: the tracing
# tests; mcp: the MCP tests start real MCP servers and clients). The demo needs agentq alone.
TEST_EXTRAS = ("dev", "otel", "mcp")
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {"demo": (), "agentq": (), "test": TEST_EXTRAS, "lint": TEST_EXTRAS,
                                               "openapi": ()}
# `dev.py openapi`: the API's OpenAPI document, checked in, and the TypeScript client's types generated from it
OPENAPI_FILE = ROOT / "clients" / "openapi.json"
TS_CLIENT = ROOT / "clients" / "typescript"
_SERVED_DOCUMENT = """
import sys
from agentq.api import ApiAuth, create_api
from agentq.api.openapi import openapi_document, render
from agentq.runtime.root import connect
from agentq.settings import Settings
parts = connect(Settings(redis_url="redis://127.0.0.1:1/0"))  # never reached: the document calls no route
sys.stdout.write(render(openapi_document(create_api(parts, auth=ApiAuth.configure(["openapi"])))))
"""

# `dev.py floors`: every dependency at the floor pyproject.toml declares, in a venv of its own
FLOORS_VENV = ROOT / ".venv-floors"
FLOORS_BIN = FLOORS_VENV / ("Scripts" if os.name == "nt" else "bin")
FLOORS_PYTHON = FLOORS_BIN / ("python.exe" if os.name == "nt" else "python")
FLOORS_STAMP = FLOORS_VENV / ".install-stamp"
FLOORS_TESTS = ("tests/llm", "tests/integration/test_agent_jobs.py", "tests/integration/test_smoke.py",
                "tests/e2e/test_api.py", "tests/integration/test_sentinel.py",
                # the compiled schema checks against jsonschema's own answers: the same at its floor
                "tests/protocol/test_schema_fit.py",
                # a killed worker's task delivered again, by the store's sweep and by the broker's restore, and the
                # transport's notes of delivered tasks: what the celery, kombu and redis floors are for
                "tests/integration/test_metrics.py::test_a_killed_workers_call_delivered_again_counts_one_redelivery",
                "tests/integration/test_unacked_entries.py")
FLOORS_TEST_TOOLS = ("pytest", "pytest-timeout", "pytest-xdist")  # installed as the dev extra lists them
# `dev.py test` and `dev.py floors` spread the tests over this many pytest-xdist worker processes: most tests
# wait (for subprocesses, servers, the network) more than they compute, so more workers than this machine's two
# cores pays. Each worker is a pytest session of its own, with its own private Redis, cluster and servers on
# free ports. `worksteal`: a worker that ran out of tests takes half of the remaining tests of the busiest one.
TEST_WORKERS = "4"
TEST_DISTRIBUTION = "worksteal"
_FLOOR = re.compile(r"^\s*([A-Za-z0-9._-]+(?:\[[^\]]*\])?)\s*>=\s*([0-9][^,;\s]*)")


def _wanted_stamp() -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{sys.version_info[:2]}:{digest}"


def _stamp() -> tuple[bool, set[str]]:
    """What `.venv`'s stamp records: whether it was written for this Python and this pyproject.toml, and the
    extras installed then (none without a stamp, or with one of the older plain-text form)."""
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return False, set()
    if not isinstance(stamp, dict):
        return False, set()
    return stamp.get("for") == _wanted_stamp(), set(stamp.get("extras", []))


def ensure_environment(extras: tuple[str, ...]) -> None:
    """`.venv` with agentq and `extras` installed: only what the stamp says is missing is installed (after a
    change of pyproject.toml, everything the venv had again), with pip's own progress on the terminal."""
    if not PYTHON.exists():
        print(f"[dev] creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    current, installed = _stamp()
    if current and set(extras) <= installed:
        return
    wanted = sorted(set(extras) | installed)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check"]
    if not current:
        print("[dev] step 1/2: upgrading pip", flush=True)
        subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    target = f"{ROOT}[{','.join(wanted)}]" if wanted else str(ROOT)
    what = f"with the extras {', '.join(wanted)}" if wanted else "alone, no extras"
    step = "step 2/2: " if not current else ""
    print(f"[dev] {step}installing agentq {what} (pip's progress follows)", flush=True)
    subprocess.run([*pip, "install", "-e", target], check=True)
    STAMP.write_text(json.dumps({"for": _wanted_stamp(), "extras": wanted}))


def floor_pins() -> list[str]:
    """`name==floor` for every dependency of pyproject.toml (each must declare a `>=` floor), then the test
    tools as the dev extra lists them."""
    import tomllib  # Python 3.11+, which main() checks first

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins, missing = [], []
    for requirement in project["dependencies"]:
        match = _FLOOR.match(requirement)
        if match is None:
            missing.append(requirement)
        else:
            pins.append(f"{match[1]}=={match[2]}")
    if missing:
        sys.exit(f"[dev] pyproject.toml: these dependencies declare no >= floor: {', '.join(missing)}")
    tools = [r for r in project["optional-dependencies"]["dev"] if re.split(r"[<>=\[ ]", r)[0] in FLOORS_TEST_TOOLS]
    return pins + tools


def ensure_floors_environment(pins: list[str]) -> None:
    """The floors venv: built on first use and again only when pyproject.toml changes; agentq itself is
    installed editable without dependencies, so the venv always runs the working tree's code."""
    wanted = _wanted_stamp()
    if FLOORS_STAMP.exists() and FLOORS_STAMP.read_text() == wanted:
        return
    print(f"[dev] creating {FLOORS_VENV} with every dependency at its floor: {' '.join(pins)}", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(FLOORS_VENV)
    pip = [str(FLOORS_PYTHON), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", *pins], check=True)
    subprocess.run([*pip, "install", "--no-deps", "-e", str(ROOT)], check=True)
    FLOORS_STAMP.write_text(wanted)


def run_floors(pytest_args: list[str], env: dict[str, str]) -> int:
    """The LLM tests and a representative set, against the lowest versions pyproject.toml allows."""
    ensure_floors_environment(floor_pins())
    cmd = [str(FLOORS_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel_options(pytest_args),
           *FLOORS_TESTS, *pytest_args]
    return subprocess.call(cmd, cwd=ROOT, env=env)


def _plugins_turned_off(args: list[str]) -> set[str]:
    """The plugins `-p no:NAME` (or `-pno:NAME`) turns off."""
    named = [nxt for arg, nxt in itertools.pairwise(args) if arg == "-p"]
    named += [arg[2:] for arg in args if arg.startswith("-p") and arg != "-p"]
    return {name.removeprefix("no:") for name in named if name.startswith("no:")}


def parallel_options(pytest_args: list[str]) -> list[str]:
    """`-n TEST_WORKERS --dist TEST_DISTRIBUTION`, less what the arguments (or PYTEST_ADDOPTS) choose
    themselves: their own `-n`/`--numprocesses` (`-n 0` runs the tests in pytest's own process) or `--dist`;
    nothing with `-p no:xdist`, or with a debugger (`--pdb`, `--trace`), which needs pytest's own process."""
    args = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *pytest_args]
    if "xdist" in _plugins_turned_off(args) or "--pdb" in args or "--trace" in args:
        return []
    options = []
    if not any(arg.startswith(("-n", "--numprocesses")) for arg in args):
        options += ["-n", TEST_WORKERS]
    if not any(arg.startswith(("--dist", "-d")) for arg in args):
        options += ["--dist", TEST_DISTRIBUTION]
    return options


def chromium_path() -> str | None:
    """Debian's chromium, which the web page test drives (tests/e2e/test_web_page.py looks the same way)."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def ensure_chromium() -> None:
    """Install Debian's `chromium` package when it is missing (one line of output). When it cannot be
    installed the web page test fails and says why; the other tests do not need it."""
    if chromium_path() is not None:
        return
    apt = shutil.which("apt-get")
    if apt is None:
        print("[dev] chromium is missing and there is no apt-get to install it; the web page test will fail",
              flush=True)
        return
    as_root: list[str] = []
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        if shutil.which("sudo") is None:
            print("[dev] chromium is missing; install it (apt-get install chromium) as root: the web page test "
                  "needs it", flush=True)
            return
        as_root = ["sudo", "-n"]
    print("[dev] installing Debian's chromium for the web page test (apt-get install -y chromium)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [*as_root, apt, "install", "-y", "-q", "--no-install-recommends", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # the package lists may be missing or stale: fetch them, then try once more
        subprocess.run([*as_root, apt, "update", "-q"], env=env, capture_output=True, text=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0 or chromium_path() is None:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"[dev] could not install chromium ({reason[0]}); the web page test will fail", flush=True)


def write_openapi(env: dict[str, str]) -> int:
    """Write the served OpenAPI document to clients/openapi.json and regenerate the TypeScript client's types from
    it (clients/typescript/src/schema.ts; with Node and npm only: without them it says so and leaves them)."""
    done = subprocess.run([str(PYTHON), "-c", _SERVED_DOCUMENT], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return done.returncode
    OPENAPI_FILE.write_text(done.stdout, encoding="utf-8")
    print(f"[dev] wrote {OPENAPI_FILE.relative_to(ROOT)}", flush=True)
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        print("[dev] node/npm not found: clients/typescript/src/schema.ts was not regenerated", flush=True)
        return 0
    if not (TS_CLIENT / "node_modules").is_dir():
        status = subprocess.call([npm, "ci", "--no-audit", "--no-fund"], cwd=TS_CLIENT, env=env)
        if status != 0:
            return status
    status = subprocess.call([npm, "run", "--silent", "generate"], cwd=TS_CLIENT, env=env)
    if status == 0:
        print(f"[dev] wrote {(TS_CLIENT / 'src' / 'schema.ts').relative_to(ROOT)}", flush=True)
    return status


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036  (dev.py runs under whatever python3 there is)
        sys.exit(f"agentq needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not argv or argv[0] not in {"demo", "test", "lint", "floors", "agentq", "openapi"}:
        print("usage: python3 dev.py demo | test [pytest args] | lint | floors [pytest args] | agentq [args] | openapi",
              file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if command == "floors":
        return run_floors(rest, env)
    ensure_environment(COMMAND_EXTRAS[command])
    if command == "openapi":
        return write_openapi(env)
    if command == "test":
        ensure_chromium()
        cmd = [str(PYTHON), "-m", "pytest", *parallel_options(rest), *rest]
    elif command == "lint":  # ruff and mypy over the whole repository (mypy's `files`: pyproject.toml), then the
        # package layers (import-linter's contracts: pyproject.toml's [tool.importlinter])
        status = subprocess.call([str(PYTHON), "-m", "ruff", "check", "."], cwd=ROOT, env=env)
        status = status or subprocess.call([str(PYTHON), "-m", "mypy"], cwd=ROOT, env=env)
        return status or subprocess.call([str(BIN / "lint-imports")], cwd=ROOT, env=env)
    elif command == "demo":
        cmd = [str(BIN / "agentq"), "demo", *rest]
    else:
        cmd = [str(BIN / "agentq"), *rest]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
