"""The composition root: the one place that reads a composed config and builds typed objects.

Library modules never see the config: they take plain arguments. ``build`` runs the checks every
run shares (objective, trainer, device, dtype, threads), loads the data, and dispatches everything
specific to a model to its family (``gpdlm_cli.methods``: ``validate``, ``check_sizes``,
``build``); it never names a model. Every check happens before any run is started and fails with
a one-line ``GpdlmError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .exceptions import ConfigError, UnsupportedCombination, param_error
from .methods import FAMILIES, MODELS, Method, Stage, family_of
from .methods.components import (
    build_estimator,
    build_kernel,
    build_likelihood,
    build_mean,
    initial_inducing_points,
    is_int,
    is_number,
)

if TYPE_CHECKING:
    import numpy as np


# ----- settings -------------------------------------------------------------------------------------
def validate_config(cfg):
    """Range checks on config values that need no data: every number finite, the shared keys, then
    the model's family. Returns the family module (``prepare`` looks it up once, here)."""
    check_finite(cfg)
    seed = cfg.seed
    if not is_int(seed) or not 0 <= seed < 2**63:
        raise param_error("seed", "gpdlm", "an integer in [0, 2^63)", seed)
    beta = cfg.objective.beta
    if not is_number(beta) or beta <= 0 or math.isinf(beta):
        raise param_error("beta", "objective", "a finite float in (0, inf)", beta)
    family = family_of(cfg.model.name)
    family.validate(cfg)
    validate_trainer(cfg.trainer)
    s = cfg.get("sweep") or {}
    for key in ("share_stages", "warm_start", "batched"):
        if not isinstance(s.get(key, False), bool):
            raise param_error(key, "sweep", "true or false", s.get(key))
    validate_dataset_keys(cfg.dataset)
    _check_threads(cfg.get("threads", "auto"))
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise param_error("device", "gpdlm", "'auto', 'cpu' or 'cuda'", cfg.device)
    if cfg.dtype not in ("float32", "float64"):
        raise param_error("dtype", "gpdlm", "'float32' or 'float64'", cfg.dtype)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=auto or device=cpu")
    return family


def check_finite(cfg) -> None:
    """No config value may be NaN or infinite (a learning rate of inf trains NaNs and fails later
    under another name): the first such key, as a one-line ConfigError."""
    from omegaconf import OmegaConf

    from .tracking import flatten

    try:
        values = flatten(OmegaConf.to_container(cfg, resolve=True))
    except Exception:  # an interpolation only Hydra resolves: the keys' own checks apply
        return
    for key, v in values.items():
        items = v if isinstance(v, list) else [v]
        if key.startswith("hydra.") or not any(isinstance(x, float) and not math.isfinite(x) for x in items):
            continue
        owner, _, param = key.rpartition(".")
        raise param_error(param, owner or "gpdlm", "a finite number (no nan or inf)", v)


def validate_dataset_keys(d) -> None:
    """The dataset keys every dataset has (``standardize_y``, ``missing``, ``split.*``), before any
    data is read; a dataset's own options are checked by its loader."""
    from .data.splits import check_split_values

    if d.get("standardize_y") is not None and not isinstance(d.standardize_y, bool):
        raise param_error("standardize_y", "dataset", "true, false or null (the task decides)", d.standardize_y)
    if "missing" in d and d.missing not in ("drop", "error"):
        raise param_error("missing", "dataset", "'drop' or 'error'", d.missing)
    check_split_values(d.get("split") or {})


