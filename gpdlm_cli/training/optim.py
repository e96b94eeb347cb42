"""Optimisers and learning-rate schedules of the trainer.

* ``adam`` (default; Kingma & Ba), ``adadelta`` (Zeiler; the RKHS paper's choice, ``rho``, ``eps``),
  ``sgd`` (optional ``momentum``), and ``lbfgs`` (torch's L-BFGS with a strong-Wolfe line search, one
  outer iteration per trainer iteration; for deterministic full-batch objectives only).
* Schedules multiply each group's base learning rate by a factor of the iteration t (0-based,
  counted within a stage):
  ``constant`` 1; ``step`` factor^floor(epoch / every_epochs); ``robbins_monro``
  (1 + t / t0)^-kappa with kappa in (0.5, 1], the decaying steps (sum lr_t = inf, sum lr_t^2 < inf)
  that the convergence theorems of the RKHS and GP-LSTM papers assume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

OPTIMIZERS = ("adam", "adadelta", "sgd", "lbfgs")
SCHEDULES = ("constant", "step", "robbins_monro")


def default_lr(batch_size: int | None, n: int, optimizer: str = "adam") -> float:
    """The learning rate when ``trainer.lr`` is null, for minibatches of ``batch_size`` (None: full
    batch) of ``n`` training rows.

    Adam: the DLM paper's rates (App. D), 0.1 full batch and 1e-3 for stochastic training;
    AdaDelta: 1.0 (Zeiler's, and torch's, default); SGD: 0.01; L-BFGS: 1.0 (the line search's
    first trial step)."""
    if optimizer == "adam":
        return 0.1 if batch_size is None or batch_size >= n else 1e-3
    return {"adadelta": 1.0, "sgd": 0.01, "lbfgs": 1.0}[optimizer]


def make_optimizer(
    name: str,
    groups: list[dict],
    *,
    momentum: float = 0.0,
    rho: float = 0.9,
    eps: float | None = None,
    lbfgs_history: int = 100,
) -> torch.optim.Optimizer:
    """A torch optimiser over ``groups`` ([{"params": [...], "lr": ..., "name": ...}, ...])."""
    if name == "adam":
        return torch.optim.Adam(groups, **({} if eps is None else {"eps": eps}))
    if name == "adadelta":
        return torch.optim.Adadelta(groups, rho=rho, **({} if eps is None else {"eps": eps}))
    if name == "sgd":
        return torch.optim.SGD(groups, lr=groups[0]["lr"], momentum=momentum)
    if name == "lbfgs":
        if len(groups) != 1:  # torch's L-BFGS works on one flat vector with one step size
            raise ValueError("lbfgs takes a single parameter group")
        # one outer iteration per call; max_eval bounds the line search of that iteration (torch's
        # default, 1.25 max_iter, would leave it no evaluation at all). tolerance_change=0: torch's
        # default (1e-9, absolute) skips the step whenever the directional derivative g.d > -1e-9, which
        # on a per-datum loss happens at gradients of ~1e-5: L-BFGS stands still there and only the
        # stopping rule notices (a 12-parameter least squares stalled at max|g| 5.7e-6; with 0 it reaches
        # torch's tolerance_grad, 1e-7). Stopping is the loop's business (rule, gradient test, budget).
        from .lbfgs import CompactLBFGS  # torch's LBFGS with a closed-form two-loop recursion (lbfgs.py)

        return CompactLBFGS(
            groups[0]["params"],
            lr=groups[0]["lr"],
            max_iter=1,
            max_eval=26,
            history_size=lbfgs_history,
            line_search_fn="strong_wolfe",
            tolerance_change=0.0,
        )
    raise ValueError(f"unknown optimizer {name!r}")


@dataclass(frozen=True)
class Schedule:
    """lr_t = lr * factor(t, epoch); see the module docstring."""

    kind: str = "constant"
    every_epochs: int = 10
    step_factor: float = 0.5
    t0: float = 100.0
    kappa: float = 0.6

    @property
    def constant(self) -> bool:
        return self.kind == "constant"

    def factor(self, t: int, epoch: int) -> float:
        if self.kind == "constant":
            return 1.0
        if self.kind == "step":
            return self.step_factor ** (epoch // self.every_epochs)
        if self.kind == "robbins_monro":
            return (1.0 + t / self.t0) ** (-self.kappa)
        raise ValueError(f"unknown schedule {self.kind!r}")

    def check(self) -> None:
        """Raise ValueError on an out-of-range setting (the builder turns it into a ConfigError)."""
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")
        if self.kind == "robbins_monro" and not (0.5 < self.kappa <= 1.0 and math.isfinite(self.t0) and self.t0 > 0):
            raise ValueError("robbins_monro needs kappa in (0.5, 1] and t0 > 0")


__all__ = ["OPTIMIZERS", "SCHEDULES", "Schedule", "default_lr", "make_optimizer"]
