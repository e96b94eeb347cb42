"""The training loop: one optimiser over named parameter groups, full batch or minibatch, with
budgets in iterations and epochs, learning-rate schedules, stopping rules, periodic evaluation,
best-iterate restoration, hooks, a progress bar, and no per-iteration host-device synchronisation.

Losses stay on the device in a buffer; every ``check_every`` iterations the buffer is read once to
test convergence, NaNs and progress (the only sync points besides evaluations, which read metrics,
and L-BFGS, whose line search compares values on the host). Step metrics are handed to the sink in
batches at every evaluation.

An *epoch* is one pass of shuffled minibatches, floor(N / batch) iterations (the remainder of a
permutation is dropped and a new one drawn); on the full batch one iteration is one epoch. With a
fixed partition (``blocks``) an epoch visits every block once, in a new random order each epoch.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ..exceptions import NumericalError
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


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


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
        self.copies = None

    def save(self) -> None:
        with torch.no_grad():
            self.copies = [t.detach().clone() for t in self.tensors]

    def restore(self) -> None:
        with torch.no_grad():
            for t, c in zip(self.tensors, self.copies):
                t.copy_(c)


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
) -> TrainResult:
    """Minimise ``objective(x_batch, y_batch)`` over ``params``: a list of parameters or a dict of
    named groups (each trained at ``settings.lr * settings.lr_scale.get(name, 1)``). ``blocks``: a
    fixed partition of the rows (index tensors) whose blocks are the batches, each once per epoch.

    ``checkpoint`` (``training.checkpoint.Checkpointer``): after evaluations (every
    ``checkpoint.every`` of them) and when the run is stopped from outside, the loop's state -- the
    iteration, the losses so far, the batch permutation and position, the optimiser's state, the best
    iterate's snapshot, the time spent, the hooks' states -- goes to ``checkpoint.save``; ``resume``
    (such a state) continues from it. An iteration is never split: termination signals wait for the
    iteration in progress (``deferred_signals``), so a checkpoint always holds a whole number of steps.

    ``settings.grad_tol`` adds a gradient test to the stopping rule (the fast protocol's L-BFGS stages):
    when the rule fires, the gradient of the objective on the current batch is evaluated once more and
    the loop stops only if ``max_i |d loss / d theta_i| <= grad_tol`` (the infinity norm scipy's L-BFGS-B
    uses for its ``pgtol`` test, here on the per-datum loss and the unconstrained parameters); otherwise
    it goes on until the rule fires again or the budget ends. The last value is ``grad_max_abs``."""
    from linear_operator.utils.errors import NanError, NotPSDError

    from ..signals import deferred_signals, killed_reason

    groups = params if isinstance(params, dict) else {"all": list(params)}
    opt_groups = []
    for name, ps in groups.items():
        ps = [p for p in ps if p.requires_grad]
        if ps:
            opt_groups.append({"params": ps, "lr": settings.lr * settings.lr_scale.get(name, 1.0), "name": name})
    if not opt_groups:
        raise NumericalError(f"stage '{desc}' has no trainable parameter")
    lbfgs = settings.optimizer == "lbfgs"
    if lbfgs:
        opt_groups = [{"params": [p for g in opt_groups for p in g["params"]], "lr": settings.lr, "name": "all"}]
    opt = make_optimizer(settings.optimizer, opt_groups, **settings.optimizer_options)
    for g in opt.param_groups:
        g["base_lr"] = g["lr"]
    schedule = settings.schedule

    n = x.shape[0]
    bs = settings.batch_size if settings.batch_size and settings.batch_size < n else None
    if blocks is not None:
        bs = None
    steps_per_epoch = len(blocks) if blocks is not None else (n // bs if bs else 1)
    cap = settings.max_iters if settings.max_iters is not None else math.inf
    if settings.max_epochs:
        cap = min(cap, settings.max_epochs * steps_per_epoch)
    cap = int(cap)
    rule = make_rule(
        settings.stop_rule,
        stochastic=stochastic or bs is not None or blocks is not None,
        window=settings.stop.window,
        tol=settings.stop.tol,
        steps_per_epoch=steps_per_epoch,
    )
    hooks = list(hooks)
    for h in hooks:  # hooks that adapt the step size (e.g. Algorithm 2 halving lr_W) see the optimiser
        if hasattr(h, "bind_optimizer"):
            h.bind_optimizer(opt)
    epoch_hooks = [h for h in hooks if hasattr(h, "epoch_start")]
    step_hooks = [h for h in hooks if hasattr(h, "after_step")]
    eval_hooks = [h for h in hooks if hasattr(h, "before_evaluate")]
    end_hooks = [h for h in hooks if hasattr(h, "training_end")]
    snapshot = _Snapshot(modules, [p for g in opt_groups for p in g["params"]]) if settings.keep_best else None
    best = {"value": None, "iteration": None}
    maximise = settings.keep_best_mode == "max"

    losses = torch.empty(cap, dtype=x.dtype, device=x.device)
    pending: dict[str, list[tuple[int, float]]] = {}
    chunk_ms: list[float] = []
    bar = _progress_bar(cap, desc, settings.progress)
    perm, pos = None, n
    it, it_chunk, converged, flushed = 0, 0, False, 0
    trained = [p for g in opt_groups for p in g["params"]]
    grad_max_abs = None
    xb, yb, idx = x, y, None
    eval_seconds = 0.0
    t_start = t_chunk = time.perf_counter()
    prior_seconds = 0.0  # training time of earlier segments of this stage (a resumed run)
    order = None
    savable = checkpoint is not None and all(hasattr(h, "checkpoint_state") for h in hooks)

    def loop_state() -> dict:
        """Everything the loop needs to continue exactly from iteration ``it`` (see the docstring)."""
        return {
            "it": it,
            "losses": losses[:it].detach().cpu().clone(),
            "flushed": flushed,
            "perm": None if perm is None else perm.detach().cpu().clone(),
            "pos": pos,
            "order": order,
            "optimizer": opt.state_dict(),
            "best_value": best["value"],
            "best_iteration": best["iteration"],
            "snapshot": [c.detach().cpu().clone() for c in snapshot.copies]
            if snapshot is not None and snapshot.copies
            else None,
            "chunk_ms": list(chunk_ms),
            "eval_seconds": eval_seconds,
            "seconds": prior_seconds + time.perf_counter() - t_start - eval_seconds,
            "hooks": [h.checkpoint_state() for h in hooks],
        }

    if resume is not None:
        it, flushed, pos, order = int(resume["it"]), int(resume["flushed"]), int(resume["pos"]), resume["order"]
        losses[:it] = resume["losses"].to(losses.device, losses.dtype)
        perm = None if resume["perm"] is None else resume["perm"].to(x.device)
        opt.load_state_dict(resume["optimizer"])
        best.update(value=resume["best_value"], iteration=resume["best_iteration"])
        if snapshot is not None and resume["snapshot"] is not None:
            snapshot.copies = [c.to(t.device, t.dtype) for c, t in zip(resume["snapshot"], snapshot.tensors)]
        chunk_ms = list(resume["chunk_ms"])
        prior_seconds = float(resume["seconds"])
        for h, s in zip(hooks, resume["hooks"]):
            h.load_checkpoint_state(s)
        it_chunk = it

    def flush(upto: int):
        nonlocal flushed
        if upto > flushed:
            vals = losses[flushed:upto].tolist()
            pending.setdefault("train_loss", []).extend((step_offset + flushed + i + 1, v) for i, v in enumerate(vals))
            flushed = upto
        if log_steps and pending:
            log_steps(dict(pending))
        pending.clear()

    def consider(metrics: dict, at: int) -> None:
        """keep_best: remember this iterate if its metric is the best so far."""
        v = metrics.get(settings.keep_best)
        if v is None or not math.isfinite(v):
            return
        if best["value"] is None or (v > best["value"] if maximise else v < best["value"]):
            best["value"], best["iteration"] = v, step_offset + at
            snapshot.save()

    def call(xb, yb, idx):
        return objective(xb, yb, idx) if wants_index else objective(xb, yb)

    last_eval: list = []  # L-BFGS: (flat parameters, loss, gradients) of the latest evaluation

    def evaluate_once(xb, yb, idx):
        """L-BFGS's closure. torch's LBFGS.step (one iteration per call) begins by evaluating the
        objective where the previous call's line search ended -- almost always the point it evaluated
        last --; that repeat is answered from the latest evaluation (same loss, same gradients: the
        iterates are bit-identical), saving one of the ~3 evaluations of an iteration."""
        flat = torch.cat([p.detach().reshape(-1) for p in trained])
        if last_eval and torch.equal(flat, last_eval[0]):
            for p, g in zip(trained, last_eval[2]):
                p.grad = None if g is None else g.clone()
            return last_eval[1]
        opt.zero_grad(set_to_none=True)
        value = call(xb, yb, idx)
        value.backward()
        last_eval[:] = [flat, value.detach(), [None if p.grad is None else p.grad.detach().clone() for p in trained]]
        return value

    try:
        try:
            while it < cap:
                with deferred_signals(user_signals=True):  # a signal lands between iterations
                    epoch = it // steps_per_epoch
                    if it % steps_per_epoch == 0:
                        for h in epoch_hooks:
                            h.epoch_start(epoch)
                    if blocks is not None:
                        if it % steps_per_epoch == 0:  # one host read per epoch
                            order = torch.randperm(len(blocks), generator=generator, device=generator.device).tolist()
                        idx = blocks[order[it % steps_per_epoch]]
                        xb, yb = x[idx], y[idx]
                    elif bs is None:
                        xb, yb, idx = x, y, None
                    else:
                        if pos + bs > n:
                            perm, pos = (
                                torch.randperm(n, generator=generator, device=generator.device).to(
                                    x.device, non_blocking=True
                                ),
                                0,
                            )
                        idx = perm[pos : pos + bs]
                        pos += bs
                        xb, yb = x[idx], y[idx]
                    if not schedule.constant:
                        f = schedule.factor(it, epoch)
                        for g in opt.param_groups:
                            g["lr"] = g["base_lr"] * f
                    if lbfgs:
                        loss = opt.step(lambda xb=xb, yb=yb, idx=idx: evaluate_once(xb, yb, idx))
                    else:
                        opt.zero_grad(set_to_none=True)
                        loss = call(xb, yb, idx)
                        loss.backward()
                        opt.step()
                    losses[it] = loss.detach()
                    it += 1
                    for h in step_hooks:
                        h.after_step(it, epoch)
                    if it % settings.check_every == 0 or it == cap:
                        window = losses[:it]
                        if not bool(torch.isfinite(window[-settings.check_every :]).all()):
                            _raise_first_nonfinite(window, step_offset)
                        now = time.perf_counter()
                        chunk_ms.append(1000 * (now - t_chunk) / (it - it_chunk))
                        t_chunk, it_chunk = now, it
                        if bar is not None:
                            bar.n = it
                            bar.set_postfix(loss=f"{window[-1].item():.4f}", refresh=False)
                            bar.refresh()
                        converged = rule.converged(window)
                        if converged and settings.grad_tol is not None:
                            grad_max_abs = gradient_max_abs(call(xb, yb, idx), trained)
                            converged = grad_max_abs <= settings.grad_tol
                    last = converged or it == cap  # the caller evaluates the final model itself
                    due = (settings.eval_every and it % settings.eval_every == 0) or (
                        settings.eval_every_epochs
                        and it % steps_per_epoch == 0
                        and (it // steps_per_epoch) % settings.eval_every_epochs == 0
                    )
                    if evaluate and due and not last:
                        t_eval = time.perf_counter()
                        for h in eval_hooks:
                            h.before_evaluate()
                        metrics = evaluate()
                        for k, v in metrics.items():
                            pending.setdefault(k, []).append((step_offset + it, v))
                        if snapshot is not None:
                            consider(metrics, it)
                        flush(it)
                        t_chunk = time.perf_counter()
                        eval_seconds += t_chunk - t_eval
                        if savable:
                            checkpoint.after_evaluation(loop_state)
                    if converged:
                        break
        except (NotPSDError, NanError) as e:
            _raise_first_nonfinite(losses[:it], step_offset)  # parameters went NaN after a NaN loss
            raise NumericalError(
                f"non-positive-definite matrix at iteration {step_offset + it + 1}: {str(e).splitlines()[0]}"
            ) from e
    except BaseException as e:
        if savable and killed_reason(e):  # stopped from outside between two iterations: resumable
            checkpoint.save(loop_state())
        try:  # keep the learning curve so far (interrupted or failed runs)
            flush(it)
        except Exception:
            pass
        raise
    finally:
        if bar is not None:
            bar.close()
    for h in end_hooks:
        h.training_end()
    if settings.grad_tol is not None and not converged and it > 0:  # stopped by the budget: measure it too
        grad_max_abs = gradient_max_abs(call(xb, yb, idx), trained)
    flush(it)
    seconds = prior_seconds + time.perf_counter() - t_start - eval_seconds  # training only, every segment
    if snapshot is not None and evaluate is not None:
        consider(evaluate(), it)  # the final iterate competes too
        if best["iteration"] is not None and best["iteration"] != step_offset + it:
            snapshot.restore()
    result = TrainResult(
        losses=losses[:it].tolist(),
        iterations=it,
        converged=converged,
        train_seconds=seconds,
        iter_ms=statistics.median(chunk_ms) if chunk_ms else (1000 * seconds / max(it, 1)),
        epochs=it / steps_per_epoch,
        stop_rule=rule.name,
        optimizer=settings.optimizer,
        best_iteration=best["iteration"],
        best_value=best["value"],
        grad_max_abs=grad_max_abs,
    )
    for h in hooks:  # e.g. a family's time per epoch (evaluation excluded)
        if hasattr(h, "stage_end"):
            h.stage_end(result)
    return result


def _raise_first_nonfinite(losses: torch.Tensor, step_offset: int) -> None:
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        i = int(bad[0])
        raise NumericalError(f"the training loss became {losses[i].item()} at iteration {step_offset + i + 1}")


__all__ = ["TrainResult", "TrainerSettings", "train"]
