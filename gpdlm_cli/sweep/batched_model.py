"""Batched configurations (issue 21, item 4): B independent sparse variational GPs -- the seeds and
betas of one model and training size -- trained as one batched model by one Adam optimiser.

Every parameter of the B members is stacked along a leading batch dimension (inducing inputs
Z: B x M x D, q(u): B x M and B x M x M, raw outputscale: B, raw lengthscale: B x 1 x D, raw noise:
B x 1), and so are the data (X: B x N x D, y: B x N: each seed has its own split and
standardisation). The loss is the sum of the members' per-datum losses, so each member's gradient
is the gradient of its own loss, and Adam -- elementwise -- moves every member exactly as its own
run would, up to float rounding of the batched kernels. Each member has its own stopping: the
paper's window rule (App. D) is applied to its own losses every ``check_every`` iterations; a
stopped member's parameters are restored after every later step (frozen), while the others go on.
On the CPU the loss and its backward pass are computed chunk by chunk of members
(``CPU_CHUNK_ELEMENTS``); the optimiser step is one for the whole batch.

Objectives (the same functions as the separate path computes, written batched):

* ``collapsed_elbo`` -- the collapsed (beta-)ELBO of SVGP with a Gaussian likelihood (Titsias, 2009; DLM
  paper, App. D), ``objectives.CollapsedELBO``: with A = L^{-1} K_uf, r = y,
  k_i = K_ii - |A_i|^2, m~* = (A A^T + beta s2 I)^{-1} A r and S~* = (I + A A^T / (beta s2))^{-1},
  loss = -(1/N) [ -N/2 log(2 pi s2) - (|r - A^T m~*|^2 + tr(A^T S~* A) + sum_i k_i) / (2 s2)
  - beta KL(N(m~*, S~*) || N(0, I)) ].
* ``log_loss`` -- the closed-form log-loss DLM with a Gaussian likelihood (DLM paper, Sec. 2),
  ``objectives.DLM``: loss = (1/N) [ sum_i -log N(y_i | mu_i, var_i + s2) + beta KL(q(u) || p(u)) ]
  with the whitened marginals mu_i = A_i^T m~, var_i = K_ii + jitter - |A_i|^2 + |L_S^T A_i|^2.

The kernel is gpytorch's ScaleKernel(RBF) written batched with gpytorch's own ``sq_dist`` and its
fused ``ComputePredictiveUpdates``; constraints are the members' own transforms. Anything else (other
kernels, means, likelihoods, minibatches, sampling estimators, optimisers) is refused with
``NotBatchable`` and the caller trains the members separately.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..objectives.collapsed_elbo import collapsed_bound
from ..training.stopping import ConvergenceRule, NeverStop, make_rule

KINDS = ("collapsed_elbo", "log_loss")
#: on the CPU, members are processed in chunks whose M x N blocks hold at most this many elements in all
#: (2 MB in float64, about a core's L2 cache; at least one member per chunk). Larger blocks cost more
#: than batching saves: the C allocator maps big temporaries afresh (page faults) at every step, and
#: they leave the cache. Measured (bench_batched, svgp, N = 4,000, M = 100, B = 32, 1 thread, loaded
#: machine): per-member ms per iteration 42 at 2^18, 50 at 2^20, 54 at 2^21, 82 unchunked; one separate
#: model 48. On a GPU the whole batch is one chunk.
CPU_CHUNK_ELEMENTS = 2**18

# the (qualified) parameter names of a SparseVariationalGP with ScaleKernel(RBF), zero mean, and
# gpdlm's GaussianLikelihood
Z = "model.variational_strategy.inducing_points"
M_TILDE = "model.variational_strategy._variational_distribution.variational_mean"
CHOL = "model.variational_strategy._variational_distribution.chol_variational_covar"
RAW_OS = "model.covar_module.raw_outputscale"
RAW_LS = "model.covar_module.base_kernel.raw_lengthscale"
RAW_NOISE = "likelihood.gp.noise_covar.raw_noise"
KNOWN = (Z, M_TILDE, CHOL, RAW_OS, RAW_LS, RAW_NOISE)


class NotBatchable(Exception):
    """These members cannot be trained as one batched model (the message says why, in one line)."""


@dataclass
class Member:
    """One configuration of the batch: its model (``SparseVariationalGP``), likelihood, training
    data, beta, the stage's named parameter groups and hooks, and its ``evaluate`` (or None)."""

    kind: str  # collapsed_elbo | log_loss
    model: object
    likelihood: object
    x: torch.Tensor
    y: torch.Tensor
    beta: float
    groups: dict
    hooks: list = field(default_factory=list)
    evaluate: Callable[[], dict] | None = None


