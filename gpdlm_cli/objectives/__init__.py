"""Objectives to minimise, one module each, re-exported here."""

from .base import Objective, SparseVariationalObjective
from .collapsed_elbo import CollapsedELBO
from .dlm import DLM
from .elbo import ELBO
from .marginal_likelihood import CollapsedBound, ExactMarginalLikelihood
from .rkhs import (
    SCGD,
    BatchNLML,
    Minimax,
    NearestNeighbourBatches,
    batch_nlml,
    covariance_nlml,
    dxd_objective,
    feature_nlml,
)
from .sparse_spectrum import CollapsedVSSGPBound, SSGPMarginalLikelihood, SVBSSGPBound
from .sq_dlm import SquareLossDLM, fit_predictive_noise, fit_square_loss_predictive, optimal_whitened_mean

__all__ = [
    "SCGD",
    "BatchNLML",
    "DLM",
    "ELBO",
    "CollapsedBound",
    "CollapsedELBO",
    "ExactMarginalLikelihood",
    "Minimax",
    "NearestNeighbourBatches",
    "Objective",
    "CollapsedVSSGPBound",
    "SSGPMarginalLikelihood",
    "SVBSSGPBound",
    "SparseVariationalObjective",
    "SquareLossDLM",
    "batch_nlml",
    "covariance_nlml",
    "dxd_objective",
    "feature_nlml",
    "fit_predictive_noise",
    "fit_square_loss_predictive",
    "optimal_whitened_mean",
]
