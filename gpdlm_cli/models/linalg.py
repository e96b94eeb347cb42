"""Dense linear algebra shared by the collapsed and closed-form computations."""

from __future__ import annotations

import torch

from ..exceptions import NumericalError


def safe_cholesky(A: torch.Tensor, jitter: float = 1e-6, max_tries: int = 4, what: str = "K_uu",
                  check: bool | None = None):
    """Cholesky factor of A, adding jitter * mean(diag) (x10 per retry) if A is not PD.

    Raises NumericalError with a remedy after ``max_tries`` retries. ``check=False`` reads nothing
    back from the device (no host-device sync, for GPU hot paths): a failed factor becomes NaN,
    which the trainer's periodic finiteness check reports. ``check=None`` (the default): checked on
    the CPU, where reading ``info`` costs nothing, not on an accelerator (reading it there stalls
    the host on every call: two syncs per SGPR/SVGP/exact step, measured on an H200)."""
    if check is None:
        check = A.device.type == "cpu"
    L, info = torch.linalg.cholesky_ex(A)
    if not check:
        return torch.where(info.unsqueeze(-1).unsqueeze(-1) == 0, L, torch.full_like(L, float("nan")))
    if not bool(info.any()):
        return L
    scale = A.diagonal(dim1=-2, dim2=-1).mean().detach().abs().clamp_min(1e-12)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    for i in range(max_tries):
        L, info = torch.linalg.cholesky_ex(A + (jitter * 10**i) * scale * eye)
        if not bool(info.any()):
            return L
    raise NumericalError(
        f"{what} is not positive definite even with jitter {jitter * 10 ** (max_tries - 1):g} x mean "
        f"diagonal; try fewer or better-spread inducing points (model.inducing_init=kmeans), a larger "
        f"model.jitter, or dtype=float64"
    )


def tri_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """L^{-1} B for lower-triangular L."""
    return torch.linalg.solve_triangular(L, B, upper=False)
