"""Fixtures of the data-layer tests: a private cache per test and a local HTTP server."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own GPDLM_DATA cache and may go online only to 127.0.0.1."""
    cache = tmp_path / "gpdlm-cache"
    monkeypatch.setenv("GPDLM_DATA", str(cache))
    monkeypatch.delenv("GPDLM_OFFLINE", raising=False)
    return cache


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
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(http_root)))
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
