"""The exact GP (O(N^3) marginal likelihood): a small-data baseline and the correctness anchor of
the sparse methods. Gaussian likelihood, full batch, deterministic.

Parameter groups: ``kernel`` (kernel and mean-function hyperparameters), ``likelihood`` (the noise).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import UnsupportedCombination
from ..schema import ModelSpec, RunSpec, as_run_spec
from ..schema.keys import choice, integer
from . import components as C
from .base import Method, Stage

MODELS = ("exact",)
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (sweep/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = True
INDUCING_POINTS = False
TAKES_FEATURES = False  # declarations: base.DECLARATIONS (the others keep their defaults)


@dataclass(frozen=True)
class Spec(ModelSpec):
    """``model=exact``'s keys."""

    mean: str = choice(
        "auto",
        ("auto", "zero", "constant"),
        allowed="'auto', 'zero' or 'constant'",
        help="auto (zero; constant for classification) | zero | constant",
    )
    max_train: int = integer(5000, lo=1, help="refuse larger training sets (O(N^3); use a sparse model)")


def validate(spec: RunSpec) -> None:
    spec = as_run_spec(spec, Spec)
    C.gaussian_only(spec)
    C.no_feature_map(spec, kernels=None)
    if spec.trainer.batch_size is not None:
        raise UnsupportedCombination("model=exact trains full batch; set trainer.batch_size=null")


def check_sizes(spec: RunSpec, n_train: int) -> None:
    m = as_run_spec(spec, Spec).model
    if n_train > m.max_train:
        raise UnsupportedCombination(
            f"model=exact refuses n_train={n_train} > model.max_train={m.max_train} (O(N^3)); use a sparse model "
            f"or raise model.max_train"
        )


def build(spec: RunSpec, data, task: str) -> Method:
    from .. import objectives as O
    from ..models import ExactGP

    spec = as_run_spec(spec, Spec)
    x, y = data.x_train, data.y_train
    n, D = x.shape
    check_sizes(spec, n)
    likelihood = C.build_likelihood(spec.likelihood, y)
    kernel = C.build_kernel(spec.kernel, D)
    mean = C.build_mean(spec.model.mean, task)
    model = ExactGP(x, y, kernel, mean, likelihood).to(device=x.device, dtype=x.dtype)
    lik_params = list(likelihood.parameters())
    taken = {id(p) for p in lik_params}
    groups = {"kernel": [p for p in model.parameters() if id(p) not in taken], "likelihood": lik_params}
    return Method(
        "exact", model, likelihood, [Stage("exact", O.ExactMarginalLikelihood(model, n), groups, lbfgs_ok=True)]
    )