def validate_trainer(t) -> None:
    """The ``trainer.*`` keys (see conf/trainer/paper.yaml and docs/configuration.md's trainer keys)."""
    from .methods.recurrent import ALGORITHMS
    from .training import OPTIMIZERS, SCHEDULES, STOP_RULES

    if t.get("algorithm", "full") not in ALGORITHMS:  # read by the recurrent family; checked for every run
        raise param_error("algorithm", "trainer", f"one of {', '.join(ALGORITHMS)}", t.algorithm)
    tau = t.get("kernel_refresh_every")
    if tau is not None and (not is_int(tau) or tau < 1):
        raise param_error("kernel_refresh_every", "trainer", "an integer >= 1 or null (one epoch)", tau)

    if t.lr is not None and (not is_number(t.lr) or t.lr <= 0 or math.isinf(t.lr)):
        raise param_error("lr", "trainer", "a finite float > 0 or null", t.lr)
    if t.batch_size is not None and (not is_int(t.batch_size) or t.batch_size < 1):
        raise param_error("batch_size", "trainer", "an integer >= 1 or null (full batch)", t.batch_size)
    max_epochs = t.get("max_epochs")
    if max_epochs is not None and (not is_int(max_epochs) or max_epochs < 1):
        raise param_error("max_epochs", "trainer", "an integer >= 1 or null", max_epochs)
    if t.max_iters is None and max_epochs is None:
        raise param_error(
            "max_iters", "trainer", "an integer >= 1 (null only with trainer.max_epochs set)", t.max_iters
        )
    if t.max_iters is not None and (not is_int(t.max_iters) or t.max_iters < 1):
        raise param_error("max_iters", "trainer", "an integer >= 1", t.max_iters)
    for key in ("check_every", "eval_every"):
        if not is_int(t[key]) or t[key] < (1 if key == "check_every" else 0):
            raise param_error(key, "trainer", "a positive integer", t[key])
    eve = t.get("eval_every_epochs")
    if eve is not None and (not is_int(eve) or eve < 1):
        raise param_error("eval_every_epochs", "trainer", "an integer >= 1 or null", eve)
    if t.stop_window is not None and (not is_int(t.stop_window) or t.stop_window < 0):
        raise param_error("stop_window", "trainer", "an integer >= 0 (0 disables) or null", t.stop_window)
    if not is_number(t.stop_tol) or t.stop_tol < 0:
        raise param_error("stop_tol", "trainer", "a float >= 0", t.stop_tol)
    if t.get("stop_rule", "auto") not in STOP_RULES:
        raise param_error("stop_rule", "trainer", f"one of {', '.join(STOP_RULES)}", t.stop_rule)
    opt = t.get("optimizer", "adam")
    if opt not in OPTIMIZERS:
        raise param_error("optimizer", "trainer", f"one of {', '.join(OPTIMIZERS)}", opt)
    if not is_number(t.get("momentum", 0.0)) or not 0 <= t.get("momentum", 0.0) < 1:
        raise param_error("momentum", "trainer (sgd)", "a float in [0, 1)", t.momentum)
    if not is_number(t.get("rho", 0.9)) or not 0 <= t.get("rho", 0.9) <= 1:
        raise param_error("rho", "trainer (adadelta)", "a float in [0, 1]", t.rho)
    eps = t.get("eps")
    if eps is not None and (not is_number(eps) or eps <= 0):
        raise param_error("eps", "trainer", "a float in (0, inf) or null (the optimiser's default)", eps)
    hist = t.get("lbfgs_history", 100)
    if not is_int(hist) or hist < 1:
        raise param_error("lbfgs_history", "trainer (lbfgs)", "an integer >= 1", hist)
    if opt == "lbfgs" and t.batch_size is not None:
        raise UnsupportedCombination(
            "trainer.optimizer=lbfgs needs a deterministic full-batch objective; set trainer.batch_size=null "
            "or use adam, adadelta or sgd for minibatch training"
        )
    scales = t.get("lr_scale") or {}
    if not hasattr(scales, "items"):
        raise param_error(
            "lr_scale", "trainer", "a mapping of parameter groups to factors, e.g. {kernel: 0.1}, or null", scales
        )
    for name, v in scales.items():
        if not is_number(v) or v < 0 or math.isinf(v):
            raise param_error(f"lr_scale.{name}", "trainer", "a finite float >= 0", v)
    if opt == "lbfgs" and any(v != 1 for v in scales.values()):
        raise UnsupportedCombination(
            "trainer.optimizer=lbfgs has one step size for all parameters; remove trainer.lr_scale"
        )
    schedule = t.get("schedule", "constant")
    if schedule not in SCHEDULES:
        raise param_error("schedule", "trainer", f"one of {', '.join(SCHEDULES)}", schedule)
    if schedule == "step":
        if not is_int(t.step_epochs) or t.step_epochs < 1:
            raise param_error("step_epochs", "trainer (schedule=step)", "an integer >= 1", t.step_epochs)
        if not is_number(t.step_factor) or not 0 < t.step_factor <= 1:
            raise param_error("step_factor", "trainer (schedule=step)", "a float in (0, 1]", t.step_factor)
    if schedule == "robbins_monro":
        if not is_number(t.rm_kappa) or not 0.5 < t.rm_kappa <= 1:
            raise param_error("rm_kappa", "trainer (schedule=robbins_monro)", "a float in (0.5, 1]", t.rm_kappa)
        if not is_number(t.rm_t0) or t.rm_t0 <= 0 or math.isinf(t.rm_t0):
            raise param_error("rm_t0", "trainer (schedule=robbins_monro)", "a finite float > 0", t.rm_t0)
    if t.get("protocol", "paper") not in ("paper", "fast"):
        raise param_error("protocol", "trainer", "'paper' or 'fast' (or choose trainer=paper|fast)", t.protocol)
    ce = t.get("checkpoint_every", 5)
    if not is_int(ce) or ce < 0:
        raise param_error("checkpoint_every", "trainer", "an integer >= 0 (0 = no checkpoints)", ce)
    fw = t.get("fast_window", 10)
    if not is_int(fw) or fw < 2:
        raise param_error("fast_window", "trainer (protocol=fast)", "an integer >= 2", fw)
    fm = t.get("fast_max_iters", 1000)
    if not is_int(fm) or fm < 1:
        raise param_error("fast_max_iters", "trainer (protocol=fast)", "an integer >= 1", fm)
    ft = t.get("fast_tol", 1e-4)
    if not is_number(ft) or not 0 <= ft < math.inf:
        raise param_error("fast_tol", "trainer (protocol=fast)", "a finite float >= 0", ft)
    fa = t.get("fast_adam_iters", 200)
    if not is_int(fa) or fa < 0:
        raise param_error(
            "fast_adam_iters", "trainer (protocol=fast)", "an integer >= 0 (0 = L-BFGS from the start)", fa
        )
    fg = t.get("fast_grad_tol", 1e-4)
    if fg is not None and (not is_number(fg) or not 0 <= fg < math.inf):
        raise param_error(
            "fast_grad_tol", "trainer (protocol=fast)", "a finite float >= 0 or null (no gradient test)", fg
        )
    keep = t.get("keep_best")
    if keep is not None and (not isinstance(keep, str) or not keep):
        raise param_error("keep_best", "trainer", "'auto', a metric name (e.g. val_nll) or null", keep)
    if keep not in (None, "auto") and not (t.eval_every or eve):
        raise UnsupportedCombination(
            "trainer.keep_best needs evaluations: set trainer.eval_every or trainer.eval_every_epochs"
        )
    if t.get("keep_best_mode", "auto") not in ("auto", "min", "max"):
        raise param_error("keep_best_mode", "trainer", "'auto', 'min' or 'max'", t.keep_best_mode)


