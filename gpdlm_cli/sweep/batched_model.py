"""Batched configurations (issue 21, item 4): B independent sparse variational GPs -- the seeds and
betas of one model and training size -- trained as one batched model by one Adam optimiser.

One model, not a copy of its maths (issue 46, item 4): the members' ordinary model
(``models.SparseVariationalGP``), likelihood and objective (``objectives.CollapsedELBO`` for SVGP's
collapsed ELBO, ``objectives.DLM`` with the closed-form Gaussian log marginal) are evaluated once with
a leading batch dimension. Every parameter of the B members is stacked along it (inducing inputs
Z: B x M x D, q(u): B x M and B x M x M, raw outputscale: B, raw lengthscale: B x 1 x D, raw noise:
B x 1), and so are the data (X: B x N x D, y: B x N: each seed has its own split and
standardisation) and beta (B). ``torch.func.functional_call`` runs a template copy of the first
member's objective with the stacked tensors in place of its parameters; the objectives broadcast
over leading dimensions and return the B members' per-datum losses.

The loss is the sum of the members' per-datum losses, so each member's gradient is the gradient of
its own loss, and Adam -- elementwise -- moves every member exactly as its own run would, up to
float rounding of the batched kernels (gpytorch's batched kernel path). Each member has its own
stopping: the paper's window rule (App. D) is applied to its own losses every ``check_every``
iterations; a stopped member's parameters are restored after every later step (frozen), while the
others go on. On the CPU the loss and its backward pass are computed chunk by chunk of members
(``CPU_CHUNK_ELEMENTS``: the functional call takes slices of the stacked tensors); the optimiser
step is one for the whole batch.

Anything the family's ``batched_scope`` does not admit (other kernels, means, likelihoods,
minibatches, sampling estimators, optimisers) never reaches this module; members whose objectives,
parameters or data differ in kind or shape are refused with ``NotBatchable`` and the caller trains
them separately.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..training.stopping import ConvergenceRule, NeverStop, make_rule

KINDS = ("collapsed_elbo", "log_loss")
#: on the CPU, members are processed in chunks whose M x N blocks hold at most this many elements in all
#: (2 MB in float64, about a core's L2 cache; at least one member per chunk). Larger blocks cost more
#: than batching saves: the C allocator maps big temporaries afresh (page faults) at every step, and
#: they leave the cache. Measured (bench_batched, svgp, N = 4,000, M = 100, B = 32, 1 thread, loaded
#: machine): per-member ms per iteration 42 at 2^18, 50 at 2^20, 54 at 2^21, 82 unchunked; one separate
#: model 48. On a GPU the whole batch is one chunk.
CPU_CHUNK_ELEMENTS = 2**18

# the (qualified) names, in the objective, of the parameters of a SparseVariationalGP with
# ScaleKernel(RBF) and gpdlm's GaussianLikelihood (the inducing inputs size the chunks)
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
    data, beta, the stage's named parameter groups and hooks, its ``evaluate`` (or None) and its
    stage's ``objective`` (None: the ordinary objective of ``kind`` is built on the model)."""

    kind: str  # collapsed_elbo | log_loss
    model: object
    likelihood: object
    x: torch.Tensor
    y: torch.Tensor
    beta: float
    groups: dict
    hooks: list = field(default_factory=list)
    evaluate: Callable[[], dict] | None = None
    objective: object = None


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


def _objective(member: Member):
    """The member's ordinary objective module: its stage's, or the one of its ``kind`` on its model."""
    from ..objectives import DLM
    from ..objectives.collapsed_elbo import CollapsedELBO

    cls = CollapsedELBO if member.kind == "collapsed_elbo" else DLM
    if member.objective is not None:
        if not isinstance(member.objective, cls):
            raise NotBatchable(f"the stage's objective is not the {member.kind} objective")
        return member.objective
    n = member.x.shape[0]
    if cls is CollapsedELBO:
        return CollapsedELBO(member.model, member.likelihood, n, member.beta)
    from ..estimators import ExactEstimator

    return DLM(member.model, member.likelihood, ExactEstimator(), n, member.beta)


