"""`gpdlm report` on a synthetic experiment with known metric values: its tables (cells, selection by
validation, mean and SE, best and within-one-SE marks, average ranks, the paper's numbers) and its
verdicts (a claim that holds, one that fails, one not measured, an at-least-k claim, an argmin claim)
against values computed by hand in this file; the outputs (Markdown, LaTeX, a self-contained HTML
page, CSV, the `report` MLflow run); bad input as one line."""

from __future__ import annotations

import csv
import math
import statistics
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient
from scipy import stats as st

from gpdlm_cli import cli

from .conftest import make_experiment, make_run, one_line_error

EXP = "synth_report"
SEEDS = [0, 1, 2]

# test_nll of every (dataset, model, beta) and seed, and val_nll of each (dataset, model, beta): the
# validation picks beta = 0.1 for both models everywhere; dlm at beta = 1 is a trap (test 0.0, but
# never selected), which the argmin table (no selection) does see
TEST_NLL = {
    ("pol", "dlm", 0.1): [1.00, 1.01, 1.02],
    ("pol", "dlm", 1.0): [0.0, 0.0, 0.0],
    ("pol", "svgp", 0.1): [1.20, 1.22, 1.24],
    ("pol", "svgp", 1.0): [1.50, 1.55, 1.51],
    ("kin", "dlm", 0.1): [2.0, 2.1, 2.2],
    ("kin", "dlm", 1.0): [0.0, 0.0, 0.0],
    ("kin", "svgp", 0.1): [1.00, 1.05, 1.10],
    ("kin", "svgp", 1.0): [1.07, 1.07, 1.07],
}
VAL_NLL = {0.1: {"dlm": 1.0, "svgp": 0.5}, 1.0: {"dlm": 2.0, "svgp": 1.0}}
SIZES = [100, 200]

CLAIMS = """
paper: synth
title: A synthetic paper
citation: nobody, 2026
units: [seed]
alpha: 0.05
test: ttest
tables:
  - id: t1
    title: "Table 1: test NLL"
    preset: regression_logloss_smoke
    metric: test_nll
    rows: [dataset, train_size]
    columns: [method]
    select: {over: [objective.beta], by: val_nll}
    curves: true
    decimals: 3
    dimensions:
      dataset: {key: dataset.name, values: [pol, kin]}
      train_size: {key: train_size, values: auto}
      method:
        values:
          ELBO: {match: {model.name: svgp, objective.beta: 1}}
          beta-ELBO: {match: {model.name: svgp}}
          DLM: {match: {model.name: dlm}}
          FITC: {match: {model.name: fitc}}
    paper:
      - {dataset: pol, train_size: 100, DLM: "1.000 ± 0.100", ELBO: "1.5"}
  - id: t2
    title: "Figure 2: test NLL against beta"
    preset: beta_curve_smoke
    metric: test_nll
    rows: [beta]
    columns: [method]
    match: {dataset.name: pol, metrics.n_train: 100}
    dimensions:
      beta: {key: objective.beta, values: auto}
      method:
        values:
          DLM: {match: {model.name: dlm}}
          SVGP: {match: {model.name: svgp}}
claims:
  - id: A
    statement: DLM beats ELBO and beta-ELBO on pol at every training size
    table: t1
    data: mirror
    cause: robust
    better: {method: DLM}
    than: {method: [ELBO, beta-ELBO]}
    where: {dataset: pol}
  - id: B
    statement: DLM beats beta-ELBO on kin at every training size
    table: t1
    data: generator
    cause: {label: budget-bound, evidence: "at 4x the budget DLM wins (gpdlm train ... trainer.max_epochs=400)"}
    better: {method: DLM}
    than: {method: beta-ELBO}
    where: {dataset: kin}
  - id: C
    statement: DLM beats FITC everywhere
    table: t1
    data: paper
    better: {method: DLM}
    than: {method: FITC}
  - id: D
    statement: DLM beats beta-ELBO on at least 1 of the 2 datasets
    table: t1
    data: stand-in
    better: {method: DLM}
    than: {method: beta-ELBO}
    require: {at_least: 1, over: dataset}
  - id: E
    statement: the best beta is above 0.5 for every method
    table: t2
    data: mirror
    kind: argmin
    over: beta
    condition: {gt: 0.5}
  - id: F
    statement: ELBO is within 0.1 of beta-ELBO on kin (TOST)
    table: t1
    data: generator
    kind: equivalent
    margin: 0.1
    better: {method: ELBO}
    than: {method: beta-ELBO}
    where: {dataset: kin}
    test: wilcoxon
"""


