"""The RKHS family: unbiased stochastic marginal-likelihood training on a finite-dimensional RKHS
(Shoham & Avron; shared/notes/rkhs-spec.md) -- ``scgd``, ``minimax`` and the biased baseline ``bsgd``.

The kernel is k(x, x') = phi(x)^T phi(x') with phi = kernel map (``kernel=linear|rff``) of the
input map (``features=none|nn``), d = phi's dimension. The model is the exact GP on phi as
Bayesian linear regression (``models.BayesianLinearGP``); the three methods differ only in the
stochastic objective (``objectives.rkhs``). Prediction and the monitor ``train_nlml`` use the
closed form at the current parameters (w* = F^-1 Z^T y, one streamed O(n d^2) pass per
evaluation, never per step).

``model=bsgd`` also takes an exact kernel (``kernel=rbf`` or a Matern, ``kernel=matern32``) on the input
map, as the paper ran BSGD in its Gaussian-kernel tables (Sec. 5, Tables 3 and 5): the batch covariance is then
k(g(x_S), g(x_S)), and ``train_nlml`` and prediction come from the dense full-data posterior
(``models.ExactKernelGP``, O(n^3) per evaluation) on every training row up to
``model.posterior_max_rows``, on a fixed random subset of that many rows above it (subset of data:
tag ``gpdlm.train_nlml_kernel``, metric ``posterior_rows``).

Parameter groups (``trainer.lr_scale.<group>``): ``features`` (the network), ``kernel`` (RFF
lengthscale and magnitude; linear outputscale if learned), ``likelihood`` (the noise), and
``weights`` (the auxiliary w: scgd, minimax), ``constraint`` (A) and ``dual`` (B: minimax).

Metrics: the monitor ``train_nlml`` (full-data per-point NLML of the finite kernel, with
(1/2) log 2 pi and + log s_y for standardised targets: comparable to the paper's Tables 2-3;
``trainer.keep_best=train_nlml`` selects the iterate by it), ``ftilde_gap`` (scgd:
||F~ - F|| / ||F||), ``penalty_gap`` and ``mu`` (minimax: ||A - F|| / ||F||), and at the end
``train_nlml_exact_kernel`` (kernel=rff, n_train <= ``model.exact_nlml_max_n``: the NLML of the
Gaussian kernel the features approximate), ``mu_exact_bound``, ``mu_local_threshold`` and
``penalty_exact`` (minimax, at the final parameters: the sufficient bound, the necessary threshold
||F|| ||F^-1||, and 1 if mu >= the bound), the learned hyperparameters, Cholesky jitter counts and
``peak_memory_mb``.

The run tag ``gpdlm.rkhs_setting`` names the variant from its settings: SCGD's b_t schedule (biased
when constant, e.g. the paper's 0.9) and MINIMAX's penalty (exact, or the paper's inexact mu = 1). A
MINIMAX run that ends with mu below ||F|| ||F^-1|| prints a warning with ``penalty_gap``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..exceptions import UnsupportedCombination, param_error
from ..schema import ModelSpec, RunSpec, as_run_spec
from ..schema.keys import choice, flag, integer, real, text
from ..validation import number_in
from . import components as C
from . import feature_maps as FM
from .base import Method, Stage

MODELS = ("scgd", "minimax", "bsgd")
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (sweep/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = True
TAKES_FEATURES = True  # declarations: base.DECLARATIONS (the others keep their defaults)


_INF = math.inf


@dataclass(frozen=True)
class Spec(ModelSpec):
    """``model=scgd|minimax|bsgd``'s keys (a key is checked where the model's YAML sets it)."""

    best_by: str = text("train_nlml", help="the study presets' trainer.keep_best")
    exact_nlml_max_n: int = integer(
        3000, lo=0, help="kernel=rff: also log the exact Gaussian-kernel NLML when n_train <= this; 0 = never"
    )
    block_rows: int = integer(4096, lo=1, help="rows per block of the streamed full-data pass")
    b0: float = real(1.0, lo=0, lo_open=True, hi=1, help="scgd: b_0 in (0, 1]")
    b_decay: float = real(
        0.5, lo=0, hi=_INF, hi_open=True, allowed="a finite float >= 0", help="scgd: b_t ~ t^-b_decay"
    )
    b_min: float = real(0.0, lo=0, help="scgd: floor of b_t, in [0, b0]")
    mu: float = real(
        1.0,
        lo=0,
        lo_open=True,
        hi=_INF,
        hi_open=True,
        allowed="a finite float in (0, inf)",
        help="minimax: initial penalty weight",
    )
    exact_penalty: bool = flag(True, help="minimax: raise mu to the sufficient bound")
    mu_growth: float = real(
        1.0, lo=1, hi=_INF, hi_open=True, allowed="a finite float >= 1", help="minimax: mu <- min(mu_max, mu_growth mu)"
    )
    mu_every_epochs: int = integer(1, lo=1, help="minimax: epochs between mu updates")
    mu_max: float = real(1e12, lo=0, help="minimax: cap of mu, >= mu")
    precondition: bool = flag(True, help="minimax: A = C sym(M) C^T with C = chol(F(theta_0))")
    w_max: float | None = real(
        None,
        lo=0,
        lo_open=True,
        null=True,
        allowed="a float in (0, inf] or null",
        help="minimax: box |w_j| <= w_max; null = none",
    )
    batching: str = choice(
        "uniform", ("uniform", "nearest"), allowed="'uniform' or 'nearest'", help="bsgd: uniform | nearest"
    )
    posterior_max_rows: int = integer(20000, lo=1, help="bsgd, exact kernels: the dense posterior's row cap")
    posterior_memory_gb: float | None = real(
        None,
        lo=0,
        lo_open=True,
        hi=_INF,
        hi_open=True,
        null=True,
        allowed="a finite float > 0 (GB) or null",
        help="memory budget of the dense n x n evaluations; null = 80% of the machine's (the GPU's on CUDA)",
    )


def validate(spec: RunSpec) -> None:
    """The family's combinations (no data needed; the keys' ranges: ``Spec``)."""
    spec = as_run_spec(spec, Spec)
    m = spec.model
    C.gaussian_only(spec, f"model={m.name} maximises the Gaussian marginal likelihood: use likelihood=gaussian")
    kname = spec.kernel.name
    owner = f"model={m.name}"
    if m.name == "bsgd" and kname in C.STATIONARY_KERNELS:  # the exact kernel on g(x): the paper's Tables 3 and 5
        pass
    elif kname not in FM.FINITE_KERNELS:
        exact = " (model=bsgd also takes an exact kernel: rbf or a Matern)" if m.name != "bsgd" else ""
        raise UnsupportedCombination(
            f"model={m.name} needs a finite feature map, kernel=linear or kernel=rff (kernel={kname} has none){exact}; "
            f"e.g. features=nn kernel=rff kernel.num_features=1000"
        )
    else:
        FM.check_finite_kernel(spec.kernel)
    if m.name == "scgd" and not number_in(m.b_min, 0, m.b0):
        raise param_error("b_min", owner, f"a float in [0, b0={m.b0}]", m.b_min)
    if m.name == "minimax" and not number_in(m.mu_max, m.mu, math.inf):
        raise param_error("mu_max", owner, f"a float >= mu={m.mu}", m.mu_max)


#: ``sweep.batched=true`` (``sweep.batched_rkhs``): the family trains a batch with its members' own loops in
#: lockstep, and a batch's members may differ in their seed, learning rate and split mask as well as beta
BATCHED_TRAINER = "stacked"
BATCHED_FREE_KEYS = ("trainer.lr", "dataset.split.mask")


def batched_scope(spec: RunSpec) -> str | None:
    """``sweep.batched``: why this config has no batched form, or None. Batched (``sweep.batched_rkhs``):
    scgd, minimax and bsgd with uniform batches on a finite feature map (kernel=linear|rff, any input map),
    float64, AdaDelta (the paper's optimiser) with a constant learning rate per member, any batch size,
    stopping rule, evaluation schedule and keep_best. Not batched: BSGD on an exact kernel (its dense
    n x n evaluation dominates and does not stack) or on nearest-neighbour batches (a host-side tree query
    per step), other optimisers and schedules, the fast protocol (a per-member line search)."""
    spec = as_run_spec(spec, Spec)
    m, t = spec.model, spec.trainer
    if exact_kernel(spec):
        return f"model=bsgd kernel={spec.kernel.name}: the exact-kernel posterior is not batched (linear|rff are)"
    if spec.kernel.name not in FM.FINITE_KERNELS:
        return f"kernel={spec.kernel.name} is not batched (kernel=linear|rff are)"
    if m.name == "bsgd" and m.batching != "uniform":
        return "model.batching=nearest is not batched (uniform batches are)"
    if str(spec.keys.dtype) != "float64":
        return f"dtype={spec.keys.dtype} is not batched for the RKHS family (float64 only)"
    if t.protocol != "paper":
        return f"trainer.protocol={t.protocol} is not batched for the RKHS family (paper only)"
    if t.optimizer != "adadelta":
        return f"trainer.optimizer={t.optimizer} is not batched for the RKHS family (adadelta only)"
    if t.schedule != "constant":
        return f"trainer.schedule={t.schedule} is not batched (constant only)"
    return None


#: largest full batch model=bsgd factorises (its b x b Cholesky on b = n rows: 20k rows is 3.2 GB in float64)
BSGD_MAX_FULL_BATCH = 20000


def memory_budget_bytes(setting, device_type: str) -> int:
    """``model.posterior_memory_gb`` in bytes; null: 80% of this machine's memory (the GPU's on CUDA)."""
    if setting is not None:
        return int(float(setting) * 2**30)
    if device_type == "cuda":
        return int(0.8 * torch.cuda.get_device_properties(0).total_memory)
    import os

    return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_posterior_memory(spec: RunSpec, n_train: int) -> None:
    """Refuse, before training, a run whose dense n x n evaluation cannot fit ``model.posterior_memory_gb``:
    BSGD on an exact kernel (its posterior on min(n_train, posterior_max_rows) rows at every evaluation) and
    the RFF arms' ``train_nlml_exact_kernel`` (n_train <= exact_nlml_max_n, once at the end)."""
    from ..models.bayesian_linear import posterior_bytes

    spec = as_run_spec(spec, Spec)
    m = spec.model
    if exact_kernel(spec):
        rows, key = min(n_train, int(m.posterior_max_rows)), "posterior_max_rows"
    elif spec.kernel.name == "rff" and 0 < n_train <= int(m.exact_nlml_max_n):
        rows, key = n_train, "exact_nlml_max_n"
    else:
        return
    name = str(spec.keys.device)
    device_type = "cuda" if name.startswith("cuda") or (name == "auto" and torch.cuda.is_available()) else "cpu"
    budget = memory_budget_bytes(m.posterior_memory_gb, device_type)
    need = posterior_bytes(rows, device_type)
    if need > budget:
        per_row = posterior_bytes(1, device_type) - posterior_bytes(0, device_type)
        fit = max(0, int(math.sqrt(max(0, budget - posterior_bytes(0, device_type)) / per_row)))
        what = "posterior" if key == "posterior_max_rows" else "exact-kernel NLML (train_nlml_exact_kernel)"
        raise UnsupportedCombination(
            f"model={m.name} kernel={spec.kernel.name}: the dense {what} on {rows} training rows needs "
            f"{need / 2**30:.1f} GB, over the memory budget of {budget / 2**30:.1f} GB (model.posterior_memory_gb); "
            f"set model.{key}={fit} or less, or raise model.posterior_memory_gb"
        )


