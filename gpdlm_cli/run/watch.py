"""Watched monitors: a warning when a family's monitored objective ends clearly below its best.

A stochastic optimiser whose step size is too large for its problem can make the very objective it
ascends fall while the run looks normal (issue 40: sVBSSGP at lr 1e-2 on the airline stand-in, ELBO
per datum -1.326 around epoch 8 -> -1.35 over the last epochs, while the variational covariance
random-walked). ``falls`` compares window means of the monitor's curve (evaluation points in step
order; windows of w = max(3, n // 8) consecutive points): the best window against the last one. It
flags the curve when the last window is worse than the best by more than ``tol`` (in the monitor's
own units, e.g. nats per datum) and by more than ``z`` standard errors of a difference of two window
means, sigma sqrt(2 / w), with the point-to-point noise sigma estimated robustly from successive
differences (1.4826 MAD / sqrt 2: a steady trend and a few jumps do not inflate it). z = 4 allows for
picking the best of several windows. The run then gets a warning on stderr and in its log, and the
tag ``gpdlm.warning.<monitor>`` (``run.train``); its results are not changed.
"""

from __future__ import annotations

import math
import statistics

TOL = 1e-3
Z = 4.0


def falls(points, *, higher_is_better: bool = True, tol: float = TOL, z: float = Z) -> dict | None:
    """``points``: (step, value) pairs in step order. None if the curve does not end clearly below its
    best window (or has fewer than two windows), else {best, last, best_step, last_step, change, z}: the
    two window means (in the monitor's own sign), the steps at their ends, their difference (negative:
    got worse) and that difference in standard errors."""
    pts = [(float(s), float(v)) for s, v in points if math.isfinite(float(v))]
    n = len(pts)
    w = max(3, n // 8)
    if n < 2 * w:
        return None
    sign = 1.0 if higher_is_better else -1.0
    ys = [sign * v for _, v in pts]
    means = [statistics.fmean(ys[i : i + w]) for i in range(n - w + 1)]
    best_i = max(range(len(means) - w + 1), key=means.__getitem__)  # a window that ends before the last one starts
    best, last = means[best_i], means[-1]
    d = [b - a for a, b in zip(ys, ys[1:])]
    md = statistics.median(d)
    sigma = 1.4826 * statistics.median(abs(x - md) for x in d) / math.sqrt(2)
    se = sigma * math.sqrt(2 / w)
    change = last - best
    score = change / se if se > 0 else (-math.inf if change < 0 else 0.0)
    if change < -tol and score < -z:
        return {
            "best": sign * best,
            "last": sign * last,
            "best_step": pts[best_i + w - 1][0],
            "last_step": pts[-1][0],
            "change": change,
            "z": score,
        }
    return None


def message(name: str, found: dict) -> str:
    """The one-line warning for a monitor that fell."""
    z = "" if math.isinf(found["z"]) else f", {-found['z']:.1f} standard errors"
    return (
        f"{name} ended below its best: {found['best']:.4g} (mean of the window ending at step "
        f"{found['best_step']:.0f}) -> {found['last']:.4g} (the last window{z}); the optimiser's step size may be "
        f"too large for this problem (e.g. trainer.lr)"
    )
