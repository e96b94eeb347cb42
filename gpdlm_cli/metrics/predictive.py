"""Held-out metrics of a GP's predictive distribution (DLM paper, App. D).

* ``nll``: mean -log E_{q(f_i)}[p(y_i|f_i)] -- exact for Gaussian and probit, log-space adaptive
  quadrature otherwise (never a log of a sum of probabilities);
* ``rmse``/``mse`` (regression, count), ``error`` (classification, threshold 0.5 on E[y]),
  ``mre`` = |y_hat - y| / max(1, y) with y_hat = E[y] (counts).

Regression metrics are reported in the target's original units: a standardised target
y = (y_orig - a)/b shifts the log density by log b and scales errors by b. The ``_norm`` variants
are on the standardised scale.

Calibration (issue 22), from the predictive distribution p(y*) = E_q[p(y*|f)]:

* regression (Gaussian predictive N(mu, var + s2)): ``coverage_50/90/95``, the fraction of targets
  inside the central 50/90/95% predictive intervals, and ``coverage_error``, the mean of
  |coverage - nominal| over the three; ``crps``, the continuous ranked probability score in closed
  form, sigma [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)] with z = (y - mu)/sigma (Gneiting & Raftery
  2007), in the target's units; ``msll``, the mean standardised log loss: the NLL minus that of the
  trivial predictive N(0, 1) of the standardised targets (Rasmussen & Williams, Sec. 2.5; < 0 beats it);
* classification: ``brier``, mean (p - y)^2 with p = P(y = 1); ``ece``, the expected calibration
  error over 10 equal-width bins of the confidence max(p, 1 - p);
* counts: ``coverage_50/90/95`` of the central intervals of the predictive (a Poisson mixture over
  q(f); its CDF E_q[Q(k + 1, rate(f))] by Gauss-Hermite quadrature) and ``coverage_error``.
"""

from __future__ import annotations

import math

import torch

from ..estimators import AutoEstimator, QuadratureEstimator

_EVAL_NODES = 64

#: the metric names ``predictive_metrics`` reports for each task (before the val_/test_ prefix)
PREDICTIVE_METRICS = {
    "regression": (
        "nll",
        "nll_norm",
        "mse",
        "rmse",
        "rmse_norm",
        "msll",
        "crps",
        "coverage_50",
        "coverage_90",
        "coverage_95",
        "coverage_error",
    ),
    "classification": ("nll", "error", "brier", "ece"),
    "count": ("nll", "mre", "rmse", "coverage_50", "coverage_90", "coverage_95", "coverage_error"),
}
LEVELS = (0.5, 0.9, 0.95)


@torch.no_grad()
def predictive_marginals(model, x: torch.Tensor, batch_size: int = 4096):
    """(mu, var) of q(f) at x, in chunks so large test sets fit in memory."""
    mus, vs = [], []
    for i in range(0, x.shape[0], batch_size):
        mu, var = model.marginals(x[i : i + batch_size])
        mus.append(mu)
        vs.append(var)
    return torch.cat(mus), torch.cat(vs)


@torch.no_grad()
def predictive_metrics(model, likelihood, x, y, *, y_std: float = 1.0, prefix: str = "test_") -> dict[str, float]:
    """All metrics that apply to the likelihood's task, as a dict of floats."""
    if x.shape[0] == 0:
        return {}
    mu, var = predictive_marginals(model, x)
    return metrics_from_marginals(likelihood, mu, var, y, y_std=y_std, prefix=prefix)


