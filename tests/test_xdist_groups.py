"""`make test` runs ``pytest -n 2 --dist loadgroup``: tests/conftest.py marks each module whose tests share a
module-scoped fixture (trained runs, a populated store) as one xdist group, so one worker builds the fixture
once. pytest-xdist 3.8 names the group by appending ``@group`` to each test's nodeid; pytest 9.2 made the nodeid
a structured id that ignores what xdist writes, so every test became its own unit and both workers built each
such fixture (found 2026-11-30: test_export's store and test_finished_from's runs built twice in `make test`).
pyproject.toml keeps pytest below 9.2 for that; this test fails if the groups stop taking effect."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared():
    return object()


def test_a_module_sharing_a_module_scoped_fixture_is_one_xdist_group(request, shared):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist --dist loadgroup (`make test` runs it so)")
    assert request.node.nodeid == "tests/test_xdist_groups.py::" + request.node.name + "@tests/test_xdist_groups.py"
