"""The report's cause label of a verdict read from reduced-scale runs (issue 40): a verdict other than
"holds" whose table's runs carry ``sweep.scale=smoke|reduced`` (``gpdlm reproduce --scale``) reads
"smoke scale (not evidence)" / "reduced scale (not evidence)", with a one-line legend, unless the
claim's own diagnosis covers that scale (``cause.scales``); paper-scale and untagged runs give the
report of before, byte for byte."""

from __future__ import annotations

import pytest

from gpdlm_cli.analysis import claims as C
from gpdlm_cli.analysis import render
from gpdlm_cli.analysis import report as rep
from gpdlm_cli.analysis.records import AnalysisError, RunRecord

CLAIMS = """
paper: scaled
title: A paper run at several scales
units: [seed]
alpha: 0.05
test: ttest
tables:
  - id: t1
    title: "Table 1: test NLL"
    preset: regression_logloss_smoke
    metric: test_nll
    rows: [dataset]
    columns: [method]
    dimensions:
      dataset: {key: dataset.name, values: [pol]}
      method:
        values:
          A: {match: {model.name: a}}
          B: {match: {model.name: b}}
          C: {match: {model.name: c}}
claims:
  - id: X
    statement: A beats B
    table: t1
    data: mirror
    cause: {label: budget-bound, evidence: "at 4x the budget A wins"}
    better: {method: A}
    than: {method: B}
  - id: Y
    statement: B beats A
    table: t1
    data: mirror
    better: {method: B}
    than: {method: A}
  - id: Z
    statement: A beats C
    table: t1
    data: mirror
    better: {method: A}
    than: {method: C}
  - id: W
    statement: A beats B (diagnosed at every scale)
    table: t1
    data: mirror
    cause: {label: robust, evidence: "the same at 2x", scales: [smoke, reduced, paper]}
    better: {method: A}
    than: {method: B}
  - id: U
    statement: A beats B, not diagnosed
    table: t1
    data: mirror
    better: {method: A}
    than: {method: B}
"""

# test NLL per seed: B is clearly better than A (so X, W, U fail and Y holds); C has no run (Z not measured)
NLL = {"a": [1.0, 1.1, 1.2, 1.05], "b": [0.5, 0.52, 0.55, 0.51]}
SMOKE = "smoke scale (not evidence)"


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    path = tmp_path_factory.mktemp("claims") / "scaled.yaml"
    path.write_text(CLAIMS)
    return C.load(path)


def records(scales: list[str | None], reduced_epochs: bool = False) -> list[RunRecord]:
    """One run per (model, seed); seed i's runs tagged ``sweep.scale=scales[i]`` (None: untagged); with
    ``reduced_epochs`` the reduced runs train fewer epochs (another configuration than the paper's)."""
    out = []
    for model, values in NLL.items():
        for seed, (v, scale) in enumerate(zip(values, scales)):
            params = {"model.name": model, "dataset.name": "pol", "seed": str(seed)}
            if scale is not None:
                params["sweep.scale"] = scale
            if reduced_epochs and scale == "reduced":
                params["trainer.max_epochs"] = "2"
            out.append(RunRecord(f"{model}{seed}", f"{model}-s{seed}", 1000 + seed, params, {"test_nll": v}, {}))
    return out


def causes(report: rep.Report) -> dict[str, tuple[str, str]]:
    return {v.claim.id: (v.verdict, render.cause_of(v)) for v in report.verdicts}


def test_paper_scale_keeps_the_report_of_untagged_runs_byte_for_byte(paper):
    untagged = rep.build(paper, records([None] * 4), ["e"])
    tagged = rep.build(paper, records(["paper"] * 4), ["e"])
    assert tagged.tables[0].scales == {"paper": 8} and untagged.tables[0].scales == {}
    assert (tagged.tables[0].scale, untagged.tables[0].scale) == ("paper", "")
    assert (
        causes(tagged)
        == causes(untagged)
        == {
            "X": ("fails", "budget-bound"),
            "Y": ("holds", ""),
            "Z": ("not measured", ""),
            "W": ("fails", "robust"),
            "U": ("fails", ""),
        }
    )
    for fmt in (render.markdown, render.latex, render.html_page):
        assert fmt(tagged) == fmt(untagged)
    assert render.verdicts_csv_rows(tagged) == render.verdicts_csv_rows(untagged)
    md = render.markdown(tagged)
    assert "not evidence" not in md and "| X | fails | budget-bound |" in md
    assert "Cause: **budget-bound**. at 4x the budget A wins\n" in md


