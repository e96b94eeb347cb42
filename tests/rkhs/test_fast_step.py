"""The fast small step of the RKHS family (issue 41): SCGD's closed-form step (``_SCGDStep``) and the flat
AdaDelta equal the autograd reference and torch's AdaDelta -- one step against numpy, a few hundred
steps of real training against the reference path, in float64."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.training import train

from ..conftest import compose

SMALL = ["dataset.split.train_size=320", "progress=false", "tracking.enabled=false", "threads=1"]


def _method(model: str, b: int = 32, *extra):
    cfg = compose(
        [
            *SMALL,
            f"model={model}",
            "features=nn",
            "features.widths=[16,16]",
            "kernel=linear",
            "trainer.optimizer=adadelta",
            f"trainer.batch_size={b}",
            "trainer.eval_every=0",
            "trainer.stop_rule=none",
            "trainer.lr=0.3",
            *extra,
        ]
    )
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=0)
    return method, settings, data


def _train(model: str, fast: bool, steps: int, *extra):
    torch.manual_seed(0)
    method, settings, data = _method(model, 32, *extra)
    stage = method.stages[-1]
    if not fast:
        stage.objective.fused = False
    if stage.prepare:
        stage.prepare()
    options = {**settings.optimizer_options, "flat": fast}
    run = dataclasses.replace(settings, max_iters=steps, max_epochs=None, optimizer_options=options)
    gen = torch.Generator().manual_seed(3)
    result = train(stage.objective, stage.groups, data.x_train, data.y_train, run, generator=gen, hooks=stage.hooks)
    state = {name: p.detach().clone() for name, p in stage.objective.named_parameters()}
    state.update({name: b.detach().clone() for name, b in stage.objective.named_buffers()})
    return state, result.losses


@pytest.mark.slow
@pytest.mark.parametrize("model", ["scgd", "minimax", "bsgd"])
def test_fast_path_equals_reference_over_300_steps(model):
    """300 AdaDelta steps at b = 32 on 320 rows of concrete: every parameter and buffer (network, noise, w,
    F~ / A, B) and every loss of the fast path equal the reference path's to 1e-10."""
    fast, fast_losses = _train(model, True, 300)
    ref, ref_losses = _train(model, False, 300)
    assert fast.keys() == ref.keys() and len(fast) >= 6
    for name in ref:
        assert torch.allclose(fast[name], ref[name], rtol=0, atol=1e-10), name
    np.testing.assert_allclose(fast_losses, ref_losses, rtol=0, atol=1e-10)
    assert max(abs(a - b) for a, b in zip(fast_losses[:2], fast_losses[-2:])) > 1e-6  # it moved


def _numpy_scgd_gradients(phi, w, s2, y, F_tilde, n):
    """One SCGD step's value and gradients in numpy (the closed forms of the objective's docstring)."""
    b, d = phi.shape
    P = np.linalg.inv(F_tilde)
    r = phi @ w - y
    value = 0.5 * (
        r @ r / (b * s2) + w @ w / n + (n - d) / n * np.log(s2) + np.linalg.slogdet(F_tilde)[1] / n + np.log(2 * np.pi)
    )
    d_phi = np.outer(r, w) / (b * s2) + phi @ P / b
    d_w = phi.T @ r / (b * s2) + w / n
    d_s2 = 0.5 * (-(r @ r) / (b * s2**2) + (n - d) / (n * s2) + np.trace(P) / n)
    return value, d_phi, d_w, d_s2


