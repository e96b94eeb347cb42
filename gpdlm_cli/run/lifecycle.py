"""One tracked run, from its tags to its last artifact: the lifecycle ``gpdlm train`` and ``gpdlm bias`` share.

Order matters for the promises made to users:

1. every check (config values, data, combinations) runs before an MLflow run exists (``prepare``),
   so bad input never leaves a run behind;
2. ``config.yaml`` is written to the output folder, then the MLflow run starts with the flattened
   config as params, the tags every gpdlm run carries (``run_tags``) and the dataset as an input;
3. a kill while the run works (Ctrl-C, SIGTERM, SIGHUP, a preemption) leaves partial results in the
   folder and in MLflow (``TrackedRun.interruptible``, ``artifacts.write_partial_results``);
4. ``metrics.json`` and the other result files go to disk first (atomically), then the metrics to
   MLflow -- which gets them even when the disk is full; a file not written ends the run with one
   line saying what was saved (``TrackedRun.close`` raises ``ResultsNotSaved``);
5. the tracker's context manager ends every run FINISHED, FAILED or KILLED, and a finished run prints
   one line (``naming.report_run``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from ..exceptions import ResultsNotSaved
from ..files import write_atomic
from ..tracking import MlflowTracker, NullTracker, flatten, resolve_tracking_uri
from ..tracking.identity import PROTOCOL_KEYS, VERSION, VERSION_TAG, canonical_config
from ..tracking.liveness import process_tags
from .artifacts import last_evaluation, unsaved_message, write_partial_results
from .naming import report_run


def git_commit() -> str:
    """The commit of the gpdlm checkout this code runs from ('unknown' outside git)."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def run_tags(command: str, *, overrides, output_dir: Path, device, fingerprint: str, chash: str, **extra) -> dict:
    """The tags every gpdlm run carries (train, bias, ...)."""
    return {
        "gpdlm.git_commit": git_commit(),
        "gpdlm.overrides": " ".join(overrides or []),
        "gpdlm.output_dir": str(output_dir.resolve()),
        "gpdlm.device": str(device),
        "gpdlm.dataset_fingerprint": fingerprint,
        "gpdlm.command": command,
        "gpdlm.config_hash": chash,
        VERSION_TAG: VERSION,  # tracking.identity: threads, device ... left out; version 3: model.training.*
        **process_tags(),  # host, PID, process start: `gpdlm runs --stale` finds orphaned runs
        **extra,
    }


def canonical_run_config(cfg):
    """A stored run's config (its folder's ``config.yaml``, a saved model's) in today's key names: one written
    before config-hash version 3 has its recurrent protocol keys moved from ``trainer`` to ``model.training``
    (``tracking.identity.canonical_config``); ``cfg`` itself when there is nothing to move. Interpolations stay."""
    from omegaconf import OmegaConf

    trainer = cfg.get("trainer")
    if trainer is None or not any(k in trainer for k in PROTOCOL_KEYS):
        return cfg
    return OmegaConf.create(canonical_config(cast(dict, OmegaConf.to_container(cfg, resolve=False))))


def finished_from(cfg) -> list[str]:
    """``sweep.finished_from`` of a run's config (empty without it)."""
    return [str(p) for p in (cfg.get("sweep", {}).get("finished_from") or [])]


def make_tracker(tcfg, base_dir=None, finished_from=()):
    """The run's tracker (``tracking``); ``finished_from``: run-records files (``sweep.finished_from``) whose
    FINISHED runs of the experiment count as finished for ``sweep.skip_finished``, as the store's do."""
    tracker = NullTracker() if not tcfg.enabled else None
    if tracker is None:
        every = tcfg.get("system_metrics", 10.0)
        tracker = MlflowTracker(
            resolve_tracking_uri(tcfg.uri, base_dir),
            str(tcfg.experiment),  # `experiment=2024` parses as int
            system_metrics=float(every) if every else None,
            loss_every=int(tcfg.get("loss_every", 1)),
        )
    if finished_from:
        from ..tracking.records_file import finished_config_hashes

        tracker.recorded_finished = finished_config_hashes(list(finished_from), str(tcfg.experiment))
    return tracker


def dataset_input(table, fingerprint: str) -> dict:
    """Arguments of ``tracker.log_dataset`` for a loaded ``Table``: its name, gpdlm's fingerprint
    as the digest, where it comes from, its columns (inputs after dummy coding, then the target)."""
    try:
        from ..data import get_dataset_info

        source = get_dataset_info(table.name).source
    except Exception:  # a user table without a registry entry
        source = table.name
    target_type = "double" if table.task in ("regression", "sequence") else "long"
    columns = {str(c): "double" for c in table.feature_names}
    columns[str(table.target_name)] = target_type
    return {
        "name": table.name,
        "digest": fingerprint,
        "source": str(source),
        "columns": columns,
        "num_rows": int(table.n),
    }


