"""Scores of sequence models (the GP-LSTM family): the standard predictive metrics pooled over
several outputs, and free simulation -- one rollout over a time-ordered split that feeds back the
predictive mean (:func:`simulate`), k-step-ahead rollouts from every start (:func:`rollouts`) and
their metrics (:func:`simulation_metrics`). A model enters only as ``predict(rows) -> (mu, var)``,
the latent predictive means and variances (rows, d) at windows ``rows``."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from .predictive import predictive_metrics

#: the calibration metrics ``scored`` pools over outputs (means over outputs)
CALIBRATION = ("msll", "crps", "coverage_50", "coverage_90", "coverage_95", "coverage_error")


class _Precomputed:
    """``marginals`` from precomputed (mu, var), indexed by the row number stored in x[:, 0]: lets
    the standard ``predictive_metrics`` score predictions made elsewhere (rollouts, several outputs)."""

    def __init__(self, mu, var):
        self.mu, self.var = mu, var

    def marginals(self, idx):
        i = idx[:, 0].long()
        return self.mu[i], self.var[i]


def target_sds(y_std: float | np.ndarray, d: int) -> list[float]:
    """The target sd of each of ``d`` outputs: ``y_std`` is ``DataSplits.y_std``, a float (one output, or
    the same sd for all) or an array of one sd per output; an array of another length is an error."""
    sds = np.atleast_1d(np.asarray(y_std, dtype=float))
    if sds.ndim != 1 or (sds.size != d and np.ndim(y_std) != 0):
        raise ValueError(f"one target sd per output: {d} outputs, got {sds.size} sd(s) ({y_std!r})")
    return [float(s) for s in np.broadcast_to(sds, (d,))]


def scored(mu, var, y, likelihoods, y_std: float | np.ndarray, prefix: str) -> dict[str, float]:
    """The standard predictive metrics (target units: each output's errors times its own sd, its NLL
    plus log of it -- ``y_std``, see :func:`target_sds`) of every output, pooled: ``nll`` and ``nll_norm``
    are means over outputs, ``mse`` a mean and ``rmse`` its root; the calibration metrics (coverage, its
    error, CRPS, MSLL) are means over outputs."""
    y = y[:, None] if y.ndim == 1 else y
    d = y.shape[1]
    stds = target_sds(y_std, d)
    idx = torch.arange(y.shape[0], dtype=mu.dtype, device=mu.device)[:, None]
    per = [
        predictive_metrics(
            _Precomputed(mu[:, k], var[:, k]), likelihoods[k], idx, y[:, k].to(mu.dtype), y_std=stds[k], prefix=""
        )
        for k in range(d)
    ]
    mean = {key: sum(p[key] for p in per) / d for key in per[0]}
    mse_norm = sum(p["rmse_norm"] ** 2 for p in per) / d
    out = {
        prefix + "nll": mean["nll"],
        prefix + "nll_norm": mean["nll_norm"],
        prefix + "mse": mean["mse"],
        prefix + "rmse": math.sqrt(mean["mse"]),
        prefix + "rmse_norm": math.sqrt(mse_norm),
    }
    out.update({prefix + k: mean[k] for k in CALIBRATION if k in mean})
    return out


@torch.no_grad()
def simulate(predict, x: torch.Tensor, feedback: list[list[tuple[int, int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Free simulation over time-ordered windows ``x`` (one row per step): before predicting row
    j, every past-target column (col, rows back r) with j - r >= 0 is overwritten by the predictive
    mean of row j - r; the first row keeps its L true past targets. ``predict(rows) -> (mu, var)``
    of shape (rows, d). Returns the rollout's (mu, var), (n, d)."""
    x = x.clone()
    n, d = x.shape[0], len(feedback)
    mus = x.new_zeros(n, d)
    vs = x.new_zeros(n, d)
    for j in range(n):
        for o, taps in enumerate(feedback):
            cols = [c for c, r in taps if j - r >= 0]
            if cols:
                x[j, cols] = mus[[j - r for c, r in taps if j - r >= 0], o].to(x.dtype)
        m, v = predict(x[j : j + 1])
        mus[j], vs[j] = m[0], v[0]
    return mus, vs