def check_sizes(spec: RunSpec, n_train: int) -> None:
    spec = as_run_spec(spec, Spec)
    check_posterior_memory(spec, n_train)
    b = spec.trainer.batch_size
    if spec.model.name == "bsgd" and (b is None or b >= n_train) and n_train > BSGD_MAX_FULL_BATCH:
        raise UnsupportedCombination(
            f"model=bsgd on the full batch is the exact {n_train} x {n_train} GP; set trainer.batch_size "
            f"(or use model=scgd, whose full-data algebra is d x d)"
        )


def exact_kernel(spec: RunSpec) -> bool:
    """Whether the run is BSGD on an exact kernel (``kernel=rbf`` or a Matern, ``kernel=matern32``) instead of
    a finite feature map."""
    return spec.model.name == "bsgd" and spec.kernel.name not in FM.FINITE_KERNELS


def setting_label(m, kernel_name: str | None = None) -> str:
    """What the run's settings make of the method (the tag ``gpdlm.rkhs_setting``); ``kernel_name``
    marks BSGD on an exact kernel (its batches are then k(g(x_S), g(x_S)), not Z_S Z_S^T)."""
    if m.name == "scgd":
        if m.b_decay == 0 or m.b_min > 0:
            paper = " (the paper)" if m.b_decay == 0 and m.b0 == 0.9 and m.b_min == 0 else ""
            return f"scgd biased{paper}: b_t -> {m.b_min if m.b_decay > 0 else m.b0:g} constant"
        return f"scgd unbiased in the limit: b_t = {m.b0:g} (t+1)^-{m.b_decay:g}"
    if m.name == "minimax":
        if m.exact_penalty:
            return "minimax exact penalty: mu >= ||F|| ||c|| + L at every mu update"
        paper = " (the paper)" if m.mu == 1 and m.mu_growth == 1 else ""
        grow = f" x {m.mu_growth:g} every {m.mu_every_epochs} epochs up to {m.mu_max:g}" if m.mu_growth != 1 else ""
        return f"minimax inexact penalty{paper}: mu = {m.mu:g}{grow}"
    exact = f" (exact {kernel_name} kernel)" if kernel_name is not None and kernel_name not in FM.FINITE_KERNELS else ""
    return f"bsgd biased for b < n: the exact b x b NLML of each {m.batching} batch{exact}"


