"""The data cache lives outside the source tree (issue 47, item 5): ``$GPDLM_DATA``, else
``$XDG_CACHE_HOME/gpdlm``, else the user's cache directory; ``gpdlm datasets info`` says where; a run
from a checkout nobody may write into trains and caches its data outside it."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from gpdlm_cli.commands import datasets as cmd
from gpdlm_cli.data import paths

REPO = Path(__file__).resolve().parents[2]

CHECKOUT_PARTS = ("gpdlm_cli", "datasets", "hydra_plugins")


def test_cache_order_gpdlm_data_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPDLM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "gpdlm"
    assert paths.cache_dir_origin().startswith("$XDG_CACHE_HOME/gpdlm")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG rule: a relative path is ignored
    expected = {"darwin": tmp_path / "home" / "Library" / "Caches" / "gpdlm", "win32": paths.user_cache_dir()}.get(
        sys.platform, tmp_path / "home" / ".cache" / "gpdlm"
    )
    assert paths.cache_dir() == expected
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert paths.cache_dir() == expected
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path / "mine"))
    assert paths.cache_dir() == (tmp_path / "mine").resolve() and paths.cache_dir_origin() == "$GPDLM_DATA"
    assert REPO not in paths.user_cache_dir().parents  # never the source tree


def test_datasets_info_says_where_data_goes(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GPDLM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cmd.main(["info", "concrete"]) == 0
    out = capsys.readouterr().out
    cache = tmp_path / "xdg" / "gpdlm"
    assert (
        f"cache        {cache}  (raw files and parsed tables; $XDG_CACHE_HOME/gpdlm; set GPDLM_DATA to move it)" in out
    )
    assert f"not cached at {cache / 'concrete' / 'data.txt'}" in out


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.slow
def test_a_run_from_a_read_only_checkout_caches_data_outside_it(tmp_path, mirror_root):
    """A copy of the checkout (package, registry, Hydra plugin), made read-only, runs `gpdlm train` on a
    download dataset (from the mirror) with no GPDLM_DATA: the raw files land in $XDG_CACHE_HOME/gpdlm,
    and not one file of the checkout is added or changed."""
    checkout = tmp_path / "checkout"
    for part in CHECKOUT_PARTS:
        shutil.copytree(REPO / part, checkout / part, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    before = _files(checkout)
    for p in [checkout, *checkout.rglob("*")]:  # unwritable for anyone but root
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GPDLM_DATA", "PYTHONPATH")}
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        GPDLM_DATA_MIRROR=str(mirror_root),
        GPDLM_OFFLINE="0",
        PYTHONPATH=str(checkout),
        PYTHONDONTWRITEBYTECODE="1",
    )
    import subprocess

    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpdlm_cli.cli",
                "train",
                "dataset=pol",
                "dataset.split.train_size=300",
                "model=sgpr",
                "model.num_inducing=10",
                "trainer.max_iters=3",
                "trainer.eval_every=0",
                "tracking.enabled=false",
                "progress=false",
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        cache = tmp_path / "xdg" / "gpdlm"
        assert (cache / "pol" / "data.csv.gz").stat().st_size > 100_000
        assert list((cache / "parsed").glob("pol-*.npz"))
        assert _files(checkout) == before
    finally:
        for p in [checkout, *checkout.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
