"""What a fresh clone needs besides the code (issue 44): a LICENSE, a valid CITATION.cff, and a Makefile
that finds a supported Python (3.11-3.13) instead of hard-coding one, with a lean `make demo` (no Ray)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO


def test_license_is_mit_for_the_gpdlm_authors():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the gpdlm authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


def test_citation_cff_is_valid_cff_1_2_0():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    # the keys CFF 1.2.0 requires, and the types it prescribes for those used here
    assert cff["cff-version"] == "1.2.0"
    assert isinstance(cff["message"], str) and isinstance(cff["title"], str) and cff["title"].startswith("gpdlm")
    assert cff["type"] in ("software", "dataset")
    assert cff["authors"] and all(("name" in a) or ("family-names" in a) for a in cff["authors"])
    assert cff["license"] == "MIT"
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert str(cff["version"]) == version
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert {f"Programming Language :: Python :: 3.{m}" for m in (11, 12, 13)} <= set(project["classifiers"])
    for ref in cff["references"]:
        assert {"type", "title", "authors"} <= set(ref)
        assert all("family-names" in a for a in ref["authors"])


def _make(*args, **kw):
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_finds_a_supported_python_and_says_so_when_there_is_none():
    # this interpreter (3.11-3.13) is accepted
    assert (3, 11) <= sys.version_info[:2] <= (3, 13)
    assert _make("check-python", f"PYTHON={sys.executable}").returncode == 0
    # none of the candidates on PATH: one line, exit 2, nothing created
    done = _make("check-python", "SUPPORTED_PYTHONS=no-such-python3.99")
    assert done.returncode != 0
    assert "make: error: no Python 3.11-3.13 found on PATH (tried no-such-python3.99)" in done.stderr
    # a PYTHON outside the range is refused by name
    done = _make("check-python", "PYTHON=no-such-python")
    assert done.returncode != 0 and "PYTHON=no-such-python is not a Python 3.11-3.13" in done.stderr
    # the default is found among python3.13/3.12/3.11/python3, not hard-coded
    plan = _make("-n", "install", "VENV=/nonexistent-gpdlm-venv").stdout
    assert " -m venv /nonexistent-gpdlm-venv" in plan


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_no_ray_and_make_test_does():
    demo = _make("-n", "demo", "VENV=/nonexistent-gpdlm-venv").stdout
    test = _make("-n", "test", "VENV=/nonexistent-gpdlm-venv").stdout
    assert "gpdlm train" in demo and "ray" not in demo
    assert '"ray>=2.9,<3"' in test and "hydra-ray-launcher" in test and "pytest" in test
