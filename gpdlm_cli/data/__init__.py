"""Datasets: the catalog and registry, the loaders, the split rules and their scaling, and sequence
windows.

Modules, bottom to top: ``table`` (the Table), ``paths``/``download``/``cache`` (files),
``catalog`` (DatasetInfo, LoaderSpec, ``@loader``), the loader modules (``sources``, ``airline``,
``uci``, ``generators``, ``sequences``, ``aimpeak``, ``driving``), ``registry`` (the YAML entries bound
to the loaders it lists in ``LOADER_MODULES``; ``load_table``), ``scaling`` (how a split is
standardised) and ``splits`` (which rows train, validate and test).

See ``datasets/README.md`` for the list of datasets and ``datasets/registry.yaml`` for the registry."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: the names this package re-exports, by the module that defines them. They are imported on first
#: use (PEP 562), so that ``gpdlm datasets list`` and ``info`` do not import pandas or the loaders.
_EXPORTS = {
    "DatasetInfo": "catalog",
    "LoaderSpec": "catalog",
    "loader": "catalog",
    "FileSpec": "download",
    "REGISTRY": "registry",
    "all_datasets": "registry",
    "get_dataset_info": "registry",
    "load_table": "registry",
    "register": "registry",
    "make_windows": "sequences",
    "DataSplits": "splits",
    "check_split": "splits",
    "make_splits": "splits",
    "Table": "table",
    "table_from_frame": "table",
}

if TYPE_CHECKING:  # for readers and type checkers; at run time __getattr__ imports on demand
    from .catalog import DatasetInfo, LoaderSpec, loader
    from .download import FileSpec
    from .registry import REGISTRY, all_datasets, get_dataset_info, load_table, register
    from .sequences import make_windows
    from .splits import DataSplits, check_split, make_splits
    from .table import Table, table_from_frame


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "REGISTRY",
    "DataSplits",
    "DatasetInfo",
    "FileSpec",
    "LoaderSpec",
    "Table",
    "all_datasets",
    "check_split",
    "get_dataset_info",
    "load_table",
    "loader",
    "make_splits",
    "make_windows",
    "register",
    "table_from_frame",
]