@pytest.fixture(scope="module")
def store(module_uri, tmp_path_factory):
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, EXP)
    for (dataset, model, beta), values in TEST_NLL.items():
        for size in SIZES:
            for seed, v in zip(SEEDS, values):
                make_run(
                    client,
                    exp,
                    {
                        "dataset.name": dataset,
                        "model.name": model,
                        "model.variant": "joint",
                        "objective.beta": beta,
                        "seed": seed,
                        "dataset.split.train_size": size,
                    },
                    {"test_nll": v, "val_nll": VAL_NLL[beta][model], "n_train": size},
                    steps={"test_nll": [(10, v + 1.0), (20, v + 0.5), (30, v)]},
                )
    # runs the report must ignore: unfinished, a sweep parent, another command's run
    trap = {
        "dataset.name": "pol",
        "model.name": "dlm",
        "model.variant": "joint",
        "objective.beta": 0.1,
        "seed": 0,
        "dataset.split.train_size": 100,
    }
    for status in ("FAILED", "RUNNING"):
        make_run(client, exp, trap, {"test_nll": 1e6, "val_nll": -1e6, "n_train": 100}, status=status)
    make_run(client, exp, trap, {"test_nll": 1e6, "val_nll": -1e6, "n_train": 100}, command="compare")
    # a `gpdlm bias` run: read by the report, but only by a table whose match names the bias command
    make_run(client, exp, trap, {"test_nll": 1e6, "val_nll": -1e6, "n_train": 100}, command="bias")
    make_experiment(client, module_uri, "empty")
    claims = tmp_path_factory.mktemp("claims") / "synth.yaml"
    claims.write_text(CLAIMS)
    return {"uri": module_uri, "client": client, "exp": exp, "claims": str(claims)}


def _report(store, tmp_path, *args):
    return cli.main(
        [
            "report",
            "--tracking-uri",
            store["uri"],
            "--experiment",
            EXP,
            "--claims",
            store["claims"],
            "--out",
            str(tmp_path),
            *args,
        ]
    )


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _mean_se(values):
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def test_cells_are_the_selected_runs_mean_and_se(store, tmp_path):
    assert _report(store, tmp_path, "--no-log") == 0
    cells = {(r["table"], r["row"], r["column"]): r for r in _rows(tmp_path / "cells.csv")}
    expected = {  # (dataset, method) -> the values the selection must give, at both training sizes
        ("pol", "ELBO"): TEST_NLL[("pol", "svgp", 1.0)],
        ("pol", "beta-ELBO"): TEST_NLL[("pol", "svgp", 0.1)],
        ("pol", "DLM"): TEST_NLL[("pol", "dlm", 0.1)],
        ("kin", "ELBO"): TEST_NLL[("kin", "svgp", 1.0)],
        ("kin", "beta-ELBO"): TEST_NLL[("kin", "svgp", 0.1)],
        ("kin", "DLM"): TEST_NLL[("kin", "dlm", 0.1)],
    }
    for (dataset, method), values in expected.items():
        for size in SIZES:
            cell = cells[("t1", f"{dataset} / {size}", method)]
            mean, se = _mean_se(values)
            assert float(cell["mean"]) == pytest.approx(mean, abs=1e-12)
            assert float(cell["se"]) == pytest.approx(se, abs=1e-12)
            assert int(cell["n"]) == 3 and len(cell["run_ids"].split(";")) == 3
    for size in SIZES:  # no FITC run: an empty cell
        assert (
            cells[("t1", f"pol / {size}", "FITC")]["mean"] == "" and cells[("t1", f"pol / {size}", "FITC")]["n"] == "0"
        )
    # best along each row: DLM on pol, beta-ELBO on kin; ELBO on kin is within one SE of it
    # (|1.07 - 1.05| = 0.02 <= SE 0.0289), nothing else is
    best = {k for k, c in cells.items() if c["best"] == "1" and k[0] == "t1"}
    near = {k for k, c in cells.items() if c["within_1se"] == "1" and k[0] == "t1"}
    assert best == {("t1", f"{d} / {s}", m) for s in SIZES for d, m in (("pol", "DLM"), ("kin", "beta-ELBO"))}
    assert near == {("t1", f"kin / {s}", "ELBO") for s in SIZES}
    assert _mean_se(TEST_NLL[("kin", "svgp", 0.1)])[1] == pytest.approx(0.05 / math.sqrt(3))
    # the paper's numbers where the claims file gives them
    assert (
        float(cells[("t1", "pol / 100", "DLM")]["paper_mean"]),
        float(cells[("t1", "pol / 100", "DLM")]["paper_spread"]),
    ) == (1.0, 0.1)
    assert (
        cells[("t1", "pol / 100", "ELBO")]["paper_mean"] == "1.5"
        and cells[("t1", "pol / 100", "ELBO")]["paper_spread"] == ""
    )
    # table 2 has no selection: every beta is its own row, the beta = 1 trap included
    assert float(cells[("t2", "1", "DLM")]["mean"]) == 0.0 and float(
        cells[("t2", "0.1", "DLM")]["mean"]
    ) == pytest.approx(1.01)


