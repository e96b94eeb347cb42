"""The GP with a finite feature map as Bayesian linear regression (Shoham & Avron, Sec. 2.2).

For k(x, x') = phi(x)^T phi(x') with phi: X -> R^d, Z = (phi(x_1) .. phi(x_n))^T (n x d) and
F = Z^T Z + s2 I_d (d x d), the GP on the training data is y = Z w + eps with w ~ N(0, I_d),
eps ~ N(0, s2 I_n). Everything the exact GP needs has a d x d form (determinant lemma and
Woodbury / the paper's Thm B.1 with the square restored):

    -log N(y | 0, Z Z^T + s2 I_n) = (1/2) [ (y^T y - c^T c) / s2 + log|F| + (n - d) log s2 + n log 2 pi ],
    c = L^-1 Z^T y,  F = L L^T  (Cholesky, never inv/logdet of F),

valid for any n and d (d > n included: (n - d) log s2 is then negative). The posterior of the
weights is N(w*, s2 F^-1) with w* = F^-1 Z^T y, so the predictive latent at x is

    mean = phi(x)^T w*,   var = s2 phi(x)^T F^-1 phi(x) = s2 ||L^-1 phi(x)||^2.

The full-data statistics Z^T Z, Z^T y, y^T y are accumulated over row blocks (60k x 1000 in
float64 would be 480 MB), in O(n d^2) time and O(d^2 + block d) memory. All GP algebra is float64
whatever the run's dtype (the network may run in float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..exceptions import NumericalError

if TYPE_CHECKING:
    from ..features import LinearKernelMap, RandomFourierMap

LOG_2PI = math.log(2 * math.pi)


class CholeskyLog:
    """Counts what the d x d Cholesky factorisations needed: ``jitter_events`` (retries with jitter,
    on CPU) and ``device_failures`` (factorisations that failed on an accelerator, where checking
    would cost a host sync per step: counted on the device, read at the end)."""

    def __init__(self):
        self.jitter_events = 0
        self.device_failures: torch.Tensor | None = None

    def record_device(self, info: torch.Tensor) -> None:
        bad = (info != 0).sum()
        self.device_failures = bad if self.device_failures is None else self.device_failures + bad

    def summary(self) -> dict[str, float]:
        failures = 0 if self.device_failures is None else int(self.device_failures)
        return {"cholesky_jitter_events": float(self.jitter_events), "cholesky_device_failures": float(failures)}


def cholesky_dxd(
    A: torch.Tensor, log: CholeskyLog | None = None, *, jitter: float = 1e-10, max_tries: int = 6, what: str = "F"
) -> torch.Tensor:
    """Lower Cholesky factor of a symmetric d x d matrix.

    On CPU a failed factorisation is retried with jitter * mean(diag) * 10^i added to the diagonal
    (each retry counted in ``log``); on an accelerator nothing is checked (no host sync): failures
    are counted on the device and show up as a NaN loss, which the trainer reports."""
    L, info = torch.linalg.cholesky_ex(A)
    if A.device.type != "cpu":
        if log is not None:
            log.record_device(info)
        return L
    if int(info.max() if info.dim() else info) == 0:
        return L
    scale = A.diagonal(dim1=-2, dim2=-1).mean().detach().abs().clamp_min(1e-300)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    for i in range(max_tries):
        L, info = torch.linalg.cholesky_ex(A + (jitter * 10**i) * scale * eye)
        if int(info.max() if info.dim() else info) == 0:
            if log is not None:
                log.jitter_events += 1
            return L
    raise NumericalError(
        f"the {A.shape[-1]} x {A.shape[-1]} matrix {what} is not positive definite even with jitter "
        f"{jitter * 10 ** (max_tries - 1):g} x mean diagonal; raise likelihood.noise_init or the noise floor, "
        f"or lower the learning rate"
    )


#: bytes of one block of kernel rows being computed (the kernel's temporaries included: ~4 block x n arrays)
KERNEL_BLOCK_BYTES = 2**28


def posterior_bytes(rows: int, device_type: str = "cpu") -> int:
    """Memory of one dense posterior on ``rows`` conditioning rows, in bytes: the n x n factor (CPU: K is
    factorised in place; accelerators: torch's Cholesky holds K and L, 2 n^2) plus a block of kernel rows."""
    matrices = 1 if device_type == "cpu" else 2
    return matrices * 8 * rows * rows + KERNEL_BLOCK_BYTES


def _block_rows(n: int, block_rows: int) -> int:
    return max(1, min(int(block_rows), KERNEL_BLOCK_BYTES // (4 * 8 * max(n, 1))))


def kernel_cholesky(
    covariance,
    z: torch.Tensor,
    s2,
    *,
    block_rows: int = 4096,
    log: CholeskyLog | None = None,
    what: str = "K + s2 I",
    jitter: float = 1e-10,
    max_tries: int = 6,
) -> torch.Tensor:
    """The lower Cholesky factor of covariance(z, z) + s2 I (float64), never holding more than one n x n
    matrix on the CPU: K's rows are computed ``covariance(z[i:j], z)`` a block at a time (at most
    ``KERNEL_BLOCK_BYTES`` of temporaries) into one buffer, which LAPACK's dpotrf overwrites with the factor
    (its upper triangle then zeroed). A failed factorisation is retried with jitter * mean(diag) * 10^i
    added to the diagonal (K is rebuilt: the failed attempt overwrote it), counted in ``log`` as
    ``cholesky_dxd`` counts its retries. On accelerators: torch's Cholesky of the same K (``cholesky_dxd``)."""
    n = z.shape[0]
    step = _block_rows(n, block_rows)
    K = torch.empty(n, n, dtype=torch.float64, device=z.device)

    def fill(extra: float = 0.0) -> None:
        for i in range(0, n, step):
            K[i : i + step] = covariance(z[i : i + step], z)
        K.diagonal().add_(s2 + extra)

    fill()
    if z.device.type != "cpu":
        L = cholesky_dxd(K, log, what=what)
        del K
        return L
    from scipy.linalg import lapack

    scale = float(K.diagonal().mean().abs().clamp_min(1e-300))
    for attempt in range(max_tries + 1):
        if attempt:
            fill(jitter * 10 ** (attempt - 1) * scale)
        a = K.numpy().T  # the same memory, Fortran order: dpotrf's upper factor U of K^T = K is L^T, i.e. L in K
        factor, info = lapack.dpotrf(a, lower=0, clean=0, overwrite_a=1)
        if info == 0:
            if factor.ctypes.data != a.ctypes.data:  # never taken for a contiguous K; kept for safety
                K.copy_(torch.from_numpy(factor.T))
            if attempt and log is not None:
                log.jitter_events += 1
            return K.tril_()
        if info < 0:
            raise ValueError(f"dpotrf: argument {-info} is invalid")
    raise NumericalError(
        f"the {n} x {n} matrix {what} is not positive definite even with jitter "
        f"{jitter * 10 ** (max_tries - 1):g} x mean diagonal; raise likelihood.noise_init or the noise floor, "
        f"or lower the learning rate"
    )


@torch.no_grad()
def feature_statistics(features, x: torch.Tensor, y: torch.Tensor, block_rows: int = 4096):
    """(Z^T Z, Z^T y, y^T y) in float64 for Z = features(x), streamed over blocks of rows."""
    ztz = zty = None
    for i in range(0, x.shape[0], block_rows):
        z = features(x[i : i + block_rows]).to(torch.float64)
        yb = y[i : i + block_rows].to(torch.float64)
        ztz = z.T @ z if ztz is None else ztz + z.T @ z
        zty = z.T @ yb if zty is None else zty + z.T @ yb
    yy = y.to(torch.float64).square().sum()
    return ztz, zty, yy


def nlml_from_statistics(ztz, zty, yty, n: int, s2, log: CholeskyLog | None = None):
    """Per-point NLML (1/n) [-log N(y | 0, Z Z^T + s2 I_n)], including (1/2) log 2 pi, from the
    statistics (differentiable in all of them). Returns (nlml, L, c) with F = L L^T, c = L^-1 Z^T y."""
    d = ztz.shape[-1]
    F = ztz + s2 * torch.eye(d, dtype=ztz.dtype, device=ztz.device)
    L = cholesky_dxd(F, log)
    c = torch.linalg.solve_triangular(L, zty.unsqueeze(-1), upper=False).squeeze(-1)
    quad = (yty - c.square().sum()) / s2
    logdet = 2 * torch.log(L.diagonal()).sum() + (n - d) * torch.log(s2)
    return 0.5 * (quad + logdet) / n + 0.5 * LOG_2PI, L, c


@dataclass
class Posterior:
    """The closed-form weight posterior at one parameter state (see the module docstring)."""

    F: torch.Tensor  # Z^T Z + s2 I
    L: torch.Tensor  # chol(F)
    w: torch.Tensor  # w* = F^-1 Z^T y
    s2: torch.Tensor
    nlml: float  # per-point, standardised targets


class BayesianLinearGP(torch.nn.Module):
    """y = phi(x)^T w + eps, w ~ N(0, I_d), phi = kernel_map(input_map(x)): the exact GP with kernel
    phi(x)^T phi(x'), trained by the RKHS family (SCGD, MINIMAX, BSGD) and predicting in closed form.

    ``marginals(x)`` gives (mean, var) of the latent f at the *profiled* weights w* = F^-1 Z^T y of
    the current feature map and noise (not the auxiliary w that SCGD/MINIMAX learn), so the
    standard predictive metrics apply. The posterior is recomputed (one streamed O(n d^2) pass)
    only when a parameter or buffer of the model has changed since the last one (tracked by
    torch's in-place version counters, which optimiser steps and snapshot restores bump).
    """

    def __init__(
        self,
        input_map: torch.nn.Module,
        kernel_map: LinearKernelMap | RandomFourierMap,
        likelihood,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        block_rows: int = 4096,
    ):
        super().__init__()
        self.input_map = input_map
        self.kernel_map = kernel_map
        self.likelihood = likelihood  # gpdlm GaussianLikelihood: s2 = likelihood.noise
        self.num_features = int(kernel_map.out_dim)
        self.block_rows = int(block_rows)
        self.chol_log = CholeskyLog()
        self.set_train_data(x_train, y_train)

    def set_train_data(self, x: torch.Tensor, y: torch.Tensor) -> None:
        # plain attributes, not buffers: keep_best snapshots must not copy the data
        self.x_train, self.y_train = x, y
        self._post: Posterior | None = None
        self._key: tuple | None = None

    @property
    def num_data(self) -> int:
        return int(self.x_train.shape[0])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x) in float64 (n x d)."""
        return self.kernel_map(self.input_map(x)).to(torch.float64)

    def prior_covariance(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x) phi(x)^T of a batch (b x b, differentiable): BSGD's batch covariance without the noise."""
        phi = self.features(x)
        return phi @ phi.transpose(-1, -2)

    @property
    def noise(self) -> torch.Tensor:
        """s2 in float64 (a scalar tensor)."""
        return self.likelihood.noise.to(torch.float64).reshape(())

    def _state_key(self):
        return tuple((id(t), t._version) for t in list(self.parameters()) + list(self.buffers()))

    @torch.no_grad()
    def posterior(self) -> Posterior:
        key = self._state_key()
        if self._post is None or key != self._key:
            ztz, zty, yty = feature_statistics(self.features, self.x_train, self.y_train, self.block_rows)
            s2 = self.noise
            nlml, L, c = nlml_from_statistics(ztz, zty, yty, self.num_data, s2, self.chol_log)
            w = torch.linalg.solve_triangular(L.T, c.unsqueeze(-1), upper=True).squeeze(-1)
            F = ztz + s2 * torch.eye(ztz.shape[0], dtype=ztz.dtype, device=ztz.device)
            self._post, self._key = Posterior(F=F, L=L, w=w, s2=s2, nlml=float(nlml)), key
        return self._post

    def full_F(self) -> torch.Tensor:
        """F(theta) = Z^T Z + s2 I of the full training set at the current parameters."""
        return self.posterior().F

    def nlml(self) -> float:
        """Full-data per-point NLML of the standardised targets (with (1/2) log 2 pi)."""
        return self.posterior().nlml

    @torch.no_grad()
    def marginals(self, x: torch.Tensor):
        post = self.posterior()
        phi = self.features(x)
        mean = phi @ post.w
        v = torch.linalg.solve_triangular(post.L, phi.T, upper=False)
        var = post.s2 * v.square().sum(0)
        return mean.to(x.dtype), var.clamp_min(1e-300).to(x.dtype)

    @torch.no_grad()
    def exact_kernel_nlml(self) -> float | None:
        """Per-point NLML of the kernel the feature map approximates (RFF: the Gaussian kernel on
        g(x)), by a dense n x n Cholesky (``kernel_cholesky``: one n x n matrix on the CPU); None if the map has
        no such kernel. O(n^3): callers cap n."""
        exact = getattr(self.kernel_map, "exact_kernel", None)
        if exact is None:
            return None
        z = torch.cat(
            [self.input_map(self.x_train[i : i + self.block_rows]) for i in range(0, self.num_data, self.block_rows)]
        ).to(torch.float64)
        n = z.shape[0]
        try:
            L = kernel_cholesky(exact, z, self.noise, block_rows=self.block_rows, max_tries=0)
        except NumericalError:
            return float("nan")
        a = torch.linalg.solve_triangular(L, self.y_train.to(torch.float64).unsqueeze(-1), upper=False)
        return float(0.5 * (a.square().sum() + 2 * torch.log(L.diagonal()).sum()) / n + 0.5 * LOG_2PI)
