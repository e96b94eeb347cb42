"""trainer=fast (issue 21, item 1): L-BFGS on the deterministic full-batch stages a family marks safe,
the paper's first-order protocol everywhere else, and an optimum at least as good as the paper's."""

from __future__ import annotations

import pytest

from gpdlm_cli import build
from gpdlm_cli.run.train import run_train
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training import stage_settings
from gpdlm_cli.run.prepare import prepare

from ..conftest import compose

BASE = ["dataset.split.train_size=200", "trainer.eval_every=0", "progress=false", "threads=1", "tracking.enabled=false"]


def _m(overrides):
    return [] if any(o in ("model=exact",) or "scgd" in o for o in overrides) else ["model.num_inducing=15"]


def _stage_optimizers(overrides):
    cfg = compose(BASE + list(overrides) + _m(overrides))
    prepared = prepare(cfg)
    splits, method, settings = prepared.splits, prepared.method, prepared.settings
    return {s.name: stage_settings(settings, s, splits.n_train).optimizer for s in method.stages if s.solve is None}


@pytest.mark.parametrize("overrides, expected", [
    (["model=dlm"], {"dlm": "lbfgs"}),
    (["model=dlm_fixed"], {"svgp": "lbfgs", "dlm": "lbfgs"}),
    (["model=svgp"], {"svgp": "lbfgs"}),
    (["model=sgpr"], {"sgpr": "lbfgs"}),
    (["model=exact"], {"exact": "lbfgs"}),
    (["model=dlm", "dataset=doctor_visits", "estimator=quadrature"], {"dlm": "lbfgs"}),
    (["model=dlm", "dataset=doctor_visits", "estimator=bmc"], {"dlm": "adam"}),  # sampling: stochastic
    (["model=dlm", "trainer.batch_size=50"], {"dlm": "adam"}),  # minibatches: stochastic
    (["model=dlm", "features=nn"], {"dlm": "adam"}),  # a network: first-order
    (["model=scgd", "features=nn", "trainer.batch_size=32"], {"scgd": "adam"}),
])
def test_fast_uses_lbfgs_exactly_on_deterministic_full_batch_stages(overrides, expected):
    assert _stage_optimizers(overrides + ["trainer=fast"]) == expected
    paper = _stage_optimizers(overrides)
    assert set(paper.values()) == {"adam"}, paper  # trainer=paper (the default) never switches


@pytest.mark.slow
def test_fast_reaches_the_paper_optimum_or_lower_in_fewer_iterations(tmp_path):
    """SGPR on 200 concrete rows: the paper's Adam protocol (1000 iterations) against trainer=fast."""
    runs = {}
    for protocol in ("paper", "fast"):
        cfg = compose(BASE + ["model=sgpr", "model.num_inducing=15", f"trainer={protocol}", "trainer.max_iters=1000"])
        runs[protocol] = run_train(cfg, tmp_path / protocol, tracker=NullTracker())
    assert runs["fast"]["final_loss"] <= runs["paper"]["final_loss"] + 1e-3 / 1  # per datum
    assert runs["fast"]["iterations"] < runs["paper"]["iterations"] / 4
    assert runs["fast"]["converged"] == 1


@pytest.mark.parametrize("override", ["trainer.protocol=quick", "trainer.fast_window=1", "trainer.fast_tol=-1"])
def test_bad_protocol_settings_fail_before_training(override):
    with pytest.raises(GpdlmError, match=override.split("=")[0].split(".")[1]):
        build.validate_config(compose(BASE + [override]))
