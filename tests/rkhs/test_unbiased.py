"""Which minibatch gradients are unbiased (Shoham & Avron Sec. 3-4; rkhs-spec C2, 1.6).

Set-up: 500 rows of concrete, RFF features with d = 64 on the raw inputs, theta = (raw lengthscale,
raw magnitude, raw noise) at the full-data optimum theta* (L-BFGS), w = w*, or at a fixed non-optimal
point; batches of 16 drawn uniformly without replacement. A statistic is |mean - full gradient| / SE
over R batch gradients, per component (SE by batch means for a chain); "unbiased" means every tested
component is within 3.5 SE (at a fixed seed; ~0.05% false alarm per component), "biased" that some
component is beyond 5 SE.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpdlm_cli.objectives import SCGD, BatchNLML, Minimax

from ._setup import hyperparameters, l_gradient_numpy, model_at_optimum, non_optimal_model

N, D, B = 500, 64, 16


def flat_grad(params):
    return torch.cat([p.grad.reshape(-1) for p in params])


def call_grad(objective, params, x, y):
    for p in params:
        p.grad = None
    objective(x, y).backward()
    return flat_grad(params)


def batches(R, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randperm(N, generator=g)[:B] for _ in range(R)]


def z_scores(G, reference):
    G = np.asarray(G)
    se = G.std(0, ddof=1) / np.sqrt(G.shape[0])
    return (G.mean(0) - np.asarray(reference)) / se


def non_optimal_scgd():
    """SCGD at ``non_optimal_model`` with F~ = F(theta) (``initialise``) and w = w* + 0.3 N(0, I)."""
    model = non_optimal_model(N, D)
    scgd = SCGD(model, N)
    scgd.initialise()
    with torch.no_grad():
        scgd.w.add_(0.3 * torch.randn(D, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    return model, scgd


@pytest.mark.slow
def test_scgd_step_with_the_exact_F_is_unbiased_at_a_non_optimal_point_and_bsgd_is_not():
    """SCGD with F~ = F(theta) held fixed, at a non-optimal (theta, w) where the full gradient is far
    from 0: the mean of the 500 per-point steps (batch calls of one row) equals the gradient of l/(2n)
    from numpy's closed forms to 1e-12 relative in all 3 + d components (measured 2e-16), as does the
    full-batch call (3e-16); R = 1000 real batch-16 calls (uniform without replacement) have means
    within 3.5 SE of it in every component (measured max 1.9 SE). BSGD's batch NLML gradient at theta*
    (R = 300) is > 5 SE from 0 in some component (measured 65 SE in the magnitude; at d = 100,
    R = 4000: 458 SE, rkhs-spec C2)."""
    model, scgd = non_optimal_scgd()
    x, y = model.x_train, model.y_train
    params = hyperparameters(model) + [scgd.w]
    ref = l_gradient_numpy(model, scgd.w)
    assert np.abs(ref[:3]).min() > 1e-2  # far from a stationary point
    per_point = torch.stack([call_grad(scgd, params, x[i : i + 1], y[i : i + 1]) for i in range(N)]).numpy()
    scale = np.abs(ref).max()
    np.testing.assert_allclose(per_point.mean(0), ref, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(call_grad(scgd, params, x, y).numpy(), ref, rtol=0, atol=1e-12 * scale)
    G = [call_grad(scgd, params, x[idx], y[idx]).numpy() for idx in batches(1000, seed=5)]
    z = z_scores(G, ref)
    assert np.abs(z).max() < 3.5, z

    model, _ = model_at_optimum(N, D)
    x, y = model.x_train, model.y_train
    bsgd = BatchNLML(model)
    theta = hyperparameters(model)
    G = [call_grad(bsgd, theta, x[idx], y[idx]).numpy() for idx in batches(300)]
    z = z_scores(G, 0.0)
    assert np.abs(z).max() > 5, z


def batch_means_z(G, blocks=20):
    """|mean| / SE per component of an autocorrelated chain, SE by non-overlapping batch means."""
    G = np.asarray(G)
    means = G.reshape(blocks, -1, G.shape[1]).mean(1)
    return G.mean(0) / (means.std(0, ddof=1) / np.sqrt(blocks))


def scgd_chain(schedule: dict, steps=1000, burn=50):
    """The hyperparameter part of SCGD's steps at theta* (the full gradient is 0 there), parameters held
    fixed and F~ refreshed after every step as in training: a stationary chain after the burn-in.
    ``schedule``: SCGD's b0 / b_decay / b_min ({} = its defaults, those of conf/model/scgd.yaml)."""
    model, _ = model_at_optimum(N, D)
    x, y = model.x_train, model.y_train
    scgd = SCGD(model, N, **schedule)
    scgd.initialise()
    theta = hyperparameters(model)
    G = []
    for t, idx in enumerate(batches(steps + burn, seed=2), start=1):
        g = call_grad(scgd, theta + [scgd.w], x[idx], y[idx])
        scgd.after_step(t, 0)
        if t > burn:
            G.append(g[:3].numpy())
    return batch_means_z(G)


