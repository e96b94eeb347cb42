"""What makes two runs the same run (``tracking.identity``): the config hash leaves out what does not
change a result (threads, device, ...), and stores written with the earlier versions of the hash keep
working -- ``sweep.skip_finished`` finds their runs, ``compare``/``select`` regroup them, checkpoints resume.

Version 3 (issue 46) moved the recurrent protocol keys from ``trainer.*`` to ``model.training.*``: the runs of
fixtures/store_v2.json were logged by gpdlm 5a56105 (version 2, the old names; fixtures/make_store_v2.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.tracking import flatten
from gpdlm_cli.tracking.identity import (
    ADDED_KEYS,
    PROTOCOL_KEYS,
    canonical_config,
    canonical_params,
    config_hash,
    config_hashes,
    params_hash,
    run_identity,
)

from ..conftest import compose
from .conftest import copy_store, make_experiment, make_run

FIXTURE = Path(__file__).parent / "fixtures" / "store_v2.json"
#: conf/trainer/paper.yaml's recurrent keys before version 3 (every config carried them)
VERSION_2_TRAINER = {
    "algorithm": "full",
    "kernel_refresh_every": None,
    "theta_steps": 10,
    "final_theta_steps": 100,
    "lr_over_tau": True,
    "refresh_check": True,
}


def store_v2() -> dict:
    """{name: {overrides (today's names), params, tags, legacy_config_hash, config_yaml}} of runs logged by
    gpdlm 5a56105 (fixtures/make_store_v2.py)."""
    return json.loads(FIXTURE.read_text())["runs"]


def old_hash(cfg) -> str:
    """The config hash as gpdlm wrote it before version 2 (a frozen copy of that code), of a non-recurrent
    config as gpdlm composed it then (the recurrent protocol keys at their defaults under ``trainer``)."""
    d = OmegaConf.to_container(cfg, resolve=True)
    d["trainer"].update(VERSION_2_TRAINER)
    assert d["trainer"].pop("checkpoint_minutes") == 10.0  # added since (ADDED_KEYS): no old run had it
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
    # the first version is still computed, to find the runs of existing stores (svgp: the protocol keys
    # at their version-2 defaults, as every config carried them then)
    v3, v2, v1 = config_hashes(base)
    assert v3 == config_hash(base) and len({v3, v2, v1}) == 3


def test_the_hash_is_recomputed_from_a_runs_params():
    cfg = compose(["model=dlm", "threads=2", "trainer.lr_scale={kernel:0.1}"])
    assert params_hash(logged_params(cfg)) == config_hash(cfg)
    # a run of version 3 carries its hash; an older run's is recomputed from its params
    assert run_identity({}, {"gpdlm.config_hash": "abc", "gpdlm.config_hash_version": "3"}) == "abc"
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
    assert [r.data.tags["gpdlm.config_hash_version"] for r in new] == ["3"]


# ----- version 3: the recurrent protocol keys under model.training (issue 46) --------------------------------
@pytest.mark.parametrize("name", sorted(store_v2()))
def test_a_version_2_run_is_the_same_run_in_version_3(name):
    """The hashes of today's config of a run include the ones gpdlm 5a56105 tagged it with (versions 2
    and 1), and its identity recomputed from the old params is today's hash."""
    run = store_v2()[name]
    cfg = compose(run["overrides"])
    v3, v2, v1 = config_hashes(cfg)
    assert (v2, v1) == (run["tags"]["gpdlm.config_hash"], run["legacy_config_hash"])
    assert run_identity(run["params"], run["tags"]) == v3 == params_hash(logged_params(cfg))


def test_old_params_and_configs_read_in_the_new_names():
    runs = store_v2()
    gp = canonical_params(runs["gp_lstm"]["params"])
    assert {k: v for k, v in gp.items() if k.startswith("model.training.")} == {
        "model.training.algorithm": "delayed",
        "model.training.kernel_refresh_every": "None",
        "model.training.theta_steps": "2",
        "model.training.final_theta_steps": "6",
        "model.training.lr_over_tau": "True",
        "model.training.refresh_check": "True",
    }
    assert not any(k.startswith("trainer.") and k.split(".")[1] in PROTOCOL_KEYS for k in gp)
    assert canonical_params(gp) == gp  # twice is once
    # models without a GP (svgp, the LSTM baseline under a recurrent preset) carried them unused: dropped
    for name in ("svgp", "lstm_in_gplstm_sysid_smoke"):
        params = canonical_params(runs[name]["params"])
        assert not any(k.split(".")[-1] in PROTOCOL_KEYS for k in params), name
        assert len(params) == len(runs[name]["params"]) - len(PROTOCOL_KEYS)
    old = OmegaConf.to_container(OmegaConf.create(runs["gp_lstm"]["config_yaml"]))
    new = OmegaConf.to_container(compose(runs["gp_lstm"]["overrides"]))
    assert new["model"]["training"].pop("feedback") == "true_targets"  # added since (ADDED_KEYS), at its default
    assert new["model"]["training"].pop("feedback_conditioning") == "rollouts"  # the same
    assert new["trainer"].pop("checkpoint_minutes") == 10.0  # the same
    assert new["sweep"].pop("finished_from") == []  # a sweep key added since (never part of the hash)
    assert new["tracking"].pop("loss_every") == 1  # a tracking key added since (never part of the hash)
    assert canonical_config(old) == new and canonical_config(new) == new


def test_the_family_declares_the_keys_identity_renames():
    import dataclasses

    from gpdlm_cli.methods.recurrent import TrainingSpec

    added = ("feedback", "feedback_conditioning")
    assert tuple(f.name for f in dataclasses.fields(TrainingSpec)) == (*PROTOCOL_KEYS, *added)
    assert set(compose(["model=gp_gru"]).model.training) == {*PROTOCOL_KEYS, *added}
    assert {f"model.training.{k}" for k in PROTOCOL_KEYS} & set(ADDED_KEYS) == set()
    assert not set(PROTOCOL_KEYS) & set(compose([]).trainer)


def _store_of_version_2(template_db, tmp_path, names):
    """A store holding FINISHED runs logged as gpdlm 5a56105 logged them (experiment 'old')."""
    from mlflow.tracking import MlflowClient

    uri = copy_store(template_db, tmp_path / "store")
    client = MlflowClient(uri)
    exp_id = make_experiment(client, uri, "old")
    runs = store_v2()
    for i, name in enumerate(names):
        make_run(client, exp_id, runs[name]["params"], {"test_rmse": 1.0 + i}, tags=runs[name]["tags"])
    return uri, client, exp_id


@pytest.mark.slow
def test_skip_finished_finds_the_runs_of_a_version_2_store(template_db, tmp_path):
    """``sweep.skip_finished`` (the run's check and the sweep callback's objective) finds the FINISHED runs
    gpdlm 5a56105 logged, a recurrent GP model's and an SVGP's; the analysis reads them in today's names."""
    from gpdlm_cli.analysis.store import load_runs
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.sweep.callback import job_objective

    uri, client, _ = _store_of_version_2(template_db, tmp_path, ["gp_lstm", "svgp"])
    where = [f"tracking.uri={uri}", "tracking.experiment=old", "threads=1", "progress=false"]
    for i, name in enumerate(["gp_lstm", "svgp"]):
        cfg = compose([*store_v2()[name]["overrides"], *where, "sweep.objective=test_rmse"])
        assert run_train(cfg, tmp_path / name, skip_finished=True) is None, name
        assert job_objective(cfg, None, {"uri": uri, "experiment": "old"}) == 1.0 + i
    runs = {r.params["model.name"]: r for r in load_runs(client, client.get_experiment_by_name("old"))}
    assert runs["gp_lstm"].value("model.training.algorithm") == "delayed"
    assert runs["gp_lstm"].raw("trainer.algorithm") is None and runs["svgp"].raw("model.training.algorithm") is None


@pytest.mark.slow
def test_a_checkpoint_of_version_2_resumes(template_db, tmp_path, capsys, monkeypatch):
    """A run stopped under gpdlm 5a56105 (its config.yaml with the recurrent keys under trainer, its
    checkpoint tagged with the version-2 hash) is continued by ``gpdlm resume``, not refused as another
    configuration's. (An SVGP run: the recurrent GP models' stages are not checkpointed mid-stage.)"""
    import io

    import torch

    from gpdlm_cli import build
    from gpdlm_cli.files import write_verified
    from gpdlm_cli.run.lifecycle import make_tracker
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.signals import Terminated, install_signal_handlers
    from gpdlm_cli.training.checkpoint import FILE, read_checkpoint

    from ..conftest import kill_last_stage_at, run_cli

    install_signal_handlers()
    run = store_v2()["svgp_checkpointed"]
    uri, client, exp_id = _store_of_version_2(template_db, tmp_path, [])
    cfg = compose([*run["overrides"], f"tracking.uri={uri}", "tracking.experiment=old"])
    real = kill_last_stage_at(monkeypatch, 12)
    folder = tmp_path / "run"
    tracker = make_tracker(cfg.tracking)
    with pytest.raises(Terminated):
        run_train(cfg, folder, tracker=tracker)
    monkeypatch.setattr(build, "build_method", real)
    # the folder as gpdlm 5a56105 left it: its config.yaml, its checkpoint's hash
    config = OmegaConf.create(run["config_yaml"])
    config.tracking.uri, config.tracking.experiment = uri, "old"
    assert config.trainer.algorithm == "full"
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(config))
    state = read_checkpoint(folder / FILE)
    assert state is not None and state["config_hash"] == config_hash(cfg) != run["tags"]["gpdlm.config_hash"]
    state["config_hash"] = run["tags"]["gpdlm.config_hash"]
    buf = io.BytesIO()
    torch.save(state, buf)
    write_verified(folder / FILE, buf.getvalue())
    rc, err = run_cli(["resume", str(folder)], tmp_path, capsys)
    assert rc == 0, err
    new = [r for r in client.search_runs([exp_id]) if r.info.run_id != tracker.run_id]
    assert len(new) == 1 and new[0].info.status == "FINISHED"
    tags, params = new[0].data.tags, new[0].data.params
    assert tags["gpdlm.resumed_from"] == tracker.run_id and new[0].data.metrics["iterations"] == 30
    assert tags["gpdlm.config_hash"] == config_hash(cfg) and tags["gpdlm.config_hash_version"] == "3"
    assert "trainer.algorithm" not in params and "model.training.algorithm" not in params


def test_an_old_grouping_key_names_the_new_one():
    """``--by trainer.algorithm`` over runs read in today's names (old runs too): one line naming the new key."""
    from types import SimpleNamespace

    from gpdlm_cli.analysis.records import AnalysisError, RunRecord, check_keys

    run = store_v2()["gp_lstm"]
    record = RunRecord.from_run(
        SimpleNamespace(
            info=SimpleNamespace(run_id="r", run_name="", start_time=0),
            data=SimpleNamespace(params=run["params"], metrics={}, tags=run["tags"]),
        )
    )
    check_keys([record], ["model.training.algorithm", "params.model.training.theta_steps"])
    with pytest.raises(AnalysisError, match=r"^--by trainer.algorithm: the key is now 'model.training.algorithm'"):
        check_keys([record], ["trainer.algorithm"])


@pytest.mark.parametrize("model", ["gp_lstm", "lstm"])
def test_an_added_key_at_its_default_leaves_every_hash_as_before_and_counts_when_set(model):
    """model.training.feedback (ADDED_KEYS): a config that carries it at true_targets hashes (versions 3, 2, 1)
    as the same config without it -- every run before the key trained teacher-forced --; own_predictions is
    another run, for the network baselines too (not a GP-only protocol key, which their identity drops)."""
    base = ["+experiment=gplstm_sysid_smoke", f"model={model}", "dataset.mode=free_simulation"]
    cfg = compose(base)
    assert cfg.model.training.feedback == "true_targets"
    without = OmegaConf.create(OmegaConf.to_container(cfg))
    del without.model.training["feedback"]
    assert config_hashes(cfg) == config_hashes(without)
    assert params_hash(logged_params(cfg)) == config_hash(without)
    own = compose([*base, "model.training.feedback=own_predictions"])
    assert set(config_hashes(own)).isdisjoint(config_hashes(cfg))
    assert params_hash(logged_params(own)) == config_hash(own) != config_hash(cfg)


def test_the_conditioning_key_at_its_default_leaves_every_hash_as_before_and_counts_when_set():
    """model.training.feedback_conditioning (ADDED_KEYS, not result-neutral): at rollouts (what every own-rollout
    run before the key did) every version's hash is the config's without it; true_targets is another run."""
    base = ["+experiment=gplstm_sysid_smoke", "model=gp_lstm", "dataset.mode=free_simulation"]
    own = compose([*base, "model.training.feedback=own_predictions"])
    assert own.model.training.feedback_conditioning == "rollouts"
    without = OmegaConf.create(OmegaConf.to_container(own))
    del without.model.training["feedback_conditioning"]
    assert config_hashes(own) == config_hashes(without)
    assert params_hash(logged_params(own)) == config_hash(without)
    true = compose(
        [*base, "model.training.feedback=own_predictions", "model.training.feedback_conditioning=true_targets"]
    )
    assert set(config_hashes(true)).isdisjoint(config_hashes(own))
    assert params_hash(logged_params(true)) == config_hash(true) != config_hash(own)


def test_the_checkpoint_interval_in_minutes_changes_no_hash():
    """trainer.checkpoint_minutes (ADDED_KEYS, result-neutral): at its default every version's hash is the
    config's without it (every run before it had none), and any other value is the same run."""
    cfg = compose(["model=dlm"])
    assert cfg.trainer.checkpoint_minutes == 10.0
    without = OmegaConf.create(OmegaConf.to_container(cfg))
    del without.trainer["checkpoint_minutes"]
    assert config_hashes(cfg) == config_hashes(without)
    other = compose(["model=dlm", "trainer.checkpoint_minutes=0.5"])
    assert config_hash(other) == config_hash(cfg)
    assert params_hash(logged_params(other)) == config_hash(cfg)
