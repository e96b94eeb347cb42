"""A run's trained model on disk (``model.pt`` in the output folder, and an MLflow artifact), and
its reconstruction for ``gpdlm predict`` and ``gpdlm eval`` (issue 22).

What is saved: every parameter and buffer of the method's modules (model, likelihood, objective
modules: q(u), inducing inputs, kernels, networks, feature maps, frequencies, RKHS weights), the
composed config, the dataset fingerprint, the standardisation statistics, the column names, the
family's name, and the versions of gpdlm, torch, gpytorch and linear_operator. Only tensors,
strings, numbers and lists are written, and ``load`` reads with ``torch.load(weights_only=True)``:
nothing is unpickled but tensors and plain containers.

How a model comes back: the family's builder runs again on the run's config and its data (verified
by the fingerprint), and the saved state is copied over the fresh modules; then the method's
``finalize`` (square-loss DLM's predictive noise) runs as it did after training. Every family is
rebuilt from the data: the collapsed models (SGPR, FITC), the exact GP, the RKHS closed form, the
gamma family's k-means cells and the recurrent GPs' training embeddings all need the training rows
to predict (the family declares ``PREDICTS_FROM_TRAINING_DATA``), and the others are rebuilt the same way for one code path.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..exceptions import GpdlmError
from ..files import ChecksumMismatch, sidecar, verify_sha256, write_verified
from ..methods import declaration
from ..tracking.identity import config_hash
from ..training.reuse import loadmodule_state, module_state

MODEL_FILE = "model.pt"
FORMAT = 1


class ModelFileError(GpdlmError):
    """A run without a usable saved model (missing, corrupted, or from an incompatible version)."""


def _versions() -> dict[str, str]:
    import gpytorch
    import linear_operator

    from .. import __version__

    return {
        "gpdlm": __version__,
        "torch": torch.__version__,
        "gpytorch": gpytorch.__version__,
        "linear_operator": linear_operator.__version__,
        "format": str(FORMAT),
    }


def save_model(path: str | os.PathLike, cfg, method, splits, target_names) -> str:
    """Write ``path`` (atomically: a temporary file renamed into place) with its SHA-256 in the
    sidecar ``model.pt.sha256`` (``files.write_verified``); returns the digest."""
    import numpy as np
    from omegaconf import OmegaConf

    def floats(a):
        return [float(v) for v in np.atleast_1d(np.asarray(a, dtype=float))]

    meta = {
        "config": OmegaConf.to_yaml(cfg, resolve=True),
        "model": str(cfg.model.name),
        "fingerprint": splits.fingerprint,
        "task": splits.task,
        "feature_names": [str(n) for n in splits.feature_names],
        "target_names": [str(n) for n in target_names],
        "x_mean": floats(splits.x_mean),
        "x_std": floats(splits.x_std),
        "y_mean": floats(splits.y_mean),
        "y_std": floats(splits.y_std),
        "config_hash": config_hash(cfg),  # which run the model belongs to (gpdlm eval checks it)
        "needs_training_data": bool(declaration(str(cfg.model.name), "PREDICTS_FROM_TRAINING_DATA")),
        "threads": torch.get_num_threads(),  # CPU sums depend on it: eval uses the same count to reproduce bit for bit
        "versions": _versions(),
    }
    blob = {"format": FORMAT, "meta": json.dumps(meta), "state": module_state(method.modules)}
    path = Path(path)
    buf = io.BytesIO()
    torch.save(blob, buf)
    return write_verified(path, buf.getvalue())


def read_model_file(path: str | os.PathLike) -> tuple[dict, dict]:
    """(meta, state) of a saved model; one-line ``ModelFileError`` when it cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(
            f"{path} does not exist: the run saved no model (runs made before gpdlm saved models, "
            f"or a run that did not finish)"
        )
    try:
        verify_sha256(path)
    except ChecksumMismatch as e:
        raise ModelFileError(f"{e}; retrain the run, or restore the file that {sidecar(path).name} describes") from None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        meta, state = json.loads(blob["meta"]), blob["state"]
    except Exception as e:
        raise ModelFileError(
            f"{path} is not a readable gpdlm model file ({type(e).__name__}): truncated or corrupted; retrain the run"
        ) from None
    if str(blob.get("format")) != str(FORMAT):
        raise ModelFileError(
            f"{path} was saved in model format {blob.get('format')}, this gpdlm reads format {FORMAT}; "
            f"use gpdlm {meta.get('versions', {}).get('gpdlm', '?')} or retrain"
        )
    return meta, state


@dataclass
class LoadedRun:
    """A rebuilt run: its config, data, method (with the trained state) and saved metadata."""

    cfg: object
    table: object
    splits: object
    data: object
    method: object
    meta: dict


def load_run(run_dir: str | os.PathLike, *, device: str | None = None) -> LoadedRun:
    """Rebuild the run saved in ``run_dir`` (see the module docstring)."""
    from omegaconf import OmegaConf

    from ..prepare import prepare

    meta, state = read_model_file(Path(run_dir) / MODEL_FILE)
    from .lifecycle import canonical_run_config

    cfg = canonical_run_config(OmegaConf.create(meta["config"]))  # a model saved before config-hash version 3
    if device is not None:
        cfg.device = device

    def same_threads(cfg):
        if meta.get("threads"):
            torch.set_num_threads(int(meta["threads"]))
        return cfg

    def same_data(table, splits):
        if splits.fingerprint != meta["fingerprint"]:
            raise ModelFileError(
                f"the data of dataset={cfg.dataset.name} changed since the run was trained (fingerprint "
                f"{splits.fingerprint} != {meta['fingerprint']}); the saved model cannot be rebuilt on it"
            )

    p = prepare(cfg, adjust=same_threads, check_data=same_data)
    table, splits, data, method = p.table, p.splits, p.data, p.method
    try:
        loadmodule_state(method.modules, state)
    except KeyError as e:
        raise ModelFileError(
            f"{run_dir}/{MODEL_FILE} does not match model={cfg.model.name} as this gpdlm builds it "
            f"(no saved tensor for {e.args[0]}): saved by gpdlm {meta['versions'].get('gpdlm')}; retrain"
        ) from None
    if method.finalize:
        method.finalize(data.x_train, data.y_train)
    return LoadedRun(cfg, table, splits, data, method, meta)


__all__ = ["MODEL_FILE", "LoadedRun", "ModelFileError", "load_run", "read_model_file", "save_model"]
