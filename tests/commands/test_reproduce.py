"""`gpdlm reproduce PAPER`: the plan derived from the claims files and the scales' data (job counts checked
against a count made here from the claims files and the presets' YAML), the budget's parsing, bad input as
one line; and (slow) the smoke-scale reproduce of each paper writing a report with verdicts, a budget that
stops between jobs, an interruption, and reruns that finish without re-running finished jobs."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpdlm_cli import cli
from gpdlm_cli.analysis import claims
from gpdlm_cli.commands import reproduce as rp

from .conftest import one_line_error

PRESETS = Path(rp.PRESETS_DIR)


def test_budget_durations():
    assert [rp.parse_budget(t) for t in ("3h", "90m", "1h30m", "45s", "2.5h", None)] == [
        10800,
        5400,
        5400,
        45,
        9000,
        None,
    ]
    for bad in ("3", "h", "3 hours", "0s", "-1h"):
        with pytest.raises(rp.AnalysisError, match="--budget"):
            rp.parse_budget(bad)


# ----- the plan, counted independently from the YAML ---------------------------------------------------
def sweep_params(preset: str) -> dict:
    """The preset's hydra.sweeper.params, its parent presets' (``defaults``) merged under them."""
    raw = yaml.safe_load((PRESETS / f"{preset}.yaml").read_text())
    out: dict = {}
    for d in raw.get("defaults", []):
        if isinstance(d, str) and d != "_self_" and (PRESETS / f"{d}.yaml").is_file():
            out.update(sweep_params(d))
    out.update({k: str(v) for k, v in (((raw.get("hydra") or {}).get("sweeper") or {}).get("params") or {}).items()})
    return out


def count_jobs(preset: str, overrides: list[str], beta_grid: bool) -> int:
    params = sweep_params(preset)
    for o in overrides:
        k, v = o.split("=", 1)
        params[k] = v
    grid = {k: v.split(",") for k, v in params.items()}
    if not beta_grid or "objective.beta" in grid:
        return math.prod(len(v) for v in grid.values())
    from gpdlm_cli.commands.sweep import beta_grid as grid_of
    from gpdlm_cli.sweep.beta_free import beta_free_options

    sizes = grid.pop("dataset.split.train_size")
    models = grid.pop("model", [preset_choice(preset, "model") or "dlm"])  # gpdlm's default model
    per_size = {n: len(grid_of(int(n))) for n in sizes}  # a beta-free model (fitc, sgpr) runs once, not per beta
    return sum(1 if m in beta_free_options() else per_size[n] for m in models for n in sizes) * math.prod(
        len(v) for v in grid.values()
    )


def preset_choice(preset: str, group: str) -> str | None:
    """The preset's choice of a config group from its YAML (``override /<group>: X`` in it or its parent presets)."""
    raw = yaml.safe_load((PRESETS / f"{preset}.yaml").read_text())
    found = None
    for d in raw.get("defaults", []):
        if isinstance(d, dict) and f"override /{group}" in d:
            found = d[f"override /{group}"]
        elif isinstance(d, str) and d != "_self_" and (PRESETS / f"{d}.yaml").is_file():
            found = preset_choice(d, group) or found
    return found


def without_preset_data(preset: str, overrides) -> tuple:
    """The overrides, sorted, less a ``dataset=X`` naming the preset's own (unswept) data set X."""
    own = None if "dataset" in sweep_params(preset) else preset_choice(preset, "dataset")
    return tuple(sorted(o for o in overrides if o != f"dataset={own}"))


def expected_multiruns(paper: str) -> dict:
    """(preset, sorted overrides) -> jobs, from the claims file alone: each claim's table preset (or its
    own), its overrides, the table's arms; beta grids where the table selects beta. A multirun whose only
    difference is ``dataset=`` the preset's own data set is the same multirun."""
    raw = yaml.safe_load(Path(claims.CLAIMS_DIR, f"{paper}.yaml").read_text())
    tables = {t["id"]: t for t in raw["tables"]}
    out = {}
    for c in raw["claims"]:
        t = tables[c["table"]]
        if t.get("unavailable"):
            continue
        base = c.get("preset") or t["preset"]
        for arm in [[]] + c.get("arms", t.get("arms", [])):  # the claim's own arms replace the table's
            preset, rest = (
                (arm[0].split("=", 1)[1], arm[1:]) if arm and arm[0].startswith("+experiment=") else (base, arm)
            )
            ov = dict(o.split("=", 1) for o in [*t.get("overrides", []), *c.get("overrides", []), *rest])
            overrides = [f"{k}={v}" for k, v in ov.items()]
            beta = "objective.beta" in (t.get("select") or {}).get("over", [])
            out[(preset, without_preset_data(preset, overrides))] = count_jobs(preset, overrides, beta)
            # a method pinning beta (the ELBO, beta = 1: in no grid) gets its own multirun beside an arm
            # whose preset trains its model
            methods = ((t.get("dimensions") or {}).get("method") or {}).get("values")
            for label in methods.values() if beta and isinstance(methods, dict) else []:
                match = label.get("match", {})
                swept = ov.get("model", sweep_params(preset).get("model", "")).split(",")
                if "objective.beta" in match and match.get("model.name") in swept:
                    pinned = [*overrides, f"model={match['model.name']}", f"objective.beta={match['objective.beta']}"]
                    out[(preset, without_preset_data(preset, pinned))] = count_jobs(preset, pinned, False)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("paper, total", [("rkhs", 5040), ("dlm", None)])
def test_paper_scale_dry_run_counts_match_the_claims_files(paper, total, capsys, monkeypatch):
    monkeypatch.setenv("GPDLM_DATA_MIRROR", "")  # the counts must not depend on which data are here
    monkeypatch.delenv("GPDLM_DATA_MIRROR")
    plans = []  # the plan the command expands and prints (expanding it costs a compose per multirun: once)
    expand = rp.expand
    monkeypatch.setattr(rp, "expand", lambda plan, *a, **kw: (plans.append(plan), expand(plan, *a, **kw))[1])
    assert cli.main(["reproduce", paper, "--dry-run", "--no-estimate"]) == 0
    out = capsys.readouterr().out
    expected = expected_multiruns(paper)
    (plan,) = plans
    assert plan.scale == plan.protocol == "paper" and plan.multiruns
    got = {(m.preset, without_preset_data(m.preset, m.overrides)): m.jobs for m in plan.multiruns}
    assert got == expected and len(plan.multiruns) == len(expected)
    n = sum(expected.values())
    if total is not None:
        assert n == total  # rkhs: 8 sets x 5 masks x 3 batch sizes x 3 lr x (6 + 6 methods + svgp, bsgd on rbf)
    head = out.splitlines()[0]
    assert head == f"gpdlm reproduce {paper}: scale paper, protocol paper, {len(expected)} multiruns, {n} jobs"
    assert "jobs per table" in out and ("left out:" in out) == (paper == "gplstm")
    for m in plan.multiruns:
        assert f"; {m.jobs} jobs" in out