def _check(members: list[Member], named: list[dict]) -> None:
    """``named``: each member's objective parameters by qualified name (``model.…``, ``likelihood.…``)."""
    if not members:
        raise NotBatchable("no members")
    first = members[0]
    if first.kind not in KINDS:
        raise NotBatchable(f"objective {first.kind!r} has no batched form")
    shapes0 = None
    for m, params in zip(members, named):
        if m.kind != first.kind:
            raise NotBatchable("the members train different objectives")
        if m.x.shape != first.x.shape or m.x.dtype != first.x.dtype or m.x.device != first.x.device:
            raise NotBatchable("the members' training sets differ in shape, dtype or device")
        shapes = {n: tuple(t.shape) for n, t in params.items()}
        if shapes0 is None:
            shapes0 = shapes
        elif shapes != shapes0:
            raise NotBatchable("the members' models differ in their parameters")
        if any(n not in shapes for n in KNOWN):
            raise NotBatchable("the model is not a SparseVariationalGP with ScaleKernel(RBF) and a Gaussian likelihood")
        if [(g, [tuple(p.shape) for p in ps]) for g, ps in m.groups.items()] != [
            (g, [tuple(p.shape) for p in ps]) for g, ps in first.groups.items()
        ]:
            raise NotBatchable("the members' parameter groups differ")


class BatchedSVGP:
    """B members as one model with a leading batch dimension: their stacked parameters (``values``,
    by qualified name in the objective) and the ordinary objective evaluated on them (module docstring)."""

    def __init__(self, members: list[Member]):
        objectives = [_objective(m) for m in members]
        named = [dict(o.named_parameters()) for o in objectives]
        _check(members, named)
        self.members = members
        self.kind = members[0].kind
        first = members[0]
        self.x = torch.stack([m.x for m in members])  # B x N x D
        self.y = torch.stack([m.y for m in members])  # B x N
        self.beta = torch.tensor([m.beta for m in members], dtype=first.x.dtype, device=first.x.device)
        self.jitter = float(first.model.jitter)
        # the template: the first member's objective (and model, likelihood) copied; its parameters are
        # replaced by slices of the stacked ones at every call
        self.objective = copy.deepcopy(objectives[0])
        names0 = {id(t): n for n, t in named[0].items()}
        # trainable slots, in the members' optimiser order: (group, [names])
        self.group_names: list[tuple[str, list[str]]] = []
        trainable = set()
        for g, ps in first.groups.items():
            ns = [names0[id(p)] for p in ps if p.requires_grad and id(p) in names0]
            if len(ns) != sum(p.requires_grad for p in ps):
                raise NotBatchable(f"a parameter of group {g} is not the model's or the likelihood's")
            if ns:
                self.group_names.append((g, ns))
                trainable.update(ns)
        self.values: dict[str, torch.Tensor] = {}
        for n in named[0]:
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

    def losses(self, sl: slice = slice(None)) -> torch.Tensor:
        """The per-datum losses of the members in ``sl`` (a vector; the optimiser minimises their sum):
        the members' objective on the slices of the stacked parameters."""
        from linear_operator.utils.errors import NotPSDError

        from ..exceptions import NumericalError

        self.objective.beta = self.beta[sl]
        params = {n: t[sl] for n, t in self.values.items()}
        try:
            return torch.func.functional_call(self.objective, params, (self.x[sl], self.y[sl]))
        except (NumericalError, NotPSDError) as e:
            raise NotBatchable(f"a member's matrix is not positive definite ({str(e).splitlines()[0]})") from None

    # ----- members' own modules -----------------------------------------------------------------
    @torch.no_grad()
    def write_member(self, b: int) -> None:
        """Copy member ``b``'s current parameters into its own (gpytorch) model and likelihood."""
        for n in self.trainable:
            self._member_tensors[b][n].copy_(self.values[n][b])


def read_blob(path, key: str, fmt: int) -> dict | None:
    """A batched checkpoint at ``path`` (``write_blob``), or None: none, one whose bytes fail their SHA-256 or
    cannot be read, or one of another format or key (``training.checkpoint.read_checkpoint``)."""
    from ..training.checkpoint import read_checkpoint

    blob = read_checkpoint(path, fmt=fmt)
    return blob if blob is not None and blob.get("key") == key else None


