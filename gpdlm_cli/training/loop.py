"""The training loop: Adam on an objective, full batch or minibatch, with the paper's stopping
rule, a progress bar, periodic evaluation, and no per-iteration host-device synchronisation.

Losses stay on the device in a buffer; every ``check_every`` iterations the buffer is read once to
test convergence, NaNs and progress (the only sync points), and step metrics are handed to the
sink in batches at every evaluation.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..exceptions import NumericalError
from .stopping import ConvergenceRule


@dataclass
class TrainerSettings:
    max_iters: int = 2000
    lr: float = 0.1
    batch_size: int | None = None  # None = full batch
    stop: ConvergenceRule = field(default_factory=ConvergenceRule)
    check_every: int = 10
    eval_every: int = 100
    progress: bool = True


@dataclass
class TrainResult:
    losses: list[float]
    iterations: int
    converged: bool
    train_seconds: float
    iter_ms: float


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def train(
    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    params: list[torch.nn.Parameter],
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainerSettings,
    *,
    generator: torch.Generator,
    evaluate: Callable[[], dict[str, float]] | None = None,
    log_steps: Callable[[dict[str, list[tuple[int, float]]]], None] | None = None,
    step_offset: int = 0,
    desc: str = "train",
) -> TrainResult:
    """Minimise ``objective(x_batch, y_batch)`` over ``params`` with Adam."""
    from linear_operator.utils.errors import NanError, NotPSDError

    params = [p for p in params if p.requires_grad]
    opt = torch.optim.Adam(params, lr=settings.lr)
    n = x.shape[0]
    bs = settings.batch_size if settings.batch_size and settings.batch_size < n else None
    losses = torch.empty(settings.max_iters, dtype=x.dtype, device=x.device)
    pending: dict[str, list[tuple[int, float]]] = {}
    chunk_ms: list[float] = []
    bar = _progress_bar(settings.max_iters, desc, settings.progress)
    perm, pos = None, n
    it, it_chunk, converged, flushed = 0, 0, False, 0
    eval_seconds = 0.0
    t_start = t_chunk = time.perf_counter()

    def flush(upto: int):
        nonlocal flushed
        if upto > flushed:
            vals = losses[flushed:upto].tolist()
            pending.setdefault("train_loss", []).extend(
                (step_offset + flushed + i + 1, v) for i, v in enumerate(vals)
            )
            flushed = upto
        if log_steps and pending:
            log_steps(dict(pending))
        pending.clear()

    try:
        while it < settings.max_iters:
            if bs is None:
                xb, yb = x, y
            else:
                if pos + bs > n:
                    perm, pos = torch.randperm(n, generator=generator, device=generator.device).to(x.device), 0
                idx = perm[pos:pos + bs]
                pos += bs
                xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = objective(xb, yb)
            loss.backward()
            opt.step()
            losses[it] = loss.detach()
            it += 1
            if it % settings.check_every == 0 or it == settings.max_iters:
                window = losses[:it]
                if not bool(torch.isfinite(window[-settings.check_every:]).all()):
                    _raise_first_nonfinite(window, step_offset)
                now = time.perf_counter()
                chunk_ms.append(1000 * (now - t_chunk) / (it - it_chunk))
                t_chunk, it_chunk = now, it
                if bar is not None:
                    bar.n = it
                    bar.set_postfix(loss=f"{window[-1].item():.4f}", refresh=False)
                    bar.refresh()
                converged = settings.stop.converged(window)
            last = converged or it == settings.max_iters  # the caller evaluates the final model itself
            if evaluate and settings.eval_every and it % settings.eval_every == 0 and not last:
                t_eval = time.perf_counter()
                for k, v in evaluate().items():
                    pending.setdefault(k, []).append((step_offset + it, v))
                flush(it)
                t_chunk = time.perf_counter()
                eval_seconds += t_chunk - t_eval
            if converged:
                break
    except (NotPSDError, NanError) as e:
        _raise_first_nonfinite(losses[:it], step_offset)  # parameters went NaN after a NaN loss
        raise NumericalError(f"non-positive-definite matrix at iteration {step_offset + it + 1}: {str(e).splitlines()[0]}") from e
    finally:
        if bar is not None:
            bar.close()
    flush(it)
    seconds = time.perf_counter() - t_start - eval_seconds  # training only, evaluation excluded
    loss_list = losses[:it].tolist()
    return TrainResult(
        losses=loss_list,
        iterations=it,
        converged=converged,
        train_seconds=seconds,
        iter_ms=statistics.median(chunk_ms) if chunk_ms else (1000 * seconds / max(it, 1)),
    )


def _raise_first_nonfinite(losses: torch.Tensor, step_offset: int) -> None:
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        i = int(bad[0])
        raise NumericalError(f"the training loss became {losses[i].item()} at iteration {step_offset + i + 1}")


def default_lr(batch_size: int | None, n: int) -> float:
    """The paper's Adam learning rates (App. D): 0.1 full batch, 1e-3 for stochastic training."""
    return 0.1 if batch_size is None or batch_size >= n else 1e-3


__all__ = ["TrainResult", "TrainerSettings", "default_lr", "train"]
