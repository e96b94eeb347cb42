"""A job of a sweep run again continues its stopped run from that run's checkpoint (``sweep.skip_finished``).

A sweep run again (``gpdlm train -m ... sweep.skip_finished=true``, every ``gpdlm reproduce``) gets a new
timestamped folder, so a job's own folder never holds the checkpoint of the job interrupted last time.
``find_stopped`` looks in the tracking store instead: the ``gpdlm train`` runs with one of the job's
config hashes (``tracking.identity.config_hashes``) that did not finish -- KILLED, FAILED, or RUNNING with
its process gone (``tracking.liveness``; a live one is left alone) -- not yet continued (no tag
``gpdlm.resumed_as``), whose recorded output folder (``gpdlm.output_dir``) holds a ``checkpoint.pt`` and
is not locked by a live process (``files.folder_lock``). Each checkpoint is verified as ``gpdlm resume``
verifies it (its SHA-256, ``read_checkpoint(strict=True)``, and its config hash); one that fails is
not used (one warning line). Of the others the one furthest along is continued (the newest run among
equals; usually the newest run is the furthest, but a job restarted from scratch after an interruption
and interrupted again has the older, further checkpoint); with none the job trains afresh.

The job then continues exactly as ``gpdlm resume`` continues a run (``run.train``): a new MLflow run tagged
``gpdlm.resumed_from`` with the stopped run's learning curves logged first, the stopped run tagged
``gpdlm.resumed_as`` (an orphaned RUNNING one is closed KILLED first, as ``gpdlm resume`` does). Once the
new run exists the checkpoint *moves* into the job's folder (``Stopped.take_over``; the stopped folder's
``gpdlm.log`` says where it went), so it is continued once, and a second interruption leaves it where
the next rerun finds it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..files import FolderBusy, folder_lock, sha256_file, sidecar, write_verified
from ..tracking.liveness import close_orphan, process_state
from ..training.checkpoint import FILE, CheckpointError, checkpoint_step, read_checkpoint
from .artifacts import append_log
from .naming import shown_path

RESUMED_AS = "gpdlm.resumed_as"
MOVED = "checkpoint moved to "  # the stopped folder's gpdlm.log: where its checkpoint went (``moved_to``)
CLOSED_BY = "a sweep run again (sweep.skip_finished)"


@dataclass
class Stopped:
    """The stopped run a job continues: its id, its folder, its checkpoint (``state``, read and verified),
    the checkpoint's SHA-256 when it was read, and the iteration it was written at (``step``)."""

    run_id: str
    folder: Path
    state: dict
    digest: str
    step: int

    def line(self, folder: str) -> str:
        return f"resuming run {self.run_id[:8]} from its checkpoint at step {self.step} ({folder})"

    def take_over(self, output_dir: Path, tracker) -> None:
        """Once the new run exists: the line in the job's log and on stderr, the checkpoint moved into
        ``output_dir`` (kept where it is when its folder is busy, it changed since it was read, or it cannot
        be written here), the stopped folder's log saying where it went, and ``gpdlm.resumed_as``."""
        new_id = str(getattr(tracker, "run_id", "") or "")
        print(f"gpdlm: {self.line(shown_path(self.folder))}", file=sys.stderr, flush=True)
        append_log(output_dir, self.line(str(self.folder.resolve())), level="INFO")
        if self._move(output_dir):
            append_log(
                self.folder,
                f"{MOVED}{output_dir.resolve()}: this run continues there as run {new_id or '(untracked)'}",
                level="INFO",
            )
        if new_id:
            tracker.tag_run(self.run_id, {RESUMED_AS: new_id})

    def _move(self, output_dir: Path) -> bool:
        src = self.folder / FILE
        try:
            with folder_lock(self.folder):
                if not src.is_file() or sha256_file(src) != self.digest:
                    return False  # taken or rewritten by another process meanwhile: left as it is
                write_verified(output_dir / FILE, src.read_bytes())
                src.unlink()
                sidecar(src).unlink(missing_ok=True)
                return True
        except (FolderBusy, OSError):  # the run goes on from the state it read; the old file stays
            return False