def _p_less(a, b):
    return st.ttest_rel(a, b, alternative="less").pvalue


def test_verdicts_match_hand_computed_paired_tests(store, tmp_path):
    assert _report(store, tmp_path, "--no-log") == 0
    v = {r["claim"]: r for r in _rows(tmp_path / "verdicts.csv")}
    dlm_pol, dlm_kin = TEST_NLL[("pol", "dlm", 0.1)], TEST_NLL[("kin", "dlm", 0.1)]
    # A holds: 4 comparisons (2 sizes x 2 baselines), p = the largest of the four one-sided t-tests
    p_a = max(_p_less(dlm_pol, TEST_NLL[("pol", "svgp", 1.0)]), _p_less(dlm_pol, TEST_NLL[("pol", "svgp", 0.1)]))
    assert v["A"]["verdict"] == "holds" and float(v["A"]["p"]) == pytest.approx(p_a, rel=1e-9) and p_a < 0.05
    assert (v["A"]["n_min"], v["A"]["n_max"]) == ("3", "3") and v["A"]["detail"] == "4 of 4 comparisons hold"
    # B fails: DLM is worse on kin (p near 1)
    p_b = _p_less(dlm_kin, TEST_NLL[("kin", "svgp", 0.1)])
    assert v["B"]["verdict"] == "fails" and float(v["B"]["p"]) == pytest.approx(p_b, rel=1e-9) and p_b > 0.95
    # C: no FITC run
    assert v["C"]["verdict"] == "not measured" and v["C"]["p"] == "" and v["C"]["n_max"] == "0"
    # D: holds on pol only, which is enough for at least 1 of 2
    assert v["D"]["verdict"] == "holds" and v["D"]["detail"].startswith(
        "holds for 1 of 2 dataset values (needs 1): pol"
    )
    assert float(v["D"]["p"]) == pytest.approx(_p_less(dlm_pol, TEST_NLL[("pol", "svgp", 0.1)]), rel=1e-9)
    # E: DLM's best beta is 1 (0.0 < 1.01, significant), SVGP's is 0.1 (1.22 < 1.52): the claim fails
    assert v["E"]["verdict"] == "fails" and v["E"]["detail"] == "1 of 2 comparisons hold"
    p_e = _p_less(TEST_NLL[("pol", "svgp", 1.0)], TEST_NLL[("pol", "svgp", 0.1)])  # beta > 0.5 vs beta <= 0.5, SVGP
    assert float(v["E"]["p"]) == pytest.approx(p_e, rel=1e-9)
    # F: TOST with Wilcoxon: differences ELBO - beta-ELBO on kin are 0.07, 0.02, -0.03; the exact
    # one-sided Wilcoxon p-values of d + 0.1 > 0 and d - 0.1 < 0 are both 1/8 with n = 3: not equivalent
    d = [a - b for a, b in zip(TEST_NLL[("kin", "svgp", 1.0)], TEST_NLL[("kin", "svgp", 0.1)])]
    p_f = max(
        st.wilcoxon([x + 0.1 for x in d], alternative="greater").pvalue,
        st.wilcoxon([x - 0.1 for x in d], alternative="less").pvalue,
    )
    assert p_f == pytest.approx(0.125) and v["F"]["verdict"] == "fails" and float(v["F"]["p"]) == pytest.approx(p_f)