@dataclass
class MemberFit:
    """What one member's training produced (as a separate run's ``TrainResult`` says it)."""

    losses: list[float]
    iterations: int
    converged: bool
    train_seconds: float  # this member's share of the batch's time: each iteration split among its active members
    iter_ms: float
    steps: dict = field(default_factory=dict)  # learning curves: name -> [(step, value)], as the loop logs them
    stop_rule: str = "window"


def _named(member: Member) -> dict[str, torch.Tensor]:
    out = {}
    for prefix, module in (("model.", member.model), ("likelihood.", member.likelihood)):
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            out[prefix + name] = t
    return out


def _check(members: list[Member]) -> None:
    import gpytorch

    if not members:
        raise NotBatchable("no members")
    first = members[0]
    if first.kind not in KINDS:
        raise NotBatchable(f"objective {first.kind!r} has no batched form")
    for m in members:
        if m.kind != first.kind:
            raise NotBatchable("the members train different objectives")
        k = m.model.covar_module
        if not (isinstance(k, gpytorch.kernels.ScaleKernel) and type(k.base_kernel) is gpytorch.kernels.RBFKernel):
            raise NotBatchable("only the rbf kernel has a batched form")
        if not isinstance(m.model.mean_module, gpytorch.means.ZeroMean):
            raise NotBatchable("only the zero mean has a batched form")
        if m.x.shape != first.x.shape or m.x.dtype != first.x.dtype or m.x.device != first.x.device:
            raise NotBatchable("the members' training sets differ in shape, dtype or device")
        trainable = {id(p) for ps in m.groups.values() for p in ps if p.requires_grad}
        named = _named(m)
        unknown = [n for n, t in named.items() if id(t) in trainable and n not in KNOWN]
        if unknown:
            raise NotBatchable(f"parameter {unknown[0]} has no batched form")
        if any(n not in named for n in KNOWN):
            raise NotBatchable("the model is not a SparseVariationalGP with ScaleKernel(RBF) and a Gaussian likelihood")
        if [(g, [tuple(p.shape) for p in ps]) for g, ps in m.groups.items()] != [
            (g, [tuple(p.shape) for p in ps]) for g, ps in first.groups.items()
        ]:
            raise NotBatchable("the members' parameter groups differ")