@torch.no_grad()
def rollouts(predict, x: torch.Tensor, feedback: list[list[tuple[int, int]]], steps: int) -> torch.Tensor:
    """k-step-ahead predictions from every start: trajectory s starts at window s from the true past
    targets and runs ``steps`` steps of free simulation (as :func:`simulate`), all trajectories in
    one batch per step. Returns the predictive means (n, steps, d); entry [s, i] predicts window
    s + i (NaN past the end)."""
    n, d = x.shape[0], len(feedback)
    out = torch.full((n, steps, d), float("nan"), dtype=x.dtype, device=x.device)
    for i in range(steps):
        s = torch.arange(n - i, device=x.device)  # trajectories that still have a window to predict
        rows = x[s + i].clone()
        for o, taps in enumerate(feedback):
            for col, back in taps:
                if back <= i:  # that past target was predicted by the same trajectory
                    rows[:, col] = out[s, i - back, o].to(x.dtype)
        mu, _ = predict(rows)
        out[s, i] = mu.to(x.dtype)
    return out


@torch.no_grad()
def free_simulation(
    means, marginals, x: torch.Tensor, feedback: list[list[tuple[int, int]]], steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`simulate` and :func:`rollouts` in one pass: the rollouts from every start for ``steps``
    steps, one batch per step, whose trajectory 0 is the free simulation's first ``steps`` steps; the
    simulation then continues alone. Only means are fed back, so the loop asks ``means(rows) -> (rows,
    d)`` and the simulation's variances come from one ``marginals(windows) -> (mu, var)`` call on its
    fed-back windows at the end. Returns (mu, var) of the simulation, (n, d), and the rollouts' means
    (n, steps, d) (None for ``steps`` = 0). Equal to :func:`simulate` and :func:`rollouts` up to
    rounding (batched rows; tests/recurrent/test_free_simulation.py)."""
    sim, mus, ahead = _trajectory(means, x, feedback, steps)
    _, var = marginals(sim)
    return mus, var.to(mus.dtype), ahead


def _trajectory(
    means, x: torch.Tensor, feedback: list[list[tuple[int, int]]], steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`free_simulation`'s loop: the simulation's fed-back windows (n, columns), its means (n, d)
    and the rollouts' means (n, steps, d) (None for ``steps`` = 0)."""
    n, d = x.shape[0], len(feedback)
    steps = min(steps, n)
    sim = x.clone()  # the simulation's windows, past targets fed back
    mus = x.new_zeros(n, d)
    ahead = torch.full((n, steps, d), float("nan"), dtype=x.dtype, device=x.device)
    for i in range(n):
        if i < steps:  # every trajectory still inside the split takes its step i
            s = torch.arange(n - i, device=x.device)
            rows = x[s + i].clone()
            for o, taps in enumerate(feedback):
                for col, back in taps:
                    if back <= i:
                        rows[:, col] = ahead[s, i - back, o].to(x.dtype)
            mu = means(rows).to(x.dtype)
            ahead[s, i] = mu
            sim[i], mus[i] = rows[0], mu[0]
            continue
        for o, taps in enumerate(feedback):  # the simulation alone, as simulate()
            cols = [c for c, r in taps if i - r >= 0]
            if cols:
                sim[i, cols] = mus[[i - r for c, r in taps if i - r >= 0], o].to(x.dtype)
        mus[i] = means(sim[i : i + 1])[0]
    return sim, mus, (ahead if steps else None)


@torch.no_grad()
def simulated_windows(means, x: torch.Tensor, feedback: list[list[tuple[int, int]]]) -> torch.Tensor:
    """The windows of the free simulation over time-ordered windows ``x`` from the true past targets of
    its first window: ``x`` with every past-target column (col, rows back r) of row j >= r overwritten by
    the predictive mean ``means`` gave for row j - r, one window per step (:func:`free_simulation`'s loop
    without the k-step rollouts, so with ``steps`` = 0; equal to :func:`simulate`'s fed-back windows).
    What ``model.training.feedback=own_predictions`` trains on (``methods.recurrent_setup.OwnFeedback``)."""
    return _trajectory(means, x, feedback, 0)[0]


def simulation_metrics(
    mu, var, y, likelihoods, y_std: float | np.ndarray, prefix: str, horizons, ahead=None
) -> dict[str, float]:
    """Free-simulation metrics, in target units: ``sim_rmse`` and ``sim_nll`` over the whole trajectory
    started at the first window (the paper's free simulation; the NLL from the GP's own one-step
    variances, no propagated uncertainty); ``sim_rmse_h<k>``, the RMSE over the first k simulated
    steps, pooled over every start whose k steps lie inside the split (``ahead``: :func:`rollouts`).
    h1 is the one-step RMSE; pooling over starts makes the curve a property of the model rather
    than of where one trajectory happens to start. ``sim_rmse_norm`` and ``sim_rmse_h<k>_norm``: the
    same on the standardised targets (each output's errors not multiplied by its sd; pooled as
    ``rmse_norm`` is, so with one output ``sim_rmse / sim_rmse_norm`` is the training targets' sd) --
    the unit of the GP-LSTM paper's Table 2."""
    out = {
        k.replace(prefix, prefix + "sim_", 1): v
        for k, v in scored(mu, var, y, likelihoods, y_std, prefix).items()
        if k.endswith(("rmse", "nll", "rmse_norm"))
    }
    y2 = y[:, None] if y.ndim == 1 else y
    n = y2.shape[0]
    stds = torch.as_tensor(target_sds(y_std, y2.shape[1]), dtype=y2.dtype, device=y2.device)
    for h in horizons:
        if ahead is not None and h <= ahead.shape[1] and h <= n:
            starts = torch.arange(n - h + 1, device=y2.device)
            truth = y2[starts[:, None] + torch.arange(h, device=y2.device)[None, :]]  # (starts, h, d)
            err_norm = ahead[: n - h + 1, :h] - truth
            out[f"{prefix}sim_rmse_h{h}"] = float((err_norm * stds).pow(2).mean().sqrt())
            out[f"{prefix}sim_rmse_h{h}_norm"] = float(err_norm.pow(2).mean().sqrt())
    return out


class SequenceEvaluation:
    """Evaluation of a sequence model on time-ordered windows: ``model`` has ``condition(x, y)`` (refit
    its prediction caches on the training windows), ``marginals_all(rows) -> (mu, var)`` and
    ``means(rows)``. In ``free_simulation`` mode the split is also rolled forward (``feedback``: per
    output, its past-target columns and how many rows back they lie; ``horizons``: the k of
    ``sim_rmse_h<k>``). ``test_ms_per_point``: the last one-step prediction time on the test split per
    window.

    **Schedule.** Free simulation costs ~n x max(horizons) network evaluations per split (the rollouts
    from every start), ~90% of an evaluation at the GP-LSTM Table 2 protocol; the selection of the best
    iterate needs only the one-step ``val_rmse`` (App. E). Between ``training_started()`` and
    ``training_ended()`` (the :class:`EvaluationSchedule` hook of every training stage) evaluations are
    one-step only (``simulate_in_training="none"``), or also simulate the validation split (``"val"``: a
    simulated selection metric needs it) or both splits (``"all"``: every evaluation complete, the
    learning curves of the simulated metrics); the run's final evaluation is complete."""

    def __init__(
        self, model, x_train, y_train, likelihoods, *, mode: str, feedback, horizons, simulate_in_training="none"
    ):
        self.model, self.x, self.y, self.likelihoods = model, x_train, y_train, likelihoods
        self.mode, self.feedback, self.horizons = mode, feedback, list(horizons)
        self.simulate_in_training = simulate_in_training
        self.training = False
        self.test_ms_per_point = float("nan")

    @property
    def simulates(self) -> bool:
        return self.mode == "free_simulation"

    def metric_names(self) -> tuple[str, ...]:
        names = ["nll", "nll_norm", "mse", "rmse", "rmse_norm", *CALIBRATION]
        if self.simulates:
            names += ["sim_rmse", "sim_rmse_norm", "sim_nll"]
            names += [f"sim_rmse_h{h}{suffix}" for h in self.horizons for suffix in ("", "_norm")]
        return tuple(names)

    def training_started(self) -> None:
        self.training = True

    def training_ended(self) -> None:
        self.training = False

    def _simulate_now(self, prefix: str) -> bool:
        if not self.simulates:
            return False
        if not self.training or self.simulate_in_training == "all":
            return True
        return self.simulate_in_training == "val" and prefix == "val_"

    def evaluate(self, xe, ye, prefix: str, y_std: float | np.ndarray) -> dict[str, float]:
        """The metrics of split (``xe``, ``ye``) under ``prefix`` (``val_``, ``test_``), in target units:
        ``y_std`` is one sd per output (``DataSplits.y_std``; a float for one output)."""
        if xe.shape[0] == 0:
            return {}
        self.model.condition(self.x, self.y)
        t0 = time.perf_counter()
        mu, var = self.model.marginals_all(xe)
        if prefix == "test_":
            self.test_ms_per_point = 1000 * (time.perf_counter() - t0) / xe.shape[0]
        out = scored(mu, var, ye, self.likelihoods, y_std, prefix)
        if self._simulate_now(prefix):
            reach = min(max(self.horizons, default=0), xe.shape[0])
            smu, svar, ahead = free_simulation(self.model.means, self.model.marginals_all, xe, self.feedback, reach)
            out.update(simulation_metrics(smu, svar, ye, self.likelihoods, y_std, prefix, self.horizons, ahead))
        return out

    def predict(self, xe):
        """(mu, var) of the latent outputs (n, d) at time-ordered windows ``xe``: one-step predictions,
        or in free simulation the rollout from the L true past targets of ``xe``'s first window -- computed
        as :meth:`evaluate` computes it (the same reach of batched rollouts, whose trajectory 0 is the
        simulation's first steps), so that ``gpdlm predict`` on a run's test series gives its ``test_sim_*``
        metrics exactly: with a float32 network a batched row and a single row differ in rounding (~1e-7)."""
        self.model.condition(self.x, self.y)
        if self.simulates:
            reach = min(max(self.horizons, default=0), xe.shape[0])
            mu, var, _ = free_simulation(self.model.means, self.model.marginals_all, xe, self.feedback, reach)
            return mu, var
        return self.model.marginals_all(xe)


class EvaluationSchedule:
    """A training-stage hook: the stage's evaluations (between its start, ``bind_optimizer``, and its
    end, ``stage_end``) are :class:`SequenceEvaluation`'s training evaluations."""

    def __init__(self, evaluation: SequenceEvaluation):
        self.evaluation = evaluation

    def bind_optimizer(self, opt) -> None:
        self.evaluation.training_started()

    def stage_end(self, result) -> None:
        self.evaluation.training_ended()

    def checkpoint_state(self) -> dict:
        """A checkpoint's part: whether evaluations are training ones, and the last test prediction time."""
        return {"training": self.evaluation.training, "test_ms_per_point": self.evaluation.test_ms_per_point}

    def load_checkpoint_state(self, state: dict) -> None:
        self.evaluation.training = bool(state["training"])
        self.evaluation.test_ms_per_point = float(state["test_ms_per_point"])


__all__ = [
    "CALIBRATION",
    "EvaluationSchedule",
    "SequenceEvaluation",
    "free_simulation",
    "rollouts",
    "scored",
    "simulate",
    "simulated_windows",
    "simulation_metrics",
    "target_sds",
]
