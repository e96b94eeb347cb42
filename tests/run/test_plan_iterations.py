"""The dry-run estimate's expected iterations (issue 42: the fast pol study was estimated at its L-BFGS caps,
4.4x its measured time): a stage with a stopping rule counts the iterations of the finished runs of its
shape in the store, else of probe runs to its stopping rule, else its cap -- labelled an upper bound."""

from __future__ import annotations

import pytest

from gpdlm_cli import cli
from gpdlm_cli.sweep import iterations as itm
from gpdlm_cli.sweep import plan as plan_mod

TWO_STAGES = [itm.StageRule("svgp", 1000, True, 200), itm.StageRule("dlm", 1000, True, 200)]


def test_finished_runs_total_less_the_first_order_starts_is_shared_by_the_caps():
    one = itm.from_total(350.0, [itm.StageRule("svgp", 1000, True, 200)], 3)
    assert one == itm.Expected("from 3 finished runs", (150,), (1000,))
    # two stages with a rule, one cap each of 1000: 600 - 2 x 200 first-order steps = 200, 100 each
    assert itm.from_total(600.0, TWO_STAGES, 1).iterations == (100, 100)
    assert itm.from_total(600.0, TWO_STAGES, 1).source == "from 1 finished run"
    # a stage without a rule runs its cap (fixed); the rest goes to the stage with one, within [1, its cap]
    mixed = [itm.StageRule("theta", 300, False), itm.StageRule("svgp", 1000, True)]
    assert itm.from_total(700.0, mixed, 2).iterations == (None, 400)
    assert itm.from_total(5000.0, mixed, 2).iterations == (None, 1000)
    assert itm.from_total(100.0, mixed, 2).iterations == (None, 1)


def test_expected_iterations_replace_the_cap_in_a_row_and_its_seconds():
    rows = [("svgp", True, 1000, 10.0, True, 12.0), ("dlm", False, 1000, 4.0, True, 5.0)]
    new = itm.apply(rows, itm.Expected("observed (3 jobs)", (150, None), (1000, 1000)))
    # 12 s = 10 s at the cap + 2 s of first-order start: 150 iterations x 10 ms + the same 2 s
    assert new == [("svgp", True, 150, 10.0, True, pytest.approx(3.5)), rows[1]]
    assert itm.apply(rows, itm.Expected(itm.CAP)) == rows


def test_jobs_cut_short_by_the_budget_count_at_the_cap_and_say_so():
    all_three = itm.combine([{"svgp": 60, "dlm": 10}, {"svgp": 90, "dlm": 10}, {"svgp": 30, "dlm": 40}], TWO_STAGES, 3)
    assert all_three == itm.Expected("observed (3 jobs)", (60, 20), (1000, 1000)) and all_three.complete
    # the second job cut short in its dlm stage, the third not run: each stage's mean counts them at the cap
    partial = itm.combine([{"svgp": 60, "dlm": 10}, {"svgp": 90}], TWO_STAGES, 3)
    assert partial.iterations == (round((60 + 90 + 1000) / 3), round((10 + 1000 + 1000) / 3))
    assert (
        partial.partial
        and not partial.upper_bound
        and partial.source
        == ("observed (1 of 3 jobs; 2 cut short by the probe budget, counted at the cap (upper bound))")
    )
    nothing = itm.combine([{"svgp": 60}], TWO_STAGES, 1)  # its dlm stage cut short: no job observed to its end
    assert (
        nothing == itm.Expected("cap (upper bound)", (), (1000, 1000)) and nothing.upper_bound and not nothing.complete
    )


def plan(*args, **kwargs):
    plan_mod._OBSERVED.clear()  # a plan of another test must not stand for this one's
    return plan_mod.plan(*args, **kwargs)


SVGP_FAST = ["model=svgp", "dataset.split.train_size=100", "model.num_inducing=10", "trainer=fast", "threads=1"]


@pytest.mark.slow  # ~3 s: a small SVGP trained to its L-BFGS stopping rule, twice
def test_a_probe_run_counts_the_iterations_its_stopping_rule_took_not_the_cap():
    import torch

    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.training import run_stages

    cfg = plan_mod._compose(SVGP_FAST)
    torch.set_num_threads(1)
    prepared = prepare(cfg)
    (rule,) = itm.stage_rules(prepared)
    assert rule == itm.StageRule("svgp", 1000, True, 200)
    observed = itm.observe(prepared, 60.0, seed=0)
    # the same job trained as `gpdlm train` trains it (fresh, the same seed): the same L-BFGS iterations
    again = prepare(cfg)
    fit = run_stages(
        again.method.stages,
        again.data.x_train,
        again.data.y_train,
        again.settings,
        generator=torch.Generator().manual_seed(0),
        modules=again.method.modules,
    )
    assert fit.optimizers == ["svgp:adam200+lbfgs"] and fit.converged
    assert observed == {"svgp": fit.iterations - 200} and 10 <= observed["svgp"] < 1000
    # no time left: nothing observed, and the shape falls back to its cap, labelled an upper bound
    assert itm.observe(prepare(cfg), 0.0) == {}
    assert itm.combine([itm.observe(prepare(cfg), 0.0)], [rule], 1).source == "cap (upper bound)"


