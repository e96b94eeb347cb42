"""``sweep.finished_from``: a sweep continued on a machine whose store is new skips the jobs that committed
run records (``gpdlm export``) hold as FINISHED, as ``sweep.skip_finished`` skips the store's own; the files
are verified before any job, and a bad one is one line of error with no run left behind."""

from __future__ import annotations

import gzip
import os

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.tracking.records_file import RecordsError, finished_config_hashes, recorded_metrics

from ..conftest import copy_store, run_cli

TINY = [
    "dataset=diabetes",
    "model=svgp",
    "model.num_inducing=5",
    "dataset.split.train_size=60",
    "trainer.max_iters=3",
    "trainer.eval_every=0",
    "progress=false",
    "threads=1",
    "tracking.experiment=cont",
]


def _sweep(tmp_path, capsys, uri, seeds, *extra):
    return run_cli(["train", "-m", f"seed={seeds}", *TINY, f"tracking.uri={uri}", *extra], tmp_path, capsys)


def _seeds(uri) -> list[str]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("cont")
    runs = client.search_runs([exp.experiment_id], "tags.`gpdlm.command` = 'train'")
    return sorted(r.data.params["seed"] for r in runs)


@pytest.fixture(scope="module")
def first_part(template_db, tmp_path_factory):
    """Seeds 0 and 1 trained into a store, exported to run records (the part an earlier session committed)."""
    folder = tmp_path_factory.mktemp("part1")
    uri = copy_store(template_db, folder / "store")
    old = os.getcwd()
    os.chdir(folder)
    try:
        assert cli.main(["train", "-m", "seed=0,1", *TINY, f"tracking.uri={uri}"]) == 0
        records = folder / "part1.jsonl.gz"
        assert cli.main(["export", "--tracking-uri", uri, "--output", str(records), "--no-histories"]) == 0
    finally:
        os.chdir(old)
    return uri, records


@pytest.mark.slow  # ~15 s: five tiny training runs, three sweeps
def test_a_sweep_skips_the_jobs_its_run_records_hold_finished(first_part, template_db, tmp_path, capsys):
    uri1, records = first_part
    uri = copy_store(template_db, tmp_path / "new")
    rc, err = _sweep(tmp_path, capsys, uri, "0,1,2", "sweep.skip_finished=true", f"sweep.finished_from=[{records}]")
    assert rc == 0, err
    assert (
        "gpdlm: sweep.finished_from: 2 configuration(s) recorded FINISHED in experiment 'cont' (1 file(s)): "
        "their jobs are skipped" in err
    )
    assert _seeds(uri) == ["2"]  # seeds 0 and 1 were not trained again
    # the records' hashes are the runs' own (the same config hashes as the first store's runs)
    client = MlflowClient(uri1)
    exp = client.get_experiment_by_name("cont")
    first = {
        r.data.tags["gpdlm.config_hash"]
        for r in client.search_runs([exp.experiment_id], "tags.`gpdlm.command` = 'train'")
    }
    assert finished_config_hashes([records], "cont") == first
    # without skip_finished the records change nothing, and the line says so
    again = copy_store(template_db, tmp_path / "again")
    rc, err = _sweep(tmp_path, capsys, again, "0", f"sweep.finished_from=[{records}]")
    assert rc == 0, err
    assert "without sweep.skip_finished=true they train again" in " ".join(err)
    assert _seeds(again) == ["0"]


def _damaged(records, dest):
    lines = gzip.decompress(records.read_bytes()).splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"FINISHED"', b'"FAILED"', 1)
    dest.write_bytes(gzip.compress(b"".join(lines)))
    return dest