def test_smoke_scale_labels_every_verdict_but_holds_unless_the_diagnosis_covers_it(paper):
    report = rep.build(paper, records(["smoke"] * 4), ["e"])
    assert report.tables[0].scales == {"smoke": 8} and {v.scale for v in report.verdicts} == {"smoke"}
    assert causes(report) == {
        "X": ("fails", SMOKE),
        "Y": ("holds", ""),
        "Z": ("not measured", SMOKE),
        "W": ("fails", "robust"),  # its diagnosis names the smoke scale
        "U": ("fails", SMOKE),
    }
    md = render.markdown(report)
    assert "| X | fails | smoke scale (not evidence) | 4 |" in md and "| Y | holds | - |" in md
    assert (
        "### X: fails (smoke scale (not evidence))" in md and "### Z: not measured (smoke scale (not evidence))" in md
    )
    legend = [line for line in md.splitlines() if line.startswith("> cause ")]
    assert legend == [
        "> cause 'smoke scale (not evidence)': the claim's table was run by `gpdlm reproduce --scale smoke`, "
        f"{render.SCALE_RUNS['smoke']}: a test that cannot resolve the claim, so its 'fails' or 'not measured' "
        "is no evidence against it."
    ]
    # X: the scale, then the claim's own diagnosis at the scale it was made at; U: no diagnosis to add
    x = (
        "Cause: **smoke scale (not evidence)**. Table t1's runs are `gpdlm reproduce --scale smoke` runs (param "
        f"sweep.scale): {render.SCALE_RUNS['smoke']}, too small to decide the claim; rerun at `--scale paper` for "
        "a verdict. gpdlm's diagnosis at scale paper: budget-bound (at 4x the budget A wins)\n"
    )
    assert x in md
    assert "rerun at `--scale paper` for a verdict\n\n* [dataset=pol, method=A] vs [method=B]" in md
    assert "Cause: **robust**. the same at 2x\n" in md
    rows = {r[0]: dict(zip(render.verdicts_csv_rows(report)[0], r)) for r in render.verdicts_csv_rows(report)[1]}
    assert rows["X"]["cause"] == SMOKE and rows["X"]["cause_evidence"].endswith(
        "budget-bound (at 4x the budget A wins)"
    )
    assert (rows["Y"]["cause"], rows["Y"]["cause_evidence"]) == ("", "")
    assert rows["W"]["cause_evidence"] == "the same at 2x"
    assert "smoke scale (not evidence)&#x27;: the claim&#x27;s table was run by" in render.html_page(report)
    assert r"\par\footnotesize cause 'smoke scale (not evidence)'" in render.latex(report)


def test_the_smallest_scale_of_a_tables_runs_decides(paper):
    mixed = rep.build(paper, records(["paper", "paper", "reduced", None], reduced_epochs=True), ["e"])
    assert mixed.tables[0].scales == {"paper": 4, "reduced": 2} and mixed.tables[0].scale == "reduced"
    assert causes(mixed)["X"] == ("fails", "reduced scale (not evidence)")
    assert causes(mixed)["W"] == ("fails", "robust")
    md = render.markdown(mixed)
    assert (
        "> cause 'reduced scale (not evidence)': the claim's table was run by `gpdlm reproduce --scale reduced`" in md
    )
    # a reduced run whose configuration but for the seed is a paper run's is the paper plan's run at its seed (a
    # study continued at the paper's seeds over a reduced study's records, `gpdlm reproduce --done`)
    continued = rep.build(paper, records(["reduced", "reduced", "paper", "paper"]), ["e"])
    assert continued.tables[0].scales == {"paper": 8} and causes(continued)["X"] == ("fails", "budget-bound")
    alone = rep.build(paper, [r for r in records(["reduced", "reduced", "paper", "paper"]) if r.params["model.name"] == "a"]
                      + [r for r in records(["reduced"] * 4) if r.params["model.name"] == "b"], ["e"])  # fmt: skip
    assert (
        alone.tables[0].scales == {"paper": 4, "reduced": 4} and causes(alone)["X"][1] == "reduced scale (not evidence)"
    )
    # an unknown value of the param is no scale
    odd = rep.build(paper, records(["huge"] * 4), ["e"])
    assert odd.tables[0].scales == {} and causes(odd)["X"] == ("fails", "budget-bound")


def test_a_causes_scales_are_checked(paper, tmp_path):
    assert paper.claims[0].cause_scales == ("paper",)
    assert paper.claims[3].cause_scales == ("smoke", "reduced", "paper")
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLAIMS.replace("scales: [smoke, reduced, paper]", "scales: [smoke, huge]"))
    with pytest.raises(
        AnalysisError, match=r"^bad.yaml: claim W: cause scales \['smoke', 'huge'\]: a list of smoke, reduced, paper$"
    ):
        C.load(bad)
