"""The paper's exact case, ranked (Shoham & Avron Table 2's story; rkhs-spec C6): NN + linear kernel
features, batch 16, SCGD reaches a lower full-data NLML than BSGD. The network objective has many
optima, so only a seed-averaged ranking is sound."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import compose


def best_train_nlml(tmp_path, model: str, seed: int) -> float:
    cfg = compose(
        [
            f"model={model}",
            "features=nn",
            "features.widths=[32,32]",
            "kernel=linear",
            "trainer.batch_size=16",
            "dataset.split.train_size=300",
            "dataset.split.val_fraction=0",
            "dataset.split.test_fraction=0.1",
            "trainer.optimizer=adam",
            "trainer.lr=0.01",
            "trainer.max_iters=null",
            "trainer.max_epochs=80",
            "trainer.eval_every=0",
            "trainer.eval_every_epochs=1",
            "trainer.keep_best=train_nlml",
            "trainer.stop_rule=none",
            f"seed={seed}",
            "progress=false",
            "tracking.enabled=false",
            "threads=1",
        ]
    )
    return run_train(cfg, tmp_path / f"{model}{seed}", tracker=NullTracker())["train_nlml_norm"]


@pytest.mark.slow
def test_scgd_beats_bsgd_at_batch_16_on_network_features(tmp_path):
    """300 concrete rows, a 32-32 ReLU network with the linear kernel (d = 32, b = 16 < d), Adam
    lr 0.01, 80 epochs (1,440 steps), the best per-epoch full-data NLML (standardised units), seeds
    0-2: mean(SCGD) <= mean(BSGD) - 0.03 (measured -0.245 vs -0.152 with the data-normalised, learned
    linear kernel and b_t = (t + 1)^-1/2; -0.29 vs -0.19 before)."""
    scgd = [best_train_nlml(tmp_path, "scgd", s) for s in (0, 1, 2)]
    bsgd = [best_train_nlml(tmp_path, "bsgd", s) for s in (0, 1, 2)]
    assert np.mean(scgd) <= np.mean(bsgd) - 0.03, (scgd, bsgd)
