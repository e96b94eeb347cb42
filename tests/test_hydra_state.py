"""Hydra's job state (``HydraConfig``) is read at the composition root only (issue 46, item 2): the
families learn what they need of it -- the keys a multirun job's overrides set -- as a plain value,
``RunSpec.multirun_keys``, filled by ``build.specs``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

import gpdlm_cli
from gpdlm_cli import build
from gpdlm_cli.methods import sparse_variational

from .conftest import compose

PACKAGE = Path(gpdlm_cli.__file__).resolve().parent
#: where Hydra's job state may be read: the Hydra entry point, the composition root, the multirun's
#: composition (sweep/: it composes and plans jobs)
READERS = ("hydra_apps.py", "build.py", "sweep/")


def test_only_the_composition_root_reads_hydra_state():
    readers = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if "HydraConfig" in path.read_text()
    ]
    assert readers and all(rel.startswith(READERS) for rel in readers), readers


def _hydra(monkeypatch, mode, task):
    fake = SimpleNamespace(mode=mode, overrides=SimpleNamespace(task=task))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: fake))


def test_multirun_keys_are_the_keys_of_the_jobs_overrides(monkeypatch):
    assert build.multirun_keys() == ()  # not under Hydra
    _hydra(monkeypatch, RunMode.MULTIRUN, ["model=sq_dlm", "+objective.beta=0.1", "~trainer.lr"])
    assert build.multirun_keys() == ("model", "objective.beta", "trainer.lr")
    _hydra(monkeypatch, RunMode.RUN, ["objective.beta=0.1"])
    assert build.multirun_keys() == ()  # a single run sweeps nothing


@pytest.mark.parametrize("mode,swept", [(RunMode.MULTIRUN, True), (RunMode.RUN, False)])
def test_the_family_sees_a_beta_sweep_through_its_spec(monkeypatch, mode, swept):
    cfg = compose(["model=sq_dlm", "objective.beta=0.1"])
    _hydra(monkeypatch, mode, ["model=sq_dlm", "objective.beta=0.1"])
    spec = build.specs(cfg)
    assert sparse_variational.beta_is_swept(spec) is swept
    # a plain value: the family reads the spec, not Hydra
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: pytest.fail("the family read HydraConfig")))
    assert sparse_variational.beta_is_swept(spec) is swept
    assert sparse_variational.beta_is_swept(dataclasses.replace(spec, multirun_keys=("seed",))) is False
