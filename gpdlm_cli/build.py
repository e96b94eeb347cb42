"""The composition root: the one place that reads a composed config and builds typed objects.

Library modules never see the config: they take plain arguments. ``build`` runs the checks every
run shares (objective, trainer, device, dtype, threads), loads the data, and dispatches everything
specific to a model to its family (``gpdlm_cli.methods``: ``validate``, ``check_sizes``,
``build``); it never names a model. Every check happens before any run is started and fails with
a one-line ``GpdlmError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch

from .exceptions import ConfigError, UnsupportedCombination, param_error
from .methods import FAMILIES, MODELS, Method, Stage, family_of
from .methods import components as C
from .methods.components import (
    build_kernel,
    build_likelihood,
    build_mean,
    initial_inducing_points,
)
from .methods.kernels import check_kernel
from .schema import DatasetSpec, EstimatorSpec, ModelSpec, RunKeys, RunSpec, TrainerSpec, parse, run_spec

if TYPE_CHECKING:
    import numpy as np


# ----- settings -------------------------------------------------------------------------------------
def multirun_keys() -> tuple[str, ...]:
    """The config keys the overrides of this Hydra multirun job set (``objective.beta``, ``seed``, ...;
    ``+``/``~`` stripped), or () outside a multirun (a single run, tests, API use). The one place a
    family's input is read from Hydra's job state: families see it as ``RunSpec.multirun_keys``."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except Exception:  # not under Hydra
        return ()
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return ()
    return tuple(o.split("=")[0].lstrip("+~") for o in hc.overrides.task)


def specs(cfg, family=None) -> RunSpec:
    """The run's typed, validated specs (``schema.RunSpec``): every group checked against its
    schema, the model group against its family's ``Spec``, and the keys a multirun job's overrides
    set (``multirun_keys``). The one place a config becomes specs."""
    family = family if family is not None else family_of(cfg.model.name)
    return replace(run_spec(cfg, getattr(family, "Spec", ModelSpec)), multirun_keys=multirun_keys())


def family_input(cfg, family, spec: RunSpec | None = None) -> RunSpec:
    """What ``family``'s entry points take: the run's ``RunSpec`` (``spec`` when already built)."""
    return spec if spec is not None else specs(cfg, family)


def validate_config(cfg):
    """Range checks on config values that need no data: every number finite, every group against
    its schema (``gpdlm_cli.schema``), then the model's family. Returns the family module
    (``prepare`` looks it up once, here)."""
    check_finite(cfg)
    family = family_of(cfg.model.name)
    spec = specs(cfg, family)
    check_kernel(spec.kernel)
    family.validate(family_input(cfg, family, spec))
    spec.trainer.check()  # the trainer's cross-key rules (L-BFGS needs the full batch, ...), after the family's
    if spec.keys.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=auto or device=cpu")
    return family


def check_finite(cfg) -> None:
    """No config value may be NaN or infinite (a learning rate of inf trains NaNs and fails later
    under another name): the first such key, as a one-line ConfigError."""
    from omegaconf import OmegaConf

    from .tracking import flatten

    try:
        values = flatten(cast(dict, OmegaConf.to_container(cfg, resolve=True)))  # a DictConfig's container
    except Exception:  # an interpolation only Hydra resolves: the keys' own checks apply
        return
    for key, v in values.items():
        items = v if isinstance(v, list) else [v]
        if key.startswith("hydra.") or not any(isinstance(x, float) and not math.isfinite(x) for x in items):
            continue
        owner, _, param = key.rpartition(".")
        raise param_error(param, owner or "gpdlm", "a finite number (no nan or inf)", v)


def validate_dataset_keys(d) -> DatasetSpec:
    """The dataset keys every dataset has (``standardize_y``, ``missing``, ``split.*``), before any
    data is read; a dataset's own options are checked by its loader."""
    return parse(d, DatasetSpec, "dataset")


def validate_trainer(t) -> TrainerSpec:
    """The ``trainer.*`` keys against their schema (``schema.TrainerSpec``)."""
    return parse(t, TrainerSpec, "trainer")


def _check_threads(setting) -> None:
    parse({"threads": setting}, RunKeys, "gpdlm")


def build_estimator(node):
    """The estimator of an ``estimator`` config node (its keys checked against the estimator's schema,
    ``schema.options``)."""
    return C.build_estimator(node if isinstance(node, EstimatorSpec) else parse(node, EstimatorSpec, "estimator"))


