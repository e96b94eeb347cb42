"""Optimisers and learning-rate schedules of the trainer.

* ``adam`` (default; Kingma & Ba), ``adadelta`` (Zeiler; the RKHS paper's choice, ``rho``, ``eps``),
  ``sgd`` (optional ``momentum``), and ``lbfgs`` (torch's L-BFGS with a strong-Wolfe line search, one
  outer iteration per trainer iteration; for deterministic full-batch objectives only).
  AdaDelta runs as ``FlatAdadelta``: torch's update on one flat buffer per step (a dozen tensor ops
  instead of ~10 per parameter tensor; the small-step RKHS family spent a third of a step in it), with
  torch's state layout, so checkpoints of either load into the other.
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


class FlatAdadelta(torch.optim.Adadelta):
    """torch's AdaDelta (Zeiler 2012; its defaults and state layout) with the update done on one flat
    vector: the gradients are concatenated once, the running averages of every parameter are views of
    two flat buffers (``square_avg``, ``acc_delta``), and each group's parameters move by one
    ``_foreach_add_`` at its own learning rate. Per step about 15 tensor operations whatever the
    number of parameter tensors (torch's for-loop: ~10 per tensor; its ``foreach=True`` was slower on
    the CPU). The arithmetic is torch's, element by element, in the same order, so the iterates equal
    ``torch.optim.Adadelta``'s (tests/training/test_optim_flat.py: to 1e-12 after 300 steps).

    Falls back to torch's step (exactly torch's behaviour) when a parameter has no gradient, a sparse
    or complex gradient, the parameters mix dtypes or devices, or weight decay / maximize / capturable /
    differentiable is set. ``state_dict`` is torch's (views of the flat buffers); ``load_state_dict``
    re-flattens on the next step."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self._flat = None

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._flat = None

    def _plain(self, params) -> bool:
        first = params[0]
        for g in self.param_groups:
            if g["weight_decay"] != 0 or g["maximize"] or g["capturable"] or g["differentiable"]:
                return False
        for p in params:
            grad = p.grad
            if grad is None or grad.is_sparse or p.is_complex() or p.dtype != first.dtype or p.device != first.device:
                return False
        return True

    def _flatten(self, params) -> None:
        """The flat buffers, from the parameters' state if they have one (a loaded or earlier state)."""
        first = params[0]
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        square = torch.zeros(total, dtype=first.dtype, device=first.device)
        acc = torch.zeros_like(square)
        delta = torch.empty_like(square)
        steps = torch.zeros(len(params), dtype=torch.float32, device=first.device)  # torch keeps step in float32
        offset = 0
        for i, (p, k) in enumerate(zip(params, sizes)):
            state = self.state[p]
            sq_view, acc_view = square[offset : offset + k].view_as(p), acc[offset : offset + k].view_as(p)
            if state:
                sq_view.copy_(state["square_avg"])
                acc_view.copy_(state["acc_delta"])
                steps[i] = state["step"].to(steps.device)
            state["square_avg"], state["acc_delta"], state["step"] = sq_view, acc_view, steps[i]
            offset += k
        groups, offset, bounds = [], 0, {}
        for p, k in zip(params, sizes):
            bounds[id(p)] = (offset, offset + k)
            offset += k
        for g in self.param_groups:
            views = [delta[slice(*bounds[id(p)])].view_as(p) for p in g["params"]]
            groups.append((g, list(g["params"]), views))
        key = [id(p) for p in params]
        self._flat = (key, square, acc, delta, steps, groups)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for g in self.param_groups for p in g["params"]]
        if not params or not self._plain(params):
            if self._flat is not None:  # torch's step replaces state tensors: re-flatten afterwards
                self._flat = None
            super().step()
            return loss
        if self._flat is None or self._flat[0] != [id(p) for p in params]:
            self._flatten(params)
        _, square, acc, delta, steps, groups = self._flat
        rho, eps = self.param_groups[0]["rho"], self.param_groups[0]["eps"]
        if any(g["rho"] != rho or g["eps"] != eps for g in self.param_groups):
            self._flat = None
            super().step()
            return loss
        grad = torch.cat([p.grad.reshape(-1) for p in params])
        steps.add_(1)
        square.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square.add(eps).sqrt_()
        torch.add(acc, eps, out=delta).sqrt_()
        delta.div_(std).mul_(grad)
        acc.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        for g, ps, views in groups:
            if ps:
                torch._foreach_add_(ps, views, alpha=-float(g["lr"]))
        return loss


class StackedAdadelta:
    """AdaDelta for B members trained together (``sweep.batched=true``): ``params`` are leaves with a leading
    member dimension whose storage is the columns of one flat B x P tensor ``flat`` (member b's trainable
    values are row b); ``lr`` (B x P) holds each element's step size (its member's lr times its group's
    scale). Torch's arithmetic in ``FlatAdadelta``'s order, element by element, so each row moves as its
    member's ``FlatAdadelta`` moves it (up to the rounding of the last multiply-add): one concatenation of
    the gradients and a dozen operations on B x P per step. ``step(active)``: rows whose ``active`` entry is
    False (stopped members) keep their values exactly."""

    def __init__(self, params, flat: torch.Tensor, lr: torch.Tensor, rho: float = 0.9, eps: float = 1e-6):
        self.params, self.flat, self.rho, self.eps = list(params), flat, float(rho), float(eps)
        self.neg_lr = -lr.to(flat)
        self.square = torch.zeros_like(flat)
        self.acc = torch.zeros_like(flat)
        # the step's temporaries, allocated once: B x P buffers are large (32 x 20k doubles: 5 MB), and fresh
        # ones at every step cost page faults
        self.grad, self.std, self.delta = (torch.empty_like(flat) for _ in range(3))

    @torch.no_grad()
    def step(self, active: torch.Tensor | None = None) -> None:
        rho, B = self.rho, self.flat.shape[0]
        grad, std, delta = self.grad, self.std, self.delta
        torch.cat([p.grad.reshape(B, -1) for p in self.params], 1, out=grad)
        self.square.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        torch.add(self.square, self.eps, out=std).sqrt_()
        torch.add(self.acc, self.eps, out=delta).sqrt_().div_(std).mul_(grad)
        self.acc.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        delta.mul_(self.neg_lr)
        if active is not None:
            delta.masked_fill_(~active.unsqueeze(-1), 0.0)
        self.flat.add_(delta)


def make_optimizer(
    name: str,
    groups: list[dict],
    *,
    momentum: float = 0.0,
    rho: float = 0.9,
    eps: float | None = None,
    lbfgs_history: int = 100,
    flat: bool = True,
) -> torch.optim.Optimizer:
    """A torch optimiser over ``groups`` ([{"params": [...], "lr": ..., "name": ...}, ...]). ``flat``:
    AdaDelta as ``FlatAdadelta`` (else torch's own, the reference the tests and benchmarks compare with)."""
    if name == "adam":
        return torch.optim.Adam(groups, **({} if eps is None else {"eps": eps}))
    if name == "adadelta":
        cls = FlatAdadelta if flat else torch.optim.Adadelta
        return cls(groups, rho=rho, **({} if eps is None else {"eps": eps}))
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


__all__ = ["FlatAdadelta", "OPTIMIZERS", "StackedAdadelta", "SCHEDULES", "Schedule", "default_lr", "make_optimizer"]
