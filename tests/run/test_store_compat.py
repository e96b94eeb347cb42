"""Stores written before the config schema (issue 46, item 3) keep matching: ``sweep.skip_finished``
recognises their runs. The fixture is a real MLflow store written by main at d697985 (before the
schema), vacuumed and gzipped (25 kB), made with::

    gpdlm train model=sgpr model.num_inducing=10 dataset=concrete dataset.split.train_size=100 \\
        trainer.max_iters=3 threads=1 progress=false tracking.uri=sqlite:///.../mlflow.db \\
        tracking.experiment=main_store tracking.system_metrics=null

The config the schema checks is the config Hydra composes (the schema validates it, it does not
rewrite it); this test fails the day a schema change moves a key, changes a default's type or adds a key
to the hashed config without a new hash version. Version 3 (issue 46) moved the recurrent GP models'
protocol keys from ``trainer`` to ``model.training``: the store's version-2 hash is found among the config's
hashes (``config_hashes``), and its run's identity recomputed from its params is today's hash."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from gpdlm_cli.tracking.identity import VERSION, config_hash, config_hashes, run_identity

from ..conftest import compose

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store_main_d697985.db.gz"
OVERRIDES = [
    "model=sgpr",
    "model.num_inducing=10",
    "dataset=concrete",
    "dataset.split.train_size=100",
    "trainer.max_iters=3",
    "threads=1",
    "progress=false",
    "tracking.experiment=main_store",
    "tracking.system_metrics=null",
]
#: the run's gpdlm.config_hash tag in the fixture store (main d697985)
MAIN_HASH = "dd023b198764e93d"


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "mlflow.db"
    with gzip.open(FIXTURE) as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return f"sqlite:///{db}"


def _tracker(uri):
    from gpdlm_cli.tracking.tracker import MlflowTracker

    return MlflowTracker(uri, "main_store")


@pytest.mark.slow
def test_skip_finished_recognises_the_runs_of_a_store_written_before_the_schema(store):
    from gpdlm_cli.build import validate_config

    cfg = compose(OVERRIDES + [f"tracking.uri={store}"])
    validate_config(cfg)  # the schema accepts the config main ran
    tracker = _tracker(store)
    [run] = tracker.client.search_runs([tracker.experiment_id])
    assert run.data.tags["gpdlm.config_hash_version"] == "2" and VERSION == "3"
    assert run.data.tags["gpdlm.config_hash"] == MAIN_HASH == config_hashes(cfg)[1] != config_hash(cfg)
    assert run_identity(run.data.params, run.data.tags) == config_hash(cfg)
    assert tracker.has_finished_run("gpdlm.config_hash", config_hashes(cfg))
    # and a different config is not mistaken for it
    other = compose(OVERRIDES + [f"tracking.uri={store}", "trainer.max_iters=4"])
    assert not tracker.has_finished_run("gpdlm.config_hash", config_hashes(other))
    # (run_train asks exactly this before it trains: tracker.has_finished_run("gpdlm.config_hash", config_hashes(cfg)))