@pytest.mark.slow  # ~5 s: a plan timed and observed
def test_the_plan_counts_the_observed_iterations_and_says_so():
    p = plan(SVGP_FAST + ["seed=0,1,2"], estimate=True, iteration_budget_s=60.0)
    ((shape, expected),) = p.iterations.items()
    ((name, _, its, ms, lbfgs, seconds),) = p.per_shape[shape]
    assert expected.source == "observed (3 jobs)" and expected.caps == (1000,) and (name, lbfgs) == ("svgp", True)
    assert its == expected.iterations[0] < 1000
    assert p.estimate_s == pytest.approx(3 * seconds + 3 * plan_mod.JOB_OVERHEAD_S)
    assert "(expected: no stage counted at a cap it may stop before)" in p.summary()


def _store_with_runs(tmp_path, job: list[str], experiment: str, iterations: list[float]) -> str:
    """A SQLite store holding FINISHED runs of ``job``'s shape (its params as a training run logs them) with
    these ``iterations``, plus a RUNNING one and a FINISHED one of another training size (both left out)."""
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(experiment)
    params = itm.job_params(plan_mod._compose(job))
    keys = dict.fromkeys(itm.MATCH_KEYS + plan_mod.SHAPE_KEYS)
    other = dict(params, **{"dataset.split.train_size": "200"})
    for its, status, p in [(v, "FINISHED", params) for v in iterations] + [
        (900, "RUNNING", params),
        (950, "FINISHED", other),
    ]:
        run = client.create_run(exp, tags={"gpdlm.command": "train"})
        client.log_batch(run.info.run_id, params=[Param(k, p[k]) for k in keys if k in p])
        client.log_metric(run.info.run_id, "iterations", its)
        if status == "FINISHED":
            client.set_terminated(run.info.run_id, "FINISHED")
    return uri