@pytest.mark.slow  # ~5 s: the two multiruns' beta grids expanded
def test_jobs_of_two_multiruns_are_counted_once_and_not_estimated_twice():
    """D5-error's generators are D4-ringnorm's ringnorm jobs and D4-comparable's twonorm and banana jobs again
    (``classification dataset=ringnorm`` is ``classification``: the preset's own data set; the same config
    hash, so the store skips them as FINISHED): the plan says so, and the total to train is the distinct jobs."""
    from gpdlm_cli.hydra_apps import compose_config
    from gpdlm_cli.tracking.identity import config_hash

    plan = rp.derive(claims.load("dlm"), ["D4-ringnorm", "D4-comparable", "D5-error"], "paper", "paper")
    rp.expand(plan)
    (d4r, d4r_elbo, d4c, d4c_elbo, d5, d5_elbo) = plan.multiruns
    assert (d4r.overrides, d4c.overrides, d5.overrides) == (
        [],
        ["dataset=twonorm,banana"],
        ["dataset=ringnorm,twonorm,banana"],
    )
    assert d5.jobs == d4r.jobs + d4c.jobs == 3 * 1275 and (d4r.repeats, d4c.repeats, d5.repeats) == (0, 0, 3825)
    # per launched beta grid (one per data set and training size), counted off as each launches
    assert len(d5.argv_repeats) == len(d5.argvs) == 15 and d5.argv_repeats == d5.argv_jobs
    assert sum(d5.argv_jobs) == d5.jobs and d4r.argv_repeats == [] and sum(d4r.argv_jobs) == d4r.jobs
    # the ELBO (SVGP at beta = 1, which no beta grid holds) beside each: 5 sizes x 5 seeds a data set
    assert [m.overrides[-2:] for m in (d4r_elbo, d4c_elbo, d5_elbo)] == [["model=svgp", "objective.beta=1"]] * 3
    assert (d4r_elbo.jobs, d4c_elbo.jobs, d5_elbo.jobs) == (25, 50, 75) and d5_elbo.repeats == 75
    assert not any(m.beta_grid for m in (d4r_elbo, d4c_elbo, d5_elbo))
    assert plan.jobs - plan.repeats == 2550 + 1275 + 75
    text = rp.describe(plan)
    assert "3825 jobs (3825 of them an earlier multirun's: skipped as FINISHED)" in text
    assert "jobs to train: 3900 (3900 jobs are in two multiruns" in text
    # what makes them repeats: the job of D5 and its twin of D4 have one config hash
    job = [o for o in d5.job_lists[0] if not o.startswith("dataset=")]
    assert config_hash(compose_config(d5.job_lists[0])) == config_hash(compose_config(job))


def test_the_progress_line_of_a_beta_grid_multirun_says_which_grid():
    """A beta-grid multirun is launched as one multirun per training size; its progress line said
    "multirun 1 of 1: 96 finished" five times (the thyroid study): now which grid, and its training size."""
    argvs = [["objective.beta=100.0,50.0", "seed=0,1", "dataset.split.train_size=100"]] + [
        ["objective.beta=200.0", "seed=0,1", "dataset.split.train_size=200"]
    ]
    assert rp.which_multirun(1, 2, 2, argvs) == "multirun 1 of 2, beta grid 2 of 2 (dataset.split.train_size=200)"
    assert rp.which_multirun(2, 2, 1, [["seed=0,1", "dataset=pol,kin40k"]]) == "multirun 2 of 2"


def test_a_table_selecting_beta_gets_a_multirun_for_its_elbo_column_beside_the_preset_that_trains_svgp():
    """The DLM paper's tables select beta on validation over the grid n, n/2, ..., 0.01, which never holds
    beta = 1: the ELBO column (SVGP at beta = 1) needs runs of its own (found when D4-thyroid's reduced study
    had none). Only beside an arm whose preset trains SVGP (not the FITC/SGPR baselines), and not at the smoke
    scale, which trains the preset's own beta (1) instead of a grid."""
    plan = rp.derive(claims.load("dlm"), ["D1-pol", "D6-count-abalone"], "reduced", "fast")
    elbo = [(m.preset, m.overrides) for m in plan.multiruns if "objective.beta=1" in m.overrides]
    assert elbo == [
        ("regression_logloss_pol", ["model=svgp", "objective.beta=1", "seed=0,1", "trainer.protocol=fast"]),
        ("count", ["model=svgp", "objective.beta=1", "seed=0,1", "trainer.protocol=fast"]),
    ]
    assert rp.swept_models("regression_logloss_pol", []) == ["dlm", "dlm_fixed", "svgp"]  # through its defaults
    assert rp.swept_models("regression_baselines_pol", []) == ["fitc", "sgpr"]
    assert rp.swept_models("count", ["model=dlm"]) == ["dlm"]
    smoke = rp.derive(claims.load("dlm"), ["D1-pol", "D6-count-abalone"], "smoke", "fast")
    assert not any("objective.beta=1" in m.overrides for m in smoke.multiruns)


