"""Composing gpdlm's configs from Hydra overrides, also from inside a running Hydra app (a multirun's
callback or one of its jobs), where ``initialize_config_module`` alone refuses: the sweep plan
(``sweep.plan``) and batched configurations (``sweep.batched``) compose every job of a sweep."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

#: Hydra's providers of the search-path entries a command line adds (``-cd DIR``, ``hydra.searchpath=[...]``)
USER_PROVIDERS = ("command-line", "hydra.searchpath in command-line")
#: the search path of this gpdlm command's own command line (``use_searchpath``), for the composes made
#: before Hydra runs (the pre-launch check, ``--dry-run``, ``--cfg`` of a multirun)
_COMMAND_SEARCHPATH: tuple[str, ...] = ()


def searchpath_of(argv: Sequence[str]) -> tuple[str, ...]:
    """The config folders a gpdlm Hydra command line adds to Hydra's search path, in Hydra's order:
    ``--config-dir/-cd DIR`` (``file://<absolute DIR>``), then the entries of a ``hydra.searchpath=[...]``
    override as written (``file://myconf``, relative to the working directory; ``pkg://my.module``).
    An override Hydra's parser refuses adds nothing here (Hydra reports it). ``GPDLM_CONFIG_PATH``'s
    folders are not listed: the search-path plugin (``hydra_plugins.gpdlm_searchpath``) adds them."""
    out: list[str] = []
    args = list(argv)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in ("-cd", "--config-dir"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                out.append(f"file://{os.path.abspath(value)}")
    for a in args:
        if a.startswith("hydra.searchpath="):
            from hydra.core.override_parser.overrides_parser import OverridesParser

            try:
                entries = OverridesParser.create().parse_override(a).value()
            except Exception:
                continue
            if isinstance(entries, list):
                out.extend(str(v) for v in entries)
    return tuple(out)


def split_config_dir(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(``argv``'s ``-cd DIR`` / ``--config-dir DIR`` / ``--config-dir=DIR`` flags, the other arguments)."""
    flags: list[str] = []
    rest: list[str] = []
    take = False
    for a in argv:
        if take:
            flags.append(a)
            take = False
        elif a in ("-cd", "--config-dir"):
            flags.append(a)
            take = True
        elif a.startswith("--config-dir="):
            flags.append(a)
        else:
            rest.append(a)
    return flags, rest


def without_config_dir(argv: Sequence[str]) -> list[str]:
    """``argv`` without its ``-cd DIR`` / ``--config-dir DIR`` / ``--config-dir=DIR`` (``use_searchpath``
    holds the folder): the overrides gpdlm's own composes and sweep plans parse."""
    return split_config_dir(argv)[1]


def use_searchpath(paths: Sequence[str]) -> None:
    """Make ``paths`` (``searchpath_of`` this command's argv) the user's search path of every
    ``config_module()`` this process opens outside a running Hydra app."""
    global _COMMAND_SEARCHPATH
    _COMMAND_SEARCHPATH = tuple(paths)


def user_searchpath() -> tuple[str, ...]:
    """The user's config folders of this command: inside a running Hydra app (a job, a sweep callback)
    the ``-cd`` and ``hydra.searchpath`` entries Hydra itself searched, then ``use_searchpath``'s (the
    command's own: a Hydra state left from an earlier run in the same process must not hide them)."""
    from hydra.core.hydra_config import HydraConfig

    hydra: tuple[str, ...] = ()
    if HydraConfig.initialized():
        sources = HydraConfig.get().runtime.config_sources or []
        hydra = tuple(str(s.path) for s in sources if s.provider in USER_PROVIDERS)
    return tuple(dict.fromkeys((*hydra, *_COMMAND_SEARCHPATH)))


def missing_folder(paths: Sequence[str]) -> str | None:
    """The first ``file://`` entry of ``paths`` that is not a folder (Hydra only warns about it), else None."""
    for p in paths:
        if p.startswith("file://") and not os.path.isdir(p.removeprefix("file://")):
            return p.removeprefix("file://")
    return None


#: parsed config files, by (source, provider, absolute path, mtime in ns, size): ``cache_config_files``
_PARSED: dict[tuple, Any] = {}


def cache_config_files() -> None:
    """Parse each config file once per process, not once per compose. Hydra reads and parses every YAML
    file of the defaults tree again at each compose (its ``CachingConfigRepository`` lives for one
    compose), and a gpdlm multirun composes several times before it launches and twice per job (the
    pre-launch check, the launch): parsing was ~30% of a compose's ~0.25 s. Hydra's two file readers
    (``pkg://`` package configs and ``file://`` folders) are wrapped to keep each file's parsed result
    under its path, modification time and size -- a file edited since is read again -- and to hand out a
    deep copy (Hydra changes the config and header it gets). Composed configs are the same, byte for byte
    (tests/test_config_cache.py composes presets of every family and a user's folder both ways). The compose's
    copy of the config sources shares the ``ConfigStore`` (``_share_config_store``). Idempotent; a reader Hydra
    loads afresh (its plugin scan re-imports its core plugins, once per process) is wrapped then."""
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the scan that (re)loads the reader classes: before they are wrapped
    _share_config_store()
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

    if getattr(ImportlibResourcesConfigSource._read_config, "_gpdlm_cached", False):
        return
    read_package, read_folder = ImportlibResourcesConfigSource._read_config, FileConfigSource.load_config

    @functools.wraps(read_package)
    def package_file(self, res):
        key = _file_key(("pkg", self.path, self.provider), res) if hasattr(res, "__fspath__") else None
        return read_package(self, res) if key is None else _parsed(key, lambda: read_package(self, res))

    @functools.wraps(read_folder)
    def folder_file(self, config_path: str):
        path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        key = _file_key(("file", self.path, self.provider), path)
        return read_folder(self, config_path) if key is None else _parsed(key, lambda: read_folder(self, config_path))

    package_file._gpdlm_cached = folder_file._gpdlm_cached = True  # type: ignore[attr-defined]
    ImportlibResourcesConfigSource._read_config = package_file  # type: ignore[method-assign]
    FileConfigSource.load_config = folder_file  # type: ignore[method-assign]


def _share_config_store() -> None:
    """Hydra's per-compose ``CachingConfigRepository`` deep-copies the search path's sources, and with them
    the process-wide ``ConfigStore`` of every registered structured config (~13 ms of a ~150 ms compose). The
    copy protects the sources (``initialize_sources`` replaces them), not the store: nothing writes to the
    store while composing and ``ConfigStore.load`` hands out copies of its nodes. The sources are still
    copied; the store is shared (a deep copy with the store in its memo). Idempotent."""
    import copy

    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.config_store import ConfigStore

    init = CachingConfigRepository.__init__
    if getattr(init, "_gpdlm_cached", False):
        return

    @functools.wraps(init)
    def shared_store_init(self, delegate) -> None:
        store = ConfigStore.instance()
        self.delegate = copy.deepcopy(delegate, {id(store): store})
        self.cache = {}

    shared_store_init._gpdlm_cached = True  # type: ignore[attr-defined]
    CachingConfigRepository.__init__ = shared_store_init  # type: ignore[method-assign]


def _file_key(source: tuple, path) -> tuple | None:
    """``source`` and the file's absolute path, modification time (ns) and size; None if it cannot be read
    (Hydra's own reader then says why)."""
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return (*source, os.path.abspath(os.fspath(path)), st.st_mtime_ns, st.st_size)


def _parsed(key: tuple, read):
    """A copy of the parsed file under ``key``, parsed by ``read()`` the first time."""
    import copy

    from hydra.plugins.config_source import ConfigResult

    if key not in _PARSED:
        _PARSED[key] = read()
    r = _PARSED[key]
    return ConfigResult(
        provider=r.provider,
        path=r.path,
        config=copy.deepcopy(r.config),
        header=dict(r.header),
        defaults_list=copy.deepcopy(r.defaults_list),
        is_schema_source=r.is_schema_source,
    )


@contextmanager
def config_module(searchpath: Sequence[str] | None = None):
    """``initialize_config_module`` for gpdlm's configs that also works inside a running Hydra app
    (a multirun's callback or job): Hydra's global state and ``HydraConfig`` are put back after. The
    search path is Hydra's (gpdlm's packaged configs, then ``GPDLM_CONFIG_PATH``'s folders) and then
    ``searchpath`` (default ``user_searchpath()``: the command's ``-cd`` and ``hydra.searchpath``), so
    that a user's own presets and group options compose here as in the run."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    cache_config_files()
    extra = user_searchpath() if searchpath is None else tuple(searchpath)
    backup, saved = get_gh_backup(), HydraConfig.instance().cfg
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
            if extra:
                add_searchpath(extra)
            yield
    finally:
        restore_gh_from_backup(backup)
        HydraConfig.instance().cfg = saved


def add_searchpath(paths: Sequence[str]) -> None:
    """Add ``paths`` to the initialised Hydra's search path, before its structured configs, as Hydra
    adds ``-cd`` and ``hydra.searchpath``."""
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    search = loader.get_search_path()
    for p in paths:
        search.prepend(provider="gpdlm user config", path=p, anchor=SearchPathQuery(provider="schema"))
    loader.repository.initialize_sources(search)  # type: ignore[attr-defined]  # ConfigLoaderImpl's


def overrides_parser():
    """Hydra's override parser with the current config loader (inside ``config_module``), which
    ``glob(...)`` needs to list a config group's options."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())


#: the composes of the ``memoized_composes`` block in progress, by (what, overrides, search path,
#: ``GPDLM_CONFIG_PATH``); None outside one
_MEMO: dict | None = None


@contextmanager
def memoized_composes():
    """Within the block, each distinct compose (``memoized``) runs once and later ones get a deep copy of its
    result: ``gpdlm reproduce`` expanding a plan composes a preset's first job up to three times (the preset's
    base, the multirun's jobs, its data combinations; 31 of the 120 composes of ``reproduce dlm``, ~0.3-0.5
    s each). For a block in which the config files do not change (one command's planning, not a sweep's
    jobs). Nested blocks share the outer one's memo."""
    global _MEMO
    outer = _MEMO
    if outer is None:
        _MEMO = {}
    try:
        yield
    finally:
        if outer is None:
            _MEMO = None


def memoized(what: str, overrides: Sequence[str], make):
    """``make()``, through the memo of the ``memoized_composes`` block in progress (a deep copy of the first
    result for the same ``what``, ``overrides``, search path and ``GPDLM_CONFIG_PATH``); ``make()`` outside one."""
    import copy

    if _MEMO is None:
        return make()
    key = (what, tuple(overrides), user_searchpath(), os.environ.get("GPDLM_CONFIG_PATH", ""))
    if key not in _MEMO:
        _MEMO[key] = make()
    return copy.deepcopy(_MEMO[key])


def compose_jobs(jobs: list[list[str]]) -> list:
    """Each job's config as ``gpdlm train`` composes it (``config_module``: also from inside a job)."""
    from hydra import compose

    with config_module():
        return [compose(config_name="config", overrides=list(j)) for j in jobs]


__all__ = [
    "add_searchpath",
    "compose_jobs",
    "config_module",
    "memoized",
    "memoized_composes",
    "missing_folder",
    "overrides_parser",
    "searchpath_of",
    "split_config_dir",
    "use_searchpath",
    "user_searchpath",
    "without_config_dir",
]
