"""Speed on a shared machine: threads=auto takes the free cores, OpenMP stops spinning early, and
the CLI sets that before torch starts."""

from __future__ import annotations

import os
import platform
import signal

import pytest

from gpdlm_cli import cli, runtime


@pytest.mark.parametrize(
    "cores,jobs,busy,expected",
    [
        (2, 1, 0.0, 2),  # quiet: all cores
        (2, 1, 0.3, 2),  # background noise
        (2, 1, 0.7, 1),  # one core mostly taken
        (2, 1, 2.0, 1),  # busy machine: one thread, never zero
        (2, 2, 0.0, 1),  # two parallel jobs share the cores
        (8, 1, 1.6, 6),
        (8, 2, 0.0, 4),
        (8, 2, 6.0, 2),
    ],
)
def test_auto_threads_takes_the_free_share_of_the_cores(cores, jobs, busy, expected):
    assert runtime.auto_threads(jobs, busy=busy, cores=cores) == expected


def test_cpu_times_reads_the_allowed_cpus_of_proc_stat():
    text = (
        "cpu  100 0 50 800 50 0 0 0 0 0\n"
        "cpu0 60 0 20 300 20 0 0 0 0 0\n"
        "cpu1 40 0 30 500 30 0 0 0 0 0\n"
        "intr 12345\nctxt 99\n"
    )
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


_ALLOCATIONS = """
import ctypes, resource, torch
from gpdlm_cli.build import configure_threads
configure_threads(1)  # every run's process goes through it (runtime.tune_allocator)

class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

info = ctypes.CDLL("libc.so.6").mallinfo2
info.restype = MallInfo2
start = info().hblkhd  # bytes in separately mmapped chunks
temps = [torch.empty(100, 4000, dtype=torch.float64).fill_(1.0) for _ in range(4)]  # 3.2 MB each, as at N = 4,000
mapped = info().hblkhd - start
del temps
kept = info().fordblks  # free bytes the heap keeps
for step in range(30):  # steps of a training loop: the same temporaries allocated and freed again
    if step == 10:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    temps = [torch.empty(100, 4000, dtype=torch.float64).fill_(1.0) for _ in range(4)]
    del temps
print(mapped, kept, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


@pytest.mark.slow  # two fresh interpreters
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and mallinfo2")
def test_tuned_allocator_keeps_large_temporaries_in_the_heap():
    """With glibc's defaults a fresh process mmaps each 3.2 MB temporary (unmapped again at free, and
    faulted in page by page when mapped again: in real GP steps 3,500-7,000 faults per evaluation, though
    glibc's adaptive threshold makes the count of this small loop vary between 0 and 3,093 per step);
    with gpdlm's mallopt settings they come from the heap, which keeps them after free, so the steps
    of a loop fault no page in. GPDLM_MALLOC_TUNE=0 restores the defaults (the comparison)."""
    import subprocess
    import sys

    def run(tune: str) -> list[float]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env["GPDLM_MALLOC_TUNE"] = tune
        out = subprocess.run([sys.executable, "-c", _ALLOCATIONS], env=env, capture_output=True, text=True, check=True)
        return [float(v) for v in out.stdout.split()]

    mapped, _, _ = run("0")
    assert mapped >= 4 * 3.2e6, mapped
    mapped, kept, faults = run("1")
    assert mapped == 0 and kept >= 4 * 3.2e6 and faults < 5, (mapped, kept, faults)


def test_tune_allocator_respects_the_users_own_settings(monkeypatch):
    monkeypatch.setattr(runtime, "_allocator_tuned", None)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1000000")
    assert runtime.tune_allocator() is False
    monkeypatch.setattr(runtime, "_allocator_tuned", None)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GPDLM_MALLOC_TUNE", "0")
    assert runtime.tune_allocator() is False


def test_reset_peak_rss_says_false_where_the_kernel_keeps_the_mark(monkeypatch):
    """CI ran in a sandbox that accepts a write to /proc/self/clear_refs yet keeps VmHWM: the reset must be
    verified (VmHWM back to VmRSS), not assumed from the write."""
    from gpdlm_cli import runtime

    monkeypatch.setattr(runtime, "_proc_status_kib", lambda keys: {"VmHWM": 1_300_000, "VmRSS": 400_000})
    assert runtime.reset_peak_rss() is False
    monkeypatch.setattr(runtime, "_proc_status_kib", lambda keys: {"VmHWM": 400_100, "VmRSS": 400_000})
    assert runtime.reset_peak_rss() is (__import__("os").path.exists("/proc/self/clear_refs"))
