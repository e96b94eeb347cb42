"""The vocabulary of gpdlm's config schema: a key's type, range, choices and help, declared once.

A config group's schema is a frozen dataclass whose fields are made with the helpers below
(``integer``, ``real``, ``flag``, ``choice``, ``text``, ``anything``); each field carries a ``Rule``
in its metadata. ``parse(node, Schema, owner)`` checks a config node against the schema and returns
the typed, validated instance (the *spec* a library module receives): the first value that breaks
its rule raises a one-line ``ConfigError`` in scikit-learn's shape naming the key, its owner, what
is allowed and the value received::

    the 'lr' parameter of trainer must be a finite float > 0 or null; got -1 instead

The same rules write the key tables of docs/configuration.md (``describe``, ``Rule.kind_text``), so
the message a user gets and the page they read cannot disagree. Cross-key rules (L-BFGS needs the
full batch, ...) are the schema's ``check()`` method, run after every key passed. Standard library
only (any layer may declare a schema).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ..exceptions import param_error
from ..validation import is_int, is_number

T = TypeVar("T")


@dataclass(frozen=True)
class Rule:
    """What one key accepts.

    * ``kind``: int | float | bool | choice | str | list | map | any;
    * ``lo``/``hi`` (numbers; ``lo_open``/``hi_open`` for open ends); ``choices`` (kind choice);
    * ``null``: null is allowed (a string says what null means: "an integer >= 1 or null (one epoch)");
    * ``when``: ``(sibling, value)``: the key is checked only when the sibling key has that value, and
      the message's owner names it (``trainer (schedule=step)``); ``context``: a note added to the
      owner without a condition (``trainer (sgd)``);
    * ``allowed``: the message's description of what is allowed, where the generated one
      (``describe``) is not the right words; ``test``: an extra predicate (``kind`` any or list);
    * ``help``: one line for the configuration reference.
    """

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple | None = None
    null: bool | str = False
    when: tuple[str, Any] | None = None
    context: str | None = None
    allowed: str | None = None
    test: Callable[[Any], bool] | None = None
    help: str = ""

    def accepts(self, v) -> bool:
        """Whether ``v`` satisfies the rule."""
        if v is None:
            return bool(self.null) or self.kind == "any"
        if self.kind == "int":
            ok = is_int(v) and self._in_range(v)
        elif self.kind == "float":
            ok = is_number(v) and self._in_range(v)
        elif self.kind == "bool":
            ok = isinstance(v, bool)
        elif self.kind == "choice":
            ok = isinstance(v, (str, int, float)) and not isinstance(v, bool) and v in (self.choices or ())
        elif self.kind == "str":
            ok = isinstance(v, str) and bool(v)
        elif self.kind == "list":
            ok = isinstance(v, Sequence) and not isinstance(v, str)
        elif self.kind == "map":
            ok = isinstance(v, Mapping)
        else:
            ok = True
        return ok and (self.test is None or bool(self.test(v)))

    def _in_range(self, v) -> bool:
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def describe(self) -> str:
        """What is allowed, in the words of the error message."""
        if self.allowed is not None:
            return self.allowed
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(str(c) for c in self.choices or ())
        elif self.kind in ("int", "float"):
            text = _range_text(self)
        elif self.kind == "str":
            text = "a non-empty string"
        elif self.kind == "list":
            text = "a list"
        elif self.kind == "map":
            text = "a mapping"
        else:
            text = "any value"
        if self.null:
            text += " or null" + (f" ({self.null})" if isinstance(self.null, str) else "")
        return text

    def kind_text(self) -> str:
        """The type column of the configuration reference (``int``, ``float``, ``bool``, ...)."""
        name = {"choice": "choice", "str": "string", "map": "mapping", "any": "any"}.get(self.kind, self.kind)
        return name + (" | null" if self.null else "")


def _range_text(r: Rule) -> str:
    word = "an integer" if r.kind == "int" else "a float"
    lo, hi = r.lo, r.hi
    if r.kind == "float" and (hi is None or math.isinf(hi)):
        word = "a finite float"
    if lo is None and hi is None:
        return word
    if hi is None:
        return f"{word} {'>' if r.lo_open else '>='} {_num(lo)}"
    if lo is None:
        return f"{word} {'<' if r.hi_open else '<='} {_num(hi)}"
    return f"{word} in {'(' if r.lo_open else '['}{_num(lo)}, {_num(hi)}{')' if r.hi_open else ']'}"


def _num(v) -> str:
    return format(v, "g")


def _field(default, rule: Rule):
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"rule": rule})
    return field(default=default, metadata={"rule": rule})


def integer(default, *, lo=None, hi=None, null: bool | str = False, help: str = "", **kw):
    """An integer key in [lo, hi] (either end may be None)."""
    return _field(default, Rule("int", lo=lo, hi=hi, null=null, help=help, **kw))


def real(default, *, lo=None, hi=None, lo_open=False, hi_open=False, null: bool | str = False, help: str = "", **kw):
    """A real-valued key (an int is accepted) in the interval lo..hi (closed ends unless ``*_open``)."""
    return _field(default, Rule("float", lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, null=null, help=help, **kw))


def flag(default: bool, *, help: str = "", **kw):
    """A true/false key."""
    return _field(default, Rule("bool", help=help, **kw))


def choice(default, choices: Sequence, *, help: str = "", **kw):
    """A key that takes one of ``choices``."""
    return _field(default, Rule("choice", choices=tuple(choices), help=help, **kw))


def text(default, *, help: str = "", **kw):
    """A string key (non-empty unless ``null``)."""
    return _field(default, Rule("str", help=help, **kw))


def listing(default, *, help: str = "", **kw):
    """A list key (``test`` checks its items)."""
    return _field(default, Rule("list", help=help, **kw))


def mapping(default, *, help: str = "", **kw):
    """A mapping key (``test`` checks its values)."""
    return _field(default, Rule("map", help=help, **kw))


def anything(default, *, help: str = "", **kw):
    """A key whose values its reader checks (free-form)."""
    return _field(default, Rule("any", help=help, **kw))


def nested(schema: type, context: str, *, help: str = ""):
    """A sub-group of keys (``model.network``): checked against ``schema``, its errors owned by
    ``<owner> (<context>)`` (``model=gp_lstm (network)``)."""
    return field(default_factory=schema, metadata={"nested": schema, "context": context, "help": help})


def rule_of(f: dataclasses.Field) -> Rule | None:
    return f.metadata.get("rule")


def plain(v):
    """A config value as plain Python (mappings to dicts, sequences to lists): what a spec holds."""
    if isinstance(v, Mapping):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, Sequence) and not isinstance(v, (str, bytes)):
        return [plain(x) for x in v]
    return v


def parse(node: Mapping | None, schema: type[T], owner: str, *, check: bool = True) -> T:
    """The spec ``schema`` of config ``node`` (checked key by key, then ``schema.check()`` unless
    ``check=False``: the caller runs the cross-key rules later, in its own order).

    A key the node does not set takes the schema's default; keys the schema does not declare are
    kept in ``extra`` when the schema has such a field (options a loader checks itself), else ignored."""
    node = node if node is not None else {}
    values: dict[str, Any] = {}
    names = set()
    for f in dataclasses.fields(cast(Any, schema)):
        names.add(f.name)
        if f.name == "extra" or not f.init:
            continue
        if f.name in node:
            sub = f.metadata.get("nested")
            if sub is not None:
                inner = node[f.name]
                if not isinstance(inner, Mapping):
                    raise param_error(f.name, owner, "a mapping of keys", plain(inner))
                values[f.name] = parse(inner, sub, f"{owner} ({f.metadata['context']})")
            else:
                values[f.name] = plain(node[f.name])
    for f in dataclasses.fields(cast(Any, schema)):
        rule = rule_of(f)
        if rule is None or f.name not in values:
            continue
        v = values[f.name]
        where = owner
        if rule.when is not None:
            sibling, wanted = rule.when
            if _value(values, schema, sibling) != wanted:
                continue
            where = f"{owner} ({sibling}={wanted})"
        elif rule.context:
            where = f"{owner} ({rule.context})"
        if not rule.accepts(v):
            raise param_error(f.name, where, rule.describe(), v)
    if "extra" in names:
        values["extra"] = {str(k): plain(v) for k, v in node.items() if str(k) not in names}
    spec = schema(**values)
    rules = getattr(spec, "check", None)
    if check and callable(rules):
        rules()
    return spec


def _value(values: dict, schema: type, key: str):
    if key in values:
        return values[key]
    for f in dataclasses.fields(cast(Any, schema)):
        if f.name == key:
            return f.default if f.default is not dataclasses.MISSING else None
    return None


def describe(schema: type) -> dict[str, Rule]:
    """``{key: Rule}`` of a schema, in declaration order (the configuration reference)."""
    return {f.name: r for f in dataclasses.fields(schema) if (r := rule_of(f)) is not None}


__all__ = [
    "Rule",
    "anything",
    "as_spec",
    "choice",
    "describe",
    "flag",
    "integer",
    "listing",
    "mapping",
    "nested",
    "parse",
    "plain",
    "real",
    "rule_of",
    "text",
]


def as_spec(value, schema: type[T], owner: str) -> T:
    """``value`` when it is already a ``schema`` instance, else ``parse(value, schema, owner)``: a
    builder's entry point takes its spec (or, from older callers, the config node it is made of)."""
    return value if isinstance(value, schema) else parse(value, schema, owner)
