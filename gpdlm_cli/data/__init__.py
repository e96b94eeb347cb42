"""Datasets: the registry, loaders, the split/standardisation protocol, and sequence windows.

See ``datasets/README.md`` for the list of datasets and ``datasets/registry.yaml`` for the registry."""

from .download import FileSpec
from .registry import REGISTRY, DatasetInfo, all_datasets, get_dataset_info, load_table, register
from .sequences import make_windows
from .splits import DataSplits, check_split, make_splits
from .table import Table, table_from_frame

__all__ = [
    "REGISTRY",
    "DataSplits",
    "DatasetInfo",
    "FileSpec",
    "Table",
    "all_datasets",
    "check_split",
    "get_dataset_info",
    "load_table",
    "make_splits",
    "make_windows",
    "register",
    "table_from_frame",
]
