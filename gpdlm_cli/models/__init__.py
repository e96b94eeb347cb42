"""GP models: each exposes ``marginals(x) -> (mu, var)`` of the latent f, which metrics use."""

from .collapsed import CollapsedSparseGP
from .exact import ExactGP
from .sparse_variational import SparseVariationalGP

__all__ = ["CollapsedSparseGP", "ExactGP", "SparseVariationalGP"]
