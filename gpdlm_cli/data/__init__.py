"""Datasets: the catalog and registry, the loaders, the split rules and their scaling, and sequence
windows.

Modules, bottom to top: ``table`` (the Table), ``paths``/``download``/``cache`` (files),
``catalog`` (DatasetInfo, LoaderSpec, ``@loader``), the loader modules (``sources``, ``airline``,
``uci``, ``generators``, ``sequences``, ``aimpeak``, ``driving``), ``registry`` (the YAML entries bound
to the loaders it lists in ``LOADER_MODULES``; ``load_table``), ``scaling`` (how a split is
standardised) and ``splits`` (which rows train, validate and test).

See ``datasets/README.md`` for the list of datasets and ``datasets/registry.yaml`` for the registry."""

from .catalog import DatasetInfo, LoaderSpec, loader
from .download import FileSpec
from .registry import REGISTRY, all_datasets, get_dataset_info, load_table, register
from .sequences import make_windows
from .splits import DataSplits, check_split, make_splits
from .table import Table, table_from_frame

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
