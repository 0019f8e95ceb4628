"""No function of agentq has a cyclomatic complexity above 15, and one above 10 says why its branches belong
together in a comment on the line above its `def` (or its first decorator) or on the `def` line itself.

The count is McCabe's as radon computes it (`radon cc`), so the two agree: a function starts at 1 and adds one
for each `if`, conditional expression, `for`, `while` (and one more for a loop's `else`), `except` handler (and
one for a `try`'s `else`), `assert`, comprehension `for` and its `if`s, each operand of `and`/`or` after the
first, and each `match` case but a wildcard one. What a nested function or class holds counts for that one,
not for its enclosing function; a lambda's branches count for the function it is in. A class counts as radon
shows it: 1 plus the branches of its body and its methods' complexities, divided by its number of methods
(plus one when it has several).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

AGENTQ = Path(__file__).resolve().parents[2] / "agentq"

EXPLAINED = 10  # above this, the function says why in a comment
LIMIT = 15  # above this, not at all

_Def = ast.FunctionDef | ast.AsyncFunctionDef


def _branches(node: ast.AST) -> int:
    """The decision points `node` adds by itself (radon's `ComplexityVisitor.generic_visit`)."""
    match node:
        case ast.If() | ast.IfExp() | ast.Assert():
            return 1
        case ast.For() | ast.AsyncFor() | ast.While():
            return 1 + bool(node.orelse)
        case ast.Try() | ast.TryStar():
            return len(node.handlers) + bool(node.orelse)
        case ast.BoolOp():
            return len(node.values) - 1
        case ast.comprehension():
            return 1 + len(node.ifs)
        case ast.Match():
            wildcard = any(isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None
                           for case in node.cases)
            return max(0, len(node.cases) - wildcard)
    return 0


def _inner(node: ast.AST) -> int:
    """The decision points under `node`, itself included, leaving out nested functions and classes."""
    if isinstance(node, _Def | ast.ClassDef):
        return 0
    return _branches(node) + sum(_inner(child) for child in ast.iter_child_nodes(node))


def complexity(node: _Def) -> int:
    return 1 + sum(_inner(statement) for statement in node.body)


def class_complexity(node: ast.ClassDef) -> int:
    methods = [statement for statement in node.body if isinstance(statement, _Def)]
    real = 1 + sum(_inner(statement) for statement in node.body) + sum(map(complexity, methods))
    return real // len(methods) + (len(methods) > 1) if methods else real


@dataclass(frozen=True)
class Block:
    where: str  # path:line name
    complexity: int
    explained: bool


def _comment_lines(source: str) -> set[int]:
    return {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT}


def blocks(source: str, name: str) -> list[Block]:
    """Every function, method and class of a module's source with its complexity and whether a comment explains
    it (`name` says where it is)."""
    comments = _comment_lines(source)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, _Def):
            score = complexity(node)
        elif isinstance(node, ast.ClassDef):
            score = class_complexity(node)
        else:
            continue
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        explained = first - 1 in comments or node.lineno in comments
        found.append(Block(f"{name}:{node.lineno} {node.name}", score, explained))
    return found


ALL = [block for path in sorted(AGENTQ.rglob("*.py"))
       for block in blocks(path.read_text(encoding="utf-8"), str(path.relative_to(AGENTQ.parent)))]


def test_no_function_is_above_the_limit():
    assert [(b.where, b.complexity) for b in ALL if b.complexity > LIMIT] == []


def test_a_function_above_ten_says_why_its_branches_belong_together():
    assert [(b.where, b.complexity) for b in ALL if b.complexity > EXPLAINED and not b.explained] == []


def _scores(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    return {node.name: complexity(node) if isinstance(node, _Def) else class_complexity(node)
            for node in ast.walk(tree) if isinstance(node, _Def | ast.ClassDef)}


def test_the_count_is_radons():
    """Each construct adds what radon adds (the values `radon cc -s` prints for these functions)."""
    source = '''
def plain():
    return 1

def branches(a, b, xs):
    if a and b or not xs:
        pass
    elif a:
        pass
    for x in xs:
        continue
    else:
        pass
    while a:
        break
    try:
        pass
    except ValueError:
        pass
    except KeyError:
        pass
    else:
        pass
    finally:
        pass
    assert b
    with open(a):
        pass
    return [y for y in xs if y if not y] + [1 if a else 2]

def matching(value):
    match value:
        case 1:
            return 1
        case [x]:
            return x
        case _:
            return 0

def capture(value):
    match value:
        case 1:
            return 1
        case other:
            return other

def outer(a):
    def inner(b):
        if b:
            return 1
        return 2
    handler = lambda c: 1 if c else 2
    return inner(a) if a else handler(a)

class One:
    x = [i for i in range(3)]

    def only(self, a):
        if a:
            return 1
        return 2

class Two:
    def first(self, a):
        return 1 if a else 2

    def second(self, a):
        if a or not a:
            return 1
        return 2
'''
    assert _scores(source) == {"plain": 1, "branches": 16, "matching": 3, "capture": 2, "outer": 3, "inner": 2,
                               "One": 4, "only": 2, "Two": 4, "first": 2, "second": 3}


def test_a_comment_above_a_decorator_or_on_the_def_line_explains():
    body = "".join(f"    if a == {i}:\n        return {i}\n" for i in range(11)) + "    return -1\n"
    source = ("# one branch per value\n@staticmethod\ndef above(a):\n" + body
              + "\ndef on_the_line(a):  # one branch per value\n" + body
              + "\n# a comment that is not directly above\n\ndef unexplained(a):\n" + body)
    found = {b.where.rsplit(" ", 1)[1]: (b.complexity, b.explained) for b in blocks(source, "probe.py")}
    assert found == {"above": (12, True), "on_the_line": (12, True), "unexplained": (12, False)}
