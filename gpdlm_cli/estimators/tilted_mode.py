"""The mode and Laplace width of the tilted density q(f) p(y|f), for any variance of q.

With q(f) = N(f | mu, var) and a log-concave likelihood, the log tilted density

    T(f) = log N(f | mu, var) + log p(y|f),      T'(f) = -(f - mu)/var + d/df log p(y|f)

is strictly concave, so its mode c is the one root of the strictly decreasing T'. Adaptive
Gauss-Hermite quadrature centres its nodes at c with the Laplace variance s2 = -1/T''(c), and uPS's
tight envelope puts its tangents around them: a wrong c makes both silently wrong (a Poisson count
under a wide q: hundreds of nats off).

The root is found by a safeguarded Newton iteration that keeps a bracket [lo, hi], T'(lo) >= 0 >= T'(hi):

* **Initial bracket, provable from concavity alone.** With d0 = T'(mu) = d/df log p(y|mu) > 0, the
  likelihood gradient can only fall to the right of mu, so T'(f) <= -(f - mu)/var + d0 < 0 beyond
  mu + var d0; and T' < 0 beyond the likelihood's own mode. Hence c lies in
  [mu, min(mu + var d0, mode(y))]; symmetrically for d0 < 0. Both ends are evaluated.
* **Each iteration** forms the Newton step from *both* ends of the bracket (one of them converges
  monotonically whichever the sign of T'''), keeps those that stay in the half of the bracket next
  to their own end, and evaluates the shorter one; if neither qualifies, the midpoint. The new point
  replaces the end of the same sign of T'. For a Poisson count y under q = N(0, 36) this starts from
  the mode log y, where the old plain Newton from mu overshot to mu + 1 + 3 sd and needed far more
  than its 12 steps to come back (DLM review, F1).
* **Convergence**: a Newton decrement |T'(x)| s(x) <= tol at an evaluated point, i.e. a Newton step
  below tol Laplace standard deviations s = (-T'')^(-1/2) (tol = 1e-4 in float64, 8 sqrt(machine
  epsilon) = 2.8e-3 in float32), or a bracket of a few ulps. The centre returned is the better end
  plus its Newton step (error ~ tol^2 s; Gauss-Hermite does not notice centre errors of that size),
  and s2 the Laplace variance there.
  On the CPU the loop stops as soon as every point has converged. On an accelerator it runs
  ``newton_iters`` iterations before it reads a single flag (one host synchronisation per call),
  and continues only if some point is still open.
* **Points still open after ``newton_iters``** are counted (``TiltedLaplace.unconverged``; the
  estimators report the total as ``quadrature_unconverged``) and finished by the same iteration
  with every other step a bisection, so the bracket halves at least every two steps. A point whose
  bracket still does not close within ``max_iters`` raises ``NumericalError`` naming it. Points with
  a non-finite y, mu or var (or var <= 0) are passed through as NaN for the caller's own checks.

The result is returned detached: both estimators use (c, s2) as a fixed centre.

``tail_laplace`` runs the same iteration (``_bracketed_newton``) on the quadrature's tail rule, whose
integrand rho(e) Phi((e - shift)/sd) is log-concave too (``quadrature`` module doc), from a bracket
proved in its docstring.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..exceptions import NumericalError

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class TiltedLaplace(NamedTuple):
    """Mode ``centre`` and Laplace variance ``var`` of q(f) p(y|f) per point, and ``unconverged``: how
    many points needed more than ``newton_iters`` iterations (a 0-dim tensor on the input's device)."""

    centre: torch.Tensor
    var: torch.Tensor
    unconverged: torch.Tensor


def _slope_and_curvature(lik, y, mu, inv_var, f):
    """T'(f) and -T''(f) > 0 of the log tilted density."""
    d1, d2 = lik.log_prob_derivatives(y, f)
    return d1 - (f - mu) * inv_var, inv_var - torch.fmin(d2, d2.new_zeros(()))  # d2 <= 0 (NaN: 0)


@torch.no_grad()
def tilted_laplace(
    lik, y, mu, var, newton_iters: int = 8, max_iters: int = 200, check_every_iteration: bool | None = None
) -> TiltedLaplace:
    """Mode c and Laplace variance s2 = -1/T''(c) of q(f) p(y|f), q = N(mu, var) (module doc).

    ``check_every_iteration`` (default: on the CPU only) tests convergence after every iteration
    instead of first after ``newton_iters``; the result is the same up to the extra iterations."""
    y, mu, var = torch.broadcast_tensors(y.detach(), mu.detach(), var.detach())
    eps = torch.finfo(mu.dtype).eps
    tol2 = max(1e-4, 8.0 * eps**0.5) ** 2
    ok_input = torch.isfinite(y) & torch.isfinite(mu) & torch.isfinite(var) & (var > 0)
    inv_var = 1.0 / var

    # the bracket from concavity: [mu, min(mu + var d0, mode)] for d0 > 0, mirrored for d0 < 0
    d0, d2 = lik.log_prob_derivatives(y, mu)
    c0 = inv_var - torch.fmin(d2, d2.new_zeros(()))
    mode = lik.mode(y).to(mu.dtype).expand_as(mu)
    up = d0 > 0
    far = torch.where(
        up, torch.minimum(mu + var * d0, mode).clamp_min(mu), torch.maximum(mu + var * d0, mode).clamp_max(mu)
    )  # clamps: keep lo <= hi
    far = torch.where(d0 == 0, mu, far)
    g_far, c_far = _slope_and_curvature(lik, y, mu, inv_var, far)
    # the ends: lo with T' >= 0 and hi with T' <= 0, each with T' (g) and the curvature c = -T'' > 0
    lo, g_lo, c_lo = torch.where(up, mu, far), torch.where(up, d0, g_far), torch.where(up, c0, c_far)
    hi, g_hi, c_hi = torch.where(up, far, mu), torch.where(up, g_far, d0), torch.where(up, c_far, c0)
    done = (g_far * g_far <= c_far * tol2) | (d0 * d0 <= c0 * tol2) | ~ok_input

    def slope_and_curvature(f):
        return _slope_and_curvature(lik, y, mu, inv_var, f)

    centre, s2, unconverged = _bracketed_newton(
        slope_and_curvature,
        (lo, g_lo, c_lo),
        (hi, g_hi, c_hi),
        done,
        tol2,
        newton_iters,
        max_iters,
        check_every_iteration,
        lambda lo, hi, done: _raise_unconverged(y, mu, var, lo, hi, done),
    )
    nan = torch.full_like(centre, float("nan"))
    return TiltedLaplace(torch.where(ok_input, centre, nan), torch.where(ok_input, s2, nan), unconverged)


_INV_MILLS_0 = math.sqrt(2.0 / math.pi)  # phi(0) / Phi(0)


def _inv_mills(z):
    """phi(z) / Phi(z), in log space (finite for very negative z)."""
    return torch.exp(-0.5 * z * z - _LOG_SQRT_2PI - torch.special.log_ndtr(z))


@torch.no_grad()
def tail_laplace(
    noise, shift, var, newton_iters: int = 8, max_iters: int = 200, check_every_iteration: bool | None = None
) -> TiltedLaplace:
    """Mode c and Laplace variance of the tail rule's integrand rho(e) Phi((e - shift) / sd), sd = var^(1/2)
    (``NoiseDensity`` rho, ``TailForm``; shift = sign (mu + beta var)): the root of the decreasing slope

        G'(e) = d/de log rho(e) + r(z) / sd,   z = (e - shift) / sd,   r = phi / Phi (inverse Mills ratio),

    with -G''(e) = -d2/de2 log rho(e) + r(z) (z + r(z)) / var, by the iteration of ``tilted_laplace``.

    The bracket, from r decreasing and r(z) + z increasing (so r(z) <= r(0) + max(0, -z)): G'(0) = r/sd > 0
    at rho's mode 0; and G' < 0 beyond both e1 = max(shift, root of d/de log rho = -r(0)/sd) (there z >= 0)
    and e2 = root of d/de log rho = -(r(0)/sd + max(0, shift)/var). So c lies in [0, min(e1, e2)].
    Points whose bracket is unbounded (the logistic's slope never falls below -1: sd <= r(0) with
    shift <= 0) come back as NaN; the quadrature uses this rule only for var >= 2."""
    shift, var = torch.broadcast_tensors(shift.detach(), var.detach())
    eps = torch.finfo(var.dtype).eps
    tol2 = max(1e-4, 8.0 * eps**0.5) ** 2
    sd = torch.sqrt(var)

    def slope_and_curvature(e):
        d1, d2 = noise.log_density_derivatives(e)
        z = (e - shift) / sd
        r = _inv_mills(z)
        return d1 + r / sd, (r * (z + r)).clamp(0.0, 1.0) / var - torch.fmin(d2, d2.new_zeros(()))

    r0 = _INV_MILLS_0 / sd
    hi = torch.minimum(torch.maximum(shift, noise.slope_root(r0)), noise.slope_root(r0 + shift.clamp_min(0) / var))
    ok_input = torch.isfinite(shift) & torch.isfinite(var) & (var > 0) & torch.isfinite(hi)
    hi = torch.where(ok_input, hi, torch.ones_like(hi))
    lo = torch.zeros_like(hi)
    g_lo, c_lo = slope_and_curvature(lo)
    g_hi, c_hi = slope_and_curvature(hi)
    done = (g_lo * g_lo <= c_lo * tol2) | (g_hi * g_hi <= c_hi * tol2) | ~ok_input

    def on_failure(lo, hi, done):
        i = int(torch.nonzero(~done)[0, 0])
        raise NumericalError(
            f"adaptive quadrature: the mode of the tail rule's integrand (noise={noise.name}) was not found for "
            f"shift={float(shift[i]):.6g}, var={float(var[i]):.6g} (bracket [{float(lo[i]):.6g}, "
            f"{float(hi[i]):.6g}] after the bisection fallback); use dtype=float64 or check the model's latent "
            f"variances"
        )

    centre, s2, unconverged = _bracketed_newton(
        slope_and_curvature,
        (lo, g_lo, c_lo),
        (hi, g_hi, c_hi),
        done,
        tol2,
        newton_iters,
        max_iters,
        check_every_iteration,
        on_failure,
    )
    nan = torch.full_like(centre, float("nan"))
    return TiltedLaplace(torch.where(ok_input, centre, nan), torch.where(ok_input, s2, nan), unconverged)


def _bracketed_newton(
    slope_and_curvature, low, high, done, tol2, newton_iters, max_iters, check_every_iteration, on_failure
):
    """The root of a decreasing slope g(x) = T'(x) of a concave T, per point, from a bracket: ``low`` =
    (lo, g(lo) >= 0, -T''(lo)), ``high`` = (hi, g(hi) <= 0, -T''(hi)); ``done`` marks points already
    converged. Returns (centre, Laplace variance -1/T''(centre), number of points still open after
    ``newton_iters``); ``on_failure(lo, hi, done)`` raises where a bracket cannot close in ``max_iters``
    (the iteration of the module doc)."""
    lo, g_lo, c_lo = low
    hi, g_hi, c_hi = high
    eps = torch.finfo(lo.dtype).eps
    unconverged = torch.zeros((), dtype=torch.long, device=lo.device)
    if check_every_iteration is None:
        check_every_iteration = lo.device.type == "cpu"  # reading a flag costs nothing there
    max_iters = max(max_iters, newton_iters)
    it = 0
    while True:
        if (
            (it < newton_iters and check_every_iteration)
            or it == max_iters
            or (it >= newton_iters and (it - newton_iters) % 4 == 0)
        ):
            if it >= newton_iters:  # also accept a bracket closed to a few ulps (rounding-limited T')
                done = done | (hi - lo <= 4 * eps * (lo.abs() + hi.abs()))
            if it == newton_iters:
                unconverged = (~done).sum()
            if bool(done.all()):
                break
            if it >= max_iters:
                on_failure(lo, hi, done)
        # Newton steps from both ends (>= 0 from lo, <= 0 from hi), each kept only within its own
        # half of the bracket; the shorter one, else the midpoint
        step_lo, step_hi, half = g_lo / c_lo, g_hi / c_hi, 0.5 * (hi - lo)
        if it >= newton_iters and it % 2 == 1:  # the fallback phase: every other step a bisection
            new = lo + half
        else:
            ok_lo, ok_hi = step_lo <= half, step_hi >= -half
            use_hi = ok_hi & (~ok_lo | (step_hi + step_lo > 0))
            new = torch.where(use_hi, hi + step_hi, torch.where(ok_lo, lo + step_lo, lo + half))
        g_new, c_new = slope_and_curvature(new)
        right = g_new < 0  # the new point replaces the end of the same sign of T'
        lo, g_lo, c_lo = torch.where(right, lo, new), torch.where(right, g_lo, g_new), torch.where(right, c_lo, c_new)
        hi, g_hi, c_hi = torch.where(right, new, hi), torch.where(right, g_new, g_hi), torch.where(right, c_new, c_hi)
        done = done | (g_new * g_new <= c_new * tol2)
        it += 1

    # the end with the smaller Newton decrement g^2/c, plus its Newton step (kept in the bracket);
    # the Laplace variance at that centre
    use_hi = g_hi * g_hi * c_lo < g_lo * g_lo * c_hi
    centre = torch.where(use_hi, hi + g_hi / c_hi, lo + g_lo / c_lo)
    centre = torch.minimum(torch.maximum(centre, lo), hi)
    s2 = (1.0 / slope_and_curvature(centre)[1]).clamp_min(torch.finfo(lo.dtype).tiny)
    return centre, s2, unconverged


def _raise_unconverged(y, mu, var, lo, hi, done):
    i = int(torch.nonzero(~done)[0, 0])
    raise NumericalError(
        f"adaptive quadrature: the mode of q(f)p(y|f) was not found for y={float(y[i]):.6g}, "
        f"mu={float(mu[i]):.6g}, var={float(var[i]):.6g} (bracket [{float(lo[i]):.6g}, "
        f"{float(hi[i]):.6g}] after the bisection fallback); use dtype=float64 or check the model's "
        f"latent variances"
    )
