"""The structure-aware KISS training operator (issue 41, item 3): ``FactoredKissOperator`` holds the matrix
gpytorch's ``InterpolatedLinearOperator`` over Kronecker-Toeplitz factors holds (entries, products, diagonal
to 1e-12, in interpolation order on anisotropic 2-D and 3-D embeddings), and the structured NLML with it --
value, dL/dh and dL/dtheta, the same seeded probes -- equals the one with gpytorch's operator."""

from __future__ import annotations

import pytest
import torch
from linear_operator import to_dense

from gpdlm_cli.models.deep_kernel import GridInterpolationKernelInOrder
from gpdlm_cli.models.kiss_operator import FactoredKissOperator

from .test_kiss import CASES, embedding, kiss_model


def _kernel(E: int, n: int):
    model = kiss_model(E, 0.05, grid=24 if E == 3 else 40, kiss_dense_below=0)
    h = torch.as_tensor(embedding(E, n)[0])
    model.fit_grid(h)
    k = model.gps[0].covar_module.base_kernel
    k.train()
    return model, k, h


def _reference(k, h):
    GridInterpolationKernelInOrder.factored = False
    try:
        return k.forward(h, h)
    finally:
        GridInterpolationKernelInOrder.factored = True


@pytest.mark.parametrize("E", sorted(CASES))
def test_the_operator_is_gpytorchs_matrix(E):
    _, k, h = _kernel(E, 150)
    op, ref = k.forward(h, h), _reference(k, h)
    assert isinstance(op, FactoredKissOperator) and not isinstance(ref, FactoredKissOperator)
    dense = to_dense(ref)
    torch.testing.assert_close(op.to_dense(), dense, rtol=0, atol=1e-12)
    torch.testing.assert_close(op.diagonal(), dense.diagonal(), rtol=0, atol=1e-12)
    v = torch.randn(150, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(op @ v, dense @ v, rtol=0, atol=1e-11)
    rows, cols = torch.tensor([0, 7, 149, 3]), torch.tensor([5, 7, 0, 100])
    torch.testing.assert_close(op[rows, cols], dense[rows, cols], rtol=0, atol=1e-12)
    few, perm = torch.tensor([4, 0, 99]), torch.randperm(150, generator=torch.Generator().manual_seed(2))
    for r, c in ((few[:, None], perm[None]), (perm[:, None], few[None])):  # k x n and n x k blocks
        torch.testing.assert_close(op[r, c], dense[r, c], rtol=0, atol=1e-12)
    torch.testing.assert_close(op.to_dense(), k.dense(h), rtol=0, atol=1e-12)  # the dense KISS path's matrix


def _nlml_and_gradients(model, h, y, factored: bool, seed: int = 3):
    GridInterpolationKernelInOrder.factored = factored
    try:
        leaf = h.clone().requires_grad_(True)
        theta = [p for g in ("kernel", "likelihood") for p in model.groups()[g]]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            value = model.nlml(leaf, y) / h.shape[0]
            grads = torch.autograd.grad(value, [leaf, *theta])
    finally:
        GridInterpolationKernelInOrder.factored = True
    return float(value), grads


@pytest.mark.parametrize("E", sorted(CASES))
def test_the_operators_derivatives_are_gpytorchs(E):
    """What CG's and the preconditioner's backward passes differentiate: a bilinear form u^T A v (through
    ``_matmul``) and a block of entries (through ``_get_indices``), in the points h and in theta, equal to
    the derivatives through gpytorch's operator to 1e-10 relative."""
    model, k, h = _kernel(E, 120)
    gen = torch.Generator().manual_seed(1)
    u, v = (
        torch.randn(120, 2, dtype=torch.float64, generator=gen),
        torch.randn(120, 2, dtype=torch.float64, generator=gen),
    )
    rows, cols = torch.tensor([[0], [5], [77]]), torch.tensor([[3, 5, 119]])
    theta = list(k.parameters())
    out = {}
    for factored in (False, True):
        GridInterpolationKernelInOrder.factored = factored
        try:
            leaf = h.clone().requires_grad_(True)
            op = k.forward(leaf, leaf)
            value = (u * (op @ v)).sum() + op[rows, cols].pow(2).sum()
            out[factored] = (value.detach(), *torch.autograd.grad(value, [leaf, *theta]))
        finally:
            GridInterpolationKernelInOrder.factored = True
    for a, b in zip(out[False], out[True]):
        assert float((a - b).norm() / a.norm()) < 1e-10


def test_the_preconditioned_structured_nlml_estimates_the_exact_one():
    """With the production settings (pivoted-Cholesky preconditioner at every size) the new operator's
    NLML/N is within 3e-3 of the exact GP's and dL/dh has cosine > 0.99 with it, over four probe draws
    (as tests/recurrent/test_kiss.py asks of the structured path)."""
    from .test_kiss import cosine, exact_nlml_and_cotangents

    s2, ell = 0.05, (0.8, 2.4)
    h, y = embedding(2, 500, s2=s2)
    model = kiss_model(2, s2, kiss_dense_below=0)
    model.gps[0].covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
    ht, yt = torch.as_tensor(h), torch.as_tensor(y)
    model.fit_grid(ht)
    ref, ref_grad = exact_nlml_and_cotangents(h, y, ell, s2)
    for seed in range(4):
        value, grads = _nlml_and_gradients(model, ht, yt, True, seed)
        assert abs(value - ref) < 3e-3, (seed, value, ref)
        assert cosine(grads[0].numpy(), ref_grad) > 0.99, seed
