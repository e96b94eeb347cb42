"""Every cell a claim compares is trained by the claim's own `gpdlm reproduce` plan: for each claim of each
paper, at the paper's scale, some job of the multiruns planned for that claim composes to a config with the
cell's every ``match`` (the table's methods, data sets, modes ...). A claim whose baselines live in another
preset (the sVBSSGP paper's DTC++ and PIC++: pic_aimpeak, pic_airline) needs them as its arms, else its
verdict can only ever say "not measured" for those cells (it did, before the claims' own arms)."""

from __future__ import annotations

import itertools

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.analysis import claims as C
from gpdlm_cli.analysis.records import ALIASES
from gpdlm_cli.analysis.report import _same
from gpdlm_cli.commands import reproduce as rp

from ..conftest import compose, sweep_grid


def _is_sweep(o: str) -> bool:
    value = o.split("=", 1)[1] if "=" in o else ""
    return "," in value and not value.startswith(("[", "{"))


def _varies(key: str, keys: set[str]) -> bool:
    """Can the swept ``key`` change a value a cell matches on: the key itself, its config group's keys
    (``model=svgp`` sets ``model.name``) or a preset group (``experiment/rkhs_arm@_global_``: any key)?"""
    group = key.split("@", 1)[0].replace("/", ".")
    return key in keys or key.startswith("experiment/") or any(k.startswith(group + ".") for k in keys)


def _job_configs(m: rp.Multirun, keys: set[str]):
    """The composed configs of a multirun's jobs that can differ in ``keys``: every value of a swept key that
    can change them (``_varies``), the first value of every other (seeds, masks, learning rates ...); one at
    a time, so that a search stops composing at the first job that has what it looks for."""
    fixed = [f"+experiment={m.preset}", *(o for o in m.overrides if not _is_sweep(o))]
    grid = {k: v for k, v in sweep_grid(fixed).items() if k not in {o.split("=", 1)[0] for o in fixed}}
    grid.update({o.split("=", 1)[0]: o.split("=", 1)[1].split(",") for o in m.overrides if _is_sweep(o)})
    axes = [[f"{k}={v}" for v in (vs if _varies(k, keys) else vs[:1])] for k, vs in grid.items()]
    return (compose([*fixed, *pick], readonly=True) for pick in itertools.product(*axes))


def _match(table, dim: str, name: str) -> dict:
    """The config keys of the label ``name`` of the table's dimension ``dim`` (no tags, metrics, aliases)."""
    d = table.dimensions[dim]
    labels = {lab.name: lab.match for lab in d.labels} if d.labels else {name: {d.key: name}}
    return {
        k: v
        for k, v in labels[name].items()
        if k not in ALIASES and not k.startswith(("tags.", "metrics.", "attributes."))
    }


def _cells(paper: C.Paper, claim: C.Claim) -> list[dict]:
    """The ``match`` of every label a claim names in ``better``/``than``/``where`` (config keys only)."""
    table = paper.tables[claim.table]
    named = [*claim.better, *claim.than, *({d: v} for d, vs in claim.where.items() for v in vs)]
    return [m for sel in named for dim, name in sel.items() if (m := _match(table, dim, name))]


def _has(cfg, match: dict) -> bool:
    for key, want in match.items():
        have = OmegaConf.select(cfg, key, default=None)
        have = None if have is None else (str(have) if not isinstance(have, (int, float)) else have)
        if not any(_same(have, w) for w in (want if isinstance(want, list) else [want])):
            return False
    return True


@pytest.mark.slow  # ~8 s a paper (svbssgp) to ~50 s (rkhs): the fast lane stays under 2 minutes
@pytest.mark.parametrize("name", C.available())
def test_every_compared_cell_is_trained_by_the_claims_plan(name):
    paper = C.load(name)
    plan = rp.derive(paper, [], "paper", "paper")
    missing, checked = [], 0
    for claim in paper.claims:
        cells = _cells(paper, claim)
        runs = [m for m in plan.multiruns if claim.id in m.claims]
        if not runs or not cells:  # a table that cannot be run here says so (plan.left_out)
            continue
        for cell in cells:  # the jobs that can differ in this cell's keys (the product over every key: slow)
            checked += 1
            if not any(_has(c, cell) for m in runs for c in _job_configs(m, set(cell))):
                missing.append((claim.id, cell))
    assert not missing, missing
    assert checked >= len(paper.claims)


@pytest.mark.slow  # ~2-10 s a paper
@pytest.mark.parametrize("name", C.available())
def test_every_multirun_of_a_claim_trains_inside_its_where(name):
    """Each multirun planned for a claim has a job inside the claim's ``where`` (some combination of its
    labels: pol, b = 32, ...): an arm trained on other data is compute whose cells the claim never reads,
    and its method goes unmeasured where the claim compares it. D1-pol and D2-pol took the table's FITC arm,
    regression_baselines, on sarcos: FITC was never trained on pol by `gpdlm reproduce dlm`."""
    paper = C.load(name)
    plan = rp.derive(paper, [], "paper", "paper")
    outside = []
    for claim in paper.claims:
        if not claim.where:
            continue
        table = paper.tables[claim.table]
        wheres = [
            {k: v for dim, lab in zip(claim.where, pick, strict=True) for k, v in _match(table, dim, lab).items()}
            for pick in itertools.product(*claim.where.values())
        ]
        keys = set().union(*wheres)
        for m in (m for m in plan.multiruns if claim.id in m.claims):
            if not any(_has(c, w) for c in _job_configs(m, keys) for w in wheres):
                outside.append((claim.id, m.preset, m.overrides))
    assert not outside, outside


def test_a_claims_own_arms_replace_the_tables():
    """T1-airline runs DTC++ and PIC++ through pic_airline and no SSGP (the paper has no AIRLINE SSGP); the
    table's arms (SSGP, VSSGP) stay for a claim naming none of its own."""
    paper = C.load("svbssgp")
    plan = rp.derive(paper, ["T1-airline"], "reduced", "paper")
    assert [(m.preset, [o for o in m.overrides if not o.startswith("seed=")]) for m in plan.multiruns] == [
        ("svbssgp_airline_reduced", []),
        ("svbssgp_airline_reduced", ["model=vssgp"]),
        ("pic_airline_reduced", []),
    ]
    fig = rp.derive(paper, ["F2a-gamma0-best"], "paper", "paper")
    assert paper.claims[[c.id for c in paper.claims].index("F2a-gamma0-best")].arms is None
    assert len(fig.multiruns) == 1  # fig2a has no arms


def test_bad_claim_arms_are_one_line():
    with pytest.raises(C.AnalysisError, match=r"claim x, arms: must be a list of override lists"):
        C._arms("model=ssgp", "claim x, arms")
    with pytest.raises(C.AnalysisError, match=r"must be a list of override lists"):
        C._arms([["model"]], "claim x, arms")
    assert C._arms([["model=ssgp"], []], "w") == [["model=ssgp"], []]
