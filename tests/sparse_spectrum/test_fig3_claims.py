"""The sVBSSGP paper's Fig. 3 in its claims file (RMSE against r, the samples of q for the predictive):
the table maps runs of the svbssgp_samples preset (BLOG, and AIMPEAK through claim F3a's overrides) to
cells by model.predict_samples, the three claims hold on runs whose RMSE falls with r and fail on runs
where it does not, and `gpdlm reproduce svbssgp` plans their two multiruns (15 jobs each)."""

from __future__ import annotations

import pytest

from gpdlm_cli import cli
from gpdlm_cli.analysis import claims as C
from gpdlm_cli.analysis import report as R
from gpdlm_cli.analysis.records import RunRecord
from gpdlm_cli.commands import reproduce as rp

FIG3 = ["F3b-r20-lowest", "F3b-r1-poorest", "F3a-r20-lowest"]


def test_fig3_table_and_claims_are_declared():
    paper = C.load("svbssgp")
    t = paper.tables["fig3"]
    assert (t.preset, t.metric, t.goal, t.rows, t.columns) == (
        "svbssgp_samples",
        "test_rmse",
        "min",
        ["dataset"],
        ["samples"],
    )
    assert [lab.match for lab in t.dimensions["samples"].labels] == [
        {"model.predict_samples": 1},
        {"model.predict_samples": 5},
        {"model.predict_samples": 20},
    ]
    got = {c.id: (c.data, c.better, c.than, c.where, c.preset, c.overrides) for c in paper.claims if c.table == "fig3"}
    assert got == {
        "F3b-r20-lowest": (
            "mirror",
            [{"samples": "r=20"}],
            [{"samples": "r=5"}, {"samples": "r=1"}],
            {"dataset": ["BLOG"]},
            "svbssgp_samples",
            [],
        ),
        "F3b-r1-poorest": (
            "mirror",
            [{"samples": "r=5"}, {"samples": "r=20"}],
            [{"samples": "r=1"}],
            {"dataset": ["BLOG"]},
            "svbssgp_samples",
            [],
        ),
        "F3a-r20-lowest": (
            "generator",
            [{"samples": "r=20"}],
            [{"samples": "r=5"}, {"samples": "r=1"}],
            {"dataset": ["AIMPEAK"]},
            "svbssgp_samples",
            ["dataset=aimpeak", "model.num_frequencies=20"],
        ),
    }
    assert paper.data["BLOG"]["kind"] == "mirror" and paper.data["AIMPEAK"]["kind"] == "generator"


def _records(rmse: dict, experiment: str = "svbssgp_samples") -> list[RunRecord]:
    """Runs as the svbssgp_samples preset logs them: {(dataset, r): [test_rmse per seed]}."""
    out = []
    for (dataset, r), values in rmse.items():
        for seed, v in enumerate(values):
            params = {
                "tracking.experiment": experiment,
                "model.name": "svbssgp",
                "dataset.name": dataset,
                "model.predict_samples": str(r),
                "seed": str(seed),
            }
            out.append(RunRecord(f"{dataset}{r}{seed}", f"{dataset}-r{r}-s{seed}", 0, params, {"test_rmse": v}, {}))
    return out


def _verdicts(rmse: dict, others: dict | None = None) -> dict:
    paper = C.load("svbssgp")
    records = _records(rmse) + _records(others or {}, "svbssgp_aimpeak")  # Table 1's runs: not Fig. 3's
    tr = R.build_table(paper.tables["fig3"], records, paper.units)
    return {c.id: R.evaluate(c, tr).verdict for c in paper.claims if c.id in FIG3}


NOISE = [0.0, 0.01, -0.01, 0.02, -0.02]  # per seed, shared by every r of a split (a paired design)


def test_the_claims_hold_when_the_rmse_falls_with_r_and_fail_otherwise():
    falling = {
        (d, r): [base + 0.3 / r + e + 0.001 * i * (r == 5) for i, e in enumerate(NOISE)]
        for d, base in (("blog", 0.9), ("aimpeak", 0.4))
        for r in (1, 5, 20)
    }
    assert _verdicts(falling) == dict.fromkeys(FIG3, "holds")
    flat_blog = {k: (v if k[0] == "aimpeak" else [0.9 + e for e in NOISE]) for k, v in falling.items()}
    assert _verdicts(flat_blog) == {"F3b-r20-lowest": "fails", "F3b-r1-poorest": "fails", "F3a-r20-lowest": "holds"}
    table1 = {("aimpeak", 20): [9.0] * 5}  # Table 1's sVBSSGP runs (r = 20, experiment svbssgp_aimpeak): not read
    assert _verdicts(falling, table1)["F3a-r20-lowest"] == "holds"
    missing_r5 = {k: v for k, v in falling.items() if k[1] != 5}  # the smoke preset runs r = 1 and 20 only
    got = _verdicts(missing_r5)
    assert got["F3b-r20-lowest"] != "holds" and got["F3b-r1-poorest"] != "holds"


@pytest.mark.slow
def test_reproduce_plans_fig3s_two_multiruns(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPDLM_DATA_MIRROR", "")
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path))  # an empty cache: whether BLOG is offline never hangs on test order
    plan = rp.derive(C.load("svbssgp"), [], "paper", "paper")
    rp.expand(plan)
    fig3 = [(m.preset, m.overrides, m.jobs) for m in plan.multiruns if m.preset == "svbssgp_samples"]
    assert fig3 == [  # model.predict_samples 1,5,20 x seeds 0-4 each
        ("svbssgp_samples", [], 15),
        ("svbssgp_samples", ["dataset=aimpeak", "model.num_frequencies=20"], 15),
    ]
    # Table 1's DTC++ and PIC++ (pic_aimpeak, pic_airline x2: 10 jobs each) are the T1 claims' own arms; the
    # AIRLINE claims run no SSGP (the paper has none there): 12 multiruns
    assert (len(plan.multiruns), sum(m.jobs for m in plan.multiruns)) == (12, 95)
    assert cli.main(["reproduce", "svbssgp", "--dry-run", "--no-estimate"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "gpdlm reproduce svbssgp: scale paper, protocol paper, 12 multiruns, 95 jobs"
    assert "  11. gpdlm train -m +experiment=svbssgp_samples\n" in out
    assert "tables fig3; claims F3b-r20-lowest, F3b-r1-poorest; 15 jobs -> experiment svbssgp_samples; data blog" in out
    assert "  12. gpdlm train -m +experiment=svbssgp_samples dataset=aimpeak model.num_frequencies=20\n" in out
    assert "tables fig3; claims F3a-r20-lowest; 15 jobs -> experiment svbssgp_samples; data aimpeak" in out
    tables = [line for line in out.splitlines() if line.startswith("jobs per table")]
    assert len(tables) == 1 and "fig3 30" in tables[0]
    note = out.splitlines()[-1]  # an empty cache: the mirrored sets the plan reads are named, BLOG among them
    assert note.startswith("data not offline (downloaded before the first job): ") and "blog" in note.split(";")[0]


@pytest.mark.parametrize("claim", FIG3)
def test_the_smoke_scale_runs_fig3_on_the_smoke_preset(claim):
    plan = rp.derive(C.load("svbssgp"), [claim], "smoke", "paper")
    assert [(m.preset, m.overrides) for m in plan.multiruns] == [("svbssgp_samples_smoke", ["seed=0,1"])]