def configure_threads(setting, parallel_jobs: int = 1) -> int:
    """Set torch's CPU threads: an int, or 'auto' (``runtime.auto_threads``: this job's share of the
    cores, cores // parallel jobs, at most the cores other processes leave free, at least 1).

    Oversubscribed cores are catastrophic for OpenMP (spinning threads: 10x slower seen on 2 cores
    with two 2-thread jobs), so parallel sweep jobs share the cores instead of each taking all."""
    from .runtime import threads_setting, tune_allocator

    _check_threads(setting)
    n = threads_setting(setting, parallel_jobs)
    torch.set_num_threads(n)
    tune_allocator()  # every run's process, however it was started (runtime.py: page faults)
    try:  # numpy/scipy BLAS and scikit-learn's OpenMP (k-means) get the same cap inside a sweep job
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n)
    except Exception:
        pass
    return n


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64}[name]


# ----- data ----------------------------------------------------------------------------------------
@dataclass
class Tensors:
    """The splits as tensors on the run's device and dtype."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    feature_names: list | None = None  # column names (sequence windows: 'channel[t-k]')
    target_names: list | None = None  # the target's name(s); y is (n, d) for d > 1 outputs
    y_std: float | np.ndarray = 1.0  # y was divided by it (one per output; 1 when not standardised)


def load_data(cfg):
    """Load, check and split the configured dataset; returns (table, DataSplits, Tensors)."""
    from .data import check_split, load_table, make_splits

    d = cfg.dataset
    options = {k: v for k, v in d.items() if k not in ("name", "split", "standardize_y")}
    check_split(d.name, d.split, options)  # a bad mask fails before anything is fetched or parsed
    table = load_table(d.name, **options)
    lik_task = _likelihood_task(cfg.likelihood.name)
    if table.task != lik_task and not (table.task == "sequence" and lik_task == "regression"):
        raise UnsupportedCombination(
            f"likelihood={cfg.likelihood.name} is for {lik_task} targets but dataset={d.name} is a "
            f"{table.task} dataset; choose a likelihood for {table.task}"
        )
    s = d.split
    splits = make_splits(
        table,
        seed=cfg.seed,
        val_fraction=s.val_fraction,
        test_fraction=s.test_fraction,
        train_size=s.train_size,
        test_size=s.test_size,
        standardize_y=d.get("standardize_y"),
        mask=s.get("mask"),
        mask_val_fraction=s.get("mask_val_fraction", 0.0),
    )
    device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)

    def t(a):
        return torch.as_tensor(a, dtype=dtype, device=device)

    tensors = Tensors(
        t(splits.X_train),
        t(splits.y_train),
        t(splits.X_val),
        t(splits.y_val),
        t(splits.X_test),
        t(splits.y_test),
        feature_names=list(splits.feature_names),
        target_names=str(table.target_name).split(","),
        y_std=splits.y_std,
    )
    return table, splits, tensors


def _likelihood_task(name: str) -> str:
    from .likelihoods import LIKELIHOODS

    if name not in LIKELIHOODS:
        raise param_error("name", "likelihood", f"one of {sorted(LIKELIHOODS)}", name)
    return LIKELIHOODS[name].task


# ----- the method: dispatched to the model's family ------------------------------------------------
def check_sizes(cfg, n_train: int, family=None, spec: RunSpec | None = None) -> None:
    """The family's checks that need the training-set size (e.g. M <= N)."""
    family = family if family is not None else family_of(cfg.model.name)
    if hasattr(family, "check_sizes"):
        family.check_sizes(family_input(cfg, family, spec), n_train)


def build_method(cfg, tensors: Tensors, task: str, family=None, spec: RunSpec | None = None) -> Method:
    """The model, likelihood and training stages of ``cfg.model.name``, built by its family from the
    run's specs (``family``: the module ``validate_config`` returned; looked up when None)."""
    family = family if family is not None else family_of(cfg.model.name)
    if tensors.y_train.ndim > 1 and not getattr(family, "MULTI_OUTPUT", False):
        multi = [m for f in FAMILIES if getattr(f, "MULTI_OUTPUT", False) for m in f.MODELS]
        raise UnsupportedCombination(
            f"dataset={cfg.dataset.name} has {tensors.y_train.shape[1]} outputs but model={cfg.model.name} predicts one; "
            f"use one of {', '.join(multi) or '(none)'} or choose a single output of the dataset"
        )
    return family.build(family_input(cfg, family, spec), tensors, task)


