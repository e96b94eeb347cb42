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
    z, m1, m2 = (integrate.quad(w, lo, hi, args=(k,), points=[mode], limit=500, epsabs=0, epsrel=1e-11)[0]
                 for k in (0, 1, 2))
    return m1 / z, m2 / z


def exact_gradient(name, y, mu, var, noise=1.0):
    """d/dmu and d/dvar of log E_q[p(y|f)]: E~[f - mu]/var and (E~[(f - mu)^2]/var^2 - 1/var)/2."""
    m1, m2 = tilted_moments(name, y, mu, var, noise)
    return m1 / var, 0.5 * (m2 / var**2 - 1 / var)
