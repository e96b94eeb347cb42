"""The shared config validators: type tests and range checks that raise one-line ``ConfigError``s.

Families, ``build.py`` and the data layer check config values with these (one home instead of a
copy per module). Messages have scikit-learn's shape (:func:`param_error`): which parameter, of
what, the allowed values, the value received. Standard library only, so any layer may import it.
"""

from __future__ import annotations

import math

from .exceptions import param_error


def is_number(v) -> bool:
    """A real number (not a bool, not NaN)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def is_int(v) -> bool:
    """An integer (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool)


def number_in(value, lo, hi, *, lo_open: bool = False, hi_open: bool = False) -> bool:
    """Whether ``value`` is a number (:func:`is_number`) in the interval from ``lo`` to ``hi``
    (closed ends unless ``lo_open``/``hi_open``)."""
    if not is_number(value):
        return False
    above = value > lo if lo_open else value >= lo
    below = value < hi if hi_open else value <= hi
    return above and below


def require_int(node, key: str, owner: str, low: int = 1) -> None:
    """``node[key]`` must be an integer >= ``low``."""
    v = node[key]
    if not is_int(v) or v < low:
        raise param_error(key, owner, f"an integer >= {low}", v)


def require_float(
    node,
    key: str,
    owner: str,
    lo: float = 0.0,
    hi: float = math.inf,
    *,
    lo_open: bool = True,
    hi_open: bool = True,
    allowed: str | None = None,
) -> None:
    """``node[key]`` must be a number in the interval from ``lo`` to ``hi`` (open ends by default:
    a finite float in (0, inf)); ``allowed`` overrides the message's description of the interval."""
    v = node[key]
    if not number_in(v, lo, hi, lo_open=lo_open, hi_open=hi_open):
        if allowed is None:
            finite = "finite " if hi == math.inf and hi_open else ""
            allowed = f"a {finite}float in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise param_error(key, owner, allowed, v)


def require_flag(node, key: str, owner: str) -> None:
    """``node[key]`` must be true or false."""
    if not isinstance(node[key], bool):
        raise param_error(key, owner, "true or false", node[key])


__all__ = ["is_int", "is_number", "number_in", "param_error", "require_flag", "require_float", "require_int"]
