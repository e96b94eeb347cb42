"""Fixtures of the data-layer tests: a private cache per test and a local HTTP server."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
# The byte-exact mirror of the registry's GitHub-hosted files: ../shared/datasets/mirror beside the
# repository (CI clones the project next to shared/), unless GPDLM_DATA_MIRROR names another one.
MIRROR = Path(os.environ.get("GPDLM_DATA_MIRROR") or REPO.parent / "shared" / "datasets" / "mirror").resolve()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own GPDLM_DATA cache, no mirror unless it asks for one (``mirror``),
    and may go online only to 127.0.0.1."""
    cache = tmp_path / "gpdlm-cache"
    monkeypatch.setenv("GPDLM_DATA", str(cache))
    monkeypatch.delenv("GPDLM_OFFLINE", raising=False)
    monkeypatch.delenv("GPDLM_DATA_MIRROR", raising=False)
    return cache


@pytest.fixture(scope="session")
def mirror_root():
    """The shared mirror's folder (nothing set in the environment)."""
    assert MIRROR.is_dir(), f"the dataset mirror {MIRROR} is missing (../shared/datasets/mirror or GPDLM_DATA_MIRROR)"
    return MIRROR


@pytest.fixture(scope="session")
def mirror_sums(mirror_root):
    """../shared/datasets/SHA256SUMS as {url: sha256}, read here (not by gpdlm)."""
    out = {}
    for line in (mirror_root.parent / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split()
        out["https://" + path] = digest
    return out


@pytest.fixture
def mirror(mirror_root, monkeypatch):
    """The shared mirror as GPDLM_DATA_MIRROR, with the network forbidden (GPDLM_OFFLINE=1)."""
    monkeypatch.setenv("GPDLM_DATA_MIRROR", str(mirror_root))
    monkeypatch.setenv("GPDLM_OFFLINE", "1")
    return mirror_root


@pytest.fixture
def registry_guard():
    """Restore the registry after a test registers fixture entries."""
    from gpdlm_cli.data import registry

    registry.all_datasets()
    saved = dict(registry.REGISTRY)
    yield registry
    registry.REGISTRY.clear()
    registry.REGISTRY.update(saved)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    return root


@pytest.fixture
def http_server(http_root):
    """Serve ``http_root`` on 127.0.0.1 (a free port) from a thread; yields the base URL."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(http_root))
    )
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(timeout=5)


@pytest.fixture
def dead_url():
    """A URL on 127.0.0.1 whose server is gone (the port was bound, then closed)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHandler)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}/gone.csv"
