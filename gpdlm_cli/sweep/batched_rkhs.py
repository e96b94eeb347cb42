"""Batched configurations of the RKHS family (issue 41, item 2): B runs of one model (``scgd``, ``minimax`` or
``bsgd`` on ``kernel=linear|rff``, or the RKHS study's minibatch ``svgp``) that differ only in their seed,
their split mask and their learning rate, trained in one process, step by step together.

Each member keeps everything its separate run has: its own ``training.loop.Loop`` (its batch order from its
own seeded generator, its epoch and step hooks -- SCGD's F~ refresh, MINIMAX's projections, penalty schedule
and dual batches --, its stopping rule, its evaluations, its best iterate under ``keep_best``), its own
modules and its own optimiser state. What is shared is the arithmetic of the step: the members' trainable
parameters are the rows of one flat B x P tensor (each member's own parameters are views of its row), the
network and kernel map run once for all members (``torch.func.vmap`` of the member's ordinary feature map),
the closed-form step is one batched computation (``objectives.rkhs_batched``), and AdaDelta updates the
whole B x P tensor at once with a per-member learning rate (``training.optim.StackedAdadelta``). A member
that stops (its rule, or its budget) ends as its run ends (``Loop._finish``: its best iterate restored) and
its row is frozen from then on; the others go on.

The RKHS study's SVGP arm -- minibatch SVGP on the network's features with the linear kernel and AdaDelta
(``methods.sparse_variational.batched_trainer``) -- is batched the same way (kind ``svgp``): the network runs
once for all members (``vmap``), then the member's ordinary ELBO on its GP alone with the stacked parameters
(``functional_call``: ``SparseVariationalGP`` broadcasts over the member dimension).

Every member equals its separate run up to float rounding (tests/sweep/test_batched_rkhs.py: 1e-8 in
float64). Its training time is its share of each batched step (the step's time divided among the members
still training; evaluations excluded, as in a separate run).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..exceptions import NumericalError
from .batched_model import GroupProgress, NotBatchable, read_blob, remove_blob, write_blob

if TYPE_CHECKING:
    from ..methods.base import Method
    from ..training.loop import TrainerSettings, TrainResult


class _Inputs(torch.nn.Module):
    """A member's step inputs from its model: phi(x) (float64) and the noise s2."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.features(x), self.model.noise


@dataclass
class RKHSMember:
    """One run of the batch: its ``method`` (a ``methods.base.Method`` of one stage, prepared: the stage's
    ``prepare`` has run), the stage's trainer ``settings``, its training rows, its ``seed`` (its batch
    order's generator) and its ``evaluate`` (None: no intermediate evaluations)."""

    method: Method
    settings: TrainerSettings
    x: torch.Tensor
    y: torch.Tensor
    seed: int
    evaluate: object = None


@dataclass
class RKHSMemberFit:
    """What a member's training produced: its loop's ``TrainResult`` (time: its share) and its step metrics."""

    result: TrainResult
    steps: dict = field(default_factory=dict)


def _svgp_kind(objective) -> bool:
    """Whether the objective is minibatch SVGP's ELBO on input features with the linear kernel in closed form
    (the RKHS study's SVGP arm), which the stacked step computes with the members' ordinary model."""
    from ..features.linear import LinearKernelMap
    from ..likelihoods import GaussianLikelihood
    from ..models.feature_input import FeatureInputGP
    from ..models.sparse_variational import SparseVariationalGP
    from ..objectives.elbo import ELBO

    if not isinstance(objective, ELBO) or not isinstance(getattr(objective, "model", None), FeatureInputGP):
        return False
    gp = objective.model.gp
    if not isinstance(gp, SparseVariationalGP) or not isinstance(
        getattr(gp.covar_module, "feature_map", None), LinearKernelMap
    ):
        raise NotBatchable("minibatch SVGP is batched on the linear kernel of its features only")
    if not isinstance(objective.likelihood, GaussianLikelihood):
        raise NotBatchable("minibatch SVGP is batched with the Gaussian likelihood only")
    return True