def test_the_smoke_scale_is_data(monkeypatch):
    plan = rp.derive(claims.load("rkhs"), [], "smoke", "fast", ["threads=1"])
    keys = [(m.preset, m.overrides) for m in plan.multiruns]
    smoke = ["dataset.split.mask=0,1", "trainer.batch_size=32", "trainer.protocol=fast", "threads=1"]
    assert keys == [  # rkhs_batch_study_pol -> rkhs_batch_study_smoke (scales.yaml), the paper's data sets dropped;
        ("rkhs_batch_study_smoke", ["kernel=linear", *smoke]),  # Tables 3/5: rkhs_gaussian_study's own arms,
        ("rkhs_gaussian_study_smoke", smoke),  # and gpdlm's same-kernel (RFF) columns as the tables' arms
        ("rkhs_gaussian_study_smoke", ["experiment/rkhs_arm@_global_=svgp_rff", *smoke]),
        ("rkhs_gaussian_study_smoke", ["experiment/rkhs_arm@_global_=bsgd_rff", *smoke]),
    ]
    dlm = rp.derive(claims.load("dlm"), ["D2-pol", "D1-song", "D14-ups-less-bias-L1"], "smoke", "paper")
    assert [(m.preset, m.overrides, m.command) for m in dlm.multiruns] == [
        ("regression_logloss_smoke", ["seed=0,1"], "train"),  # dataset=song dropped: the smoke preset's own data
        ("regression_baselines_smoke", ["seed=0,1"], "train"),
        ("bias_study_smoke", ["seed=0,1"], "bias"),  # a table of `gpdlm bias` runs
    ]
    assert dlm.left_out == [
        ("D2-pol (fig3_sqloss)", "no smoke preset regression_sqloss_pol_smoke for regression_sqloss_pol")
    ]
    reduced = rp.derive(claims.load("gplstm"), ["T2-gplstm-beats-lstm"], "reduced", "paper")
    assert [(m.preset, m.overrides) for m in reduced.multiruns] == [
        ("gplstm_sysid", ["seed=0,1", "trainer.max_epochs=20"])
    ]
    gef = rp.derive(claims.load("gplstm"), ["T3-gef-gplstm-beats-lstm"], "paper", "paper")
    assert [(m.preset, m.overrides) for m in gef.multiruns] == [("gplstm_gef_power", []), ("gplstm_gef_wind", [])]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "unknown paper 'nope'"),
        (["gplstm", "--claims", "T9"], "--claims T9: no such claim in gplstm; claims: T2-gplstm-beats-lstm"),
        (["gplstm", "--budget", "soon"], "--budget 'soon': give a duration"),
        (["gplstm", "--scale", "huge"], "argument --scale: invalid choice"),
        (
            [
                "gplstm",
                "--scale",
                "smoke",
                "--dry-run",
                "--no-estimate",
                "--claims",
                "T2-gplstm-beats-lstm",
                "trainer.nope=1",
            ],
            "gplstm_sysid_smoke",
        ),
    ],
)
def test_bad_input_is_one_line(args, message, capsys, tmp_path):
    assert cli.main(["reproduce", *args, "--output", str(tmp_path / "o")]) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "o").exists()


