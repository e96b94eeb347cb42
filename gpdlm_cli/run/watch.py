"""Watched monitors: a warning when a family's monitored objective *falls* over the second half of a run.

A stochastic optimiser whose step size is too large for its problem can make the very objective it
ascends fall while the run looks normal (issue 40: sVBSSGP at lr 1e-2 on the airline stand-in, ELBO
per datum -1.327 at epoch 5 -> -1.358 at epoch 45, while the variational covariance random-walked).
``falls`` tests the monitor's curve for that: over the later half of its evaluation points (at least
``min_points``), the least-squares slope against the step must be negative (positive for a monitor
that is minimised) by more than ``z`` standard errors, and the fitted change over that half larger
than ``tol`` (in the monitor's own units, e.g. nats per datum). The run then gets a warning on stderr
and in its log, and the tag ``gpdlm.warning.<monitor>`` (``run.train``); its results are not changed.
"""

from __future__ import annotations

import math

TOL = 1e-3
Z = 3.0
MIN_POINTS = 4


def falls(points, *, higher_is_better: bool = True, tol: float = TOL, z: float = Z,
          min_points: int = MIN_POINTS) -> dict | None:
    """``points``: (step, value) pairs in step order. None if the later half does not fall
    significantly (or is too short), else {first, last, from_step, to_step, change, t}: the fitted
    values at both ends of the later half, its fitted change (negative: got worse) and the slope's
    t statistic (negative: got worse)."""
    pts = [(float(s), float(v)) for s, v in points if math.isfinite(float(v))]
    late = pts[len(pts) // 2:]
    if len(late) < min_points:
        return None
    sign = 1.0 if higher_is_better else -1.0
    xs = [s for s, _ in late]
    ys = [sign * v for _, v in late]
    n = len(late)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    resid = [y - (my + b * (x - mx)) for x, y in zip(xs, ys)]
    se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx) if n > 2 else float("inf")
    change = b * (xs[-1] - xs[0])
    t = b / se if se > 0 else (-math.inf if b < 0 else math.inf)
    if change < -tol and t < -z:
        a0, a1 = my + b * (xs[0] - mx), my + b * (xs[-1] - mx)
        return {"first": sign * a0, "last": sign * a1, "from_step": xs[0], "to_step": xs[-1],
                "change": change, "t": t}
    return None


def message(name: str, found: dict) -> str:
    """The one-line warning for a monitor that fell."""
    return (f"{name} got worse over the second half of training: {found['first']:.4g} -> {found['last']:.4g} "
            f"(fitted, steps {found['from_step']:.0f}-{found['to_step']:.0f}, t = {found['t']:.1f}); the optimiser's "
            f"step size may be too large for this problem (e.g. trainer.lr)")
