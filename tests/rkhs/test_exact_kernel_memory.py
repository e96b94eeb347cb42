"""Exact-kernel BSGD's evaluation (issue 41): the chunked in-place posterior equals the dense one, a run whose
dense evaluation cannot fit the memory budget is refused in one line before training, and the Gaussian study's
bsgd_rbf arm evaluates exactly every 5 epochs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.models.bayesian_linear import CholeskyLog, kernel_cholesky, posterior_bytes
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import NoRunTracker, compose

SMALL = ["dataset.split.train_size=200", "progress=false", "tracking.enabled=false", "threads=1"]
EXACT = ["model=bsgd", "features=nn", "features.widths=[16,16]", "kernel=rbf", "trainer.batch_size=24"]


def _rbf(a, b):
    return 1.3 * torch.exp(-0.5 * torch.cdist(a / 0.7, b / 0.7).square())


def test_chunked_in_place_cholesky_equals_the_dense_one():
    """Blocks of 7 rows into one buffer, factorised in place: the dense torch factor to 1e-12; the upper
    triangle is zero."""
    z = torch.randn(150, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s2 = torch.tensor(0.05, dtype=torch.float64)
    L = kernel_cholesky(_rbf, z, s2, block_rows=7)
    dense = torch.linalg.cholesky(_rbf(z, z) + s2 * torch.eye(150, dtype=torch.float64))
    assert torch.allclose(L, dense, rtol=0, atol=1e-12)
    assert float(L.triu(1).abs().max()) == 0.0


def test_a_failed_factorisation_is_retried_with_jitter_on_a_rebuilt_matrix():
    """Duplicated rows and s2 = 0: singular; the retry adds 1e-10 x mean diagonal to a rebuilt K (the failed
    attempt overwrote it) and counts one jitter event; the factor reproduces that K."""
    z = torch.randn(40, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z = torch.cat([z, z])
    log = CholeskyLog()
    L = kernel_cholesky(_rbf, z, 0.0, block_rows=16, log=log)
    assert log.jitter_events == 1
    K = _rbf(z, z)
    jitter = 1e-10 * float(K.diagonal().mean())
    for tries in range(7):
        if float((L @ L.T - K).diagonal().mean()) <= jitter * 10**tries * 1.01:
            break
    np.testing.assert_allclose((L @ L.T - K).numpy(), jitter * 10**tries * np.eye(80), atol=1e-9)


def test_exact_kernel_posterior_equals_the_dense_formula():
    """The model's posterior (chunked, in place) against the dense R&W Alg. 2.1 in numpy to 1e-10."""
    cfg = compose([*SMALL, *EXACT, "model.block_rows=13"])
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    model = method.model
    with torch.no_grad():
        z = model.inputs(data.x_train)
        K = model.covariance(z).numpy() + float(model.noise) * np.eye(z.shape[0])
    y = data.y_train.numpy()
    sign, logdet = np.linalg.slogdet(K)
    nlml = 0.5 * (y @ np.linalg.solve(K, y) + logdet) / len(y) + 0.5 * np.log(2 * np.pi)
    assert sign > 0 and abs(model.nlml() - nlml) < 1e-10
    np.testing.assert_allclose(model.posterior().alpha.numpy(), np.linalg.solve(K, y), rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["model.posterior_memory_gb=0.1"],
            "model=bsgd kernel=rbf: the dense posterior on 200 training rows needs 0.3 GB, over the memory budget "
            "of 0.1 GB (model.posterior_memory_gb); set model.posterior_max_rows=0 or less",
        ),
        (
            ["model.posterior_memory_gb=-1"],
            "the 'posterior_memory_gb' parameter of model=bsgd must be a finite float > 0 (GB) or null; got -1",
        ),
    ],
)
def test_a_posterior_over_the_memory_budget_is_refused_before_any_run(tmp_path, overrides, message):
    cfg = compose([*SMALL, *EXACT, "trainer.max_iters=5", *overrides])
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value) and "\n" not in str(e.value)


def test_memory_budget_names_the_rows_that_fit():
    """57,248 rows (keggundirected) on the CPU: 24.4 GB in place (one n x n), 48.8 GB on a GPU (K and L); a
    24 GB budget fits 56,459 rows on the CPU (with a 256 MB block of kernel rows)."""
    assert posterior_bytes(57248, "cpu") - posterior_bytes(0, "cpu") == 8 * 57248**2
    assert posterior_bytes(57248, "cuda") - posterior_bytes(0, "cuda") == 16 * 57248**2
    cfg = compose([*SMALL, *EXACT, "model.posterior_memory_gb=24", "model.posterior_max_rows=60000", "device=cpu"])
    from gpdlm_cli.methods import rkhs

    with pytest.raises(GpdlmError, match=r"needs 24\.7 GB, .* set model\.posterior_max_rows=56459 or less"):
        rkhs.check_posterior_memory(cfg, 57248)
    rkhs.check_posterior_memory(cfg, 56459)
    with pytest.raises(GpdlmError):
        rkhs.check_posterior_memory(cfg, 56460)


@pytest.mark.slow
def test_gaussian_study_bsgd_arm_evaluates_every_5_epochs(tmp_path):
    """rkhs_gaussian_study with the bsgd_rbf arm, 10 epochs on 200 rows: train_nlml is evaluated after epochs 5
    and 10 only (the last by the final evaluation; steps 40 and 80 at 8 steps an epoch); the scgd_rff arm keeps
    every epoch."""
    common = [*SMALL, "+experiment=rkhs_gaussian_study", "trainer.max_epochs=10", "trainer.batch_size=24"]
    cfg = compose([*common, "experiment/rkhs_arm@_global_=bsgd_rbf", "features.widths=[8,8]"])
    assert cfg.trainer.eval_every_epochs == 5
    calls = []
    from gpdlm_cli.models import exact_kernel

    original = exact_kernel.kernel_cholesky

    def counting(*a, **k):
        calls.append(1)
        return original(*a, **k)

    exact_kernel.kernel_cholesky = counting
    try:
        tracker = NullTracker()
        run_train(cfg, tmp_path, tracker=tracker)
    finally:
        exact_kernel.kernel_cholesky = original
    # the in-training evaluation (epoch 5) and the final iterate's (epoch 10: Loop._finish under keep_best)
    assert [s for s, _ in tracker.steps["train_nlml"]] == [40, 80]
    assert len(calls) in (2, 3)  # epochs 5 and 10 (+ 1 when the restored best iterate is epoch 5's), never per epoch
    rff = compose([*common, "experiment/rkhs_arm@_global_=scgd_rff"])
    assert rff.trainer.eval_every_epochs == 1
