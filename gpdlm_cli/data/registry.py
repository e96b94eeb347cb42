"""The dataset registry.

Every dataset is one entry of ``datasets/registry.yaml`` (task, source with URL + SHA-256 / package /
generator / user path, feature and target columns, categorical columns, the paper's number of
inducing points M, the split protocol) bound to a Python loader, plus one YAML file in
``conf/dataset``. ``register()`` adds entries from code (tests use it for fixtures).

The loaders (``catalog.loader``) live in the modules listed in ``LOADER_MODULES``, explicitly, as
``methods.FAMILIES`` lists the families: a new loader module is one import in :func:`_loader_modules`
and one entry there. The loader modules (and pandas, which they use) are imported on the first use of
a loader, not when the registry is read: ``gpdlm datasets list`` and ``info`` answer without them
(docs/performance.md, "Start-up imports"). An unknown dataset option is a one-line DataError. Loaders that read files declare them (``inputs``) so
that ``load_table`` can cache the parsed table keyed by the files' SHA-256 and the loader version.
"""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from types import ModuleType

from ..exceptions import DataError
from .catalog import (
    MASK_FILE,
    SOURCE_KINDS,
    DatasetInfo,
    LoaderSpec,
    collect_loaders,
    download_inputs,
    loader,
    with_files,
)
from .download import FileSpec, cached_checksum, file_path
from .table import Table

log = logging.getLogger("gpdlm.data")

REGISTRY: dict[str, DatasetInfo] = {}
_LOADED = False
_LOADERS: dict[str, LoaderSpec] | None = None


def _loader_modules() -> tuple[ModuleType, ...]:
    """Every module that defines loaders (``@loader``), imported here on first use (they import pandas)."""
    from . import aimpeak, airline, driving, gef, generators, sequences, sources, uci

    return (sources, airline, uci, generators, sequences, gef, aimpeak, driving)


def loaders() -> dict[str, LoaderSpec]:
    """The loaders by key (importing the loader modules once), checked against the registry entries read
    so far: an entry that names a loader that does not exist is a DataError."""
    global _LOADERS
    if _LOADERS is None:
        _LOADERS = collect_loaders(_loader_modules())
    for name, info in REGISTRY.items():
        if isinstance(info.loader, _Bound) and info.loader_key not in _LOADERS:
            raise DataError(f"registry entry '{name}' names loader '{info.loader_key}', which does not exist")
    return _LOADERS


def __getattr__(name: str):
    """``registry.LOADERS`` and ``registry.LOADER_MODULES``, computed on first access (PEP 562)."""
    if name == "LOADERS":
        return loaders()
    if name == "LOADER_MODULES":
        return _loader_modules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(info: DatasetInfo) -> DatasetInfo:
    REGISTRY[info.name] = info
    return info


class _Bound:
    """``info.loader(**options)`` for YAML entries: calls the registered loader with the entry."""

    def __init__(self, name: str, key: str):
        self.name, self.key = name, key

    def __call__(self, **options) -> Table:
        return loaders()[self.key].fn(REGISTRY[self.name], **options)

    def __repr__(self) -> str:
        return f"<loader {self.key} for {self.name}>"


def _files(raw, name: str = "?") -> tuple:
    out = []
    for f in raw or ():
        sha = f.get("sha256")
        if sha is not None and not (
            isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha.lower())
        ):
            raise DataError(
                f"registry entry '{name}', file {f.get('file')}: sha256 must be 64 hex digits or null; got {sha!r}"
            )
        out.append(FileSpec(f["file"], f.get("url"), sha))
    return tuple(out)


def _from_yaml(name: str, e: dict) -> DatasetInfo:
    src = e.get("source", {})
    kind = src.get("kind", "package")
    if kind not in SOURCE_KINDS:
        raise DataError(f"registry entry '{name}': source.kind must be one of {SOURCE_KINDS}; got {kind!r}")
    files = _files(src.get("files"), name)
    if kind == "download":
        human = files[0].url if files else "download"
    elif kind == "package":
        human = src.get("ref", "package")
    elif kind == "generator":
        human = "generator:" + src.get("ref", e.get("loader", name))
    else:
        human = "user path"
    alt = e.get("alt_source") or {}
    key = e.get("loader", name)
    size = e.get("size")
    return DatasetInfo(
        name=name,
        task=e["task"],
        source=human,
        loader=_Bound(name, key),
        description=e.get("description", ""),
        num_inducing=e.get("paper_m"),
        offline=kind in ("package", "generator"),
        options=dict(e.get("options") or {}),
        source_kind=kind,
        files=files,
        features=tuple(e["features"]) if isinstance(e.get("features"), list) else e.get("features", ""),
        target=str(e.get("target", "")),
        categorical=tuple(e.get("categorical") or ()),
        size=tuple(size) if size else None,
        split=e.get("split", ""),
        reference=e.get("reference", ""),
        notes=e.get("notes", ""),
        loader_key=key,
        version=int(e.get("version", 1)),
        alt_files=_files(alt.get("files"), name),
        alt_source=alt.get("description", ""),
    )


