"""Run several smoke presets in one fresh interpreter, each as ``gpdlm <command> -m +experiment=<preset>``
(``cli.main``, as the console script calls it), one after another: torch, gpytorch, Hydra and MLflow are
imported once per batch instead of once per preset (tests/run/test_sweeps.py::test_smoke_presets_run).

``python -m tests.run.smoke_batch SPEC.json``: SPEC is a list of {"preset", "command", "cwd", "db"}; each
preset runs in its ``cwd`` with its stdout and stderr (file descriptors 1 and 2, so also what Hydra's
logging and any child process write) in ``cwd/stdout.txt`` and ``cwd/stderr.txt``, and its exit code in
``cwd/exit_code.txt`` (its wall time in ``cwd/seconds.txt``, to find the slow presets). A preset that raises is recorded (its traceback in stderr.txt, exit code 99) and the
next one runs.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def run_one(spec: dict) -> int:
    import time

    from gpdlm_cli import cli

    started = time.perf_counter()
    cwd = Path(spec["cwd"])
    saved = os.getcwd(), os.dup(1), os.dup(2), list(sys.argv)
    sys.stdout.flush(), sys.stderr.flush()
    with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            os.chdir(cwd)
            argv = [spec["command"], "-m", f"+experiment={spec['preset']}", f"tracking.uri=sqlite:///{spec['db']}"]
            try:
                rc = cli.main([*argv, "progress=false"])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 -- recorded for the test, which names the preset
                traceback.print_exc()
                rc = 99
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.chdir(saved[0])
            os.dup2(saved[1], 1)
            os.dup2(saved[2], 2)
            os.close(saved[1]), os.close(saved[2])
            sys.argv = saved[3]
    (cwd / "exit_code.txt").write_text(str(int(rc or 0)))
    (cwd / "seconds.txt").write_text(f"{time.perf_counter() - started:.2f}")
    return int(rc or 0)


def main(spec_file: str) -> int:
    for spec in json.loads(Path(spec_file).read_text()):
        run_one(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