@torch.no_grad()
def metrics_from_marginals(likelihood, mu, var, y, *, y_std: float = 1.0, prefix: str = "test_") -> dict[str, float]:
    """The metrics of the predictive distribution with latent marginals q(f_i) = N(mu_i, var_i):
    what ``predictive_metrics`` reports, for families that compute (mu, var) in their own way."""
    if y.shape[0] == 0:
        return {}
    est = AutoEstimator(num_nodes=_EVAL_NODES)
    nll = -est.log_marginal(likelihood, y, mu, var).mean()
    y_hat = likelihood.predictive_mean_closed(mu, var)
    if y_hat is None:
        y_hat = QuadratureEstimator(_EVAL_NODES).expectation(likelihood.mean, mu, var)
    out: dict[str, torch.Tensor | float] = {}
    task = likelihood.task
    if task == "regression":
        mse = ((y_hat - y) ** 2).mean()
        out["nll"] = nll + math.log(y_std)
        out["nll_norm"] = nll
        out["mse"] = mse * y_std**2
        out["rmse"] = mse.sqrt() * y_std
        out["rmse_norm"] = mse.sqrt()
        out["msll"] = nll - (0.5 * math.log(2 * math.pi) + 0.5 * y**2).mean()
        sd = (var + likelihood.noise).sqrt()
        z = (y - y_hat) / sd
        normal = torch.distributions.Normal(torch.zeros((), dtype=z.dtype, device=z.device), 1.0)
        pdf, cdf = normal.log_prob(z).exp(), torch.special.ndtr(z)
        out["crps"] = (sd * (z * (2 * cdf - 1) + 2 * pdf - 1 / math.sqrt(math.pi))).mean() * y_std
        out.update(_coverages({lv: z.abs() <= normal.icdf(torch.tensor(0.5 + lv / 2, dtype=z.dtype)) for lv in LEVELS}))
    elif task == "classification":
        out["nll"] = nll
        out["error"] = ((y_hat > 0.5).to(y.dtype) != y).to(y.dtype).mean()
        out["brier"] = ((y_hat - y) ** 2).mean()
        out["ece"] = _expected_calibration_error(y_hat, y)
    else:  # count
        out["nll"] = nll
        out["mre"] = ((y_hat - y).abs() / y.clamp_min(1)).mean()
        out["rmse"] = ((y_hat - y) ** 2).mean().sqrt()
        quad = QuadratureEstimator(_EVAL_NODES)
        cdf_at_y = quad.expectation(lambda f: torch.special.gammaincc(y.unsqueeze(-1) + 1, likelihood.mean(f)), mu, var)
        cdf_below = quad.expectation(lambda f: torch.special.gammaincc(y.unsqueeze(-1), likelihood.mean(f)), mu, var)
        cdf_below = torch.where(y > 0, cdf_below, torch.zeros_like(cdf_below))  # P(Y <= -1) = 0
        # y lies in the central interval [q(a/2), q(1 - a/2)] iff F(y) >= a/2 and F(y - 1) < 1 - a/2
        out.update(_coverages({lv: (cdf_at_y >= (1 - lv) / 2) & (cdf_below < 1 - (1 - lv) / 2) for lv in LEVELS}))
    return {prefix + k: float(v) for k, v in out.items()}


def _coverages(inside: dict) -> dict:
    out = {f"coverage_{round(100 * lv)}": v.to(torch.float64).mean() for lv, v in inside.items()}
    out["coverage_error"] = sum(abs(out[f"coverage_{round(100 * lv)}"] - lv) for lv in inside) / len(inside)
    return out


def _expected_calibration_error(p: torch.Tensor, y: torch.Tensor, bins: int = 10) -> torch.Tensor:
    """sum_b (n_b / n) |accuracy_b - confidence_b| over equal-width bins of max(p, 1 - p)."""
    conf = torch.maximum(p, 1 - p)
    correct = ((p > 0.5).to(y.dtype) == y).to(p.dtype)
    idx = ((conf - 0.5) * 2 * bins).long().clamp(0, bins - 1)  # confidence in [0.5, 1]
    n = torch.zeros(bins, dtype=p.dtype, device=p.device).index_add_(0, idx, torch.ones_like(conf))
    acc = torch.zeros_like(n).index_add_(0, idx, correct)
    cf = torch.zeros_like(n).index_add_(0, idx, conf)
    return ((acc - cf).abs().sum() / p.shape[0]) if p.shape[0] else torch.zeros(())