def _check_threads(setting) -> None:
    if setting != "auto" and (not isinstance(setting, int) or isinstance(setting, bool) or setting < 1):
        raise param_error("threads", "gpdlm", "'auto' or an integer >= 1", setting)


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
def check_sizes(cfg, n_train: int, family=None) -> None:
    """The family's checks that need the training-set size (e.g. M <= N)."""
    family = family if family is not None else family_of(cfg.model.name)
    if hasattr(family, "check_sizes"):
        family.check_sizes(cfg, n_train)


def build_method(cfg, tensors: Tensors, task: str, family=None) -> Method:
    """The model, likelihood and training stages of ``cfg.model.name``, built by its family
    (``family``: the module ``validate_config`` returned; looked up when None)."""
    family = family if family is not None else family_of(cfg.model.name)
    if tensors.y_train.ndim > 1 and not getattr(family, "MULTI_OUTPUT", False):
        multi = [m for f in FAMILIES if getattr(f, "MULTI_OUTPUT", False) for m in f.MODELS]
        raise UnsupportedCombination(
            f"dataset={cfg.dataset.name} has {tensors.y_train.shape[1]} outputs but model={cfg.model.name} predicts one; "
            f"use one of {', '.join(multi) or '(none)'} or choose a single output of the dataset"
        )
    return family.build(cfg, tensors, task)


