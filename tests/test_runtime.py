"""Speed on a shared machine: threads=auto takes the free cores, OpenMP stops spinning early, and
the CLI sets that before torch starts."""

from __future__ import annotations

import os
import signal

import pytest

from gpdlm_cli import cli, runtime


@pytest.mark.parametrize("cores,jobs,busy,expected", [
    (2, 1, 0.0, 2),    # quiet: all cores
    (2, 1, 0.3, 2),    # background noise
    (2, 1, 0.7, 1),    # one core mostly taken
    (2, 1, 2.0, 1),    # busy machine: one thread, never zero
    (2, 2, 0.0, 1),    # two parallel jobs share the cores
    (8, 1, 1.6, 6),
    (8, 2, 0.0, 4),
    (8, 2, 6.0, 2),
])
def test_auto_threads_takes_the_free_share_of_the_cores(cores, jobs, busy, expected):
    assert runtime.auto_threads(jobs, busy=busy, cores=cores) == expected


def test_cpu_times_reads_the_allowed_cpus_of_proc_stat():
    text = ("cpu  100 0 50 800 50 0 0 0 0 0\n"
            "cpu0 60 0 20 300 20 0 0 0 0 0\n"
            "cpu1 40 0 30 500 30 0 0 0 0 0\n"
            "intr 12345\nctxt 99\n")
    # cpu0: user+nice+system+irq+softirq+steal = 80 busy of 400; cpu1: 70 of 600
    assert runtime._cpu_times({0}, text) == (80.0, 400.0)
    assert runtime._cpu_times({0, 1}, text) == (150.0, 1000.0)
    assert runtime._cpu_times({5}, text) is None


def test_busy_cores_is_the_busy_fraction_times_the_cpus(monkeypatch):
    snapshots = iter([(1000.0, 4000.0), (1150.0, 4200.0)])  # 150 of 200 jiffies busy over the sample
    monkeypatch.setattr(runtime, "_cpu_times", lambda cpus, text=None: next(snapshots))
    monkeypatch.setattr(runtime.time, "sleep", lambda s: None)
    assert runtime.busy_cores({0, 1}) == pytest.approx(2 * 150 / 200)


def test_openmp_spin_default_only_where_the_user_set_nothing(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    runtime.configure_process_env()
    assert "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    runtime.configure_process_env()
    assert os.environ["GOMP_SPINCOUNT"] == "5"


def test_the_cli_sets_the_spin_default_before_running_a_command(monkeypatch):
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen = {}
    monkeypatch.setitem(cli.SUBCOMMANDS, "probe", ("tests.test_runtime:_probe", ""))
    monkeypatch.setattr("tests.test_runtime._SEEN", seen)
    try:
        assert cli.main(["probe"]) == 0
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert seen["GOMP_SPINCOUNT"] == runtime.SPINCOUNT


_SEEN: dict = {}


def _probe():
    _SEEN["GOMP_SPINCOUNT"] = os.environ.get("GOMP_SPINCOUNT")
    return 0


def test_threads_also_cap_the_blas_and_openmp_pools():
    """threads=N caps numpy/scipy's BLAS and scikit-learn's OpenMP pools too (threadpoolctl)."""
    import numpy  # noqa: F401  (loads the BLAS whose pool is capped)
    from threadpoolctl import threadpool_info, threadpool_limits

    from gpdlm_cli.build import configure_threads

    with threadpool_limits(limits=None):
        configure_threads(1)
        pools = threadpool_info()
        assert pools and all(p["num_threads"] == 1 for p in pools), pools


@pytest.mark.slow
def test_runs_record_system_metrics(tmp_path):
    """tracking.system_metrics: MLflow's monitor samples CPU and memory into the run (system/*)."""
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.tracking import MlflowTracker

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = MlflowTracker(uri, "sys", system_metrics=0.2)
    import time

    with tracker.run(run_name="probe"):
        time.sleep(0.8)
    run = MlflowClient(uri).get_run(tracker.run_id)
    assert "system/cpu_utilization_percentage" in run.data.metrics
    assert 0 < run.data.metrics["system/system_memory_usage_megabytes"]
