"""The checks the type checker asked for (issue 46 item 6): where a loader guarantees a value (a claim's
margin, an 'auto' dimension's key, a numeric label), a value that is missing anyway is one clear error,
not a TypeError from deep inside the arithmetic or a silently wrong cell."""

from __future__ import annotations

import pytest

from gpdlm_cli.analysis import stats
from gpdlm_cli.analysis.claims import Dimension, Label
from gpdlm_cli.analysis.records import AnalysisError

A = {"s0": 1.0, "s1": 2.0, "s2": 3.0}
B = {"s0": 1.5, "s1": 2.0, "s2": 3.75}


@pytest.mark.parametrize("kind", ["not_worse", "equivalent"])
def test_a_margin_claim_without_a_margin_is_refused(kind):
    with pytest.raises(ValueError, match=f"kind '{kind}' needs a margin"):
        stats.compare(kind, A, B, "min", "ttest", margin=None)


def test_margin_claims_compute_as_before():
    # d = a - b = (-0.5, 0, -0.75): with margin 1 both one-sided tests are clear
    r = stats.compare("not_worse", A, B, "min", "ttest", margin=1.0)
    assert (r.n, r.mean_diff) == (3, pytest.approx(-1.25 / 3))
    assert r.p == pytest.approx(stats._one_sided([-1.5, -1.0, -1.75], "ttest", "less"))
    e = stats.compare("equivalent", A, B, "min", "ttest", margin=1.0)
    hi = stats._one_sided([0.5, 1.0, 0.25], "ttest", "greater")
    assert e.p == pytest.approx(max(hi, r.p))


def test_an_auto_dimension_without_a_key_is_refused():
    assert Dimension("n", "dataset.train_size", None).label("500") == Label("500", {"dataset.train_size": 500})
    with pytest.raises(AnalysisError, match="dimension 'n': values 'auto' needs a key"):
        Dimension("n", None, None).label("500")


def test_numeric_labels():
    from gpdlm_cli.analysis.render import _number

    assert _number("500") == 500.0 and _number("0.25") == 0.25
    with pytest.raises(ValueError, match="label 'svgp' is not a number"):
        _number("svgp")
