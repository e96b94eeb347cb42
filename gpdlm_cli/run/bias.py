"""The ``gpdlm bias`` study: the DLM paper's gradient-bias statistics of a stochastic estimator.

Protocol (DLM paper, Sec. 6 "Evaluation of the sampling algorithms", Fig. 1(g,h), App. D Fig. 9):

1. fit SVGP (ELBO, beta = 1) with the configured trainer settings. The fit uses the deterministic
   ``estimator=auto`` (closed form, else quadrature) whatever estimator is studied, so every run of
   a sweep over estimators and sample sizes evaluates the same gradient at the same point;
2. freeze its hyperparameters (kernel, likelihood, inducing inputs) and reset q(u) to its
   initialisation (m~ = 0, S = I: the fixed-DLM starting point, ``model.reset_variational()``);
3. take the gradient g of the DLM objective (objective.beta) w.r.t. the variational parameters --
   the whitened mean and the lower triangle of the Cholesky factor of q(u) -- on the training rows
   (full batch, or ``bias.batch``/``trainer.batch_size`` rows of a fixed seeded minibatch):
   the reference by the closed form where the likelihood has one (``ExactEstimator``), else by
   adaptive Gauss-Hermite quadrature with ``bias.reference_nodes`` nodes; and, as in the paper, a
   second reference by bMC with ``bias.bmc_reference_samples`` samples (computed in row chunks);
4. draw R = ``bias.repetitions`` estimates g_hat with the configured estimator (each with fresh
   randomness from the estimator's own seeded generator, each a full forward/backward pass of the
   objective as in training, timed) and summarise them with ``metrics.bias.gradient_statistics``.

The model must be ``model=dlm`` (or ``dlm_fixed``); ``model.variant`` is set to ``fixed`` since the
protocol defines it. Only stochastic estimators are studied (bmc, smooth_bmc, ups): the
deterministic ones have no variance and no bias relative to themselves.

Results: ``metrics.json``, ``bias_stats.json`` and ``bias_histograms.png`` in the output folder, then
the metrics, params, tags and those files in MLflow through the tracked-run lifecycle ``gpdlm train``
uses (``run.lifecycle``; ``gpdlm.command=bias``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import build
from ..exceptions import ConfigError, UnsupportedCombination
from ..files import write_atomic
from ..metrics.bias import condition_statistics, coordinate_bias, gradient_statistics
from ..prepare import prepare
from ..schema import BiasSpec, parse
from ..tracking.identity import config_hashes
from ..training import train
from .lifecycle import TrackedRun, finished_from, make_tracker, run_tags

STOCHASTIC = ("bmc", "smooth_bmc", "ups")
_CHUNK_ELEMENTS = 2**21  # rows x samples (or nodes) per chunk of a reference gradient


# ----- checks ---------------------------------------------------------------------------------------
def validate_bias(cfg) -> None:
    """The ``bias`` block, the model and the estimator kind (no data needed)."""
    b = cfg.get("bias")
    if b is None:
        raise ConfigError("the config has no 'bias' block; gpdlm bias needs bias.repetitions etc. (see docs/bias.md)")
    parse(b, BiasSpec, "bias")  # repetitions, reference_nodes, bmc_reference_samples, batch: schema.BiasSpec
    if cfg.model.name != "dlm":
        raise UnsupportedCombination(
            f"gpdlm bias studies the DLM gradient: use model=dlm (or dlm_fixed); got model={cfg.model.name}"
        )
    if cfg.estimator.name not in STOCHASTIC:
        raise UnsupportedCombination(
            f"gpdlm bias studies stochastic estimators: bmc, smooth_bmc, ups; got estimator={cfg.estimator.name} "
            f"(it is deterministic: no variance, and exact/quadrature are the reference)"
        )


def effective_config(cfg):
    """A copy of ``cfg`` with ``model.variant=fixed`` (the protocol's definition)."""
    from omegaconf import OmegaConf, open_dict

    out = copy.deepcopy(cfg)
    OmegaConf.set_readonly(out, False)
    with open_dict(out):
        out.model.variant = "fixed"
    return out


# ----- gradients -----------------------------------------------------------------------------------
class _Flattener:
    """Gradients of (whitened mean, Cholesky factor) as one vector: the mean (M entries) first, then
    the lower triangle of the Cholesky factor row by row (its upper triangle is not a parameter of
    q(u): gpytorch masks it, so its gradient is always 0)."""

    def __init__(self, model):
        q = model.q_u
        self.mean, self.chol = q.variational_mean, q.chol_variational_covar
        given = {id(p) for p in model.variational_parameters()}
        if given != {id(self.mean), id(self.chol)}:
            raise RuntimeError("unexpected variational parameters: expected the whitened mean and Cholesky factor")
        M = self.mean.shape[-1]
        self.num_mean = M
        self.tril = torch.tril_indices(M, M, device=self.chol.device)
        self.params = [self.mean, self.chol]

    def __call__(self, grads) -> torch.Tensor:
        g_mean, g_chol = grads
        return torch.cat([g_mean.reshape(-1), g_chol[self.tril[0], self.tril[1]]]).detach()

    @property
    def size(self) -> int:
        return self.num_mean + self.tril.shape[1]


def _chunked_gradient(model, likelihood, estimator, x, y, num_data, beta, params, work_per_row: int):
    """Gradient of the DLM objective  mean_i -log E_q[p(y_i|f_i)] + beta KL / N  w.r.t. ``params``,
    with the data term differentiated w.r.t. (mu_i, var_i) in row chunks of at most
    ``_CHUNK_ELEMENTS / work_per_row`` rows (memory stays bounded for 10^4 samples or 100 nodes per
    row), then carried to ``params`` by one backward pass through the marginals."""
    mu, var = model.marginals(x)
    mu_d, var_d = mu.detach(), var.detach()
    B = x.shape[0]
    rows = max(1, _CHUNK_ELEMENTS // max(1, work_per_row))
    g_mu, g_var = torch.empty_like(mu_d), torch.empty_like(var_d)
    for s in range(0, B, rows):
        m = mu_d[s : s + rows].clone().requires_grad_(True)
        v = var_d[s : s + rows].clone().requires_grad_(True)
        term = -estimator.log_marginal(likelihood, y[s : s + rows], m, v).sum() / B
        gm, gv = torch.autograd.grad(term, [m, v])
        g_mu[s : s + rows], g_var[s : s + rows] = gm, gv
    total = (mu * g_mu).sum() + (var * g_var).sum() + beta * model.kl_divergence() / num_data
    return torch.autograd.grad(total, params)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _has_closed_form(likelihood) -> bool:
    from ..estimators import ExactEstimator

    try:
        ExactEstimator().check(likelihood, "log_marginal")
        return True
    except UnsupportedCombination:
        return False


def _fixed_minibatch(n: int, rows: int | None, seed: int, device):
    """None (all rows) or the first ``rows`` of a seeded permutation of range(n)."""
    if rows is None or rows >= n:
        return None
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=gen)[:rows].to(device)


# ----- the command's steps --------------------------------------------------------------------------
def _bias_config(cfg):
    """``prepare``'s ``adjust``: every check of the study (before a run exists), then the config it
    runs with (``model.variant=fixed``), with the studied estimator's own parameter checks."""
    validate_bias(cfg)
    cfg = effective_config(cfg)
    build.build_estimator(cfg.estimator)  # the estimator's own parameter checks (num_samples, nu, ...)
    return cfg


@dataclass
class _Study:
    """What one bias study works on: the prepared run, the rows whose gradient is studied, and the
    references it is measured against."""

    p: object  # prepare.Prepared: the run with model.variant=fixed (an SVGP stage, then the DLM stage)
    xb: torch.Tensor  # the rows of the gradient: all training rows or a fixed seeded minibatch
    yb: torch.Tensor
    closed: bool  # the likelihood has a closed form (the reference is exact, else quadrature)
    reference: object  # the estimator of the reference gradient
    L_ref: int  # samples of the bMC reference (0: none)

    @property
    def reference_kind(self) -> str:
        return "exact" if self.closed else "quadrature"

    @property
    def bmc_suffix(self) -> str:
        return f"_vs_bmc{self.L_ref}"


def _study(p) -> _Study:
    """The rows (``bias.batch``, else ``trainer.batch_size``, else all) and the references of ``p``."""
    from ..estimators import ExactEstimator, QuadratureEstimator

    cfg, b = p.cfg, p.cfg.bias
    rows = b.batch if b.batch is not None else cfg.trainer.batch_size
    idx = _fixed_minibatch(p.splits.n_train, rows, cfg.seed, p.device)
    data = p.data
    xb, yb = (data.x_train, data.y_train) if idx is None else (data.x_train[idx], data.y_train[idx])
    closed = _has_closed_form(p.method.likelihood)
    reference = ExactEstimator() if closed else QuadratureEstimator(num_nodes=int(b.reference_nodes), adaptive=True)
    return _Study(p, xb, yb, closed, reference, int(b.bmc_reference_samples))


def _tracked_run(p, study: _Study, output_dir: Path, tracker, overrides, skip_finished: bool):
    """The study's ``(TrackedRun, tags)``, or None when ``skip_finished`` finds a FINISHED bias run with
    the same config hash. The hash covers the command: a bias run never stands in for a `train` run."""
    from omegaconf import OmegaConf

    cfg = p.cfg
    config = OmegaConf.to_container(cfg, resolve=True)
    hashes = config_hashes(OmegaConf.create({**config, "gpdlm_command": "bias"}))
    if skip_finished and tracker.has_finished_run("gpdlm.config_hash", hashes):
        return None
    tags = run_tags(
        "bias",
        overrides=overrides,
        output_dir=output_dir,
        device=p.device,
        fingerprint=p.splits.fingerprint,
        chash=hashes[0],
        **{"gpdlm.bias_reference": study.reference_kind},
    )
    estimator = p.method.estimator
    L = getattr(estimator, "num_samples", None)
    name = cfg.tracking.get("run_name") or f"bias-{estimator.name}-L{L}-{cfg.dataset.name}-s{cfg.seed}"
    return TrackedRun(output_dir, tracker, name), tags


def _fit_svgp(p, generator, log_steps):
    """Step 2's fit: the fixed variant's SVGP stage (beta = 1, deterministic E_q[log p], collapsed for
    Gaussian full batch) on all training rows; returns the trainer's result."""
    svgp_stage = next(s for s in p.method.stages if s.name == "svgp")
    return train(
        svgp_stage.objective,
        svgp_stage.groups,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=generator,
        evaluate=None,
        log_steps=log_steps,
        desc="svgp",
        hooks=svgp_stage.hooks,
        stochastic=svgp_stage.stochastic,
    )


def _reference_gradients(study: _Study, flat: _Flattener, beta: float) -> tuple[dict, float, dict]:
    """Step 3: ``({suffix: reference gradient}, reference_ms, extra metrics)``. The reference (suffix
    "") by the closed form or quadrature (then checked against half its nodes), and the bMC reference
    (suffix ``_vs_bmc<L>``) when ``bias.bmc_reference_samples`` > 0, on a seeded stream of its own."""
    from ..estimators import BMCEstimator, QuadratureEstimator

    p, xb, yb = study.p, study.xb, study.yb
    model, likelihood, device, n = p.method.model, p.method.likelihood, p.device, p.splits.n_train
    nodes = int(p.cfg.bias.reference_nodes)

    def gradient(estimator, work_per_row):
        return flat(_chunked_gradient(model, likelihood, estimator, xb, yb, n, beta, flat.params, work_per_row))

    t0 = time.perf_counter()
    work = 1 if study.closed else nodes
    g_ref = gradient(study.reference, work)
    _sync(device)
    reference_ms = 1000 * (time.perf_counter() - t0)
    refs, extra = {"": g_ref}, {}
    if not study.closed:  # the quadrature reference's own accuracy: halve the nodes
        g_half = gradient(QuadratureEstimator(num_nodes=max(2, nodes // 2), adaptive=True), work // 2)
        extra["reference_check_rel"] = float((g_half - g_ref).norm() / g_ref.norm())
    if study.L_ref:
        bmc = BMCEstimator(num_samples=study.L_ref)
        bmc.seed(p.cfg.seed + 7919, device)  # a stream of its own, not the studied estimator's
        t0 = time.perf_counter()
        g_bmc = gradient(bmc, study.L_ref)
        _sync(device)
        extra["bmc_reference_ms"] = 1000 * (time.perf_counter() - t0)
        extra[f"bmc{study.L_ref}_vs_reference_rel"] = float((g_bmc - g_ref).norm() / g_ref.norm())
        refs[study.bmc_suffix] = g_bmc
    return refs, reference_ms, extra


def _estimates(objective, xb, yb, flat: _Flattener, repetitions: int, like: torch.Tensor, device):
    """Step 4: ``(G, ms)``: ``repetitions`` gradient estimates as the rows of G (dtype and device of
    ``like``), each a timed forward/backward pass of the objective as in training."""
    G = torch.empty((repetitions, flat.size), dtype=like.dtype, device=like.device)
    ms = []
    for r in range(repetitions):
        _sync(device)
        t0 = time.perf_counter()
        loss = objective(xb, yb)
        grads = torch.autograd.grad(loss, flat.params)
        _sync(device)
        ms.append(1000 * (time.perf_counter() - t0))
        G[r] = flat(grads)
    return G, ms


def _statistics(G: torch.Tensor, refs: dict, num_mean: int) -> tuple[dict, dict, dict]:
    """Step 5: ``(metrics, per_repetition, per_coordinate)`` of the estimates G against every reference
    (its suffix appended to each name): all variational parameters, and the mean block alone (the
    paper's Fig. 9 shows the mean parameters)."""
    metrics, per_repetition, per_coordinate = {}, {}, {}
    for suffix, g in refs.items():
        for k, v in gradient_statistics(G, g).items():
            if not (suffix and k == "repetitions"):
                metrics[f"{k}{suffix}"] = v
        for k, v in gradient_statistics(G[:, :num_mean], g[:num_mean]).items():
            if k != "repetitions":
                metrics[f"mean_block_{k}{suffix}"] = v
        c1, c2 = condition_statistics(G, g)
        per_repetition[f"cond_i{suffix}"] = c1.tolist()
        per_repetition[f"cond_ii{suffix}"] = c2.tolist()
        per_coordinate[f"bias{suffix}"] = coordinate_bias(G, g).tolist()
    return metrics, per_repetition, per_coordinate


def _run_facts(ms: list, reference_ms: float, flat: _Flattener, batch_rows: int, n: int, fit) -> dict:
    """The metrics that describe the study itself: timings, sizes and the SVGP fit."""
    return {
        "ms_per_estimate": float(sorted(ms)[len(ms) // 2]),
        "reference_ms": reference_ms,
        "num_params": flat.size,
        "num_mean_params": flat.num_mean,
        "batch_rows": batch_rows,
        "n_train": n,
        "svgp_iterations": fit.iterations,
        "svgp_converged": int(fit.converged),
        "svgp_final_loss": fit.losses[-1] if fit.losses else float("nan"),
        "svgp_train_seconds": fit.train_seconds,
    }


def _save_results(run, study: _Study, metrics: dict, per_repetition: dict, per_coordinate: dict, refs: dict, num_mean):
    """Step 6: metrics.json, bias_stats.json and bias_histograms.png to disk first, then to MLflow
    (``num_mean``: the number of whitened-mean coordinates, first in every gradient vector)."""
    from omegaconf import OmegaConf

    p, L_ref = study.p, study.L_ref
    cfg, estimator, likelihood = p.cfg, p.method.estimator, p.method.likelihood
    nodes = int(cfg.bias.reference_nodes)
    stats = {
        "estimator": OmegaConf.to_container(cfg.estimator, resolve=True),
        "likelihood": likelihood.name,
        "reference": study.reference_kind if study.closed else f"quadrature ({nodes} nodes)",
        "bmc_reference_samples": L_ref,
        "metrics": {k: (v if math.isfinite(v) else None) for k, v in metrics.items()},
        "per_repetition": per_repetition,
        "per_coordinate": {**per_coordinate, "num_mean_params": num_mean},
    }
    run.save_metrics(metrics)
    run.save("bias_stats.json", lambda path: write_atomic(path, json.dumps(stats, indent=2, sort_keys=True)))
    L, R = getattr(estimator, "num_samples", None), int(cfg.bias.repetitions)
    title = f"{estimator.name}" + (f" L={L}" if L else "") + f", {likelihood.name} on {cfg.dataset.name}, R={R}"
    labels = {"": "reference: " + stats["reference"], study.bmc_suffix: f"reference: bMC, {L_ref} samples"}
    run.save(
        "bias_histograms.png",
        lambda path: _plot_histograms(per_repetition, per_coordinate, num_mean, list(refs), labels, path, title),
    )
    run.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
    run.close(("config.yaml", "metrics.json", "bias_stats.json", "bias_histograms.png"), metrics)


# ----- the command ----------------------------------------------------------------------------------
def run_bias(
    cfg,
    output_dir: str | os.PathLike,
    overrides: list[str] | None = None,
    tracker=None,
    parent_run_id: str | None = None,
    skip_finished: bool = False,
    outcome: dict | None = None,
) -> dict | None:
    """Run the bias study of the configured estimator; returns its metrics (None if
    ``skip_finished`` found a FINISHED bias run with the same config hash). Raises GpdlmError on bad
    input, before any work or MLflow run. The steps are the module docstring's protocol. ``outcome``
    (a sweep job's record, filled by ``run_train`` when a job resumes) stays as it is: a bias study
    writes no checkpoint."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    p = prepare(cfg, adjust=_bias_config)  # 1. every check, before a run exists
    cfg, method = p.cfg, p.method
    generator = torch.Generator().manual_seed(cfg.seed)  # batch orders on the CPU, as in `gpdlm train`
    method.estimator.seed(cfg.seed, p.device)
    study = _study(p)
    tracker = tracker if tracker is not None else make_tracker(cfg.tracking, finished_from=finished_from(cfg))
    made = _tracked_run(p, study, output_dir, tracker, overrides, skip_finished)
    if made is None:
        return None
    run, tags = made
    with run.started(cfg, tags, parent_run_id=parent_run_id, table=p.table, fingerprint=p.splits.fingerprint):
        with run.interruptible():  # a kill during the study leaves a self-explaining folder
            fit = _fit_svgp(p, generator, tracker.log_steps)  # 2. fit, then freeze and reset q(u)
            dlm_stage = next(s for s in method.stages if s.name == "dlm")
            dlm_stage.prepare()
            flat = _Flattener(method.model)
            refs, reference_ms, extra = _reference_gradients(study, flat, float(cfg.objective.beta))  # 3.
            R, g_ref = int(cfg.bias.repetitions), refs[""]
            G, ms = _estimates(dlm_stage.objective, study.xb, study.yb, flat, R, g_ref, p.device)  # 4.
            metrics, per_repetition, per_coordinate = _statistics(G, refs, flat.num_mean)  # 5.
            metrics.update(extra)
            metrics.update(_run_facts(ms, reference_ms, flat, int(study.xb.shape[0]), p.splits.n_train, fit))
            metrics.update(method.estimator.statistics())
        _save_results(run, study, metrics, per_repetition, per_coordinate, refs, flat.num_mean)  # 6.
    run.report(metrics)
    return metrics


def _plot_histograms(per_repetition, per_coordinate, num_mean, suffixes, labels, path: Path, title: str) -> None:
    """One row per reference: condition (i), condition (ii) over repetitions, and the per-coordinate
    bias (mean block and Cholesky block), like the DLM paper's Fig. 1(g,h) and Fig. 9."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(suffixes), 3, figsize=(13, 3.6 * len(suffixes)), squeeze=False)
    for row, suffix in zip(axes, suffixes):
        c1, c2 = per_repetition[f"cond_i{suffix}"], per_repetition[f"cond_ii{suffix}"]
        row[0].hist(c1, bins=30, color="C0")
        row[0].axvline(1.0, color="k", ls="--", lw=1)
        row[0].set_xlabel(r"condition (i): $\hat g \cdot g / |g|^2$")
        row[1].hist(c2, bins=30, color="C1")
        row[1].axvline(1.0, color="k", ls="--", lw=1)
        row[1].set_xlabel(r"condition (ii): $|\hat g| / |g|$")
        bias = per_coordinate[f"bias{suffix}"]
        row[2].hist(
            [bias[:num_mean], bias[num_mean:]],
            bins=30,
            stacked=True,
            color=["C2", "C3"],
            label=["whitened mean", "Cholesky factor"],
        )
        row[2].axvline(0.0, color="k", ls="--", lw=1)
        row[2].set_xlabel(r"bias per coordinate: mean $\hat g_j - g_j$")
        row[2].legend(fontsize=8)
        row[0].set_ylabel(f"count\n({labels[suffix]})")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


__all__ = ["STOCHASTIC", "effective_config", "run_bias", "validate_bias"]
