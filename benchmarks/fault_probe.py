"""Issue 45's re-runnable fault probe: concurrent writers, kills at each phase of a run, corrupted and
foreign artifacts, a full disk, locked and read-only stores. Prints one line per case (PASS/FAIL and
what was seen) and the counts per group.

    python -m benchmarks.fault_probe [--workdir DIR] [--only GROUP ...]

Each case trains tiny runs (diabetes, M=8, 30 iterations, a checkpoint at every evaluation) in fresh
processes -- `gpdlm` itself, or this script's ``--child`` mode, which runs ``run_train`` with one fault
injected (a SIGKILL at a phase of the ending, ENOSPC on a file, a store lock) -- and then checks what a
user would: the statuses in MLflow, the folder, one-line errors, and that `gpdlm resume` or `gpdlm runs
--stale --finish` brings every stopped run to FINISHED with the uninterrupted run's metrics bit for bit.
A full disk is simulated (ENOSPC raised where gpdlm writes); a read-only store by SQLite's own error,
injected (this machine runs as root, which file modes do not stop).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "dataset=diabetes",
    "model.num_inducing=8",
    "dataset.split.train_size=60",
    "trainer.max_iters=30",
    "trainer.eval_every=5",
    "trainer.checkpoint_every=1",
    "threads=1",
    "progress=false",
    "tracking.system_metrics=null",
]
TIMING = ("train_seconds", "iter_ms", "peak_memory_mb")
RESULTS: list[tuple[str, str, bool, str]] = []


# ----- plumbing ------------------------------------------------------------------------------------
def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), e.get("PYTHONPATH")) if p)
    return e


def gpdlm(args, cwd, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "gpdlm_cli.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
    )


def child(fault: str, folder: Path, uri: str, timeout=300, extra=()):
    """This script's --child mode: run_train into ``folder`` with ``fault`` injected."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fault_probe",
            "--child",
            fault,
            "--folder",
            str(folder),
            "--uri",
            uri,
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
    )


def errors(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("gpdlm: error: ")]


def store_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    return [
        r
        for e in c.search_experiments()
        for r in c.search_runs([e.experiment_id])
        if r.data.tags.get("gpdlm.command") == "train"
    ]


def statuses(uri: str) -> list[str]:
    return sorted(r.info.status for r in store_runs(uri))


def strip(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in TIMING}


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def new_store(root: Path, name: str) -> str:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{d / 'mlflow.db'}"


def integrity_ok(uri: str) -> bool:
    con = sqlite3.connect(uri[len("sqlite:///") :])
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


ONLY_CASES: list[str] = []


def case(group: str, name: str, fn, *args) -> None:
    if ONLY_CASES and not any(c in name for c in ONLY_CASES):
        return
    t0 = time.monotonic()
    try:
        note = fn(*args) or ""
        ok = True
    except AssertionError as e:
        ok, note = False, str(e) or "assertion failed"
    except Exception as e:  # a crash of the probe itself counts as a failure of the case
        ok, note = False, f"{type(e).__name__}: {e}"
    RESULTS.append((group, name, ok, note))
    print(
        f"{'PASS' if ok else 'FAIL'} [{group}] {name} ({time.monotonic() - t0:.0f} s){': ' + note if note else ''}",
        flush=True,
    )


# ----- the child: run_train with one fault --------------------------------------------------------
def run_child(fault: str, folder: str, uri: str, rest: list[str]) -> int:
    from gpdlm_cli.build import configure_threads
    from gpdlm_cli.hydra_apps import compose_config
    from gpdlm_cli.run import lifecycle, train
    from gpdlm_cli.run.lifecycle import make_tracker
    from gpdlm_cli.signals import install_signal_handlers
    from gpdlm_cli.training import checkpoint

    install_signal_handlers()
    cfg = compose_config(TINY + [f"tracking.uri={uri}"] + rest)
    configure_threads(1)

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    if fault == "kill-training":  # SIGKILL at iteration 17 (a checkpoint at 15)
        from gpdlm_cli import build

        real = build.build_method

        class Killer:
            def after_step(self, iteration, epoch):
                if iteration == 17:
                    die()

            def checkpoint_state(self):
                return {}

            def load_checkpoint_state(self, state):
                pass

        def with_killer(cfg, data, task, *family, **options):  # options: build_method's spec=
            m = real(cfg, data, task, *family, **options)
            m.stages[-1].hooks = list(m.stages[-1].hooks) + [Killer()]
            return m

        build.build_method = with_killer
    elif fault == "kill-finalising":  # training done, the learning curve being drawn
        train.plot_learning_curve = die
    elif fault == "term-finalising":  # the same moment, SIGTERM (the run ends KILLED)
        train.plot_learning_curve = lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(1)
    elif fault == "kill-after-model":  # model.pt saved, the run not yet closed
        lifecycle.TrackedRun.close = die
    elif fault == "kill-after-finished":  # FINISHED in MLflow, the checkpoint not yet removed
        checkpoint.Checkpointer.remove = die
    elif fault == "enospc-checkpoint":
        import errno

        def full(path, data):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

        checkpoint.write_verified = full
    elif fault == "enospc-metrics":
        import builtins
        import errno

        real_open = builtins.open

        def fake_open(file, mode="r", *a, **k):
            if "metrics.json" in str(file) and "w" in mode:
                raise OSError(errno.ENOSPC, "No space left on device", str(file))
            return real_open(file, mode, *a, **k)

        builtins.open = fake_open
    elif fault != "none":
        raise SystemExit(f"unknown fault {fault}")
    from gpdlm_cli.commands._cli import run_cli

    return run_cli(lambda argv: 0 if train.run_train(cfg, Path(folder), tracker=make_tracker(cfg.tracking)) else 1, [])


