"""The statistics of ``gpdlm report``: paired tests over shared seeds or splits, and ranks.

Differences are oriented so that negative means "a is better": d_u = s (a_u - b_u) over the units u
(seeds or splits) both cells have, with s = +1 when lower is better and -1 when higher is better.

* ``better``: H0 mean(d) >= 0 against H1 mean(d) < 0 (one-sided);
* ``not_worse`` (non-inferiority within margin delta): H0 mean(d) >= delta against H1 mean(d) < delta;
* ``equivalent`` (TOST, Schuirmann 1987): both H0 mean(d) <= -delta and H0 mean(d) >= delta rejected;
  its p-value is the larger of the two one-sided p-values.

Tests: ``ttest`` (the paired t-test, ``scipy.stats.ttest_1samp`` on the differences, shifted by the
margin) or ``wilcoxon`` (the Wilcoxon signed-rank test, ``scipy.stats.wilcoxon``, exact for small n;
with 5 units its smallest one-sided p-value is 1/32). A claim over several comparisons ("at every
training size") holds when every comparison is significant: the intersection-union test, valid at
level alpha without a multiplicity correction, whose p-value is the largest of the comparisons'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

TEST_NAMES = {"ttest": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test"}


@dataclass
class TestResult:
    n: int
    mean_diff: float  # mean of d (negative: a better)
    p: float | None  # None: not testable (n < 2)


def _one_sided(d: list[float], test: str, alternative: str) -> float:
    """p-value of H1 mean(d) < 0 ('less') or > 0 ('greater'); degenerate samples (all
    differences equal) give 0 when the inequality holds strictly for them, else 1."""
    import numpy as np
    from scipy import stats

    x = np.asarray(d, dtype=float)
    if np.ptp(x) == 0.0:  # no spread: the tests are undefined; the sign decides
        ok = x[0] < 0 if alternative == "less" else x[0] > 0
        return 0.0 if ok else 1.0
    if test == "ttest":
        return float(stats.ttest_1samp(x, 0.0, alternative=alternative).pvalue)
    if test == "wilcoxon":
        if np.all(x == 0):
            return 1.0
        return float(stats.wilcoxon(x, alternative=alternative).pvalue)
    raise ValueError(f"unknown test {test!r}")


def oriented_differences(a: dict, b: dict, goal: str) -> tuple[list, list[float]]:
    """(units, d) over the units both a and b have ({unit: value}), d = s (a - b) with s = +1 for
    goal 'min' and -1 for 'max'."""
    units = sorted((u for u in a if u in b and _finite(a[u]) and _finite(b[u])), key=repr)
    s = 1.0 if goal == "min" else -1.0
    return units, [s * (a[u] - b[u]) for u in units]


def compare(kind: str, a: dict, b: dict, goal: str, test: str, margin: float | None = None) -> TestResult:
    """The paired test of a claim of ``kind`` between cells a and b ({unit: value})."""
    _, d = oriented_differences(a, b, goal)
    n = len(d)
    if n < 2:
        return TestResult(n, sum(d) / n if n else math.nan, None)
    mean = sum(d) / n
    if kind in ("better", "argmin"):
        p = _one_sided(d, test, "less")
    elif kind in ("not_worse", "equivalent"):
        if margin is None:  # the claims loader requires one for these kinds
            raise ValueError(f"kind {kind!r} needs a margin")
        delta = margin
        if kind == "not_worse":
            p = _one_sided([x - delta for x in d], test, "less")
        else:
            p = max(
                _one_sided([x + delta for x in d], test, "greater"), _one_sided([x - delta for x in d], test, "less")
            )
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return TestResult(n, mean, p)


def average_ranks(rows: list[list[float | None]], goal: str) -> tuple[list[float | None], int]:
    """Average rank of each method (1 = best; ties get their mean rank) over the complete rows:
    those where every method that has any value has one. (ranks, number of rows used)."""
    import numpy as np
    from scipy import stats

    if not rows:
        return [], 0
    k = len(rows[0])
    present = [j for j in range(k) if any(r[j] is not None and _finite(r[j]) for r in rows)]
    complete = [r for r in rows if all(r[j] is not None and _finite(r[j]) for j in present)]
    if not present or not complete:
        return [None] * k, 0
    s = 1.0 if goal == "min" else -1.0
    ranks = np.array([stats.rankdata([s * cast(float, r[j]) for j in present]) for r in complete])  # finite
    mean = ranks.mean(axis=0)
    out: list[float | None] = [None] * k
    for i, j in enumerate(present):
        out[j] = float(mean[i])
    return out, len(complete)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