def write_blob(path, blob: dict) -> None:
    """Write a batched checkpoint atomically with its SHA-256 beside it (``files.write_verified``), never half
    (stop signals wait for its end); one that cannot be written costs a restart, never the group."""
    import io
    from pathlib import Path

    from ..files import write_verified
    from ..signals import deferred_signals

    buf = io.BytesIO()
    torch.save(blob, buf)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with deferred_signals(user_signals=True):
            write_verified(path, buf.getvalue())
    except OSError:
        pass


def remove_blob(path) -> None:
    from pathlib import Path

    from ..files import sidecar

    Path(path).unlink(missing_ok=True)
    sidecar(Path(path)).unlink(missing_ok=True)


class BatchCheckpoint:
    """The checkpoint of a full-batch group (``train_batched``): one file, ``path``, for the group whose members'
    config hashes make ``key`` (it continues only the same group), holding the iteration, the stacked
    parameters, Adam's state, every member's losses, stopping state, time share and step metrics, and torch's
    generator. Written every ``every``-th iteration with an evaluation and when the group is stopped from
    outside between two iterations; read only with ``resume`` (a sweep run again with ``sweep.skip_finished``:
    without it a sweep trains everything again, as its separate jobs do)."""

    FORMAT = 1

    def __init__(self, path, key: str, every: int, resume: bool = True):
        from pathlib import Path

        self.path, self.key, self.every, self.resume = Path(path), key, int(every), bool(resume)
        self.evaluated = 0
        self.resumed_at: int | None = None  # the iteration the group continued from (None: it started afresh)

    def load(self) -> dict | None:
        """The group's checkpoint, or None (none, unreadable, or ``resume`` False: the group trains afresh)."""
        return read_blob(self.path, self.key, self.FORMAT) if self.resume else None

    def save(self, blob: dict) -> None:
        write_blob(self.path, {"format": self.FORMAT, "key": self.key, **blob})

    def remove(self) -> None:
        remove_blob(self.path)


def _group_blob(it: int, params: list, opt, state: _Progress) -> dict:
    return {
        "it": it,
        "params": [p.detach().cpu().clone() for p in params],
        "opt": opt.state_dict(),
        "losses": state.losses[:, :it].detach().cpu().clone(),
        "active": list(state.active),
        "iterations": list(state.iterations),
        "converged": list(state.converged),
        "seconds": list(state.seconds),
        "steps": [{k: [[s, v] for s, v in pts] for k, pts in d.items()} for d in state.steps],
        "torch_rng": torch.get_rng_state(),
    }


