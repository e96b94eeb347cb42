"""Objectives to minimise, one module each, re-exported here."""

from .base import Objective, SparseVariationalObjective
from .dlm import DLM
from .elbo import ELBO
from .marginal_likelihood import CollapsedBound, ExactMarginalLikelihood
from .sparse_spectrum import SSGPMarginalLikelihood, SVBSSGPBound
from .sq_dlm import SquareLossDLM, fit_predictive_noise, optimal_whitened_mean

__all__ = [
    "DLM",
    "ELBO",
    "CollapsedBound",
    "ExactMarginalLikelihood",
    "Objective",
    "SSGPMarginalLikelihood",
    "SVBSSGPBound",
    "SparseVariationalObjective",
    "SquareLossDLM",
    "fit_predictive_noise",
    "optimal_whitened_mean",
]
