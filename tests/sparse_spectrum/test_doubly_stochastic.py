"""sVBSSGP's training objective (Sec. 3.2, Theorem 1, App. D and G): the Rao-Blackwellised block
log-likelihood equals the dense Gaussian conditional of s given theta and is the mean of the
sampled-s one; the average over all p blocks of the per-block gradient equals the full-data
gradient to round-off, for random equal blocks and for uneven k-means blocks; the analytic KL
gradient is the mean of App. D's single-sample gradients; the trainer's fixed-partition mode
visits every block once per epoch; and a step touches only its block's rows, whatever n."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.methods import sparse_spectrum as family
from gpdlm_cli.models import SpectralPosterior
from gpdlm_cli.models.sparse_spectrum import gaussian_kl_tril
from gpdlm_cli.objectives import SVBSSGPBound
from gpdlm_cli.training import TrainerSettings, run_stages, train

from ..conftest import compose
from .test_spectral_math import np_features

N, DIM, M = 200, 2, 4


def _problem(cov="full", seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, DIM)) * np.array([1.0, 2.0]) + np.where(rng.random((N, 1)) < 0.3, 3.0, 0.0)
    y = np.sin(x[:, 0]) + 0.2 * rng.normal(size=N)
    q = SpectralPosterior(
        M, DIM, cov=cov, prior_lengthscale=0.7, signal_init=1.3, generator=torch.Generator().manual_seed(seed)
    ).double()
    with torch.no_grad():  # a generic point: every entry of b and M non-trivial
        q.b.add_(0.3 * torch.as_tensor(rng.normal(size=q.D)))
        q.raw_diag.copy_(torch.as_tensor(rng.uniform(-3, -1, size=q.D)))
        if q.offdiag is not None:
            q.offdiag.copy_(0.1 * torch.as_tensor(rng.normal(size=(q.D, q.D))))
    lik = GaussianLikelihood(noise_init=0.2).double()
    return q, lik, torch.as_tensor(x), torch.as_tensor(y)


def test_rao_blackwellised_block_likelihood_is_the_dense_conditional_expectation():
    """E_s[log N(y | Phi^T s, s_n^2 I)] with s | theta from conditioning the joint N(b, M M^T) on
    theta (dense Schur complement), at theta = b_theta + M_theta z_theta; and it is the mean over
    z_s of the sampled-s value at the same z_theta (Monte Carlo, 5 standard errors)."""
    q, lik, x, y = _problem()
    rb = SVBSSGPBound(q, lik, N, rao_blackwell=True)
    z_t = torch.as_tensor(np.random.default_rng(1).normal(size=(1, M * DIM)))
    with torch.no_grad():
        value = float(rb.block_log_likelihood(x, y, z_t)[0])
    Mn, b = q.scale_tril().detach().numpy(), q.b.detach().numpy()
    S, md, sn2 = Mn @ Mn.T, M * DIM, float(lik.noise.detach())
    theta = b[:md] + Mn[:md, :md] @ z_t[0].numpy()
    gain = S[md:, :md] @ np.linalg.inv(S[:md, :md])
    mean_s = b[md:] + gain @ (theta - b[:md])
    cov_s = S[md:, md:] - gain @ S[:md, md:]
    phi = np_features(x.numpy(), theta.reshape(M, DIM))
    yn = y.numpy()
    expected_sq = np.sum((yn - phi @ mean_s) ** 2) + np.trace(phi @ cov_s @ phi.T)
    dense = -0.5 * expected_sq / sn2 - 0.5 * N * np.log(2 * np.pi * sn2)
    assert value == pytest.approx(dense, rel=1e-11)
    plain = SVBSSGPBound(q, lik, N, rao_blackwell=False)
    K = 5000
    z = torch.cat([z_t.expand(K, -1), torch.as_tensor(np.random.default_rng(2).normal(size=(K, 2 * M)))], 1)
    with torch.no_grad():
        samples = plain.block_log_likelihood(x, y, z).numpy()
    assert abs(samples.mean() - value) < 5 * samples.std() / math.sqrt(K)


def _grad(q, lik, fn):
    params = [q.b, q.raw_diag, q.offdiag, q.raw_signal] + list(lik.parameters())
    for p in params:
        p.grad = None
    fn().backward()
    return torch.cat([p.grad.reshape(-1) for p in params])


@pytest.mark.parametrize("partition", ["random", "kmeans"])
@pytest.mark.parametrize("rao_blackwell", [True, False])
def test_mean_of_p_block_gradients_is_the_full_gradient(partition, rao_blackwell):
    """Theorem 1 / eq. (7): for fixed z, (1/p) sum_i grad of the per-block objective (which
    scales the block's log-likelihood by p, the s_n constant included) = the full-data gradient
    of -L / n, for every parameter (b, M, s_s^2, s_n^2)."""
    from sklearn.cluster import KMeans

    q, lik, x, y = _problem()
    p = 8
    if partition == "random":
        perm = np.random.default_rng(3).permutation(N)
        blocks = np.array_split(perm, p)
        scale = None  # the trainer's minibatches: n / |batch| = p here
    else:
        labels = KMeans(n_clusters=p, n_init=1, random_state=0).fit(x.numpy()).labels_
        blocks = [np.flatnonzero(labels == k) for k in range(p)]
        scale = float(p)
    sizes = [len(b) for b in blocks]
    assert (min(sizes) == max(sizes)) == (partition == "random")

    def objective(scale):
        return SVBSSGPBound(
            q, lik, N, rao_blackwell=rao_blackwell, scale=scale, z_samples=3, generator=torch.Generator().manual_seed(7)
        )  # the same z at every call

    full = _grad(q, lik, lambda: objective(None)(x, y))
    per_block = [_grad(q, lik, lambda b=b: objective(scale)(x[b], y[b])) for b in blocks]
    mean = torch.stack(per_block).mean(0)
    assert float((mean - full).norm() / full.norm()) < 1e-12
    assert float(torch.stack(per_block).std(0).norm() / full.norm()) > 1e-2  # the blocks differ


def test_analytic_kl_gradient_is_the_mean_of_single_sample_gradients():
    """App. D: d[log q(alpha) - log p(alpha)]/dM = -M^-T + P^-1 alpha z^T, d/db = P^-1 alpha at
    alpha = M z + b; their mean over 4000 z matches the gradient of the analytic KL (5 SE)."""
    q, _, _, _ = _problem(seed=1)
    Mt = q.scale_tril().detach().clone().requires_grad_(True)
    bt = q.b.detach().clone().requires_grad_(True)
    P = q.prior_variance().detach()
    gaussian_kl_tril(bt, Mt, P).backward()
    Mn, b, Pn = Mt.detach().numpy(), bt.detach().numpy(), P.numpy()
    K = 4000
    z = np.random.default_rng(4).normal(size=(K, q.D))
    alpha = b + z @ Mn.T
    g_b = alpha / Pn
    g_M = -np.linalg.inv(Mn).T[None] + (alpha / Pn)[:, :, None] * z[:, None, :]
    low = np.tril_indices(q.D)
    g_M = g_M[:, low[0], low[1]]
    for samples, analytic in ((g_b, bt.grad.numpy()), (g_M, Mt.grad.numpy()[low])):
        se = samples.std(0) / math.sqrt(K)
        assert np.all(np.abs(samples.mean(0) - analytic) < 5 * se + 1e-12)
        assert np.median(se / (np.abs(analytic) + 1e-3)) < 0.5  # not vacuous


def test_fixed_partition_blocks_are_visited_once_per_epoch_in_random_order():
    x = torch.arange(12, dtype=torch.float64)[:, None]
    y = torch.zeros(12, dtype=torch.float64)
    blocks = [torch.tensor([0, 1, 2]), torch.tensor([3, 4]), torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10, 11])]
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    seen = []

    def objective(xb, yb):
        seen.append(tuple(int(v) for v in xb[:, 0]))
        return (w**2).sum() + 0 * xb.sum()

    result = train(
        objective,
        [w],
        x,
        y,
        TrainerSettings(max_iters=None, max_epochs=5, batch_size=5, eval_every=0, progress=False, stop_rule="none"),
        generator=torch.Generator().manual_seed(0),
        blocks=blocks,
    )
    as_tuples = [tuple(b.tolist()) for b in blocks]
    assert result.iterations == 20 and result.epochs == 5
    epochs = [seen[4 * e : 4 * e + 4] for e in range(5)]
    assert all(sorted(e) == sorted(as_tuples) for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1  # a new order each epoch


def _method(n: int, overrides=()):
    rng = np.random.default_rng(n)
    x = torch.as_tensor(rng.normal(size=(n, 3)))
    y = torch.sin(x[:, 0]) + 0.1 * torch.as_tensor(rng.normal(size=n))
    empty = x[:0]
    data = build.Tensors(x, y, empty, y[:0], empty, y[:0])
    cfg = compose(
        [
            "model=svbssgp",
            "model.num_frequencies=5",
            "model.partitions=4",
            f"model.train_partitions={n // 100}",
            "model.elbo_samples=0",
            "trainer.max_iters=6",
            "trainer.eval_every=0",
            "progress=false",
            *overrides,
        ]
    )
    method = family.build(cfg, data, "regression")
    return cfg, method, data


@pytest.mark.parametrize("train_blocks", ["random", "kmeans"])
def test_a_step_reads_only_its_block_whatever_n(train_blocks):
    """Constant work per step at a fixed block size (Sec. 4.1): with p = n / 100, every step
    evaluates the features of exactly its block's rows (about 100), for n = 1000 and n = 8000."""
    touched = {}
    for n in (1000, 8000):
        cfg, method, data = _method(n, [f"model.train_blocks={train_blocks}"])
        stage = method.stages[0]
        counts = []
        features = stage.objective.features

        def counting(x, freqs, features=features, counts=counts):
            counts.append(x.shape[0])
            return features(x, freqs)

        stage.objective.features = counting
        settings = build.trainer_settings(cfg, n, "regression", method=method, n_val=0)
        run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
        assert len(counts) == 6  # one feature evaluation per step (z_samples batched)
        touched[n] = counts
    if train_blocks == "random":
        assert touched[1000] == touched[8000] == [100] * 6
    else:  # uneven k-means blocks whose mean size is n / p = 100
        assert max(touched[1000] + touched[8000]) < 400 and min(touched[1000] + touched[8000]) >= 1


def test_offdiagonal_of_M_has_its_own_group_and_smaller_default_lr():
    cfg, method, data = _method(1000)
    settings = build.trainer_settings(cfg, 1000, "regression", method=method, n_val=0)
    from gpdlm_cli.training import stage_settings

    s = stage_settings(settings, method.stages[0])
    assert s.lr == family.SVBSSGP_LR and s.lr_scale == {"variational_offdiag": 0.01}
    assert s.batch_size == 100
    assert method.group_names == ["variational", "variational_offdiag", "kernel", "likelihood"]
    cfg2, method2, _ = _method(1000, ["trainer.lr_scale={variational_offdiag:0.5}", "trainer.lr=0.003"])
    s2 = stage_settings(build.trainer_settings(cfg2, 1000, "regression", method=method2, n_val=0), method2.stages[0])
    assert s2.lr == 0.003 and s2.lr_scale == {"variational_offdiag": 0.5}
    _, method3, _ = _method(1000, ["model.train_blocks=kmeans", "model.cov=diag"])
    stage = method3.stages[0]  # the k-means blocks partition the rows; a block's weight is p
    rows = torch.cat(stage.blocks).sort().values
    assert torch.equal(rows, torch.arange(1000)) and stage.objective.scale == len(stage.blocks) == 10
    assert "variational_offdiag" not in method3.group_names and stage.lr_scale == {}
