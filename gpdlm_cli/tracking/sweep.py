"""Sweeps in MLflow: one parent run per Hydra multirun, every job a child run.

The Hydra callback ``SweepCallback`` runs in the launching process. Before any job starts it
creates the SQLite database, the experiment and the parent run (so parallel jobs never race to
create them) and writes ``gpdlm_sweep.json`` into the sweep directory; jobs -- in this process, in
joblib workers or on a cluster -- read it to attach themselves as children. Jobs never raise
into Hydra: a failed job writes ``failures/<job>.json`` and the sweep goes on; at the end the
callback ends the parent run (FAILED if any job failed), prints every failure with its reason, and
the CLI exits non-zero.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from hydra.experimental.callback import Callback

SWEEP_FILE = "gpdlm_sweep.json"
IGNORED_KEYS = ("tracking", "progress", "sweep", "hydra")

# filled in the launching process, read by the CLI to set its exit code
OUTCOMES: list[dict] = []


def config_hash(cfg) -> str:
    """SHA-256 (16 hex) of the resolved config without bookkeeping keys: two runs with the same
    hash trained the same thing, whatever the tracking target or output folder."""
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=True)
    for k in IGNORED_KEYS:
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_context(sweep_dir) -> dict:
    p = Path(sweep_dir) / SWEEP_FILE
    return json.loads(p.read_text()) if p.exists() else {}


def record_outcome(sweep_dir, job_num: int, status: str, overrides: list[str], reason: str = "") -> None:
    """A job's outcome as a file (jobs may run in other processes or on other machines)."""
    d = Path(sweep_dir) / "outcomes"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{job_num}.json").write_text(json.dumps(
        {"job": job_num, "status": status, "overrides": overrides, "reason": reason}))


def read_outcomes(sweep_dir) -> list[dict]:
    d = Path(sweep_dir) / "outcomes"
    if not d.exists():
        return []
    return sorted((json.loads(p.read_text()) for p in d.glob("*.json")), key=lambda o: o["job"])


class SweepCallback(Callback):
    """Parent run at multirun start; summary, parent status and exit code at multirun end."""

    def __init__(self):
        self.client = None
        self.parent_run_id = None

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        context = {"parent_run_id": None}
        if config.tracking.enabled:
            from mlflow.tracking import MlflowClient

            from .tracker import ensure_experiment, resolve_tracking_uri

            uri = resolve_tracking_uri(config.tracking.uri)
            self.client = MlflowClient(tracking_uri=uri)
            exp_id = ensure_experiment(self.client, config.tracking.experiment, uri)
            overrides = " ".join(config.hydra.overrides.task)
            run = self.client.create_run(exp_id, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", tags={
                "gpdlm.sweep": "parent", "gpdlm.overrides": overrides, "gpdlm.output_dir": str(sweep_dir.resolve()),
            })
            self.parent_run_id = run.info.run_id
            context = {"parent_run_id": self.parent_run_id, "uri": uri, "experiment": config.tracking.experiment}
            _ACTIVE.append(self)
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(context))

    def on_multirun_end(self, config, **kwargs) -> None:
        outcomes = read_outcomes(config.hydra.sweep.dir)
        failed = [o for o in outcomes if o["status"] == "failed"]
        counts = {s: sum(o["status"] == s for o in outcomes) for s in ("finished", "failed", "skipped")}
        OUTCOMES.extend(outcomes)
        self.end("FAILED" if failed else "FINISHED", counts)
        print(f"gpdlm: sweep done: {counts['finished']} finished, {counts['skipped']} skipped, "
              f"{counts['failed']} failed  ({config.hydra.sweep.dir})", file=sys.stderr)
        for o in failed:
            print(f"gpdlm: failed job {o['job']} [{' '.join(o['overrides'])}]: {o['reason']}", file=sys.stderr)

    def end(self, status: str, counts: dict | None = None) -> None:
        if self.client is None or self.parent_run_id is None:
            return
        from mlflow.entities import Metric

        if counts:
            ts = int(time.time() * 1000)
            self.client.log_batch(self.parent_run_id, metrics=[Metric(f"jobs_{k}", v, ts, 0) for k, v in counts.items()])
        self.client.set_terminated(self.parent_run_id, status)
        self.parent_run_id = None
        if self in _ACTIVE:
            _ACTIVE.remove(self)


_ACTIVE: list[SweepCallback] = []


def abort_active_sweeps(status: str = "KILLED") -> None:
    """End parent runs still open (Ctrl-C during a sweep), so none is left RUNNING."""
    for cb in list(_ACTIVE):
        cb.end(status)
