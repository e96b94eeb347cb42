"""MINIMAX's penalty is exact only for mu >= ||F|| ||F^-1|| (rkhs-spec 1.5, C5), deterministic.

At theta* (500 rows of concrete, d = 64 RFF), for A on the shrinking family A(c) = max(c F, s2 I)
(eigenvalue clamp), the penalised objective minus its value at A = F is
    h(A) + mu ||A - F|| / ||A|| - log|F|   (numpy).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpdlm_cli.objectives import Minimax

from ._setup import LOG_2PI, model_at_optimum

N, D = 500, 64


def test_penalty_exactness_threshold():
    """mu = 1: some A(c) beats A = F by more than 50 nats (measured -88 at c = 0.1); mu = d and
    mu = 100: none of c in {0.5, 0.1, 0.01} does. The one-sided slope <F^-1, D> + mu ||D|| / ||F||
    along D = -F^-1 / ||F^-1|| is < 0 at mu = 1 and >= 0 at mu = ||F|| ||F^-1|| (the threshold,
    >= d by Cauchy-Schwarz). gpdlm's MINIMAX objective on the full batch with the maximising
    B = (A - F) / ||A - F|| equals g + log|A| + mu ||A - F|| / ||A|| (numpy) on the per-point scale,
    rtol 1e-10."""
    model, _ = model_at_optimum(N, D)
    F = model.full_F().numpy()
    s2 = float(model.noise.detach())
    _, logdet_F = np.linalg.slogdet(F)
    lam, V = np.linalg.eigh(F)
    norm = np.linalg.norm

    def excess(A, mu):
        return np.linalg.slogdet(A)[1] + mu * norm(A - F) / norm(A) - logdet_F

    family = [(V * np.maximum(c * lam, s2)) @ V.T for c in (0.5, 0.1, 0.01)]
    assert min(excess(A, 1.0) for A in family) < -50
    for mu in (D, 100):
        assert min(excess(A, mu) for A in family) > 0
    Finv = np.linalg.inv(F)
    threshold = norm(F) * norm(Finv)
    assert threshold >= D
    Dir = -Finv / norm(Finv)

    def slope(mu):
        return np.sum(Finv * Dir) + mu * norm(Dir) / norm(F)

    assert slope(1.0) < 0 and slope(threshold) >= -1e-9 * threshold

    # the objective gpdlm trains: full batch, B at its maximiser, A = A(0.5) expressed through M
    mm = Minimax(model, N, mu=3.0)
    mm.initialise()
    A = family[0]
    with torch.no_grad():
        C = mm.C.numpy()
        M = np.linalg.solve(C, np.linalg.solve(C, A).T)
        mm.M.copy_(torch.as_tensor(0.5 * (M + M.T)))
        mm.B.copy_(torch.as_tensor((A - F) / norm(A - F)))
        value = float(mm(model.x_train, model.y_train))
        Z = model.features(model.x_train).numpy()
        w, y = mm.w.numpy(), model.y_train.numpy()
    d = Z.shape[1]
    g = np.sum((Z @ w - y) ** 2) / s2 + w @ w + (N - d) * np.log(s2)
    psi = g + np.linalg.slogdet(A)[1] + 3.0 * norm(A - F) / norm(A)
    assert value == pytest.approx(0.5 * (psi / N + LOG_2PI), rel=1e-10)


def test_minimax_gradients_and_projections_follow_the_closed_forms():
    """On the full batch, with A = C sym(M) C^T and symmetric B (rkhs-spec 1.5, corrected forms):
    the trainer's B-gradient is the *negative* ascent direction -(1/2n) mu (A - F) / ||A|| (the
    max step is descent on a sign-flipped surrogate), and the M-gradient is C^T G C with
    G = (1/2n) [A^-1 + mu (B / ||A|| - <B, A - F> A / ||A||^3)], both rtol 1e-9 against numpy.
    project() maps A to V max(lambda, s2) V^T (eigenvalue clamp), B to sym(B) / max(1, ||B||) and
    w into the box [-w_max, w_max]."""
    model, _ = model_at_optimum(N, D)
    mm = Minimax(model, N, mu=7.0)
    mm.initialise()
    rng = np.random.default_rng(1)
    norm = np.linalg.norm
    with torch.no_grad():
        F = model.full_F().numpy()
        A = F * 0.8 + np.eye(D)
        C = mm.C.numpy()
        M = np.linalg.solve(C, np.linalg.solve(C, A).T)
        mm.M.copy_(torch.as_tensor(0.5 * (M + M.T)))
        Bm = rng.standard_normal((D, D))
        Bm = 0.3 * (Bm + Bm.T) / norm(Bm + Bm.T)
        mm.B.copy_(torch.as_tensor(Bm))
    mm(model.x_train, model.y_train).backward()
    gB_ref = -0.5 / N * 7.0 * (A - F) / norm(A)
    np.testing.assert_allclose(mm.B.grad.numpy(), gB_ref, rtol=1e-9, atol=1e-14)
    G = 0.5 / N * (np.linalg.inv(A) + 7.0 * (Bm / norm(A) - np.sum(Bm * (A - F)) * A / norm(A) ** 3))
    np.testing.assert_allclose(mm.M.grad.numpy(), C.T @ G @ C, rtol=1e-9, atol=1e-14)

    s2 = float(model.noise.detach())
    lam, V = np.linalg.eigh(F)
    A_low = (V * (lam * 0.01)) @ V.T  # eigenvalues below s2 in part
    Bbig = rng.standard_normal((D, D))
    with torch.no_grad():
        M = np.linalg.solve(C, np.linalg.solve(C, A_low).T)
        mm.M.copy_(torch.as_tensor(M))
        mm.B.copy_(torch.as_tensor(Bbig))
        mm.project()
        A_proj = mm.A().numpy()
    assert (lam * 0.01).min() < s2
    np.testing.assert_allclose(A_proj, (V * np.maximum(lam * 0.01, s2)) @ V.T, rtol=1e-8, atol=1e-8 * norm(A_low))
    Bsym = 0.5 * (Bbig + Bbig.T)
    np.testing.assert_allclose(mm.B.detach().numpy(), Bsym / max(1.0, norm(Bsym)), rtol=1e-12)
    assert mm.projections == 1
    mm.w_max = 0.05
    w = mm.w.detach().numpy().copy()
    mm.project()
    np.testing.assert_array_equal(mm.w.detach().numpy(), np.clip(w, -0.05, 0.05))
    assert np.abs(w).max() > 0.05
