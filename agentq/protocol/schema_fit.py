"""A compiled check that a value conforms to a JSON Schema (`fit_for`), for the schemas most tools have.

jsonschema walks a schema keyword by keyword for every value it validates, building a validator per subschema and an
error object per problem; a submission of thousands of calls, or an agent's streamed solution, pays that for every
call. `fit_for` turns a schema into one function that looks at the value once. It answers True only where
jsonschema's Draft 2020-12 validator (format assertions off, as `validation.validator_for` builds it) finds the value
valid; False means "not known to fit": jsonschema then validates the value and words every problem. So the check may
be partial (a number type it does not know, a dict subclass, a `const` that is a list: False), never wrong.

A schema with a keyword this module does not check — `$ref`, `oneOf`, `not`, `if`, `patternProperties`,
`prefixItems`, `uniqueItems`, `multipleOf`, ... — gets no check (None), and so does a malformed one: jsonschema alone
validates its values. Keywords that only annotate (`description`, `title`, `default`, `format`, `x-...`) and those
jsonschema does not know are ignored, as jsonschema ignores them.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sized
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["Fit", "fit_for"]

Fit = Callable[[Any], bool]

_TYPES = Draft202012Validator.TYPE_CHECKER
_KEYWORDS = frozenset(Draft202012Validator.VALIDATORS)  # what jsonschema checks; other keys it ignores
_ANNOTATIONS = frozenset({"format"})  # checked by jsonschema only with a format checker, which agentq never gives
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties"})  # checked in one pass
# the Python types whose values are, for certain, of a JSON type (any other is asked of jsonschema's type checker)
_EXACT_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),),
    "object": (dict,), "array": (list,),
}
_SCALARS = (str, int, float, bool, type(None))


class _Unsupported(Exception):
    """The schema uses a keyword (or a form of one) this module does not check."""


def fit_for(schema: Any) -> Fit | None:
    """The compiled check of `schema`, or None when it uses a keyword not checked here (see the module)."""
    try:
        return _compile(schema)
    except (_Unsupported, TypeError, ValueError, RecursionError, re.error):
        return None


def _not_a(kind: type, value: Any) -> bool:
    """For a value whose type is not exactly `kind`: true when the keywords of `kind` do not apply to it (jsonschema's
    type checker takes a string, an object, an array by `isinstance`); false for a subclass of `kind`, which they
    apply to (left to jsonschema)."""
    return not isinstance(value, kind)


def _always(value: Any) -> bool:
    return True


def _never(value: Any) -> bool:
    return False


def _compile(schema: Any) -> Fit:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, Mapping):
        raise _Unsupported
    checks = [_type(schema["type"])] if "type" in schema else []
    if not _OBJECT_KEYWORDS.isdisjoint(schema):
        checks.append(_object(schema))
    for key, value in schema.items():
        check = _keyword(key, value, schema) if key in _KEYWORDS else None  # any other key jsonschema ignores
        if check is not None:
            checks.append(check)
    return _all(checks)


def _keyword(key: str, value: Any, schema: Mapping[str, Any]) -> Fit | None:
    """The check of one keyword jsonschema knows; None for one checked with others (`type`, the object keywords) or
    never asserted (`format`)."""
    if key in _BUILDERS:
        return _BUILDERS[key](value, schema)
    if key == "type" or key in _OBJECT_KEYWORDS or key in _ANNOTATIONS:
        return None
    raise _Unsupported


def _all(checks: list[Fit]) -> Fit:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def _type(expected: Any) -> Fit:
    names = [expected] if isinstance(expected, str) else list(expected) if isinstance(expected, list) else None
    if not names or any(not isinstance(name, str) or name not in _EXACT_TYPES for name in names):
        raise _Unsupported
    exact = tuple({t for name in names for t in _EXACT_TYPES[name]})

    def fits(value: Any) -> bool:
        if type(value) in exact:
            return True
        return any(_TYPES.is_type(value, name) for name in names)

    return fits


def _object(schema: Mapping[str, Any]) -> Fit:
    """`properties`, `required` and `additionalProperties` together: one pass over an object's keys."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list) or \
            not all(isinstance(name, str) for name in required):
        raise _Unsupported
    checks = {name: _compile(sub) for name, sub in properties.items()}
    others = _compile(schema["additionalProperties"]) if "additionalProperties" in schema else None
    if "patternProperties" in schema:
        raise _Unsupported

    def fits(value: Any) -> bool:
        if type(value) is not dict:
            return _not_a(dict, value)
        for name in required:
            if name not in value:
                return False
        for name, item in value.items():
            check = checks.get(name)
            if check is None:
                if others is not None and not others(item):
                    return False
            elif not check(item):
                return False
        return True

    return fits


