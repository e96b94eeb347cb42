"""The BLOG loader (fetch-only) reads all of BlogFeedback.zip -- the training file and the daily
test files, 60,021 posts in the real archive -- from a fixture archive in the real format served
on 127.0.0.1."""

from __future__ import annotations

import functools
import http.server
import threading
import zipfile

import numpy as np
import pytest

from gpdlm_cli.data import FileSpec, get_dataset_info, load_table, register, registry
from gpdlm_cli.data.registry import with_files


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served_zip(tmp_path, monkeypatch):
    """BlogFeedback.zip with a 3-row training file and two daily test files (2 and 1 rows) of 281
    columns, served from 127.0.0.1; a private cache; the registry restored afterwards."""
    monkeypatch.setenv("GPDLM_DATA", str(tmp_path / "cache"))
    monkeypatch.delenv("GPDLM_OFFLINE", raising=False)
    monkeypatch.delenv("GPDLM_DATA_MIRROR", raising=False)  # this test downloads from its own server
    root = tmp_path / "www"
    root.mkdir()
    rng = np.random.default_rng(0)
    rows = {
        "BlogFeedback/blogData_train.csv": 3,
        "BlogFeedback/blogData_test-2012.03.31.01_00.csv": 1,
        "BlogFeedback/blogData_test-2012.02.01.00_00.csv": 2,
    }
    tables = {}
    with zipfile.ZipFile(root / "BlogFeedback.zip", "w") as z:
        start = 0
        for name, n in rows.items():
            block = np.round(rng.uniform(0, 50, size=(n, 281)), 3)
            block[:, 0] = np.arange(start, start + n)  # a1 numbers the rows in file order
            start += n
            tables[name] = block
            z.writestr(name, "\n".join(",".join(f"{v:g}" for v in r) for r in block) + "\n")
        z.writestr("BlogFeedback/readme.txt", "not a data file")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    registry.all_datasets()
    saved = dict(registry.REGISTRY)
    yield f"http://127.0.0.1:{server.server_address[1]}/BlogFeedback.zip", tables
    registry.REGISTRY.clear()
    registry.REGISTRY.update(saved)
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_blog_reads_the_training_file_then_every_daily_test_file(served_zip):
    url, tables = served_zip
    register(with_files(get_dataset_info("blog"), [FileSpec("BlogFeedback.zip", url, None)]))
    t = load_table("blog")
    assert t.n == 6 and t.X.shape == (6, 60) and t.task == "regression"
    train = tables["BlogFeedback/blogData_train.csv"]
    feb = tables["BlogFeedback/blogData_test-2012.02.01.00_00.csv"]
    mar = tables["BlogFeedback/blogData_test-2012.03.31.01_00.csv"]
    expected = np.vstack([train, feb, mar])  # training rows first, then the test days in date order
    np.testing.assert_allclose(t.X, expected[:, :60])
    np.testing.assert_allclose(t.y, expected[:, 280])
    assert load_table("blog", n_features=5).X.shape == (6, 5)