def _kind(objective) -> str:
    from ..models.bayesian_linear import BayesianLinearGP
    from ..objectives.rkhs import SCGD, BatchNLML, Minimax

    if _svgp_kind(objective):
        return "svgp_step"
    if not isinstance(getattr(objective, "model", None), BayesianLinearGP):
        raise NotBatchable("the model is not the finite-feature GP (kernel=linear|rff)")
    if isinstance(objective, SCGD) and objective.fused:
        return "scgd_step"
    if isinstance(objective, Minimax) and objective.fused:
        return "minimax_step"
    if isinstance(objective, BatchNLML) and objective.nearest is None:
        return "bsgd_step"
    raise NotBatchable(f"objective {type(objective).__name__} has no batched form")


class StackedRKHS:
    """The members' tensors in stacked storage: the trainable ones as the rows of ``flat`` (B x P; by name, the
    leaves ``leaves``, B x ..., view its columns), every other parameter and buffer of the objective stacked by
    name (B x ...); each member's own tensors are views of its row, so its modules, hooks, evaluations and
    snapshots see and change the stacked values."""

    def __init__(self, members: list[RKHSMember]):
        if len(members) < 1:
            raise NotBatchable("no members")
        self.stages = [m.method.stages[-1] for m in members]
        self.objectives = [s.objective for s in self.stages]
        kinds = {_kind(o) for o in self.objectives}
        if len(kinds) != 1:
            raise NotBatchable("the members train different objectives")
        self.kind = kinds.pop()
        self.models = [o.model for o in self.objectives]
        self.B = len(members)
        named = [self._named(o) for o in self.objectives]
        shapes = {n: (tuple(t.shape), t.dtype) for n, t in named[0].items()}
        for nm, m in zip(named, members):
            if {n: (tuple(t.shape), t.dtype) for n, t in nm.items()} != shapes:
                raise NotBatchable("the members' models differ in their parameters")
            if m.x.shape[1:] != members[0].x.shape[1:] or m.x.dtype != members[0].x.dtype:
                raise NotBatchable("the members' inputs differ in width or dtype")  # n may differ (masks)
        self.trainable = self._trainable_names(named[0])
        self._build(named)
        self.evaluations = 0  # the members' evaluations so far (train_rkhs_batched's checkpoint cadence)
        self._template: torch.nn.Module | None = (
            None  # svgp: the first member's objective on its GP alone (``_svgp_values``)
        )

    @staticmethod
    def _named(objective) -> dict[str, torch.Tensor]:
        out = dict(objective.named_parameters())
        out.update(objective.named_buffers())
        return out

    def _trainable_names(self, named0: dict) -> list[str]:
        ids = {id(t): n for n, t in named0.items()}
        names: list[str] = []
        for ps in self.stages[0].groups.values():
            for p in ps:
                if p.requires_grad and ids.get(id(p)) not in names:
                    if id(p) not in ids:
                        raise NotBatchable("a trained parameter is not the objective's")
                    names.append(ids[id(p)])
        if not names:
            raise NotBatchable("no trainable parameter")
        return names

    def _build(self, named: list[dict]) -> None:
        t0 = named[0][self.trainable[0]]
        if any(named[0][n].dtype != t0.dtype for n in self.trainable):
            raise NotBatchable("the trained parameters mix dtypes")
        self.slices, offset = {}, 0
        for n in self.trainable:
            k = named[0][n].numel()
            self.slices[n] = (offset, offset + k, tuple(named[0][n].shape))
            offset += k
        rows = [torch.cat([nm[n].detach().reshape(-1) for n in self.trainable]) for nm in named]
        self.flat = torch.stack(rows)  # B x P: the storage of every member's trained values
        self.leaves: dict[str, torch.Tensor] = {}  # B x ... leaves viewing flat's columns (their gradients: B x ...)
        for n, (lo, hi, shape) in self.slices.items():
            self.leaves[n] = self.flat[:, lo:hi].view(self.B, *shape).requires_grad_(True)
        self.fixed: dict[str, torch.Tensor] = {}
        for n in named[0]:
            if n not in self.slices:
                self.fixed[n] = torch.stack([nm[n].detach() for nm in named]).clone()
        with torch.no_grad():  # the members' own tensors become views of the stacked storage
            for b, nm in enumerate(named):
                for n, t in nm.items():
                    if n in self.slices:
                        lo, hi, shape = self.slices[n]
                        t.data = self.flat[b, lo:hi].view(shape)
                    else:
                        t.data = self.fixed[n].data[b]

    def tensor(self, name: str) -> torch.Tensor:
        """The members' values of ``name`` (B x ...): a leaf viewing ``flat`` (trained) or the stacked tensor."""
        return self.leaves[name] if name in self.leaves else self.fixed[name]

    def learning_rates(self, loops) -> torch.Tensor:
        """B x P: each element's step size, from each member's own optimiser groups (lr x lr_scale)."""
        lr = torch.zeros_like(self.flat)
        for b, (loop, obj) in enumerate(zip(loops, self.objectives)):
            ids = {id(t): n for n, t in self._named(obj).items()}
            covered = 0
            for g in loop.opt.param_groups:
                for p in g["params"]:
                    lo, hi, _ = self.slices[ids[id(p)]]
                    lr[b, lo:hi] = float(g["lr"])
                    covered += hi - lo
            if covered != lr.shape[1]:
                raise NotBatchable("the optimiser's groups do not cover the trained parameters")
        return lr

    def invalidate(self, b: int) -> None:
        """Member b's cached posterior is stale (its tensors changed through the stacked storage, which does
        not bump their version counters)."""
        if self.kind != "svgp_step":
            self.models[b]._post = None

    # ----- the batched step ---------------------------------------------------------------------------------
    def features(self, x: torch.Tensor):
        """(phi (B x b x d), s2 (B)): every member's ordinary feature map on its rows ``x`` (B x b x D)."""
        wrapper = _Inputs(self.models[0])
        params = {n: self.tensor(n) for n in list(self.slices) + list(self.fixed) if n.startswith("model.")}

        def one(p, xb):
            return torch.func.functional_call(wrapper, p, (xb,))

        return torch.func.vmap(one)(params, x)

    def cholesky(self, A: torch.Tensor, what: str, active: list[bool]) -> torch.Tensor:
        """chol(A) per member, with ``cholesky_dxd``'s jitter rule applied to a member only where it needs it."""
        from ..models.bayesian_linear import cholesky_dxd

        L, info = torch.linalg.cholesky_ex(A)
        if A.device.type != "cpu":
            for b, m in enumerate(self.models):
                m.chol_log.record_device(info[b])
            return L
        if bool(info.any()):
            for b in info.nonzero().flatten().tolist():
                if active[b]:
                    L[b] = cholesky_dxd(A[b], self.models[b].chol_log, what=what)
                else:  # a stopped member: its value is not used
                    L[b] = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return L

    def values(self, x: torch.Tensor, y: torch.Tensor, active: list[bool]) -> torch.Tensor:
        """The members' step values (B), differentiable in the leaves; sets the objectives' per-step state."""
        from ..objectives.rkhs_batched import MinimaxStepBatched, SCGDStepBatched, bsgd_values

        if self.kind == "svgp_step":
            return self._svgp_values(x, y)
        phi, s2 = self.features(x)
        y = y.to(torch.float64)
        objs = self.objectives
        n = None
        if self.kind != "bsgd_step":  # each member's own n (two 90/10 masks of a set can differ by a row)
            n = torch.tensor([float(o.num_data) for o in objs], dtype=torch.float64, device=phi.device)
        if self.kind == "scgd_step":
            L = self.cholesky(self.tensor("F_tilde"), "F~ (SCGD)", active)
            values, F_batch = SCGDStepBatched.apply(phi, self.tensor("w"), s2, y, L, n)
            for b, o in enumerate(objs):
                o._F_batch = F_batch[b]
            return values
        if self.kind == "minimax_step":
            phi_bar = self._dual_features(phi, active)
            mu = torch.tensor([float(o.mu) for o in objs], dtype=torch.float64, device=phi.device)

            def factor(A):
                return self.cholesky(A.detach(), "A (MINIMAX)", active)

            args = (self.tensor("M"), self.tensor("B"), y, self.tensor("C"), phi_bar, mu, n, factor)
            return MinimaxStepBatched.apply(phi, self.tensor("w"), s2, *args)
        values = bsgd_values(phi, y, s2)
        if x.device.type == "cpu" and not bool(torch.isfinite(values[torch.tensor(active)]).all()):
            raise NotBatchable(
                "a member's batch covariance is not positive definite (its separate run reports it)"
            ) from None
        return values

    #: per-member scalars of the linear kernel map, passed as B x 1 x 1 so that they broadcast over rows and features
    _SCALARS = ("covar_module.feature_map.raw_outputscale", "covar_module.feature_map.normaliser")

    def _svgp_values(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Minibatch SVGP's per-datum negative ELBO of every member (B): the network once for all members
        (``vmap`` of the member's own network), then the member's ordinary objective -- which broadcasts over
        a leading batch dimension -- on its GP with the stacked parameters (``functional_call``)."""
        model0 = self.objectives[0].model
        template = self._template
        if template is None:
            template = copy.deepcopy(self.objectives[0])
            template.model = template.model.gp  # the objective on the GP alone: phi(x) is its input
            template.model._q_ready = True  # every member's q(u) was initialised as its run initialises it
            self._template = template
        names = list(self.slices) + list(self.fixed)
        net = {n[len("model.features.") :]: self.tensor(n) for n in names if n.startswith("model.features.")}

        def one(p, xb):
            return torch.func.functional_call(model0.features, p, (xb,))

        phi = torch.func.vmap(one)(net, x)
        params = {}
        for n in names:
            if n.startswith("model.gp."):
                key = n[len("model.gp.") :]
                t = self.tensor(n)
                if key in self._SCALARS:
                    t = t.reshape(self.B, 1, 1)
                elif key.startswith("variational_strategy.") and key.endswith(("initialized", "updated_strategy")):
                    continue  # the template's flags (set)
                params["model." + key] = t
            elif n.startswith("likelihood.") and n in self.slices:
                params[n] = self.tensor(n)
        template.num_data = torch.tensor(
            [float(o.num_data) for o in self.objectives], dtype=phi.dtype, device=phi.device
        )
        template.beta = torch.tensor([float(o.beta) for o in self.objectives], dtype=phi.dtype, device=phi.device)
        try:
            return torch.func.functional_call(template, params, (phi, y.to(phi.dtype)))
        except NumericalError as e:
            raise NotBatchable(f"a member's K_uu is not positive definite ({str(e).splitlines()[0]})") from None

    @torch.no_grad()
    def _dual_features(self, phi: torch.Tensor, active: list[bool]) -> torch.Tensor:
        """MINIMAX's max-step batches: each member's own draw (from its objective's generator) of its own rows."""
        objs, b = self.objectives, phi.shape[-2]
        full = {b >= o.num_data for o in objs}
        if full == {True}:
            return phi.detach()
        if len(full) > 1:
            raise NotBatchable("some members' batches are their full training sets, others' are not")
        rows = []
        for o, on in zip(objs, active):
            idx = o.sample_dual_batch(b) if on else torch.zeros(b, dtype=torch.long, device=phi.device)
            rows.append(o.model.x_train[idx])
        phi_bar, _ = self.features(torch.stack(rows))
        return phi_bar


class GroupCheckpoint:
    """Checkpoints of a stacked group (``sweep.batched``): one file per member, ``<directory>/<key>.pt`` (``key``:
    the member's config hash; written atomically with its SHA-256 beside it, ``files.write_verified``), holding
    everything its training continues from -- its loop's state (iteration, losses, batch permutation, best
    iterate, stopping rule's losses, hook states: SCGD's weights, MINIMAX's schedule and dual-batch generator),
    its batch-order generator, its modules' tensors, its rows of the stacked AdaDelta's state, whether it still
    trains, its share of the time, its step metrics so far -- and torch's generator. Written every ``every``-th
    iteration in which a member was evaluated, and when the group is stopped from outside between two
    iterations; read back (verified) when a group with that member trains again (a sweep run again: a member
    continues where it stopped, whatever the other members of its new group); removed once the group has
    trained (its members' results are then in the process's store: a stop while the jobs save their results
    costs the unfinished jobs their group's training)."""

    FORMAT = 1

    def __init__(self, directory, keys: list[str], every: int, resume: bool = True):
        from pathlib import Path

        self.directory, self.keys, self.every, self.resume = Path(directory), list(keys), int(every), bool(resume)
        self.evaluated = 0  # iterations in which a member was evaluated
        self.resumed: list[int] = []  # members continued from a checkpoint

    def path(self, b: int):
        return self.directory / f"{self.keys[b]}.pt"

    def load(self, b: int) -> dict | None:
        """Member b's checkpoint, or None (none, one that fails its SHA-256 or cannot be read, or ``resume`` False:
        a sweep run again without ``sweep.skip_finished`` trains everything again)."""
        return read_blob(self.path(b), self.keys[b], self.FORMAT) if self.resume else None

    def save(self, b: int, blob: dict) -> None:
        write_blob(self.path(b), {"format": self.FORMAT, "key": self.keys[b], **blob})

    def remove(self) -> None:
        for b in range(len(self.keys)):
            remove_blob(self.path(b))


def _member_blob(stack: StackedRKHS, opt, loop, m: RKHSMember, b: int, active: bool, seconds: float, steps: dict):
    """Member b's checkpoint (``GroupCheckpoint``)."""
    from ..training.reuse import module_state

    return {
        "loop": loop.state(),
        "generator": loop.generator.get_state(),
        "modules": module_state(m.method.modules),
        "square": opt.square[b].detach().cpu().clone(),
        "acc": opt.acc[b].detach().cpu().clone(),
        "active": bool(active),
        "seconds": float(seconds),
        "steps": {k: [[s, v] for s, v in pts] for k, pts in steps.items()},
        "torch_rng": torch.get_rng_state(),
    }


def _resume_member(stack: StackedRKHS, opt, loop, m: RKHSMember, b: int, blob: dict, steps: dict) -> tuple[bool, float]:
    """Member b continued from its checkpoint ``blob``: (whether it still trains, its time so far)."""
    from ..training.reuse import loadmodule_state

    loadmodule_state(m.method.modules, blob["modules"])
    stack.invalidate(b)
    with torch.no_grad():
        opt.square[b].copy_(blob["square"])
        opt.acc[b].copy_(blob["acc"])
    loop._load(blob["loop"])
    for cb in loop.callbacks:
        cb.load_state(blob["loop"])
    loop.generator.set_state(blob["generator"])
    steps.clear()
    steps.update({k: [(int(s), float(v)) for s, v in pts] for k, pts in blob["steps"].items()})
    return bool(blob["active"]), float(blob["seconds"])


def _collector(into: dict):
    def collect(series):
        for name, pts in series.items():
            into.setdefault(name, []).extend(pts)

    return collect


def _member_loop(stack: StackedRKHS, b: int, m: RKHSMember, steps: dict):
    """Member b's own loop, begun as ``Loop.train`` begins a stage (its batch order, optimiser groups,
    stopping rule, keep_best snapshot, step log)."""
    from ..training.callbacks import StepLog
    from ..training.loop import Loop

    stage = stack.stages[b]
    evaluate = None
    if m.evaluate is not None:

        def evaluate(ev=m.evaluate, b=b):
            stack.invalidate(b)
            stack.evaluations += 1  # GroupCheckpoint's cadence
            return ev()

    loop = Loop(
        m.x,
        m.y,
        m.settings,
        generator=torch.Generator().manual_seed(int(m.seed)),
        callbacks=[StepLog(_collector(steps))],
        modules=m.method.modules,
    )
    params = stage.groups or stage.params
    loop._begin(
        stage.objective, params, m.settings, evaluate, 0, stage.name, stage.stochastic, stage.hooks, False, None
    )
    loop.notify("on_train_start")
    return loop


def train_rkhs_batched(members: list[RKHSMember], checkpoint: GroupCheckpoint | None = None) -> list[RKHSMemberFit]:
    """Train the members together (module docstring); their modules end in their runs' end states.
    Raises ``NotBatchable`` when they cannot be batched or a member's training fails numerically (its
    separate run then reports where). ``checkpoint``: the group's checkpoints (``GroupCheckpoint``): a member
    with one continues from it; stop signals wait for the iteration in progress (a second one stops at once,
    and the last checkpoint is kept)."""
    sizes = {m.x.shape[0] for m in members}
    if len(sizes) > 1 and any(m.settings.batch_size is None or m.settings.batch_size >= min(sizes) for m in members):
        raise NotBatchable("full-batch members of different training sizes")
    stack = StackedRKHS(members)
    B = stack.B
    steps: list[dict] = [{} for _ in range(B)]
    loops = [_member_loop(stack, b, m, steps[b]) for b, m in enumerate(members)]
    s0 = members[0].settings
    from ..training.optim import StackedAdadelta

    opts = s0.optimizer_options
    opt = StackedAdadelta(
        list(stack.leaves.values()),
        stack.flat,
        stack.learning_rates(loops),
        rho=opts.get("rho", 0.9),
        **({} if opts.get("eps") is None else {"eps": opts["eps"]}),
    )
    active = [loop.cap > 0 for loop in loops]
    seconds = [0.0] * B
    results: list = [None] * B
    groups = [] if checkpoint is None else [checkpoint]
    rng = None
    for ck in groups:
        for b in range(B):
            blob = ck.load(b)
            if blob is not None:
                active[b], seconds[b] = _resume_member(stack, opt, loops[b], members[b], b, blob, steps[b])
                ck.resumed.append(b)
                rng = blob["torch_rng"] if rng is None else rng
    if rng is not None:
        torch.set_rng_state(rng)

    def save() -> None:
        for ck in groups:
            for b in range(B):
                ck.save(b, _member_blob(stack, opt, loops[b], members[b], b, active[b], seconds[b], steps[b]))

    try:
        _lockstep(stack, loops, opt, active, seconds, checkpoint, save)
        for b, loop in enumerate(loops):
            stack.invalidate(b)
            results[b] = _finish(loop, seconds[b])
    except NumericalError as e:
        raise NotBatchable(
            f"a member's training failed ({str(e).splitlines()[0]}; its separate run reports it)"
        ) from None
    return [RKHSMemberFit(r, s) for r, s in zip(results, steps)]


def _lockstep(stack: StackedRKHS, loops, opt, active: list[bool], seconds: list[float], checkpoint, save) -> None:
    """Batched iterations until every member has stopped; each one whole (stop signals wait for its end, as
    ``callbacks.Signals`` makes a run's), the members' checkpoints written every ``checkpoint.every``-th
    iteration with an evaluation and when the group is stopped between two iterations."""
    from ..signals import deferred_signals, killed_reason, stopped_mid_step

    shown = GroupProgress(f"group of {stack.B} ({stack.kind.removesuffix('_step')})")
    cap = max(loop.cap for loop in loops)
    try:
        while any(active):
            with deferred_signals(user_signals=True, interruptible=True):
                before = stack.evaluations
                _batched_iteration(stack, loops, opt, active, seconds)
                for b in range(stack.B):
                    if active[b] and (loops[b].converged or loops[b].it >= loops[b].cap):
                        active[b] = False
                evaluated = stack.evaluations != before
            shown.tick(max(loop.it for loop in loops), cap, sum(active))
            if checkpoint is not None and checkpoint.every > 0 and evaluated:
                checkpoint.evaluated += 1
                if checkpoint.evaluated % checkpoint.every == 0:
                    save()
    except BaseException as e:
        if checkpoint is not None and killed_reason(e) and not stopped_mid_step(e):
            save()
        raise


def _batched_iteration(stack: StackedRKHS, loops, opt, active: list[bool], seconds: list[float]) -> None:
    """One iteration of every active member: its loop's first half, the batched step, its loop's second half.
    The iteration's time (without the members' evaluations) is shared among the active members."""
    t0 = time.perf_counter()
    eval0 = sum(loop.eval_seconds for loop in loops)
    act = [b for b in range(stack.B) if active[b]]
    for b in act:
        stack.invalidate(b)
        loops[b]._before_step()
    first = loops[act[0]]  # a stopped member's rows do not matter: any batch of the right size
    x = torch.stack([loop.xb if on else first.xb for loop, on in zip(loops, active)])
    y = torch.stack([loop.yb if on else first.yb for loop, on in zip(loops, active)])
    for leaf in stack.leaves.values():
        leaf.grad = None
    values = stack.values(x, y, active)
    values.sum().backward()
    opt.step(None if len(act) == stack.B else torch.tensor(active, device=stack.flat.device))
    values = values.detach()
    for b in act:
        loops[b]._after_step(values[b])
    spent = time.perf_counter() - t0 - (sum(loop.eval_seconds for loop in loops) - eval0)
    for b in act:
        seconds[b] += spent / len(act)


def _finish(loop, seconds: float):
    """The member's loop's end (``Loop._finish``: hooks, keep_best's restore) with its share of the time."""
    result = loop._finish()
    loop.notify("on_train_end", result)
    it = result.iterations
    return dataclasses.replace(result, train_seconds=seconds, iter_ms=1000 * seconds / max(it, 1))


def _member(c, evaluator) -> RKHSMember:
    """A job's member: prepared as its run prepares it, its stage's ``prepare`` run (F~_0, w_0, A_0, mu)."""
    from ..prepare import prepare
    from ..training import stage_settings

    p = prepare(c)
    stages = p.method.stages
    if len(stages) != 1 or stages[0].solve is not None:
        raise NotBatchable(f"model={c.model.name} has more than one stage")
    stage = stages[0]
    if stage.prepare is not None:
        stage.prepare()
    gp = getattr(stage.objective.model, "gp", None)
    if gp is not None and hasattr(gp, "_ensure_initialised"):
        gp._ensure_initialised()  # minibatch SVGP: q(u)'s start, drawn from torch's RNG as its run draws it
    s = stage_settings(p.settings, stage, p.n_train)
    if s.optimizer != "adadelta" or not s.schedule.constant or s.grad_tol is not None:
        raise NotBatchable("only AdaDelta with a constant learning rate is batched for the RKHS family")
    evaluate = evaluator(p.method, p.data, p.splits.y_std) if (s.eval_every or s.eval_every_epochs) else None
    return RKHSMember(p.method, s, p.data.x_train, p.data.y_train, int(c.seed), evaluate)


def _restorer(method):
    """What a member's job restores besides its modules' tensors: its stage hooks' states (MINIMAX's mu and
    projection count, SCGD's last b_t) and its Cholesky log."""
    hooks = [h.checkpoint_state() for h in method.stages[-1].hooks]
    log = getattr(method.model, "chol_log", None)  # minibatch SVGP has none
    jitter, failures = (log.jitter_events, log.device_failures) if log is not None else (None, None)

    def restore(target) -> None:
        for h, state in zip(target.stages[-1].hooks, hooks):
            h.load_checkpoint_state(state)
        if log is not None:
            target.model.chol_log.jitter_events, target.model.chol_log.device_failures = jitter, failures

    return restore


def train_group(cfg, key: str, configs: list, evaluator) -> dict:
    """``sweep.batched``'s group of RKHS jobs (``sweep.batched._train_group``): every job prepared as its run
    would be, trained together, and each job's ``BatchedOutcome`` fields (a dict) by its config hash. A job whose preparation
    fails is left out (it reports its own error when it runs), unless it is this job (``key``)."""
    from ..exceptions import GpdlmError
    from ..tracking.identity import config_hash
    from ..training import FitResult
    from ..training.callbacks import StageRun
    from ..training.reuse import module_state

    members, keys = [], []
    for c in configs:
        k = config_hash(c)
        try:
            members.append(_member(c, evaluator))
        except GpdlmError:
            if k == key:
                raise
            continue
        keys.append(k)
    checkpoint = None
    every = int(cfg.trainer.get("checkpoint_every", 5))
    if every > 0:
        from pathlib import Path

        folder = Path(str(cfg.sweep.get("cache_dir", "outputs/.cache"))) / "batched"
        checkpoint = GroupCheckpoint(folder, keys, every, resume=bool(cfg.sweep.get("skip_finished", False)))
    try:
        fits = train_rkhs_batched(members, checkpoint)
    except NotBatchable:
        if checkpoint is not None:  # its members train separately: nothing to continue
            checkpoint.remove()
        raise
    note = None
    if checkpoint is not None:
        checkpoint.remove()
        if checkpoint.resumed:
            note = (
                f"sweep.batched: {len(checkpoint.resumed)} of {len(members)} members continued from their checkpoints"
            )
            print(f"gpdlm: {note} ({checkpoint.directory})", file=sys.stderr)
    out = {}
    for k, m, f in zip(keys, members, fits):
        stage = m.method.stages[-1]
        run = StageRun(0, stage)
        run.result = f.result
        fit = FitResult()
        fit.add_stage(stage.name, m.settings, run)
        fit.iter_ms = f.result.iter_ms
        state = module_state(m.method.modules)
        out[k] = dict(
            tag=str(len(members)),
            fit=fit,
            state=state,
            steps=f.steps,
            restore=_restorer(m.method),
            note=note,
            continued=note is not None,
        )
    return out


__all__ = ["GroupCheckpoint", "RKHSMember", "RKHSMemberFit", "StackedRKHS", "train_group", "train_rkhs_batched"]