@pytest.mark.slow
def test_scgd_with_the_papers_constant_weight_is_biased_and_the_default_schedule_is_not():
    """Chains of 1,000 steps after 50 of burn-in at theta*, z by batch means (20 blocks of 50: the chain is
    autocorrelated, so an i.i.d. SE would be wrong): b_t = 0.9 (the paper) is > 5 SE from 0 in some
    hyperparameter component (measured -64, +41, +4.3 SE; 2,000 steps: -89, +59, +4.5) because
    E[F~^-1] != F^-1; the default b_t = (t + 1)^-1/2 is within 3.5 SE in all three (measured
    -0.4, +1.1, +1.0; 2,000 steps: -1.1, +2.0, -0.1)."""
    z = scgd_chain({"b0": 0.9, "b_decay": 0.0})
    assert np.abs(z).max() > 5, z
    z = scgd_chain({})
    assert np.abs(z).max() < 3.5, z


def test_minimax_min_and_max_step_estimators_are_unbiased_at_fixed_zeta_and_B():
    """At a fixed (zeta, B) away from the saddle (A = 1.5 F(theta*) + I, random symmetric B with
    ||B|| = 0.5, mu = 10), R = 400 batch-16 calls: the min-step gradient (wrt theta, w and M, with
    A = C sym(M) C^T) over the trainer's batch and the max-step gradient (wrt B) over the
    objective's own independent batch have means within 3.5 SE of the full-data gradient of
    Psi / (2n) (the same objective on the full batch): theta and w per component, M and B along 3
    random symmetric directions each (measured max 2.2 SE over the 73 statistics). The dual batch
    comes from the objective's seeded generator: the same seed gives the same B-gradient, another
    seed another one, the min-step gradient is the same for both."""
    model, _ = model_at_optimum(N, D)
    x, y = model.x_train, model.y_train
    mm = Minimax(model, N, mu=10.0, seed=3)
    mm.initialise()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        F = model.full_F()
        target = 1.5 * F + torch.eye(D, dtype=torch.float64)
        C = mm.C
        M = torch.linalg.solve_triangular(C, torch.linalg.solve_triangular(C, target, upper=False).T, upper=False)
        mm.M.copy_(0.5 * (M + M.T))
        Bm = rng.standard_normal((D, D))
        Bm = Bm + Bm.T
        mm.B.copy_(torch.as_tensor(0.5 * Bm / np.linalg.norm(Bm)))
    theta = hyperparameters(model)
    params = theta + [mm.w, mm.M, mm.B]
    dirs = []
    for _ in range(6):
        V = rng.standard_normal((D, D))
        dirs.append((V + V.T).ravel())
    dirs = np.array(dirs)

    def stats(g):
        g = g.numpy()
        k = 3 + D
        gM, gB = g[k : k + D * D], g[k + D * D :]
        return np.concatenate([g[:k], dirs[:3] @ gM, dirs[3:] @ gB])

    full = stats(call_grad(mm, params, x, y))  # b = n: the exact gradient of the full objective
    G = [stats(call_grad(mm, params, x[idx], y[idx])) for idx in batches(400, seed=4)]
    z = z_scores(G, full)
    assert np.abs(z).max() < 3.5, z
    assert np.all(np.abs(np.asarray(G).std(0)) > 0)  # both steps are stochastic

    idx = batches(1, seed=9)[0]
    again = Minimax(model, N, mu=10.0, seed=3)
    other = Minimax(model, N, mu=10.0, seed=4)
    for o in (again, other):
        o.load_state_dict(mm.state_dict())
        o.mu = mm.mu
    mm.generator.manual_seed(3)
    g0 = call_grad(mm, params, x[idx], y[idx])
    g1 = call_grad(again, theta + [again.w, again.M, again.B], x[idx], y[idx])
    g2 = call_grad(other, theta + [other.w, other.M, other.B], x[idx], y[idx])
    nB = D * D
    assert torch.equal(g0, g1)
    assert torch.equal(g0[:-nB], g2[:-nB]) and not torch.allclose(g0[-nB:], g2[-nB:])
