"""The process environment of a run: OpenMP's spin-wait and torch's thread count on a shared machine.

Measured on 2 cores (issue 13; ``python -m benchmarks contention`` re-measures): a small GP step
takes 1.3-2.0 ms with 2 threads on a quiet machine, but with 3 competing busy processes 15.3 ms
against 6.2 ms with 1 thread -- OpenMP's threads spin (libgomp: 300,000 spins) waiting for a
core that another process holds. On this project's loaded machine the default demo took 126
ms/iteration with 2 threads and 29 ms with 1. Three defaults follow:

* ``threads=auto`` takes the cores that are free when the run starts: the available cores (the
  CPU affinity mask, which Slurm and taskset set), divided among parallel sweep jobs, minus the
  cores other processes kept busy during a 0.2 s sample of the CPU times (psutil) -- all cores on a quiet
  machine (the fastest quiet setting), 1 thread on a busy one (the fastest loaded setting).
* ``GOMP_SPINCOUNT=20000`` (unless the user set it or ``OMP_WAIT_POLICY``): threads that wait
  longer sleep instead of spinning, which cuts the damage when load arrives after the start (15.3
  -> 9.9 ms above) at no measured quiet cost; ``OMP_WAIT_POLICY=PASSIVE`` would cut it further
  (5.5 ms) but doubles the quiet time. It must be in the environment before torch is imported:
  the CLI sets it first thing, and sweep workers inherit it.

* **The C allocator keeps freed memory** (``tune_allocator``, glibc only): by default glibc serves
  every allocation above 128 KiB-32 MiB with a fresh ``mmap`` and returns it at ``free``, so each M x N
  temporary of a GP step (3.2 MB at N = 4,000, M = 100) is faulted in and zeroed by the kernel again
  at every step: 3,500-7,000 page faults and 5-14 ms of system time per SVGP/DLM evaluation on pol at
  N = 4,000 (measured 2026-11-27; ``tests/test_runtime.py`` checks the mechanism). With the mmap threshold at glibc's
  maximum (32 MiB) and the heap kept (trim threshold 256 MiB) the faults drop to ~0 and an evaluation
  is 15-25% faster. Set ``GPDLM_MALLOC_TUNE=0`` (or any ``MALLOC_*_`` variable of your own) to keep
  glibc's defaults.

Standard library at import (psutil and threadpoolctl are imported inside the functions that use
them): imported by the CLI before torch.
"""

from __future__ import annotations

import os
import time

SPINCOUNT = "20000"
SAMPLE_S = 0.2
#: glibc mallopt parameters (malloc.h) and gpdlm's values: allocations up to 32 MiB come from the heap,
#: and up to 256 MiB of free memory at its top stays mapped (plus 16 MiB of padding per growth)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
ALLOCATOR_SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 256 << 20), (M_TOP_PAD, 16 << 20))
_allocator_tuned: bool | None = None


def configure_process_env() -> None:
    """gpdlm's process defaults, where the user set nothing (call before torch is imported):
    OpenMP's spin count (above), and no MLflow usage telemetry (``MLFLOW_DISABLE_TELEMETRY``; set
    it to false to allow it): every tracking call of every job would otherwise also record and send
    an event, a per-job cost (~0.1-0.3 s measured) and network traffic from compute nodes."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPINCOUNT
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    tune_allocator()


def tune_allocator() -> bool:
    """Keep freed memory in this process's heap instead of unmapping it (module docstring), once per
    process; True if glibc took the settings. Nothing happens off glibc, with ``GPDLM_MALLOC_TUNE=0``,
    or when the user set glibc's own ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``/``MALLOC_TOP_PAD_``."""
    global _allocator_tuned
    if _allocator_tuned is not None:
        return _allocator_tuned
    _allocator_tuned = False
    own = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
    if os.environ.get("GPDLM_MALLOC_TUNE", "1") == "0" or any(k in os.environ for k in own):
        return False
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _allocator_tuned = all(mallopt(param, value) == 1 for param, value in ALLOCATOR_SETTINGS)
    return _allocator_tuned


