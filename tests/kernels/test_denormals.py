"""Subnormal floats are flushed to zero while gpdlm trains (issue 47, item 3): float32 kernel matrices hold
a few percent of subnormal values, which x86 CPUs handle ~100x slower (benchmarks/bench_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli import runtime
from gpdlm_cli.run import train as train_module
from gpdlm_cli.run.train import run_train

from ..conftest import compose, fast

SUPPORTED = torch.set_flush_denormal(False)  # what this CPU supports (and: off to start with)


@pytest.fixture
def flush_off():
    """Subnormals kept when the test starts; the state before restored afterwards."""
    before = runtime.denormals_flushed()
    torch.set_flush_denormal(False)
    assert not runtime.denormals_flushed()
    yield
    torch.set_flush_denormal(before)


@pytest.mark.skipif(not SUPPORTED, reason="this CPU cannot flush subnormals")
@pytest.mark.parametrize("dtype", [pytest.param("float32", marks=pytest.mark.slow), "float64"])
def test_flush_is_active_while_training(tmp_path, monkeypatch, flush_off, dtype):
    seen = []
    real = train_module.run_stages

    def recording(*a, **k):
        seen.append(runtime.denormals_flushed())
        return real(*a, **k)

    monkeypatch.setattr(train_module, "run_stages", recording)
    cfg = compose(fast(["model=sgpr", "trainer.max_iters=5", "tracking.enabled=false", f"dtype={dtype}"]))
    run_train(cfg, tmp_path)
    assert seen == [True]
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # a float32 subnormal
    assert float((tiny * 1.0)[0]) == 0.0


@pytest.mark.skipif(not SUPPORTED, reason="this CPU cannot flush subnormals")
def test_flush_can_be_switched_off(monkeypatch, flush_off):
    monkeypatch.setenv(runtime.ENV_FLUSH, "0")
    assert runtime.flush_denormals() is False and not runtime.denormals_flushed()
    monkeypatch.delenv(runtime.ENV_FLUSH)
    assert runtime.flush_denormals() is True and runtime.denormals_flushed()


def test_float64_stays_the_default_dtype():
    """The flush changes speed, not precision: GP algebra stays float64 unless dtype= says otherwise."""
    assert compose([]).dtype == "float64"


@pytest.mark.slow
@pytest.mark.skipif(not SUPPORTED, reason="this CPU cannot flush subnormals")
def test_flush_set_before_the_first_parallel_operation_holds_in_every_thread():
    """The docstring's claim behind calling it in ``prepare``: torch's worker threads copy the setting when
    they start, so a process that flushes before its first parallel operation flushes in all of its threads
    (a 2-thread product over 4M subnormals comes out all zero); set after the pool exists, only the calling
    thread's share does."""
    import subprocess
    import sys

    from ..conftest import REPO

    code = """
import sys, torch
from gpdlm_cli import runtime
torch.set_num_threads(2)
early = sys.argv[1] == 'early'
if early:
    runtime.flush_denormals()
x = torch.full((4_000_000,), 1e-310, dtype=torch.float64)
y = x * 1.0
if not early:
    runtime.flush_denormals()
    y = x * 1.0
print(float((y == 0).double().mean()))
"""
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    shares = {}
    for when in ("early", "late"):
        out = subprocess.run([sys.executable, "-c", code, when], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        shares[when] = float(out.stdout.strip())
    assert shares["early"] == 1.0
    assert shares["late"] < 1.0  # the pool predates the call: its other thread keeps subnormals