class BatchedSVGP:
    """The stacked parameters of B members and their batched losses (see the module docstring)."""

    def __init__(self, members: list[Member]):
        _check(members)
        self.members = members
        self.kind = members[0].kind
        first = members[0]
        self.x = torch.stack([m.x for m in members])  # B x N x D
        self.y = torch.stack([m.y for m in members])  # B x N
        self.beta = torch.tensor([m.beta for m in members], dtype=first.x.dtype, device=first.x.device)
        self.jitter = float(first.model.jitter)
        kern = first.model.covar_module
        self.ls_transform = kern.base_kernel.raw_lengthscale_constraint.transform
        self.os_transform = kern.raw_outputscale_constraint.transform
        self.noise_transform = first.likelihood.gp.noise_covar.raw_noise_constraint.transform
        named = [_named(m) for m in members]
        names0 = {id(t): n for n, t in named[0].items()}
        # trainable slots, in the members' optimiser order: (group, [names])
        self.group_names: list[tuple[str, list[str]]] = []
        trainable = set()
        for g, ps in first.groups.items():
            ns = [names0[id(p)] for p in ps if p.requires_grad]
            if ns:
                self.group_names.append((g, ns))
                trainable.update(ns)
        self.values: dict[str, torch.Tensor] = {}
        for n in KNOWN:
            stacked = torch.stack([nm[n].detach() for nm in named]).clone()
            self.values[n] = torch.nn.Parameter(stacked) if n in trainable else stacked
        self.trainable = [n for _, ns in self.group_names for n in ns]
        self._member_tensors = named

    def parameter_groups(self) -> list[tuple[str, list[torch.nn.Parameter]]]:
        return [(g, [self.values[n] for n in ns]) for g, ns in self.group_names]

    # ----- the batched model ----------------------------------------------------------------------
    def chunks(self) -> list[slice]:
        """The member ranges computed together (see ``CPU_CHUNK_ELEMENTS``)."""
        B, N = self.x.shape[:2]
        if self.x.device.type != "cpu":
            return [slice(0, B)]
        size = max(1, CPU_CHUNK_ELEMENTS // (self.values[Z].shape[-2] * N))
        return [slice(lo, min(lo + size, B)) for lo in range(0, B, size)]

    def _kernel(self, sl: slice, x1: torch.Tensor, x2: torch.Tensor, eq: bool = False) -> torch.Tensor:
        """outputscale * exp(-|x1 - x2|^2 / (2 l^2)), batched (b x n1 x n2), as gpytorch computes it."""
        from gpytorch.kernels.kernel import sq_dist

        ls = self.ls_transform(self.values[RAW_LS][sl])  # b x 1 x D (or b x 1 x 1)
        os = self.os_transform(self.values[RAW_OS][sl])  # b
        sq = sq_dist(x1.div(ls), x2.div(ls), x1_eq_x2=eq)
        return sq.div(-2).exp() * os[:, None, None]

    def _kuu_cholesky(self, sl: slice) -> torch.Tensor:
        Zs = self.values[Z][sl]
        Kuu = self._kernel(sl, Zs, Zs, eq=True)
        eye = torch.eye(Zs.shape[-2], dtype=Kuu.dtype, device=Kuu.device)
        L, info = torch.linalg.cholesky_ex(Kuu + self.jitter * eye)
        if bool(info.any()):
            raise NotBatchable("K_uu is not positive definite for a member (the separate run adds jitter)")
        return L

    def losses(self, sl: slice = slice(None)) -> torch.Tensor:
        """The per-datum losses of the members in ``sl`` (a vector; the optimiser minimises their sum)."""
        return self._collapsed(sl) if self.kind == "collapsed_elbo" else self._log_loss(sl)

    def _collapsed(self, sl: slice) -> torch.Tensor:
        x, r, beta = self.x[sl], self.y[sl], self.beta[sl]
        n = r.shape[-1]
        noise = self.noise_transform(self.values[RAW_NOISE][sl]).squeeze(-1)  # b
        L = self._kuu_cholesky(sl)
        A = torch.linalg.solve_triangular(L, self._kernel(sl, self.values[Z][sl], x), upper=False)  # b x M x N
        os = self.os_transform(self.values[RAW_OS][sl])
        k = (os[:, None] - (A**2).sum(-2)).clamp_min(0)  # K_ii - Q_ii
        eye = torch.eye(A.shape[-2], dtype=A.dtype, device=A.device)
        AAt = A @ A.mT
        L_B, info = torch.linalg.cholesky_ex(eye + AAt / (beta * noise)[:, None, None])
        if bool(info.any()):
            raise NotBatchable("I + A A^T / (beta s2) is not positive definite for a member")
        value, _, _ = collapsed_bound(A, r, k, noise, beta, L_B, AAt)
        return -value / n

    def _log_loss(self, sl: slice) -> torch.Tensor:
        from gpytorch.variational.variational_strategy import ComputePredictiveUpdates

        x, y, beta = self.x[sl], self.y[sl], self.beta[sl]
        n = y.shape[-1]
        noise = self.noise_transform(self.values[RAW_NOISE][sl]).squeeze(-1)  # b
        L = self._kuu_cholesky(sl)
        m, L_S = self.values[M_TILDE][sl], self.values[CHOL][sl].tril()
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        mu, dvar = ComputePredictiveUpdates.apply(L, self._kernel(sl, self.values[Z][sl], x), L_S @ L_S.mT - eye, m)
        os = self.os_transform(self.values[RAW_OS][sl])
        var = os[:, None] + self.jitter + dvar
        s = var + noise[:, None]
        log_marginal = -0.5 * math.log(2 * math.pi) - 0.5 * torch.log(s) - 0.5 * (y - mu) ** 2 / s
        logdet = 2 * L_S.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)
        kl = 0.5 * ((L_S * L_S).sum((-2, -1)) + (m * m).sum(-1) - m.shape[-1] - logdet)
        return (-log_marginal).mean(-1) + beta * kl / n

    # ----- members' own modules -----------------------------------------------------------------
    @torch.no_grad()
    def write_member(self, b: int) -> None:
        """Copy member ``b``'s current parameters into its own (gpytorch) model and likelihood."""
        for n in self.trainable:
            self._member_tensors[b][n].copy_(self.values[n][b])


