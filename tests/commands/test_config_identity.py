"""What makes two runs the same run (``tracking.identity``): the config hash leaves out what does not
change a result (threads, device, ...), and stores written with the first version of the hash keep
working -- ``sweep.skip_finished`` finds their runs, ``compare``/``select`` regroup them."""

from __future__ import annotations

import hashlib
import json

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.tracking import flatten
from gpdlm_cli.tracking.identity import config_hash, config_hashes, params_hash, run_identity

from ..conftest import compose
from .conftest import copy_store, make_experiment, make_run


def old_hash(cfg) -> str:
    """The config hash as gpdlm wrote it before version 2 (a frozen copy of that code)."""
    d = OmegaConf.to_container(cfg, resolve=True)
    for k in ("tracking", "progress", "sweep", "hydra"):
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def logged_params(cfg) -> dict:
    """The params a run of ``cfg`` logs (``TrackedRun.started``)."""
    return {k: ("None" if v is None else str(v)) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()}


@pytest.mark.slow
def test_threads_device_and_checkpoints_do_not_change_the_hash():
    base = compose(["model=svgp", "seed=1"])
    same = [
        ["threads=1"],
        ["threads=2"],
        ["device=cpu"],
        ["trainer.checkpoint_every=0"],
        ["progress=false"],
        ["tracking.experiment=other"],
        ["bias.repetitions=7"],
        ["sweep.skip_finished=true"],
    ]
    for extra in same:
        assert config_hash(compose(["model=svgp", "seed=1", *extra])) == config_hash(base), extra
    for extra in (["seed=2"], ["objective.beta=0.5"], ["dtype=float32"], ["trainer.eval_every=10"]):
        assert config_hash(compose(["model=svgp", "seed=1", *extra])) != config_hash(base), extra
    # the first version is still computed, to find the runs of existing stores
    assert config_hashes(base) == (config_hash(base), old_hash(base))


def test_the_hash_is_recomputed_from_a_runs_params():
    cfg = compose(["model=dlm", "threads=2", "trainer.lr_scale={kernel:0.1}"])
    assert params_hash(logged_params(cfg)) == config_hash(cfg)
    # a run of version 2 carries its hash; an older run's is recomputed from its params
    assert run_identity({}, {"gpdlm.config_hash": "abc", "gpdlm.config_hash_version": "2"}) == "abc"
    assert run_identity(logged_params(cfg), {"gpdlm.config_hash": old_hash(cfg)}) == config_hash(cfg)
    assert run_identity(logged_params(cfg), {}) is None


def test_an_old_store_counts_a_seed_run_at_two_thread_counts_once(template_db, tmp_path):
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.analysis.store import load_runs

    uri = copy_store(template_db, tmp_path)
    client = MlflowClient(uri)
    exp_id = make_experiment(client, uri, "old")
    for seed, threads, rmse in ((0, 1, 1.0), (0, 2, 1.0), (1, 1, 2.0)):
        cfg = compose(["model=svgp", f"seed={seed}", f"threads={threads}"])
        make_run(
            client,
            exp_id,
            logged_params(cfg),
            {"test_rmse": rmse},
            tags={"gpdlm.config_hash": old_hash(cfg)},
            start_time=1000 + threads,
        )
    notes: list[str] = []
    runs = load_runs(client, client.get_experiment_by_name("old"), notes=notes)
    assert sorted((r.params["seed"], r.params["threads"]) for r in runs) == [("0", "2"), ("1", "1")]
    assert notes == [
        "1 rerun(s) of identical configurations (same gpdlm.config_hash) counted once: the latest run of each is used"
    ]


@pytest.mark.slow
def test_skip_finished_finds_a_run_of_an_old_store(template_db, tmp_path):
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.run.train import run_train

    uri = copy_store(template_db, tmp_path / "store")
    over = [
        "dataset=diabetes",
        "model=svgp",
        "model.num_inducing=10",
        "dataset.split.train_size=60",
        "trainer.max_iters=4",
        "progress=false",
        "threads=1",
        f"tracking.uri={uri}",
        "tracking.experiment=old",
    ]
    cfg = compose(over)
    client = MlflowClient(uri)
    exp_id = make_experiment(client, uri, "old")
    make_run(client, exp_id, logged_params(cfg), {"test_rmse": 1.0}, tags={"gpdlm.config_hash": old_hash(cfg)})
    assert run_train(cfg, tmp_path / "a", skip_finished=True) is None
    # another thread count is the same run too once it is tagged with the new hash
    metrics = run_train(compose([*over, "seed=5"]), tmp_path / "b", skip_finished=True)
    assert metrics is not None
    assert run_train(compose([*over, "seed=5", "threads=2"]), tmp_path / "c", skip_finished=True) is None
    new = client.search_runs([exp_id], "params.seed = '5'")
    assert [r.data.tags["gpdlm.config_hash_version"] for r in new] == ["2"]
