"""Where datasets live on disk.

* The **registry** is ``datasets/registry.yaml`` in the repository (the package reads it through
  the symlink ``gpdlm_cli/data/registry.yaml``, so an installed gpdlm finds it too).
* A **mirror** (``GPDLM_DATA_MIRROR=DIR`` or ``gpdlm datasets fetch --mirror DIR``) replaces the
  network: the file behind ``https://<host>/<path>`` is read from ``DIR/<host>/<path>`` (an
  air-gapped cluster's shared folder; ``../shared/datasets/mirror`` in this project's CI).
* The **cache** is ``datasets/cache/`` of the repository by default. ``GPDLM_DATA=/some/dir``
  moves it. The repository is found relative to the package (``<repo>/gpdlm_cli/..``) when that
  directory has a ``datasets/`` folder (an editable install or a checkout); otherwise
  ``./datasets/cache`` under the current working directory is used.

Layout of the cache::

    <cache>/<dataset>/<file>          downloaded or manually placed raw files
    <cache>/parsed/<dataset>-<key>.npz parsed tables (key = file checksums + loader version + options)
    <cache>/checksums.json            SHA-256 of every raw file (also records unknown checksums
                                      on first fetch), with size and mtime to avoid re-hashing
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATA = "GPDLM_DATA"
ENV_OFFLINE = "GPDLM_OFFLINE"  # "1": never touch the network; fail with the manual-download message
ENV_MIRROR = "GPDLM_DATA_MIRROR"  # a local folder laid out by URL that replaces the network

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_datasets_dir() -> Path:
    """The repository's ``datasets/`` directory (see the module docstring for the search order)."""
    repo = PACKAGE_DIR.parent.parent
    if (repo / "datasets").is_dir():
        return repo / "datasets"
    return Path.cwd() / "datasets"


def cache_dir() -> Path:
    """The raw-file and parsed-table cache: ``$GPDLM_DATA`` if set, else ``<repo>/datasets/cache``."""
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env).expanduser().resolve()
    return repo_datasets_dir() / "cache"


def registry_file() -> Path:
    """``datasets/registry.yaml`` of the repository, else the copy shipped next to this module."""
    p = repo_datasets_dir() / "registry.yaml"
    if p.is_file():
        return p
    return PACKAGE_DIR / "registry.yaml"


def mirror_dir() -> Path | None:
    """``$GPDLM_DATA_MIRROR`` as a path, or None when it is unset or empty."""
    env = os.environ.get(ENV_MIRROR, "").strip()
    return Path(env).expanduser() if env else None


def offline() -> bool:
    return os.environ.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes")


def share_mode(path) -> None:
    """mkstemp creates 0600 files; give cache files the usual 0644 (minus the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    try:
        os.chmod(path, 0o666 & ~mask)
    except OSError:
        pass
