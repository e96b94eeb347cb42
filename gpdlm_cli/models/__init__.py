"""GP models: what has parameters and predicts.

The protocol objectives, estimators and metrics rely on -- a model that has it gets every
objective and estimator for free:

* ``marginals(x) -> (mu, var)``: mean and variance of the latent f at each row of x, as 1-D
  tensors (only the diagonal is ever needed: mu_i, var_i of q(f_i));
* ``kl_divergence() -> tensor``: KL(q || p) of a variational posterior (the ELBO and DLM
  regulariser; sparse variational models, Bayesian linear models on features);
* ``whitened_mean()`` (square-loss DLM only): m~ with m^T K_uu^-1 m = |m~|^2.

So ``ELBO``/``DLM`` need ``marginals`` and ``kl_divergence``; ``metrics.predictive_metrics`` needs
``marginals`` only. A model family whose model can produce marginals -- a Bayesian linear model on
features with weights N(m, S) has mu = phi^T m and var = phi^T S phi -- reuses all of them.
"""

from .collapsed import CollapsedSparseGP
from .exact import ExactGP
from .gamma_family import LocalCells, predict_gamma_family
from .sparse_spectrum import SSGP, VSSGP, CollapsedVSSGP, SpectralPosterior, trig_features
from .sparse_variational import SparseVariationalGP

__all__ = [
    "SSGP",
    "VSSGP",
    "CollapsedSparseGP",
    "CollapsedVSSGP",
    "ExactGP",
    "LocalCells",
    "SparseVariationalGP",
    "SpectralPosterior",
    "predict_gamma_family",
    "trig_features",
]
