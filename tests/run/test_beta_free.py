"""A model that ignores objective.beta (FITC, SGPR, the exact GP, ...) swept over beta: gpdlm's sweeper
launches it once per configuration instead of once per beta (sweep/beta_free.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpdlm_cli.sweep.beta_free import beta_free_options, collapse_beta_free, collapse_note

from ..conftest import compose

CONF = Path(__file__).resolve().parents[2] / "gpdlm_cli" / "conf" / "model"


@pytest.mark.slow
def test_the_list_matches_what_the_families_declare():
    from gpdlm_cli.methods import declaration

    options = sorted(p.stem for p in CONF.glob("*.yaml"))
    free = [o for o in options if not declaration(str(compose([f"model={o}"]).model.name), "USES_BETA")]
    assert sorted(beta_free_options()) == free  # read from the families' source, without importing them
    assert {"fitc", "sgpr", "exact"} <= set(free) and not {"dlm", "svgp", "vssgp"} & set(free)


def test_a_beta_sweep_runs_a_beta_free_model_once():
    jobs = [
        [f"model={m}", f"objective.beta={b}", f"seed={s}"] for m in ("dlm", "fitc") for b in (0.1, 1) for s in (0, 1)
    ]
    kept, dropped = collapse_beta_free(jobs)
    assert kept == [
        ["model=dlm", "objective.beta=0.1", "seed=0"],
        ["model=dlm", "objective.beta=0.1", "seed=1"],
        ["model=dlm", "objective.beta=1", "seed=0"],
        ["model=dlm", "objective.beta=1", "seed=1"],
        ["model=fitc", "objective.beta=0.1", "seed=0"],
        ["model=fitc", "objective.beta=0.1", "seed=1"],
    ]
    assert dropped == {"fitc": 2}
    assert collapse_note(dropped).startswith("model=fitc ignores objective.beta: 2 job(s)")
    # what gpdlm train -m launches and its plan counts
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from gpdlm_cli.sweep.plan import job_overrides
    from hydra_plugins.gpdlm_sweeper.gpdlm_sweeper import GpdlmSweeper

    assert len(job_overrides(["model=dlm,fitc,exact", "objective.beta=0.1,1,10"])[0]) == 3 + 1 + 1
    parsed = OverridesParser.create().parse_overrides(["model=sgpr,svgp", "objective.beta=0.5,2"])
    assert GpdlmSweeper.split_arguments(parsed, 2) == [
        [["model=sgpr", "objective.beta=0.5"], ["model=svgp", "objective.beta=0.5"]],
        [["model=svgp", "objective.beta=2"]],
    ]