class PenaltyCheck:
    """A stage hook: at the end of a MINIMAX stage (after keep_best's restore), warn when mu is below
    ||F|| ||F^-1|| of the final parameters, the threshold an exact penalty needs (when lambda_min(F) >
    s2): the run then trained a penalised objective whose saddle is not the NLML's."""

    def __init__(self, objective):
        self.objective = objective

    def checkpoint_state(self) -> dict:  # stateless
        return {}

    def load_checkpoint_state(self, state: dict) -> None:
        pass

    def stage_end(self, result) -> None:
        import sys

        threshold = self.objective.local_threshold()
        mu = float(self.objective.mu)
        if mu < threshold:
            print(
                f"gpdlm: warning: model=minimax ended with mu = {mu:g}, below ||F|| ||F^-1|| = "
                f"{threshold:.4g} at the final parameters (penalty_gap = {self.objective.penalty_gap():.3g}): an "
                f"inexact penalty, whose saddle is not the marginal likelihood's (model.exact_penalty=true raises "
                f"mu to a sufficient bound; docs/rkhs.md)",
                file=sys.stderr,
            )


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: allocated tensor memory on CUDA, else the resident-set
    high-water mark (Linux ru_maxrss; includes the interpreter and the data)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: offset of the subset-of-data generator's seed from the run's seed (model.posterior_max_rows)