def test_markdown_layout_marks_and_ranks(store, tmp_path):
    out = tmp_path / "r.md"
    assert _report(store, tmp_path, "--no-log", "--output", str(out)) == 0
    md = out.read_text()
    assert md == (tmp_path / "report.md").read_text()
    lines = md.splitlines()
    start = lines.index("### Table 1: test NLL")
    table = [ln for ln in lines[start:] if ln.startswith("|")][:7]
    assert table[0] == "| dataset | train_size | ELBO | beta-ELBO | DLM | FITC |"
    # rows in the paper's order (pol before kin, as listed), sizes as numbers
    assert [ln.split(" | ")[0:2] for ln in table[2:6]] == [
        ["| pol", "100"],
        ["| pol", "200"],
        ["| kin", "100"],
        ["| kin", "200"],
    ]
    assert "**1.010 ± 0.006 (n=3)** [paper 1.000 ± 0.100]" in table[2]
    assert "1.520 ± 0.015 (n=3) [paper 1.500]" in table[2]
    assert "1.070 ± 0.000 (n=3)\u2020" in table[4] and "**1.050 ± 0.029 (n=3)**" in table[4]
    # average ranks over the 4 rows (FITC unranked): ELBO (3+3+2+2)/4, beta-ELBO (2+2+1+1)/4, DLM (1+1+3+3)/4;
    # the paper's own over its one complete row (pol, 100: DLM 1.0 < ELBO 1.5)
    assert table[6] == "| average rank |  | 2.50 [paper 2.00] | 1.50 | 2.00 [paper 1.00] | - |"
    assert "| A | holds | - | 3 | paired t-test (one-sided), alpha=0.05 |" in md  # a cause shows with "fails" only
    assert "| C | not measured | - | - |" in md


@pytest.mark.slow  # ~3 s
def test_a_failing_claims_cause_is_shown(store, tmp_path):
    """Issue 40: a claim's ``cause`` (label and evidence) stands next to its "fails" verdict in the
    Markdown, the HTML and verdicts.csv."""
    assert _report(store, tmp_path, "--no-log") == 0
    md = (tmp_path / "report.md").read_text()
    assert "| B | fails | budget-bound | 3 |" in md
    assert "### B: fails (budget-bound)" in md
    assert "Cause: **budget-bound**. at 4x the budget DLM wins (gpdlm train ... trainer.max_epochs=400)" in md
    assert "### A: holds" in md.splitlines()
    rows = {r["claim"]: r for r in _rows(tmp_path / "verdicts.csv")}
    assert (rows["B"]["cause"], rows["A"]["cause"]) == ("budget-bound", "")
    assert rows["B"]["cause_evidence"].startswith("at 4x the budget")
    assert _report(store, tmp_path / "html", "--no-log", "--format", "html") == 0
    assert '<td class="fails">fails</td><td>budget-bound</td>' in (tmp_path / "html" / "report.html").read_text()


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_latex_and_html(store, tmp_path):
    assert _report(store, tmp_path / "tex", "--no-log", "--format", "latex") == 0
    tex = (tmp_path / "tex" / "report.tex").read_text()
    assert r"\textbf{1.010 $\pm$ 0.006 (n=3)} {\scriptsize[1.000 $\pm$ 0.100]}" in tex
    assert r"beta-ELBO" in tex and r"1.070 $\pm$ 0.000 (n=3)$^\dagger$" in tex
    assert _report(store, tmp_path / "html", "--no-log", "--format", "html") == 0
    page = (tmp_path / "html" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64,") == 3  # vs size, vs beta, curves
    assert "http" not in page.replace("http-equiv", "") and "<link" not in page and "<script" not in page
    assert '<td class="holds">holds</td>' in page and '<td class="fails">fails</td>' in page
    pngs = sorted(p.name for p in (tmp_path / "html").glob("*.png"))
    assert pngs == ["t1_0.png", "t1_1.png", "t2_0.png"]


def test_the_report_is_logged_to_mlflow(store, tmp_path, capsys):
    assert _report(store, tmp_path) == 0
    out = capsys.readouterr().out
    assert "2 hold, 3 fail, 1 not measured" in out
    client = store["client"]
    runs = client.search_runs([store["exp"]], filter_string="tags.`gpdlm.command` = 'report'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].info.run_name == "report"
    # 48 training runs and the one bias run (read, and used by no table here)
    assert runs[0].data.params["holds"] == "2" and runs[0].data.params["n_runs"] == "49"
    assert {a.path for a in client.list_artifacts(runs[0].info.run_id)} == {"report.md", "cells.csv", "verdicts.csv"}
    # the report run itself is never read back as a training run
    assert _report(store, tmp_path / "again", "--no-log") == 0
    assert "(49 runs of synth_report)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--experiment", "nope"], "experiment 'nope' does not exist in"),
        (["--experiment", "empty"], "no FINISHED training runs in experiment 'empty'"),
        (["--claims", "nopaper"], "unknown paper 'nopaper': choose from dlm, gplstm, rkhs, svbssgp"),
        (["--format", "pdf"], "gpdlm report: argument --format: invalid choice: 'pdf'"),
    ],
)
def test_bad_input_is_one_line(store, tmp_path, capsys, args, message):
    base = {"--experiment": EXP, "--claims": store["claims"]}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = ["report", "--tracking-uri", store["uri"], "--out", str(tmp_path)] + [x for kv in base.items() for x in kv]
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert message in one_line_error(capsys)


