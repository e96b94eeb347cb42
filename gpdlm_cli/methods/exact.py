"""The exact GP (O(N^3) marginal likelihood): a small-data baseline and the correctness anchor of
the sparse methods. Gaussian likelihood, full batch, deterministic.

Parameter groups: ``kernel`` (kernel and mean-function hyperparameters), ``likelihood`` (the noise).
"""

from __future__ import annotations

from ..exceptions import UnsupportedCombination, param_error
from . import components as C
from .base import Method, Stage

MODELS = ("exact",)
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (run/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = True
INDUCING_POINTS = False
TAKES_FEATURES = False  # declarations: base.DECLARATIONS (the others keep their defaults)


def validate(cfg) -> None:
    m = cfg.model
    if not C.is_int(m.max_train) or m.max_train < 1:
        raise param_error("max_train", "model=exact", "an integer >= 1", m.max_train)
    C.gaussian_only(cfg)
    C.no_feature_map(cfg, kernels=None)
    if cfg.trainer.batch_size is not None:
        raise UnsupportedCombination("model=exact trains full batch; set trainer.batch_size=null")


def check_sizes(cfg, n_train: int) -> None:
    m = cfg.model
    if n_train > m.max_train:
        raise UnsupportedCombination(
            f"model=exact refuses n_train={n_train} > model.max_train={m.max_train} (O(N^3)); use a sparse model "
            f"or raise model.max_train"
        )


def build(cfg, data, task: str) -> Method:
    from .. import objectives as O
    from ..models import ExactGP

    x, y = data.x_train, data.y_train
    n, D = x.shape
    check_sizes(cfg, n)
    likelihood = C.build_likelihood(cfg.likelihood, y)
    kernel = C.build_kernel(cfg.kernel, D)
    mean = C.build_mean(cfg.model.mean, task)
    model = ExactGP(x, y, kernel, mean, likelihood).to(device=x.device, dtype=x.dtype)
    lik_params = list(likelihood.parameters())
    taken = {id(p) for p in lik_params}
    groups = {"kernel": [p for p in model.parameters() if id(p) not in taken], "likelihood": lik_params}
    return Method(
        "exact", model, likelihood, [Stage("exact", O.ExactMarginalLikelihood(model, n), groups, lbfgs_ok=True)]
    )
