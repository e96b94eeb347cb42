"""Held-out metrics of a GP's predictive distribution (DLM paper, App. D).

* ``nll``: mean -log E_{q(f_i)}[p(y_i|f_i)] -- exact for Gaussian and probit, log-space adaptive
  quadrature otherwise (never a log of a sum of probabilities);
* ``rmse``/``mse`` (regression, count), ``error`` (classification, threshold 0.5 on E[y]),
  ``mre`` = |y_hat - y| / max(1, y) with y_hat = E[y] (counts).

Regression metrics are reported in the target's original units: a standardised target
y = (y_orig - a)/b shifts the log density by log b and scales errors by b. The ``_norm`` variants
are on the standardised scale.
"""

from __future__ import annotations

import math

import torch

from ..estimators import AutoEstimator, QuadratureEstimator

_EVAL_NODES = 64

#: the metric names ``predictive_metrics`` reports for each task (before the val_/test_ prefix)
PREDICTIVE_METRICS = {
    "regression": ("nll", "nll_norm", "mse", "rmse", "rmse_norm"),
    "classification": ("nll", "error"),
    "count": ("nll", "mre", "rmse"),
}


@torch.no_grad()
def predictive_marginals(model, x: torch.Tensor, batch_size: int = 4096):
    """(mu, var) of q(f) at x, in chunks so large test sets fit in memory."""
    mus, vs = [], []
    for i in range(0, x.shape[0], batch_size):
        mu, var = model.marginals(x[i:i + batch_size])
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
    """The metrics of ``predictive_metrics`` from given marginals q(f_i) = N(mu_i, var_i) of the
    latent f (families that predict in their own way, e.g. the sparse-spectrum gamma family)."""
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
    elif task == "classification":
        out["nll"] = nll
        out["error"] = ((y_hat > 0.5).to(y.dtype) != y).to(y.dtype).mean()
    else:  # count
        out["nll"] = nll
        out["mre"] = ((y_hat - y).abs() / y.clamp_min(1)).mean()
        out["rmse"] = ((y_hat - y) ** 2).mean().sqrt()
    return {prefix + k: float(v) for k, v in out.items()}