def available_cores() -> set[int]:
    """The CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def _cpu_times(cpus: set[int], text: str | None = None) -> tuple[float, float] | None:
    """(busy, total) CPU seconds summed over ``cpus``: from psutil (any OS), or from ``text`` in
    /proc/stat's format (tests); None where there is none."""
    if text is None:
        try:
            import psutil

            per_cpu = psutil.cpu_times(percpu=True)
        except Exception:
            return None
        busy = total = 0.0
        for i, t in enumerate(per_cpu):
            if i in cpus:
                idle = t.idle + getattr(t, "iowait", 0.0)
                total += sum(t)
                busy += sum(t) - idle
        return (busy, total) if total else None
    busy = total = 0.0
    for ln in text.splitlines():
        if not ln.strip():
            continue
        name, *fields = ln.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        vals = [float(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = vals[3] + vals[4]
        total += sum(vals)
        busy += sum(vals) - idle
    return (busy, total) if total else None


def busy_cores(cpus: set[int] | None = None, sample_s: float = SAMPLE_S) -> float:
    """How many of ``cpus`` other processes kept busy during a short sample (this process sleeps
    meanwhile); 0.0 where the CPU times are not available."""
    cpus = available_cores() if cpus is None else cpus
    a = _cpu_times(cpus)
    time.sleep(sample_s)
    b = _cpu_times(cpus)
    if a is None or b is None or b[1] <= a[1]:
        return 0.0
    return len(cpus) * (b[0] - a[0]) / (b[1] - a[1])


def auto_threads(parallel_jobs: int = 1, busy: float | None = None, cores: int | None = None) -> int:
    """``threads=auto``: this job's share of the cores (cores // parallel jobs), at most the cores
    left free by other processes (rounded), at least 1."""
    cores = len(available_cores()) if cores is None else cores
    share = max(1, cores // max(1, parallel_jobs))
    if share == 1:
        return 1
    busy = busy_cores() if busy is None else busy
    return max(1, min(share, int(cores - busy + 0.5)))


def threads_setting(setting, parallel_jobs: int = 1):
    """The thread count for ``threads=<setting>``: 'auto' resolved by ``auto_threads``; anything
    else is returned unchanged (build.configure_threads checks it)."""
    return auto_threads(parallel_jobs) if setting == "auto" else setting


# ----- subnormal floats ------------------------------------------------------------------------------
ENV_FLUSH = "GPDLM_FLUSH_DENORMAL"  # "0": keep IEEE subnormals (slow on x86 CPUs)


def flush_denormals() -> bool:
    """Flush subnormal floats to zero in this process's torch CPU arithmetic (``torch.set_flush_denormal``:
    the FTZ/DAZ bits on x86 with SSE3, their equivalent on ARM) unless ``GPDLM_FLUSH_DENORMAL=0``;
    True when flushing is on afterwards.

    Why (issue 47, item 3): an RBF or Matern kernel matrix holds values as small as exp(-r^2 / 2); in
    float32 a few percent of them fall below 1.2e-38 into the subnormal range, which x86 CPUs handle
    in microcode at ~100x the cost of a normal operation. On an SGPR at N ~ 10k, M = 512 the triangular
    solve with K_uf took 3.5 s instead of 0.07 s, and float32 training ran ~4x slower than float64.
    Flushed, a subnormal becomes 0 -- a change of < 1.2e-38 (float32) or 2.3e-308 (float64) to a number
    that is then added to numbers of order one. ``benchmarks/bench_kernels.py`` measures it.

    The setting is per thread, and torch's intra-op (OpenMP) threads copy it from the thread that starts
    them: called before the first parallel operation of the process -- as ``prepare`` does for every
    run, predict and eval -- it holds in every thread; called later in a process whose thread pool
    already exists (a notebook), it holds in the calling thread only."""
    import torch

    if os.environ.get(ENV_FLUSH, "1").strip() == "0":
        return denormals_flushed()
    return bool(torch.set_flush_denormal(True)) and denormals_flushed()


def denormals_flushed() -> bool:
    """Whether torch's CPU arithmetic flushes subnormals to zero in the calling thread (a probe: the
    smallest float64 subnormal times one is zero only then)."""
    import torch

    return float((torch.tensor([5e-324], dtype=torch.float64) * 1.0)[0]) == 0.0


# ----- peak memory of a run ------------------------------------------------------------------------------
def reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux >= 4.0: ``5`` into
    ``/proc/self/clear_refs``), so that :func:`peak_rss_mb` measures from here: one run of a sweep
    whose jobs share a process. False where that is not possible (the mark then covers the process)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    # Some kernels and sandboxes (gVisor) accept the write and keep the mark: verify that it fell to the
    # current resident set (VmHWM == VmRSS right after a reset, up to pages touched since).
    status = _proc_status_kib(("VmHWM", "VmRSS"))
    if len(status) < 2:
        return False
    return status["VmHWM"] - status["VmRSS"] <= 4096


def _proc_status_kib(keys: tuple[str, ...]) -> dict[str, int]:
    """The named ``kB`` fields of /proc/self/status (empty where it cannot be read)."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in keys:
                    found[key] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return {}
    return found


def peak_rss_mb() -> float:
    """The resident-set high-water mark in MiB since the last :func:`reset_peak_rss` (Linux
    ``VmHWM`` of /proc/self/status), else of the whole process (``ru_maxrss``: KiB on Linux, bytes on
    macOS). Includes the interpreter, the libraries and the data."""
    hwm = _proc_status_kib(("VmHWM",)).get("VmHWM")
    if hwm is not None:
        return hwm / 1024
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