def _resume_group(blob: dict, params: list, opt, state: _Progress) -> int:
    """The group continued from its checkpoint ``blob``: the iteration it continues from."""
    it = int(blob["it"])
    with torch.no_grad():
        for p, v in zip(params, blob["params"]):
            p.copy_(v.to(p.device, p.dtype))
        state.losses[:, :it] = blob["losses"].to(state.losses.device, state.losses.dtype)
    opt.load_state_dict(blob["opt"])
    state.active = [bool(a) for a in blob["active"]]
    state.iterations = [int(i) for i in blob["iterations"]]
    state.converged = [bool(c) for c in blob["converged"]]
    state.seconds = [float(t) for t in blob["seconds"]]
    state.steps = [{k: [(int(s), float(v)) for s, v in pts] for k, pts in d.items()} for d in blob["steps"]]
    torch.set_rng_state(blob["torch_rng"])
    return it


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
    checkpoint: BatchCheckpoint | None = None,
) -> list[MemberFit]:
    """Train the members as one batched model with one Adam optimiser (see the module docstring).

    ``max_iters``, ``lr`` (times ``lr_scale[group]``), ``eps``, the stopping rule (``stop_rule``:
    auto/window/none, with ``stop``'s window and tol), ``check_every`` and ``eval_every`` (full batch: one
    iteration is one epoch, so ``eval_every_epochs`` counts iterations too) are a
    separate run's ``TrainerSettings``: each member stops, evaluates and logs as its own run would.
    ``step_offsets``: per member, the iterations of its earlier stages (its learning curves go on from there).
    Members are written back into their own modules at every evaluation and at the end (then the
    stage's ``training_end`` hooks run). Raises ``NotBatchable`` (the caller trains the members
    separately) when the batched model does not apply or a member's loss is not finite. ``checkpoint``: the
    group's checkpoint (``BatchCheckpoint``): the group continues from it when there is one; stop signals wait
    for the iteration in progress."""
    stop = stop or ConvergenceRule()
    rule = make_rule(stop_rule, stochastic=False, window=stop.window, tol=stop.tol)
    if not isinstance(rule, (ConvergenceRule, NeverStop)):
        raise NotBatchable(f"stop rule {rule.name} has no batched form")
    batch = BatchedSVGP(members)
    lr_scale = lr_scale or {}
    groups = [{"params": ps, "lr": lr * lr_scale.get(g, 1.0), "name": g} for g, ps in batch.parameter_groups()]
    if not groups:
        raise NotBatchable("no trainable parameter")
    opt = torch.optim.Adam(groups, **({} if eps is None else {"eps": eps}))
    params = [p for g in groups for p in g["params"]]
    state = _Progress(members, max_iters, batch.x, step_offsets)
    chunks = batch.chunks()
    it = 0
    blob = checkpoint.load() if checkpoint is not None else None
    if checkpoint is not None and blob is not None:
        it = checkpoint.resumed_at = _resume_group(blob, params, opt, state)
    from ..signals import deferred_signals, killed_reason, stopped_mid_step

    t = time.perf_counter()
    shown = GroupProgress(f"group of {len(members)}")
    try:
        while it < max_iters and any(state.active):
            with deferred_signals(user_signals=True, interruptible=True):  # whole iterations only
                state.losses[:, it] = _adam_step(batch, opt, params, chunks, state.active)
                it += 1
                shown.tick(it, max_iters, sum(state.active))
                t = state.account(it, t)
                if it % check_every == 0 or it == max_iters:
                    state.check(it, rule, check_every)
                before = sum(len(pts) for d in state.steps for pts in d.values())
                t = state.evaluate(batch, it, eval_every, eval_every_epochs, max_iters, t)
                evaluated = sum(len(pts) for d in state.steps for pts in d.values()) != before
            if checkpoint is not None and checkpoint.every > 0 and evaluated:
                checkpoint.evaluated += 1
                if checkpoint.evaluated % checkpoint.every == 0:
                    checkpoint.save(_group_blob(it, params, opt, state))
    except BaseException as e:
        if checkpoint is not None and killed_reason(e) and not stopped_mid_step(e):
            checkpoint.save(_group_blob(it, params, opt, state))
        raise
    return [state.fit(batch, b, rule) for b in range(len(members))]


def _adam_step(batch: BatchedSVGP, opt, params: list, chunks: list[slice], active: list[bool]) -> torch.Tensor:
    """One Adam step of the batch (one backward per chunk of members); stopped members keep their values.
    Returns the members' losses (B)."""
    frozen = None if all(active) else [p.detach().clone() for p in params]
    opt.zero_grad(set_to_none=True)
    parts = []
    for sl in chunks:  # one backward per chunk: its graph is freed before the next one is built
        part = batch.losses(sl)
        part.sum().backward()
        parts.append(part.detach())
    opt.step()
    if frozen is not None:  # stopped members keep their parameters
        mask = torch.tensor(active, device=batch.x.device)
        with torch.no_grad():
            for p, old in zip(params, frozen):
                p.copy_(torch.where(mask.view(-1, *([1] * (p.dim() - 1))), p, old))
    return torch.cat(parts)


#: a batched group trains for minutes to hours in one job, silently: a progress line at most this often
PROGRESS_EVERY_S = 60.0