def test_a_plan_with_nothing_to_run_is_one_line(capsys, tmp_path):
    """A claim whose only table cannot be run (here: GEF's preset replaced by `unavailable` in a copy of the claims file)."""
    text = (Path(claims.__file__).parent.parent / "claims" / "gplstm.yaml").read_text()
    assert text.count("    preset: gplstm_gef_power\n") == 1
    path = tmp_path / "gplstm_nogef.yaml"
    path.write_text(
        text.replace("    preset: gplstm_gef_power\n", "    unavailable: no GEF data on this machine\n").replace(
            "      - [+experiment=gplstm_gef_wind]\n", ""
        )
    )
    argv = ["reproduce", str(path), "--claims", "T3-gef-gplstm-beats-lstm", "--output", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert (
        "nothing to run for gplstm at scale paper: T3-gef-gplstm-beats-lstm (table3_gef): no GEF data on this machine"
        in one_line_error(capsys)
    )
    assert not (tmp_path / "o").exists()


# ----- real smoke runs ----------------------------------------------------------------------------------
# the smallest claim subsets that still train every method they compare (a few jobs each)
SMOKE = {
    "gplstm": (["T2-gplstm-beats-lstm"], [], 8),  # lstm, gp_lstm x actuator, drives x 2 seeds
    "dlm": (["D4-ringnorm"], [], 4),  # classification_smoke: dlm, svgp x 2 seeds (its own arms: none)
    "rkhs": (["T2-scgd-beats-bsgd-b32"], ["model=scgd_paper,bsgd"], 4),  # 2 methods x 2 masks of pol
    "svbssgp": (["F2a-gamma0-best"], [], 2),  # one sVBSSGP run per seed, every gamma
}


def _finished(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    return [
        r
        for e in c.search_experiments()
        for r in c.search_runs([e.experiment_id], max_results=1000)
        if r.data.tags.get("gpdlm.command") in ("train", "bias") and r.info.status == "FINISHED"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("paper", list(SMOKE))
def test_smoke_reproduce_writes_a_report_with_verdicts(paper, tmp_path, monkeypatch, capsys):
    from gpdlm_cli.data.paths import mirror_dir  # noqa: F401

    ids, extra, jobs = SMOKE[paper]
    if paper == "rkhs" and not rp.offline(rp.data_status("pol")):
        pytest.skip("pol is neither cached nor in $GPDLM_DATA_MIRROR")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                "reproduce",
                paper,
                "--scale",
                "smoke",
                "--claims",
                ",".join(ids),
                "--output",
                str(out),
                "threads=1",
                *extra,
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("gpdlm reproduce: ") and " jobs done " in ln]
    assert len(lines) == jobs and lines[-1].startswith(f"gpdlm reproduce: {jobs}/{jobs} jobs done (finished")
    runs = _finished(f"sqlite:///{out}/mlflow.db")
    assert len(runs) == jobs and {r.data.params["sweep.scale"] for r in runs} == {"smoke"}
    report = (out / "report.md").read_text()
    study = (out / "study.md").read_text()
    assert "scale smoke, protocol paper, budget none" in study and "smoke (" in study
    verdicts = list(csv_rows(out / "report" / "verdicts.csv"))
    assert [v["claim"] for v in verdicts] == [c.id for c in claims.load(paper).claims]  # every claim has a verdict
    mine = [v for v in verdicts if v["claim"] in ids]
    assert all(v["verdict"] in ("holds", "fails", "not measured") for v in mine)
    if paper in ("gplstm", "dlm"):  # both compared cells measured on 2 seeds: a real test
        assert all(v["verdict"] in ("holds", "fails") for v in mine), mine
    assert report.startswith("# ") and ids[0] in report
    # the evidence written next to the report gives the same report, byte for byte
    assert (
        cli.main(
            [
                "report",
                "--claims",
                paper,
                "--from",
                str(out / "runs.jsonl.gz"),
                "--study",
                str(out / "study.md"),
                "--out",
                str(tmp_path / "again"),
                "--output",
                str(tmp_path / "again.md"),
            ]
        )
        == 0
    )
    assert (tmp_path / "again.md").read_bytes() == (out / "report.md").read_bytes()


def csv_rows(path):
    import csv

    with open(path, newline="") as f:
        yield from csv.DictReader(f)


@pytest.mark.slow
def test_budget_and_interruption_resume_without_rerunning(tmp_path, monkeypatch, capsys):
    """A budget stops between jobs saying what is left; an interruption (injected after a job ends) stops the
    next run; the third run finishes, and no job ever trains twice."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    uri = f"sqlite:///{out}/mlflow.db"
    args = [
        "reproduce",
        "gplstm",
        "--scale",
        "smoke",
        "--claims",
        "T2-gplstm-beats-lstm",
        "--output",
        str(out),
        "threads=1",
        "dataset=actuator",
    ]  # one of the preset's two sets: 4 jobs

    def spend_budget(progress, status):  # the budget runs out while the first job trains (a clock, not a race)
        progress.deadline = min(progress.deadline, rp.time.monotonic())

    monkeypatch.setattr(rp, "_after_job", spend_budget)
    assert cli.main([*args, "--budget", "1h"]) == 0
    err = capsys.readouterr().err
    assert re.search(
        r"gpdlm reproduce: budget 1h reached: 1 of 4 jobs done, 3 left \(about \d+ s\); rerun the same "
        r"command to continue",
        err,
    ), err
    first = {r.data.tags["gpdlm.config_hash"]: r.info.run_id for r in _finished(uri)}
    assert len(first) == 1
    assert (out / "report.md").is_file()  # a partial report

    def interrupt(progress, status):
        if status == "finished":
            raise KeyboardInterrupt

    monkeypatch.setattr(rp, "_after_job", interrupt)
    assert cli.main(args) != 0
    second = {r.data.tags["gpdlm.config_hash"]: r.info.run_id for r in _finished(uri)}
    assert len(second) == len(first) + 1 and all(second[h] == rid for h, rid in first.items())
    shapes = []  # the jobs left per shape after each job: every job's overrides name a shape of the plan
    monkeypatch.setattr(rp, "_after_job", lambda progress, status: shapes.append(dict(progress.shapes_left)))
    capsys.readouterr()
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert len(shapes) == 2 and sum(shapes[0].values()) == 1 and sum(shapes[-1].values()) == 0, shapes
    runs = _finished(uri)
    third = {r.data.tags["gpdlm.config_hash"]: r.info.run_id for r in runs}
    assert len(runs) == len(third) == 4  # every job once: nothing trained twice
    assert all(third[h] == rid for h, rid in second.items())
    # the finished jobs are left out before the launch (sweep.callback.leave_out_finished), counted in one line
    assert f"{len(second)} skipped before the launch: FINISHED in the store" in err, err
    assert "4/4 jobs done" in err and err.count("FINISHED in the store") == 1, err
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("reproduce_gplstm")
    parents = sorted(c.search_runs([exp.experiment_id]), key=lambda r: r.info.start_time)
    assert [p.info.status for p in parents] == ["KILLED", "KILLED", "FINISHED"]
    assert parents[-1].data.metrics["jobs_done"] == 4 and parents[-1].data.metrics["jobs_left"] == 0
    assert parents[0].data.tags["gpdlm.progress"].startswith("gpdlm reproduce: budget 1h reached")


@pytest.mark.slow
def test_a_study_continued_on_a_new_store_skips_the_jobs_of_its_done_records(tmp_path, monkeypatch, capsys):
    """Part 1 stops at its budget after one job; part 2 runs on a new store (another machine) with part 1's
    run records (--done): it trains the other three, skips the recorded one, and its report and study
    count all four runs."""
    monkeypatch.chdir(tmp_path)
    base = ["reproduce", "gplstm", "--scale", "smoke", "--claims", "T2-gplstm-beats-lstm", "threads=1"]
    base += ["dataset=actuator"]  # 4 jobs

    def spend_budget(progress, status):
        progress.deadline = min(progress.deadline, rp.time.monotonic())

    monkeypatch.setattr(rp, "_after_job", spend_budget)
    assert cli.main([*base, "--output", str(tmp_path / "part1"), "--budget", "1h"]) == 0
    part1 = tmp_path / "part1" / "runs.jsonl.gz"
    first = {r.data.tags["gpdlm.config_hash"] for r in _finished(f"sqlite:///{tmp_path}/part1/mlflow.db")}
    assert len(first) == 1
    monkeypatch.setattr(rp, "_after_job", lambda progress, status: None)
    capsys.readouterr()
    assert cli.main([*base, "--output", str(tmp_path / "part2"), "--done", str(part1)]) == 0
    err = capsys.readouterr().err
    assert err.count("1 skipped before the launch: FINISHED in the store or the --done records") == 1, err
    second = {r.data.tags["gpdlm.config_hash"] for r in _finished(f"sqlite:///{tmp_path}/part2/mlflow.db")}
    assert len(second) == 3 and not second & first  # nothing trained twice
    report = (tmp_path / "part2" / "report.md").read_text().splitlines()  # it reads both parts' runs
    assert "| table2 | 4 | smoke (4) | paper (4) | actuator (4) | 2 | - | 2 (4) |" in report
    claim = next(ln for ln in report if ln.startswith("| T2-gplstm-beats-lstm |"))
    cells = [c.strip() for c in claim.split("|")]
    assert cells[2] in ("holds", "fails") and cells[4] == "2"  # measured over both seeds (part 1 had one run)
    # a changed --done file stops the command before anything runs
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(part1.read_bytes()[:-20])
    assert cli.main([*base, "--output", str(tmp_path / "part3"), "--done", str(bad)]) == 2
    assert "bad.jsonl.gz" in one_line_error(capsys)
    assert not (tmp_path / "part3").exists()


# ----- the committed evidence ---------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(p.parent for p in (ROOT / "docs" / "results" / "smoke").glob("*/runs.jsonl.gz"))
# the studies' reports with run records (docs/results/<paper>_<what>_<date>/): the paper is the name's first word
STUDIES = sorted(p.parent for p in (ROOT / "docs" / "results").glob("*/runs.jsonl.gz"))
REBUILT = [pytest.param(p, p.name, id=p.name) for p in PUBLISHED] + [
    pytest.param(p, p.name.split("_")[0], id=p.name, marks=pytest.mark.slow) for p in STUDIES
]


def test_committed_smoke_reports_have_their_records():
    assert [p.name for p in PUBLISHED] and all(
        (p / "report.md").is_file() and (p / "study.md").is_file() for p in PUBLISHED
    )


def test_the_studies_with_run_records_include_the_real_gplstm_table2():
    assert {"gplstm_real_2026-11-28", "gplstm_real_fixed_2026-11-29"} <= {p.name for p in STUDIES}


@pytest.mark.parametrize("folder,paper", REBUILT)
def test_a_committed_report_is_rebuilt_from_its_records_byte_for_byte(folder, paper, tmp_path, capsys):
    assert (
        cli.main(
            [
                "report",
                "--no-log",
                "--claims",
                paper,
                *[a for f in sorted(folder.glob("runs*.jsonl.gz")) for a in ("--from", str(f))],  # a study's parts
                "--study",
                str(folder / "study.md"),
                "--out",
                str(tmp_path / "o"),
                "--output",
                str(tmp_path / "report.md"),
            ]
        )
        == 0
    )
    assert (tmp_path / "report.md").read_bytes() == (folder / "report.md").read_bytes()
    head = gzip.decompress((folder / "runs.jsonl.gz").read_bytes()).splitlines()[0]
    assert json.loads(head)["format"] == "gpdlm-runs"


@pytest.mark.slow
def test_regenerate_sh_rebuilds_the_records_reports_on_a_fresh_tree(tmp_path):
    """docs/results/regenerate.sh in a tree holding only the script and the committed records (no store): the
    same reports, byte for byte (`--records-only`, the flag of the days when a report came from a store, is
    accepted: every report is rebuilt from its records now)."""
    import os
    import shutil
    import subprocess
    import sys

    tree = tmp_path / "clone"
    (tree / "docs" / "results").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "results" / "regenerate.sh", tree / "docs" / "results")
    shutil.copytree(ROOT / "docs" / "results" / "smoke", tree / "docs" / "results" / "smoke")
    for p in (tree / "docs" / "results" / "smoke").glob("*/report.md"):
        p.unlink()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["bash", str(tree / "docs" / "results" / "regenerate.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for folder in PUBLISHED:
        again = tree / "docs" / "results" / "smoke" / folder.name / "report.md"
        assert again.read_bytes() == (folder / "report.md").read_bytes(), folder.name
    assert not list(tree.rglob("mlflow.db"))  # no store was needed, none was made


def test_every_published_report_ships_its_run_records():
    """issue 42: every report under docs/results/ is rebuilt from committed run records -- each report.md of a
    study or smoke folder has its runs.jsonl.gz, and no report lives outside such a folder (the last
    store-only one, the 2026-11-25 dlm.md, was retired on 2026-11-30)."""
    results = ROOT / "docs" / "results"
    reports = [p for p in results.rglob("report.md") if "diagnoses" not in p.parts]
    assert len(reports) >= 15 and all((p.parent / "runs.jsonl.gz").is_file() for p in reports), [
        str(p) for p in reports if not (p.parent / "runs.jsonl.gz").is_file()
    ]
    assert sorted(p.name for p in results.glob("*.md")) == ["README.md"]  # the index, no store-only report


def test_regenerate_sh_refuses_a_report_without_its_records(tmp_path):
    import subprocess

    tree = tmp_path / "clone"
    (tree / "docs" / "results" / "dlm_lost_2026-01-01").mkdir(parents=True)
    (tree / "docs" / "results" / "dlm_lost_2026-01-01" / "report.md").write_text("# a report\n")
    script = tree / "docs" / "results" / "regenerate.sh"
    script.write_bytes((ROOT / "docs" / "results" / "regenerate.sh").read_bytes())
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "dlm_lost_2026-01-01/report.md has no run records" in done.stderr


def test_progress_of_a_multirun_run_by_a_parallel_launcher_is_counted_from_its_outcomes(tmp_path, capsys):
    from gpdlm_cli.sweep.callback import record_outcome

    for job, status in enumerate(["finished", "skipped", "finished", "failed"]):
        record_outcome(tmp_path, job, status, [f"seed={job}"])
    p = rp.Progress(total=10, deadline=None)
    p.started -= 30.0  # 30 s so far
    rp._count_outcomes(p, tmp_path, "multirun 1 of 3")
    assert (p.done, p.trained) == (4, 2)
    line = capsys.readouterr().err.strip()
    # 6 jobs left at the 15 s per trained job measured so far (30 s / 2)
    assert re.fullmatch(
        r"gpdlm reproduce: 4/10 jobs done \(multirun 1 of 3: 2 finished, 1 skipped, 1 failed\), 6 left, "
        r"about 9[0-2] s left",
        line,
    ), line
    # 4 of the 6 left are a later multirun's repeats of earlier jobs (skipped as FINISHED): 2 x 15 s
    p.repeats = 4
    assert 29.0 <= p.left_s() <= 31.0


def test_a_multirun_with_some_data_offline_is_estimated_for_those(monkeypatch):
    """rkhs Table 2 sweeps 8 data sets; only those that load offline are timed (here: pol, made offline)."""
    import types

    from gpdlm_cli.sweep import plan as run_plan

    seen = []

    def fake_plan(overrides, *, estimate=False, sample_iterations=2, probe_budget_s=None, **_kw):
        seen.append(list(overrides))
        return types.SimpleNamespace(estimate_s=12.0, timed_shapes=3, extrapolated={})

    monkeypatch.setattr(run_plan, "plan", fake_plan)
    monkeypatch.setattr(rp, "data_status", lambda name: "offline (mirror)" if name == "pol" else "download")
    p = rp.derive(claims.load("rkhs"), ["T2-scgd-beats-bsgd-b32"], "paper", "paper")
    rp.expand(p, estimate=True)
    (m,) = p.multiruns
    assert m.jobs == 2160 and m.estimate_s == 12.0
    assert seen == [["+experiment=rkhs_batch_study_pol", "kernel=linear", "dataset=pol"]]
    assert m.note == "estimate for pol only: the jobs on 7 other data sets not offline"
    assert "estimated 12 s; estimate for pol only" in rp.describe(p)


@pytest.mark.slow
def test_every_svgp_job_of_the_rkhs_smoke_plan_builds(monkeypatch):
    """SVGP's M is the batch size (rkhs_batch_study) and with the linear kernel M <= d, the network's last width:
    the smoke scale's b = 32 needs the smoke preset's network at least 32 wide (it was 16: both SVGP jobs of
    `gpdlm reproduce rkhs --scale smoke` failed with 'kernel=linear has rank d=16')."""
    from gpdlm_cli.data.paths import mirror_dir  # noqa: F401
    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.sweep.compose import compose_jobs
    from gpdlm_cli.sweep.plan import job_overrides

    if not rp.offline(rp.data_status("pol")):
        pytest.skip("pol is neither cached nor in $GPDLM_DATA_MIRROR")
    plan = rp.derive(claims.load("rkhs"), [], "smoke", "paper", ["threads=1"])
    built = 0
    for m in plan.multiruns:
        jobs, _ = job_overrides([f"+experiment={m.preset}", *m.overrides])
        for job in jobs:
            svgp = "model=svgp" in job or any(
                o.endswith(("_arm@_global_=svgp_rbf", "_arm@_global_=svgp_rff")) for o in job
            )
            if svgp and "dataset.split.mask=0" in job:
                (cfg,) = compose_jobs([job])
                p = prepare(cfg)  # builds the method: raised UnsupportedCombination for kernel=linear
                assert p.cfg.model.num_inducing == 32 and p.n_train == 200
                built += 1
    assert built == 3  # the linear kernel (Table 2), rbf and rff (Table 3's rkhs_gaussian_study arms)


# ----- the plan's data: dataset options, duplicates, the mirror (issue 42 review) -------------------------
def test_dataset_options_are_checked_under_their_registry_names():
    """``dataset=airline_nyc_class`` is a config of the registry's ``airline_nyc`` (target delayed): the plan
    printed it as '[unknown dataset]'."""
    assert [rp.dataset_name(o) for o in ("airline_nyc_class", "airline_reg", "pol", "no_such_set")] == [
        "airline_nyc",
        "airline",
        "pol",
        "no_such_set",
    ]
    assert [rp.data_label(o) for o in ("airline_nyc_class", "pol")] == ["airline_nyc_class (airline_nyc)", "pol"]


@pytest.mark.slow
def test_the_plan_checks_a_dataset_option_under_its_registry_name():
    before = rp.data_status("airline_nyc")
    plan = rp.derive(claims.load("dlm"), ["D9-recover-exact-nyc"], "paper", "paper")
    rp.expand(plan)
    text = rp.describe(plan)
    # another xdist worker may cache the data meanwhile (the workers share one cache): either status
    seen = {before, rp.data_status("airline_nyc")}
    assert "unknown dataset" not in seen and "unknown dataset" not in text
    assert [list(m.datasets) for m in plan.multiruns] == [["airline_nyc_class"]] * 3
    assert all(m.datasets["airline_nyc_class"] in seen for m in plan.multiruns)
    assert sum(text.count(f"data airline_nyc_class (airline_nyc) [{s}]") for s in seen) == 3


@pytest.mark.slow
def test_a_multirun_shared_by_tables_is_planned_once_with_all_its_tables():
    """Fig. 10's sampling table names ``dataset=airline`` (its claims' overrides), its time table nothing: the
    same jobs (the preset's data is airline), listed twice before."""
    plan = rp.derive(claims.load("dlm"), ["D9-recover-exact", "D10-ups-slower"], "paper", "paper")
    assert len(plan.multiruns) == 6  # 3 presets x (dataset=airline, no override)
    rp.merge_equivalent(plan)
    assert [(m.preset, m.overrides, m.tables, m.claims) for m in plan.multiruns] == [
        (p, ["dataset=airline"], ["fig10_sampling", "fig10_time"], ["D9-recover-exact", "D10-ups-slower"])
        for p in ("sampling_methods", "sampling_methods_exact", "sampling_methods_smooth")
    ]
    nyc = rp.derive(claims.load("dlm"), ["D9-recover-exact-nyc", "D10-ups-slower"], "paper", "paper")
    rp.merge_equivalent(nyc)
    assert len(nyc.multiruns) == 6  # the NYC stand-in is other data: nothing merged


def test_what_a_preset_already_sets_is_no_override():
    from gpdlm_cli.sweep.plan import job_overrides

    base = job_overrides(["+experiment=sampling_methods"])[1]
    assert [
        rp.preset_sets(base, o)
        for o in (
            "dataset=airline",  # the preset's choice of the dataset group
            "dataset=airline_nyc_class",
            "objective.beta=0.1",  # the preset's value
            "objective.beta=0.10",  # the same float
            "objective.beta=1",
            "trainer.batch_size=1000",
            "trainer.batch_size=1000.0",  # another type: a different config
            "seed=0",  # swept by the preset: an override replaces the sweep
            "+objective.beta=0.1",
            "trainer=paper",
            "kernel=rbf",
        )
    ] == [True, False, True, True, False, True, False, False, False, True, True]


def test_a_dry_run_prints_one_line_per_timed_multirun_and_shares_its_probe_budget(monkeypatch, capsys):
    """The probes of a plan share PLAN_PROBE_S (at least MIN_PROBE_S a multirun); every timed multirun says so
    on stderr when its estimate is done (a paper's dry run printed nothing for > 5 minutes)."""
    import types

    from gpdlm_cli.sweep import plan as run_plan

    budgets = []

    def fake_plan(overrides, *, estimate=False, sample_iterations=2, probe_budget_s=None, **kw):
        budgets.append(probe_budget_s)
        assert kw["iteration_budget_s"] == probe_budget_s and kw["store_uri"] is None
        return types.SimpleNamespace(estimate_s=600.0, timed_shapes=2, extrapolated={("x",): []})

    monkeypatch.setattr(run_plan, "plan", fake_plan)
    p = rp.derive(claims.load("svbssgp"), ["T1-aimpeak"], "paper", "paper")
    rp.expand(p, estimate=True)
    assert len(p.multiruns) == 4 and budgets == [rp.PLAN_PROBE_S / 4] * 4
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpdlm reproduce: timed")]
    assert [re.sub(r"\(\d+ s\)$", "(T)", ln) for ln in err] == [
        "gpdlm reproduce: timed multirun 1/4 (+experiment=svbssgp_aimpeak): estimated 10 min (T)",
        "gpdlm reproduce: timed multirun 2/4 (+experiment=svbssgp_aimpeak model=ssgp): estimated 10 min (T)",
        "gpdlm reproduce: timed multirun 3/4 (+experiment=svbssgp_aimpeak model=vssgp): estimated 10 min (T)",
        "gpdlm reproduce: timed multirun 4/4 (+experiment=pic_aimpeak): estimated 10 min (T)",  # DTC++, PIC++
    ]
    assert p.multiruns[0].note == "2 of 3 job shapes timed, the others scaled from a timed shape"


def _thyroid_mirror(tmp_path) -> Path:
    """A mirror holding only thyroid's file, copied from the shared one."""
    import os
    import shutil

    from gpdlm_cli.data import get_dataset_info
    from gpdlm_cli.data.download import mirror_path

    shared = Path(os.environ.get("GPDLM_DATA_MIRROR") or ROOT.parent / "shared" / "datasets" / "mirror")
    mirror = tmp_path / "mirror"
    for f in get_dataset_info("thyroid").files:
        if not mirror_path(shared, f.url).is_file():
            pytest.skip(f"the shared mirror has no {f.url}")
        mirror_path(mirror, f.url).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(mirror_path(shared, f.url), mirror_path(mirror, f.url))
    return mirror


def test_data_a_mirror_holds_is_offline_and_fetched_before_the_first_job(tmp_path, monkeypatch, capsys):
    """The RKHS plan showed its UCI sets as '[download]' though a mirror held them, and a reproduce failed on
    them half-way: --mirror makes them '[offline (mirror)]', and they are copied into the cache before any job;
    data that cannot be fetched is one line naming the command, before any job."""
    mirror = _thyroid_mirror(tmp_path)
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("GPDLM_DATA_MIRROR", "")  # restored after the test (use_mirror sets it)
    monkeypatch.setenv("GPDLM_OFFLINE", "1")

    def plan():
        return rp.Plan(
            "dlm", "paper", "paper", [rp.Multirun("p", [], datasets={"thyroid": rp.data_status("thyroid")})], []
        )

    assert rp.data_status("thyroid") == "download"
    text = rp.describe(plan())
    assert (
        "data not offline (downloaded before the first job): thyroid; to fetch it now: "
        "gpdlm datasets fetch thyroid (--mirror DIR: from a local mirror)"
    ) in text
    with pytest.raises(rp.AnalysisError, match=r"run `gpdlm datasets fetch thyroid` \(with --mirror DIR"):
        rp.fetch_data(plan())
    with pytest.raises(rp.AnalysisError, match="does not exist"):
        rp.use_mirror(str(tmp_path / "nowhere"))
    rp.use_mirror(str(mirror))
    assert rp.data_status("thyroid") == "offline (mirror)"
    assert "data copied from the mirror into the cache before the first job: thyroid" in rp.describe(plan())
    rp.fetch_data(plan())
    assert rp.data_status("thyroid") == "offline (cached)"
    assert "fetching thyroid into the data cache first" in capsys.readouterr().err
    rp.fetch_data(plan())  # nothing left to fetch: no line
    assert "fetching" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_rkhs_plan_with_a_mirror_says_its_uci_sets_are_offline(tmp_path, monkeypatch, capsys):
    import os

    shared = Path(os.environ.get("GPDLM_DATA_MIRROR") or ROOT.parent / "shared" / "datasets" / "mirror")
    if not shared.is_dir():
        pytest.skip("no shared mirror")
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path / "cache"))  # nothing cached
    monkeypatch.setenv("GPDLM_DATA_MIRROR", "")
    argv = ["reproduce", "rkhs", "--claims", "T2-scgd-beats-bsgd-b32", "--dry-run", "--no-estimate"]
    assert cli.main(argv) == 0
    assert "bike [download]" in capsys.readouterr().out
    assert cli.main([*argv, "--mirror", str(shared)]) == 0
    out = capsys.readouterr().out
    sets = ("bike", "elevators", "keggdirected", "keggundirected", "kin40k", "pol", "protein", "tamielectric")
    assert all(f"{s} [offline (mirror)]" in out for s in sets), out
    assert "data copied from the mirror into the cache before the first job: bike, elevators" in out