def _const(expected: Any, schema: Mapping[str, Any]) -> Fit:
    if not isinstance(expected, _SCALARS):
        raise _Unsupported
    kind = type(expected)
    return lambda value: type(value) is kind and value == expected


def _enum(options: Any, schema: Mapping[str, Any]) -> Fit:
    if not isinstance(options, list) or not all(isinstance(option, _SCALARS) for option in options):
        raise _Unsupported
    allowed = {(type(option), option) for option in options}
    return lambda value: type(value) in _SCALAR_TYPES and (type(value), value) in allowed


_SCALAR_TYPES = frozenset(_SCALARS)


def _items(item_schema: Any, schema: Mapping[str, Any]) -> Fit:
    if "prefixItems" in schema:
        raise _Unsupported
    check = _compile(item_schema)

    def fits(value: Any) -> bool:
        if type(value) is not list:
            return _not_a(list, value)
        return all(check(item) for item in value)

    return fits


def _count(bound: Any) -> int:
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound != int(bound):
        raise _Unsupported
    return int(bound)


def _sized(kind: type[Sized], at_least: bool) -> Callable[[Any, Mapping[str, Any]], Fit]:
    """`minLength`/`maxLength` (strings), `minItems`/`maxItems` (arrays)."""

    def build(bound: Any, schema: Mapping[str, Any]) -> Fit:
        limit = _count(bound)

        def fits(value: Any) -> bool:
            if type(value) is not kind:
                return _not_a(kind, value)
            return len(value) >= limit if at_least else len(value) <= limit

        return fits

    return build


def _bounded(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Mapping[str, Any]], Fit]:
    """`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`: only numbers are compared."""

    def build(bound: Any, schema: Mapping[str, Any]) -> Fit:
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise _Unsupported

        def fits(value: Any) -> bool:
            kind = type(value)
            if kind is int or kind is float:
                return compare(value, bound)
            return isinstance(value, bool) or not isinstance(value, numbers.Number)  # not a JSON number

        return fits

    return build


def _pattern(expression: Any, schema: Mapping[str, Any]) -> Fit:
    if not isinstance(expression, str):
        raise _Unsupported
    search = re.compile(expression).search  # what jsonschema's `re.search(pattern, value)` compiles and caches

    def fits(value: Any) -> bool:
        if type(value) is str:
            return search(value) is not None
        return _not_a(str, value)

    return fits


def _any_of(branches: Any, schema: Mapping[str, Any]) -> Fit:
    if not isinstance(branches, list) or not branches:
        raise _Unsupported
    checks = [_compile(branch) for branch in branches]
    if _always in checks:
        return _always
    return lambda value: any(check(value) for check in checks)


def _all_of(branches: Any, schema: Mapping[str, Any]) -> Fit:
    if not isinstance(branches, list) or not branches:
        raise _Unsupported
    return _all([_compile(branch) for branch in branches])


_BUILDERS: dict[str, Callable[[Any, Mapping[str, Any]], Fit]] = {
    "const": _const,
    "enum": _enum,
    "items": _items,
    "minLength": _sized(str, at_least=True),
    "maxLength": _sized(str, at_least=False),
    "minItems": _sized(list, at_least=True),
    "maxItems": _sized(list, at_least=False),
    "minimum": _bounded(lambda value, bound: value >= bound),
    "maximum": _bounded(lambda value, bound: value <= bound),
    "exclusiveMinimum": _bounded(lambda value, bound: value > bound),
    "exclusiveMaximum": _bounded(lambda value, bound: value < bound),
    "pattern": _pattern,
    "anyOf": _any_of,
    "allOf": _all_of,
}
