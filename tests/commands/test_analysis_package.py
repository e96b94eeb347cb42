"""The analysis package (issue 20): every module imports without torch, and the family declarations
reach selection through the run tags, the families, or the defaults."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpdlm_cli.analysis as analysis
from gpdlm_cli.analysis import declarations as D
from gpdlm_cli.analysis.records import RunRecord
from gpdlm_cli.analysis.selection import select_records

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(f"gpdlm_cli.analysis.{m.name}" for m in pkgutil.iter_modules(analysis.__path__))
SHELLS = [
    "gpdlm_cli.commands.compare",
    "gpdlm_cli.commands.select",
    "gpdlm_cli.commands.run_list",
    "gpdlm_cli.commands.report",
]


def test_analysis_and_its_commands_import_without_torch():
    assert {"records", "store", "tables", "selection", "summary", "figures", "declarations"} <= {
        m.rsplit(".", 1)[1] for m in MODULES
    }
    code = (
        "import importlib, json, sys\n"
        "out = {}\n"
        f"for name in {MODULES + SHELLS!r}:\n"
        "    importlib.import_module(name)\n"
        "    out[name] = sorted(m for m in ('torch', 'gpytorch', 'gpdlm_cli.methods') if m in sys.modules)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert set(loaded) == set(MODULES + SHELLS)
    assert all(v == [] for v in loaded.values()), loaded


def _run(rid, model, beta, val, tags=None, **metrics):
    params = {
        "dataset.name": "d",
        "model.name": model,
        "model.variant": "joint",
        "likelihood.name": "gaussian",
        "estimator.name": "auto",
        "objective.beta": str(beta),
        "seed": "0",
    }
    return RunRecord(rid, rid, int(rid[-1]), params, {"n_train": 10.0, **val, **metrics}, dict(tags or {}))


def test_the_selection_metric_comes_from_the_tag_then_the_family_then_val_nll():
    # the tag wins over the family: an svgp run tagged val_rmse is selected by val_rmse
    tagged = [
        _run(
            "a1",
            "svgp",
            0.5,
            {"val_nll": 1.0, "val_rmse": 9.0},
            {D.SELECTION_TAG: "val_rmse", D.REFERENCE_BETA_TAG: "none"},
        ),
        _run(
            "a2",
            "svgp",
            1.0,
            {"val_nll": 2.0, "val_rmse": 3.0},
            {D.SELECTION_TAG: "val_rmse", D.REFERENCE_BETA_TAG: "none"},
        ),
    ]
    sel, _ = select_records(tagged)
    assert [(s.method, s.record.run_id, s.val_metric) for s in sel] == [("svgp", "a2", "val_rmse")]
    # untagged: the family's declaration (sq_dlm: val_mse, with val_rmse as its same-arg-min stand-in)
    untagged = [
        _run("b1", "sq_dlm", 0.5, {"val_nll": 1.0, "val_rmse": 2.0}),
        _run("b2", "sq_dlm", 1.0, {"val_nll": 2.0, "val_rmse": 1.5}),
    ]
    sel, _ = select_records(untagged)
    assert [(s.record.run_id, s.val_metric) for s in sel] == [("b2", "val_rmse")]
    # untagged svgp: the family's reference beta gives the "(beta=1)" row
    sel, _ = select_records([_run("c1", "svgp", 0.5, {"val_nll": 1.0}), _run("c2", "svgp", 1.0, {"val_nll": 2.0})])
    assert [(s.method, s.record.run_id) for s in sel] == [("svgp", "c1"), ("svgp (beta=1)", "c2")]
    # a model no family serves: val_nll, no reference row
    sel, _ = select_records(
        [
            _run("d1", "nosuch", 0.5, {"val_nll": 3.0, "val_mse": 0.1}),
            _run("d2", "nosuch", 1.0, {"val_nll": 2.0, "val_mse": 0.2}),
        ]
    )
    assert [(s.method, s.record.run_id, s.val_metric) for s in sel] == [("nosuch", "d2", "val_nll")]


@pytest.mark.parametrize("model", ["svgp", "dlm", "sq_dlm", "sgpr", "scgd", "gp_lstm"])
def test_tagged_and_untagged_runs_select_alike(model):
    """declaration_tags (what training records) says what the family lookup says."""
    from gpdlm_cli import methods

    tags = methods.declaration_tags(model)
    runs = [_run("e1", model, 1.0, {})]
    assert D.selection_metric(runs) == methods.selection_metric(model) == tags[D.SELECTION_TAG]
    tagged = [_run("e1", model, 1.0, {}, tags)]
    assert D.selection_metric(tagged) == D.selection_metric(runs)
    assert D.reference_beta(tagged) == D.reference_beta(runs) == methods.declaration(model, "REFERENCE_BETA")