def test_the_reproduce_and_plan_functions_are_short():
    """`run` (119 lines) and `_estimate_at_job_threads` (98) were split: no function of the reproduce command
    or the sweep plan is longer than 80 lines."""
    import ast

    from gpdlm_cli.sweep import plan as plan_mod

    long = [
        (Path(mod.__file__).name, f.name, f.end_lineno - f.lineno + 1)
        for mod in (rp, plan_mod)
        for f in ast.walk(ast.parse(Path(mod.__file__).read_text()))
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 80
    ]
    assert long == []


def test_the_repeats_of_a_multirun_count_as_free_only_until_it_starts(tmp_path, monkeypatch):
    """The time left leaves out the jobs of later multiruns that repeat earlier ones (skipped as FINISHED):
    `reproduce dlm --claims D4-ringnorm,D4-comparable,D5-error` said "7575 left, about 4.3 h" with 3,900 of
    them D5-error's repeats; once such a multirun starts, its jobs count as they come -- per launched beta grid
    (a budget stop between D5-error's grids said "2505 left, about 2.2 h", the grids not launched yet counted as
    work though all their jobs were FINISHED)."""
    import sys

    from gpdlm_cli.commands import train as train_cmd

    seen = []
    monkeypatch.setattr(train_cmd, "train_main", lambda: seen.append(p.repeats))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    grid = [["+experiment=classification"]]
    a = rp.Multirun("classification", [], jobs=6, argvs=grid)
    b = rp.Multirun("classification", ["dataset=twonorm"], jobs=4, argvs=grid * 2, argv_repeats=[2, 2])
    c = rp.Multirun("classification", ["dataset=banana"], jobs=3, argvs=grid * 2)  # no per-grid counts
    b.repeats, c.repeats = 4, 3
    plan = rp.Plan("dlm", "paper", "fast", [a, b, c], [])
    p = rp.Progress(total=plan.jobs, deadline=None, repeats=plan.repeats)
    rp._launch(plan, f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path, p)
    assert seen == [7, 5, 3, 0, 0]

    # a budget stop before b's second grid: its two repeats are not work
    def stop_after(n: int):
        def launch():
            seen.append(p.repeats)
            if len(seen) == n:
                p.deadline = 0.0

        return launch

    seen.clear()
    monkeypatch.setattr(train_cmd, "train_main", stop_after(2))
    p = rp.Progress(total=plan.jobs, deadline=float("inf"), repeats=plan.repeats)
    with pytest.raises(rp.BudgetReached):
        rp._launch(plan, f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path, p)
    assert seen == [7, 5] and p.repeats == 5
    assert rp._repeats_note(p.repeats) == ", 5 of them an earlier multirun's (skipped as FINISHED)"
    assert rp._repeats_note(0) == ""