_SUBSET_STREAM = 32452843


def build(spec: RunSpec, data, task: str) -> Method:
    spec = as_run_spec(spec, Spec)
    if exact_kernel(spec):
        return build_exact_kernel(spec, data, task)
    m = spec.model
    model, groups = _finite_model(spec, data)
    stage, objective = _finite_stage(spec, model, groups, data.x_train)
    # train_nlml is in the target's units: + log s_y (y was divided by s_y).
    log_y_std = math.log(float(data.y_std))
    monitors = {"train_nlml": lambda: model.nlml() + log_y_std}
    if m.name == "scgd":
        monitors["ftilde_gap"] = objective.tracking_gap
    elif m.name == "minimax":
        monitors["penalty_gap"] = objective.penalty_gap
        monitors["mu"] = lambda: float(objective.mu)
    tags = {
        "gpdlm.train_nlml_kernel": f"{spec.kernel.name} (d={model.num_features})",
        "gpdlm.features": spec.features.name,
        "gpdlm.rkhs_setting": setting_label(m, spec.kernel.name),
    }
    return Method(
        m.name,
        model,
        model.likelihood,
        [stage],
        monitors=monitors,
        diagnostics=_finite_diagnostics(spec, model, objective, log_y_std),
        tags=tags,
        default_keep_best="train_nlml",
    )


