"""The collapsed family: SGPR (Titsias, 2009) and FITC (Snelson and Ghahramani, 2006), Gaussian
regression with the optimal q(u) integrated out; full batch, deterministic (L-BFGS works here).

Parameter groups: ``inducing`` (Z), ``kernel`` (kernel and mean-function hyperparameters),
``likelihood`` (the noise).
"""

from __future__ import annotations

from ..exceptions import UnsupportedCombination
from ..schema import InducingModelSpec, RunSpec, as_run_spec
from . import components as C
from .base import Method, Stage

MODELS = ("sgpr", "fitc")
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (sweep/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = True
TAKES_FEATURES = False  # declarations: base.DECLARATIONS (the others keep their defaults)


class Spec(InducingModelSpec):
    """``model=sgpr|fitc``'s keys: the inducing points' (``InducingModelSpec``)."""


def validate(spec: RunSpec) -> None:
    spec = as_run_spec(spec, Spec)
    C.gaussian_only(spec)
    C.no_feature_map(spec, kernels=None)
    if spec.trainer.batch_size is not None:
        raise UnsupportedCombination(f"model={spec.model.name} trains full batch; set trainer.batch_size=null")


def check_sizes(spec: RunSpec, n_train: int) -> None:
    C.check_inducing(as_run_spec(spec, Spec).model, n_train)


def build(spec: RunSpec, data, task: str) -> Method:
    from .. import objectives as O
    from ..models import CollapsedSparseGP

    spec = as_run_spec(spec, Spec)
    m = spec.model
    x, y = data.x_train, data.y_train
    n, D = x.shape
    check_sizes(spec, n)
    likelihood = C.build_likelihood(spec.likelihood, y)
    kernel = C.build_kernel(spec.kernel, D)
    mean = C.build_mean(m.mean, task)
    Z = C.initial_inducing_points(x, m.num_inducing, m.inducing_init, spec.seed)
    model = CollapsedSparseGP(
        Z, kernel, mean, likelihood, kind=m.name, learn_inducing=m.learn_inducing, jitter=m.jitter
    )
    model = model.to(device=x.device, dtype=x.dtype)
    model.set_train_data(x, y)
    lik_params = list(likelihood.parameters())
    taken = {id(p) for p in lik_params} | {id(model.Z)}
    groups = {
        "inducing": [model.Z],
        "kernel": [p for p in model.parameters() if id(p) not in taken],
        "likelihood": lik_params,
    }
    return Method(m.name, model, likelihood, [Stage(m.name, O.CollapsedBound(model, n), groups, lbfgs_ok=True)])