def trainer_settings(cfg, n_train: int, task: str, method: Method | None = None, n_val: int | None = None):
    """The run's ``TrainerSettings``. With ``method``, also the checks that need it: L-BFGS on a
    stochastic stage, ``lr_scale`` groups the family does not have, ``keep_best`` metrics that
    nothing computes."""
    from .training import ConvergenceRule, Schedule, TrainerSettings, default_lr

    t = cfg.trainer
    optimizer = t.get("optimizer", "adam")
    if t.stop_window is not None:
        window = t.stop_window
    else:  # the DLM paper's windows (App. D); L-BFGS iterations are line searches: a shorter window
        window = 10 if optimizer == "lbfgs" else (50 if task == "regression" else 20)
    uses = {"adam": ("eps",), "adadelta": ("rho", "eps"), "sgd": ("momentum",), "lbfgs": ("lbfgs_history",)}[optimizer]
    if t.get("protocol", "paper") == "fast" and "lbfgs_history" not in uses:  # its L-BFGS stages use it too
        uses = (*uses, "lbfgs_history")
    defaults = {"momentum": 0.0, "rho": 0.9, "eps": None, "lbfgs_history": 100}
    options = {k: t.get(k, defaults[k]) for k in uses}
    schedule = Schedule(
        kind=t.get("schedule", "constant"),
        every_epochs=int(t.get("step_epochs", 10)),
        step_factor=float(t.get("step_factor", 0.5)),
        t0=float(t.get("rm_t0", 100.0)),
        kappa=float(t.get("rm_kappa", 0.6)),
    )
    keep = t.get("keep_best")
    if keep == "auto":
        keep = default_keep_best(cfg, method, n_val)
    mode = t.get("keep_best_mode", "auto")
    lr_scale = {str(k): float(v) for k, v in (t.get("lr_scale") or {}).items()}
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
        max_epochs=t.get("max_epochs"),
        eval_every_epochs=t.get("eval_every_epochs"),
        keep_best=keep,
        keep_best_mode="min" if mode == "auto" else mode,
        stop_rule=t.get("stop_rule", "auto"),
        protocol=t.get("protocol", "paper"),
        fast_window=int(t.get("fast_window", 10)),
        fast_tol=float(t.get("fast_tol", 1e-4)),
        fast_max_iters=int(t.get("fast_max_iters", 1000)),
        fast_adam_iters=int(t.get("fast_adam_iters", 200)),
        fast_grad_tol=None if (g := t.get("fast_grad_tol", 1e-4)) is None else float(g),
    )


def default_keep_best(cfg, method: Method | None, n_val: int | None) -> str | None:
    """``trainer.keep_best=auto``: the family's ``default_keep_best`` where this run computes it at
    evaluation points (evaluations on; a val_ metric needs a validation set), else None (the last iterate)."""
    want = method.default_keep_best if method is not None else None
    t = cfg.trainer
    if want is None or not (t.eval_every or t.get("eval_every_epochs")):
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
