"""The training loop: one optimiser over named parameter groups, full batch or minibatch, with
budgets in iterations and epochs, learning-rate schedules, stopping rules, periodic evaluation,
best-iterate restoration, the family's stage hooks, and no per-iteration host-device synchronisation.
Everything else -- step metrics, checkpoints, the stage cache, warm starts, the progress bar, deferred
signals -- is a callback (``training.callbacks``; docs/training.md, "The loop and its callbacks").

Losses stay on the device in a buffer; every ``check_every`` iterations the buffer is read once to
test convergence, NaNs and progress (the only sync points besides evaluations, which read metrics,
and L-BFGS, whose line search compares values on the host). Step metrics are handed to the sink in
batches at every evaluation (``callbacks.StepLog``).

An *epoch* is one pass of shuffled minibatches, floor(N / batch) iterations (the remainder of a
permutation is dropped and a new one drawn); on the full batch one iteration is one epoch. With a
fixed partition (``blocks``) an epoch visits every block once, in a new random order each epoch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ..exceptions import NumericalError
from .callbacks import standard
from .optim import Schedule, make_optimizer
from .stopping import ConvergenceRule, make_rule


@dataclass
class TrainerSettings:
    """Everything the loop needs, as plain values (``build.trainer_settings`` reads the config)."""

    max_iters: int | None = 2000
    lr: float = 0.1
    batch_size: int | None = None  # None = full batch
    stop: ConvergenceRule = field(default_factory=ConvergenceRule)  # window and tol of the stopping rules
    check_every: int = 10
    eval_every: int = 100
    progress: bool = True
    optimizer: str = "adam"
    optimizer_options: dict = field(default_factory=dict)  # momentum, rho, eps, lbfgs_history
    lr_scale: dict = field(default_factory=dict)  # group name -> multiplier of lr
    schedule: Schedule = field(default_factory=Schedule)
    max_epochs: int | None = None
    eval_every_epochs: int | None = None
    keep_best: str | None = None  # metric name; restore the best iterate before returning
    keep_best_mode: str = "min"  # min | max
    stop_rule: str = "auto"  # auto | window | block_mean | none
    protocol: str = "paper"  # paper | fast (training.stages.stage_settings: L-BFGS on deterministic stages)
    fast_window: int = 10  # fast: L-BFGS stops when max - min of the loss over this many iterations
    fast_tol: float = 1e-4  # ... is <= this (per datum)
    fast_max_iters: int = 1000  # fast: L-BFGS iteration cap (max_iters is an Adam budget)
    fast_grad_tol: float | None = 1e-4  # fast: ... and the gradient's largest component is <= this (per datum)
    fast_adam_iters: int = 200  # fast: first-order steps (the paper's optimiser) before L-BFGS, from a cold start
    grad_tol: float | None = None  # stop only when, as well, max_i |d loss / d theta_i| <= grad_tol (see train)


@dataclass
class TrainResult:
    losses: list[float]
    iterations: int
    converged: bool
    train_seconds: float
    iter_ms: float
    epochs: float = 0.0
    stop_rule: str = "window"
    optimizer: str = "adam"
    best_iteration: int | None = None  # global step of the restored iterate (keep_best)
    best_value: float | None = None
    grad_max_abs: float | None = None  # max_i |d loss / d theta_i| at the last iterate (when grad_tol is set)


def gradient_max_abs(loss: torch.Tensor, params: list[torch.Tensor]) -> float:
    """max_i |d loss / d theta_i| over every element of ``params`` (one host read)."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return float(torch.stack([g.detach().abs().max() for g in grads if g is not None]).max())


class _Snapshot:
    """Copies of every parameter and buffer of some modules (each tensor once), on its device."""

    def __init__(self, modules: Iterable[torch.nn.Module], params: Iterable[torch.Tensor]):
        seen, self.tensors = set(), []
        for t in [t for m in modules for t in list(m.parameters()) + list(m.buffers())] + list(params):
            if id(t) not in seen:
                seen.add(id(t))
                self.tensors.append(t)
        self.copies: list[torch.Tensor] | None = None

    def save(self) -> None:
        with torch.no_grad():
            self.copies = [t.detach().clone() for t in self.tensors]

    def restore(self) -> None:
        if self.copies is None:
            raise RuntimeError("_Snapshot.restore needs a save first")
        with torch.no_grad():
            for t, c in zip(self.tensors, self.copies):
                t.copy_(c)


