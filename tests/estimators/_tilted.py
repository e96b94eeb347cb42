"""Reference maths for estimator tests, written independently of gpdlm (numpy/scipy only).

``tilted_cdf`` integrates the tilted density q~(f) ~ N(f|mu,var) p(y|f) with scipy.integrate.quad
between consecutive sorted points, so a KS test needs one short quadrature per sample.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, special


def log_lik(name: str, y: float, f, noise: float = 1.0):
    """log p(y|f) for gpdlm's likelihood names, re-implemented in numpy."""
    f = np.asarray(f, dtype=float)
    if name == "gaussian":
        return -0.5 * np.log(2 * np.pi * noise) - 0.5 * (y - f) ** 2 / noise
    if name == "probit":
        return special.log_ndtr((2 * y - 1) * f)
    if name == "logit":
        return -np.logaddexp(0.0, -(2 * y - 1) * f)
    if name == "poisson_exp":
        return y * f - np.exp(f) - special.gammaln(y + 1)
    if name == "poisson_softplus":
        lam = np.logaddexp(0.0, f)
        return special.xlogy(y, lam) - lam - special.gammaln(y + 1)
    raise ValueError(name)


def log_tilted(name, y, mu, var, f, noise=1.0):
    """Unnormalised log q~(f)."""
    f = np.asarray(f, dtype=float)
    return -0.5 * (f - mu) ** 2 / var + log_lik(name, y, f, noise)


def _peak(name, y, mu, var, noise):
    sd = np.sqrt(var)
    grid = np.concatenate([np.linspace(mu - 40 * sd, mu + 40 * sd, 40001), np.linspace(-50, 50, 40001)])
    lt = log_tilted(name, y, mu, var, grid, noise)
    return grid[np.argmax(lt)], lt.max()


def tilted_cdf(name, y, mu, var, samples, noise=1.0):
    """(sorted samples, CDF of q~ at them), by quad between consecutive samples."""
    xs = np.sort(np.asarray(samples, dtype=float))
    mode, top = _peak(name, y, mu, var, noise)

    def dens(f):
        return np.exp(log_tilted(name, y, mu, var, f, noise) - top)

    lo = min(xs[0], mu - 40 * np.sqrt(var), mode - 1.0)
    hi = max(xs[-1], mu + 40 * np.sqrt(var), mode + 1.0)
    edges = [(lo, xs[0])] + list(zip(xs[:-1], xs[1:])) + [(xs[-1], hi)]
    pieces = []
    for a, b in edges:
        pts = [mode] if a < mode < b else None
        pieces.append(integrate.quad(dens, a, b, points=pts, limit=200)[0] if a < b else 0.0)
    cum = np.cumsum(pieces)
    return xs, cum[:-1] / cum[-1]


def tilted_moments(name, y, mu, var, noise=1.0):
    """E[f - mu] and E[(f - mu)^2] under q~, by quad."""
    mode, top = _peak(name, y, mu, var, noise)
    lo, hi = min(mu, mode) - 40 * np.sqrt(var), max(mu, mode) + 40 * np.sqrt(var)
    w = lambda f, k: (f - mu) ** k * np.exp(log_tilted(name, y, mu, var, f, noise) - top)  # noqa: E731
    z, m1, m2 = (
        integrate.quad(w, lo, hi, args=(k,), points=[mode], limit=500, epsabs=0, epsrel=1e-11)[0] for k in (0, 1, 2)
    )
    return m1 / z, m2 / z


def exact_gradient(name, y, mu, var, noise=1.0):
    """d/dmu and d/dvar of log E_q[p(y|f)]: E~[f - mu]/var and (E~[(f - mu)^2]/var^2 - 1/var)/2."""
    m1, m2 = tilted_moments(name, y, mu, var, noise)
    return m1 / var, 0.5 * (m2 / var**2 - 1 / var)