class TrackedRun:
    """The output folder and the MLflow run of one gpdlm command (see the module docstring).

    ``started`` writes ``config.yaml`` and opens the MLflow run; inside it, ``interruptible`` guards
    the work, ``save`` writes result files (recording, not raising, an OSError), ``log_metrics`` sends
    the metrics to MLflow and ``close`` logs the saved files as artifacts."""

    def __init__(self, output_dir, tracker, run_name: str):
        self.output_dir = Path(output_dir)
        self.tracker = tracker
        self.run_name = run_name
        self.unsaved: dict[str, OSError] = {}

    @contextmanager
    def started(self, cfg, tags: dict, *, parent_run_id: str | None = None, table=None, fingerprint: str | None = None):
        """``config.yaml`` in the folder, then the MLflow run (params, tags, the dataset input)."""
        from omegaconf import OmegaConf

        config = cast(dict, OmegaConf.to_container(cfg, resolve=True))  # a DictConfig's container
        write_atomic(self.output_dir / "config.yaml", OmegaConf.to_yaml(cfg))
        with self.tracker.run(run_name=self.run_name, params=flatten(config), tags=tags, parent_run_id=parent_run_id):
            if table is not None:
                if fingerprint is None:  # the dataset input's digest (MLflow requires one)
                    raise ValueError("TrackedRun.started: a table needs its split's fingerprint")
                self.tracker.log_dataset(**dataset_input(table, fingerprint))
            yield self

    @contextmanager
    def interruptible(self, curve: Callable[[], dict] | None = None, info: dict | None = None):
        """A kill inside leaves a self-explaining folder (``write_partial_results``: metrics.json
        with the status, the learning curve ``curve()`` so far, the reason in gpdlm.log) and logs
        the first two files to MLflow; then the kill goes on."""
        from ..signals import killed_reason, stopped_mid_step

        try:
            yield
        except BaseException as e:
            why = killed_reason(e)
            if why:
                history = curve() if curve is not None else {"loss": [], "steps": {}}
                files = write_partial_results(
                    self.output_dir, "KILLED", why, *last_evaluation(history), history, title=self.run_name, info=info
                )
                for f in files[:2]:
                    self.tracker.log_artifact(f)
                self.say_how_to_resume(kept=stopped_mid_step(e))
            raise

    def say_how_to_resume(self, kept: bool = False) -> None:
        """After a kill: where the checkpoint is and the command that continues the run (stderr),
        when the run has one (``trainer.checkpoint_every`` > 0 and a first evaluation reached); ``kept``:
        the run was stopped mid-step (a second Ctrl-C), and the checkpoint is the last one written before."""
        import sys

        from ..training.checkpoint import FILE
        from .naming import shown_path

        ckpt = self.output_dir / FILE
        if ckpt.is_file():
            rid = getattr(self.tracker, "run_id", None)
            ref = rid[:8] if rid else shown_path(self.output_dir)
            what = "the last checkpoint is kept in" if kept else "checkpoint saved in"
            print(
                f"gpdlm: {what} {shown_path(ckpt)}; continue this run with: gpdlm resume {ref}",
                file=sys.stderr,
                flush=True,
            )

    def save(self, name: str, write: Callable[[Path], object]) -> bool:
        """``write(path)`` for the result file ``name`` in the folder; an OSError (a full disk, an
        unwritable folder) is recorded for ``close`` and the run goes on. True when written."""
        try:
            write(self.output_dir / name)
            return True
        except OSError as e:
            self.unsaved[name] = e
            return False

    def save_metrics(self, metrics: dict) -> bool:
        """``metrics.json`` (atomically): before anything is sent to MLflow."""
        return self.save("metrics.json", lambda p: write_atomic(p, json.dumps(metrics, indent=2, sort_keys=True)))

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.tracker.log_metrics(metrics, step=step)

    def close(self, files, metrics: dict) -> None:
        """Log the result ``files`` that were written as MLflow artifacts; ``ResultsNotSaved`` (one
        line: what is missing, and where the results are instead) when any could not be written."""
        for f in files:
            if f not in self.unsaved and (self.output_dir / f).exists():
                self.tracker.log_artifact(self.output_dir / f)
        if self.unsaved:
            raise ResultsNotSaved(unsaved_message(self.output_dir, self.unsaved, metrics, self.tracker.run_id))

    def report(self, metrics: dict, note: str = "") -> str:
        """The one line a finished run prints (with ``note``, a warning it must carry)."""
        return report_run(self.run_name, metrics, self.output_dir, self.tracker, note=note)


__all__ = ["TrackedRun", "dataset_input", "git_commit", "make_tracker", "run_tags"]
