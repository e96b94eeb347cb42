"""Everything a run needs before it trains, in the one order that keeps gpdlm's promises.

``prepare(cfg)`` is the composition root's single entry point: it validates the config (the shared
keys, then the model's family, looked up once), loads and splits the data, runs the family's checks
that need the training-set size, builds the method (model, likelihood, stages) and the trainer
settings with the checks that need the method (``lr_scale`` groups, L-BFGS on a stochastic stage,
``keep_best`` metrics). Every check raises a one-line ``GpdlmError`` before any MLflow run exists.
``gpdlm train``, ``gpdlm bias``, ``select --refit`` (through ``run_train``), the saved-model
rebuild, the sweep planner, tests and benchmarks all call it instead of repeating the sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from . import build

if TYPE_CHECKING:
    from .data import DataSplits
    from .methods.base import Method
    from .training.loop import TrainerSettings


@dataclass
class Prepared:
    """A run ready to train: its (effective) config, family, data and method."""

    cfg: object  # the config the run trains with (after ``adjust``)
    family: ModuleType  # the model's family module (gpdlm_cli.methods.*)
    table: object  # data.Table: the loaded dataset
    splits: DataSplits  # data.DataSplits: row indices, standardisation, fingerprint
    data: build.Tensors  # the splits as tensors on the run's device and dtype
    method: Method  # methods.Method: model, likelihood, stages, evaluation
    settings: TrainerSettings  # training.TrainerSettings
    spec: object = None  # schema.RunSpec: the typed, validated specs of ``cfg`` (what the family received)

    @property
    def task(self) -> str:
        return self.splits.task

    @property
    def n_train(self) -> int:
        return self.splits.n_train

    @property
    def device(self) -> torch.device:
        return self.data.x_train.device


def prepare(
    cfg, *, adjust: Callable | None = None, check_data: Callable | None = None, load_data: Callable | None = None
) -> Prepared:
    """Validate ``cfg``, load its data, check sizes, build its method and trainer settings.

    ``adjust(cfg) -> cfg``: the command's own checks on the validated config (no data yet) and the
    config it runs with (``gpdlm bias`` sets ``model.variant=fixed``). ``check_data(table, splits)``:
    a check on the loaded data before the method is built (the saved-model rebuild compares the
    dataset fingerprint). ``load_data(cfg) -> (table, splits, tensors)``: instead of ``build.load_data``
    (the sweep planner's probes reuse data loaded for an earlier probe). torch's global seed is set to
    ``cfg.seed`` before the data is loaded: a backstop for library-internal randomness (gpdlm's own is
    explicit). Subnormal floats are flushed
    to zero from here on (``runtime.flush_denormals``; ``GPDLM_FLUSH_DENORMAL=0`` keeps them)."""
    from .runtime import flush_denormals

    flush_denormals()  # float32 kernels: subnormals would cost ~100x (runtime.flush_denormals)
    family = build.validate_config(cfg)
    if adjust is not None:
        cfg = adjust(cfg)
    torch.manual_seed(cfg.seed)
    table, splits, data = (load_data or build.load_data)(cfg)
    if check_data is not None:
        check_data(table, splits)
    spec = build.specs(cfg, family)  # built once: the family's checks and its build receive it
    build.check_sizes(cfg, splits.n_train, family, spec=spec)
    method = build.build_method(cfg, data, splits.task, family, spec=spec)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    return Prepared(cfg, family, table, splits, data, method, settings, spec)


__all__ = ["Prepared", "prepare"]