def steps_per_epoch(n: int, batch_size: int | None, blocks: list | None = None) -> int:
    """Steps of one epoch over ``n`` rows: the number of ``blocks`` where the stage has a fixed partition (one
    block a step: PIC++'s k-means cells), else ``n // batch_size`` minibatches (``batch_size`` below ``n``),
    else 1 (full batch)."""
    if blocks is not None:
        return len(blocks)
    return n // batch_size if batch_size and batch_size < n else 1


def iteration_cap(settings: TrainerSettings, n: int, blocks: list | None = None) -> float:
    """A stage's iteration cap: the least of ``max_iters`` and ``max_epochs`` epochs of ``steps_per_epoch``
    steps (``math.inf`` where neither is set)."""
    cap = settings.max_iters if settings.max_iters is not None else math.inf
    if settings.max_epochs:
        cap = min(cap, settings.max_epochs * steps_per_epoch(n, settings.batch_size, blocks))
    return cap


class Loop:
    """The training loop: steps, stopping and evaluation, and a list of callbacks for everything else.

    One ``Loop`` trains on the rows ``x, y`` under the run's ``settings``; ``train`` runs one call of the
    step loop (a stage's training: its objective, parameters and settings) and returns its ``TrainResult``;
    ``training.stages.StageLoop`` adds a family's stages. ``evaluate`` (the run's evaluation) is called every
    ``eval_every`` iterations / ``eval_every_epochs`` epochs; ``modules``' parameters and buffers are the
    state a checkpoint, the stage cache and ``keep_best`` save; ``generators`` the random generators they
    save besides ``generator`` (the batch order). ``callbacks`` (``training.callbacks``) are called at the
    hooks docs/training.md lists ("The loop and its callbacks").

    What callbacks read: ``settings`` (of the call in progress), ``desc``, ``it`` (iterations done in this
    call), ``cap``, ``step`` (the global step: ``step_offset + it``), ``losses`` (on the device: read them
    only where the loop syncs, i.e. at evaluations or when ``checked``), ``checked`` (the losses were read
    this iteration), ``converged``, ``done`` (this iteration is the call's last), ``checkpointable`` and
    ``state()`` (everything needed to continue exactly from iteration ``it``)."""

    def __init__(
        self,
        x,
        y,
        settings: TrainerSettings,
        *,
        generator: torch.Generator,
        evaluate=None,
        callbacks: Iterable = (),
        modules: Iterable[torch.nn.Module] = (),
        generators: Iterable = (),
    ):
        self.x, self.y, self.run_settings, self.generator = x, y, settings, generator
        self.evaluate_fn = evaluate
        self.callbacks = list(callbacks)
        self.modules = list(modules)
        self.generators = [generator, *generators]
        self.settings = settings
        self.desc, self.it, self.cap, self.step_offset = "train", 0, 0, 0
        self.losses: torch.Tensor = torch.empty(0)  # one slot per iteration of the stage (allocated by start)
        self.checked = self.converged = self.done = self.checkpointable = False

    def notify(self, hook: str, *args) -> None:
        """Call ``hook`` of every callback, in list order."""
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    @property
    def step(self) -> int:
        return self.step_offset + self.it

    def train(
        self,
        objective: Callable[..., torch.Tensor],
        params,
        settings: TrainerSettings,
        *,
        evaluate=None,
        step_offset: int = 0,
        desc: str = "train",
        stochastic: bool = False,
        hooks: Iterable = (),
        wants_index: bool = False,
        blocks: list | None = None,
        checkpoint: bool = True,
        resume: dict | None = None,
        consider_start: bool = False,
    ) -> TrainResult:
        """Minimise ``objective(x_batch, y_batch)`` (``(x_batch, y_batch, index)`` with ``wants_index``)
        over ``params`` (see ``train``); ``hooks``: the stage's own (``methods.base.Stage``); ``checkpoint``:
        whether this call may be checkpointed; ``resume``: a ``state()`` to continue from;
        ``consider_start``: with ``keep_best`` and ``evaluate``, the starting point is evaluated before the
        first step and competes too (``Stage.keep_start``); if it wins, it is restored and the result's
        ``best_iteration`` is None (the call kept where it started)."""
        self._begin(objective, params, settings, evaluate, step_offset, desc, stochastic, hooks, wants_index, blocks)
        self.checkpointable = checkpoint and all(hasattr(h, "checkpoint_state") for h in self.hooks)
        self.start_competes = consider_start and self.snapshot is not None and evaluate is not None
        try:
            if resume is not None:
                self._load(resume)
            self.notify("on_train_start")
            if resume is not None:
                for cb in self.callbacks:
                    cb.load_state(resume)
            elif self.start_competes:
                self._evaluate()  # the starting point: logged at step_offset, and the first candidate
            while self.it < self.cap:
                self._iteration()
                if self.converged:
                    break
        except BaseException as e:
            err = self._numerical_error(e)
            self.notify("on_exception", err)
            if err is e:
                raise
            raise err from e
        result = self._finish()
        self.notify("on_train_end", result)
        return result

    def _begin(self, objective, params, settings, evaluate, step_offset, desc, stochastic, hooks, wants_index, blocks):
        """The call's optimiser, batches, budget, stopping rule and buffers (see ``train``)."""
        self.objective, self.settings, self.evaluate, self.step_offset = objective, settings, evaluate, step_offset
        self.desc, self.wants_index, self.hooks = desc, wants_index, list(hooks)
        self.opt, self.trained, self.lbfgs = _optimizer(params, settings, desc)
        n = self.x.shape[0]
        self.bs = settings.batch_size if settings.batch_size and settings.batch_size < n and blocks is None else None
        self.blocks = blocks
        self.steps_per_epoch = steps_per_epoch(n, settings.batch_size, blocks)
        self.cap = int(iteration_cap(settings, n, blocks))
        self.rule = make_rule(
            settings.stop_rule,
            stochastic=stochastic or self.bs is not None or blocks is not None,
            window=settings.stop.window,
            tol=settings.stop.tol,
            steps_per_epoch=self.steps_per_epoch,
        )
        for h in self.hooks:  # hooks that adapt the step size (e.g. Algorithm 2 halving lr_W) see the optimiser
            if hasattr(h, "bind_optimizer"):
                h.bind_optimizer(self.opt)
        self.snapshot = _Snapshot(self.modules, self.trained) if settings.keep_best else None
        self.best_value = self.best_iteration = None
        self.start_competes = False
        self.losses = torch.empty(self.cap, dtype=self.x.dtype, device=self.x.device)
        self.chunk_ms, self.perm, self.pos, self.order = [], None, n, None
        self.it = self.it_chunk = 0
        self.checked = self.converged = self.done = False
        self.grad_max_abs, self.last_eval = None, []
        self.xb, self.yb, self.idx = self.x, self.y, None
        self.eval_seconds, self.prior_seconds = 0.0, 0.0  # prior: earlier segments of this stage (a resumed run)
        self.t_start = self.t_chunk = time.perf_counter()

    def _iteration(self) -> None:
        """One step of the optimiser, the stopping test every ``check_every`` steps, the evaluation when due."""
        self._before_step()
        self._after_step(self._step().detach())

    def _before_step(self) -> None:
        """An iteration up to its step: the epoch's ``epoch_start`` hooks, the batch, the learning rate.
        (``sweep.batched_rkhs`` drives several loops this way, with one batched step between the halves.)"""
        s, spe = self.settings, self.steps_per_epoch
        epoch = self.it // spe
        if self.it % spe == 0:
            for h in self.hooks:
                if hasattr(h, "epoch_start"):
                    h.epoch_start(epoch)
        self._next_batch()
        if not s.schedule.constant:
            f = s.schedule.factor(self.it, epoch)
            for g in self.opt.param_groups:
                g["lr"] = g["base_lr"] * f

    def _after_step(self, loss: torch.Tensor) -> None:
        """An iteration after its step (``loss``: the step's value, detached): the loss recorded, the
        ``after_step`` hooks, the stopping test, the evaluation when due, the callbacks."""
        s, epoch = self.settings, self.it // self.steps_per_epoch
        self.losses[self.it] = loss
        self.it += 1
        for h in self.hooks:
            if hasattr(h, "after_step"):
                h.after_step(self.it, epoch)
        self.checked = self.it % s.check_every == 0 or self.it == self.cap
        if self.checked:
            self._check()
        self.done = self.converged or self.it == self.cap  # the caller evaluates the final model itself
        if self.evaluate and self._evaluation_due() and not self.done:
            self._evaluate()
        self.notify("on_step")

    def _next_batch(self) -> None:
        """The iteration's rows: the full batch, the next minibatch of a permutation, or the next block."""
        x, y, g = self.x, self.y, self.generator
        if self.blocks is not None:
            if self.it % self.steps_per_epoch == 0:  # one host read per epoch
                self.order = torch.randperm(len(self.blocks), generator=g, device=g.device).tolist()
            self.idx = self.blocks[self.order[self.it % self.steps_per_epoch]]
            self.xb, self.yb = x[self.idx], y[self.idx]
        elif self.bs is None:
            self.xb, self.yb, self.idx = x, y, None
        else:
            if self.pos + self.bs > x.shape[0]:
                perm = torch.randperm(x.shape[0], generator=g, device=g.device)
                self.perm, self.pos = perm.to(x.device, non_blocking=True), 0
            self.idx = self.perm[self.pos : self.pos + self.bs]
            self.pos += self.bs
            self.xb, self.yb = x[self.idx], y[self.idx]

    def _call(self) -> torch.Tensor:
        return self.objective(self.xb, self.yb, self.idx) if self.wants_index else self.objective(self.xb, self.yb)

    def _step(self) -> torch.Tensor:
        if self.lbfgs:
            return self.opt.step(self._lbfgs_closure)
        self.opt.zero_grad(set_to_none=True)
        loss = self._call()
        loss.backward()
        self.opt.step()
        return loss

    def _lbfgs_closure(self) -> torch.Tensor:
        """L-BFGS's closure. torch's LBFGS.step (one iteration per call) begins by evaluating the
        objective where the previous call's line search ended -- almost always the point it evaluated
        last --; that repeat is answered from the latest evaluation (same loss, same gradients: the
        iterates are bit-identical), saving one of the ~3 evaluations of an iteration."""
        trained, last = self.trained, self.last_eval
        flat = torch.cat([p.detach().reshape(-1) for p in trained])
        if last and torch.equal(flat, last[0]):
            for p, g in zip(trained, last[2]):
                p.grad = None if g is None else g.clone()
            return last[1]
        self.opt.zero_grad(set_to_none=True)
        value = self._call()
        value.backward()
        last[:] = [flat, value.detach(), [None if p.grad is None else p.grad.detach().clone() for p in trained]]
        return value

    def _check(self) -> None:
        """The one host read of the losses every ``check_every`` iterations: NaNs, time, the stopping rule.

        ``settings.grad_tol`` adds a gradient test to the rule (the fast protocol's L-BFGS stages): when the
        rule fires, the gradient of the objective on the current batch is evaluated once more and the loop
        stops only if ``max_i |d loss / d theta_i| <= grad_tol`` (the infinity norm scipy's L-BFGS-B uses for
        its ``pgtol`` test, here on the per-datum loss and the unconstrained parameters); otherwise it goes on
        until the rule fires again or the budget ends. The last value is ``grad_max_abs``."""
        s, window = self.settings, self.losses[: self.it]
        if not bool(torch.isfinite(window[-s.check_every :]).all()):
            _raise_first_nonfinite(window, self.step_offset)
        now = time.perf_counter()
        self.chunk_ms.append(1000 * (now - self.t_chunk) / (self.it - self.it_chunk))
        self.t_chunk, self.it_chunk = now, self.it
        self.converged = self.rule.converged(window)
        if self.converged and s.grad_tol is not None:
            self.grad_max_abs = gradient_max_abs(self._call(), self.trained)
            self.converged = self.grad_max_abs <= s.grad_tol

    def _evaluation_due(self) -> bool:
        s, spe = self.settings, self.steps_per_epoch
        return bool(
            (s.eval_every and self.it % s.eval_every == 0)
            or (s.eval_every_epochs and self.it % spe == 0 and (self.it // spe) % s.eval_every_epochs == 0)
        )

    def _evaluate(self) -> None:
        """A periodic evaluation: the family's ``before_evaluate`` hooks, the metrics, ``keep_best``, then
        ``on_evaluate``; its time is not training time."""
        t_eval = time.perf_counter()
        for h in self.hooks:
            if hasattr(h, "before_evaluate"):
                h.before_evaluate()
        metrics = self.evaluate()
        if self.snapshot is not None:
            self._consider(metrics)
        self.notify("on_evaluate", metrics)
        self.t_chunk = time.perf_counter()
        self.eval_seconds += self.t_chunk - t_eval

    def _consider(self, metrics: dict) -> None:
        """keep_best: remember this iterate if its metric is the best so far."""
        v = metrics.get(self.settings.keep_best)
        if v is None or not math.isfinite(v):
            return
        best = self.best_value
        if best is None or (v > best if self.settings.keep_best_mode == "max" else v < best):
            self.best_value, self.best_iteration = v, self.step
            self.snapshot.save()

    def _numerical_error(self, e: BaseException) -> BaseException:
        """A linear-algebra failure as gpdlm's ``NumericalError`` (the first non-finite loss if there is one)."""
        from linear_operator.utils.errors import NanError, NotPSDError

        if not isinstance(e, (NotPSDError, NanError)):
            return e
        try:
            _raise_first_nonfinite(self.losses[: self.it], self.step_offset)  # parameters went NaN after a NaN loss
        except NumericalError as first:
            return first
        return NumericalError(f"non-positive-definite matrix at iteration {self.step + 1}: {str(e).splitlines()[0]}")

    def _finish(self) -> TrainResult:
        """The call's end: ``training_end`` hooks, the gradient test's last value, ``keep_best``'s restore.
        With ``keep_best`` the final iterate is evaluated (it competes too) and its metrics go to
        ``on_final_evaluate`` (the learning curves), not ``on_evaluate`` (which also checkpoints)."""
        s, it = self.settings, self.it
        for h in self.hooks:
            if hasattr(h, "training_end"):
                h.training_end()
        if s.grad_tol is not None and not self.converged and it > 0:  # stopped by the budget: measure it too
            self.grad_max_abs = gradient_max_abs(self._call(), self.trained)
        seconds = self.prior_seconds + time.perf_counter() - self.t_start - self.eval_seconds  # every segment
        if self.snapshot is not None and self.evaluate is not None:
            metrics = self.evaluate()
            self._consider(metrics)  # the final iterate competes too
            self.notify("on_final_evaluate", metrics)  # its point on the learning curves (no checkpoint)
            if self.best_iteration is not None and self.best_iteration != self.step:
                self.snapshot.restore()
        result = TrainResult(
            losses=self.losses[:it].tolist(),
            iterations=it,
            converged=self.converged,
            train_seconds=seconds,
            iter_ms=statistics.median(self.chunk_ms) if self.chunk_ms else (1000 * seconds / max(it, 1)),
            epochs=it / self.steps_per_epoch,
            stop_rule=self.rule.name,
            optimizer=s.optimizer,
            best_iteration=(
                None if self.start_competes and self.best_iteration == self.step_offset else self.best_iteration
            ),
            best_value=self.best_value,
            grad_max_abs=self.grad_max_abs,
        )
        for h in self.hooks:  # e.g. a family's time per epoch (evaluation excluded)
            if hasattr(h, "stage_end"):
                h.stage_end(result)
        return result

    def state(self) -> dict:
        """Everything the loop needs to continue exactly from iteration ``it``: the iteration, the losses so
        far, the batch permutation and position, the optimiser's state, the best iterate's snapshot, the
        time spent, the stage hooks' states and the callbacks' (``Callback.state``)."""
        snap = self.snapshot
        out = {
            "it": self.it,
            "losses": self.losses[: self.it].detach().cpu().clone(),
            "perm": None if self.perm is None else self.perm.detach().cpu().clone(),
            "pos": self.pos,
            "order": self.order,
            "optimizer": self.opt.state_dict(),
            "best_value": self.best_value,
            "best_iteration": self.best_iteration,
            "snapshot": [c.detach().cpu().clone() for c in snap.copies] if snap is not None and snap.copies else None,
            "chunk_ms": list(self.chunk_ms),
            "eval_seconds": self.eval_seconds,
            "seconds": self.prior_seconds + time.perf_counter() - self.t_start - self.eval_seconds,
            "hooks": [h.checkpoint_state() for h in self.hooks],
        }
        for cb in self.callbacks:
            out.update(cb.state())
        return out

    def _load(self, r: dict) -> None:
        """Continue from a ``state()`` (the callbacks' parts go to their ``load_state``)."""
        self.it, self.pos, self.order = int(r["it"]), int(r["pos"]), r["order"]
        self.losses[: self.it] = r["losses"].to(self.losses.device, self.losses.dtype)
        self.perm = None if r["perm"] is None else r["perm"].to(self.x.device)
        self.opt.load_state_dict(r["optimizer"])
        self.best_value, self.best_iteration = r["best_value"], r["best_iteration"]
        if self.snapshot is not None and r["snapshot"] is not None:
            self.snapshot.copies = [c.to(t.device, t.dtype) for c, t in zip(r["snapshot"], self.snapshot.tensors)]
        self.chunk_ms = list(r["chunk_ms"])
        self.prior_seconds = float(r["seconds"])
        for h, s in zip(self.hooks, r["hooks"]):
            h.load_checkpoint_state(s)
        self.it_chunk = self.it


def _optimizer(params, settings: TrainerSettings, desc: str):
    """(optimiser, trained parameters, whether it is L-BFGS): one parameter group per named group of
    ``params`` at ``settings.lr * settings.lr_scale.get(name, 1)`` (L-BFGS: one group at ``lr``)."""
    groups = params if isinstance(params, dict) else {"all": list(params)}
    opt_groups = []
    for name, ps in groups.items():
        ps = [p for p in ps if p.requires_grad]
        if ps:
            opt_groups.append({"params": ps, "lr": settings.lr * settings.lr_scale.get(name, 1.0), "name": name})
    if not opt_groups:
        raise NumericalError(f"stage '{desc}' has no trainable parameter")
    trained = [p for g in opt_groups for p in g["params"]]
    lbfgs = settings.optimizer == "lbfgs"
    if lbfgs:
        opt_groups = [{"params": trained, "lr": settings.lr, "name": "all"}]
    opt = make_optimizer(settings.optimizer, opt_groups, **settings.optimizer_options)
    for g in opt.param_groups:
        g["base_lr"] = g["lr"]
    return opt, trained, lbfgs


def train(
    objective: Callable[..., torch.Tensor],
    params,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainerSettings,
    *,
    generator: torch.Generator,
    evaluate: Callable[[], dict[str, float]] | None = None,
    log_steps: Callable[[dict[str, list[tuple[int, float]]]], None] | None = None,
    step_offset: int = 0,
    desc: str = "train",
    stochastic: bool = False,
    hooks: Iterable = (),
    modules: Iterable[torch.nn.Module] = (),
    wants_index: bool = False,
    blocks: list | None = None,
    checkpoint=None,
    resume: dict | None = None,
    callbacks: Iterable = (),
) -> TrainResult:
    """Minimise ``objective(x_batch, y_batch)`` over ``params``: a list of parameters or a dict of
    named groups (each trained at ``settings.lr * settings.lr_scale.get(name, 1)``) -- one ``Loop.train``
    with the standard callbacks (``callbacks.standard``: ``log_steps`` gets the step metrics in batches,
    ``checkpoint`` a ``checkpoint.Checkpointer``, a progress bar, deferred signals) and ``callbacks``.
    ``blocks``: a fixed partition of the rows (index tensors) whose blocks are the batches, each once
    per epoch; ``resume``: a loop state (``Loop.state``) to continue from.

    An iteration is never split: termination signals wait for the iteration in progress
    (``callbacks.Signals``), so a checkpoint always holds a whole number of steps. ``settings.grad_tol``
    adds a gradient test to the stopping rule (``Loop._check``)."""
    loop = Loop(
        x,
        y,
        settings,
        generator=generator,
        modules=modules,
        callbacks=standard(log_steps, checkpoint=checkpoint, extra=callbacks),
    )
    return loop.train(
        objective,
        params,
        settings,
        evaluate=evaluate,
        step_offset=step_offset,
        desc=desc,
        stochastic=stochastic,
        hooks=hooks,
        wants_index=wants_index,
        blocks=blocks,
        checkpoint=checkpoint is not None,
        resume=resume,
    )


def _raise_first_nonfinite(losses: torch.Tensor, step_offset: int) -> None:
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        i = int(bad[0])
        raise NumericalError(f"the training loss became {losses[i].item()} at iteration {step_offset + i + 1}")


__all__ = ["Loop", "TrainResult", "TrainerSettings", "iteration_cap", "steps_per_epoch", "train"]