# ----- a dense log-space reference for any variance -------------------------------------------------
def np_log_softplus(f):
    """log(log(1 + e^f)) without underflow: log1p(e^f) is exact for tiny e^f down to f = -700, below
    which log softplus(f) = f + log(1 - e^f/2 + ...) equals f to every printed digit."""
    f = np.asarray(f, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(f < -700, f, np.log(np.logaddexp(0.0, np.maximum(f, -700))))


def np_log_lik_dense(name, y, f, noise=1.0):
    """log p(y|f) in numpy, in log space throughout (the softplus rate never underflows)."""
    f = np.asarray(f, dtype=float)
    if name == "poisson_softplus":
        return np.where(y == 0, 0.0, y * np_log_softplus(f)) - np.logaddexp(0.0, f) - special.gammaln(y + 1)
    return log_lik(name, y, f, noise)


def np_dlog_lik_dense(name, y, f, noise=1.0):
    """d/df log p(y|f) in numpy (for the reference's bisection)."""
    f = np.asarray(f, dtype=float)
    if name == "gaussian":
        return (y - f) / noise
    if name == "probit":
        s = 2 * y - 1
        return s * np.exp(-0.5 * f**2 - 0.5 * np.log(2 * np.pi) - special.log_ndtr(s * f))
    if name == "logit":
        s = 2 * y - 1
        return s * special.expit(-s * f)
    if name == "poisson_exp":
        return y - np.exp(f)
    if name == "poisson_softplus":  # (y / lambda - 1) sigma(f), with sigma(f) / lambda in log space
        log_sig = -np.logaddexp(0.0, -f)
        return y * np.exp(log_sig - np_log_softplus(f)) - np.exp(log_sig)
    raise ValueError(name)


def dense_mode(name, y, mu, var, noise=1.0):
    """Mode of the tilted density for arrays of points (numpy): the root of the decreasing slope
    T'(f) = -(f - mu)/var + d/df log p(y|f), bracketed by steps out of mu that double until T'
    changes sign, then bisected to adjacent doubles. Also returns -1/T''(mode) by a central
    difference of T' with a step of 1e-3 local widths (at most 1e-3; relative error ~1e-6)."""
    y, mu, var = (np.asarray(a, dtype=float) for a in np.broadcast_arrays(y, mu, var))

    def slope(f):
        with np.errstate(over="ignore", invalid="ignore"):
            return -(f - mu) / var + np_dlog_lik_dense(name, y, f, noise)

    sd = np.sqrt(var)
    lo, hi = mu.copy(), mu.copy()
    step = sd.copy()
    while (left := slope(lo) < 0).any():
        lo, step = np.where(left, lo - step, lo), np.where(left, 2 * step, step)
    step = sd.copy()
    while (right := slope(hi) > 0).any():
        hi, step = np.where(right, hi + step, hi), np.where(right, 2 * step, step)
    for _ in range(2100):  # bisection: at most ~2100 halvings separate any two doubles
        mid = 0.5 * (lo + hi)
        open_ = (mid > lo) & (mid < hi)
        if not open_.any():
            break
        pos = slope(mid) > 0
        lo, hi = np.where(open_ & pos, mid, lo), np.where(open_ & ~pos, mid, hi)
    c = 0.5 * (lo + hi)
    h = 1e-3 * np.minimum(sd, 1.0)
    for _ in range(2):  # the step follows the local width 1/sqrt(-T''), and 1 (the likelihoods' scale)
        curv = -(slope(c + h) - slope(c - h)) / (2 * h)
        h = 1e-3 * np.minimum(np.minimum(sd, 1.0 / np.sqrt(curv)), 1.0)
    return c, 1.0 / curv


def _root(fun, lo, hi, iters=300):
    """Bisection of a decreasing fun on [lo, hi] (fun(lo) >= 0 >= fun(hi)) to adjacent doubles."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if fun(mid) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _dense_grid(name, y, mu, var, noise=1.0, drop=80.0, per_scale=30):
    """(f, log w): a uniform grid over the tilted density's support and the log trapezoid weights
    times the unnormalised density, log(h_k q(f_k) p(y|f_k)) (see ``dense_log_marginal``)."""
    sd = np.sqrt(var)

    def T(f):
        return -0.5 * np.log(2 * np.pi * var) - 0.5 * (f - mu) ** 2 / var + np_log_lik_dense(name, y, f, noise)

    def dT(f):
        return -(f - mu) / var + np_dlog_lik_dense(name, y, f, noise)

    lo, hi, step = mu, mu, sd
    while dT(lo) < 0:
        lo, step = lo - step, 2 * step
    step = sd
    while dT(hi) > 0:
        hi, step = hi + step, 2 * step
    c = _root(dT, lo, hi)
    top = T(c)
    ends = []
    for sign in (-1.0, 1.0):
        step, far = sd, c
        while T(far) > top - drop:
            far, step = far + sign * step, 2 * step
        fun = (lambda f: top - drop - T(f)) if sign < 0 else (lambda f: T(f) - (top - drop))
        ends.append(_root(fun, far, c) if sign < 0 else _root(fun, c, far))
    a, b = ends
    coarse = np.linspace(a, b, 20001)
    hc = coarse[1] - coarse[0]
    tc = T(coarse)
    curv = -(tc[2:] - 2 * tc[1:-1] + tc[:-2]) / hc**2
    scale = 1.0 / np.sqrt(max(curv.max(), 1.0 / var))
    n = int(min(max((b - a) / scale * per_scale, 20001), 4_000_000))
    f = np.linspace(a, b, n)
    logw = T(f) + np.log(f[1] - f[0])
    logw[[0, -1]] -= np.log(2.0)
    return f, logw


def dense_log_marginal(name, y, mu, var, noise=1.0, drop=80.0, per_scale=30):
    """log Z = log int N(f|mu,var) p(y|f) df and its mu- and var-derivatives, by the trapezoid rule
    in log space on a uniform grid (numpy only, nothing from gpdlm).

    The tilted log density T is concave, so: its mode is the root of the decreasing T' (bracketed by
    doubling steps out of mu, then bisection); the grid spans [a, b] where T has dropped by ``drop``
    nats on either side (bisection again, T is monotone on each side of the mode); the spacing is
    1/per_scale of the narrowest local width 1/sqrt(-T'') seen on a first coarse pass. Trapezoid sums
    of smooth, decaying integrands converge faster than any power of the spacing. The derivatives
    are the tilted moments (Stein's identities): d/dmu log Z = E[(f - mu)/var],
    d/dvar log Z = E[((f - mu)^2/var^2 - 1/var)/2]."""
    f, logw = _dense_grid(name, y, mu, var, noise, drop, per_scale)
    log_z = special.logsumexp(logw)
    w = np.exp(logw - log_z)
    d = f - mu
    return log_z, float(w @ d) / var, 0.5 * (float(w @ d**2) / var**2 - 1.0 / var)


def dense_tilted_cdf(name, y, mu, var, noise=1.0):
    """The CDF of the tilted density q~(f) ~ N(f|mu,var) p(y|f) as a function (numpy): cumulative
    trapezoid sums of the dense grid, normalised, interpolated linearly (error ~1e-9 at any f)."""
    f, logw = _dense_grid(name, y, mu, var, noise, per_scale=60)
    w = np.exp(logw - logw.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (w[1:] + w[:-1]))])
    cdf /= cdf[-1]
    return lambda x: np.interp(x, f, cdf)


def dense_log_marginals(name, y, mu, var, drop=80.0, per_scale=30):
    """``dense_log_marginal``'s value for arrays of points at once (numpy): the mode by ``dense_mode``,
    the ends [a, b] where T has dropped by ``drop`` nats by bisection on each monotone side, and the
    trapezoid rule in log space on an equispaced grid whose spacing is 1/per_scale of the narrowest
    local width 1/sqrt(-T'') seen on a first coarse pass (rows grouped by the grid size they need)."""
    y, mu, var = (np.asarray(a, dtype=float) for a in np.broadcast_arrays(y, mu, var))
    c, _ = dense_mode(name, y, mu, var)
    col = lambda a: a[:, None]  # noqa: E731

    def T(f, yy, m, v):
        with np.errstate(over="ignore", invalid="ignore"):
            return -0.5 * np.log(2 * np.pi * v) - 0.5 * (f - m) ** 2 / v + np_log_lik_dense(name, yy, f)

    top, sd = T(c, y, mu, var), np.sqrt(var)
    ends = []
    for sign in (-1.0, 1.0):
        near, far, step = c.copy(), c.copy(), sd.copy()
        while (inside := T(far, y, mu, var) > top - drop).any():
            near = np.where(inside, far, near)
            far, step = np.where(inside, far + sign * step, far), np.where(inside, 2 * step, step)
        for _ in range(200):  # T(near) > top - drop >= T(far)
            mid = 0.5 * (near + far)
            above = T(mid, y, mu, var) > top - drop
            near, far = np.where(above, mid, near), np.where(above, far, mid)
        ends.append(far)
    a, b = ends

    def grid(rows, num):
        f = col(a[rows]) + col(b[rows] - a[rows]) * np.linspace(0.0, 1.0, num)
        return f, T(f, col(y[rows]), col(mu[rows]), col(var[rows])), (b[rows] - a[rows]) / (num - 1)

    f, t, h = grid(np.arange(len(y)), 4001)
    curv = np.maximum(-(t[:, 2:] - 2 * t[:, 1:-1] + t[:, :-2]).max(1) / h**2, 1.0 / var)
    need = (b - a) * np.sqrt(curv) * per_scale
    size = np.maximum(4001, 2 ** np.ceil(np.log2(need)) + 1).astype(int)
    out = np.empty(len(y))
    for num in np.unique(size):
        rows = np.nonzero(size == num)[0]
        _, t, h = grid(rows, num)
        logw = t + col(np.log(h))
        logw[:, [0, -1]] -= np.log(2.0)
        out[rows] = special.logsumexp(logw, axis=1)
    return out
