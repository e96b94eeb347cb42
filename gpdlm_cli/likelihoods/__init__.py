"""Likelihoods p(y|f): one module per family, re-exported here."""

from .base import Likelihood
from .bernoulli import LogitLikelihood, ProbitLikelihood
from .gaussian import GaussianLikelihood
from .poisson import PoissonExpLikelihood, PoissonSoftplusLikelihood

LIKELIHOODS = {
    cls.name: cls
    for cls in (
        GaussianLikelihood,
        ProbitLikelihood,
        LogitLikelihood,
        PoissonExpLikelihood,
        PoissonSoftplusLikelihood,
    )
}

__all__ = [
    "LIKELIHOODS",
    "GaussianLikelihood",
    "Likelihood",
    "LogitLikelihood",
    "PoissonExpLikelihood",
    "PoissonSoftplusLikelihood",
    "ProbitLikelihood",
]
