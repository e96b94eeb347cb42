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
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource as P

    monkeypatch.setattr(P, "_read_config", P._read_config)
    monkeypatch.setattr(FileConfigSource, "load_config", FileConfigSource.load_config)
    monkeypatch.setattr(CachingConfigRepository, "__init__", CachingConfigRepository.__init__)
    monkeypatch.setattr(C, "_PARSED", {})
    return P, FileConfigSource


def _unwrapped(f):
    while getattr(f, "__wrapped__", None):
        f = f.__wrapped__
    return f


def _uncached(P, F):
    """Hydra's own readers, unwrapped (the ones this process had before any gpdlm command wrapped them)."""
    return _unwrapped(P._read_config), _unwrapped(F.load_config)


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
    from hydra._internal.config_repository import CachingConfigRepository as R

    monkeypatch.setattr(P, "_read_config", read)
    monkeypatch.setattr(F, "load_config", load)
    monkeypatch.setattr(R, "__init__", _unwrapped(R.__init__))  # Hydra's deep copy of the ConfigStore too
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


def test_a_composes_copy_of_the_sources_shares_the_config_store_and_copies_the_rest(readers):
    """``_share_config_store``: Hydra's per-compose repository copy no longer deep-copies the ConfigStore (the
    compose equality is the test above); the sources themselves are still copies, and the store's own nodes
    are untouched by composing (``ConfigStore.load`` hands out copies)."""
    from hydra import compose
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    C.cache_config_files()
    assert getattr(CachingConfigRepository.__init__, "_gpdlm_cached", False)
    with C.config_module(()):
        repo = GlobalHydra.instance().config_loader().repository
        copied = CachingConfigRepository(repo)
        store_node = ConfigStore.instance().load("hydra/launcher/basic.yaml").node
        cfg = compose(config_name="config", overrides=["+experiment=classification_smoke"], return_hydra_config=True)
    structured = [s for s in copied.delegate.sources if type(s).__name__ == "StructuredConfigSource"]
    assert structured and all(s.store is ConfigStore.instance() for s in structured)
    assert all(a is not b for a, b in zip(copied.delegate.sources, repo.sources))
    assert len(copied.delegate.sources) == len(repo.sources)
    cfg.hydra.launcher._target_ = "changed"  # a composed config is the caller's own
    assert ConfigStore.instance().load("hydra/launcher/basic.yaml").node == store_node
    assert store_node._target_ != "changed"


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


def test_jobs_that_differ_in_leaf_values_compose_once_and_equal_their_composes(monkeypatch):
    """``hydra_apps.compose_configs``: the data jobs of a beta sweep over training sizes and data sets (what
    `gpdlm sweep beta` and `gpdlm reproduce` compose to size each grid) compose once per data set -- the other
    sizes are a copy with ``dataset.split.train_size`` set -- and each config is the one composing it gives;
    a group choice (``dataset=``), an added key (``+``) or a key the config lacks composes afresh."""
    from gpdlm_cli import hydra_apps

    jobs = [
        [f"dataset={d}", f"dataset.split.train_size={n}", "seed=0", "+experiment=regression_logloss_pol_smoke"]
        for d in ("pol", "concrete")
        for n in (40, 60, 80)
    ]
    jobs.append(["dataset=pol", "dataset.split.train_size=40", "+trainer.extra_key=1"])  # another shape
    jobs.append(["dataset=pol", "dataset.split.train_size=40", "+trainer.extra_key=2"])  # an added key: no copy
    composed = []
    real = hydra_apps.compose_config
    monkeypatch.setattr(hydra_apps, "compose_config", lambda job: (composed.append(job), real(job))[1])
    got = hydra_apps.compose_configs(jobs)
    assert composed == [jobs[0], jobs[3], jobs[6], jobs[7]]  # one per data set, and each "+" job
    monkeypatch.undo()
    for job, cfg in zip(jobs, got):
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(real(job)), job
    assert got[1].dataset.split.train_size == 60 and got[0].dataset.split.train_size == 40  # copies, not shared


def test_inside_memoized_composes_a_job_list_composes_once_and_hands_out_copies(monkeypatch):
    """``sweep.compose.memoized_composes`` (a plan's expansion in `gpdlm reproduce`): the same overrides
    compose once inside the block -- each caller gets its own deep copy -- and every time outside it."""
    from hydra import compose as hydra_compose

    from gpdlm_cli.sweep.plan import job_overrides

    count = []
    monkeypatch.setattr("hydra.compose", lambda *a, **k: (count.append(1), hydra_compose(*a, **k))[1])
    argv = ["+experiment=regression_logloss_pol_smoke", "seed=0,1"]
    with C.memoized_composes():
        (jobs_a, a), (jobs_b, b) = job_overrides(argv), job_overrides(argv)
        assert len(count) == 1 and jobs_a == jobs_b and len(jobs_a) > 1
        a.dataset.split.train_size = -1  # a caller's change stays in its copy
        assert b.dataset.split.train_size != -1 and job_overrides(argv)[1].dataset.split.train_size != -1
        assert len(count) == 1
    job_overrides(argv)
    assert len(count) == 2 and C._MEMO is None