def train_batched(
    members: list[Member],
    *,
    max_iters: int,
    lr: float,
    lr_scale: dict | None = None,
    eps: float | None = None,
    stop: ConvergenceRule | None = None,
    stop_rule: str = "auto",
    check_every: int = 10,
    eval_every: int = 0,
    eval_every_epochs: int | None = None,
    step_offsets: list[int] | None = None,
) -> list[MemberFit]:
    """Train the members as one batched model with one Adam optimiser (see the module docstring).

    ``max_iters``, ``lr`` (times ``lr_scale[group]``), ``eps``, the stopping rule (``stop_rule``:
    auto/window/none, with ``stop``'s window and tol), ``check_every`` and ``eval_every`` (full batch: one
    iteration is one epoch, so ``eval_every_epochs`` counts iterations too) are a
    separate run's ``TrainerSettings``: each member stops, evaluates and logs as its own run would.
    ``step_offsets``: per member, the iterations of its earlier stages (its learning curves go on from there).
    Members are written back into their own modules at every evaluation and at the end (then the
    stage's ``training_end`` hooks run). Raises ``NotBatchable`` (the caller trains the members
    separately) when the batched model does not apply or a member's loss is not finite."""
    stop = stop or ConvergenceRule()
    rule = make_rule(stop_rule, stochastic=False, window=stop.window, tol=stop.tol)
    if not isinstance(rule, (ConvergenceRule, NeverStop)):
        raise NotBatchable(f"stop rule {rule.name} has no batched form")
    batch = BatchedSVGP(members)
    B = len(members)
    lr_scale = lr_scale or {}
    groups = [{"params": ps, "lr": lr * lr_scale.get(g, 1.0), "name": g} for g, ps in batch.parameter_groups()]
    if not groups:
        raise NotBatchable("no trainable parameter")
    opt = torch.optim.Adam(groups, **({} if eps is None else {"eps": eps}))
    params = [p for g in groups for p in g["params"]]
    dtype, device = batch.x.dtype, batch.x.device
    losses = torch.empty(B, max_iters, dtype=dtype, device=device)
    active = [True] * B
    iterations = [0] * B
    converged = [False] * B
    seconds = [0.0] * B
    steps: list[dict] = [{} for _ in range(B)]
    eval_hooks = [[h for h in m.hooks if hasattr(h, "before_evaluate")] for m in members]
    chunks = batch.chunks()
    offsets = list(step_offsets) if step_offsets is not None else [0] * B
    it = 0
    t = time.perf_counter()
    while it < max_iters and any(active):
        mask = torch.tensor(active, device=device)
        frozen = None if all(active) else [p.detach().clone() for p in params]
        opt.zero_grad(set_to_none=True)
        parts = []
        for sl in chunks:  # one backward per chunk: its graph is freed before the next one is built
            part = batch.losses(sl)
            part.sum().backward()
            parts.append(part.detach())
        loss = torch.cat(parts)
        opt.step()
        if frozen is not None:  # stopped members keep their parameters
            with torch.no_grad():
                for p, old in zip(params, frozen):
                    p.copy_(torch.where(mask.view(-1, *([1] * (p.dim() - 1))), p, old))
        losses[:, it] = loss
        it += 1
        now = time.perf_counter()
        share = (now - t) / sum(active)
        t = now
        for b in range(B):
            if active[b]:
                seconds[b] += share
                iterations[b] = it
        if it % check_every == 0 or it == max_iters:
            for b in range(B):
                if not active[b]:
                    continue
                window = losses[b, :it]
                if not bool(torch.isfinite(window[-check_every:]).all()):
                    raise NotBatchable(f"member {b}'s loss became non-finite (its separate run reports where)")
                converged[b] = rule.converged(window)
        for b in range(B):
            if not active[b]:
                continue
            last = converged[b] or it == max_iters
            due = bool(eval_every and it % eval_every == 0) or bool(eval_every_epochs and it % eval_every_epochs == 0)
            if members[b].evaluate is not None and due and not last:
                t_eval = time.perf_counter()
                batch.write_member(b)
                for h in eval_hooks[b]:
                    h.before_evaluate()
                for k, v in members[b].evaluate().items():
                    steps[b].setdefault(k, []).append((offsets[b] + it, v))
                t += time.perf_counter() - t_eval  # evaluation time is not training time
            if converged[b]:
                active[b] = False
    out = []
    for b, m in enumerate(members):
        batch.write_member(b)
        for h in m.hooks:
            if hasattr(h, "training_end"):
                h.training_end()
        n_it = iterations[b]
        vals = losses[b, :n_it].tolist()
        steps[b]["train_loss"] = [(offsets[b] + i + 1, v) for i, v in enumerate(vals)]
        out.append(
            MemberFit(
                losses=vals,
                iterations=n_it,
                converged=converged[b],
                train_seconds=seconds[b],
                iter_ms=1000 * seconds[b] / max(n_it, 1),
                steps=steps[b],
                stop_rule=rule.name,
            )
        )
    return out


__all__ = ["KINDS", "BatchedSVGP", "Member", "MemberFit", "NotBatchable", "train_batched"]