def load_registry_file(path: Path | None = None) -> dict[str, DatasetInfo]:
    import yaml

    from . import paths

    path = path or paths.registry_file()
    try:
        # libyaml's parser where PyYAML has it: ~10x faster than the pure-Python one on this file
        doc = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as e:
        raise DataError(f"cannot read the dataset registry {path}: {e}") from None
    entries = {}
    for name, entry in (doc.get("datasets") or {}).items():
        entries[name] = _from_yaml(name, entry)
    return entries


def _ensure_loaded() -> None:
    global _LOADED
    if _LOADED:
        return
    for name, info in load_registry_file().items():
        REGISTRY.setdefault(name, info)  # its loader is checked when the loaders are first imported
    _LOADED = True


def all_datasets() -> dict[str, DatasetInfo]:
    _ensure_loaded()
    return dict(sorted(REGISTRY.items()))


def get_dataset_info(name: str) -> DatasetInfo:
    _ensure_loaded()
    if name not in REGISTRY:
        raise DataError(f"unknown dataset '{name}'; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def _loader_parameters(info: DatasetInfo):
    spec = loaders().get(info.loader_key) if isinstance(info.loader, _Bound) else None
    fn = spec.fn if spec else info.loader
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if spec:
        params = params[1:]  # the info argument
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def check_options(info: DatasetInfo, options: dict) -> None:
    allowed = _loader_parameters(info)
    if allowed is None:
        return
    bad = [k for k in options if k not in allowed]
    if bad:
        raise DataError(
            f"dataset '{info.name}' has no option {', '.join(repr(b) for b in bad)}; "
            f"its options are: {', '.join(allowed) or '(none)'}"
        )


def _plain(v):
    """OmegaConf containers -> plain Python (ListConfig/DictConfig come from Hydra configs)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(v, (DictConfig, ListConfig)):
            return OmegaConf.to_container(v, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return v


def load_table(name: str, *, use_cache: bool = True, **options) -> Table:
    """Load the named dataset as a Table (options come from the dataset config).

    File-based datasets are parsed once and then read from the parsed-table cache."""
    info = get_dataset_info(name)
    options = {k: _plain(v) for k, v in options.items()}
    check_options(info, options)
    spec = loaders().get(info.loader_key) if isinstance(info.loader, _Bound) else None
    if not (use_cache and spec and spec.inputs):
        return info.loader(**options)
    inputs = spec.inputs(info, **options)
    if not inputs or not all(Path(p).is_file() for p in inputs):
        return info.loader(**options)  # the loader reports what is missing
    from . import cache as table_cache  # numpy: not needed to list or describe datasets

    sums = [cached_checksum(Path(p)) for p in inputs]
    key = table_cache.cache_key(name, f"{spec.version}.{info.version}", options, sums)
    path = table_cache.parsed_path(name, key)
    table = table_cache.load_cached_table(path)
    if table is not None:
        _warn_dropped_again(table)
        return table
    t0 = time.perf_counter()
    table = info.loader(**options)
    log.info("parsed dataset '%s' in %.2f s; cached at %s", name, time.perf_counter() - t0, path)
    try:
        table_cache.save_table(table, path)
    except OSError as e:  # a read-only cache is not fatal
        log.warning("could not write the parsed-table cache %s: %s", path, e)
    return table


def _warn_dropped_again(table: Table) -> None:
    """A table from the parsed cache says again what its first parse said about dropped rows."""
    import re

    from .table import warn_dropped

    for note in table.notes:
        m = re.fullmatch(r"dropped (\d+) of (\d+) rows with missing values", note)
        if m:
            warn_dropped(f"dataset '{table.name}'", int(m[1]), int(m[2]))


__all__ = [  # LOADERS and LOADER_MODULES: module attributes made on first access (__getattr__)
    "MASK_FILE",
    "SOURCE_KINDS",
    "DatasetInfo",
    "FileSpec",
    "LoaderSpec",
    "REGISTRY",
    "all_datasets",
    "download_inputs",
    "file_path",
    "get_dataset_info",
    "load_table",
    "loader",
    "loaders",
    "register",
    "with_files",
]