def test_a_broken_claims_file_is_one_line(store, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLAIMS.replace("than: {method: FITC}", "than: {method: FTC}"))
    assert (
        cli.main(["report", "--tracking-uri", store["uri"], "--experiment", EXP, "--claims", str(bad), "--no-log"]) == 2
    )
    assert one_line_error(capsys) == (
        "gpdlm: error: bad.yaml: claim C, than: 'FTC' is not a label of method (ELBO, beta-ELBO, DLM, FITC)"
    )


def test_analysis_imports_no_torch():
    code = (
        "import sys, gpdlm_cli.analysis.report, gpdlm_cli.analysis.render, gpdlm_cli.analysis.claims, "
        "gpdlm_cli.commands.report; assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_papers_own_average_ranks_from_its_printed_table():
    """GP-LSTM Table 2 ranked by hand per column (ties share the mean rank), RGP (quoted from Mattos
    et al., only in two columns) left out, so all six columns are complete."""
    from gpdlm_cli.analysis import claims
    from gpdlm_cli.analysis.report import build_table

    paper = claims.load("gplstm")
    tr = build_table(paper.tables["table2"], [], paper.units)
    ranks = dict(zip((k[0] for k in tr.method_keys), tr.paper_ranks))
    by_hand = {
        "NARX": [4, 6, 3, 4.5, 5, 4],
        "RNN": [6, 5, 6, 6, 4, 6],
        "LSTM": [3, 2, 4, 2, 6, 2],
        "GP-NARX": [2, 3.5, 1, 3, 1.5, 5],
        "GP-RNN": [5, 3.5, 5, 4.5, 3, 3],
        "GP-LSTM": [1, 1, 2, 1, 1.5, 1],
    }
    assert tr.paper_ranked_rows == 6 and ranks["RGP"] is None and ranks["GRU"] is None
    for method, per_column in by_hand.items():
        assert ranks[method] == pytest.approx(sum(per_column) / 6), method
    assert tr.ranked_rows == 0 and all(r is None for r in tr.ranks)  # no runs: nothing of gpdlm's to rank


def test_the_report_says_how_its_runs_were_made(store, tmp_path):
    """`## The study` (--study FILE, verbatim) and `## The runs read`: per experiment the runs, their
    protocol, datasets and code commit (counted from tags/params), the first and last start (UTC)
    and the summed train_seconds in hours."""
    client, uri = store["client"], store["uri"]
    exp = make_experiment(client, uri, "provenance_report")
    t0 = 1795579200000  # 2026-11-25 04:00 UTC in ms
    for i, (protocol, commit, seconds) in enumerate(
        [("fast", "abcdef1234567", 1800), ("fast", "abcdef1234567", 1800), ("paper", "0123456789ab", 3600)]
    ):
        make_run(
            client,
            exp,
            {
                "dataset.name": "pol",
                "model.name": "dlm",
                "model.variant": "joint",
                "objective.beta": 1.0,
                "seed": i,
                "dataset.split.train_size": 100,
            },
            {"test_nll": 1.0, "val_nll": 1.0, "n_train": 100, "train_seconds": seconds},
            tags={"gpdlm.protocol": protocol, "gpdlm.git_commit": commit},
            start_time=t0 + i * 75 * 60000,
        )
    study = tmp_path / "study.md"
    study.write_text(
        "Commands:\n\n    gpdlm sweep beta +experiment=x sweep.factor=4\n\nBudget: 3 seeds (the paper: 5).\n"
    )
    argv = [
        "report",
        "--tracking-uri",
        uri,
        "--experiment",
        "provenance_report",
        "--claims",
        store["claims"],
        "--out",
        str(tmp_path / "r"),
        "--no-log",
        "--study",
        str(study),
    ]
    assert cli.main(argv) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## The study\n\nCommands:\n\n    gpdlm sweep beta +experiment=x sweep.factor=4\n\nBudget: 3 seeds" in md
    assert (
        "| provenance_report | 3 | fast (2), paper (1) | pol (3) | abcdef1234 (2), 0123456789 (1) | "
        "2026-11-25 04:00 UTC | 2026-11-25 06:30 UTC | 2.00 |"
    ) in md
    assert md.index("## The runs read") < md.index("## Claims")
    assert cli.main([*argv[:-2], "--study", str(tmp_path / "missing.md")]) == 2


def test_auto_rows_come_from_the_tables_own_runs(store, tmp_path):
    """`values: auto` takes the values of the runs that belong to the table (matching a label of every
    declared dimension): a run of another dataset at another training size, read in the same report
    (e.g. pol regression next to the classification sets), adds no row."""
    client, uri = store["client"], store["uri"]
    exp = make_experiment(client, uri, "foreign_sizes")
    make_run(
        client,
        exp,
        {
            "dataset.name": "other",
            "model.name": "dlm",
            "model.variant": "joint",
            "objective.beta": 1.0,
            "seed": 0,
            "dataset.split.train_size": 999,
        },
        {"test_nll": 9.0, "val_nll": 9.0, "n_train": 999},
    )
    argv = [
        "report",
        "--tracking-uri",
        uri,
        "--experiment",
        EXP,
        "--experiment",
        "foreign_sizes",
        "--claims",
        store["claims"],
        "--out",
        str(tmp_path),
        "--no-log",
    ]
    assert cli.main(argv) == 0
    md = (tmp_path / "report.md").read_text()
    lines = md.splitlines()
    table = [ln for ln in lines[lines.index("### Table 1: test NLL") :] if ln.startswith("|")][:7]
    assert [ln.split(" | ")[1] for ln in table[2:6]] == ["100", "200", "100", "200"]
    assert "999" not in md.split("## Tables")[1]


BIAS_CLAIMS = """
paper: synth_bias
units: [seed]
tables:
  - id: bias
    title: "Gradient bias"
    preset: bias_study_smoke
    match: {tags.gpdlm.command: bias}
    metric: mean_block_bias_debiased_rel
    rows: [dataset]
    columns: [method]
    dimensions:
      dataset: {key: dataset.name, values: [doctor_visits]}
      method:
        values:
          uPS-10: {match: {estimator.name: ups, estimator.num_samples: 10}}
          bMC-10: {match: {estimator.name: bmc, estimator.num_samples: 10}}
  - id: train_only
    title: "Training runs"
    preset: count_smoke
    metric: mean_block_bias_debiased_rel
    rows: [dataset]
    columns: [method]
    dimensions:
      dataset: {key: dataset.name, values: [doctor_visits]}
      method:
        values:
          uPS-10: {match: {estimator.name: ups, estimator.num_samples: 10}}
claims:
  - id: ups-less-bias
    statement: uPS-10 has a smaller bias than bMC-10
    table: bias
    data: stand-in
    better: {method: uPS-10}
    than: {method: bMC-10}
"""


def test_a_table_that_asks_for_bias_runs_reads_them(store, tmp_path):
    """`gpdlm report` reads `gpdlm bias` runs (the DLM paper's Fig. 9 table) only for a table whose match
    names the bias command; the other tables ignore them. Paired one-sided t-test over 3 seeds by hand."""
    client, uri = store["client"], store["uri"]
    exp = make_experiment(client, uri, "synth_bias")
    ups, bmc = [0.010, 0.020, 0.015], [0.30, 0.25, 0.41]
    for seed in SEEDS:
        for name, vals in (("ups", ups), ("bmc", bmc)):
            make_run(
                client,
                exp,
                {
                    "dataset.name": "doctor_visits",
                    "model.name": "dlm",
                    "estimator.name": name,
                    "estimator.num_samples": 10,
                    "seed": seed,
                },
                {"mean_block_bias_debiased_rel": vals[seed]},
                command="bias",
            )
    claims = tmp_path / "synth_bias.yaml"
    claims.write_text(BIAS_CLAIMS)
    argv = [
        "report",
        "--tracking-uri",
        uri,
        "--experiment",
        "synth_bias",
        "--claims",
        str(claims),
        "--out",
        str(tmp_path / "out"),
        "--no-log",
    ]
    assert cli.main(argv) == 0
    cells = {(r["table"], r["column"]): r for r in _rows(tmp_path / "out" / "cells.csv")}
    assert float(cells[("bias", "uPS-10")]["mean"]) == pytest.approx(statistics.fmean(ups), rel=1e-12)
    assert float(cells[("bias", "bMC-10")]["mean"]) == pytest.approx(statistics.fmean(bmc), rel=1e-12)
    assert cells[("train_only", "uPS-10")]["mean"] == "" and cells[("train_only", "uPS-10")]["n"] == "0"
    verdict = {r["claim"]: r for r in _rows(tmp_path / "out" / "verdicts.csv")}["ups-less-bias"]
    assert verdict["verdict"] == "holds"
    assert float(verdict["p"]) == pytest.approx(_p_less(ups, bmc), rel=1e-9)


@pytest.mark.slow
def test_without_claims_the_report_is_the_experiments_own_tables_and_figures(store, tmp_path, capsys):
    """`gpdlm report --experiment X` without --claims (once refused): compare's table -- mean ± SE per
    group, the same rows -- and compare's figures, in one report, logged as a `report` run."""
    uri = store["uri"]
    assert (
        cli.main(["compare", "--tracking-uri", uri, "--experiment", EXP, "--out", str(tmp_path / "c"), "--no-log"]) == 0
    )
    capsys.readouterr()
    assert cli.main(["report", "--tracking-uri", uri, "--experiment", EXP, "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    md = (tmp_path / "r" / "report.md").read_text()
    table = (tmp_path / "c" / "compare.md").read_text().strip()
    assert table in md and md.startswith(f"# {EXP}\n\n48 FINISHED training runs of experiment '{EXP}'")
    row = next(ln for ln in table.splitlines() if ln.startswith("| pol | dlm | joint") and "| 0.1 | 100 |" in ln)
    mean, se = statistics.mean([1.00, 1.01, 1.02]), statistics.stdev([1.00, 1.01, 1.02]) / math.sqrt(3)
    assert row.split(" | ")[-1].rstrip(" |").replace("±", "+-").split(" +- ") == [f"{mean:.4g}", f"{se:.2g}"]
    figures = sorted(p.name for p in (tmp_path / "c").glob("*.png"))
    assert figures and figures == sorted(p.name for p in (tmp_path / "r").glob("*.png"))
    assert all(f"]({name})" in md for name in figures)
    client = store["client"]
    run = client.search_runs([store["exp"]], "tags.`gpdlm.command` = 'report' and params.claims = 'none'")[0]
    assert {"report.md", "summary.csv", "runs.csv"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    assert f"MLflow run 'report' {run.info.run_id}" in out
    assert (
        cli.main(
            [
                "report",
                "--tracking-uri",
                uri,
                "--experiment",
                EXP,
                "--out",
                str(tmp_path / "h"),
                "--format",
                "html",
                "--no-log",
            ]
        )
        == 0
    )
    page = (tmp_path / "h" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(figures) and "<td>pol</td>" in page


def test_an_unknown_cause_label_is_one_line(store, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLAIMS.replace("cause: robust", "cause: unknown"))
    assert (
        cli.main(["report", "--tracking-uri", store["uri"], "--experiment", EXP, "--claims", str(bad), "--no-log"]) == 2
    )
    assert (
        "claim A: cause label 'unknown': choose from robust, budget-bound, protocol-bound, stand-in only"
        in one_line_error(capsys)
    )