def trainer_settings(cfg, n_train: int, task: str, method: Method | None = None, n_val: int | None = None):
    """The run's ``TrainerSettings``. With ``method``, also the checks that need it: L-BFGS on a
    stochastic stage, ``lr_scale`` groups the family does not have, ``keep_best`` metrics that
    nothing computes."""
    from .training import ConvergenceRule, Schedule, TrainerSettings, default_lr

    t = validate_trainer(cfg.trainer)
    optimizer = t.optimizer
    if t.stop_window is not None:
        window = t.stop_window
    else:  # the DLM paper's windows (App. D); L-BFGS iterations are line searches: a shorter window
        window = 10 if optimizer == "lbfgs" else (50 if task == "regression" else 20)
    uses = {"adam": ("eps",), "adadelta": ("rho", "eps"), "sgd": ("momentum",), "lbfgs": ("lbfgs_history",)}[optimizer]
    if t.protocol == "fast" and "lbfgs_history" not in uses:  # its L-BFGS stages use it too
        uses = (*uses, "lbfgs_history")
    options = {k: getattr(t, k) for k in uses}
    schedule = Schedule(
        kind=t.schedule,
        every_epochs=int(t.step_epochs),
        step_factor=float(t.step_factor),
        t0=float(t.rm_t0),
        kappa=float(t.rm_kappa),
    )
    keep = t.keep_best
    if keep == "auto":
        keep = default_keep_best(t, method, n_val)
    mode = t.keep_best_mode
    lr_scale = {str(k): float(v) for k, v in t.scales.items()}
    if method is not None:
        _check_method_settings(cfg, method, task, lr_scale, keep, optimizer, n_val)
        if mode == "auto":
            mode = "max" if keep in method.higher_is_better else "min"
    return TrainerSettings(
        max_iters=t.max_iters,
        lr=t.lr if t.lr is not None else default_lr(t.batch_size, n_train, optimizer),
        batch_size=t.batch_size,
        stop=ConvergenceRule(window=window, tol=t.stop_tol),
        check_every=t.check_every,
        eval_every=t.eval_every,
        progress=bool(cfg.progress),
        optimizer=optimizer,
        optimizer_options=options,
        lr_scale=lr_scale,
        schedule=schedule,
        max_epochs=t.max_epochs,
        eval_every_epochs=t.eval_every_epochs,
        keep_best=keep,
        keep_best_mode="min" if mode == "auto" else mode,
        stop_rule=t.stop_rule,
        protocol=t.protocol,
        fast_window=int(t.fast_window),
        fast_tol=float(t.fast_tol),
        fast_max_iters=int(t.fast_max_iters),
        fast_adam_iters=int(t.fast_adam_iters),
        fast_grad_tol=None if t.fast_grad_tol is None else float(t.fast_grad_tol),
    )


def default_keep_best(trainer: TrainerSpec, method: Method | None, n_val: int | None) -> str | None:
    """``trainer.keep_best=auto``: the family's ``default_keep_best`` where this run computes it at
    evaluation points (evaluations on; a val_ metric needs a validation set), else None (the last iterate)."""
    want = method.default_keep_best if method is not None else None
    t = trainer
    if want is None or not (t.eval_every or t.eval_every_epochs):
        return None
    if want.startswith("val_") and not n_val:
        return None
    return want


def _check_method_settings(cfg, method: Method, task: str, lr_scale: dict, keep, optimizer: str, n_val) -> None:
    from .metrics import PREDICTIVE_METRICS

    valid = method.group_names
    unknown = [g for g in lr_scale if g not in valid]
    if unknown:
        raise param_error(
            f"lr_scale.{unknown[0]}",
            "trainer",
            f"a group of model={cfg.model.name}: one of {', '.join(valid)}",
            lr_scale[unknown[0]],
        )
    if optimizer == "lbfgs":
        stochastic = [s.name for s in method.stages if s.stochastic and s.solve is None]
        if stochastic:
            raise UnsupportedCombination(
                f"trainer.optimizer=lbfgs needs a deterministic objective, but stage '{stochastic[0]}' uses the "
                f"sampling estimator={cfg.estimator.name}; use estimator=auto/exact/quadrature or a first-order optimizer"
            )
    if keep is not None:
        names = method.evaluation_metrics or PREDICTIVE_METRICS.get(task, ("nll",))
        prefixes = ("test_",) if n_val == 0 else ("val_", "test_")
        available = [p + k for p in prefixes for k in names] + list(method.monitors)
        if keep not in available:
            raise param_error(
                "keep_best", "trainer", f"a metric this run computes: one of {', '.join(available)}", keep
            )
    objective = str(cfg.get("sweep", {}).get("objective", "auto"))
    if objective.startswith(
        ("val_", "test_")
    ):  # a sweep job's objective; other names (statistics) are checked at its end
        names = method.evaluation_metrics or PREDICTIVE_METRICS.get(task, ("nll",))
        prefixes = ("test_",) if n_val == 0 else ("val_", "test_")
        available = [p + k for p in prefixes for k in names] + list(method.monitors)
        if objective not in available:
            raise param_error(
                "objective", "sweep", f"'auto' or a metric this run computes: one of {', '.join(available)}", objective
            )


__all__ = [
    "MODELS",
    "Method",
    "Stage",
    "Tensors",
    "build_estimator",
    "build_kernel",
    "build_likelihood",
    "build_mean",
    "build_method",
    "check_finite",
    "check_sizes",
    "configure_threads",
    "initial_inducing_points",
    "load_data",
    "resolve_device",
    "resolve_dtype",
    "trainer_settings",
    "validate_config",
    "validate_dataset_keys",
    "validate_trainer",
]