def test_the_time_left_weighs_the_jobs_left_by_their_shapes_times(monkeypatch):
    """After a grid of cheap jobs the recent rate alone says the expensive jobs left are cheap (pol: 4.0 h after
    a joint-DLM grid at n = 2,000, 65 minutes after a fixed-DLM one): each job left costs its shape's own time
    so far (seed and beta do not change the shape), a shape not trained yet the same shape's at the nearest other
    training size scaled by the sizes' ratio, else the recent jobs' mean."""
    from types import SimpleNamespace

    clock = [0.0]
    monkeypatch.setattr(rp, "time", SimpleNamespace(monotonic=lambda: clock[0], time=lambda: 0.0))
    joint = ["+experiment=regression_logloss_pol", "model=dlm", "dataset.split.train_size=2000"]
    fixed = ["+experiment=regression_logloss_pol", "model=dlm_fixed", "dataset.split.train_size=2000"]
    big = ["+experiment=regression_logloss_pol", "model=dlm", "dataset.split.train_size=4000"]
    assert rp.job_shape([*joint, "seed=3", "objective.beta=0.5", "threads=1", "+sweep.scale=paper"]) == rp.job_shape(
        [*joint, "seed=0", "objective.beta=8", "tracking.uri=sqlite:///x.db"]
    )
    assert rp.job_shape(joint) != rp.job_shape(fixed) != rp.job_shape(big)
    plan = [[*joint, f"seed={i}"] for i in range(40)] + [[*fixed, f"seed={i}"] for i in range(40)]
    plan += [[*big, f"seed={i}"] for i in range(20)]
    p = rp.Progress(total=100, deadline=None, started=0.0)
    p.shapes_left = Counter(rp.job_shape(j) for j in plan)
    for j in plan[:30]:  # 30 joint jobs, 10 s each, one after the other
        clock[0] += 10.0
        p.count({"status": "finished", "overrides": [*j, "threads=1"], "seconds": 10.0})
    # 10 joint at 10 s, 40 fixed not trained yet at the recent jobs' 10 s, 20 joint at n = 4000 not trained yet:
    # from joint at n = 2000, scaled by the sizes (20 s)
    assert p.left_s() == pytest.approx(50 * 10.0 + 20 * 20.0)
    for j in plan[40:70]:  # then 30 fixed jobs, 1 s each
        clock[0] += 1.0
        p.count({"status": "finished", "overrides": j, "seconds": 1.0})
    # the recent rate says 1 s a job for the 40 left; 10 of them are joint (10 s), 10 fixed (1 s), 20 joint at
    # n = 4000 (joint's 10 s at n = 2000, x 2)
    assert p.left_s() == pytest.approx(10 * 10.0 + 10 * 1.0 + 20 * 20.0)
    p.count({"status": "skipped", "overrides": plan[30]})  # a skipped joint job: one fewer left, no time
    assert p.left_s() == pytest.approx(9 * 10.0 + 10 * 1.0 + 20 * 20.0)
    # a shape of another model at a new size: from the nearest size of its own model (here fixed DLM's 1 s at
    # n = 2000, x 0.25 at n = 500), not from another model's
    small_fixed = rp.job_shape(
        ["+experiment=regression_logloss_pol", "model=dlm_fixed", "dataset.split.train_size=500"]
    )
    assert p.shape_time(small_fixed, 7.0) == pytest.approx(0.25)
    other = rp.job_shape(["+experiment=regression_logloss_pol", "model=svgp", "dataset.split.train_size=500"])
    assert p.shape_time(other, 7.0) == 7.0
    q = rp.Progress(total=10, deadline=None, started=0.0)  # no shapes (a plan without job lists): the rate
    clock[0] = 0.0
    for _ in range(2):
        clock[0] += 5.0
        q.count({"status": "finished", "overrides": joint, "seconds": 5.0})
    assert q.left_s() == pytest.approx(5.0 * 8)


