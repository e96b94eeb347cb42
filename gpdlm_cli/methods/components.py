"""Specs -> the components families share: likelihood, estimator, kernel, mean, inducing inputs.

Each takes one typed spec (``schema.LikelihoodSpec``, ``EstimatorSpec``, ``KernelSpec``, the
family's model spec, the ``RunSpec``); library modules below them take plain arguments. The kernel
builder is ``methods.kernels`` (re-exported here as ``build_kernel``).
"""

from __future__ import annotations

import torch

from ..exceptions import param_error
from ..schema import EstimatorSpec, LikelihoodSpec, as_spec
from ..validation import is_int, is_number
from .kernels import STATIONARY_KERNELS, build_base_kernel, build_kernel


def build_likelihood(spec, targets=None):
    """The likelihood ``spec`` (a ``LikelihoodSpec``) names; with ``targets``, also checked to suit
    them (DataError if not)."""
    from ..likelihoods import LIKELIHOODS

    spec = as_spec(spec, LikelihoodSpec, "likelihood")
    likelihood = LIKELIHOODS[spec.name](**spec.options)
    if targets is not None:
        likelihood.validate_targets(targets)
    return likelihood


def estimator_registry() -> dict:
    from .. import estimators as E

    classes = (
        E.AutoEstimator,
        E.ExactEstimator,
        E.QuadratureEstimator,
        E.BMCEstimator,
        E.SmoothBMCEstimator,
        E.UPSEstimator,
    )
    return {cls.name: cls for cls in classes}


def build_estimator(spec):
    """The log-expectation estimator ``spec`` (an ``EstimatorSpec``) names, with its options (checked
    against the estimator's schema, ``schema.options``, when the spec was parsed)."""
    spec = as_spec(spec, EstimatorSpec, "estimator")
    reg = estimator_registry()
    cls = reg.get(spec.name)
    if cls is None:
        raise param_error("name", "estimator", f"one of {sorted(reg)}", spec.name)
    return cls(**spec.options)


def supports(estimator, likelihood, quantity: str) -> bool:
    """Whether ``estimator`` can compute ``quantity`` for ``likelihood`` (and is not log-marginal-only)."""
    from ..exceptions import UnsupportedCombination

    try:
        estimator.check(likelihood, quantity)
        return not getattr(estimator, "log_marginal_only", False)
    except UnsupportedCombination:
        return False


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


_KMEANS_SETTINGS = {"n_init": 1, "max_iter": 100}


def _kmeans_centres(xs, M: int, seed: int):
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=M, random_state=seed, **_KMEANS_SETTINGS).fit(xs).cluster_centers_


#: above this many training rows, k-means runs on KMEANS_SUBSET_ROWS of them drawn at random (seeded):
#: Lloyd's k-means on the 1.9M airline rows at M = 200 took ~8 minutes on 2 cores; no set below the
#: threshold (all but the real airline data) is affected
KMEANS_SUBSET_ABOVE = 500_000
KMEANS_SUBSET_ROWS = 200_000
_KMEANS_SUBSET_STREAM = 7919  # offset of the subset's seed from the run's


def initial_inducing_points(x: torch.Tensor, M: int, how: str, seed: int) -> torch.Tensor:
    """M rows of x at random, or the k-means centres of x (scikit-learn, seeded); above ``KMEANS_SUBSET_ABOVE`` rows the k-means centres of a
    seeded random subset of ``KMEANS_SUBSET_ROWS`` rows."""
    n = x.shape[0]
    if M > n:
        raise param_error("num_inducing", "model", f"an integer in [1, n_train={n}]", M)
    rng = torch.Generator().manual_seed(seed)
    if how == "random":
        idx = torch.randperm(n, generator=rng)[:M]
        return x[idx.to(x.device)].clone()
    xs = x.detach().cpu().numpy()
    if n > KMEANS_SUBSET_ABOVE:
        import numpy as np

        pick = np.sort(np.random.default_rng(seed + _KMEANS_SUBSET_STREAM).choice(n, KMEANS_SUBSET_ROWS, replace=False))
        xs = xs[pick]
    centres = _kmeans_centres(xs, M, seed)
    return torch.as_tensor(centres, dtype=x.dtype, device=x.device)


def check_inducing(m, n_train: int | None = None) -> None:
    """The inducing-point keys shared by sparse families (``num_inducing``, ``inducing_init``)."""
    if not is_int(m.num_inducing) or m.num_inducing < 1:
        raise param_error("num_inducing", f"model={m.name}", "an integer >= 1", m.num_inducing)
    if n_train is not None and m.num_inducing > n_train:
        raise param_error("num_inducing", f"model={m.name}", f"an integer in [1, n_train={n_train}]", m.num_inducing)
    if m.inducing_init not in ("kmeans", "random"):
        raise param_error("inducing_init", f"model={m.name}", "'kmeans' or 'random'", m.inducing_init)


def gaussian_only(spec, what: str = "") -> None:
    """Refuse a likelihood other than Gaussian for a regression-only model (``spec``: the ``RunSpec``)."""
    from ..exceptions import UnsupportedCombination

    if spec.likelihood.name != "gaussian":
        raise UnsupportedCombination(
            what
            or f"model={spec.model.name} is defined for likelihood=gaussian only; for "
            f"likelihood={spec.likelihood.name} use model=svgp, dlm"
        )


def no_feature_map(spec, kernels: tuple[str, ...] | None = STATIONARY_KERNELS) -> None:
    """Refuse ``features=`` other than none (and, with ``kernels``, a kernel outside them) for a
    model that takes its inputs as they are (``spec``: the ``RunSpec``)."""
    from ..exceptions import UnsupportedCombination

    features = spec.features
    if features is not None and features.name != "none":
        raise UnsupportedCombination(
            f"model={spec.model.name} takes no input feature map (features={features.name}); feature maps apply to "
            f"model=svgp, dlm, sq_dlm, scgd, minimax, bsgd"
        )
    if kernels is not None and spec.kernel.name not in kernels:
        raise UnsupportedCombination(
            f"model={spec.model.name} needs a stationary kernel (kernel={', '.join(kernels)}); got kernel={spec.kernel.name}"
        )


__all__ = [
    "build_base_kernel",
    "build_estimator",
    "build_kernel",
    "build_likelihood",
    "build_mean",
    "STATIONARY_KERNELS",
    "check_inducing",
    "estimator_registry",
    "gaussian_only",
    "initial_inducing_points",
    "is_int",
    "is_number",
    "no_feature_map",
    "supports",
]
