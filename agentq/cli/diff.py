"""`agentq diff A B [--json]`: two jobs side by side (docs/compare.md). `--json` prints what the API's
`GET /v1/jobs/{a}/diff/{b}` answers; without it, a readable comparison: the two jobs' figures in two columns with
their deltas, then the calls matched by tool and order, the final output and the state, each difference at its
JSON pointer."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from agentq.cli.common import client, print_json
from agentq.cli.render import cost_text, format_duration

ENDED = ("succeeded", "failed", "canceled")
MARKS = {"same": "=", "changed": "~", "only_a": "-", "only_b": "+"}
VALUE_WIDTH = 60  # a value shown in a difference line is cut after this many characters
_COUNTERS = (("requests", "requests"), ("input_tokens", "input tokens"), ("output_tokens", "output tokens"),
             ("cache_read_input_tokens", "cache reads"), ("cache_creation_input_tokens", "cache writes"))


def cmd_diff(args: argparse.Namespace) -> int:
    """`agentq diff A B [--json]`."""
    with client(args) as jobs:
        diff = jobs.diff(args.a, args.b)
    if args.json:
        print_json(diff)
    else:
        show_diff(diff)
    return 0


def show_diff(diff: dict[str, Any], out: Callable[[str], None] = print) -> None:
    """The readable comparison (see the module's docstring)."""
    a, b = diff["a"], diff["b"]
    verdict = "the same outcome" if diff["same"] else "different outcomes"
    out(f"A {a['id']}  vs  B {b['id']}: {verdict}")
    for side, name in ((a, "A"), (b, "B")):
        if side.get("forked_from"):
            out(f"{name} was forked from {side['forked_from']}")
        if side["status"] not in ENDED:
            out(f"{name} has not ended ({side['status']}): compare again once it has")
    out("")
    for line in _table(_figures(diff)):
        out(line)
    out("")
    _calls(diff, out)
    for title, key in (("final output", "result"), ("state", "state")):
        out("")
        _changes(title, diff[key], out)


def _figures(diff: dict[str, Any]) -> list[tuple[str, ...]]:
    """The two columns (and the delta) of the jobs' own figures."""
    a, b, usage = diff["a"], diff["b"], diff["usage"]
    duration = diff["duration_ms"]
    rows: list[tuple[str, ...]] = [
        ("", "A", "B", "B - A"),
        ("status", a["status"], b["status"], "changed" if diff["status_changed"] else ""),
        ("duration", format_duration(duration["a"]), format_duration(duration["b"]),
         _signed(duration["delta"], format_duration)),
        ("model(s)", ", ".join(a["models"]) or "-", ", ".join(b["models"]) or "-",
         "changed" if diff["models_changed"] else ""),
    ]
    for key, label in _COUNTERS:
        figure = usage[key]
        rows.append((label, _count(figure["a"]), _count(figure["b"]), _signed(figure["delta"], _count)))
    cost = usage["cost_usd"]
    rows.append(("cost", _cost(cost["a"]), _cost(cost["b"]), _signed(cost["delta"], _cost)))
    rows.append(("calls", str(a["calls"]), str(b["calls"]), _signed(b["calls"] - a["calls"], _count)))
    if a.get("error") or b.get("error"):
        rows.append(("error", _error(a.get("error")), _error(b.get("error")),
                     "changed" if diff["error_changed"] else ""))
    return rows


def _calls(diff: dict[str, Any], out: Callable[[str], None]) -> None:
    counts = diff["call_counts"]
    replayed = diff.get("replayed_calls") or 0
    out(f"calls, matched by tool and order: {counts['same']} same, {counts['changed']} changed, "
        f"{counts['only_a']} only in A, {counts['only_b']} only in B"
        + (f" ({replayed} of the source's calls replayed by the fork, not compared)" if replayed else ""))
    if not diff["calls"]:
        return
    rows: list[tuple[str, ...]] = [("", "CALL", "A", "B")]
    notes: dict[int, list[str]] = {}
    for number, pair in enumerate(diff["calls"]):
        name = f"{pair['tool']}" + (f" [{pair['instance']}]" if pair["instance"] else "") + f" #{pair['n']}"
        rows.append((MARKS[pair["kind"]], name, _call_cell(pair["a"]), _call_cell(pair["b"])))
        notes[number] = _pair_notes(pair)
    for number, line in enumerate(_table(rows)):
        out(f"  {line}")
        for note in notes.get(number - 1, ()):
            out(f"      {note}")


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows in columns padded to their widest cell (the last column is not padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]).rstrip()
            for row in rows]


def _call_cell(call: dict[str, Any] | None) -> str:
    if call is None:
        return "-"
    cell = f"{call['id']} {call['status'] or '-'} {format_duration(call['duration_ms'])}"
    return cell + (f" {call['error'].get('type')}" if call.get("error") else "")


def _pair_notes(pair: dict[str, Any]) -> list[str]:
    """What differs in a matched pair: its status and error, each parameter and output difference."""
    a, b = pair["a"], pair["b"]
    if a is None or b is None:
        return []
    notes = []
    if pair["status_changed"]:
        notes.append(f"status: {a['status']} → {b['status']}")
    if pair["error_changed"]:
        notes.append(f"error: {_error(a.get('error'))} → {_error(b.get('error'))}")
    for title, key in (("params", "params"), ("output", "output")):
        notes += [f"{title} {line}" for line in _change_lines(pair[key])]
    return notes


def _changes(title: str, diff: dict[str, Any], out: Callable[[str], None]) -> None:
    if diff["same"]:
        out(f"{title}: same")
        return
    count = len(diff["changes"])
    more = " (the first ones)" if diff["truncated"] else ""
    out(f"{title}: {count} difference{'' if count == 1 else 's'}{more}")
    for line in _change_lines(diff):
        out(f"  {line}")


def _change_lines(diff: dict[str, Any]) -> list[str]:
    """One line per change: `~ /pointer: a → b`, `- /pointer: a`, `+ /pointer: b`."""
    lines = []
    for change in diff["changes"]:
        where = change["pointer"] or "(the whole value)"
        if change["kind"] == "added":
            lines.append(f"+ {where}: {_value(change['b'])}")
        elif change["kind"] == "removed":
            lines.append(f"- {where}: {_value(change['a'])}")
        else:
            lines.append(f"~ {where}: {_value(change['a'])} → {_value(change['b'])}")
    return lines


def _value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= VALUE_WIDTH else text[:VALUE_WIDTH - 1] + "…"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,}"


def _cost(value: float | None) -> str:
    return "unknown" if value is None else cost_text(value)


def _signed(delta: float | None, shown: Callable[[float | None], str]) -> str:
    if delta is None:
        return ""
    if delta == 0:
        return "="
    return ("+" if delta > 0 else "-") + shown(abs(delta))


def _error(error: dict[str, Any] | None) -> str:
    if not error:
        return "-"
    return f"{error.get('type')}: {error.get('message')}"


def add_diff_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """`agentq diff A B [--json]`, registered by the parser."""
    diff = command("diff", cmd_diff, "compare two jobs side by side: status, final output, state, calls matched by "
                   "tool and order, cost, duration (docs/compare.md)")
    diff.add_argument("a", metavar="A", help="the first job's id")
    diff.add_argument("b", metavar="B", help="the second job's id (a fork, a rerun, …)")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON (as the API's "
                      "/v1/jobs/{a}/diff/{b})")