def _finite_model(spec: RunSpec, data):
    """The finite-feature GP (``BayesianLinearGP``) of the run on its training rows, and its parameter groups
    (features, kernel, likelihood)."""
    from ..models.bayesian_linear import BayesianLinearGP

    m = spec.model
    x, y = data.x_train, data.y_train
    n, D = x.shape
    device, dtype = x.device, x.dtype
    likelihood = C.build_likelihood(spec.likelihood, y)
    input_map = FM.build_input_map(spec.features, D, spec.seed).to(device=device, dtype=dtype)
    inputs = None
    if FM.uses_features(spec):  # kernel.normaliser=data: the network's outputs on the training inputs
        with torch.no_grad():
            inputs = torch.cat([input_map(x[i : i + m.block_rows]) for i in range(0, n, m.block_rows)])
    kernel_map = FM.build_kernel_map(spec.kernel, input_map.out_dim, spec.seed, inputs).to(device=device, dtype=dtype)
    likelihood = likelihood.to(device=device, dtype=dtype)
    model = BayesianLinearGP(input_map, kernel_map, likelihood, x, y, block_rows=m.block_rows)
    groups = {
        "features": list(input_map.parameters()),
        "kernel": list(kernel_map.parameters()),
        "likelihood": list(likelihood.parameters()),
    }
    return model, groups


def _finite_stage(spec: RunSpec, model, groups: dict, x: torch.Tensor):
    """The method's one stage (scgd, minimax or bsgd on the finite map) and its objective; adds the
    objective's own groups (weights; constraint and dual) to ``groups``."""
    from ..objectives import SCGD, BatchNLML, Minimax, NearestNeighbourBatches

    m, n = spec.model, x.shape[0]
    if m.name == "scgd":
        objective = SCGD(model, n, b0=m.b0, b_decay=m.b_decay, b_min=m.b_min)
        groups["weights"] = [objective.w]
        return Stage("scgd", objective, groups, prepare=objective.initialise, hooks=[objective]), objective
    if m.name == "minimax":
        objective = Minimax(
            model,
            n,
            mu=m.mu,
            mu_growth=m.mu_growth,
            mu_every_epochs=m.mu_every_epochs,
            mu_max=m.mu_max,
            precondition=m.precondition,
            seed=int(spec.seed) + 15485863,
            w_max=m.w_max,
            exact=m.exact_penalty,
        )
        groups.update(weights=[objective.w], constraint=[objective.M], dual=[objective.B])
        hooks = [objective, PenaltyCheck(objective)]
        return Stage("minimax", objective, groups, prepare=objective.initialise, hooks=hooks), objective
    nearest = NearestNeighbourBatches(x) if m.batching == "nearest" else None
    objective = BatchNLML(model, nearest)
    return Stage("bsgd", objective, groups, wants_index=nearest is not None), objective