def test_the_time_left_follows_the_recent_jobs_once_enough_have_trained(monkeypatch):
    """A study's later jobs (larger training sizes) cost more than its first: after ``RECENT`` trained jobs the
    time per job is the recent one (the classification study's whole-run average said 38 minutes for 95)."""
    from types import SimpleNamespace

    clock = [0.0]
    monkeypatch.setattr(rp, "time", SimpleNamespace(monotonic=lambda: clock[0], time=lambda: 0.0))
    p = rp.Progress(total=200, deadline=None, started=0.0)
    for _ in range(rp.RECENT):  # 30 quick jobs, 1 s apart
        clock[0] += 1.0
        p.count({"status": "finished"})
    assert p.left_s() == pytest.approx((200 - 30) * 1.0)
    for _ in range(rp.RECENT):  # then 30 slow ones, 10 s apart
        clock[0] += 10.0
        p.count({"status": "finished"})
    assert p.left_s() == pytest.approx((200 - 60) * 10.0)  # the whole-run average would say 5.5 s a job
    p.count({"status": "skipped"})  # a skipped job is done, free, and not a trained job's end
    assert p.left_s() == pytest.approx((200 - 61) * 10.0)
    q = rp.Progress(total=10, deadline=None, started=0.0)  # too few yet: the run's average so far
    clock[0] = 0.0
    for _ in range(3):
        clock[0] += 4.0
        q.count({"status": "finished"})
    assert q.left_s() == pytest.approx(12.0 / 3 * 7)
