"""Where datasets live on disk.

* The **registry** is ``datasets/registry.yaml`` in the repository (the package reads it through
  the symlink ``gpdlm_cli/data/registry.yaml``, so an installed gpdlm finds it too).
* A **mirror** (``GPDLM_DATA_MIRROR=DIR`` or ``gpdlm datasets fetch --mirror DIR``) replaces the
  network: the file behind ``https://<host>/<path>`` is read from ``DIR/<host>/<path>`` (an
  air-gapped cluster's shared folder; ``../shared/datasets/mirror`` in this project's CI).
* The **cache** is the user's cache directory, outside the source tree (a read-only or shared
  checkout never gets data written into it; issue 47, item 5): ``$GPDLM_DATA`` when set, else
  ``$XDG_CACHE_HOME/gpdlm`` (an absolute ``XDG_CACHE_HOME``), else the platform's user cache --
  ``~/.cache/gpdlm`` on Linux, ``~/Library/Caches/gpdlm`` on macOS, ``%LOCALAPPDATA%/gpdlm/Cache``
  on Windows (the locations platformdirs uses). ``gpdlm datasets list``/``info`` print it;
  docs/data-cache.md. (Before, it was ``<repo>/datasets/cache``: ``GPDLM_DATA=<repo>/datasets/cache``
  keeps using such a cache.)
* The repository (for the registry) is found relative to the package (``<repo>/gpdlm_cli/..``) when
  that directory has a ``datasets/`` folder (an editable install or a checkout); otherwise
  ``./datasets`` under the current working directory.

Layout of the cache::

    <cache>/<dataset>/<file>          downloaded or manually placed raw files
    <cache>/parsed/<dataset>-<key>.npz parsed tables (key = file checksums + loader version + options)
    <cache>/checksums.json            SHA-256 of every raw file (also records unknown checksums
                                      on first fetch), with size and mtime to avoid re-hashing
"""

from __future__ import annotations

import os
import sys
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


def user_cache_dir() -> Path:
    """The user's cache directory for gpdlm (the module docstring's order after ``$GPDLM_DATA``):
    ``$XDG_CACHE_HOME/gpdlm`` when ``XDG_CACHE_HOME`` is an absolute path (the XDG base-directory
    rule: a relative one is ignored), else ``~/Library/Caches/gpdlm`` on macOS,
    ``%LOCALAPPDATA%/gpdlm/Cache`` on Windows and ``~/.cache/gpdlm`` elsewhere."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "gpdlm"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "gpdlm"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA", "").strip()
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "gpdlm" / "Cache"
    return Path.home() / ".cache" / "gpdlm"


def cache_dir() -> Path:
    """The raw-file and parsed-table cache: ``$GPDLM_DATA`` if set, else ``user_cache_dir()``."""
    env = os.environ.get(ENV_DATA, "").strip()
    if env:
        return Path(env).expanduser().resolve()
    return user_cache_dir()


def cache_dir_origin() -> str:
    """Where ``cache_dir()`` comes from, in words (``gpdlm datasets info``)."""
    if os.environ.get(ENV_DATA, "").strip():
        return f"${ENV_DATA}"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):
        return "$XDG_CACHE_HOME/gpdlm; set GPDLM_DATA to move it"
    return "the user cache directory; set GPDLM_DATA (or XDG_CACHE_HOME) to move it"


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