@pytest.mark.slow  # ~6 s: three sweeps that stop before their first job
@pytest.mark.parametrize(
    "make, message",
    [
        (lambda rec, tmp: tmp / "missing.jsonl.gz", "sweep.finished_from: {path}: no such file"),
        (_damaged, "SHA-256 mismatch"),
        (lambda rec, tmp: rec, "records no run of experiment 'other' (tracking.experiment); its experiments: cont"),
    ],
    ids=["missing", "changed", "other-experiment"],
)
def test_bad_run_records_stop_the_sweep_before_any_job(first_part, template_db, tmp_path, capsys, make, message):
    _, records = first_part
    path = make(records, tmp_path / "bad.jsonl.gz") if make is _damaged else make(records, tmp_path)
    uri = copy_store(template_db, tmp_path / "store")
    extra = ["tracking.experiment=other"] if "other" in message else []
    rc, err = _sweep(tmp_path, capsys, uri, "0,1", "sweep.skip_finished=true", f"sweep.finished_from=[{path}]", *extra)
    assert rc == 2
    assert len(err) == 1 and message.format(path=path.resolve()) in err[0], err
    client = MlflowClient(uri)
    assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())  # no parent run


def test_recorded_runs_answer_for_the_tracker_and_the_sweeper(first_part):
    """A tracker counts a recorded config hash (any of its versions) as finished; the sweeper of a skipped
    job gets the recorded run's metrics (hydra-optuna-sweeper would otherwise see +inf)."""
    _, records = first_part
    hashes = sorted(finished_config_hashes([records], "cont"))
    tracker = NullTracker()
    assert not tracker.has_finished_run("gpdlm.config_hash", hashes[0])
    tracker.recorded_finished = frozenset(hashes)
    assert tracker.has_finished_run("gpdlm.config_hash", ("old-version", hashes[1]))
    assert not tracker.has_finished_run("gpdlm.config_hash", ("old-version",))
    assert not tracker.has_finished_run("gpdlm.other_tag", hashes[0])
    metrics = recorded_metrics([records], "cont", (hashes[0],))
    assert metrics is not None and metrics["n_train"] == 60.0 and "test_rmse" in metrics
    assert recorded_metrics([records], "cont", ("nothing",)) is None
    with pytest.raises(RecordsError, match="records no run of experiment 'x'"):
        finished_config_hashes([records], "x")


@pytest.mark.slow  # ~6 s: two tiny training runs
def test_a_job_another_live_process_is_training_is_skipped_not_trained_twice(template_db, tmp_path):
    """``skip_finished`` also skips a job whose configuration has a RUNNING run of another live process on
    this host (two sweeps launched over the same jobs trained each twice); a RUNNING run of this process,
    or of a process that is gone, does not stop it."""
    import subprocess
    import sys

    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking.identity import config_hash
    from gpdlm_cli.tracking.liveness import process_start, process_tags

    from ..conftest import compose
    from .conftest import make_experiment, make_run

    uri = copy_store(template_db, tmp_path / "store")
    cfg = compose([*TINY, f"tracking.uri={uri}"])
    client = MlflowClient(uri)
    exp_id = make_experiment(client, uri, "cont")
    mine = {**process_tags(), "gpdlm.config_hash": config_hash(cfg)}
    make_run(client, exp_id, {}, {}, tags=mine, status="RUNNING")  # this process's own: not another's
    assert run_train(cfg, tmp_path / "own", skip_finished=True, outcome={}) is not None
    client.delete_run(_seed_runs(client, exp_id)[0])  # its FINISHED run would skip the rest
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tags = {**process_tags(), "gpdlm.pid": str(other.pid), "gpdlm.process_start": process_start(other.pid)}
        running = make_run(
            client, exp_id, {}, {}, tags={**tags, "gpdlm.config_hash": config_hash(cfg)}, status="RUNNING"
        )
        outcome: dict = {}
        assert run_train(cfg, tmp_path / "a", skip_finished=True, outcome=outcome) is None
        assert outcome["reason"] == (
            f"run {running[:8]} of this configuration is training in another process on this host"
        )
    finally:
        other.kill()
        other.wait()
    # the same run, its process gone: the job trains
    assert run_train(cfg, tmp_path / "b", skip_finished=True, outcome={}) is not None


def _seed_runs(client, exp_id) -> list[str]:
    return [r.info.run_id for r in client.search_runs([exp_id], "attributes.status = 'FINISHED'")]
