"""``sweep.compose.cache_config_files``: each config file is parsed once per process, and a compose from the
parsed copies is the compose Hydra makes from the files -- for gpdlm's packaged presets, Hydra's own configs
and a user's config folder (``-cd`` / ``hydra.searchpath``: ``file://``); a file edited since is read again."""

from __future__ import annotations

import time

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.sweep import compose as C

#: presets of every family and shape: nested defaults (a preset over a preset), swept params, arms
PRESETS = [
    "regression_logloss_pol_smoke",
    "classification_thyroid_smoke",
    "gplstm_sysid_smoke",
    "rkhs_gaussian_study_smoke",
    "svbssgp_aimpeak_smoke",
    "pic_airline_reduced",
]


@pytest.fixture
def readers(monkeypatch):
    """Hydra's two file readers as they are now, put back after the test (so the cache the test installs
    does not outlive it), and an empty cache."""
    from hydra.core.plugins import Plugins

    Plugins.instance()
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource as P

    monkeypatch.setattr(P, "_read_config", P._read_config)
    monkeypatch.setattr(FileConfigSource, "load_config", FileConfigSource.load_config)
    monkeypatch.setattr(C, "_PARSED", {})
    return P, FileConfigSource


def _uncached(P, F):
    """Hydra's own readers, unwrapped (the ones this process had before any gpdlm command wrapped them)."""
    read, load = P._read_config, F.load_config
    while getattr(read, "__wrapped__", None):
        read = read.__wrapped__
    while getattr(load, "__wrapped__", None):
        load = load.__wrapped__
    return read, load


def _yaml(overrides, searchpath=()) -> str:
    from hydra import compose

    with C.config_module(searchpath):
        return OmegaConf.to_yaml(compose(config_name="config", overrides=overrides, return_hydra_config=True))


def _user_folder(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - classification_smoke\n  - _self_\ntrainer:\n  lr: 0.0125\n"
    )
    return (f"file://{tmp_path}",)


@pytest.mark.slow
def test_a_compose_from_cached_files_is_hydras_compose(readers, tmp_path, monkeypatch):
    P, F = readers
    read, load = _uncached(P, F)
    folder = _user_folder(tmp_path)
    cases = [([f"+experiment={p}"], ()) for p in PRESETS] + [(["+experiment=mine", "model=svgp"], folder)]
    monkeypatch.setattr(P, "_read_config", read)
    monkeypatch.setattr(F, "load_config", load)
    monkeypatch.setattr(C, "cache_config_files", lambda: None)  # Hydra's readers for the reference
    want = [_yaml(o, s) for o, s in cases]
    monkeypatch.undo()  # the fixture's state: gpdlm's readers may be installed again
    monkeypatch.setattr(C, "_PARSED", {})
    C.cache_config_files()
    assert getattr(P._read_config, "_gpdlm_cached", False) and getattr(F.load_config, "_gpdlm_cached", False)
    first = [_yaml(o, s) for o, s in cases]
    parsed = len(C._PARSED)
    again = [_yaml(o, s) for o, s in cases]  # every file from the cache now
    assert len(C._PARSED) == parsed > 30  # nothing parsed twice
    assert {k[0] for k in C._PARSED} == {"pkg", "file"}  # both readers were used
    assert first == want and again == want
    assert "lr: 0.0125" in again[-1]  # the user's preset really composed


def test_a_file_edited_since_is_read_again(readers, tmp_path):
    C.cache_config_files()
    folder = _user_folder(tmp_path)
    assert "lr: 0.0125" in _yaml(["+experiment=mine"], folder)
    mine = tmp_path / "experiment" / "mine.yaml"
    time.sleep(0.01)  # a later modification time, and here a different size too
    mine.write_text(mine.read_text().replace("0.0125", "0.25"))
    out = _yaml(["+experiment=mine"], folder)
    assert "lr: 0.25" in out and "lr: 0.0125" not in out


def test_installing_twice_wraps_once(readers):
    P, F = readers
    C.cache_config_files()
    read, load = P._read_config, F.load_config
    C.cache_config_files()
    assert (P._read_config, F.load_config) == (read, load)