def find_stopped(tracker, hashes: tuple[str, ...], output_dir: Path) -> Stopped | None:
    """The stopped run with one of the config ``hashes`` whose folder (not ``output_dir``) holds the
    checkpoint furthest along (see the module docstring; newest first among equals: a run restarted from
    scratch after an interruption does not hide the older run's further checkpoint); None when there is
    none. A checkpoint that fails its checks is passed over with one warning line (stderr and
    ``output_dir``'s log) saying whether the job trains afresh or which run it resumes instead."""
    here = Path(output_dir).resolve()
    best, best_run, bad = None, None, []
    for run in tracker.stopped_runs("gpdlm.config_hash", hashes):
        tags = run.data.tags
        folder = Path(tags.get("gpdlm.output_dir") or ".")
        if RESUMED_AS in tags or not tags.get("gpdlm.output_dir") or folder.resolve() == here:
            continue
        if not (folder / FILE).is_file():
            continue
        if run.info.status == "RUNNING" and process_state(tags) != "gone":
            continue  # alive, or on another host: not ours to take
        found = _read(run.info.run_id, folder, hashes)
        if isinstance(found, str):
            bad.append((run.info.run_id, found))
        elif found is not None and (best is None or found.step > best.step):
            best, best_run = found, run
    then = "training afresh" if best is None else f"resuming run {best.run_id[:8]} instead"
    for run_id, why in bad:
        note = f"not resuming the stopped run {run_id[:8]}: {why}; {then}"
        print(f"gpdlm: warning: {note}", file=sys.stderr, flush=True)
        append_log(output_dir, note, level="WARNING")
    if best_run is not None and best_run.info.status == "RUNNING":
        close_orphan(tracker.client, best_run, CLOSED_BY)
    return best


def _read(run_id: str, folder: Path, hashes: tuple[str, ...]) -> Stopped | str | None:
    """``Stopped`` for a verified checkpoint of this configuration; why not (a str) for one that fails
    its checks; None when the folder is busy or the checkpoint has gone (look further)."""
    path = folder / FILE
    try:
        with folder_lock(folder):
            if not path.is_file():
                return None
            digest = sha256_file(path)
            state = read_checkpoint(path, strict=True)
    except FolderBusy:
        return None
    except CheckpointError as e:
        return str(e).split("; delete it")[0]
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or type(e).__name__})"
    if state is None:
        return f"{path} is not a readable gpdlm checkpoint"
    if state.get("config_hash") not in hashes:
        return f"{path} belongs to another configuration (config hash {state.get('config_hash')})"
    return Stopped(run_id, folder, state, digest, checkpoint_step(state))


def moved_to(folder: Path) -> str | None:
    """Where ``folder``'s checkpoint went when a sweep run again took it over (its ``gpdlm.log``'s last
    such line: the folder, and the run that continues there), else None (``gpdlm resume`` says so)."""
    try:
        lines = (Path(folder) / "gpdlm.log").read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line.split(MOVED, 1)[1] for line in lines if MOVED in line]
    return found[-1] if found else None


__all__ = ["MOVED", "RESUMED_AS", "Stopped", "find_stopped", "moved_to"]


def link_batched_continuation(tracker, hashes: tuple[str, ...]) -> str | None:
    """A job whose batched group (``sweep.batched``) continued from the group's checkpoints continues the
    job of its configuration that was stopped while it trained the group: that run -- the newest
    ``sweep.batched`` ``gpdlm train`` run with one of the config ``hashes`` that did not finish and was
    not continued yet (an orphaned RUNNING one closed KILLED first; a live one left alone) -- is tagged
    ``gpdlm.resumed_as`` with this job's run, and its id returned for ``gpdlm.resumed_from``; None when
    there is none (the group's other members never started a run). The group's checkpoints live in
    ``<sweep.cache_dir>/batched``, not in that run's folder, so ``find_stopped`` does not look for them."""
    new_id = str(getattr(tracker, "run_id", "") or "")
    for run in tracker.stopped_runs("gpdlm.config_hash", hashes):
        tags = run.data.tags
        if run.info.run_id == new_id or RESUMED_AS in tags or run.data.params.get("sweep.batched") != "True":
            continue
        if run.info.status == "RUNNING":
            if process_state(tags) != "gone":
                continue  # alive, or on another host: not ours to take
            close_orphan(tracker.client, run, CLOSED_BY)
        if new_id:
            tracker.tag_run(run.info.run_id, {RESUMED_AS: new_id})
        return run.info.run_id
    return None
