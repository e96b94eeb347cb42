"""Objectives of GPs with recurrent kernels (GP-LSTM paper, Sec. 4.1, App. B-C) and their network
baselines. All are per-datum: the NLML is divided by N.

* :class:`DeepKernelNLML` -- full batch, joint in W and theta (Wilson et al. 2016a's procedure):
  L(W, theta) = NLML(phi_W(X), y; theta) / N, NLML = 1/2 y^T K^-1 y + 1/2 log|K| + N/2 log 2 pi
  (Eq. 8 with the usual 1/2), K = K_theta(H) + s^2 I, H = phi_W(X).
* :class:`FixedEmbeddingNLML` -- theta only, with H fixed (the theta steps of Algorithms 1/2 and the
  final theta steps).
* :class:`CotangentSurrogate` -- the unbiased minibatch W-step of Algorithm 2 (the form the
  authors' code runs). At a refresh, with theta, K and H fixed, the cotangents
  c_i = dL/dh_i = (1/N) dNLML/dh_i are computed for every training window (one autograd call;
  by symmetry this is Eq. 10's factorisation c_i = -(1/N) sum_j A_ij d_1 k(h_i, h_j),
  A = K^-1 y y^T K^-1 - K^-1). A minibatch B then descends
      g_B(W) = (N / N_B) sum_{i in B} <c_i, h_i(W)>,
  whose gradient (N / N_B) sum_{i in B} J_i^T c_i has expectation sum_i J_i^T c_i = dL/dW at the
  refresh point; summed over one partition of the data with weights N_B / N it equals dL/dW
  exactly. With dropout, the refresh draws one mask set M per window and both the cotangents
  (at h = phi_W(X; M)) and the batch Jacobians (rows of M) use it, so the statements above hold for
  L(W; M) = NLML(phi_W(X; M))/N, and over refreshes for the dropout objective E_M[L(W; M)] (a fresh
  mask per batch step, with cotangents taken without dropout, was 9% off dL/dW; issue 19). The paper's
  printed estimator (Eq. C.15: the gradient of the batch's sub-matrix of K)
  is *not* unbiased: its mean is ((N_B - 1)/(N - 1)) dL/dW for a stationary kernel (Lemma 1's
  proof counts each pair (i, j) with probability N_B/N instead of N_B(N_B - 1)/(N(N - 1))); see
  tests/recurrent/test_cotangent.py. Reported value: the NLML/N at the last refresh (the
  surrogate's own value is meaningless), gradient: g_B's.
* :class:`SquaredError` -- the baselines' MSE (mean over the batch and the outputs).
"""

from __future__ import annotations

import torch

from .base import Objective


def _targets(y: torch.Tensor) -> torch.Tensor:
    return y[:, None] if y.ndim == 1 else y


class DeepKernelNLML(Objective):
    """NLML(phi_W(X), y) / N on the full batch; dropout on if ``dropout`` (a fresh mask per call)."""

    name = "nlml"

    def __init__(self, model, num_data: int, *, dropout: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        self.model, self.num_data, self.dropout, self.generator = model, num_data, dropout, generator

    def forward(self, x, y):
        h = self.model.embed(x, train=self.dropout, generator=self.generator)
        self.model.fit_grid(h)  # KISS: the grid follows the full training embedding
        return self.model.nlml(h, y) / self.num_data


class FixedEmbeddingNLML(Objective):
    """NLML(H, y; theta) / N with H fixed (set by :meth:`set_embedding`); trains theta only."""

    name = "theta"

    def __init__(self, model, num_data: int):
        super().__init__()
        self.model, self.num_data = model, num_data
        self.h: torch.Tensor | None = None  # the fixed embedding (set_embedding)

    def set_embedding(self, h: torch.Tensor) -> None:
        self.h = h.detach()
        self.model.fit_grid(self.h)

    def forward(self, x, y):
        return self.model.nlml(self.h, y) / self.num_data


class CotangentSurrogate(Objective):
    """Algorithm 2's minibatch objective (N / N_B) sum_{i in B} <c_i, h_i(W; M_i)>, see the module doc;
    M_i: window i's dropout masks of the last refresh (none without dropout)."""

    name = "cotangent"

    def __init__(self, model, num_data: int):
        super().__init__()
        self.model, self.num_data = model, num_data
        self.cotangents: torch.Tensor | None = None  # (N, E): dL/dh_i at the last refresh
        self.value: torch.Tensor | None = None  # NLML / N at the last refresh
        self.masks: dict | None = None  # the refresh's dropout masks (one set per training window), or None

    @torch.no_grad()
    def set_cotangents(self, c: torch.Tensor, value: torch.Tensor, masks: dict | None = None) -> None:
        self.cotangents, self.value, self.masks = c.detach(), value.detach(), masks

    def forward(self, x, y, index=None):
        c = self.cotangents if index is None else self.cotangents[index]
        masks = None if self.masks is None else self.model.network.select_masks(self.masks, index)
        h = self.model.embed(x, masks=masks)
        g = (h * c).sum() * (self.num_data / x.shape[0])
        return g - g.detach() + self.value


def refresh_cotangents(model, h: torch.Tensor, y: torch.Tensor, num_data: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, L): c_i = dL/dh_i for every row of ``h`` and L = NLML(h)/N, at the current theta."""
    leaf = h.detach().requires_grad_(True)
    value = model.nlml(leaf, y) / num_data
    (c,) = torch.autograd.grad(value, leaf)
    return c, value.detach()


class SquaredError(Objective):
    """mean over the batch and the outputs of (f(x_i) - y_i)^2, dropout on if ``dropout``."""

    name = "mse"

    def __init__(self, predict, *, dropout: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        self.predict, self.dropout, self.generator = predict, dropout, generator

    def forward(self, x, y):
        f = self.predict(x, train=self.dropout, generator=self.generator)
        return ((f.to(y.dtype) - _targets(y)) ** 2).mean()


__all__ = ["CotangentSurrogate", "DeepKernelNLML", "FixedEmbeddingNLML", "SquaredError", "refresh_cotangents"]
