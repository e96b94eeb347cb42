"""Objectives to minimise, one module each, re-exported here."""

from .base import Objective, SparseVariationalObjective
from .dlm import DLM
from .elbo import ELBO
from .marginal_likelihood import CollapsedBound, ExactMarginalLikelihood
from .rkhs import SCGD, BatchNLML, Minimax, NearestNeighbourBatches, batch_nlml, dxd_objective, feature_nlml
from .sq_dlm import SquareLossDLM, fit_predictive_noise, optimal_whitened_mean

__all__ = [
    "SCGD",
    "BatchNLML",
    "DLM",
    "ELBO",
    "CollapsedBound",
    "ExactMarginalLikelihood",
    "Minimax",
    "NearestNeighbourBatches",
    "Objective",
    "SparseVariationalObjective",
    "SquareLossDLM",
    "batch_nlml",
    "dxd_objective",
    "feature_nlml",
    "fit_predictive_noise",
    "optimal_whitened_mean",
]