@pytest.mark.parametrize("fused", [True, False])
def test_one_scgd_step_against_numpy(fused):
    """The fused step and the autograd reference both give numpy's value and d/dphi, d/dw, d/ds2 (to 1e-12)."""
    from gpdlm_cli.models.bayesian_linear import cholesky_dxd
    from gpdlm_cli.objectives.rkhs import _SCGDStep

    g = torch.Generator().manual_seed(0)
    b, d, n = 7, 5, 50
    phi = torch.randn(b, d, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(d, generator=g, dtype=torch.float64, requires_grad=True)
    s2 = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(b, generator=g, dtype=torch.float64)
    Zf = torch.randn(40, d, generator=g, dtype=torch.float64)
    F_tilde = Zf.T @ Zf + 0.3 * torch.eye(d, dtype=torch.float64)
    if fused:
        value, F_batch = _SCGDStep.apply(phi, w, s2, y, cholesky_dxd(F_tilde), n)
        np.testing.assert_allclose(
            F_batch.numpy(), (n / b) * phi.detach().numpy().T @ phi.detach().numpy() + 0.3 * np.eye(d), atol=1e-12
        )
    else:
        from types import SimpleNamespace

        from gpdlm_cli.objectives.rkhs import SCGD

        model = SimpleNamespace(noise=s2, chol_log=None)
        value = SCGD.reference_step(SimpleNamespace(num_data=n, F_tilde=F_tilde, w=w, model=model), phi, y)
    value.backward()
    ref = _numpy_scgd_gradients(phi.detach().numpy(), w.detach().numpy(), 0.3, y.numpy(), F_tilde.numpy(), n)
    np.testing.assert_allclose(float(value.detach()), ref[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(phi.grad.numpy(), ref[1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), ref[2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(float(s2.grad), ref[3], rtol=0, atol=1e-12)


def _numpy_minimax(phi, w, s2, M, B, y, C, phi_bar, mu, n):
    """MINIMAX's step in numpy: value and gradients (the closed forms of _MinimaxStep's docstring)."""
    b, d = phi.shape
    A = C @ (0.5 * (M + M.T)) @ C.T
    nA = np.linalg.norm(A)
    r = phi @ w - y
    Q = np.sum(B * A) - (n / b) * np.einsum("ij,jk,ik->", phi, B, phi) - s2 * np.trace(B)
    value = 0.5 * (
        r @ r / (b * s2) + w @ w / n + (n - d) / n * np.log(s2) + (np.linalg.slogdet(A)[1] + mu * Q / nA) / n
    ) + 0.5 * np.log(2 * np.pi)
    kappa = mu / (n * nA)
    d_w = phi.T @ r / (b * s2) + w / n
    d_phi = np.outer(r, w) / (b * s2) - kappa * n / (2 * b) * phi @ (B + B.T)
    d_s2 = 0.5 * (-(r @ r) / (b * s2**2) + (n - d) / (n * s2) - kappa * np.trace(B))
    G = np.linalg.inv(A) / (2 * n) + 0.5 * kappa * (B - Q * A / nA**2)
    dS = C.T @ G @ C
    d_M = 0.5 * (dS + dS.T)
    d_B = -0.5 * kappa * (A - (n / b) * phi_bar.T @ phi_bar - s2 * np.eye(d))
    return value, d_phi, d_w, d_s2, d_M, d_B


@pytest.mark.parametrize("fused", [True, False])
def test_one_minimax_step_against_numpy(fused):
    """The fused step and the autograd reference both give numpy's value and d/dphi, d/dw, d/ds2, d/dM and the
    max step's d/dB (to 1e-12), with a symmetric B inside the unit ball and mu = 3."""
    from types import SimpleNamespace

    from gpdlm_cli.models.bayesian_linear import CholeskyLog
    from gpdlm_cli.objectives.rkhs import Minimax, _MinimaxStep

    g = torch.Generator().manual_seed(1)
    b, d, n, mu = 6, 4, 40, 3.0

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    phi, w, y, phi_bar = r(b, d).requires_grad_(), r(d).requires_grad_(), r(b), r(b, d)
    s2 = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    Z = r(30, d)
    C = torch.linalg.cholesky(Z.T @ Z + torch.eye(d, dtype=torch.float64))
    M = (torch.eye(d, dtype=torch.float64) + 0.1 * r(d, d)).requires_grad_()
    B0 = r(d, d)
    B = (0.2 * (B0 + B0.T) / torch.linalg.norm(B0 + B0.T)).requires_grad_()
    model = SimpleNamespace(noise=s2, chol_log=CholeskyLog())
    if fused:
        value = _MinimaxStep.apply(phi, w, s2, M, B, y, C, phi_bar, mu, n, SimpleNamespace(model=model))
    else:
        obj = SimpleNamespace(model=model, num_data=n, w=w, M=M, B=B, C=C, mu=mu)
        obj.A = lambda: Minimax.A(obj)
        obj.penalty = lambda *a: Minimax.penalty(obj, *a)
        value = Minimax.reference_step(obj, phi, y, phi_bar)
    value.backward()
    ref = _numpy_minimax(
        *(t.detach().numpy() for t in (phi, w)), 0.2, M.detach().numpy(), B.detach().numpy(), y.numpy(),
        C.numpy(), phi_bar.numpy(), mu, n,
    )  # fmt: skip
    np.testing.assert_allclose(float(value.detach()), ref[0], rtol=0, atol=1e-12)
    for got, want in zip((phi.grad, w.grad, s2.grad, M.grad, B.grad), ref[1:]):
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
