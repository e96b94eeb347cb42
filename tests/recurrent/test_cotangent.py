"""Algorithm 2's minibatch gradient (GP-LSTM paper, Sec. 4.1, App. C): the cotangent form is exactly
unbiased, the paper's printed sub-matrix estimator (Eq. C.15) is biased by (N_b - 1)/(N - 1).

The reference NLML is written here in plain torch (RBF ARD kernel, dense Cholesky), and its
gradient with respect to the network weights W comes from autograd through the whole model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpdlm_cli.data.sequences import actuator_like, make_windows, window_names
from gpdlm_cli.features.recurrent import FeatureMap, WindowLayout
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models.deep_kernel import DeepKernelGP
from gpdlm_cli.objectives.recurrent import CotangentSurrogate, refresh_cotangents

N, LAG, E = 120, 8, 2


def setup(dtype, kind="lstm", dropout=0.0, rec_dropout=0.0):
    df = actuator_like(T=N + LAG, seed=3)
    X, y, _ = make_windows(df.valve.to_numpy(), df.pressure.to_numpy(), LAG, "autoregression")
    X = torch.as_tensor((X - X.mean(0)) / X.std(0))
    y = torch.as_tensor((y - y.mean()) / y.std())
    layout = WindowLayout.from_names(window_names(["valve"], "pressure", LAG, "autoregression"), ["pressure"])
    torch.manual_seed(0)
    net = FeatureMap(
        kind, layout, X.shape[1], units=8, layers=1, out_dim=E, dropout=dropout, rec_dropout=rec_dropout
    ).to(dtype)
    gp = gpytorch_kernel()
    lik = GaussianLikelihood(noise_init=0.05, noise_min=1e-4)
    model = DeepKernelGP(net, [gp], [lik])
    model.gps[0].covar_module.outputscale = 1.3
    model.gps[0].covar_module.base_kernel.lengthscale = torch.tensor([[0.7, 1.6]])
    return model, X, y


def gpytorch_kernel():
    import gpytorch

    return gpytorch.kernels.RBFKernel(ard_num_dims=E)


def reference_loss(model, X, y, masks=None):
    """NLML/N written out: K = sf^2 exp(-1/2 sum_d (h_id - h_jd)^2 / l_d^2) + s^2 I, h = phi_W(x; masks)."""
    cov = model.gps[0].covar_module
    sf2, ell = cov.outputscale.detach(), cov.base_kernel.lengthscale.detach().reshape(-1)
    s2 = model.likelihoods[0].noise.detach()
    H = (model.network(X) if masks is None else model.network(X, masks=masks)).double() / ell
    d2 = ((H[:, None, :] - H[None, :, :]) ** 2).sum(-1)
    K = sf2 * torch.exp(-0.5 * d2) + s2 * torch.eye(len(y), dtype=torch.float64)
    L = torch.linalg.cholesky(K)
    alpha = torch.cholesky_solve(y[:, None], L)
    nlml = 0.5 * (y[:, None] * alpha).sum() + torch.log(torch.diagonal(L)).sum() + 0.5 * len(y) * math.log(2 * math.pi)
    return nlml / len(y), K


def flat_grad(loss, params):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double()


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_batch_gradients_over_one_partition_sum_to_the_full_gradient(dtype, tol):
    model, X, y = setup(dtype)
    params = list(model.network.parameters())
    ref_value, _ = reference_loss(model, X, y)
    g_full = flat_grad(ref_value, params)

    h = model.embed(X).detach()
    c, value = refresh_cotangents(model, h, y, N)
    assert float(value) == pytest.approx(float(ref_value.detach()), rel=1e-10)
    surrogate = CotangentSurrogate(model, N)
    surrogate.set_cotangents(c, value)
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    g_sum = torch.zeros_like(g_full)
    for idx in torch.split(perm, 25):  # sizes 25, 25, 25, 25, 20: weights N_b / N
        loss = surrogate(X[idx], y[idx], idx)
        assert float(loss) == pytest.approx(float(value))  # the reported value is the refresh NLML/N
        g_sum += len(idx) / N * flat_grad(loss, params)
    rel = float((g_sum - g_full).norm() / g_full.norm())
    assert rel <= tol, rel


class _GradientRecorder:
    """A trainer hook: after every step, the flattened gradient of the W step just taken."""

    def __init__(self, params):
        self.params, self.grads = params, []

    def after_step(self, iteration, epoch):
        self.grads.append(torch.cat([p.grad.reshape(-1) for p in self.params]).double().clone())


@pytest.mark.slow
def test_the_trainers_minibatch_steps_are_unbiased_for_dl_dw():
    """The real estimator, drawn as training draws it: ``training.loop.train`` runs the production
    ``CotangentSurrogate`` (wants_index, as Algorithm 2's stage) on batches of N_B = 32 from its own
    sampler (a random permutation per epoch, floor(N / N_B) = 3 batches, the remainder dropped), with
    SGD at lr 0 so that W stays at the refresh point; a hook records every step's gradient. Over
    R = 1,500 steps (500 epochs) the mean gradient matches autograd's dL/dW: relative error < 0.05,
    cosine > 0.995, and every coordinate within 4.5 standard errors (from the 500 epoch means, which
    are independent). Measured: relative error 0.012, max |z| 2.43 over 402 coordinates; the same run
    with the cotangents scaled by 0.95 (a 5% bias) gives max |z| 20.8."""
    from gpdlm_cli.training.loop import TrainerSettings, train

    model, X, y = setup(torch.float64)
    params = list(model.network.parameters())
    ref_value, _ = reference_loss(model, X, y)
    g = flat_grad(ref_value, params)
    c, value = refresh_cotangents(model, model.embed(X).detach(), y, N)
    surrogate = CotangentSurrogate(model, N)
    surrogate.set_cotangents(c, value)
    nb, epochs = 32, 500
    steps_per_epoch = N // nb
    recorder = _GradientRecorder(params)
    settings = TrainerSettings(
        max_iters=epochs * steps_per_epoch,
        lr=0.0,
        batch_size=nb,
        optimizer="sgd",
        eval_every=0,
        progress=False,
        stop_rule="none",
        check_every=steps_per_epoch,
    )
    train(
        surrogate,
        {"network": params},
        X,
        y,
        settings,
        generator=torch.Generator().manual_seed(2),
        wants_index=True,
        hooks=[recorder],
        stochastic=True,
    )
    for p, p0 in zip(params, setup(torch.float64)[0].network.parameters()):
        torch.testing.assert_close(p, p0, rtol=0, atol=0)  # lr 0: every step at the refresh point
    G = torch.stack(recorder.grads)  # (R, P)
    assert G.shape[0] == epochs * steps_per_epoch
    mean = G.mean(0)
    epoch_means = G.reshape(epochs, steps_per_epoch, -1).mean(1)
    se = epoch_means.std(0) / math.sqrt(epochs)
    rel = float((mean - g).norm() / g.norm())
    z = ((mean - g) / se)[se > 0]
    assert rel < 0.05, rel
    assert float(mean @ g / (mean.norm() * g.norm())) > 0.995
    assert float(z.abs().max()) < 4.5, float(z.abs().max())


@pytest.mark.slow
def test_the_papers_submatrix_estimator_is_biased_by_nb_minus_1_over_n_minus_1():
    """The sub-matrix estimator (Eq. C.15), (N/N_b) grad_W of -(1/2) sum_{i,j in B} A_ij K_ij / N with
    A = K^-1 y y^T K^-1 - K^-1 fixed on the full data, over R = 40,000 uniform batches of N_b = 32: its
    mean is ((N_b - 1)/(N - 1)) g (Lemma 1 counts a pair with probability N_b/N instead of
    N_b (N_b - 1) / (N (N - 1))). It is J_B^T c_B for per-window cotangents c_B, so the mean of R draws
    is J^T (the mean of the zero-padded cotangents): one backward pass."""
    model, X, y = setup(torch.float64)
    params = list(model.network.parameters())
    ref_value, K = reference_loss(model, X, y)
    g = flat_grad(ref_value, params)
    with torch.no_grad():
        Kinv = torch.linalg.inv(K)
        a = Kinv @ y
        A = a[:, None] * a[None, :] - Kinv
    cov = model.gps[0].covar_module
    sf2, ell = cov.outputscale.detach(), cov.base_kernel.lengthscale.detach().reshape(-1)
    H = model.embed(X).detach()

    nb, R, chunk = 32, 40_000, 4_000
    rng = torch.Generator().manual_seed(2)
    c_sub = torch.zeros_like(H)
    for _ in range(R // chunk):
        idx = torch.rand(chunk, N, generator=rng).argsort(1)[:, :nb]  # uniform subsets of size nb
        Hb = H[idx].requires_grad_(True)
        Kb = sf2 * torch.exp(-0.5 * (((Hb[:, :, None] - Hb[:, None]) / ell) ** 2).sum(-1))
        sub = (N / nb) * (-0.5 * (A[idx[:, :, None], idx[:, None, :]] * Kb).sum()) / N
        (gH,) = torch.autograd.grad(sub, Hb)
        c_sub.index_add_(0, idx.reshape(-1), gH.reshape(-1, E))
    mean_sub = flat_grad((model.network(X).double() * c_sub / R).sum(), params)
    ratio, expected = float(mean_sub.norm() / g.norm()), (nb - 1) / (N - 1)
    assert ratio == pytest.approx(expected, rel=0.10), (ratio, expected)
    assert float(mean_sub @ g / (mean_sub.norm() * g.norm())) >= 0.99


def test_with_dropout_one_mask_set_per_refresh_gives_the_gradient_of_the_masked_nlml():
    """Dropout 0.25 / recurrent 0.05 (the presets' values), through the production refresh: it draws one
    mask set M per window; its cotangents are taken at h = phi_W(X; M) and every batch step applies the
    rows of M, so the W steps over one partition sum to dL(W; M)/dW exactly (autograd through the
    masked network and the plain-torch NLML: 1e-10), and over refreshes to the gradient of the dropout
    objective E_M[L(W; M)]. Before issue 19 the cotangents came from the network without dropout and
    the Jacobians from fresh masks: 9% off dL/dW over 2,000 masks (MC noise 0.8%). The check and the
    drift compare embeddings under the same masks: with W fixed, no halving and zero drift."""
    from gpdlm_cli.training.kernel_refresh import KernelRefresh

    model, X, y = setup(torch.float64, dropout=0.25, rec_dropout=0.05)
    params = list(model.network.parameters())
    surrogate = CotangentSurrogate(model, N)
    refresh = KernelRefresh(
        model,
        surrogate,
        X,
        y,
        tau=4,
        theta_steps=2,
        theta_lr={"kernel": 0.01, "likelihood": 0.01},
        masks=torch.Generator().manual_seed(5),
    )
    opt = torch.optim.SGD(params, lr=0.1)
    refresh.bind_optimizer(opt)
    refresh.refresh()
    M = refresh.masks
    assert M is not None and M["input"][0].shape == (N, 4, 2) and M["recurrent"][0].shape == (N, 8)
    value, _ = reference_loss(model, X, y, masks=M)
    g = flat_grad(value, params)
    g_plain = flat_grad(reference_loss(model, X, y)[0], params)
    assert float((g - g_plain).norm() / g_plain.norm()) > 0.05  # the masks matter
    assert float(surrogate.value) == pytest.approx(float(value.detach()), rel=1e-10)
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    g_sum = torch.zeros_like(g)
    for idx in torch.split(perm, 25):
        g_sum += len(idx) / N * flat_grad(surrogate(X[idx], y[idx], idx), params)
    assert float((g_sum - g).norm() / g.norm()) <= 1e-10
    refresh.refresh()  # W fixed: no rise under the old masks, zero drift; new masks drawn
    assert refresh.halvings == 0 and refresh.drift == 0.0
    assert not torch.equal(refresh.masks["recurrent"][0], M["recurrent"][0])


def test_window_layout_reads_rows_in_chronological_order():
    names = window_names(["u"], "y", 3, "autoregression")  # u[t-0..2], y[t-1..3]
    layout = WindowLayout.from_names(names, ["y"])
    row = torch.arange(len(names), dtype=torch.float64)[None]
    seq = layout.sequences(row)[0]
    # step j pairs u_{t-2+j} with y_{t-3+j}: columns (2, 5), (1, 4), (0, 3)
    np.testing.assert_array_equal(seq.numpy(), [[2, 5], [1, 4], [0, 3]])
    assert layout.feedback == [[(3, 1), (4, 2), (5, 3)]]


def test_exact_predictions_are_the_gp_posterior_on_the_embedding():
    """mu_* = k_*^T (K + s^2 I)^-1 y, var_* = k_** - k_*^T (K + s^2 I)^-1 k_* on h = phi_W(x), in numpy."""
    model, X, y = setup(torch.float64)
    model.condition(X[:100], y[:100])
    mu, var = model.marginals_all(X[100:])
    cov = model.gps[0].covar_module
    sf2, ell = float(cov.outputscale), cov.base_kernel.lengthscale.detach().numpy().reshape(-1)
    s2 = float(model.likelihoods[0].noise)
    with torch.no_grad():
        H = model.network(X).numpy() / ell
    k = lambda a, b: sf2 * np.exp(-0.5 * ((a[:, None] - b[None]) ** 2).sum(-1))  # noqa: E731
    K = k(H[:100], H[:100]) + s2 * np.eye(100)
    Ks = k(H[100:], H[:100])
    np.testing.assert_allclose(mu[:, 0].numpy(), Ks @ np.linalg.solve(K, y[:100].numpy()), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(
        var[:, 0].numpy(), sf2 - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T)), rtol=1e-7, atol=1e-10
    )
