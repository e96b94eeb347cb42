"""Bias statistics of a stochastic gradient estimator (DLM paper, Sec. 6 "Evaluation of the sampling
algorithms", Fig. 1(g,h) and App. D Fig. 9).

R repeated estimates g_hat_1..g_hat_R (rows of ``g_hats``, shape (R, P)) of a gradient whose
reference value is g (shape (P,)) are summarised by the quantities of Proposition 2's conditions
(Bertsekas & Tsitsiklis, Prop. 3.7) and by the bias of their mean:

* condition (i):  c_r = g_hat_r . g / |g|^2   -- 1 for the true gradient, > 0 is a descent direction
* condition (ii): n_r = |g_hat_r| / |g|       -- bounded by a constant c_2
* bias:           b = mean_r g_hat_r - g,  |b| and |b| / |g|
* mean squared error: mean_r |g_hat_r - g|^2  (= |b|^2 + mean_r |g_hat_r - mean g_hat|^2)

|b| is itself noisy: even an unbiased estimator has E|b|^2 = tr(Cov g_hat) / R. With R >= 2 the
statistics therefore also give that noise floor, ``bias_noise`` = sqrt(tr(S) / R) with S the sample
covariance, the bias with the noise removed, ``bias_debiased`` = sqrt(max(0, |b|^2 - tr(S)/R))
(|b|^2 - tr(S)/R is an unbiased estimate of |E g_hat - g|^2), and ``bias_chi2`` = mean_j b_j^2 /
(S_jj / R) (a coordinate with S_jj = 0 counts 0 if b_j = 0, else inf), which is about 1 for an
unbiased estimator and grows with the bias (like R |bias_j|^2 / S_jj).

Medians are the usual ones (the mean of the two middle values for even R).

Pure functions of tensors: no config, no model.
"""

from __future__ import annotations

import math

import torch

from ..exceptions import NumericalError


def _check(g_hats: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    if g_hats.dim() != 2 or g.dim() != 1 or g_hats.shape[1] != g.shape[0]:
        raise ValueError(
            f"expected g_hats of shape (R, P) and g of shape (P,); got {tuple(g_hats.shape)} and {tuple(g.shape)}"
        )
    if g_hats.shape[0] < 1:
        raise ValueError("need at least one estimate (R >= 1)")
    g_hats, g = g_hats.double(), g.double()
    norm_sq = float(g @ g)
    if not math.isfinite(norm_sq) or norm_sq == 0.0:
        raise NumericalError(
            f"the reference gradient has norm {math.sqrt(norm_sq) if math.isfinite(norm_sq) else norm_sq}: "
            f"conditions (i) and (ii) are undefined"
        )
    if not bool(torch.isfinite(g_hats).all()):
        r = int((~torch.isfinite(g_hats)).any(1).nonzero()[0])
        raise NumericalError(f"gradient estimate {r + 1} of {g_hats.shape[0]} is not finite")
    return g_hats, g, norm_sq


def condition_statistics(g_hats: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per repetition: condition (i) g_hat_r . g / |g|^2 and condition (ii) |g_hat_r| / |g|, each (R,)."""
    g_hats, g, norm_sq = _check(g_hats, g)
    return g_hats @ g / norm_sq, g_hats.norm(dim=1) / math.sqrt(norm_sq)


def gradient_statistics(g_hats: torch.Tensor, g: torch.Tensor) -> dict[str, float]:
    """The bias statistics of R estimates ``g_hats`` (R, P) against the reference ``g`` (P,).

    Keys: ``ref_norm`` |g|; ``cond_i_mean``, ``cond_i_median``, ``cond_ii_mean``,
    ``cond_ii_median``; ``bias`` |mean g_hat - g|, ``bias_rel`` (/|g|); ``mse`` mean |g_hat - g|^2,
    ``mse_rel`` (/|g|^2); ``repetitions``; and, when R >= 2, ``cond_i_se`` and ``cond_ii_se``
    (standard errors of the means), ``bias_noise``, ``bias_debiased``, ``bias_debiased_rel`` and
    ``bias_chi2`` (see the module docstring).
    """
    g_hats, g, norm_sq = _check(g_hats, g)
    R = g_hats.shape[0]
    norm = math.sqrt(norm_sq)
    cond_i = g_hats @ g / norm_sq
    cond_ii = g_hats.norm(dim=1) / norm
    b = g_hats.mean(0) - g
    bias_sq = float(b @ b)
    mse = float(((g_hats - g) ** 2).sum(1).mean())
    out = {
        "ref_norm": norm,
        "cond_i_mean": float(cond_i.mean()),
        "cond_i_median": float(torch.quantile(cond_i, 0.5)),
        "cond_ii_mean": float(cond_ii.mean()),
        "cond_ii_median": float(torch.quantile(cond_ii, 0.5)),
        "bias": math.sqrt(bias_sq),
        "bias_rel": math.sqrt(bias_sq) / norm,
        "mse": mse,
        "mse_rel": mse / norm_sq,
        "repetitions": R,
    }
    if R >= 2:
        var = g_hats.var(0, unbiased=True)  # S_jj
        noise_sq = float(var.sum()) / R  # tr(S) / R
        debiased = math.sqrt(max(bias_sq - noise_sq, 0.0))
        # coordinates without variance: 0 if unbiased, inf if deterministically biased
        ratio = torch.where(var > 0, b**2 / (var / R), torch.where(b == 0, 0.0, math.inf))
        chi2 = float(ratio.mean())
        out.update(
            {
                "cond_i_se": float(cond_i.std(unbiased=True)) / math.sqrt(R),
                "cond_ii_se": float(cond_ii.std(unbiased=True)) / math.sqrt(R),
                "bias_noise": math.sqrt(noise_sq),
                "bias_debiased": debiased,
                "bias_debiased_rel": debiased / norm,
                "bias_chi2": chi2,
            }
        )
    return out


def coordinate_bias(g_hats: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-coordinate bias mean_r g_hat_r - g, shape (P,) (the right column of the paper's Fig. 9)."""
    g_hats, g, _ = _check(g_hats, g)
    return g_hats.mean(0) - g


__all__ = ["condition_statistics", "coordinate_bias", "gradient_statistics"]
