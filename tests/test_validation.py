"""The shared validators (gpdlm_cli/validation.py): their verdicts and their one-line messages,
which the families' bad-input messages are built from."""

import math

import pytest

from gpdlm_cli.exceptions import ConfigError
from gpdlm_cli.validation import is_int, is_number, number_in, require_flag, require_float, require_int


def test_is_int_and_is_number_reject_bools_and_nan():
    assert is_int(3) and is_int(-1) and not is_int(True) and not is_int(3.0) and not is_int("3")
    assert is_number(3) and is_number(0.5) and is_number(math.inf)
    assert not is_number(False) and not is_number(math.nan) and not is_number("1") and not is_number(None)


@pytest.mark.parametrize(
    "value, lo, hi, lo_open, hi_open, expected",
    [
        (0.0, 0, 1, False, False, True),
        (0.0, 0, 1, True, False, False),
        (1.0, 0, 1, False, True, False),
        (1.0, 0, 1, False, False, True),
        (math.inf, 0, math.inf, False, True, False),
        (math.inf, 0, math.inf, False, False, True),
        (math.nan, 0, 1, False, False, False),
        (True, 0, 1, False, False, False),
        (-1e-300, 0, 1, False, False, False),
    ],
)
def test_number_in_respects_open_and_closed_ends(value, lo, hi, lo_open, hi_open, expected):
    assert number_in(value, lo, hi, lo_open=lo_open, hi_open=hi_open) is expected


def _message(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        fn(*args, **kw)
    return str(e.value)


def test_require_int_message_and_threshold():
    require_int({"k": 1}, "k", "model=x")
    require_int({"k": 0}, "k", "model=x", 0)
    assert (
        _message(require_int, {"k": 0}, "k", "model=x")
        == "the 'k' parameter of model=x must be an integer >= 1; got 0 instead"
    )
    assert (
        _message(require_int, {"k": 2.0}, "k", "model=x", 0)
        == "the 'k' parameter of model=x must be an integer >= 0; got 2.0 instead"
    )


def test_require_float_default_is_a_finite_positive_float():
    require_float({"s": 1e-12}, "s", "model=x")
    for bad in (0, -1.0, math.inf, math.nan, True, "1"):
        assert (
            _message(require_float, {"s": bad}, "s", "model=x")
            == f"the 's' parameter of model=x must be a finite float in (0, inf); got {bad!r} instead"
        )
    assert "a float in [0, 1]" in _message(require_float, {"s": 2}, "s", "o", 0, 1, lo_open=False, hi_open=False)
    assert "a probability" in _message(require_float, {"s": 2}, "s", "o", 0, 1, allowed="a probability")


def test_require_flag_takes_only_bools():
    require_flag({"f": False}, "f", "model=x")
    assert (
        _message(require_flag, {"f": 1}, "f", "model=x")
        == "the 'f' parameter of model=x must be true or false; got 1 instead"
    )
