"""Ridge regression, a toy family: the recipe's proof (tests/families/test_new_family.py).

w = (X^T X + beta I)^{-1} X^T y on the standardised training rows (``objective.beta`` is the ridge
penalty), the Gaussian noise the mean squared training residual; q(f(x)) = N(x^T w, 0).
"""

from __future__ import annotations

from ..exceptions import UnsupportedCombination
from .base import Method, Stage

MODELS = ("ridge",)
SELECTION_METRIC = "val_rmse"
REFERENCE_BETA = 1.0


def validate(spec) -> None:
    """``spec``: the run's ``schema.RunSpec`` (typed, validated; the family never sees the config)."""
    if spec.likelihood.name != "gaussian":
        raise UnsupportedCombination("model=ridge is defined for likelihood=gaussian only")


def build(spec, data, task: str) -> Method:
    import torch

    from ..likelihoods import GaussianLikelihood

    x = data.x_train
    w = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
    likelihood = GaussianLikelihood().to(device=x.device, dtype=x.dtype)

    class Ridge(torch.nn.Module):
        def marginals(self, xs):
            return xs @ w, torch.zeros(xs.shape[0], dtype=xs.dtype, device=xs.device)

    def solve(xt, yt):
        eye = torch.eye(xt.shape[1], dtype=xt.dtype, device=xt.device)
        w.copy_(torch.linalg.solve(xt.T @ xt + float(spec.objective.beta) * eye, xt.T @ yt))
        likelihood.gp.noise = ((yt - xt @ w) ** 2).mean()

    return Method("ridge", Ridge(), likelihood, [Stage("ridge", solve=solve)])