@pytest.mark.slow  # ~4 s: a store written, a plan timed
def test_finished_runs_of_the_shape_in_the_store_give_their_mean(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = _store_with_runs(tmp_path, SVGP_FAST, "est", [300.0, 500.0])
    plan_mod._OBSERVED.clear()
    monkeypatch.setattr(itm, "observe", lambda *a, **k: pytest.fail("a probe run though the store has runs"))
    argv = ["train", "-m", *SVGP_FAST, "seed=0,1", f"tracking.uri={uri}", "tracking.experiment=est", "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # mean 400 iterations a job, less its 200 first-order steps: 200 L-BFGS iterations (not the 900 running,
    # nor the 950 of the other size); no probe run spent on them
    assert "svgp: 200 it (cap 1000) x " in out[1] and out[1].endswith("; iterations: from 2 finished runs")
    assert "(expected: no stage counted at a cap it may stop before)" in out[0]


def test_a_store_that_does_not_exist_is_not_created(tmp_path):
    assert itm.store_client(f"sqlite:///{tmp_path / 'none.db'}") is None
    assert itm.store_client(str(tmp_path / "no-folder")) is None
    assert itm.store_client("http://localhost:5000") is None  # a dry run makes no network calls
    assert not (tmp_path / "none.db").exists()


def test_the_summary_says_whether_the_estimate_is_expected_or_an_upper_bound():
    from gpdlm_cli.sweep.plan import SweepPlan

    def summary(*sources: str) -> str:
        p = SweepPlan([["seed=0"]], "fast", True, False, "basic", 1, estimate_s=60.0)
        p.iterations = {i: itm.Expected(s) for i, s in enumerate(sources)}
        return p.summary().split("estimated wall time on this machine: 60 s ")[1]

    cut = "observed (1 of 3 jobs; 2 cut short by the probe budget, counted at the cap (upper bound))"
    assert summary() == summary(itm.CAP, itm.CAP) == "(an upper bound)"
    assert summary("observed (3 jobs)", "from 2 finished runs", itm.NO_RULE) == (
        "(expected: no stage counted at a cap it may stop before)"
    )
    assert summary("observed (3 jobs)", itm.CAP, cut) == (
        "(expected; 1 of 3 timed shapes at their cap and 1 of 3 with jobs cut short at it (upper bounds there))"
    )


def test_a_reproduce_note_counts_its_shapes_by_where_their_iterations_came_from():
    from gpdlm_cli.commands.reproduce import _iteration_note

    cut = "observed (1 of 3 jobs; 2 cut short by the probe budget, counted at the cap (upper bound))"
    sources = ["observed (3 jobs)", "observed (2 jobs)", "from 4 finished runs", cut, itm.CAP, itm.NO_RULE]
    assert _iteration_note([itm.Expected(s) for s in sources]) == (
        "iterations: 2 shapes observed, 1 shapes from finished runs, 1 shapes observed with jobs cut short at "
        "their cap, 1 shapes at their cap (upper bound), 1 shapes without a stopping rule (their budget)"
    )


@pytest.mark.slow  # ~3 s: a store written
def test_a_store_is_read_once_per_process_until_it_changes(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = _store_with_runs(tmp_path, SVGP_FAST, "est", [300.0, 500.0])
    client = MlflowClient(tracking_uri=uri)
    calls = []
    search = client.search_runs
    client.search_runs = lambda *a, **k: calls.append(1) or search(*a, **k)  # type: ignore[method-assign]
    keys = tuple(dict.fromkeys(itm.MATCH_KEYS + plan_mod.SHAPE_KEYS))
    wanted = {"svgp": itm.job_params(plan_mod._compose(SVGP_FAST))}
    assert sorted(itm.finished_iterations(client, "est", wanted, keys, uri)["svgp"]) == [300.0, 500.0]
    assert sorted(itm.finished_iterations(client, "est", wanted, keys, uri)["svgp"]) == [300.0, 500.0]
    assert len(calls) == 1  # the second plan of a reproduce reads nothing
    run = client.create_run(client.get_experiment_by_name("est").experiment_id, tags={"gpdlm.command": "train"})
    client.log_batch(run.info.run_id, params=[])
    client.set_terminated(run.info.run_id, "FINISHED")  # the store changed: read again
    assert sorted(itm.finished_iterations(client, "est", wanted, keys, uri)["svgp"]) == [300.0, 500.0]
    assert len(calls) == 2


@pytest.mark.slow  # ~5 s: a store written and exported, a plan timed
def test_recorded_runs_of_the_shape_give_their_mean_and_join_the_stores(tmp_path, monkeypatch):
    """Run records (``gpdlm export``) of the shape -- an earlier part, or a study at other seeds or scale --
    stand for its iterations as the store's finished runs do (``records=``, ``sweep.finished_from``)."""
    from gpdlm_cli.tracking.records_file import RecordsError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    uri = _store_with_runs(tmp_path / "a", SVGP_FAST, "est", [300.0, 500.0])
    records = tmp_path / "runs.jsonl.gz"
    assert cli.main(["export", "--tracking-uri", uri, "--output", str(records), "--no-histories"]) == 0
    monkeypatch.setattr(itm, "observe", lambda *a, **k: pytest.fail("a probe run though records hold runs"))
    new_store = f"tracking.uri=sqlite:///{tmp_path / 'new.db'}"
    job = [*SVGP_FAST, "seed=0,1", new_store, "tracking.experiment=est"]
    p = plan(job, estimate=True, records=[records])
    ((expected),) = p.iterations.values()
    # mean 400 a job less the 200 first-order steps: 200 L-BFGS iterations (not the RUNNING run's 900, nor the
    # 950 of the other training size, both in the records too)
    assert expected.source == "from 2 finished runs" and expected.iterations == (200,)
    assert not (tmp_path / "new.db").exists()
    # sweep.finished_from's files count as well (once each), and the store's own runs join them
    p = plan([*job, f"sweep.finished_from=[{records}]"], estimate=True, records=[records])
    assert next(iter(p.iterations.values())).source == "from 2 finished runs"
    (tmp_path / "b").mkdir()
    uri_b = _store_with_runs(tmp_path / "b", SVGP_FAST, "est", [1200.0, 1200.0])
    p = plan(
        [*SVGP_FAST, "seed=0,1", f"tracking.uri={uri_b}", "tracking.experiment=est"], estimate=True, records=[records]
    )
    expected = next(iter(p.iterations.values()))
    assert expected.source == "from 4 finished runs" and expected.iterations == (600,)  # (300+500+1200+1200)/4 - 200
    # records of another experiment add nothing (a probe run, here cut to no time); a changed file is an
    # error, never a silent estimate
    monkeypatch.setattr(itm, "observe", lambda *a, **k: {})
    p = plan([*SVGP_FAST, "seed=0,1", new_store, "tracking.experiment=other"], estimate=True, records=[records])
    assert not any(e.source.startswith("from ") for e in p.iterations.values())
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(records.read_bytes()[:-40])
    with pytest.raises(RecordsError):
        plan(job, estimate=True, records=[damaged])


def test_reproduce_verifies_its_iterations_files_before_planning(tmp_path, capsys):
    code = cli.main(
        ["reproduce", "dlm", "--claims", "D4-thyroid", "--dry-run", "--iterations-from", str(tmp_path / "none.gz")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "none.gz: no such file" in err[0]
    # without --dry-run it would do nothing: one line, before anything runs
    code = cli.main(["reproduce", "dlm", "--claims", "D4-thyroid", "--iterations-from", str(tmp_path / "none.gz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--iterations-from feeds --dry-run's estimate" in err[0]
