"""`--scale reduced` for the airline presets (issue 39): the reduced presets' job counts and budgets are the ones
docs/reproduce.md states ("Reduced airline budgets"), and the reduced scale maps the paper's airline presets to
them. Counted from the composed configs (no data, no training)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from gpdlm_cli.analysis import claims
from gpdlm_cli.commands import reproduce as rp
from gpdlm_cli.sweep.compose import compose_jobs
from gpdlm_cli.sweep.plan import job_overrides

DOC = Path(__file__).resolve().parents[2] / "docs" / "reproduce.md"


def _documented() -> dict[str, dict[str, int]]:
    """The rows of the table under '## Reduced airline budgets': preset -> jobs, rows, test rows, epochs, steps."""
    text = DOC.read_text().split("## Reduced airline budgets", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(\w+_reduced)` \(`(\w+)`\)", cells[0]) if len(cells) >= 7 else None
        if m:
            num = [int(c.replace(",", "")) for c in cells[1:6]]
            rows[m.group(1)] = {"base": m.group(2), **dict(zip(("jobs", "rows", "test", "epochs", "steps"), num))}
    return rows


def _budget(preset: str) -> dict[str, int]:
    jobs, _ = job_overrides([f"+experiment={preset}"])
    cfgs = compose_jobs(jobs)
    cfg = cfgs[0]
    split, t = cfg.dataset.split, cfg.trainer
    if cfg.model.name == "svbssgp":  # one step per block (partition) per epoch
        steps = int(t.max_epochs) * int(cfg.model.partitions)
    else:
        steps = int(t.max_epochs) * math.ceil(int(split.train_size) / int(t.batch_size))
    assert all(c.dataset.split.train_size == split.train_size and c.trainer.max_epochs == t.max_epochs for c in cfgs)
    assert str(cfg.tracking.experiment).endswith("_reduced")  # never mixed with the paper-scale runs
    return {
        "jobs": len(jobs),
        "rows": int(split.train_size),
        "test": int(split.test_size),
        "epochs": int(t.max_epochs),
        "steps": steps,
    }


@pytest.mark.slow  # composes every job's config (~20 s here)
def test_reduced_airline_presets_have_the_documented_budget():
    doc = _documented()
    assert sorted(doc) == [
        "airline_curves_reduced",
        "pic_airline_reduced",
        "sampling_methods_exact_reduced",
        "sampling_methods_reduced",
        "sampling_methods_smooth_reduced",
        "svbssgp_airline_reduced",
    ]
    for preset, row in doc.items():
        assert _budget(preset) == {k: v for k, v in row.items() if k != "base"}, preset
    # the paper's presets keep the papers' budgets: all 1.93M (DLM) or 1.95M (sVBSSGP) rows, 5 seeds
    for preset in ("airline_curves", "svbssgp_airline"):
        jobs, cfg = job_overrides([f"+experiment={preset}"])
        assert cfg.dataset.split.train_size is None and len({tuple(j) for j in jobs}) >= 5


@pytest.mark.slow
def test_the_reduced_scale_maps_the_airline_presets():
    doc = _documented()
    dlm = rp.derive(claims.load("dlm"), ["D8-airline", "D9-recover-exact", "D11-smooth-bmc-1"], "reduced", "paper")
    sv = rp.derive(claims.load("svbssgp"), ["T1-airline"], "reduced", "paper")
    planned = {(m.preset, tuple(m.overrides)) for m in dlm.multiruns + sv.multiruns}
    assert planned == {
        ("airline_curves_reduced", ("dataset=airline", "seed=0,1")),
        ("sampling_methods_reduced", ("dataset=airline", "seed=0,1")),
        ("sampling_methods_exact_reduced", ("dataset=airline", "seed=0,1")),
        ("sampling_methods_smooth_reduced", ("dataset=airline", "seed=0,1")),
        ("sampling_methods_smooth_reduced", ("seed=0,1",)),  # D11's own preset and its own arm (the bMC runs): no
        ("sampling_methods_reduced", ("seed=0,1",)),  # dataset override (the same jobs: skip_finished runs them once)
        ("svbssgp_airline_reduced", ("seed=0,1",)),
        ("svbssgp_airline_reduced", ("model=vssgp", "seed=0,1")),  # T1-airline's own arms: no SSGP (the paper has
        ("pic_airline_reduced", ("seed=0,1",)),  # none on AIRLINE), DTC++ and PIC++
    }
    for p, row in doc.items():
        assert rp.load_scales()["reduced"]["presets"][row["base"]] == p
    rp.expand(sv)  # the scale's seed=0,1 and the preset's agree: 2 jobs per arm
    assert [m.jobs for m in sv.multiruns] == [2, 2, 4]  # pic_airline_reduced: DTC++ and PIC++