class GroupProgress:
    """One stderr line at most every ``PROGRESS_EVERY_S`` seconds while a batched group trains: where it is
    (the furthest member's iteration of its cap), how many members still train, the time so far and the time
    left at the rate since this process started training the group (a continued group counts from where it
    continued)."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic):
        self.what, self.clock = what, clock
        self.t0 = self.last = clock()
        self.it0: int | None = None

    def tick(self, it: int, cap: int, training: int) -> None:
        now = self.clock()
        if self.it0 is None:
            self.it0 = it - 1
        if now - self.last < PROGRESS_EVERY_S or it >= cap:
            return
        self.last = now
        done, spent = it - self.it0, now - self.t0
        left = spent / done * (cap - it) if done > 0 else float("nan")
        print(
            f"gpdlm: sweep.batched: {self.what}: iteration {it:,} of {cap:,} ({100 * it / cap:.0f}%), "
            f"{training} training, {_minutes(spent)} so far, about {_minutes(left)} left",
            file=sys.stderr,
            flush=True,
        )


def _minutes(s: float) -> str:
    return "?" if s != s else f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


class _Progress:
    """Each member's training so far: losses, iterations, stopping, time share and learning curves."""

    def __init__(self, members: list[Member], max_iters: int, x: torch.Tensor, step_offsets: list[int] | None):
        B = len(members)
        self.members = members
        self.losses = torch.empty(B, max_iters, dtype=x.dtype, device=x.device)
        self.active = [True] * B
        self.iterations = [0] * B
        self.converged = [False] * B
        self.seconds = [0.0] * B
        self.steps: list[dict] = [{} for _ in range(B)]
        self.eval_hooks = [[h for h in m.hooks if hasattr(h, "before_evaluate")] for m in members]
        self.offsets = list(step_offsets) if step_offsets is not None else [0] * B

    def account(self, it: int, t: float) -> float:
        """Share the iteration's time among the active members; the new start time."""
        now = time.perf_counter()
        share = (now - t) / sum(self.active)
        for b, on in enumerate(self.active):
            if on:
                self.seconds[b] += share
                self.iterations[b] = it
        return now

    def check(self, it: int, rule, check_every: int) -> None:
        """Each active member's stopping rule on its own losses (non-finite: ``NotBatchable``)."""
        for b, on in enumerate(self.active):
            if not on:
                continue
            window = self.losses[b, :it]
            if not bool(torch.isfinite(window[-check_every:]).all()):
                raise NotBatchable(f"member {b}'s loss became non-finite (its separate run reports where)")
            self.converged[b] = rule.converged(window)

    def evaluate(self, batch: BatchedSVGP, it: int, eval_every: int, eval_every_epochs, max_iters: int, t: float):
        """The members' evaluations when due (their time is not training time); members that converged stop.
        Returns the start time of the next iteration."""
        due = bool(eval_every and it % eval_every == 0) or bool(eval_every_epochs and it % eval_every_epochs == 0)
        for b, m in enumerate(self.members):
            if not self.active[b]:
                continue
            last = self.converged[b] or it == max_iters
            if m.evaluate is not None and due and not last:
                t_eval = time.perf_counter()
                batch.write_member(b)
                for h in self.eval_hooks[b]:
                    h.before_evaluate()
                for k, v in m.evaluate().items():
                    self.steps[b].setdefault(k, []).append((self.offsets[b] + it, v))
                t += time.perf_counter() - t_eval  # evaluation time is not training time
            if self.converged[b]:
                self.active[b] = False
        return t

    def fit(self, batch: BatchedSVGP, b: int, rule) -> MemberFit:
        """Member b written back into its own modules (its ``training_end`` hooks run) and its ``MemberFit``."""
        batch.write_member(b)
        for h in self.members[b].hooks:
            if hasattr(h, "training_end"):
                h.training_end()
        n_it = self.iterations[b]
        vals = self.losses[b, :n_it].tolist()
        self.steps[b]["train_loss"] = [(self.offsets[b] + i + 1, v) for i, v in enumerate(vals)]
        return MemberFit(
            losses=vals,
            iterations=n_it,
            converged=self.converged[b],
            train_seconds=self.seconds[b],
            iter_ms=1000 * self.seconds[b] / max(n_it, 1),
            steps=self.steps[b],
            stop_rule=rule.name,
        )


__all__ = ["KINDS", "BatchCheckpoint", "BatchedSVGP", "Member", "MemberFit", "NotBatchable", "train_batched"]
