"""metrics.json of the README's quick-start commands, recorded once and compared bit for bit later.

Used around refactors of the training loop (issue 46.1): the results of a run must not change.

    python tools/metrics_identity.py record DIR     # run every case, copy each metrics.json to DIR/<case>.json
    python tools/metrics_identity.py check DIR      # run them again; exit 1 unless every value equals DIR's

Every case runs at ``threads=1`` on the CPU with ``progress=false``, tracking to a temporary SQLite MLflow
store, its stage and k-means caches in a temporary folder. The cases are the README's first commands
(``gpdlm train``, DLM with the uPS estimator, beta-ELBO SVGP, SGPR under L-BFGS, ``trainer=fast``, the fixed
variant's two stages), a minibatch run with ``keep_best``, a two-job sweep sharing its SVGP stage and k-means
(metrics of each job), and a run killed by SIGTERM at step 25 then resumed from its checkpoint (in-process,
as tests/training/test_checkpoint.py does).

Compared: every key of metrics.json except the timings and process memory, ``TIMING`` below (wall-clock
time and resident memory differ from run to run by design). Values are compared with ``==`` on the parsed
JSON (floats written by ``json.dumps`` round-trip exactly, so equal means bit-identical).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMING = ("train_seconds", "iter_ms", "peak_rss_mb", "peak_memory_mb")
COMMON = ["threads=1", "progress=false", "device=cpu"]

# name -> the arguments of `gpdlm train` (the README's quick start and examples)
CASES: dict[str, list[str]] = {
    "train": [],
    "dlm_ups": ["model=dlm", "estimator=ups"],
    "svgp_beta01": ["model=svgp", "objective.beta=0.1"],
    "sgpr_lbfgs": ["model=sgpr", "trainer.optimizer=lbfgs"],
    "fast": ["trainer=fast"],
    "sq_dlm_fixed": ["model=sq_dlm", "model.variant=fixed"],
    "svgp_minibatch_keep_best": ["model=svgp", "trainer.batch_size=64", "trainer.keep_best=val_nll"],
}
# name -> the arguments of `gpdlm train -m` (a sweep: metrics of every job)
SWEEPS: dict[str, list[str]] = {
    "sweep_dlm_fixed_shared": ["model=dlm_fixed", "objective.beta=0.1,1", "trainer.max_iters=300"],
}
RESUME = "resume_after_sigterm"
RESUME_ARGS = ["model=dlm", "trainer.max_iters=120", "trainer.eval_every=20", "trainer.checkpoint_every=1"]


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("GPDLM_DATA", str(tmp / "data"))
    env.setdefault("GPDLM_DATA_MIRROR", str(REPO.parent / "shared" / "datasets" / "mirror"))
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def _gpdlm(args: list[str], tmp: Path) -> None:
    subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=tmp, env=_env(tmp), check=True)


def _store(tmp: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}", f"sweep.cache_dir={tmp / 'cache'}"]


def _resume_case(folder: str) -> None:
    """In this process: a run killed by SIGTERM at step 25 of its last stage, then resumed."""
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(1)
    from hydra import compose, initialize_config_module

    from gpdlm_cli import build
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.signals import Terminated, install_signal_handlers
    from gpdlm_cli.tracking import NullTracker

    install_signal_handlers()

    class KillAt:
        def after_step(self, iteration, epoch):
            if iteration == 25:
                import signal

                os.kill(os.getpid(), signal.SIGTERM)

        def checkpoint_state(self):
            return {}

        def load_checkpoint_state(self, state):
            pass

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=RESUME_ARGS + COMMON + ["tracking.enabled=false"])
    real = build.build_method

    def with_killer(cfg, data, task, *family, **keywords):
        method = real(cfg, data, task, *family, **keywords)
        method.stages[-1].hooks = list(method.stages[-1].hooks) + [KillAt()]
        return method

    build.build_method = with_killer
    try:
        run_train(cfg, folder, tracker=NullTracker())
        raise SystemExit("the kill did not happen")
    except Terminated:
        pass
    build.build_method = real
    run_train(cfg, folder, tracker=NullTracker())


def run_all(tmp: Path) -> dict[str, dict]:
    out = {}
    for name, args in CASES.items():
        _gpdlm(["train", *args, *COMMON, *_store(tmp), f"hydra.run.dir={tmp / name}"], tmp)
        out[name] = json.loads((tmp / name / "metrics.json").read_text())
        print(f"ran {name}", flush=True)
    for name, args in SWEEPS.items():
        _gpdlm(["train", "-m", *args, *COMMON, *_store(tmp), f"hydra.sweep.dir={tmp / name}"], tmp)
        for job in sorted((tmp / name).glob("*/metrics.json")):
            out[f"{name}_{job.parent.name}"] = json.loads(job.read_text())
        print(f"ran {name}", flush=True)
    subprocess.run([sys.executable, __file__, "_resume", str(tmp / RESUME)], cwd=tmp, env=_env(tmp), check=True)
    out[RESUME] = json.loads((tmp / RESUME / "metrics.json").read_text())
    print(f"ran {RESUME}", flush=True)
    return out


def compare(old: dict, new: dict) -> list[str]:
    """Lines naming every key (timings excluded) whose value differs or exists on one side only."""
    diffs = []
    for k in sorted(set(old) | set(new)):
        if k in TIMING:
            continue
        if k not in old or k not in new:
            diffs.append(f"{k}: only in {'the new run' if k in new else 'the record'}")
        elif old[k] != new[k]:
            diffs.append(f"{k}: {old[k]!r} -> {new[k]!r}")
    return diffs


def main(argv: list[str]) -> int:
    if argv[:1] == ["_resume"]:
        _resume_case(argv[1])
        return 0
    if len(argv) != 2 or argv[0] not in ("record", "check"):
        print(__doc__)
        return 2
    mode, folder = argv[0], Path(argv[1])
    with tempfile.TemporaryDirectory(prefix="gpdlm-identity-") as tmp:
        results = run_all(Path(tmp))
    if mode == "record":
        folder.mkdir(parents=True, exist_ok=True)
        for name, metrics in results.items():
            (folder / f"{name}.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
        print(f"recorded {len(results)} metrics.json in {folder}")
        return 0
    bad = 0
    for name, metrics in results.items():
        ref = folder / f"{name}.json"
        if not ref.is_file():
            print(f"{name}: no record in {folder}")
            bad += 1
            continue
        diffs = compare(json.loads(ref.read_text()), metrics)
        print(f"{name}: {'identical' if not diffs else 'DIFFERS'} ({len(metrics)} keys, timings excluded)")
        for d in diffs:
            print(f"    {d}")
        bad += bool(diffs)
    missing = {p.stem for p in folder.glob("*.json")} - set(results)
    for m in sorted(missing):
        print(f"{m}: recorded but not run")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