def _finite_diagnostics(spec: RunSpec, model, objective, log_y_std: float):
    """The run's final diagnostics of a finite-feature method (module docstring, "Metrics")."""
    m, n, d = spec.model, model.num_data, model.num_features
    kernel_map, device = model.kernel_map, model.x_train.device

    def diagnostics() -> dict:
        out = {
            "feature_dim": float(d),
            "noise": float(model.noise.detach()),
            "train_nlml_norm": model.nlml(),
            **model.chol_log.summary(),
            "peak_memory_mb": peak_memory_mb(device),
        }
        if hasattr(kernel_map, "lengthscale"):
            out["lengthscale"] = float(kernel_map.lengthscale.detach().mean())
        out["outputscale"] = float(kernel_map.outputscale.detach())
        if spec.kernel.name == "rff" and 0 < n <= m.exact_nlml_max_n:
            out["train_nlml_exact_kernel"] = model.exact_kernel_nlml() + log_y_std
        if m.name == "scgd":
            out["ftilde_gap"] = objective.tracking_gap()
        if m.name == "minimax":
            bound, mu = objective.exact_bound(), float(objective.mu)
            out.update(
                penalty_gap=objective.penalty_gap(),
                mu=mu,
                mu_exact_bound=bound,
                mu_local_threshold=objective.local_threshold(),
                penalty_exact=float(mu >= bound),
                minimax_projections=float(objective.projections),
            )
        return out

    return diagnostics


def build_exact_kernel(spec: RunSpec, data, task: str) -> Method:
    """``model=bsgd`` with an exact kernel (``kernel=rbf`` or a Matern, ``kernel=matern32``) on the input map:
    the paper's Gaussian-kernel BSGD (Sec. 5, Tables 3 and 5). Training is the exact b x b NLML of each batch with
    K_SS = k(g(x_S), g(x_S)); ``train_nlml`` and prediction use the dense full-data posterior
    (``models.ExactKernelGP``, O(n^3) per evaluation), on every training row up to
    ``model.posterior_max_rows`` and on a fixed random subset of that many rows above it."""
    from ..models.exact_kernel import ExactKernelGP
    from ..objectives import BatchNLML, NearestNeighbourBatches

    m = spec.model
    x, y = data.x_train, data.y_train
    n, D = x.shape
    device, dtype = x.device, x.dtype
    likelihood = C.build_likelihood(spec.likelihood, y).to(device=device, dtype=dtype)
    input_map = FM.build_input_map(spec.features, D, spec.seed).to(device=device, dtype=dtype)
    kernel = C.build_kernel(spec.kernel, input_map.out_dim).to(device=device, dtype=torch.float64)
    model = ExactKernelGP(
        input_map,
        kernel,
        likelihood,
        x,
        y,
        block_rows=m.block_rows,
        max_rows=m.posterior_max_rows,
        seed=int(spec.seed) + _SUBSET_STREAM,
    )
    groups = {
        "features": list(input_map.parameters()),
        "kernel": list(kernel.parameters()),
        "likelihood": list(likelihood.parameters()),
    }
    nearest = NearestNeighbourBatches(x) if m.batching == "nearest" else None
    objective = BatchNLML(model, nearest)
    stage = Stage("bsgd", objective, groups, wants_index=nearest is not None)

    log_y_std = math.log(float(data.y_std))
    monitors = {"train_nlml": lambda: model.nlml() + log_y_std}

    def diagnostics() -> dict:
        nlml = model.nlml()
        out = {
            "noise": float(model.noise.detach()),
            "train_nlml_norm": nlml,
            "posterior_rows": float(model.posterior_rows),
            **model.chol_log.summary(),
            "peak_memory_mb": peak_memory_mb(device),
        }
        base = getattr(kernel, "base_kernel", kernel)
        out["lengthscale"] = float(base.lengthscale.detach().mean())
        out["outputscale"] = float(kernel.outputscale.detach())
        if model.exact:  # the same number as train_nlml: the exact kernel's full-data NLML
            out["train_nlml_exact_kernel"] = nlml + log_y_std
        return out

    what = "all" if model.exact else f"a fixed random subset of {model.posterior_rows} of the"
    tags = {
        "gpdlm.train_nlml_kernel": f"{spec.kernel.name} exact ({what} {n} training rows)",
        "gpdlm.features": spec.features.name,
        "gpdlm.rkhs_setting": setting_label(m, spec.kernel.name),
    }
    return Method(
        m.name,
        model,
        likelihood,
        [stage],
        monitors=monitors,
        diagnostics=diagnostics,
        tags=tags,
        default_keep_best="train_nlml",
    )
