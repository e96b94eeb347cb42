"""The sweep plan (issue 21, item 6): `--dry-run` lists the jobs Hydra would launch and estimates
their wall time without running them; every multirun announces its plan in one line."""

from __future__ import annotations

import math

import pytest

from gpdlm_cli import cli
from gpdlm_cli.sweep.plan import JOB_OVERHEAD_S, job_overrides, plan


def test_the_job_list_is_the_product_of_preset_params_and_command_line_sweeps():
    jobs, _ = job_overrides(["+experiment=regression_logloss_pol_smoke", "seed=0,1"])
    assert len(jobs) == 3 * 2  # the smoke preset's 3 models x two seeds
    assert all(any(o.startswith("seed=") for o in j) for j in jobs)
    assert {o for j in jobs for o in j if o.startswith("model=")} == {"model=dlm", "model=sq_dlm_fixed", "model=fitc"}


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(
        [
            "train",
            "-m",
            "model=dlm,svgp",
            "dataset.split.train_size=100",
            "model.num_inducing=10",
            "trainer.max_iters=50",
            "trainer=fast",
            "threads=1",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("gpdlm: sweep of 2 jobs, trainer.protocol=fast, shared beta-free stages")
    assert "estimated wall time" in out[0]
    assert any("dlm_joint on concrete (train_size 100" in ln and "(L-BFGS)" in ln for ln in out[1:])
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow  # real multiruns: over ~3 s (make test-fast stays under 2 minutes)
def test_the_estimate_counts_a_shared_stage_once_per_key():
    p = plan(
        [
            "model=dlm_fixed",
            "objective.beta=0.5,1,2",
            "dataset.split.train_size=100",
            "model.num_inducing=10",
            "trainer.max_iters=40",
            "threads=1",
        ],
        estimate=True,
        sample_iterations=3,
    )
    (stages,) = p.per_shape.values()
    by_name = {name: (cap, ms) for name, _, cap, ms, _, _ in stages}
    expected = (by_name["svgp"][0] * by_name["svgp"][1] + 3 * by_name["dlm"][0] * by_name["dlm"][1]) / 1000
    expected += 3 * JOB_OVERHEAD_S  # every job's fixed cost
    assert p.estimate_s == pytest.approx(expected)
    p_off = plan(["model=dlm_fixed", "objective.beta=0.5,1,2", "sweep.share_stages=false"])
    assert not p_off.share_stages and len(p_off.jobs) == 3


@pytest.mark.slow
def test_the_fast_estimate_adds_the_first_order_start_of_each_lbfgs_stage():
    common = [
        "model=svgp",
        "objective.beta=0.5,1",
        "dataset.split.train_size=100",
        "model.num_inducing=10",
        "trainer=fast",
        "threads=1",
    ]
    for adam in (0, 50):
        # no time to observe the stopping rule (iteration_budget_s=0): the L-BFGS stage at its cap, labelled so
        p = plan(common + [f"trainer.fast_adam_iters={adam}"], estimate=True, sample_iterations=3, iteration_budget_s=0)
        ((name, _, cap, ms, lbfgs, seconds),) = next(iter(p.per_shape.values()))
        assert name == "svgp" and lbfgs and cap == 1000
        assert [e.source for e in p.iterations.values()] == ["cap (upper bound)"]
        assert "(an upper bound)" in p.summary()
        if adam == 0:
            assert seconds == pytest.approx(cap * ms / 1000)
        else:
            assert seconds > cap * ms / 1000  # plus 50 Adam iterations at their own measured speed
        assert p.estimate_s == pytest.approx(2 * seconds + 2 * JOB_OVERHEAD_S)


def test_dry_run_needs_a_multirun(capsys):
    assert cli.main(["train", "model=dlm", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().startswith("gpdlm: error: --dry-run describes a multirun")


def test_the_start_of_multirun_line_names_the_launcher_of_the_hydra_overrides(capsys):
    """hydra/launcher=joblib and hydra.launcher.n_jobs are Hydra overrides, not task ones: the line at
    the start of a multirun says `launcher joblib x2` (it said `launcher basic` until 2026-11-27)."""
    from omegaconf import OmegaConf

    from gpdlm_cli.sweep import callback as sweep

    config = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"},
                "overrides": {
                    "task": ["model=svgp", "objective.beta=0.5,1", "dataset.split.train_size=100", "trainer=fast"],
                    "hydra": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.mode=MULTIRUN"],
                },
            }
        }
    )
    sweep._announce(config)
    line = capsys.readouterr().err.strip()
    assert line.startswith("gpdlm: sweep of 2 jobs, trainer.protocol=fast") and "launcher joblib x2" in line, line


def test_a_sweep_dry_run_with_a_bad_option_is_one_line(capsys):
    # checked before `gpdlm sweep beta` composes anything (it used to end in Hydra's traceback)
    assert cli.main(["sweep", "beta", "dataset.split.train_size=200,400", "model=nonexistent", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpdlm: error: unknown model 'nonexistent' (choose from: bsgd, dlm,")


# ----- the probes' budget, their reuse, their step clock (issue 42 review: a paper's dry run took > 5 min) ----
def _fake_probes(monkeypatch, seconds_per_probe: float):
    """``_probe_shape`` replaced: each probe advances a fake clock by ``seconds_per_probe`` and gives one stage
    of 100 iterations at 10 ms per model letter (dlm: 30 ms, svgp: 40 ms)."""
    from gpdlm_cli.sweep import plan as plan_mod

    clock = [0.0]
    probed = []

    def probe(cfg, k, parallel):
        probed.append((cfg.model.name, cfg.dataset.split.train_size))
        clock[0] += seconds_per_probe
        ms = 10.0 * len(cfg.model.name)
        return [("main", False, 100, ms, False, ms / 10)]

    monkeypatch.setattr(plan_mod, "_probe_shape", probe)
    monkeypatch.setattr(plan_mod, "_iteration_model", lambda *args: None)  # the fake rows' iterations stand
    monkeypatch.setattr(plan_mod.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(plan_mod, "_PROBES", {})
    return probed


@pytest.mark.slow
def test_probes_stop_at_their_budget_and_the_other_shapes_are_scaled_from_a_timed_shape_of_their_model(monkeypatch):
    probed = _fake_probes(monkeypatch, seconds_per_probe=10.0)
    sweep = ["model=dlm,svgp", "dataset.split.train_size=100,200,300", "seed=0,1", "threads=1"]
    p = plan(sweep, estimate=True, probe_budget_s=6.0)
    # every model's first shape before any model's second: dlm and svgp timed, then the budget (6 s) is spent,
    # and EXTRA_PROBE_FACTOR x it too (20 s > 18 s: no shape 3x away from a timed one is timed either)
    assert probed == [("dlm", 100), ("svgp", 100)] and p.timed_shapes == 2 and len(p.extrapolated) == 4
    # the others: the timed shape of their model, its full-batch step scaled by the training size (100 -> 200,
    # 300 rows a step), the same 100 iterations (trainer.max_iters)
    for sh, rows in p.extrapolated.items():
        ((name, _, cap, ms, _, seconds),) = rows
        assert (name, cap) == ("main", 100)
        assert ms == pytest.approx({"dlm_joint": 30.0, "svgp_joint": 40.0}[sh.model] * sh.train_size / 100)
        assert seconds == pytest.approx(cap * ms / 1000)
    # dlm: 2 seeds x (3 + 6 + 9) s, svgp: 2 x (4 + 8 + 12) s, and each of the 12 jobs' fixed cost
    assert p.estimate_s == pytest.approx((2 * 18.0 + 2 * 24.0 + 12 * JOB_OVERHEAD_S) / p.parallel)
    assert "(2 of 6 job shapes timed, the others scaled from the nearest timed shape of the same model)" in p.summary()
    # a later plan with the same configs reuses the timings (gpdlm reproduce plans many multiruns in one process)
    again = plan(sweep, estimate=True, probe_budget_s=100.0)
    assert len(probed) == 2 + 4 and again.timed_shapes == 6 and not again.extrapolated
    probed.clear()
    plan(sweep, estimate=True, probe_budget_s=0.0)
    assert probed == []  # every shape timed before


@pytest.mark.slow
def test_a_shape_far_from_every_timed_shape_is_timed_over_the_budget_the_farthest_first(monkeypatch):
    """The step model is first order (a step x its rows, M, samples, ...): an airline DLM step with 100 bMC
    samples is 1.0x one with 1 sample, not 100x. A shape that would be scaled by more than MAX_SCALE (2) from
    its nearest timed shape is timed after the budget too, the farthest first, until 3x the budget is spent."""
    from gpdlm_cli.sweep import plan as plan_mod

    assert (plan_mod.MAX_SCALE, plan_mod.EXTRA_PROBE_FACTOR) == (2.0, 3.0)
    sweep = ["model=dlm", "dataset.split.train_size=100,150,400,1000", "threads=1"]
    probed = _fake_probes(monkeypatch, seconds_per_probe=4.0)
    p = plan(sweep, estimate=True, probe_budget_s=6.0)
    # in the budget (6 s): n = 100, then 150 (at 4 s); over it: 1000 (6.7x from 150), then 400 (2.5x from
    # 1000); 16 s spent (< 18 s), and every shape timed
    assert [n for _, n in probed] == [100, 150, 1000, 400] and not p.extrapolated
    probed = _fake_probes(monkeypatch, seconds_per_probe=10.0)
    p = plan(sweep, estimate=True, probe_budget_s=6.0)
    # n = 100 (10 s: over the budget), then the farthest, 1000 (10x); 20 s > 18 s: 150 and 400 scaled
    assert [n for _, n in probed] == [100, 1000] and {sh.train_size for sh in p.extrapolated} == {150, 400}
    # the probes' first load of their data is not charged to the budget (the 1.9M airline rows: ~12 s)
    probed = _fake_probes(monkeypatch, seconds_per_probe=5.0)
    inner = plan_mod._probe_shape

    def loading(cfg, k, parallel):
        plan_mod._LOAD_S[0] += 4.5  # 4.5 of each probe's 5 s load its data
        return inner(cfg, k, parallel)

    monkeypatch.setattr(plan_mod, "_probe_shape", loading)
    p = plan(sweep, estimate=True, probe_budget_s=1.2)
    # 0.5 s charged a probe: 150 and 400 start at 0.5 and 1.0 s (< 1.2 s), in the probe order; charged 5 s,
    # only n = 100 would be timed (5 s > 3 x 1.2 s)
    assert [n for _, n in probed] == [100, 150, 400, 1000] and not p.extrapolated


def test_jobs_that_differ_only_outside_their_shape_are_composed_once(monkeypatch):
    from gpdlm_cli.sweep import plan as plan_mod

    jobs = [
        [f"model={m}", f"seed={s}", f"objective.beta={b}", "threads=1"]
        for m in ("dlm", "svgp")
        for s in (0, 1, 2)
        for b in (0.5, 1)
    ]
    out = plan_mod._job_configs(jobs)
    assert len({id(cfg) for _, cfg, _ in out}) == 2  # one config per model: 12 jobs, 2 composed
    assert [seed for _, _, seed in out] == ["0", "0", "1", "1", "2", "2"] * 2  # each job's own seed
    assert plan_mod._shape_override("model=dlm") and plan_mod._shape_override("trainer.batch_size=32")
    # a GP-LSTM job's mode sets its lag (32 or 10 steps a sequence): it makes the shape (not until 2026-11-28)
    assert plan_mod._shape_override("dataset.mode=regression") and plan_mod._shape_override("kernel.num_features=500")
    assert not any(plan_mod._shape_override(o) for o in ("seed=1", "objective.beta=2", "trainer.lr=0.1"))


def test_the_step_clock_leaves_out_the_calls_overhead_and_ends_the_call(monkeypatch):
    """A probe call is timed step by step: what the call costs before its first step and the first step (first
    calls, caches) are left out; it ends once the steps after the first took STEP_SPAN_S."""
    from types import SimpleNamespace

    from gpdlm_cli.sweep import plan as plan_mod

    now = [0.0]
    monkeypatch.setattr(plan_mod.time, "perf_counter", lambda: now[0])
    clock = plan_mod._step_clock(False, 2)
    loop = SimpleNamespace(converged=False)
    now[0] = 4.0  # 4 s of setup before the loop's train call (a GP-LSTM theta stage)
    clock.on_train_start(loop)
    now[0] += 1.0  # the first step: 1 s
    clock.on_step(loop)
    steps = 0
    while not loop.converged:
        now[0] += 0.0625  # steps of 62.5 ms (exact in binary)
        clock.on_step(loop)
        steps += 1
    assert steps == math.ceil(plan_mod.STEP_SPAN_S / 0.0625) == 5
    assert [b - a for a, b in zip(clock.stamps[1:], clock.stamps[2:])] == [0.0625] * steps


def test_probes_skip_the_setup_that_serves_predictions_only():
    """k-means inducing points become random ones, and sVBSSGP's 2,000 k-means prediction cells of the airline
    rows one cell (its random training blocks kept: train_partitions) -- the training step is the same."""
    from gpdlm_cli.sweep import plan as plan_mod
    from gpdlm_cli.sweep.compose import compose_jobs

    sv, sv_kmeans, dlm, ssgp = compose_jobs(
        [
            ["+experiment=svbssgp_airline"],
            ["+experiment=svbssgp_airline", "model.train_blocks=kmeans"],
            ["model=dlm"],
            ["model=ssgp", "model.predict=local"],
        ]
    )
    probe = plan_mod._probe_config(sv).model
    assert (probe.partitions, probe.train_partitions, probe.train_blocks) == (1, 2000, "random")
    assert sv.model.partitions == 2000 and sv.model.train_partitions is None  # the job's config untouched
    assert plan_mod._probe_config(sv_kmeans) is sv_kmeans  # k-means training blocks: the cells are the blocks
    assert plan_mod._probe_config(dlm).model.inducing_init == "random" and dlm.model.inducing_init == "kmeans"
    assert plan_mod._probe_config(ssgp).model.partitions == 1


def test_a_slow_first_step_is_timed_alone(monkeypatch):
    """A full-batch L-BFGS step on the 1.9M airline rows takes ~20 s: the probe call ends after it."""
    from types import SimpleNamespace

    from gpdlm_cli.sweep import plan as plan_mod

    now = [0.0]
    monkeypatch.setattr(plan_mod.time, "perf_counter", lambda: now[0])
    clock = plan_mod._step_clock(False, 2)
    loop = SimpleNamespace(converged=False)
    clock.on_train_start(loop)
    now[0] += plan_mod.SLOW_STEP_S + 0.5
    clock.on_step(loop)
    assert loop.converged and clock.stamps == [0.0, plan_mod.SLOW_STEP_S + 0.5]
