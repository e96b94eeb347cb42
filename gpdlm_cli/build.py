"""The composition root: the one place that reads a composed config and builds typed objects.

Library modules never see the config: they take plain arguments. Every check of a value or of a
combination of values happens here, before any data is touched or any run is started, and fails
with a one-line ``GpdlmError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .exceptions import ConfigError, UnsupportedCombination, param_error

SPARSE_VARIATIONAL = ("svgp", "dlm", "sq_dlm")
COLLAPSED = ("sgpr", "fitc")
MODELS = SPARSE_VARIATIONAL + COLLAPSED + ("exact",)


# ----- settings -------------------------------------------------------------------------------------
def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def validate_config(cfg) -> None:
    """Range checks on scalar config values (everything that needs no data)."""
    beta = cfg.objective.beta
    if not _is_number(beta) or beta <= 0 or math.isinf(beta):
        raise param_error("beta", "objective", "a finite float in (0, inf)", beta)
    m = cfg.model
    if m.name not in MODELS:
        raise param_error("name", "model", f"one of {MODELS}", m.name)
    if "num_inducing" in m and (not isinstance(m.num_inducing, int) or m.num_inducing < 1):
        raise param_error("num_inducing", f"model={m.name}", "an integer >= 1", m.num_inducing)
    if "variant" in m and m.variant not in ("joint", "fixed"):
        raise param_error("variant", f"model={m.name}", "'joint' or 'fixed'", m.variant)
    if m.name == "svgp" and m.get("variant") == "fixed":
        raise UnsupportedCombination("model.variant=fixed applies to dlm and sq_dlm (it is defined by a prior SVGP fit)")
    if "inducing_init" in m and m.inducing_init not in ("kmeans", "random"):
        raise param_error("inducing_init", f"model={m.name}", "'kmeans' or 'random'", m.inducing_init)
    t = cfg.trainer
    if t.lr is not None and (not _is_number(t.lr) or t.lr <= 0):
        raise param_error("lr", "trainer", "a float in (0, inf) or null", t.lr)
    if t.batch_size is not None and (not isinstance(t.batch_size, int) or t.batch_size < 1):
        raise param_error("batch_size", "trainer", "an integer >= 1 or null (full batch)", t.batch_size)
    if not isinstance(t.max_iters, int) or t.max_iters < 1:
        raise param_error("max_iters", "trainer", "an integer >= 1", t.max_iters)
    for key in ("check_every", "eval_every"):
        if not isinstance(t[key], int) or t[key] < (1 if key == "check_every" else 0):
            raise param_error(key, "trainer", "a positive integer", t[key])
    if t.stop_window is not None and (not isinstance(t.stop_window, int) or t.stop_window < 0):
        raise param_error("stop_window", "trainer", "an integer >= 0 (0 disables) or null", t.stop_window)
    if not _is_number(t.stop_tol) or t.stop_tol < 0:
        raise param_error("stop_tol", "trainer", "a float >= 0", t.stop_tol)
    _check_threads(cfg.get("threads", "auto"))
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise param_error("device", "gpdlm", "'auto', 'cpu' or 'cuda'", cfg.device)
    if cfg.dtype not in ("float32", "float64"):
        raise param_error("dtype", "gpdlm", "'float32' or 'float64'", cfg.dtype)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=auto or device=cpu")
    if m.name in COLLAPSED + ("exact",) and cfg.likelihood.name != "gaussian":
        raise UnsupportedCombination(
            f"model={m.name} is defined for likelihood=gaussian only; for likelihood={cfg.likelihood.name} "
            f"use model=svgp, dlm"
        )
    if m.name == "sq_dlm" and cfg.likelihood.name != "gaussian":
        raise UnsupportedCombination("model=sq_dlm (square loss) is a regression method: use likelihood=gaussian")
    if m.name in COLLAPSED + ("exact",) and t.batch_size is not None:
        raise UnsupportedCombination(f"model={m.name} trains full batch; set trainer.batch_size=null")


def _check_threads(setting) -> None:
    if setting != "auto" and (not isinstance(setting, int) or isinstance(setting, bool) or setting < 1):
        raise param_error("threads", "gpdlm", "'auto' or an integer >= 1", setting)


def configure_threads(setting, parallel_jobs: int = 1) -> int:
    """Set torch's CPU threads: an int, or 'auto' = cores // parallel jobs (at least 1).

    Oversubscribed cores are catastrophic for OpenMP (spinning threads: 10x slower seen on 2 cores
    with two 2-thread jobs), so parallel sweep jobs share the cores instead of each taking all."""
    import os

    _check_threads(setting)
    n = max(1, (os.cpu_count() or 1) // max(1, parallel_jobs)) if setting == "auto" else setting
    torch.set_num_threads(n)
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


def load_data(cfg):
    """Load, check and split the configured dataset; returns (DataSplits, Tensors)."""
    from .data import load_table, make_splits

    d = cfg.dataset
    options = {k: v for k, v in d.items() if k not in ("name", "split", "standardize_y")}
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
    )
    device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)

    def t(a):
        return torch.as_tensor(a, dtype=dtype, device=device)

    tensors = Tensors(t(splits.X_train), t(splits.y_train), t(splits.X_val), t(splits.y_val), t(splits.X_test), t(splits.y_test))
    return table, splits, tensors


def _likelihood_task(name: str) -> str:
    from .likelihoods import LIKELIHOODS

    if name not in LIKELIHOODS:
        raise param_error("name", "likelihood", f"one of {sorted(LIKELIHOODS)}", name)
    return LIKELIHOODS[name].task


# ----- components --------------------------------------------------------------------------------
def build_likelihood(lcfg):
    from .likelihoods import LIKELIHOODS

    cls = LIKELIHOODS.get(lcfg.name)
    if cls is None:
        raise param_error("name", "likelihood", f"one of {sorted(LIKELIHOODS)}", lcfg.name)
    kwargs = {k: v for k, v in lcfg.items() if k != "name"}
    if "noise_init" in kwargs and (not _is_number(kwargs["noise_init"]) or kwargs["noise_init"] <= 0):
        raise param_error("noise_init", "likelihood=gaussian", "a float in (0, inf)", kwargs["noise_init"])
    return cls(**kwargs)


def _estimator_registry():
    from . import estimators as E

    classes = (E.AutoEstimator, E.ExactEstimator, E.QuadratureEstimator, E.BMCEstimator, E.SmoothBMCEstimator, E.UPSEstimator)
    return {cls.name: cls for cls in classes}


def build_estimator(ecfg):
    reg = _estimator_registry()
    cls = reg.get(ecfg.name)
    if cls is None:
        raise param_error("name", "estimator", f"one of {sorted(reg)}", ecfg.name)
    return cls(**{k: v for k, v in ecfg.items() if k != "name"})


def build_kernel(kcfg, num_dims: int):
    import gpytorch

    ard = num_dims if kcfg.ard else None
    name = kcfg.name
    if name == "rbf":
        base = gpytorch.kernels.RBFKernel(ard_num_dims=ard)
    elif name in ("matern12", "matern32", "matern52"):
        base = gpytorch.kernels.MaternKernel(nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[name], ard_num_dims=ard)
    else:
        raise param_error("name", "kernel", "one of rbf, matern12, matern32, matern52", name)
    for key in ("lengthscale", "outputscale"):
        if not _is_number(kcfg[key]) or kcfg[key] <= 0:
            raise param_error(key, f"kernel={name}", "a float in (0, inf)", kcfg[key])
    base.lengthscale = kcfg.lengthscale
    k = gpytorch.kernels.ScaleKernel(base)
    k.outputscale = kcfg.outputscale
    return k


def build_mean(kind: str, task: str):
    """Zero mean for regression and counts, constant for classification (DLM paper, App. D)."""
    import gpytorch

    if kind == "auto":
        kind = "constant" if task == "classification" else "zero"
    if kind == "zero":
        return gpytorch.means.ZeroMean()
    if kind == "constant":
        return gpytorch.means.ConstantMean()
    raise param_error("mean", "model", "'auto', 'zero' or 'constant'", kind)


def initial_inducing_points(x: torch.Tensor, M: int, how: str, seed: int) -> torch.Tensor:
    """M rows of x at random, or the k-means centres of x (scikit-learn, seeded)."""
    n = x.shape[0]
    if M > n:
        raise param_error("num_inducing", "model", f"an integer in [1, n_train={n}]", M)
    rng = torch.Generator().manual_seed(seed)
    if how == "random":
        idx = torch.randperm(n, generator=rng)[:M]
        return x[idx.to(x.device)].clone()
    from sklearn.cluster import KMeans

    xs = x.detach().cpu().numpy()
    km = KMeans(n_clusters=M, n_init=1, random_state=seed, max_iter=100).fit(xs)
    return torch.as_tensor(km.cluster_centers_, dtype=x.dtype, device=x.device)


# ----- methods: model + objective + training protocol ----------------------------------------------
@dataclass
class Stage:
    """One step of a training protocol: iterate ``objective`` over ``params`` (after ``prepare``),
    or call ``solve(x, y)`` for a closed-form step."""

    name: str
    objective: Any = None
    params: list = field(default_factory=list)
    prepare: Callable[[], None] | None = None
    solve: Callable[[torch.Tensor, torch.Tensor], None] | None = None


@dataclass
class Method:
    """What ``train`` runs: the model (``marginals``), its likelihood, the stages, and an optional
    ``finalize(x, y)`` that completes the predictive distribution (square-loss DLM's noise)."""

    name: str
    model: Any
    likelihood: Any
    stages: list[Stage]
    estimator: Any = None
    finalize: Callable[[torch.Tensor, torch.Tensor], None] | None = None


def build_method(cfg, tensors: Tensors, task: str) -> Method:
    from . import objectives as O
    from .estimators import AutoEstimator
    from .models import CollapsedSparseGP, ExactGP, SparseVariationalGP

    m = cfg.model
    x, y = tensors.x_train, tensors.y_train
    n, D = x.shape
    device, dtype = x.device, x.dtype
    likelihood = build_likelihood(cfg.likelihood)
    likelihood.validate_targets(y)
    kernel = build_kernel(cfg.kernel, D)
    mean = build_mean(m.mean, task)
    beta = float(cfg.objective.beta)

    if m.name == "exact":
        if n > m.max_train:
            raise UnsupportedCombination(
                f"model=exact refuses n_train={n} > model.max_train={m.max_train} (O(N^3)); use a sparse model "
                f"or raise model.max_train"
            )
        model = ExactGP(x, y, kernel, mean, likelihood).to(device=device, dtype=dtype)
        obj = O.ExactMarginalLikelihood(model, n)
        return Method("exact", model, likelihood, [Stage("exact", obj, list(model.parameters()))])

    Z = initial_inducing_points(x, m.num_inducing, m.inducing_init, cfg.seed)
    if m.name in COLLAPSED:
        model = CollapsedSparseGP(Z, kernel, mean, likelihood, kind=m.name, learn_inducing=m.learn_inducing, jitter=m.jitter)
        model = model.to(device=device, dtype=dtype)
        model.set_train_data(x, y)
        return Method(m.name, model, likelihood, [Stage(m.name, O.CollapsedBound(model, n), list(model.parameters()))])

    estimator = build_estimator(cfg.estimator)
    model = SparseVariationalGP(Z, kernel, mean, learn_inducing=m.learn_inducing, jitter=m.jitter)
    model = model.to(device=device, dtype=dtype)
    likelihood = likelihood.to(device=device, dtype=dtype)
    all_params = list(model.parameters()) + list(likelihood.parameters())
    quantity = {"svgp": "expected_log_prob", "dlm": "log_marginal", "sq_dlm": None}[m.name]
    if quantity:
        estimator.check(likelihood, quantity)

    def svgp_stage(name="svgp", est=estimator):
        return Stage(name, O.ELBO(model, likelihood, est, n, beta), all_params)

    if m.name == "svgp":
        return Method("svgp", model, likelihood, [svgp_stage()], estimator)

    def freeze_and_reset():
        """Fixed variant (DLM paper, Sec. 6 / App. D): keep SVGP's kernel, likelihood and inducing
        inputs fixed and learn q(u) from scratch."""
        for p in model.hyperparameters() + list(likelihood.parameters()):
            p.requires_grad_(False)
        model.reset_variational()

    fixed = m.variant == "fixed"
    # The SVGP stage of a fixed variant is standard SVGP with beta=1; it uses the configured
    # estimator when that estimator can compute E_q[log p], else the closed form/quadrature.
    pre = []
    if fixed:
        pre_est = estimator if _supports(estimator, likelihood, "expected_log_prob") else AutoEstimator()
        pre = [Stage("svgp", O.ELBO(model, likelihood, pre_est, n, 1.0), all_params)]

    if m.name == "dlm":
        obj = O.DLM(model, likelihood, estimator, n, beta)
        params = model.variational_parameters() if fixed else all_params
        stage = Stage("dlm", obj, params, prepare=freeze_and_reset if fixed else None)
        return Method("dlm", model, likelihood, pre + [stage], estimator)

    # square-loss DLM
    def finalize(xt, yt):
        """Complete sq-DLM into a predictive distribution: q(u) = N(m, K_uu), ML noise."""
        model.q_u.chol_variational_covar.data.copy_(torch.eye(Z.shape[0], dtype=dtype, device=device))
        with torch.no_grad():
            mu, var = model.marginals(xt)
        lower = 1.01 * float(likelihood.gp.noise_covar.raw_noise_constraint.lower_bound)
        likelihood.gp.noise = O.fit_predictive_noise(mu, var, yt, lower=lower)

    if fixed:
        def solve(xt, yt):
            model.q_u.variational_mean.data.copy_(O.optimal_whitened_mean(model, xt, yt, beta))

        stage = Stage("sq_dlm", prepare=freeze_and_reset, solve=solve)
    else:
        obj = O.SquareLossDLM(model, likelihood, estimator, n, beta)
        params = [model.q_u.variational_mean] + model.hyperparameters()
        stage = Stage("sq_dlm", obj, params)
    return Method("sq_dlm", model, likelihood, pre + [stage], estimator, finalize=finalize)


def _supports(estimator, likelihood, quantity) -> bool:
    try:
        estimator.check(likelihood, quantity)
        return not getattr(estimator, "log_marginal_only", False)
    except UnsupportedCombination:
        return False


def trainer_settings(cfg, n_train: int, task: str):
    from .training import ConvergenceRule, TrainerSettings, default_lr

    t = cfg.trainer
    window = t.stop_window if t.stop_window is not None else (50 if task == "regression" else 20)
    return TrainerSettings(
        max_iters=t.max_iters,
        lr=t.lr if t.lr is not None else default_lr(t.batch_size, n_train),
        batch_size=t.batch_size,
        stop=ConvergenceRule(window=window, tol=t.stop_tol),
        check_every=t.check_every,
        eval_every=t.eval_every,
        progress=bool(cfg.progress),
    )


def check_sizes(cfg, n_train: int) -> None:
    m = cfg.model
    if "num_inducing" in m and m.num_inducing > n_train:
        raise param_error("num_inducing", f"model={m.name}", f"an integer in [1, n_train={n_train}]", m.num_inducing)


__all__ = [
    "Method",
    "Stage",
    "build_estimator",
    "build_kernel",
    "build_likelihood",
    "build_method",
    "check_sizes",
    "load_data",
    "trainer_settings",
    "validate_config",
]
