"""`agentq config`: the fleet's shared settings (docs/config.md). `agentq config` lists them, `agentq config NAME`
shows one, `agentq config set NAME FILE` checks a JSON file and stores it as the setting's next version."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentq.cli.common import client, fail, print_json, print_table
from agentq.errors import ConfigValueError
from agentq.runtime.fleet_config import unknown_name

USAGE = "agentq config [--json] [NAME | set NAME FILE]"


def cmd_config(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words[:1] == ["set"]:
        if len(words) != 3:
            return fail(f"config set takes NAME FILE (usage: {USAGE})")
        return _set(args, words[1], words[2])
    if len(words) > 1:
        return fail(f"config takes at most one NAME (usage: {USAGE})")
    if words and (problem := unknown_name(words[0])) is not None:
        return fail(problem)
    with client(args) as fleet:
        shown = fleet.config.show(words[0] if words else None)
    if args.json:
        print_json(shown if not words else {"name": words[0], **shown[words[0]]})
    elif words:
        _print_one(words[0], shown[words[0]])
    else:
        _print_all(shown)
    return 0


def _set(args: argparse.Namespace, name: str, path: str) -> int:
    """Check the file as `name` and store it (nothing is written when it is refused)."""
    if (problem := unknown_name(name)) is not None:
        return fail(problem)
    value = _read_value(path)
    with client(args) as fleet:
        entry = fleet.config.set(name, value)
    print(f"config {name} set: version {entry['version']} ({summary(name, entry['value'])}); every process reads it "
          "within a heartbeat")
    return 0


def _read_value(path: str) -> Any:
    """The JSON of a file ('-' for stdin); unreadable, non-UTF-8 or invalid JSON is one line naming the file."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        return json.loads(data.decode("utf-8"))
    except OSError as error:
        raise ConfigValueError(f"cannot read config file {path}: {error.strerror or error}") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigValueError(f"config file {path} is not UTF-8 JSON: {error}") from None


UNSET = {"tenants": "no tenant is limited", "llm_prices": "the shipped prices",
         "llm_limits": "no limits but what the API's headers teach", "webhook_allowlist": "no webhooks"}


def summary(name: str, value: Any) -> str:
    """A setting's value in a few words."""
    if value is None:
        return f"unset: {UNSET[name]}"
    if name == "webhook_allowlist":
        return f"{len(value)} entries: {', '.join(value)}" if value else "empty: no webhooks"
    kinds = {"tenants": "tenants", "llm_prices": "models priced", "llm_limits": "models limited"}
    return f"{len(value)} {kinds[name]}: {', '.join(value)}" if value else f"no {kinds[name]}"


def _print_all(shown: dict[str, dict]) -> None:
    rows = [("NAME", "VERSION", "SET AT", "SOURCE", "VALUE")]
    for name, entry in shown.items():
        rows.append((name, str(entry["version"]) if entry["version"] else "-", entry["set_at"] or "-",
                     entry["source"] or "-", summary(name, entry["value"])))
    print_table(rows)


def _print_one(name: str, entry: dict) -> None:
    if not entry["version"]:
        print(f"{name}: unset, so {UNSET[name]}; set it with `agentq config set {name} FILE` (or start a worker "
              f"with {entry['variable']})")
        return
    by = "agentq config set" if entry["source"] == "set" else f"{entry['source']} (a process's environment)"
    print(f"{name}: version {entry['version']}, set at {entry['set_at']} by {by}; read by {entry['read_by']}")
    print(json.dumps(entry["value"], indent=2, ensure_ascii=False))