# ----- the cases ----------------------------------------------------------------------------------
def reference(root: Path) -> dict:
    uri = new_store(root, "reference")
    p = child("none", root / "reference" / "run", uri)
    assert p.returncode == 0, p.stderr[-500:]
    return metrics_of(root / "reference" / "run")


def concurrent_stores(root: Path, rounds: int = 2):
    uri = new_store(root, "concurrent")
    for r in range(rounds):
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpdlm_cli.cli",
                    "train",
                    *TINY,
                    f"seed={r * 2 + k}",
                    f"tracking.uri={uri}",
                    f"hydra.run.dir={root / 'concurrent' / f'{r}-{k}'}",
                ],
                cwd=root,
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for k in range(2)
        ]
        for p in procs:
            p.communicate(timeout=300)
            assert p.returncode == 0, f"a concurrent run failed ({p.returncode})"
    st = statuses(uri)
    assert st == ["FINISHED"] * (2 * rounds), st
    assert integrity_ok(uri), "integrity_check failed"
    return f"{len(st)} of {2 * rounds} runs FINISHED, integrity ok"


def concurrent_folder(root: Path):
    uri = new_store(root, "samefolder")
    folder = root / "samefolder" / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            *TINY,
            "trainer.max_iters=1000000",
            "trainer.stop_rule=none",
            f"tracking.uri={uri}",
            f"hydra.run.dir={folder}",
        ],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (folder / "checkpoint.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        second = gpdlm(["train", *TINY, f"tracking.uri={uri}", f"hydra.run.dir={folder}"], root)
        assert first.poll() is None, "the first writer ended before the second started"
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert second.returncode != 0 and len(errors(second)) == 1 and "another gpdlm process" in errors(second)[0], (
        f"second writer: rc {second.returncode}: {second.stderr[-300:]}"
    )
    assert statuses(uri) == ["KILLED"], statuses(uri)  # the second never made a run
    return "the second writer refused with one line (no run made); the first trained on (then SIGTERM: KILLED)"


def kill_then_recover(root: Path, ref: dict, fault: str, recover: str):
    uri = new_store(root, fault)
    folder = root / fault / "run"
    p = child(fault, folder, uri)
    assert p.returncode != 0, "the child was not stopped"
    if recover == "resume":
        r = gpdlm(["resume", folder], root)
        assert r.returncode == 0, r.stderr[-400:]
    else:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        r = gpdlm(["runs", "--stale", "--finish", "--tracking-uri", uri], root)
        assert r.returncode == 0, r.stderr[-400:]
    st = statuses(uri)
    assert "RUNNING" not in st and st.count("FINISHED") == 1, st
    assert strip(metrics_of(folder)) == strip(ref), "the metrics differ from the uninterrupted run's"
    assert not (folder / "checkpoint.pt").exists(), "a checkpoint was left behind"
    return f"{recover}: {', '.join(st)}; metrics bit for bit"


def kill_after_finished(root: Path):
    uri = new_store(root, "after-finished")
    folder = root / "after-finished" / "run"
    p = child("kill-after-finished", folder, uri)
    assert p.returncode in (-9, 137), p.returncode
    assert statuses(uri) == ["FINISHED"], statuses(uri)
    r = gpdlm(["resume", folder], root)
    assert r.returncode == 2 and len(errors(r)) == 1 and "is FINISHED: nothing to resume" in errors(r)[0], r.stderr
    return "FINISHED; resume refuses with one line"


def resume_live(root: Path):
    uri = new_store(root, "live")
    folder = root / "live" / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            *TINY,
            "trainer.max_iters=1000000",
            "trainer.stop_rule=none",
            f"tracking.uri={uri}",
            f"hydra.run.dir={folder}",
        ],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (folder / "checkpoint.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        r = gpdlm(["resume", folder], root)
        assert r.returncode == 2 and len(errors(r)) == 1 and "live process" in errors(r)[0], r.stderr[-300:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    st = statuses(uri)
    assert st == ["KILLED"], st
    return "a live run's resume refused with one line; the run itself went on (then SIGTERM: KILLED)"


def artifacts(root: Path, ref_folder: Path):
    """Corrupted and foreign artifacts: each one line, nothing written."""
    out = []
    base = root / "artifacts"
    cols = None

    def fresh(name):
        d = base / name
        shutil.copytree(ref_folder, d)
        return d

    def flip(path):
        data = bytearray(path.read_bytes())
        mid = len(data) // 2
        data[mid : mid + 8] = bytes(b ^ 0xFF for b in data[mid : mid + 8])
        path.write_bytes(bytes(data))

    from gpdlm_cli.run.saved_model import read_model_file

    cols = read_model_file(ref_folder / "model.pt")[0]["feature_names"]
    (base).mkdir(parents=True, exist_ok=True)
    inp = base / "in.csv"
    inp.write_text(",".join(cols) + "\n" + ",".join("0.1" for _ in cols) + "\n")
    checks = []
    d = fresh("flipped-model")
    flip(d / "model.pt")
    checks += [
        (
            "predict, flipped model.pt",
            gpdlm(["predict", d, "--input", inp, "--output", base / "o.csv"], root),
            "SHA-256",
        ),
        ("eval, flipped model.pt", gpdlm(["eval", d], root), "SHA-256"),
    ]
    d = fresh("foreign-model")
    other = root / "foreign" / "run"
    p = child("none", other, new_store(root, "foreign"), extra=["seed=7"])
    assert p.returncode == 0, p.stderr[-300:]
    for f in ("model.pt", "model.pt.sha256"):
        shutil.copyfile(other / f, d / f)
    checks.append(("eval, another run's model.pt", gpdlm(["eval", d], root), "not this run's model"))
    d = fresh("broken-metrics")
    (d / "metrics.json").write_text("{oops")
    checks.append(("eval, broken metrics.json", gpdlm(["eval", d], root), "not readable JSON"))
    d = fresh("broken-config")
    (d / "config.yaml").write_text("model: [oops\n")
    checks.append(("resume, broken config.yaml", gpdlm(["resume", d], root), "not readable YAML"))
    d = fresh("directory-input")
    checks.append(
        (
            "predict, a directory as input",
            gpdlm(["predict", d, "--input", base, "--output", base / "o.csv"], root),
            "is a directory",
        )
    )
    junk = base / "junk.csv"
    with open(junk, "w") as f:
        f.write(",".join(cols) + "\n" + ",".join(["x" * 5_000_000] + ["1"] * (len(cols) - 1)) + "\n")
        f.write(("1," * (len(cols) - 1) + "1\n") * 300_000)
    checks.append(
        (
            "predict, a huge junk file",
            gpdlm(["predict", d, "--input", junk, "--output", base / "o.csv"], root),
            "not a finite number",
        )
    )
    for name, proc, expected in checks:
        errs = errors(proc)
        ok = proc.returncode != 0 and len(errs) == 1 and expected in errs[0] and len(errs[0]) < 400
        out.append((name, ok, errs[0][:120] if errs else proc.stderr[-200:]))
    return out


def full_disk(root: Path):
    out = []
    uri = new_store(root, "enospc-checkpoint")
    p = child("enospc-checkpoint", root / "enospc-checkpoint" / "run", uri)
    warned = [ln for ln in p.stderr.splitlines() if "checkpoint not written" in ln]
    out.append(
        (
            "checkpoint on a full disk: run FINISHED, warned once",
            p.returncode == 0
            and len(warned) == 1
            and statuses(uri) == ["FINISHED"]
            and "gpdlm.checkpoint_failed" in store_runs(uri)[0].data.tags,
            warned[0][:100] if warned else p.stderr[-200:],
        )
    )
    uri = new_store(root, "enospc-metrics")
    p = child("enospc-metrics", root / "enospc-metrics" / "run", uri)
    runs = store_runs(uri)
    out.append(
        (
            "metrics.json on a full disk: one line, metrics in MLflow",
            p.returncode != 0 and len(errors(p)) == 1 and runs and "test_nll" in runs[0].data.metrics,
            (errors(p) or [p.stderr[-200:]])[0][:120],
        )
    )
    return out


def locked_store(root: Path, seconds: float):
    uri = new_store(root, "locked")
    db = uri[len("sqlite:///") :]
    folder = root / "locked" / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpdlm_cli.cli",
            "train",
            *TINY,
            "trainer.max_iters=3000",
            "trainer.stop_rule=none",
            f"tracking.uri={uri}",
            f"hydra.run.dir={folder}",
        ],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (folder / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    con = sqlite3.connect(db, isolation_level=None, timeout=30)
    con.execute("BEGIN EXCLUSIVE")
    time.sleep(seconds)
    con.execute("ROLLBACK")
    con.close()
    out, err = proc.communicate(timeout=300)
    (root / "locked" / "stderr.txt").write_text(err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 0 and statuses(uri) == ["FINISHED"], (proc.returncode, lines[-3:])
    assert len(lines) <= 2 and "Traceback" not in err, f"{len(lines)} stderr lines"
    return f"waited out, FINISHED, {len(lines)} console line(s)"


def read_only_store(root: Path):
    """compare on a store SQLite refuses to write (the refusal injected: root ignores file modes)."""
    code = (
        "import sys, sqlalchemy.exc\nfrom mlflow.tracking import MlflowClient\n"
        "def ro(self, *a, **k):\n    raise sqlalchemy.exc.OperationalError('INSERT', {}, "
        "Exception('attempt to write a readonly database'))\n"
        "MlflowClient.create_run = ro\nfrom gpdlm_cli import cli\nsys.exit(cli.main(sys.argv[1:]))\n"
    )
    uri = new_store(root, "reference")
    p = subprocess.run(
        [sys.executable, "-c", code, "compare", "--tracking-uri", uri],
        cwd=root,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    errs = errors(p)
    assert p.returncode != 0 and len(errs) == 1 and "read-only" in errs[0], p.stderr[-300:]
    return errs[0][:100]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--only", nargs="*", default=None, help="groups: concurrent kills artifacts disk stores")
    ap.add_argument("--case", nargs="*", default=[], help="only the cases whose name contains one of these")
    ap.add_argument("--lock-seconds", type=float, default=70.0, help="how long the store is held locked mid-run")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--uri", default=None, help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args(argv)
    if a.child:
        return run_child(a.child, a.folder, a.uri, rest)
    ONLY_CASES.extend(a.case)
    root = Path(a.workdir or tempfile.mkdtemp(prefix="gpdlm-fault-probe-"))
    root.mkdir(parents=True, exist_ok=True)
    groups = set(a.only or ["concurrent", "kills", "artifacts", "disk", "stores"])
    t0 = time.monotonic()
    ref = reference(root)
    if "concurrent" in groups:
        case("concurrent", "two runs x 2 rounds into one store", concurrent_stores, root)
    if "concurrent" in groups:
        case("concurrent", "two runs into one folder", concurrent_folder, root)
    if "kills" in groups:
        for fault, recover in (
            ("kill-training", "resume"),
            ("kill-finalising", "resume"),
            ("term-finalising", "resume"),
            ("kill-after-model", "resume"),
            ("kill-after-model", "finish"),
        ):
            name = f"{fault} then {recover}"
            case("kills", name, kill_then_recover, root / recover, ref, fault, recover)
        case("kills", "kill-after-finished", kill_after_finished, root)
        case("kills", "resume of a live run", resume_live, root)
    if "artifacts" in groups:
        for name, ok, note in artifacts(root, root / "reference" / "run"):
            RESULTS.append(("artifacts", name, ok, note))
            print(f"{'PASS' if ok else 'FAIL'} [artifacts] {name}: {note}", flush=True)
    if "disk" in groups:
        for name, ok, note in full_disk(root):
            RESULTS.append(("disk", name, ok, note))
            print(f"{'PASS' if ok else 'FAIL'} [disk] {name}: {note}", flush=True)
    if "stores" in groups:
        case(
            "stores",
            f"store locked {a.lock_seconds:g} s mid-run (start limit 60 s)",
            locked_store,
            root,
            a.lock_seconds,
        )
        case("stores", "compare on a read-only store", read_only_store, root)
    print()
    for g in dict.fromkeys(r[0] for r in RESULTS):
        rs = [r for r in RESULTS if r[0] == g]
        print(f"{g:12s} {sum(r[2] for r in rs)} pass, {sum(not r[2] for r in rs)} fail")
    passed = sum(r[2] for r in RESULTS)
    print(f"{'total':12s} {passed} pass, {len(RESULTS) - passed} fail ({time.monotonic() - t0:.0f} s, in {root})")
    return 0 if passed == len(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
